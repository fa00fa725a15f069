import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra.numpy import arrays
from scipy.stats import ortho_group

from elsi_lib import matrix_entropy, set_entropy
from elsi_lib.bounds import shannon_upper_bound, shannon_upper_bound_dominant, top_eigenvalue_bracket
from elsi_lib.entropy import concat_layers, entropy_of_spectrum, layer_grams

from conftest import random_layers

finite = st.floats(-10, 10, allow_nan=False, allow_infinity=False)
matrices = arrays(np.float64, st.tuples(st.integers(2, 7), st.integers(2, 7)), elements=finite).filter(
    lambda X: np.sum(X * X) > 1e-6)


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


@pytest.mark.parametrize("bad, message", [
    (np.zeros((3, 4)), "zero matrix"),
    (np.array([[1.0, np.nan], [0.0, 1.0]]), "NaN or Inf"),
    (np.array([[1.0, np.inf], [0.0, 1.0]]), "NaN or Inf"),
    (np.ones(4), "2-D"),
])
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
@given(st.integers(2, 40), st.floats(0.5, 0.999), st.sampled_from([0.05, 0.3, 1.0, 5.0]),
       st.floats(0.0, 1.0), st.floats(0.0, 1.0), st.integers(0, 2**32 - 1))
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
