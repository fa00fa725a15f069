"""Linear CKA between layers, transition scores and compartment boundaries (paper Eq. 7-8).

Everything works on centered B x B Gram matrices K_c = H Z Z^T H (H the centering matrix), so the
CKA of any two layer sets follows from the inner products of their layers' centered Grams.
CKA is scale-invariant and computed at any scale: inputs whose scale is extreme are multiplied by a
power of two first (exact; see `entropy.scaled_layer_grams`), ordinary inputs are used as they are.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy.signal import find_peaks

from ..common.checks import as_float64, as_layer_stack, check_layers, is_integer
from .entropy import scaled_layer_grams
from .scale import SAFE_PRODUCT_PEAK, TINY_TRACE, unit_peak


def center_gram(grams: np.ndarray) -> np.ndarray:
    """H G H for a stack of Gram matrices (..., B, B): the Gram of column-centered features."""
    grams = grams - grams.mean(axis=-1, keepdims=True)
    return grams - grams.mean(axis=-2, keepdims=True)


def _cka_from_products(products: np.ndarray, names=None) -> np.ndarray:
    """CKA matrices from inner products P_ij = <K_i, K_j>_F of centered Grams: P_ij / sqrt(P_ii P_jj).
    products: (..., n, n) -> (..., n, n), at any scale (a power of two brings an extreme one near 1).
    names: what to call representation i in the zero-variance error (default: its index)."""
    products = unit_peak(as_float64(products, "products"), SAFE_PRODUCT_PEAK)
    diag = np.diagonal(products, axis1=-2, axis2=-1)  # (..., n)
    if np.any(diag <= 0):
        bad = np.unique(np.nonzero(diag <= 0)[-1]).tolist()
        if names is not None:
            raise ValueError(
                f"CKA undefined: {' and '.join(names[i] for i in bad)} "
                f"{'has' if len(bad) == 1 else 'have'} zero variance across rows"
            )
        raise ValueError(f"CKA undefined: representation(s) {bad} have zero variance across rows")
    root = np.sqrt(diag)
    return products / (root[..., :, None] * root[..., None, :])


def linear_cka(X, Y) -> float:
    """Linear CKA (paper Eq. 7) of X (B, d1) and Y (B, d2) that share their B rows:
    <K_c, L_c>_F / (||K_c||_F ||L_c||_F) with K_c, L_c the centered Gram matrices. X and Y at any
    scale (each is brought near 1 by a power of two where its scale is extreme)."""
    X, Y = as_float64(X, "X"), as_float64(Y, "Y")
    if X.ndim != 2 or Y.ndim != 2 or X.shape[0] != Y.shape[0]:
        raise ValueError(f"X and Y must be 2-D with the same number of rows, got {X.shape} and {Y.shape}")
    X, Y = unit_peak(X), unit_peak(Y)
    grams = center_gram(np.stack([X @ X.T, Y @ Y.T]))  # (2, B, B)
    flat = grams.reshape(2, -1)
    return float(_cka_from_products(flat @ flat.T, names=("X", "Y"))[0, 1])


def _products(grams: np.ndarray) -> np.ndarray:
    """P (N, N), P_ij = <H G_i H, H G_j H>_F, from Grams (N, B, B)."""
    centered = center_gram(grams).reshape(len(grams), -1)  # (N, B*B)
    return centered @ centered.T


def centered_gram_products(Z, normalize: str = "none") -> np.ndarray:
    """P (N, N) with P_ij = <H G_i H, H G_j H>_F for the layers of Z (N, B, d).

    P has the scale of Z to the fourth power: where that does not fit float64 it is an error (never
    inf or 0); cka_matrix and the selection compute from rescaled Grams and work at any scale."""
    grams, shifts = scaled_layer_grams(Z, normalize, per_layer=True)
    products = _products(grams)
    if normalize == "frobenius" or not shifts.any():
        return products
    scaled_diagonal = np.diagonal(products).copy()
    with np.errstate(over="ignore", under="ignore"):  # back to the scale of Z: (2^-s_i)^2 (2^-s_j)^2
        products = np.ldexp(products, -2 * (shifts[:, None] + shifts[None, :]))
    diagonal = np.diagonal(products)
    if not np.all(np.isfinite(diagonal)):
        raise ValueError(
            "Z is too large: the products of its Gram matrices overflow float64 (cka_matrix and "
            "the selection rescale Z themselves)"
        )
    if np.any((scaled_diagonal > 0) & (diagonal < TINY_TRACE)):
        raise ValueError(
            "Z is too small: the products of its Gram matrices underflow float64 (cka_matrix and "
            "the selection rescale Z themselves)"
        )
    return products


def cka_matrix(Z, normalize: str = "none") -> np.ndarray:
    """Pairwise linear CKA between all layers, M (N, N), symmetric with unit diagonal; Z at any scale
    (each layer's own: CKA does not depend on either layer's scale)."""
    return _cka_from_products(_products(scaled_layer_grams(as_layer_stack(Z), normalize, per_layer=True)[0]))


def conditional_cka_matrix(products: np.ndarray, conditioned_on) -> np.ndarray:
    """M_L(i, j) = CKA(Z_{L+i}, Z_{L+j}) (paper Alg. 2) from P = centered_gram_products(Z).

    Z_{L+i} is the concatenation of the set L with layer i (just L when i is in L). Its centered
    Gram is the sum of its layers' centered Grams, so every inner product is a sum of entries of P.
    """
    return conditional_cka_matrices(products, [conditioned_on])[0]


def conditional_cka_matrices(products: np.ndarray, sets) -> np.ndarray:
    """`conditional_cka_matrix` for each of k layer sets at once: (k, N, N). P at any scale."""
    products = unit_peak(as_float64(products, "products"), SAFE_PRODUCT_PEAK)  # sums of P below stay finite
    if products.ndim != 2 or products.shape[0] != products.shape[1] or len(products) < 1:
        raise ValueError(f"products must be a square (N, N) matrix (centered_gram_products), got {products.shape}")
    n = len(products)
    membership = np.zeros((len(sets), 1, n))
    for row, layers in enumerate(sets):
        if isinstance(layers, (str, bytes)):
            raise TypeError(f"a conditioning set must be an iterable of integer layer indices, got {layers!r}")
        layers = list(layers)
        membership[row, 0, list(check_layers(layers, n) if layers else ())] = (
            1.0  # a negative id would count from the end
        )
    coefficients = membership + np.eye(n) * (1.0 - membership)  # (k, N, N); row i: the layers of L+i
    return _cka_from_products(coefficients @ products @ coefficients.transpose(0, 2, 1))


def transition_scores(M) -> np.ndarray:
    """delta_l = ||M[l+1, :] - M[l, :]||_2 for l = 0..N-2 (paper Eq. 8): (N, N) -> (N-1,)."""
    M = as_float64(M, "M")
    if M.ndim != 2 or M.shape[0] != M.shape[1] or M.shape[0] < 2:
        raise ValueError(f"M must be a square matrix with at least 2 rows, got shape {M.shape}")
    return np.linalg.norm(np.diff(M, axis=0), axis=1)


def find_boundaries(
    scores,
    *,
    relative_prominence: float = 0.2,
    prominence: float | None = None,
    height: float | None = None,
    distance: int = 1,
    top_k: int | None = None,
    include_edges: bool = True,
) -> np.ndarray:
    """Compartment boundaries: peaks of the transition scores (scipy.signal.find_peaks).

    A returned index l marks a boundary between layers l and l+1. A peak must stand out by
    `prominence` (default: relative_prominence x the score range), reach `height` if given, and be
    `distance` apart from its neighbours; `top_k` keeps the most prominent. With include_edges the
    first and last scores may be peaks too (scores are padded with their minimum).
    """
    scores = as_float64(scores, "scores")
    if scores.ndim != 1 or len(scores) < 1:
        raise ValueError(f"scores must be a non-empty 1-D array, got shape {scores.shape}")
    if not is_integer(distance) or distance < 1:
        raise ValueError(f"distance must be an integer >= 1, got {distance!r}")
    if top_k is not None and (not is_integer(top_k) or top_k < 0):
        raise ValueError(f"top_k must be None or an integer >= 0 (how many boundaries to keep), got {top_k!r}")
    if prominence is None:
        prominence = relative_prominence * float(np.ptp(scores))
    padded = np.pad(scores, 1, constant_values=scores.min()) if include_edges else scores
    peaks, props = find_peaks(
        padded, prominence=prominence if prominence > 0 else None, height=height, distance=distance
    )
    if include_edges:
        peaks = peaks - 1
    if top_k is not None and len(peaks) > top_k:
        order = (
            np.argsort(-props["prominences"], kind="stable")[:top_k]
            if "prominences" in props
            else np.argsort(-scores[peaks], kind="stable")[:top_k]
        )
        peaks = np.sort(peaks[order])
    return peaks


COMPARTMENT_PROMINENCE = 0.2  # a boundary's transition peak rises 0.2 x the score range above its surroundings


class Compartments(NamedTuple):
    """CKA view of one Z (N, B, d): M (N, N) (Eq. 7), delta (N-1,) (Eq. 8), boundaries (k,) ascending,
    a boundary l lying between layers l and l+1."""

    cka: np.ndarray
    scores: np.ndarray
    boundaries: np.ndarray


def compartments(Z, top_k: int | None = None) -> Compartments:
    """Compartments of Fig. 5-6: peaks of the transition scores of the CKA matrix, one detector for
    every notebook (`find_boundaries` at relative prominence COMPARTMENT_PROMINENCE, the first and
    last scores included). top_k keeps the most prominent boundaries."""
    M = cka_matrix(Z)
    delta = transition_scores(M)
    return Compartments(M, delta, find_boundaries(delta, relative_prominence=COMPARTMENT_PROMINENCE, top_k=top_k))
