"""Matrix entropy of layer representatives (paper Eq. 2 and 4-6), in float64.

A layer set's representative is the feature-axis concatenation X_L = [Z_a | Z_b | ...] (B x |L|d).
Its Gram matrix X_L X_L^T is the sum of the layers' B x B Gram matrices, so the spectrum of any set
comes from a tiny eigenproblem: that is the fast path `set_entropy` and the selection code use.
`matrix_entropy` is the direct definition (an SVD), the reference the fast path is checked against.
Upper bounds on S_1 that selection prunes with, without an eigensolve, are in `bounds`.

Every entropy is scale-invariant, so Z at any scale is first brought into float64's safe range by
an exact power-of-two rescale (`scale`, `scaled_layer_grams`); ordinary inputs are not touched.
Input checks are in `checks`.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from ..common.checks import as_float64, as_layer_stack, check_alpha, check_layers, check_normalize
from .scale import SAFE_GRAM_PEAK, TINY_TRACE, layer_peaks, peak_shift, power_of_two_shifts, unit_peak

GRAM_TOLERANCE = 1e-9  # asymmetry or a negative eigenvalue beyond this x the peak is no Gram (round-off is ~1e-15)
_NEAR_SHANNON = 0.25  # |alpha - 1| up to which `entropy_of_spectrum` uses the expm1 form


def entropy_of_spectrum(eigenvalues, alpha: float = 1.0, total=None) -> np.ndarray:
    """Renyi-alpha entropy (Eq. 5; alpha=1 is Shannon, Eq. 6; alpha=inf is -log p_max) of
    p_i = lambda_i / sum(lambda).

    eigenvalues: (..., k) non-negative spectrum of X X^T (= sigma_i^2, Eq. 4); total: (...)
    ||X||_F^2 when known exactly (the trace), else the sum; Shannon divides by it as given, the
    other alphas renormalize p to sum 1 (see `_renyi`). Round-off negatives count as 0. Natural
    log. Returns (...). Accurate to round-off for every alpha in (0, inf].
    """
    alpha = check_alpha(alpha)
    lam = np.clip(np.asarray(eigenvalues, dtype=np.float64), 0.0, None)
    total = lam.sum(axis=-1) if total is None else np.asarray(total, dtype=np.float64)
    if np.any(total <= 0):
        raise ValueError("entropy of a zero matrix is undefined")
    p = lam / total[..., None]  # (..., k)
    if alpha == 1.0:
        logp = np.log(np.where(p > 0, p, 1.0))
        return -(p * logp).sum(axis=-1)
    return _renyi(p, alpha)


def _renyi(p: np.ndarray, alpha: float) -> np.ndarray:
    """S_alpha = log(sum q^alpha) / (1 - alpha) (Eq. 5) of q = p / P, P = sum p (1 up to round-off),
    for alpha != 1; p (..., k) >= 0 -> (...). Only atoms p > 0 enter.

    Renormalizing matters near alpha = 1: a round-off error d in sum p would add d / (1 - alpha).
    Three forms, none of which cancels or overflows:
      alpha = inf:           S = log P - log p_max.
      |alpha - 1| <= 1/4:    with t = alpha - 1 and A = sum p expm1(t log p),
                             S = log P - log1p(A / P) / t. Every term of A has the sign of -t
                             (log p <= 0), so A keeps full relative precision as t -> 0 and S tends
                             to Shannon's -sum q log q, with no threshold (tested to |t| = 2^-53);
                             1 + A / P >= k^(-1/4) for k atoms keeps log1p accurate.
      otherwise:             log-sum-exp about the largest atom, r = log p - log p_max <= 0:
                             S = (alpha log(p_max / P) + log sum exp(alpha r)) / (1 - alpha), with
                             alpha / (1 - alpha) formed first: finite for every finite alpha.
    Against 60-digit arithmetic the error is below 2e-15 (relative) for alpha from 1e-300 to inf.
    """
    positive = p > 0
    logp = np.log(np.where(positive, p, 1.0))  # (..., k); 0 where p = 0
    total = np.where(positive, p, 0.0).sum(axis=-1)  # P, (...)
    log_total = np.log(total)
    log_top = np.where(positive, logp, -np.inf).max(axis=-1)  # log p_max, (...)
    if np.isinf(alpha):
        return log_total - log_top
    t = alpha - 1.0  # exact for alpha in [1/2, 2]
    if abs(t) <= _NEAR_SHANNON:
        shortfall = np.where(positive, p * np.expm1(t * logp), 0.0).sum(axis=-1)  # A, (...)
        return log_total - np.log1p(shortfall / total) / t
    with np.errstate(over="ignore"):  # alpha r -> -inf for alpha near float max: exp gives 0
        scaled = np.where(positive, alpha * (logp - log_top[..., None]), -np.inf)  # (..., k), max 0
    return alpha / (1.0 - alpha) * (log_top - log_total) + np.log(np.exp(scaled).sum(axis=-1)) / (1.0 - alpha)


def matrix_entropy(X, alpha: float = 1.0, *, center: bool = False, normalize_rows: bool = False) -> float:
    """Renyi-alpha matrix entropy of X (T, D), paper Eq. 4-6, from its singular values.

    p_i = sigma_i^2 / ||X||_F^2; S_alpha = log(sum p_i^alpha) / (1 - alpha), Shannon for alpha=1.
    The paper neither centers nor normalizes rows; both are options (center: subtract the column
    means; normalize_rows: scale each row to unit norm). X at any scale: where its largest |value|
    lies outside SAFE_PEAK it is multiplied by a power of two first (exact; S is scale-invariant).
    """
    X = as_float64(X)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D (T, D), got shape {X.shape}")
    alpha = check_alpha(alpha)
    if center:
        X = unit_peak(X)  # its column sums could overflow
        X = X - X.mean(axis=0, keepdims=True)
    if normalize_rows:
        X = np.ldexp(X, peak_shift(np.abs(X).max(axis=1))[:, None])  # each row on its own scale, so that
        norms = np.linalg.norm(X, axis=1, keepdims=True)  # its norm cannot overflow or vanish
        if np.any(norms == 0):
            raise ValueError("normalize_rows: X has an all-zero row")
        X = X / norms
    X = unit_peak(X)
    total = float(np.sum(X * X))
    if total == 0:
        raise ValueError("entropy of a zero matrix is undefined")
    sigma = np.linalg.svd(X, compute_uv=False)
    return float(entropy_of_spectrum(sigma**2, alpha, total))


def grams_of(Z: np.ndarray, normalize: str = "none") -> np.ndarray:
    """G_l = Z_l Z_l^T (N, B, B), or G_l / tr G_l for "frobenius", as computed (no checks)."""
    grams = Z @ Z.transpose(0, 2, 1)  # (N, B, d) @ (N, d, B) -> (N, B, B)
    if normalize == "frobenius":
        grams = grams / np.trace(grams, axis1=1, axis2=2)[:, None, None]
    return grams


def scaled_layer_grams(
    Z, normalize: str = "none", layer_ids=None, *, per_layer: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """(grams (N, B, B), shifts (N,)): the Grams of Z_l * 2^shift_l (`power_of_two_shifts`), which
    every scale-invariant quantity (entropy, CKA) is computed from. One shift for all layers when
    normalize="none" (their Grams may be summed), unless per_layer (for quantities of single layers
    or pairs: their Grams, CKA). On ordinary data the shifts are 0 and these are the Grams of Z
    itself, bit for bit. layer_ids name Z's layers in errors."""
    check_normalize(normalize)
    return _scaled_grams(
        as_layer_stack(Z, check_finite=False), normalize, layer_ids, per_layer
    )  # finite: from the peaks


