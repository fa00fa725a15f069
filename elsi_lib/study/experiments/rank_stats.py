"""Rank statistics over few drafts: Spearman's rho of many rows at once (average ranks on ties), its
two-sided Monte Carlo permutation p-value, and a percentile interval that is NaN beside no estimate.
"""

from __future__ import annotations

import numbers

import numpy as np
from scipy.stats import rankdata


def spearman_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman's rho of each row of x (B, S) with the same row of y (average ranks on ties); NaN for a
    row where either is constant."""
    rx, ry = rankdata(x, axis=1), rankdata(y, axis=1)
    rx, ry = rx - rx.mean(axis=1, keepdims=True), ry - ry.mean(axis=1, keepdims=True)
    den = np.sqrt((rx**2).sum(axis=1) * (ry**2).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (rx * ry).sum(axis=1) / den, np.nan)


def permutation_p(score: np.ndarray, value: np.ndarray, n_perm: int, rng) -> float:
    """Two-sided Monte Carlo permutation p-value of Spearman's rho of `score` with `value` (S,): the
    share of `n_perm` seeded shuffles of `value` whose |rho| reaches the observed one (+1 both sides,
    so never 0). It needs no population of sets: it asks only whether the ranking could be chance."""
    check_n_perm(n_perm)
    observed = abs(spearman_rows(score[None], value[None])[0])
    if not np.isfinite(observed):
        return np.nan
    shuffled = np.stack([rng.permutation(value) for _ in range(n_perm)])  # (n_perm, S)
    draws = np.abs(spearman_rows(np.broadcast_to(score, shuffled.shape), shuffled))
    return float((1 + np.sum(draws >= observed - 1e-12)) / (n_perm + 1))


def interval(draws, estimate: float) -> tuple[float, float]:
    """The 95% percentile interval of the finite bootstrap draws; NaN where `estimate` is NaN (an
    interval beside no estimate would read as one) or no draw is finite."""
    draws = draws[np.isfinite(draws)]
    if not np.isfinite(estimate) or not len(draws):
        return np.nan, np.nan
    return tuple(float(v) for v in np.percentile(draws, [2.5, 97.5]))


def check_n_perm(n_perm) -> None:
    if isinstance(n_perm, bool) or not isinstance(n_perm, numbers.Integral) or n_perm < 1:
        raise ValueError(f"n_perm must be a positive integer number of permutations, got {n_perm!r}")
