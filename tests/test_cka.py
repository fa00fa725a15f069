import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st
from hypothesis.extra.numpy import arrays
from scipy.stats import ortho_group

from elsi_lib import (
    cka_matrix,
    conditional_cka_matrices,
    conditional_cka_matrix,
    find_boundaries,
    linear_cka,
    transition_scores,
)
from elsi_lib.selection.cka import centered_gram_products

from conftest import random_layers


def naive_cka(X, Y):
    """Feature-space form of Eq. 7: ||Yc^T Xc||_F^2 / (||Xc^T Xc||_F ||Yc^T Yc||_F)."""
    Xc, Yc = X - X.mean(0), Y - Y.mean(0)
    return np.linalg.norm(Yc.T @ Xc) ** 2 / (np.linalg.norm(Xc.T @ Xc) * np.linalg.norm(Yc.T @ Yc))


pairs = st.integers(3, 8).flatmap(
    lambda n: st.tuples(
        arrays(np.float64, (n, 5), elements=st.floats(-5, 5)), arrays(np.float64, (n, 4), elements=st.floats(-5, 5))
    )
)


def varied(X):
    return np.linalg.norm(X - X.mean(0)) > 1e-3


@settings(max_examples=60, deadline=None)
@given(pairs, st.floats(0.01, 100), st.integers(0, 1000))
def test_cka_properties(pair, scale, seed):
    X, Y = pair
    assume(varied(X) and varied(Y))
    assert linear_cka(X, X) == pytest.approx(1.0)
    c = linear_cka(X, Y)
    assert -1e-12 <= c <= 1 + 1e-12
    assert linear_cka(Y, X) == pytest.approx(c, abs=1e-12)
    assert c == pytest.approx(naive_cka(X, Y), abs=1e-9)
    Q = ortho_group.rvs(X.shape[1], random_state=seed)
    assert linear_cka(scale * X @ Q, Y) == pytest.approx(c, abs=1e-9)
    assert linear_cka(X, scale * Y) == pytest.approx(c, abs=1e-9)


def test_known_values():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(500, 10))
    assert linear_cka(X, X @ ortho_group.rvs(10, random_state=1)) == pytest.approx(1.0, abs=1e-12)
    assert linear_cka(X, rng.normal(size=(500, 10))) < 0.05  # independent: close to 0


def test_cka_matrix_matches_pairwise(Z):
    M = cka_matrix(Z)
    assert M.shape == (8, 8)
    assert np.allclose(np.diag(M), 1.0)
    assert np.allclose(M, M.T)
    for i in range(8):
        for j in range(8):
            assert M[i, j] == pytest.approx(naive_cka(Z[i], Z[j]), abs=1e-10)


@pytest.mark.parametrize("normalize", ["none", "frobenius"])
def test_conditional_cka_matches_explicit_concatenations(normalize):
    Z = random_layers(seed=9)
    scale = lambda l: np.linalg.norm(Z[l]) if normalize == "frobenius" else 1.0
    sets = [(2,), (0, 5), (1, 3, 6)]
    products = centered_gram_products(Z, normalize)
    batched = conditional_cka_matrices(products, sets)  # (3, N, N), one product for all sets
    for L, M_L in zip(sets, batched):
        np.testing.assert_allclose(M_L, conditional_cka_matrix(products, L), rtol=0, atol=1e-14)
        concat = [np.concatenate([Z[l] / scale(l) for l in sorted(set(L) | {i})], axis=1) for i in range(8)]
        for i in range(8):
            for j in range(8):
                assert M_L[i, j] == pytest.approx(naive_cka(concat[i], concat[j]), abs=1e-10)


def test_transition_scores():
    M = np.array([[1.0, 0.9, 0.1], [0.9, 1.0, 0.2], [0.1, 0.2, 1.0]])
    scores = transition_scores(M)
    assert scores.shape == (2,)
    assert scores[0] == pytest.approx(np.linalg.norm(M[1] - M[0]))
    assert scores[1] == pytest.approx(np.linalg.norm(M[2] - M[1]))
    with pytest.raises(ValueError, match="square"):
        transition_scores(np.ones((2, 3)))


def test_find_boundaries_on_block_structure():
    # three compartments: layers 0-3, 4-8, 9-11 -> boundaries after layers 3 and 8
    labels = np.array([0] * 4 + [1] * 5 + [2] * 3)
    M = np.where(labels[:, None] == labels[None, :], 0.95, 0.3)
    np.fill_diagonal(M, 1.0)
    scores = transition_scores(M)
    assert list(find_boundaries(scores)) == [3, 8]
    assert list(find_boundaries(scores, top_k=1)) in ([3], [8])
    assert list(find_boundaries(scores, height=10.0)) == []


def test_find_boundaries_edges_and_errors():
    scores = np.array([5.0, 1.0, 1.2, 1.0, 1.1])
    assert 0 in find_boundaries(scores)
    assert 0 not in find_boundaries(scores, include_edges=False)
    with pytest.raises(ValueError, match="1-D"):
        find_boundaries(np.ones((2, 2)))