def _scaled_grams(Z: np.ndarray, normalize: str, layer_ids, per_layer: bool) -> tuple[np.ndarray, np.ndarray]:
    """`scaled_layer_grams` of a Z already checked as a layer stack."""
    shifts = power_of_two_shifts(Z, normalize == "none" and not per_layer, layer_ids)
    if shifts.any():
        Z = np.ldexp(Z, shifts[:, None, None])
    return grams_of(Z, normalize), shifts


def layer_grams(Z, normalize: str = "none") -> np.ndarray:
    """Per-layer Gram matrices G_l = Z_l Z_l^T, shape (N, B, B), float64.

    normalize="frobenius" scales each Z_l to unit Frobenius norm first (G_l / tr G_l), so that no
    layer dominates a concatenation by its scale alone; "none" is the paper. Grams that do not fit
    float64 (they overflow, or underflow past its precision) are an error, never inf or 0; entropies
    and CKA of such a Z are fine (they use `scaled_layer_grams`).
    """
    grams, shifts = scaled_layer_grams(Z, normalize, per_layer=True)
    if normalize == "frobenius" or not shifts.any():
        return grams
    with np.errstate(over="ignore", under="ignore"):
        grams = np.ldexp(grams, -2 * shifts[:, None, None])  # back to the scale of Z_l: (2^-s_l)^2
    traces = np.trace(grams, axis1=1, axis2=2)  # (N,)
    if not np.all(np.isfinite(traces)):
        raise ValueError(
            "Z is too large: its Gram matrices overflow float64 (entropies and CKA, which do "
            "not depend on the scale, are computed from rescaled Grams: set_entropy, cka_matrix)"
        )
    if np.any(traces < TINY_TRACE):
        raise ValueError(
            "Z is too small: its Gram matrices underflow float64 (entropies and CKA, which do "
            "not depend on the scale, are computed from rescaled Grams: set_entropy, cka_matrix)"
        )
    return grams


