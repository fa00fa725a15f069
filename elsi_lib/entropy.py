"""Matrix entropy of layer representatives (paper Eq. 2 and 4-6), in float64.

A layer set's representative is the feature-axis concatenation X_L = [Z_a | Z_b | ...] (B x |L|d).
Its Gram matrix X_L X_L^T is the sum of the layers' B x B Gram matrices, so the spectrum of any set
comes from a tiny eigenproblem: that is the fast path `set_entropy` and the selection code use.
`matrix_entropy` is the direct definition (an SVD), the reference the fast path is checked against.
"""
from __future__ import annotations

from typing import Iterable

import numpy as np

NORMALIZATIONS = ("none", "frobenius")


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


def shannon_upper_bound(purity, n: int) -> np.ndarray:
    """The largest Shannon entropy (nats) of any distribution over n atoms with sum p_i^2 = purity.

    The maximum is attained at p = (x, y, ..., y), one large atom and n-1 equal ones (Harremoes and
    Topsoe, 2001; `tests/test_entropy.py` checks it against every two-valued distribution). For a
    Gram matrix G with at most n non-zero eigenvalues, purity = tr(G^2) / tr(G)^2 bounds S_1 from
    above without an eigensolve: the selection code uses it to skip sets that cannot win.
    """
    q = np.clip(np.asarray(purity, dtype=np.float64), 1.0 / n, 1.0)
    if n == 1:
        return np.zeros_like(q)
    x = (1.0 + np.sqrt(np.clip(1.0 - n + n * (n - 1) * q, 0.0, None))) / n  # the large atom, >= 1/n
    y = (1.0 - x) / (n - 1)
    return -x * np.log(x) - (n - 1) * y * np.log(np.where(y > 0, y, 1.0))


def top_eigenvalue_bracket(Gv, GGv, trace, frob2):
    """Bounds low <= lambda_max(G) <= high for PSD matrices G (each (B, B)) from one power step,
    without an eigensolve: Gv = G v and GGv = G G v for any vector v (n, B); trace = tr G and
    frob2 = tr G^2 = sum lambda_i^2 (n,).

    low is the Rayleigh quotient of w = G v. high is Kato-Temple's lambda_max <= r + rho^2 / (r - eta),
    with rho the residual of w and eta >= lambda_2 taken from min(tr G - r, sqrt(tr G^2 - r^2));
    it holds when r > eta, else high = +inf (no dominant eigenvalue to separate).
    """
    Gv, GGv = np.asarray(Gv, dtype=np.float64), np.asarray(GGv, dtype=np.float64)
    norm2 = (Gv * Gv).sum(axis=-1)  # ||w||^2
    safe = np.where(norm2 > 0, norm2, 1.0)
    low = np.where(norm2 > 0, (Gv * GGv).sum(axis=-1) / safe, 0.0)  # w^T G w / w^T w
    residual = (GGv - low[..., None] * Gv) / np.sqrt(safe)[..., None]  # (G - r) w / ||w||
    rho2 = (residual * residual).sum(axis=-1)
    eta = np.minimum(trace - low, np.sqrt(np.clip(frob2 - low * low, 0.0, None)))  # >= lambda_2
    separated = (low > eta) & (norm2 > 0)
    high = np.where(separated, low + rho2 / np.where(separated, low - eta, 1.0), np.inf)
    return low, high


def shannon_upper_bound_dominant(purity, low, high, n: int) -> np.ndarray:
    """An upper bound on the Shannon entropy of any distribution over n atoms with sum p_i^2 =
    purity whose largest atom lies in [low, high], low > 1/2 (+inf where low <= 1/2).

    H(p) = h(p_1) + (1 - p_1) H(rest), with h the binary entropy and rest = the other atoms
    renormalised, whose purity is Q(p_1) = (purity - p_1^2) / (1 - p_1)^2. On [low, high]:
    h(p_1) <= h(low) (h falls past 1/2), 1 - p_1 <= 1 - low, and H(rest) <= the purity bound at
    the smallest Q (Q rises up to p_1 = purity and falls after, so it is smallest at an end).
    Tighter than `shannon_upper_bound` when the spectrum is one large atom and an uneven rest.
    """
    q = np.asarray(purity, dtype=np.float64)
    low, high = np.asarray(low, dtype=np.float64), np.minimum(np.asarray(high, dtype=np.float64), 1.0)
    usable = (low > 0.5) & (low < 1.0) & (n > 1)
    a = np.where(usable, low, 0.75)
    b = np.maximum(np.minimum(high, np.sqrt(np.clip(q, 0.0, 1.0))), a)  # p_1^2 <= purity

    def rest_purity(x):  # 0 (the weakest: any rest) where nothing is left
        return np.where(x < 1.0, (q - x * x) / np.where(x < 1.0, (1.0 - x) ** 2, 1.0), 0.0)

    rest_q = np.minimum(rest_purity(a), rest_purity(b))
    h = -a * np.log(a) - (1.0 - a) * np.log1p(-a)
    bound = h + (1.0 - a) * shannon_upper_bound(rest_q, max(n - 1, 1))
    return np.where(usable, bound, np.inf)


def check_layers(layers: Iterable[int], n_layers: int) -> tuple[int, ...]:
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
