import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st
from hypothesis.extra.numpy import arrays
from scipy.stats import ortho_group

from elsi_lib import matrix_entropy, set_entropy
from elsi_lib.selection.bounds import shannon_upper_bound, shannon_upper_bound_dominant, top_eigenvalue_bracket
from elsi_lib.selection.entropy import concat_layers, entropy_of_spectrum, layer_grams

from conftest import random_layers

finite = st.floats(-10, 10, allow_nan=False, allow_infinity=False)
matrices = arrays(np.float64, st.tuples(st.integers(2, 7), st.integers(2, 7)), elements=finite).filter(
    lambda X: np.sum(X * X) > 1e-6
)


def naive_entropy(X, alpha=1.0):
    """Deliberately plain reference: eigenvalues through numpy's general SVD, a Python loop."""
    sigma = np.linalg.svd(np.asarray(X, dtype=np.float64), compute_uv=False)
    p = [s * s / sum(t * t for t in sigma) for s in sigma]
    p = [q for q in p if q > 0]
    if alpha == 1:
        return -sum(q * np.log(q) for q in p)
    return np.log(sum(q**alpha for q in p)) / (1 - alpha)


@settings(max_examples=60, deadline=None)
@given(matrices)
def test_shannon_between_zero_and_log_rank(X):
    S = matrix_entropy(X)
    rank = np.linalg.matrix_rank(X)
    assert -1e-12 <= S <= np.log(rank) + 1e-9


@settings(max_examples=60, deadline=None)
@given(matrices, st.floats(0.1, 5.0), st.floats(0.1, 5.0))
def test_renyi_non_increasing_in_alpha(X, a, b):
    lo, hi = sorted((a, b))
    assert matrix_entropy(X, hi) <= matrix_entropy(X, lo) + 1e-9


@settings(max_examples=40, deadline=None)
@given(matrices, st.floats(0.01, 100.0), st.integers(0, 2**31 - 1), st.sampled_from([1.0, 0.5, 2.0]))
def test_invariant_to_rotation_and_scale(X, scale, seed, alpha):
    T, D = X.shape
    left = ortho_group.rvs(T, random_state=seed) if T > 1 else np.eye(1)
    right = ortho_group.rvs(D, random_state=seed + 1) if D > 1 else np.eye(1)
    assert matrix_entropy(scale * left @ X @ right, alpha) == pytest.approx(matrix_entropy(X, alpha), abs=1e-9)


@pytest.mark.parametrize("alpha", [0.5, 1.0, 2.0, 3.7])
def test_matches_plain_reference(alpha):
    X = np.random.default_rng(3).normal(size=(5, 9))
    assert matrix_entropy(X, alpha) == pytest.approx(naive_entropy(X, alpha), rel=1e-12)


@pytest.mark.parametrize("k", [1, 2, 5, 8])
@pytest.mark.parametrize("alpha", [1.0, 0.5, 2.0])
def test_k_equal_singular_values_give_log_k(k, alpha):
    U = ortho_group.rvs(10, random_state=k)[:, :k]
    V = ortho_group.rvs(12, random_state=k + 7)[:, :k]
    X = 3.0 * U @ V.T  # k singular values, all 3
    assert matrix_entropy(X, alpha) == pytest.approx(np.log(k), abs=1e-12)


def test_center_and_normalize_rows_options():
    X = np.random.default_rng(0).normal(size=(6, 4)) + 5.0
    centered = X - X.mean(axis=0)
    assert matrix_entropy(X, center=True) == pytest.approx(matrix_entropy(centered))
    unit = X / np.linalg.norm(X, axis=1, keepdims=True)
    assert matrix_entropy(X, normalize_rows=True) == pytest.approx(matrix_entropy(unit))
    assert matrix_entropy(X, center=True) > matrix_entropy(X)  # the offset made one direction dominate


@pytest.mark.parametrize("normalize", ["none", "frobenius"])
@pytest.mark.parametrize("alpha", [1.0, 2.0])
def test_set_entropy_equals_explicit_concatenation(normalize, alpha):
    Z = random_layers(seed=4)
    for layers in [(0,), (1, 3), (7, 2, 5), (0, 1, 2, 3, 4, 5, 6, 7)]:
        parts = [Z[l] / (np.linalg.norm(Z[l]) if normalize == "frobenius" else 1.0) for l in sorted(layers)]
        naive = naive_entropy(np.concatenate(parts, axis=1), alpha)
        assert set_entropy(Z, layers, alpha, normalize) == pytest.approx(naive, rel=1e-9)


