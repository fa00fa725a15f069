"""Matrix entropy of layer representatives (paper Eq. 2 and 4-6), in float64.

A layer set's representative is the feature-axis concatenation X_L = [Z_a | Z_b | ...] (B x |L|d).
Its Gram matrix X_L X_L^T is the sum of the layers' B x B Gram matrices, so the spectrum of any set
comes from a tiny eigenproblem: that is the fast path `set_entropy` and the selection code use.
`matrix_entropy` is the direct definition (an SVD), the reference the fast path is checked against.
Upper bounds on S_1 that selection prunes with, without an eigensolve, are in `bounds`.

Scale: every entropy (and CKA) is scale-invariant, but Grams square the scale of Z and their inner
products (CKA, `bounds`) raise it to the fourth power. Where a layer's largest |value| lies outside
`SAFE_PEAK`, Z is multiplied by a power of two first (`scaled_layer_grams`): exact in floating point
(no mantissa bit changes), so entropies at any scale are the ones at scale 1, and ordinary inputs,
inside the window, are not touched at all.
"""
from __future__ import annotations

import numbers
from collections.abc import Iterable

import numpy as np

NORMALIZATIONS = ("none", "frobenius")
LayerSet = tuple[int, ...]  # sorted distinct layer indices, as `check_layers` returns them

# Peaks (max |Z_l|, max |X|) inside SAFE_PEAK are used as they are. A Gram's entries are at most
# peak^2 d; the Grams' inner products (CKA) and the bounds' G_a G_b v at most peak^4 (d B)^2, below
# 2^(4 x 128 + 96) < 2^1023 for d B up to 2^48; and peak^4 >= 2^-960 stays above 2^-969, where
# float64 still has its full 53 bits (no subnormals). LAPACK's eigensolver rescales by itself
# outside Gram peaks of 2^+-485, so inside SAFE_GRAM_PEAK it runs on the values as given too.
SAFE_PEAK = (2.0**-240, 2.0**128)
SAFE_GRAM_PEAK = (2.0**-480, 2.0**480)  # the same window for a Gram's largest entry
SAFE_PRODUCT_PEAK = (2.0**-960, 2.0**960)  # and for inner products of Grams
TINY_TRACE = 2.0**-969  # a Gram of smaller trace cannot hold float64 precision (subnormal entries)
_NEAR_SHANNON = 0.25  # |alpha - 1| up to which `entropy_of_spectrum` uses the expm1 form


def as_float64(X, name: str = "X", check_finite: bool = True) -> np.ndarray:
    """A float64 numpy array (no copy if it already is one) of a numpy array or torch tensor;
    non-finite values are an error unless check_finite=False (for callers that check later)."""
    if hasattr(X, "detach"):  # torch.Tensor, without importing torch
        X = X.detach().to("cpu").double().numpy()
    array = np.asarray(X, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):  # a finite array whose sum overflows: checked in full
        suspect = check_finite and not np.isfinite(array.sum())
    if suspect and not np.all(np.isfinite(array)):  # one pass when finite
        raise ValueError(f"{name} contains NaN or Inf")
    return array


def as_layer_stack(Z, check_finite: bool = True) -> np.ndarray:
    """Validate layer representatives Z of shape (N, B, d) and return them as float64."""
    Z = as_float64(Z, "Z", check_finite)
    if Z.ndim != 3 or min(Z.shape) < 1:
        raise ValueError(f"Z must have shape (N layers, B rows, d features), got {Z.shape}")
    return Z


def check_alpha(alpha) -> float:
    """alpha as a float in (0, inf]; bools, strings and other non-numbers are a TypeError."""
    if isinstance(alpha, (bool, np.bool_)) or not isinstance(alpha, numbers.Real):
        raise TypeError(f"alpha must be a real number > 0 (1 is Shannon, inf the min-entropy), got {alpha!r}")
    alpha = float(alpha)
    if not alpha > 0:  # NaN fails this too
        raise ValueError(f"alpha must be > 0 (1 is Shannon, inf the min-entropy), got {alpha}")
    return alpha


