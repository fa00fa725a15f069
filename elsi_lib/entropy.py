"""Matrix entropy of layer representatives (paper Eq. 2 and 4-6), in float64.

A layer set's representative is the feature-axis concatenation X_L = [Z_a | Z_b | ...] (B x |L|d).
Its Gram matrix X_L X_L^T is the sum of the layers' B x B Gram matrices, so the spectrum of any set
comes from a tiny eigenproblem: that is the fast path `set_entropy` and the selection code use.
`matrix_entropy` is the direct definition (an SVD), the reference the fast path is checked against.
Upper bounds on S_1 that selection prunes with, without an eigensolve, are in `bounds`.
"""
from __future__ import annotations

from typing import Iterable

import numpy as np

NORMALIZATIONS = ("none", "frobenius")
LayerSet = tuple[int, ...]  # sorted distinct layer indices, as `check_layers` returns them


def as_float64(X, name: str = "X", check_finite: bool = True) -> np.ndarray:
    """A float64 numpy array (no copy if it already is one) of a numpy array or torch tensor;
    non-finite values are an error unless check_finite=False (for callers that check later)."""
    if hasattr(X, "detach"):  # torch.Tensor, without importing torch
        X = X.detach().to("cpu").double().numpy()
    array = np.asarray(X, dtype=np.float64)
    if check_finite and not np.isfinite(array.sum()) and not np.all(np.isfinite(array)):  # one pass when finite
        raise ValueError(f"{name} contains NaN or Inf")
    return array


def as_layer_stack(Z, check_finite: bool = True) -> np.ndarray:
    """Validate layer representatives Z of shape (N, B, d) and return them as float64."""
    Z = as_float64(Z, "Z", check_finite)
    if Z.ndim != 3 or min(Z.shape) < 1:
        raise ValueError(f"Z must have shape (N layers, B rows, d features), got {Z.shape}")
    return Z


def check_alpha(alpha: float) -> float:
    alpha = float(alpha)
    if not alpha > 0:
        raise ValueError(f"alpha must be > 0 (1 is Shannon), got {alpha}")
    return alpha


def entropy_of_spectrum(eigenvalues, alpha: float = 1.0, total=None) -> np.ndarray:
    """Renyi-alpha entropy (Eq. 5; alpha=1 is Shannon, Eq. 6) of p_i = lambda_i / sum(lambda).

    eigenvalues: (..., k) non-negative spectrum of X X^T (= sigma_i^2, Eq. 4); total: (...)
    ||X||_F^2 when known exactly (the trace), else the sum. Round-off negatives count as 0.
    Natural log. Returns (...).
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
    if np.isinf(alpha):
        return -np.log(p.max(axis=-1))
    return np.log((p ** alpha).sum(axis=-1)) / (1.0 - alpha)


def matrix_entropy(X, alpha: float = 1.0, *, center: bool = False, normalize_rows: bool = False) -> float:
    """Renyi-alpha matrix entropy of X (T, D), paper Eq. 4-6, from its singular values.

    p_i = sigma_i^2 / ||X||_F^2; S_alpha = log(sum p_i^alpha) / (1 - alpha), Shannon for alpha=1.
    The paper neither centers nor normalizes rows; both are options (center: subtract the column
    means; normalize_rows: scale each row to unit norm).
    """
    X = as_float64(X)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D (T, D), got shape {X.shape}")
    check_alpha(alpha)
    if center:
        X = X - X.mean(axis=0, keepdims=True)
    if normalize_rows:
        norms = np.linalg.norm(X, axis=1, keepdims=True)
        if np.any(norms == 0):
            raise ValueError("normalize_rows: X has an all-zero row")
        X = X / norms
    total = float(np.sum(X * X))
    if total == 0:
        raise ValueError("entropy of a zero matrix is undefined")
    sigma = np.linalg.svd(X, compute_uv=False)
    return float(entropy_of_spectrum(sigma**2, alpha, total))


def layer_grams(Z, normalize: str = "none") -> np.ndarray:
    """Per-layer Gram matrices G_l = Z_l Z_l^T, shape (N, B, B), float64.

    normalize="frobenius" scales each Z_l to unit Frobenius norm first (G_l / tr G_l), so that no
    layer dominates a concatenation by its scale alone; "none" is the paper.
    """
    if normalize not in NORMALIZATIONS:
        raise ValueError(f"normalize must be one of {NORMALIZATIONS}, got {normalize!r}")
    Z = as_layer_stack(Z, check_finite=False)  # checked below, from the traces: saves a pass over Z
    with np.errstate(invalid="ignore", over="ignore"):  # NaN/Inf/overflow: raised just below
        grams = Z @ Z.transpose(0, 2, 1)  # (N, B, d) @ (N, d, B) -> (N, B, B)
    traces = np.trace(grams, axis1=1, axis2=2)  # (N,) sums of squares: finite iff Z is (and fits float64)
    if not np.all(np.isfinite(traces)):
        as_layer_stack(Z)  # names NaN/Inf
        raise ValueError("Z is too large: its squared norms overflow float64")
    if np.any(traces == 0):
        raise ValueError(f"layer(s) {np.flatnonzero(traces == 0).tolist()} of Z are all zero")
    if normalize == "frobenius":
        grams = grams / traces[:, None, None]
    return grams


def gram_entropy(grams, alpha: float = 1.0) -> np.ndarray:
    """Entropy of each Gram matrix in a stack (..., B, B) -> (...), via its eigenvalues."""
    grams = np.asarray(grams, dtype=np.float64)
    eigenvalues = np.linalg.eigvalsh(grams)  # (..., B)
    return entropy_of_spectrum(eigenvalues, alpha, np.trace(grams, axis1=-2, axis2=-1))


def check_layers(layers: Iterable[int], n_layers: int) -> LayerSet:
    """A sorted tuple of distinct layer indices in [0, n_layers); anything else is an error."""
    layers = list(layers)
    if not layers:
        raise ValueError("a layer set must not be empty")
    for layer in layers:
        if not isinstance(layer, (int, np.integer)) or isinstance(layer, bool):
            raise TypeError(f"layer indices must be integers, got {layer!r}")
        if not 0 <= layer < n_layers:
            raise ValueError(f"layer {layer} is out of range for {n_layers} layers (0..{n_layers - 1})")
    if len(set(layers)) != len(layers):
        raise ValueError(f"layer set {layers} repeats a layer")
    return tuple(sorted(int(l) for l in layers))


def set_entropy(Z, layers: Iterable[int], alpha: float = 1.0, normalize: str = "none") -> float:
    """S_alpha of the concatenation [Z_a | Z_b | ...] over `layers` (paper Eq. 2 with Eq. 4-6).

    Computed exactly from the summed B x B Gram matrices; the order of `layers` does not matter.
    """
    Z = as_layer_stack(Z)
    layers = check_layers(layers, Z.shape[0])
    grams = layer_grams(Z[list(layers)], normalize)
    return float(gram_entropy(grams.sum(axis=0), alpha))


def concat_layers(Z, layers: Iterable[int], normalize: str = "none") -> np.ndarray:
    """The explicit concatenation X_L (B, |L| d), for reference computations."""
    if normalize not in NORMALIZATIONS:
        raise ValueError(f"normalize must be one of {NORMALIZATIONS}, got {normalize!r}")
    Z = as_layer_stack(Z)
    layers = check_layers(layers, Z.shape[0])
    parts = [Z[l] / np.linalg.norm(Z[l]) if normalize == "frobenius" else Z[l] for l in layers]
    return np.concatenate(parts, axis=1)