def test_set_entropy_ignores_order_and_accepts_torch():
    import torch

    Z = random_layers(seed=5)
    assert set_entropy(Z, (4, 1, 6)) == set_entropy(Z, [1, 4, 6])
    assert set_entropy(torch.tensor(Z, dtype=torch.float32), (1, 4)) == pytest.approx(set_entropy(Z, (1, 4)), rel=1e-6)


def test_frobenius_normalization_removes_scale_dominance():
    rng = np.random.default_rng(0)
    small, big = rng.normal(size=(8, 16)), 1000.0 * rng.normal(size=(8, 16))
    Z = np.stack([small, big])
    # unnormalized, the big layer swamps the small one and the pair is no richer than `big`
    assert set_entropy(Z, (0, 1)) == pytest.approx(set_entropy(Z, (1,)), abs=1e-3)
    assert set_entropy(Z, (0, 1), normalize="frobenius") > set_entropy(Z, (1,)) + 0.05


@pytest.mark.parametrize(
    "bad, message",
    [
        (np.zeros((3, 4)), "zero matrix"),
        (np.array([[1.0, np.nan], [0.0, 1.0]]), "NaN or Inf"),
        (np.array([[1.0, np.inf], [0.0, 1.0]]), "NaN or Inf"),
        (np.ones(4), "2-D"),
    ],
)
def test_matrix_entropy_bad_input(bad, message):
    with pytest.raises(ValueError, match=message):
        matrix_entropy(bad)


@pytest.mark.parametrize("alpha", [0.0, -1.0])
def test_alpha_must_be_positive(alpha):
    with pytest.raises(ValueError, match="alpha"):
        matrix_entropy(np.eye(3), alpha)


def test_set_entropy_bad_input(Z):
    with pytest.raises(ValueError, match="out of range"):
        set_entropy(Z, (0, 8))
    with pytest.raises(ValueError, match="repeats"):
        set_entropy(Z, (1, 1))
    with pytest.raises(ValueError, match="empty"):
        set_entropy(Z, ())
    with pytest.raises(ValueError, match="shape"):
        set_entropy(Z[0], (0,))
    with pytest.raises(ValueError, match="normalize"):
        set_entropy(Z, (0,), normalize="l2")
    with pytest.raises(ValueError, match="all zero"):
        layer_grams(np.zeros((2, 3, 4)))
    with pytest.raises(TypeError, match="integers"):
        concat_layers(Z, (0.5,))
    with pytest.raises(TypeError, match="integers"):
        set_entropy(Z, (True, 2))
    with pytest.raises(TypeError, match="a layer set must be an iterable"):
        set_entropy(Z, 3)


def _two_valued_maximum(q: float, n: int) -> float:
    """Brute force: the largest entropy among distributions with at most two distinct non-zero
    values (k atoms of x, s-k of y, s <= n) and purity q. By the KKT conditions these include the
    maximiser."""
    best = 0.0
    for s in range(1, n + 1):
        for k in range(1, s):
            disc = k * k - k * s + k * s * q * (s - k)
            for sign in (1, -1):
                if disc < 0:
                    continue
                x = (k + sign * np.sqrt(disc)) / (k * s)
                y = (1 - k * x) / (s - k)
                if x > 0 and y > 0:
                    best = max(best, -k * x * np.log(x) - (s - k) * y * np.log(y))
        if abs(q - 1 / s) < 1e-12:
            best = max(best, np.log(s))
    return best


@pytest.mark.parametrize("n", [2, 5, 12])
def test_shannon_upper_bound_is_the_two_valued_maximum(n):
    for q in np.linspace(1 / n, 1, 17)[1:]:
        assert shannon_upper_bound(q, n) == pytest.approx(_two_valued_maximum(q, n), abs=1e-12)


@settings(max_examples=200, deadline=None)
@given(st.integers(2, 40), st.sampled_from([0.05, 0.3, 1.0, 5.0]), st.integers(0, 2**32 - 1))
def test_shannon_upper_bound_bounds_every_spectrum(n, concentration, seed):
    p = np.random.default_rng(seed).dirichlet(np.full(n, concentration))
    assert entropy_of_spectrum(p) <= shannon_upper_bound((p * p).sum(), n) + 1e-12
    assert shannon_upper_bound(1.0 / n, n) == pytest.approx(np.log(n))


