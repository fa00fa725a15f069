"""A task probe of a layer set: how well a ridge map from what EAGLE-3's first draft step sees predicts
what decides the target's next token, scored for every set from per-block Gram statistics.

At a reply position t the draft's first step reads the states of its layers L at t and the embedding
of token t+1, and must predict token t+2, which the target decides from its last state after the
final norm at t+1. The probe fits

    y_t ~ [x_{a,t} | x_{b,t} | ... | e_{t+1}] W        (a ridge regression, one W per set L)

on training tokens and scores L by the held-out relative error ||Y_h - X_h W||^2 / ||Y_h||^2 (both
centred by the training means); lower is better. `agreement` adds, for a few sets, the held-out
share of tokens where the target's lm_head on the prediction picks the target's own next token.

Choices (every one a parameter): each block (a layer's output, or the embedding) is centred and
scaled to unit mean square per coordinate, then reduced to its top `rank` principal components on the
training tokens (`fit_probe`), so that a set's system is (m + 1) * rank wide whatever d is; the
ridge penalty is `ridge` * n_train on those components. With the reduced features z, every set's
fit needs only blocks of G = Z^T Z and C = Z^T Y (training) and G_h, C_h, ||Y_h||^2 (held-out):

    W = (G_SS + ridge * n I)^-1 C_S,   error = ||Y_h||^2 - 2 tr(W^T C_h,S) + tr(W^T G_h,SS W)

so all C(N, m) sets are scored without the model (`set_errors`). Float64 throughout.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
from scipy.linalg import cho_factor, cho_solve

from .threads import MIN_PARALLEL, parallel_map
from .select import restriction  # the same checks as the entropy searches' restriction


@dataclass(frozen=True)
class ProbeStats:
    """Sufficient statistics of the probe on reduced features: blocks 0..N-1 the layers, block N the
    embedding of the next token; every array float64."""

    gram: np.ndarray  # (K, K) training Z^T Z, K = (N + 1) * rank
    cross: np.ndarray  # (K, d) training Z^T Y
    heldout_gram: np.ndarray  # (K, K)
    heldout_cross: np.ndarray  # (K, d)
    heldout_yy: float  # ||Y_h||^2 (centred by the training mean)
    n_train: int
    n_heldout: int
    rank: int
    kept_variance: np.ndarray  # (N + 1,) share of each block's variance its components keep
    heldout_z: np.ndarray  # (n_h, K) float32 held-out reduced features (for `agreement`)
    heldout_next: np.ndarray  # (n_h,) the target's own next token at each held-out row (-1: unknown)
    y_mean: np.ndarray  # (d,) the training targets' mean

    @functools.cached_property
    def cross_outer(self) -> np.ndarray:
        """(K, K) C C^T: with `heldout_cross_outer`, what a set's error needs of the d-wide C (`_set_error`)."""
        return self.cross @ self.cross.T

    @functools.cached_property
    def heldout_cross_outer(self) -> np.ndarray:
        """(K, K) C_h C^T."""
        return self.heldout_cross @ self.cross.T

    @property
    def n_layers(self) -> int:
        return self.gram.shape[0] // self.rank - 1

    def columns(self, layers) -> np.ndarray:
        """Columns of Z for `layers` and the embedding block, in that order."""
        blocks = [*layers, self.n_layers]
        return np.concatenate([np.arange(b * self.rank, (b + 1) * self.rank) for b in blocks])


@dataclass(frozen=True)
class Reduction:
    """How raw features become Z: per block (N + 1) the training mean (d,), scale () and components
    (d, rank), the share of the block's variance those components keep, and the targets' mean."""

    means: np.ndarray  # (N + 1, d)
    scales: np.ndarray  # (N + 1,)
    components: np.ndarray  # (N + 1, d, rank)
    kept_variance: np.ndarray  # (N + 1,)
    y_mean: np.ndarray  # (d,)

    def apply(self, x: np.ndarray, chunk: int = 1024) -> np.ndarray:
        """x (n, N + 1, d) raw -> Z (n, (N + 1) * rank) float64, in chunks of rows."""
        out = np.empty((len(x), self.components.shape[0] * self.components.shape[2]))
        for i in range(0, len(x), chunk):
            part = (np.asarray(x[i : i + chunk], np.float64) - self.means) / self.scales[:, None]  # (c, N + 1, d)
            out[i : i + chunk] = np.einsum("nbd,bdr->nbr", part, self.components).reshape(len(part), -1)
        return out


Chunks = Callable[[], Iterator[tuple[np.ndarray, np.ndarray]]]  # each call one pass: (x (c, N + 1, d), y (c, d))


def array_chunks(x, y, chunk: int = 1024) -> Chunks:
    """A pass source over arrays x (n, N + 1, d), y (n, d): each call yields them in chunks of rows."""
    return lambda: ((x[i : i + chunk], y[i : i + chunk]) for i in range(0, len(x), chunk))


