"""Exact power-of-two rescaling, so that entropies and CKA hold at any scale of Z.

Entropy (Eq. 4-6) and CKA (Eq. 7) are scale-invariant, but Grams square the scale of Z and their
inner products (CKA, `bounds`) raise it to the fourth power. Where a layer's largest |value| lies
outside `SAFE_PEAK`, it is multiplied by a power of two first: exact in floating point (no mantissa
bit changes), so results at any scale are the ones at scale 1, and ordinary inputs, inside the
window, are not touched at all.
"""

from __future__ import annotations

import numpy as np

# Peaks (max |Z_l|, max |X|) inside SAFE_PEAK are used as they are. A Gram's entries are at most
# peak^2 d; the Grams' inner products (CKA) and the bounds' G_a G_b v at most peak^4 (d B)^2, below
# 2^(4 x 128 + 96) < 2^1023 for d B up to 2^48; and peak^4 >= 2^-960 stays above 2^-969, where
# float64 still has its full 53 bits (no subnormals). LAPACK's eigensolver rescales by itself
# outside Gram peaks of 2^+-485, so inside SAFE_GRAM_PEAK it runs on the values as given too.
SAFE_PEAK = (2.0**-240, 2.0**128)
SAFE_GRAM_PEAK = (2.0**-480, 2.0**480)  # the same window for a Gram's largest entry
SAFE_PRODUCT_PEAK = (2.0**-960, 2.0**960)  # and for inner products of Grams
TINY_TRACE = 2.0**-969  # a Gram of smaller trace cannot hold float64 precision (subnormal entries)


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


def layer_peaks(Z: np.ndarray, layer_ids=None) -> np.ndarray:
    """max |Z_l| per layer of Z (N, B, d) -> (N,). NaN/Inf and all-zero layers are errors, the latter
    named by `layer_ids` (Z's own indices by default: pass them when Z is a subset of layers)."""
    peaks = np.maximum(Z.max(axis=(1, 2)), -Z.min(axis=(1, 2)))  # (N,); NaN where Z_l has a NaN
    if not np.all(np.isfinite(peaks)):
        raise ValueError("Z contains NaN or Inf")  # as `checks.as_float64` says it
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
        raise ValueError(
            f"layer(s) {ids[small].tolist()} of Z are more than 2^240 times smaller than its largest "
            f"(max |value| {peaks.min():.3g} against {peaks.max():.3g}): with normalize='none' their "
            f"Gram matrices cannot be summed in float64; use normalize='frobenius'"
        )
    return shifts