def gram_entropy(grams, alpha: float = 1.0) -> np.ndarray:
    """Entropy (Eq. 4-6) of each Gram matrix in a stack (..., B, B) -> (...), via its eigenvalues.
    A Gram whose largest diagonal entry lies outside SAFE_GRAM_PEAK is multiplied by a power of two
    first (exact; the entropy is scale-invariant)."""
    alpha = check_alpha(alpha)
    grams = as_float64(grams, "grams")
    if grams.ndim < 2 or grams.shape[-1] != grams.shape[-2] or grams.shape[-1] < 1:
        raise ValueError(f"grams must be square matrices (..., B, B), got shape {grams.shape}")
    shifts = peak_shift(np.abs(np.diagonal(grams, axis1=-2, axis2=-1)).max(axis=-1), SAFE_GRAM_PEAK)  # (...)
    if np.any(shifts):
        grams = np.ldexp(grams, shifts[..., None, None])
    peak = np.abs(grams).max(axis=(-2, -1))  # (...)
    if np.any(np.abs(grams - np.swapaxes(grams, -1, -2)).max(axis=(-2, -1)) > GRAM_TOLERANCE * peak):
        raise ValueError("grams must be symmetric (a Gram matrix X X^T)")
    eigenvalues = np.linalg.eigvalsh(grams)  # (..., B)
    if np.any(eigenvalues[..., 0] < -GRAM_TOLERANCE * np.maximum(eigenvalues[..., -1], 0)):
        raise ValueError(
            f"grams must be positive semi-definite (a Gram matrix X X^T); an eigenvalue is {eigenvalues.min():.3g}"
        )
    return entropy_of_spectrum(eigenvalues, alpha, np.trace(grams, axis1=-2, axis2=-1))


def spectrum_entropy(grams: np.ndarray, alpha: float) -> np.ndarray:
    """`gram_entropy` of Grams known to be in range (from `scaled_layer_grams`), unchecked:
    (..., B, B) -> (...)."""
    eigenvalues = np.linalg.eigvalsh(grams)  # (..., B)
    return entropy_of_spectrum(eigenvalues, alpha, np.trace(grams, axis1=-2, axis2=-1))


def set_entropy(Z, layers: Iterable[int], alpha: float = 1.0, normalize: str = "none") -> float:
    """S_alpha of the concatenation [Z_a | Z_b | ...] over `layers` (paper Eq. 2 with Eq. 4-6).

    Computed exactly from the summed B x B Gram matrices; the order of `layers` does not matter.
    Z at any scale (`scaled_layer_grams`).
    """
    Z = as_layer_stack(Z)
    layers = check_layers(layers, Z.shape[0])
    alpha = check_alpha(alpha)
    grams, _ = _scaled_grams(Z[list(layers)], check_normalize(normalize), layers, per_layer=False)
    return float(spectrum_entropy(grams.sum(axis=0), alpha))


def concat_layers(Z, layers: Iterable[int], normalize: str = "none") -> np.ndarray:
    """The explicit concatenation X_L (B, |L| d), for reference computations. All-zero layers are an
    error, as in `set_entropy`."""
    check_normalize(normalize)
    Z = as_layer_stack(Z)
    layers = check_layers(layers, Z.shape[0])
    layer_peaks(Z[list(layers)], layer_ids=layers)
    if normalize == "frobenius":  # each layer at a unit peak first (exact), so that its norm cannot overflow
        parts = [unit_peak(Z[l]) for l in layers]
        return np.concatenate([part / np.linalg.norm(part) for part in parts], axis=1)
    return np.concatenate([Z[l] for l in layers], axis=1)