def fit_reduction(x: np.ndarray, y: np.ndarray, rank: int) -> Reduction:
    """Centring, scaling and top-`rank` principal components of each block of training features
    x (n, N + 1, d); y (n, d) only gives its mean (`reduction_of` over the arrays)."""
    return reduction_of(array_chunks(x, y), rank)


def reduction_of(train: Chunks, rank: int) -> Reduction:
    """`fit_reduction` from a pass source of training rows, in two passes (the means, then each
    block's centred second moments), so that the rows never need to be in memory at once."""
    n, sums, y_sum = 0, np.float64(0), np.float64(0)
    for x, y in train():
        sums = sums + np.asarray(x, np.float64).sum(0)  # (N + 1, d)
        y_sum = y_sum + np.asarray(y, np.float64).sum(0)  # (d,)
        n += len(x)
    if n == 0:
        raise ValueError("the probe has no training rows")
    means: np.ndarray = np.asarray(sums) / n
    blocks, d = means.shape
    if not 1 <= rank <= d:
        raise ValueError(f"rank must be in 1..{d} (the features' width), got {rank}")
    moments = np.zeros((blocks, d, d))
    for x, _ in train():
        for b in range(blocks):
            block = np.asarray(x[:, b], np.float64) - means[b]  # (c, d), a copy: the caller's x stays as it is
            moments[b] += block.T @ block
    scales, components, kept = np.empty(blocks), np.empty((blocks, d, rank)), np.empty(blocks)
    for b in range(blocks):
        values, vectors = np.linalg.eigh(moments[b])  # ascending
        if values[-1] <= 0:
            raise ValueError(f"block {b} is constant over the training tokens")
        scales[b] = np.sqrt(max(values.sum(), 0.0) / (n * d))  # root mean square per coordinate
        components[b], kept[b] = vectors[:, ::-1][:, :rank], values[::-1][:rank].sum() / values.sum()
    return Reduction(means, scales, components, kept, np.asarray(y_sum) / n)


def block_name(b: int, n_blocks: int) -> str:
    """What block b of the probe's features (n_blocks = N + 1) holds: a layer, or (the last) the embedding."""
    return "the embedding of the next token" if b == n_blocks - 1 else f"layer {b}"


def _non_finite(array, blocks: bool):
    """Per block (array (c, N + 1, d)) the count of NaN or inf values, else their count."""
    bad = ~np.isfinite(np.asarray(array))
    return bad.sum(axis=(0, 2)) if blocks else int(bad.sum())


def _refuse_non_finite(what: str, bad, blocks: bool) -> None:
    if not np.any(bad):
        return
    if blocks:
        per_block = np.asarray(bad)
        where = ", ".join(f"{int(c)} in {block_name(b, len(per_block))}" for b, c in enumerate(per_block) if c)
    else:
        where = f"{int(bad)} value{'s' if bad > 1 else ''}"
    raise ValueError(
        f"the probe's {what} hold non-finite values (NaN or inf): {where}; refused, as they "
        "would make the error of every set holding them NaN"
    )


def check_chunks(source: Chunks, side: str) -> None:
    """ValueError naming a pass source's features (each block holding NaN or inf values, with their count),
    then its targets (`side`: "training", "held-out"), when they hold any."""
    bad_x: np.ndarray | int = 0
    bad_y = 0
    for x, y in source():
        bad_x, bad_y = bad_x + _non_finite(x, True), bad_y + _non_finite(y, False)
    _refuse_non_finite(f"{side} features", bad_x, True)
    _refuse_non_finite(f"{side} targets", bad_y, False)


def probe_stats(x, y, heldout_x, heldout_y, rank: int = 64, heldout_next=None) -> tuple[ProbeStats, Reduction]:
    """ProbeStats of training features x (n, N + 1, d) -> targets y (n, d) and held-out ones (with the
    target's own next token at each held-out row, for `agreement`), each block reduced to `rank`
    components (`fit_reduction` on the training tokens): `probe_stats_of` over the arrays' rows."""
    return probe_stats_of(array_chunks(x, y), array_chunks(heldout_x, heldout_y), rank, heldout_next)