@settings(max_examples=300, deadline=None)
@given(
    st.integers(2, 40),
    st.floats(0.5, 0.999),
    st.sampled_from([0.05, 0.3, 1.0, 5.0]),
    st.floats(0.0, 1.0),
    st.floats(0.0, 1.0),
    st.integers(0, 2**32 - 1),
)
def test_dominant_bound_holds_for_any_bracket_of_the_largest_atom(n, top, concentration, below, above, seed):
    """Whatever the rest of the spectrum, and however loosely [low, high] brackets the largest atom
    (low > 1/2), the bound stays above the entropy."""
    rest = np.random.default_rng(seed).dirichlet(np.full(n - 1, concentration)) * (1 - top)
    p = np.concatenate([[top], rest])
    low = 0.5 + 1e-9 + below * (top - 0.5 - 1e-9)  # in (1/2, top]
    high = top + above * (1 - top)  # in [top, 1]
    bound = shannon_upper_bound_dominant((p * p).sum(), low, high, n)
    assert entropy_of_spectrum(p) <= bound + 1e-12


def test_dominant_bound_is_tighter_when_the_rest_is_uneven_and_void_without_a_dominant_atom():
    p = np.array([0.9] + [0.05, 0.03, 0.01, 0.005, 0.005])
    q = (p * p).sum()
    exact, purity_bound = entropy_of_spectrum(p), shannon_upper_bound(q, 6)
    dominant = shannon_upper_bound_dominant(q, 0.9, 0.9, 6)
    assert exact <= dominant < purity_bound
    assert np.isinf(shannon_upper_bound_dominant(q, 0.5, 0.9, 6))  # low must exceed 1/2


