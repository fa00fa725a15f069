"""Upper bounds on the Shannon matrix entropy S_1 (paper Eq. 6) of a layer set, without an eigensolve.

The selection code uses them to skip sets that cannot win (`scorer.SetScorer.best`). A set's Gram
matrix G = sum_a G_a (B x B, the Gram of X_L) has p_i = lambda_i / tr G (Eq. 4). Two bounds follow
from per-layer quantities: the purity sum p_i^2 = tr(G^2) / tr(G)^2 (`shannon_upper_bound`), and a
bracket on the largest eigenvalue from one power step (`top_eigenvalue_bracket`,
`shannon_upper_bound_dominant`). `layer_bound_terms` computes the per-layer quantities once;
`set_upper_bounds` sums them over each set.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


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


# ---------------------------------------------------------------- bounds of layer sets


def _power_vector(G: np.ndarray, steps: int = 12) -> np.ndarray:
    """A unit vector near G's top eigenvector, by power iteration from a fixed start (a few
    matrix-vector products; an eigensolver costs more). Any vector gives valid bounds in
    `top_eigenvalue_bracket`; a better one gives tighter bounds."""
    v = np.random.default_rng(0).normal(size=(G.shape[0],))
    for _ in range(steps):
        v = G @ v
        v /= np.sqrt(v @ v) or 1.0
    return v


class BoundTerms(NamedTuple):
    """Per-layer quantities from which every set's bounds are sums (`layer_bound_terms`)."""

    inner: np.ndarray  # (N, N): <G_a, G_b>
    traces: np.ndarray  # (N,): tr G_a
    Gv: np.ndarray  # (N, B): G_a v
    GGv: np.ndarray  # (N, B, N): [a, :, b] = G_a G_b v


def layer_bound_terms(grams: np.ndarray) -> BoundTerms:
    """The `BoundTerms` of per-layer Grams (N, B, B), with v shared by all sets: close to the top
    eigenvector of the sum of all layers' Grams."""
    n_layers = grams.shape[0]
    flat = grams.reshape(n_layers, -1)  # (N, B*B)
    stacked = grams.reshape(-1, grams.shape[1])  # (N*B, B): one product, not N
    v = _power_vector(grams.sum(axis=0))  # (B,)
    Gv = (stacked @ v).reshape(n_layers, -1)  # (N, B): G_a v
    GGv = (stacked @ Gv.T).reshape(n_layers, -1, n_layers)  # (N, B, N): [a, :, b] = G_a G_b v
    return BoundTerms(flat @ flat.T, np.trace(grams, axis1=1, axis2=2), Gv, GGv)  # <G_a, G_b>, tr G_a


def set_upper_bounds(terms: BoundTerms, sets) -> np.ndarray:
    """An upper bound on S_1 of each layer set in `sets` (sorted tuples of one size), from the
    layers' `terms`. Padded by 1e-9 (relative) so that round-off can never let it fall below the
    exact entropy. Memory: the gather is (sets, |L|, |L|, B); callers pass sets in chunks.

    Two bounds, the smaller kept. The purity tr(G^2)/tr(G)^2 of a set's Gram G follows from
    the layers' Gram inner products (`shannon_upper_bound`). The largest eigenvalue is
    bracketed by one power step from a vector v shared by all sets, close to the top
    eigenvector of the sum of all layers' Grams: G v and G G v are sums of per-layer G_a v and
    G_a G_b v (`top_eigenvalue_bracket`), and a dominant eigenvalue tightens the bound
    (`shannon_upper_bound_dominant`)."""
    inner, traces, Gv, GGv = terms
    index = np.array(sets)  # (n, |L|)
    rows, cols = index[:, :, None], index[:, None, :]
    trace, frob2 = traces[index].sum(axis=1), inner[rows, cols].sum(axis=(1, 2))  # tr G, tr G^2
    low, high = top_eigenvalue_bracket(Gv[index].sum(axis=1), GGv[rows, :, cols].sum(axis=(1, 2)), trace, frob2)
    purity, n = frob2 / trace**2, Gv.shape[1]
    bound = np.minimum(
        shannon_upper_bound(purity, n), shannon_upper_bound_dominant(purity, low / trace, high / trace, n)
    )
    return bound + 1e-9 * np.maximum(1.0, np.abs(bound))