def probe_stats_of(train: Chunks, heldout: Chunks, rank: int = 64, heldout_next=None) -> tuple[ProbeStats, Reduction]:
    """`probe_stats` from pass sources of training and held-out rows (`Chunks`): the reduction in two
    passes over the training rows, then one over each side for the Gram statistics. Memory holds the
    statistics and one chunk, never all rows (the held-out rows' reduced features excepted: `agreement`
    reads them). A first pass refuses non-finite values (`check_chunks`): one would make the error of
    every set holding its block NaN."""
    check_chunks(train, "training")
    check_chunks(heldout, "held-out")
    reduction = reduction_of(train, rank)
    K = reduction.components.shape[0] * rank
    d = len(reduction.y_mean)
    sides = []
    for source, keep in ((train, False), (heldout, True)):
        gram, cross, yy, n, kept = np.zeros((K, K)), np.zeros((K, d)), 0.0, 0, []
        for x, y in source():
            z = reduction.apply(x)  # (c, K)
            yc = np.asarray(y, np.float64) - reduction.y_mean  # (c, d)
            gram += z.T @ z
            cross += z.T @ yc
            yy += float(np.sum(yc**2))
            n += len(z)
            if keep:
                kept.append(z.astype(np.float32))
        sides.append((gram, cross, yy, n, np.concatenate(kept) if kept else np.zeros((0, K), np.float32)))
    (gram, cross, _, n_train, _), (heldout_gram, heldout_cross, heldout_yy, n_heldout, heldout_z) = sides
    following = np.full(n_heldout, -1) if heldout_next is None else np.asarray(heldout_next, np.int64)
    stats = ProbeStats(
        gram,
        cross,
        heldout_gram,
        heldout_cross,
        heldout_yy,
        n_train,
        n_heldout,
        rank,
        reduction.kept_variance,
        heldout_z,
        following,
        reduction.y_mean,
    )
    return stats, reduction


def fit_set(stats: ProbeStats, layers, ridge: float) -> np.ndarray:
    """W ((m + 1) * rank, d) of the ridge map for `layers` (their blocks and the embedding's)."""
    S = stats.columns(layers)
    A = stats.gram[np.ix_(S, S)] + ridge * stats.n_train * np.eye(len(S))
    return np.linalg.solve(A, stats.cross[S])


def _set_error(stats: ProbeStats, layers, ridge: float) -> float:
    """The module docstring's error with W = A^-1 C_S never formed (its d columns are the costly part):
    tr(W^T C_h,S) = <A^-1, (C_h C^T)_SS> and tr(W^T G_h,SS W) = tr(A^-1 G_h,SS A^-1 (C C^T)_SS)."""
    S = stats.columns(layers)
    A = stats.gram[np.ix_(S, S)] + ridge * stats.n_train * np.eye(len(S))
    inverse = cho_solve(cho_factor(A), np.eye(len(S)))  # ((m + 1) r, (m + 1) r)
    left = inverse @ stats.heldout_gram[np.ix_(S, S)]
    fitted = np.sum(left * (stats.cross_outer[np.ix_(S, S)] @ inverse))  # tr(left @ (inverse @ CC^T_SS))
    return (
        stats.heldout_yy - 2 * np.sum(inverse * stats.heldout_cross_outer[np.ix_(S, S)]) + fitted
    ) / stats.heldout_yy


def set_errors(stats: ProbeStats, sets, ridge: float) -> np.ndarray:
    """Held-out relative error of each set's ridge map (module docstring), (len(sets),) float64; the
    sets are split over a few threads, BLAS held at one thread each (`threads.parallel_map`)."""
    if ridge <= 0:
        raise ValueError(f"ridge must be positive, got {ridge}")
    sets = list(sets)
    stats.cross_outer, stats.heldout_cross_outer  # computed once, before the threads share them
    parts = [sets[i : i + MIN_PARALLEL] for i in range(0, len(sets), MIN_PARALLEL)]
    done = parallel_map(lambda part: [_set_error(stats, layers, ridge) for layers in part], parts)
    errors = np.array([e for part in done for e in part], dtype=np.float64)
    check_errors(sets, errors)
    return errors


def check_errors(sets, errors) -> None:
    """FloatingPointError when any set's error is NaN or inf, naming a few: such a set would be sorted
    last (or first) with no warning, and another chosen in its place."""
    bad = np.flatnonzero(~np.isfinite(errors))
    if len(bad):
        named = ", ".join(str(tuple(sets[i])) for i in bad[:3])
        raise FloatingPointError(
            f"the held-out error of {len(bad)} of {len(sets)} sets is not finite ({named}"
            f"{', ...' if len(bad) > 3 else ''}): the probe statistics hold a NaN or inf, "
            "or the held-out targets do not vary; rebuild them (`probe_stats`)"
        )


def choose_ridge(stats: ProbeStats, sets, grid=(1e-4, 1e-3, 1e-2, 1e-1, 1.0)) -> tuple[float, dict]:
    """The ridge of `grid` with the lowest mean held-out error over `sets`, and {ridge: that mean}."""
    means = {float(r): float(set_errors(stats, sets, r).mean()) for r in grid}
    return min(means, key=means.__getitem__), means


def _candidate_sets(N: int, m: int, allowed, required) -> tuple[list, tuple]:
    """The m-sets of `allowed` layers (default all N) holding every `required` one, and the free layers."""

    allowed, required = restriction(N, m, allowed, required)
    free = [l for l in allowed if l not in required]
    return free, required