def peak_shift(peak, window=SAFE_PEAK) -> np.ndarray:
    """The power of two s with peak * 2^s in [1/2, 1) where peak lies outside `window`; 0 inside it
    (and for peak 0). `np.ldexp(x, s)` applies it exactly. peak (...) -> s (...) int."""
    peak = np.asarray(peak, dtype=np.float64)
    outside = (peak > 0) & ((peak < window[0]) | (peak > window[1]))
    return np.where(outside, -np.frexp(peak)[1], 0)


def _peak(X: np.ndarray) -> float:
    """max |X| in two passes without a temporary; NaN if X has a NaN."""
    return float(max(X.max(), -X.min()))


def unit_peak(X: np.ndarray, window=SAFE_PEAK) -> np.ndarray:
    """X times a power of two (exact) with its largest |value| in [1/2, 1) when it lies outside
    `window`; X itself otherwise."""
    shift = int(peak_shift(_peak(X), window))
    return np.ldexp(X, shift) if shift else X


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
        norms = np.linalg.norm(X, axis=1, keepdims=True)                # its norm cannot overflow or vanish
        if np.any(norms == 0):
            raise ValueError("normalize_rows: X has an all-zero row")
        X = X / norms
    X = unit_peak(X)
    total = float(np.sum(X * X))
    if total == 0:
        raise ValueError("entropy of a zero matrix is undefined")
    sigma = np.linalg.svd(X, compute_uv=False)
    return float(entropy_of_spectrum(sigma**2, alpha, total))


def check_normalize(normalize: str) -> str:
    if normalize not in NORMALIZATIONS:
        raise ValueError(f"normalize must be one of {NORMALIZATIONS}, got {normalize!r}")
    return normalize


def layer_peaks(Z: np.ndarray, layer_ids=None) -> np.ndarray:
    """max |Z_l| per layer of Z (N, B, d) -> (N,). NaN/Inf and all-zero layers are errors, the latter
    named by `layer_ids` (Z's own indices by default: pass them when Z is a subset of layers)."""
    peaks = np.maximum(Z.max(axis=(1, 2)), -Z.min(axis=(1, 2)))  # (N,); NaN where Z_l has a NaN
    if not np.all(np.isfinite(peaks)):
        as_layer_stack(Z)  # names NaN/Inf
    if np.any(peaks == 0):
        ids = np.arange(len(Z)) if layer_ids is None else np.asarray(list(layer_ids))
        raise ValueError(f"layer(s) {ids[peaks == 0].tolist()} of Z are all zero")
    return peaks


def power_of_two_shifts(Z: np.ndarray, common: bool = True, layer_ids=None) -> np.ndarray:
    """The exact rescale Z_l * 2^s_l that `scaled_layer_grams` applies, s (N,) int.

    s = 0 for every layer when every layer's peak (max |Z_l|) lies in SAFE_PEAK: ordinary data is
    used as it is. Otherwise, with common=True (layers whose Grams are summed: normalize="none"),
    one power of two for all layers, so that their ratios stay, bringing the largest peak into
    [1/2, 1); a layer then left below SAFE_PEAK is too small next to the largest to be summed with
    it in float64: an error. With common=False each layer outside SAFE_PEAK is brought into
    [1/2, 1) on its own. Also
    raises for NaN/Inf and all-zero layers (`layer_peaks`).
    """
    peaks = layer_peaks(Z, layer_ids)
    shifts = peak_shift(peaks)  # (N,)
    if not common or not shifts.any():
        return shifts
    shifts = np.full(len(peaks), -np.frexp(peaks.max())[1])
    small = np.ldexp(peaks, shifts) < SAFE_PEAK[0]
    if np.any(small):
        ids = np.arange(len(Z)) if layer_ids is None else np.asarray(list(layer_ids))
        raise ValueError(f"layer(s) {ids[small].tolist()} of Z are more than 2^240 times smaller than its largest "
                         f"(max |value| {peaks.min():.3g} against {peaks.max():.3g}): with normalize='none' their "
                         f"Gram matrices cannot be summed in float64; use normalize='frobenius'")
    return shifts