def test_cka_bad_input():
    with pytest.raises(ValueError, match="same number of rows"):
        linear_cka(np.ones((3, 2)), np.ones((4, 2)))
    with pytest.raises(ValueError, match="zero variance"):
        linear_cka(np.ones((3, 2)), np.random.default_rng(0).normal(size=(3, 2)))
    with pytest.raises(ValueError, match="NaN or Inf"):
        cka_matrix(np.full((2, 3, 4), np.nan))


# ---------------------------------------------------------------- scale safety

SCALES = st.builds(lambda exponent, mantissa: mantissa * 10.0**exponent, st.integers(-200, 200), st.floats(1.0, 9.9))


@settings(max_examples=60, deadline=None)
@given(pairs, SCALES, SCALES)
def test_linear_cka_is_scale_invariant_over_float64(pair, scale_x, scale_y):
    X, Y = pair
    assume(varied(X) and varied(Y))
    for scale, A in ((scale_x, X), (scale_y, Y)):
        assume(np.all(np.abs(scale * A[A != 0]) >= np.finfo(np.float64).tiny))  # c X itself lost no bits
    c = linear_cka(X, Y)
    assert linear_cka(scale_x * X, Y) == pytest.approx(c, rel=1e-12, abs=1e-12)
    assert linear_cka(scale_x * X, scale_y * Y) == pytest.approx(c, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("normalize", ["none", "frobenius"])
@pytest.mark.parametrize("exponent", [-300, -200, -100, -40, 40, 100, 200, 300])
def test_cka_matrix_and_products_are_scale_safe(normalize, exponent):
    """CKA does not depend on the scale of Z; the Gram products P (which do) are exact or a clear
    error, never NaN or inf; conditional CKA from P at any scale is the same."""
    from elsi_lib.selection.scorer import SetScorer

    Z = random_layers(seed=9)
    scaled = 10.0**exponent * Z
    np.testing.assert_allclose(cka_matrix(scaled, normalize), cka_matrix(Z, normalize), rtol=1e-12)
    P = centered_gram_products(Z, normalize)
    sets = [(2,), (0, 5)]
    expected = conditional_cka_matrices(P, sets)
    np.testing.assert_allclose(SetScorer(scaled, normalize=normalize).conditional_cka(sets), expected, rtol=1e-12)
    np.testing.assert_allclose(
        SetScorer(scaled, normalize=normalize, backend="naive").conditional_cka(sets), expected, rtol=1e-10
    )
    try:
        scaled_P = centered_gram_products(scaled, normalize)
    except ValueError as error:
        assert normalize == "none" and ("too large" in str(error) or "too small" in str(error))
    else:
        np.testing.assert_allclose(scaled_P, P * (10.0 ** (4 * exponent) if normalize == "none" else 1.0), rtol=1e-12)
    for factor in (1e-290, 1e300):  # conditional CKA takes P at any scale
        np.testing.assert_allclose(conditional_cka_matrices(factor / P.max() * P, sets), expected, rtol=1e-12)


def test_zero_variance_and_zero_layers_are_named():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="Y has zero variance"):
        linear_cka(rng.normal(size=(3, 2)), np.ones((3, 2)))
    with pytest.raises(ValueError, match="X has zero variance"):
        linear_cka(np.zeros((3, 2)), rng.normal(size=(3, 2)))
    Z = random_layers()
    Z[6] = 0.0
    for call in (cka_matrix, centered_gram_products):
        with pytest.raises(ValueError, match=r"layer\(s\) \[6\] of Z are all zero"):
            call(Z)


@pytest.mark.parametrize("top_k", [-1, 1.5, True])
def test_find_boundaries_refuses_a_top_k_that_is_no_count(top_k):
    """top_k = -1 sliced as Python does would keep all but the last boundary: refused, as any non-count."""
    with pytest.raises(ValueError, match="top_k"):
        find_boundaries(np.array([0.0, 1.0, 0.0, 2.0, 0.0]), top_k=top_k)
    assert find_boundaries(np.array([0.0, 1.0, 0.0, 2.0, 0.0]), top_k=0).tolist() == []


@pytest.mark.parametrize(
    "conditioned_on, error",
    [([-1], ValueError), ([9], ValueError), ([1, 1], ValueError), ("12", TypeError), ([1.0], TypeError)],
)
def test_a_conditioning_set_outside_the_layers_is_refused(conditioned_on, error):
    """A negative id would condition on a layer counted from the end, one past the last an IndexError deep in
    numpy: both refused naming the layer, as every layer set is."""
    products = centered_gram_products(random_layers(8, 16, 6, seed=0))
    with pytest.raises(error, match="layer"):
        conditional_cka_matrix(products, conditioned_on)
    assert conditional_cka_matrix(products, []) == pytest.approx(cka_matrix(random_layers(8, 16, 6, seed=0)))


def test_conditional_transition_scores_need_square_matrices():
    from elsi_lib.selection.select import conditional_transition_scores

    with pytest.raises(ValueError, match="square"):
        conditional_transition_scores(np.ones((3, 4)))
    assert conditional_transition_scores(np.eye(3)).tolist() == pytest.approx([0.0, np.sqrt(2), np.sqrt(2)])