def probe_ranking(stats: ProbeStats, m: int, ridge: float, *, limit: int = 20000, allowed=None, required=()):
    """Every m-set of the N layers (only `allowed` layers, every `required` one: a restricted search)
    with its held-out error, best (lowest) first: (sets, errors). Refuses more than `limit` sets (use
    `probe_beam`)."""
    N = stats.n_layers
    if not 1 <= m <= N:
        raise ValueError(f"m must be in 1..{N}, got {m}")
    free, required = _candidate_sets(N, m, allowed, required)
    sets = [tuple(sorted(required + rest)) for rest in itertools.combinations(free, m - len(required))]
    if len(sets) > limit:
        raise ValueError(f"{len(sets)} sets of {m} layers exceed limit={limit}: use probe_beam")
    errors = set_errors(stats, sets, ridge)
    order = np.argsort(errors, kind="stable")
    return [sets[i] for i in order], errors[order]


def probe_beam(
    stats: ProbeStats, m: int, ridge: float, k_beam: int = 10, *, allowed=None, required=()
) -> tuple[tuple, float]:
    """Beam search by held-out error (the sets of size k + 1 extend the `k_beam` best of size k by one
    layer each), for when C(N, m) is too many to score: (best set, its error). A restricted search
    starts from the `required` layers and extends by `allowed` ones only."""
    N = stats.n_layers
    free, required = _candidate_sets(N, m, allowed, required)
    beam, best = [required], float(set_errors(stats, [required], ridge)[0]) if required else np.nan
    for _ in range(m - len(required)):
        children = sorted({tuple(sorted(s + (l,))) for s in beam for l in free if l not in s})
        errors = set_errors(stats, children, ridge)
        order = np.argsort(errors, kind="stable")[:k_beam]
        beam, best = [children[i] for i in order], float(errors[order[0]])
    return beam[0], best


def agreement(stats: ProbeStats, layers, ridge: float, lm_head: np.ndarray, chunk: int = 512) -> float:
    """Held-out share of rows where the target's lm_head (V, d) on the set's ridge prediction picks
    the target's own next token (`heldout_next`)."""
    if (stats.heldout_next < 0).any():
        raise ValueError("these probe statistics hold no next tokens: pass heldout_next to probe_stats")
    W = fit_set(stats, layers, ridge)
    z, head = stats.heldout_z[:, stats.columns(layers)], np.asarray(lm_head, np.float64).T  # (n_h, K_S), (d, V)
    hits = 0
    for i in range(0, len(z), chunk):  # (chunk, V) logits at a time: all rows at once would be n_h x V floats
        prediction = z[i : i + chunk].astype(np.float64) @ W + stats.y_mean  # (chunk, d)
        hits += int(np.sum(np.argmax(prediction @ head, axis=1) == stats.heldout_next[i : i + chunk]))
    return hits / len(z)


@dataclass(frozen=True)
class ProbeChoice:
    """The probe's set of m layers, its held-out error, the ridge chosen, and how it was searched."""

    layers: tuple
    error: float
    ridge: float
    search: str  # "exhaustive" or "beam"
    ridge_errors: dict  # {ridge: mean held-out error over the sets it was chosen on}


def probe_choice(
    stats: ProbeStats,
    m: int,
    *,
    k_beam: int = 10,
    exhaustive_limit: int = 5000,
    ridge_sets: int = 64,
    seed: int = 0,
    grid=(1e-4, 1e-3, 1e-2, 1e-1, 1.0),
    allowed=None,
    required=(),
) -> ProbeChoice:
    """Select m layers by the probe: the ridge of `grid` with the lowest mean held-out error over
    `ridge_sets` seeded random m-sets, then every m-set scored when there are at most
    `exhaustive_limit` of them, else beam search (`probe_beam`). `allowed` / `required` restrict the
    sets searched (the ridge is chosen as without them: it belongs to the probe, not to the restriction)."""
    N = stats.n_layers
    if not 1 <= m <= N:
        raise ValueError(f"m must be in 1..{N}, got {m}")
    rng = np.random.default_rng(seed)
    sample = sorted({tuple(sorted(rng.choice(N, m, replace=False).tolist())) for _ in range(ridge_sets)})
    ridge, means = choose_ridge(stats, sample, grid)
    free, fixed = _candidate_sets(N, m, allowed, required)
    if math.comb(len(free), m - len(fixed)) <= exhaustive_limit:
        sets, errors = probe_ranking(stats, m, ridge, limit=exhaustive_limit, allowed=allowed, required=required)
        return ProbeChoice(sets[0], float(errors[0]), ridge, "exhaustive", means)
    layers, error = probe_beam(stats, m, ridge, k_beam, allowed=allowed, required=required)
    return ProbeChoice(layers, error, ridge, "beam", means)