def grams_of(Z: np.ndarray, normalize: str = "none") -> np.ndarray:
    """G_l = Z_l Z_l^T (N, B, B), or G_l / tr G_l for "frobenius", as computed (no checks)."""
    grams = Z @ Z.transpose(0, 2, 1)  # (N, B, d) @ (N, d, B) -> (N, B, B)
    if normalize == "frobenius":
        grams = grams / np.trace(grams, axis1=1, axis2=2)[:, None, None]
    return grams


def scaled_layer_grams(Z, normalize: str = "none", layer_ids=None, *,
                       per_layer: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(grams (N, B, B), shifts (N,)): the Grams of Z_l * 2^shift_l (`power_of_two_shifts`), which
    every scale-invariant quantity (entropy, CKA) is computed from. One shift for all layers when
    normalize="none" (their Grams may be summed), unless per_layer (for quantities of single layers
    or pairs: their Grams, CKA). On ordinary data the shifts are 0 and these are the Grams of Z
    itself, bit for bit. layer_ids name Z's layers in errors."""
    check_normalize(normalize)
    Z = as_layer_stack(Z, check_finite=False)  # checked from the peaks
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
        raise ValueError("Z is too large: its Gram matrices overflow float64 (entropies and CKA, which do "
                         "not depend on the scale, are computed from rescaled Grams: set_entropy, cka_matrix)")
    if np.any(traces < TINY_TRACE):
        raise ValueError("Z is too small: its Gram matrices underflow float64 (entropies and CKA, which do "
                         "not depend on the scale, are computed from rescaled Grams: set_entropy, cka_matrix)")
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
    return spectrum_entropy(grams, alpha)


def spectrum_entropy(grams: np.ndarray, alpha: float) -> np.ndarray:
    """`gram_entropy` of Grams known to be in range (from `scaled_layer_grams`), unchecked:
    (..., B, B) -> (...)."""
    eigenvalues = np.linalg.eigvalsh(grams)  # (..., B)
    return entropy_of_spectrum(eigenvalues, alpha, np.trace(grams, axis1=-2, axis2=-1))


def is_integer(value) -> bool:
    """A Python or numpy integer, and not a bool (True is no layer count)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def check_layers(layers: Iterable[int], n_layers: int) -> LayerSet:
    """A sorted tuple of distinct layer indices in [0, n_layers); anything else is an error."""
    if isinstance(layers, (str, bytes)) or not isinstance(layers, Iterable):
        raise TypeError(f"a layer set must be an iterable of integer layer indices, got {layers!r}")
    layers = list(layers)
    if not layers:
        raise ValueError("a layer set must not be empty")
    for layer in layers:
        if not is_integer(layer):
            raise TypeError(f"layer indices must be integers, got {layer!r}")
        if not 0 <= layer < n_layers:
            raise ValueError(f"layer {layer} is out of range for {n_layers} layers (0..{n_layers - 1})")
    if len(set(layers)) != len(layers):
        raise ValueError(f"layer set {layers} repeats a layer")
    return tuple(sorted(int(l) for l in layers))


def set_entropy(Z, layers: Iterable[int], alpha: float = 1.0, normalize: str = "none") -> float:
    """S_alpha of the concatenation [Z_a | Z_b | ...] over `layers` (paper Eq. 2 with Eq. 4-6).

    Computed exactly from the summed B x B Gram matrices; the order of `layers` does not matter.
    Z at any scale (`scaled_layer_grams`).
    """
    Z = as_layer_stack(Z)
    layers = check_layers(layers, Z.shape[0])
    alpha = check_alpha(alpha)
    grams, _ = scaled_layer_grams(Z[list(layers)], normalize, layer_ids=layers)
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