@settings(max_examples=200, deadline=None)
@given(st.integers(2, 24), st.floats(0.0, 10.0), st.floats(0.0, 1.0), st.integers(0, 2**32 - 1))
def test_top_eigenvalue_bracket_contains_the_largest_eigenvalue(n, spike, noise, seed):
    """low <= lambda_max <= high for any PSD matrix and any vector; the bracket is tight when v is
    near the top eigenvector of a matrix with a dominant eigenvalue, and open (+inf) when nothing
    separates lambda_max from the rest."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2 * n)) + spike * rng.normal(size=(n, 1)) * rng.normal(size=(1, 2 * n))
    G = X @ X.T
    lam = np.linalg.eigvalsh(G)
    top_vector = np.linalg.eigh(G)[1][:, -1]
    v = top_vector + noise * rng.normal(size=n) / np.sqrt(n)
    low, high = top_eigenvalue_bracket(G @ v, G @ (G @ v), np.trace(G), (G * G).sum())
    assert low <= lam[-1] * (1 + 1e-12) and lam[-1] <= high * (1 + 1e-12)
    if np.isfinite(high) and noise == 0.0:
        assert high - low <= 1e-9 * lam[-1]


def test_top_eigenvalue_bracket_is_open_without_a_gap():
    G = np.eye(4)  # lambda_1 = lambda_2: no separation
    v = np.array([1.0, 0.5, 0.0, 0.0])
    low, high = top_eigenvalue_bracket(G @ v, G @ (G @ v), np.trace(G), (G * G).sum())
    assert low == pytest.approx(1.0) and np.isinf(high)


# ---------------------------------------------------------------- Renyi entropy at the edges of alpha


def exact_renyi(p, alpha) -> float:
    """Deliberately plain reference in 60-digit arithmetic (mpmath): S_alpha of p renormalized."""
    import mpmath

    with mpmath.workdps(60):
        q = [mpmath.mpf(float(x)) for x in p if x > 0]
        total = mpmath.fsum(q)
        q = [x / total for x in q]
        if alpha == 1:
            return float(-mpmath.fsum(x * mpmath.log(x) for x in q))
        if np.isinf(alpha):
            return float(-mpmath.log(max(q)))
        a = mpmath.mpf(float(alpha))
        return float(mpmath.log(mpmath.fsum(x**a for x in q)) / (1 - a))


EDGE_ALPHAS = [
    1e-300,
    1e-9,
    0.1,
    0.5,
    0.75,
    0.7500001,
    0.9,
    0.999,
    1 - 1e-9,
    1 - 1e-12,
    1 - 2.0**-53,
    1.0,
    1 + 2.0**-52,
    1 + 1e-12,
    1 + 1e-9,
    1.001,
    1.1,
    1.2499999,
    1.25,
    2.0,
    10.0,
    1e3,
    1e6,
    1e12,
    1e300,
    np.inf,
]


def random_spectrum(n, concentration, seed, zeros=0):
    """p (n,) from a Dirichlet, with `zeros` atoms set to 0 (a rank-deficient spectrum)."""
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(n, concentration))
    others = np.delete(np.arange(n), np.argmax(p))
    p[rng.permutation(others)[:zeros]] = 0.0  # the largest atom stays
    return p


spectra = st.builds(
    random_spectrum,
    st.integers(1, 40),
    st.sampled_from([0.05, 0.3, 1.0, 5.0]),
    st.integers(0, 2**32 - 1),
    st.integers(0, 5),
)


@settings(max_examples=60, deadline=None)
@given(spectra, st.sampled_from(EDGE_ALPHAS))
def test_renyi_matches_60_digit_reference_for_every_alpha(p, alpha):
    """Accurate to round-off over all of (0, inf]: near 0, within 2^-53 of 1, and up to inf."""
    assert entropy_of_spectrum(p, alpha) == pytest.approx(exact_renyi(p, alpha), rel=1e-12, abs=1e-13)


@settings(max_examples=60, deadline=None)
@given(spectra, st.floats(1e-3, 1e6))
def test_renyi_edges_monotone_finite_and_within_log_rank(p, scale):
    """For one spectrum (at any overall scale): S_alpha finite and non-increasing over EDGE_ALPHAS,
    0 <= S_alpha <= log(rank), and S_inf = -log p_max."""
    values = np.array([entropy_of_spectrum(scale * p, alpha) for alpha in EDGE_ALPHAS])
    rank = np.count_nonzero(p)
    assert np.all(np.isfinite(values))
    assert np.all(np.diff(values) <= 1e-12 * (1 + values[:-1]))
    assert np.all(values >= -1e-13) and np.all(values <= np.log(rank) + 1e-12)
    assert values[-1] == pytest.approx(-np.log(p.max() / p.sum()), rel=1e-13, abs=1e-15)
    gap = (abs(np.log(p.max() / p.sum())) + np.log(rank)) / (1e6 - 1)  # S_1e6 - S_inf <= this
    assert values[EDGE_ALPHAS.index(1e6)] - values[-1] <= gap + 1e-13


@settings(max_examples=60, deadline=None)
@given(
    st.builds(random_spectrum, st.integers(2, 40), st.sampled_from([0.3, 1.0, 5.0]), st.integers(0, 2**32 - 1)),
    st.floats(-15, -3),
)
def test_renyi_continuous_at_one(p, log_eps):
    """|S_{1 +- eps} - S_1| <= eps * (2 Var_p log p) + round-off, for eps from 1e-15 to 1e-3 (the first
    order term is eps Var/2)."""
    eps = 10.0**log_eps
    q = p[p > 0] / p.sum()
    spread = np.sum(q * np.log(q) ** 2) - np.sum(q * np.log(q)) ** 2  # Var_p(log p)
    shannon = entropy_of_spectrum(p, 1.0)
    for alpha in (1 - eps, 1 + eps):
        assert abs(entropy_of_spectrum(p, alpha) - shannon) <= 2 * eps * spread + 1e-13


def test_selection_near_alpha_one_is_selection_at_one():
    """alpha within 1e-13 of 1 scores (and so chooses) as Shannon does."""
    from elsi_lib import exhaustive

    Z = random_layers(n_layers=9, seed=6)
    at_one = exhaustive(Z, 3, keep=20)
    for alpha in (1 - 1e-13, 1 + 1e-13):
        near = exhaustive(Z, 3, alpha=alpha, keep=20)
        assert near.layers == at_one.layers
        assert [e.entropy for e in near.beams[3]] == pytest.approx([e.entropy for e in at_one.beams[3]], abs=1e-11)
    assert matrix_entropy(Z[0], 1 + 1e-14) == pytest.approx(matrix_entropy(Z[0]), abs=1e-12)


@pytest.mark.parametrize(
    "alpha, error",
    [
        (float("nan"), ValueError),
        (-np.inf, ValueError),
        (0, ValueError),
        (True, TypeError),
        (np.True_, TypeError),
        ("2", TypeError),
        (None, TypeError),
        ([2.0], TypeError),
    ],
)
def test_alpha_validation_is_clear(alpha, error):
    with pytest.raises(error, match="alpha"):
        matrix_entropy(np.eye(3), alpha)
    with pytest.raises(error, match="alpha"):
        entropy_of_spectrum(np.ones(3), alpha)


def test_alpha_accepts_numpy_numbers_and_inf():
    p = np.array([0.5, 0.25, 0.25])
    assert entropy_of_spectrum(p, np.float32(2.0)) == pytest.approx(-np.log(0.375))
    assert entropy_of_spectrum(p, np.int64(2)) == pytest.approx(-np.log(0.375))
    assert entropy_of_spectrum(p, np.inf) == pytest.approx(np.log(2))


# ---------------------------------------------------------------- scale safety

SCALES = st.builds(lambda exponent, mantissa: mantissa * 10.0**exponent, st.integers(-200, 200), st.floats(1.0, 9.9))


@settings(max_examples=60, deadline=None)
@given(
    matrices,
    SCALES,
    st.sampled_from([1.0, 0.5, 2.0, np.inf]),
    st.sampled_from([{}, {"center": True}, {"normalize_rows": True}]),
)
def test_matrix_entropy_is_scale_invariant_over_float64(X, scale, alpha, options):
    assume(np.all(np.abs(scale * X[X != 0]) >= np.finfo(np.float64).tiny))  # c X itself lost no bits
    assume(np.linalg.norm(X - X.mean(axis=0)) > 1e-6 * np.linalg.norm(X))  # centering leaves more than round-off
    try:
        expected = matrix_entropy(X, alpha, **options)
    except ValueError:  # centering or row-normalizing left nothing (a constant X, a zero row)
        return
    assert matrix_entropy(scale * X, alpha, **options) == pytest.approx(expected, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("normalize", ["none", "frobenius"])
@pytest.mark.parametrize("exponent", [-300, -200, -100, -40, 40, 100, 200, 300])
def test_set_entropy_and_grams_are_scale_safe(normalize, exponent):
    """Set entropies do not depend on the scale of Z; the Grams themselves (which do) are exact or a
    clear error, never NaN, inf, zero or an 'all zero' message."""
    from elsi_lib import gram_entropy, single_layer_entropies

    Z = random_layers(seed=4)
    scaled = 10.0**exponent * Z
    for layers in [(0,), (1, 3), (7, 2, 5)]:
        for alpha in (1.0, 2.0):
            assert set_entropy(scaled, layers, alpha, normalize) == pytest.approx(
                set_entropy(Z, layers, alpha, normalize), rel=1e-12
            )
    np.testing.assert_allclose(
        single_layer_entropies(scaled, 1.0, normalize), single_layer_entropies(Z, 1.0, normalize), rtol=1e-12
    )
    grams = layer_grams(Z, normalize)
    try:
        scaled_grams = layer_grams(scaled, normalize)
    except ValueError as error:
        assert normalize == "none" and ("too large" in str(error) or "too small" in str(error))
    else:
        np.testing.assert_allclose(
            scaled_grams, grams * (10.0 ** (2 * exponent) if normalize == "none" else 1.0), rtol=1e-12
        )
    for largest in (1e-300, 10.0**exponent, 1e308):  # Grams given at any scale, up to a trace past float max
        np.testing.assert_allclose(gram_entropy(largest * (grams / grams.max())), gram_entropy(grams), rtol=1e-12)


def test_layers_on_very_different_scales():
    """normalize='none' sums the layers' Grams, so their scales must fit float64 together: a clear
    error when they do not; 'frobenius' takes each layer on its own scale."""
    from elsi_lib import cka_matrix, elsi, single_layer_entropies

    original = random_layers(seed=2)
    Z = original.copy()
    Z[3] *= 1e-200
    with pytest.raises(ValueError, match=r"layer\(s\) \[3\] .* use normalize='frobenius'"):
        elsi(Z, 2)
    with pytest.raises(ValueError, match="frobenius"):
        set_entropy(Z, (2, 3))
    assert set_entropy(Z, (3,)) == pytest.approx(set_entropy(original, (3,)), rel=1e-12)
    np.testing.assert_allclose(single_layer_entropies(Z), single_layer_entropies(original), rtol=1e-12)
    np.testing.assert_allclose(cka_matrix(Z), cka_matrix(original), rtol=1e-12)  # pairs: each layer on its own scale
    with pytest.raises(ValueError, match="too small"):  # its Gram, 1e-400 x that of the original, is not a float64
        layer_grams(Z)
    Z[3] = 1e-100 * original[3]  # a Gram of 1e-200: exact, though no sum with the others would be
    np.testing.assert_allclose(layer_grams(Z)[3], 1e-200 * layer_grams(original)[3], rtol=1e-12)
    np.testing.assert_array_equal(layer_grams(Z)[:3], layer_grams(original)[:3])
    assert elsi(Z, 3, normalize="frobenius").layers == elsi(original, 3, normalize="frobenius").layers


def test_ordinary_inputs_are_not_rescaled():
    """On ordinary data the Grams are exactly Z_l Z_l^T and the entropies come from them unchanged."""
    from elsi_lib.selection.scorer import SetScorer

    Z = random_layers(seed=1)
    grams = Z @ Z.transpose(0, 2, 1)
    assert np.array_equal(layer_grams(Z), grams)
    assert np.array_equal(SetScorer(Z).grams, grams)
    assert np.array_equal(layer_grams(Z, "frobenius"), grams / np.trace(grams, axis1=1, axis2=2)[:, None, None])
    lam = np.linalg.eigvalsh(grams[[1, 4]].sum(axis=0))
    assert set_entropy(Z, (1, 4)) == float(entropy_of_spectrum(lam, 1.0, np.trace(grams[[1, 4]].sum(axis=0))))


# ---------------------------------------------------------------- all-zero layers are named by their id in Z


def test_zero_layer_error_names_the_layer_id():
    from elsi_lib import cka_matrix, elsi, elsi_c, exhaustive

    Z = random_layers()
    Z[5] = 0.0
    calls = [
        lambda: set_entropy(Z, [3, 5]),
        lambda: set_entropy(Z, [5, 6], normalize="frobenius"),
        lambda: concat_layers(Z, [3, 5], "frobenius"),
        lambda: concat_layers(Z, [3, 5]),
        lambda: elsi(Z, 2),
        lambda: elsi_c(Z, 2),
        lambda: exhaustive(Z, 2, backend="naive"),
        lambda: cka_matrix(Z),
    ]
    for call in calls:
        with pytest.raises(ValueError, match=r"layer\(s\) \[5\] of Z are all zero"):
            call()
    with pytest.raises(ValueError, match=r"layer\(s\) \[1\] of Z are all zero"):  # Z[4:] is a Z of its own
        layer_grams(Z[4:])


@pytest.mark.parametrize(
    "gram, what", [([[1.0, 2.0], [2.0, 1.0]], "positive semi-definite"), ([[1.0, 0.5], [0.0, 1.0]], "symmetric")]
)
def test_gram_entropy_refuses_what_is_no_gram(gram, what):
    """An indefinite matrix would give a negative entropy (its negative eigenvalue dropped), an asymmetric
    one the entropy of its lower triangle: both refused; a Gram of a low-rank X is one."""
    from elsi_lib.selection.entropy import gram_entropy

    with pytest.raises(ValueError, match=what):
        gram_entropy(np.array(gram))
    X = np.random.default_rng(0).normal(size=(8, 2))
    assert gram_entropy(X @ X.T) == pytest.approx(matrix_entropy(X))


def test_complex_layers_are_refused_not_cast():
    """Casting complex values to float drops the imaginary part with only a warning: refused, numpy's and
    torch's alike."""
    import torch

    Z = random_layers(4, 6, 5).astype(complex)
    with pytest.raises(TypeError, match="complex"):
        set_entropy(Z, [0, 1])
    with pytest.raises(TypeError, match="complex"):
        set_entropy(torch.from_numpy(Z), [0, 1])


def test_text_layers_are_refused_not_parsed():
    """numpy parses strings such as "1.0" as numbers without a word: layers given as text are refused."""
    with pytest.raises(TypeError, match="must be numbers"):
        set_entropy(random_layers(3, 4, 5).astype(str), [0, 1])


def test_masked_layers_are_refused_not_read_through_their_mask():
    """np.asarray drops a masked array's mask: the masked entries would enter the spectrum as data."""
    Z = random_layers(3, 4, 5)
    masked = np.ma.masked_array(Z, mask=np.zeros_like(Z, dtype=bool))
    assert set_entropy(masked, [0, 1]) == pytest.approx(set_entropy(Z, [0, 1]))  # no entry masked: the same
    masked[0, 0, 0] = np.ma.masked
    with pytest.raises(ValueError, match="masked entries"):
        set_entropy(masked, [0, 1])
