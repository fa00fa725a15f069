"""Layer-set selection: ELSI (paper Alg. 1), ELSI-C (Alg. 2), the exhaustive optimum and the
negative-control baseline.

Each algorithm is a sequence of "best k of these sets" questions answered by `SetScorer.best`
(`scorer`), exact whichever backend ("gram", the default, or "naive", the definition) scores the
sets; for Shannon entropy the gram backend skips sets whose upper bound (`bounds`) rules them out.
BLAS is held at one thread during a selection (`threads`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..common.checks import LayerSet, as_float64, as_layer_stack, check_alpha, is_integer
from .entropy import scaled_layer_grams, spectrum_entropy
from .scorer import SetScorer
from .threads import one_blas_thread


@dataclass(frozen=True)
class BeamEntry:
    layers: LayerSet
    entropy: float
    parent: LayerSet | None = None  # the beam member it extended (None for seeds)


@dataclass
class Selection:
    """A chosen layer set and how it was found.

    beams[depth] lists the beam kept at that set size, best first, each with its parent: the
    paper's Fig. 7 "beam frontier". For `exhaustive`, beams[m] holds the best sets of size m.
    """

    layers: LayerSet
    entropy: float
    method: str
    beams: dict[int, list[BeamEntry]] = field(default_factory=dict)
    params: dict = field(default_factory=dict)
    n_evaluated: int = 0  # set entropies computed

    def path(self) -> list[LayerSet]:
        """The chain of beam members that led to the chosen set, smallest first."""
        parents = {e.layers: e.parent for entries in self.beams.values() for e in entries}
        chain: list[LayerSet] = []
        node: LayerSet | None = self.layers
        while node is not None:
            chain.append(node)
            node = parents.get(node)
        return chain[::-1]

    def frontier(self):
        """The beams as a DataFrame: depth, layers, entropy, parent, on_path (leads to the choice)."""

        path = set(self.path())
        rows = [
            {"depth": d, "layers": e.layers, "entropy": e.entropy, "parent": e.parent, "on_path": e.layers in path}
            for d, entries in sorted(self.beams.items())
            for e in entries
        ]
        return pd.DataFrame(rows, columns=["depth", "layers", "entropy", "parent", "on_path"])


def _check_size(m: int, n_layers: int) -> None:
    if not is_integer(m) or not 1 <= m <= n_layers:
        raise ValueError(f"m must be an integer in 1..{n_layers} (the number of layers), got {m!r}")


def _check_positive(**values) -> None:
    for name, value in values.items():
        if not is_integer(value) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")


def _check_min_single_layer(min_single_layer, n_layers: int) -> None:
    if min_single_layer is not None and (not is_integer(min_single_layer) or not 0 <= min_single_layer < n_layers):
        raise ValueError(f"min_single_layer must be None or an integer in 0..{n_layers - 1}, got {min_single_layer!r}")


def _checked_layers(Z, m, alpha, min_single_layer=None, **positive) -> tuple[np.ndarray, float]:
    """(Z as a float64 layer stack, alpha) once every argument is checked, before any work: m in
    1..N, the `positive` counts, min_single_layer and alpha (Z's values are checked by SetScorer)."""
    Z = as_layer_stack(Z, check_finite=False)
    _check_size(m, Z.shape[0])
    _check_positive(**positive)
    _check_min_single_layer(min_single_layer, Z.shape[0])
    return Z, check_alpha(alpha)


def _seed_beam(scorer: SetScorer, k_beam: int, allowed: tuple) -> list[BeamEntry]:
    singles: list[LayerSet] = [(l,) for l in allowed]
    return [BeamEntry(s, e) for s, e in scorer.best([(singles, k_beam)])[0]]


def _best_single(scorer: SetScorer, min_single_layer: int | None, allowed: tuple) -> BeamEntry:
    lowest = 0 if min_single_layer is None else int(min_single_layer)  # checked by _checked_layers
    singles: list[LayerSet] = [(l,) for l in allowed if l >= lowest]
    if not singles:
        raise ValueError(f"no allowed layer is >= min_single_layer {lowest}")
    return BeamEntry(*scorer.best([(singles, 1)])[0][0])


def restriction(n_layers: int, m: int, allowed=None, required=()) -> tuple[tuple, tuple]:
    """(allowed layers, required layers) of a restricted search, checked: the sets searched hold only
    `allowed` layers (default: all N) and every `required` one, so an engine that cannot feed some
    layers gets the best set it can use (`selection.feasible`)."""
    for name, given in (("allowed", allowed), ("required", required)):  # 3.5 is no layer, nor True, nor "012"
        if given is not None and (isinstance(given, (str, bytes)) or not isinstance(given, Iterable)):
            raise TypeError(f"{name} must be integer layer ids, got {given!r}")
    allowed, required = (None if allowed is None else list(allowed)), list(required)
    for name, given in (("allowed", allowed or []), ("required", required)):
        if not all(map(is_integer, given)):
            raise TypeError(f"{name} must be integer layer ids, got {given!r}")
    allowed = tuple(range(n_layers)) if allowed is None else tuple(sorted({int(l) for l in allowed}))
    required = tuple(sorted({int(l) for l in required}))
    if any(not 0 <= l < n_layers for l in allowed + required):
        raise ValueError(f"allowed and required layers must lie in 0..{n_layers - 1}, got {allowed} and {required}")
    if not set(required) <= set(allowed):
        raise ValueError(f"required layers {required} must be allowed ({allowed})")
    if not len(required) <= m <= len(allowed):
        raise ValueError(
            f"m = {m} layers cannot hold the {len(required)} required ones {required} from the "
            f"{len(allowed)} allowed {allowed}"
        )
    return allowed, required


def _beam_search(
    scorer: SetScorer,
    m: int,
    k_beam: int,
    pools,
    min_single_layer,
    method,
    params,
    allowed: tuple,
    required: tuple = (),
):
    """Shared skeleton of Alg. 1 and 2. `pools(beam)` gives, per beam member, the layer sets it may
    expand to and how many of the best of them to keep; the kept sets are deduplicated (the first
    parent found is kept) and the beam pruned to k_beam by entropy. A restricted search
    (`restriction`) starts from the required layers instead of the best single layers."""
    if required:
        beams = {len(required): [BeamEntry(*scorer.best([([required], 1)])[0][0])]}
    else:
        beams = {1: _seed_beam(scorer, k_beam, allowed)}
    if m == 1 and not required:
        best = _best_single(scorer, min_single_layer, allowed)
        return Selection(best.layers, best.entropy, method, beams, params, scorer.n_evaluated)
    for depth in range(max(2, len(required) + 1), m + 1):
        per_member = pools(beams[depth - 1])  # [(member, [candidate sets], keep)]
        choosy = [(sets, keep) for _, sets, keep in per_member if keep < len(sets)]
        kept = iter(scorer.best(choosy))  # one shared batch per round for the whole beam
        parents: dict[LayerSet, LayerSet] = {}
        for member, sets, keep in per_member:
            for s in [s for s, _ in next(kept)] if keep < len(sets) else sets:
                parents.setdefault(s, member.layers)  # dedup: the first parent found
        top = scorer.best([(list(parents), k_beam)])[0]
        beams[depth] = [BeamEntry(s, e, parents[s]) for s, e in top]
    best = beams[m][0]
    return Selection(best.layers, best.entropy, method, beams, params, scorer.n_evaluated)


def _extensions(member: LayerSet, pool) -> list[LayerSet]:
    return [tuple(sorted(member + (int(j),))) for j in pool if j not in member]


@one_blas_thread
def elsi(
    Z,
    m: int,
    k_beam: int = 10,
    k_expand: int = 5,
    alpha: float = 1.0,
    *,
    normalize: str = "none",
    min_single_layer: int | None = None,
    backend: str = "gram",
    allowed=None,
    required=(),
) -> Selection:
    """ELSI (paper Alg. 1): beam search over layer sets scored by set entropy S_alpha.

    The beam starts from the k_beam highest-entropy single layers; each member is extended by its
    k_expand best single-layer additions; candidates are deduplicated and the beam pruned to k_beam
    by entropy, until size m. min_single_layer (the paper's Llama rule) restricts the m=1 answer to
    layers >= that index; `allowed` / `required` restrict the search (`restriction`).
    """
    Z, alpha = _checked_layers(Z, m, alpha, min_single_layer, k_beam=k_beam, k_expand=k_expand)
    allowed, required = restriction(Z.shape[0], m, allowed, required)
    scorer = SetScorer(Z, alpha, normalize, backend)

    def pools(beam: list[BeamEntry]):
        return [(member, _extensions(member.layers, allowed), k_expand) for member in beam]

    params = dict(
        m=m,
        k_beam=k_beam,
        k_expand=k_expand,
        alpha=alpha,
        normalize=normalize,
        min_single_layer=min_single_layer,
        **_restricted(Z.shape[0], allowed, required),
    )
    return _beam_search(scorer, m, k_beam, pools, min_single_layer, "ELSI", params, allowed, required)


def _restricted(n_layers: int, allowed: tuple, required: tuple) -> dict:
    """A restricted search's params entries (none for an unrestricted one: its params stay as they were)."""
    return {} if allowed == tuple(range(n_layers)) and not required else {"allowed": allowed, "required": required}


def conditional_transition_scores(M_L: np.ndarray) -> np.ndarray:
    """delta_L(r) = ||M_L(r, :) - M_L(r-1, :)|| for r >= 1 and delta_L(0) = 0 (Alg. 2):
    (..., N, N) -> (..., N)."""
    M_L = as_float64(M_L, "M_L")
    if M_L.ndim < 2 or M_L.shape[-1] != M_L.shape[-2] or M_L.shape[-1] < 1:
        raise ValueError(f"M_L must be square conditional CKA matrices (..., N, N), got shape {M_L.shape}")
    steps = np.linalg.norm(np.diff(M_L, axis=-2), axis=-1)  # (..., N-1)
    return np.concatenate([np.zeros(steps.shape[:-1] + (1,)), steps], axis=-1)


@one_blas_thread
def elsi_c(
    Z,
    m: int,
    k_beam: int = 10,
    k_pool: int = 5,
    alpha: float = 1.0,
    *,
    normalize: str = "none",
    min_single_layer: int | None = None,
    backend: str = "gram",
    allowed=None,
    required=(),
) -> Selection:
    """ELSI-C (paper Alg. 2): beam search whose expansion pool for a member L is the k_pool layers
    outside L with the highest conditional-CKA transition scores delta_L; candidates are
    deduplicated and the beam pruned to k_beam by set entropy, as in ELSI. `allowed` / `required`
    restrict the search (`restriction`): layers outside `allowed` never enter a pool."""
    Z, alpha = _checked_layers(Z, m, alpha, min_single_layer, k_beam=k_beam, k_pool=k_pool)
    allowed, required = restriction(Z.shape[0], m, allowed, required)
    barred = [l for l in range(Z.shape[0]) if l not in allowed]
    scorer = SetScorer(Z, alpha, normalize, backend)

    def pools(beam: list[BeamEntry]):
        out = []
        deltas = conditional_transition_scores(scorer.conditional_cka([member.layers for member in beam]))  # (k, N)
        for member, delta in zip(beam, deltas):  # deltas is fresh: its rows may be written
            delta[list(member.layers) + barred] = -np.inf  # members last; the stable sort keeps the rest's order
            outside = np.argsort(-delta, kind="stable")[: min(k_pool, len(allowed) - len(member.layers))]
            out.append((member, _extensions(member.layers, outside), k_pool))
        return out

    params = dict(
        m=m,
        k_beam=k_beam,
        k_pool=k_pool,
        alpha=alpha,
        normalize=normalize,
        min_single_layer=min_single_layer,
        **_restricted(Z.shape[0], allowed, required),
    )
    return _beam_search(scorer, m, k_beam, pools, min_single_layer, "ELSI-C", params, allowed, required)


@one_blas_thread
def exhaustive(
    Z,
    m: int,
    alpha: float = 1.0,
    *,
    normalize: str = "none",
    keep: int = 10,
    backend: str = "gram",
    max_sets: int = 5_000_000,
    allowed=None,
    required=(),
) -> Selection:
    """The exact optimum over all C(N, m) sets; beams[m] holds the `keep` best. (For Shannon
    entropy the gram backend skips the sets whose upper bound rules them out; see SetScorer.best.)
    `allowed` / `required` restrict the sets (`restriction`)."""
    Z, alpha = _checked_layers(Z, m, alpha, keep=keep, max_sets=max_sets)
    allowed, required = restriction(Z.shape[0], m, allowed, required)
    scorer = SetScorer(Z, alpha, normalize, backend)
    free = [l for l in allowed if l not in required]
    total = math.comb(len(free), m - len(required))
    if total > max_sets:
        raise ValueError(f"C({len(free)}, {m - len(required)}) = {total} sets exceeds max_sets={max_sets}")
    sets = [tuple(sorted(required + rest)) for rest in itertools.combinations(free, m - len(required))]
    top = [BeamEntry(s, e) for s, e in scorer.best([(sets, keep)])[0]]
    params = dict(m=m, alpha=alpha, normalize=normalize, **_restricted(Z.shape[0], allowed, required))
    return Selection(top[0].layers, top[0].entropy, "exhaustive", {m: top}, params, scorer.n_evaluated)


def single_layer_entropies(Z, alpha: float = 1.0, normalize: str = "none") -> np.ndarray:
    """S_alpha of each layer alone, (N,): the paper's per-layer curve (Fig. 2). Z at any scale."""
    alpha = check_alpha(alpha)
    return spectrum_entropy(scaled_layer_grams(Z, normalize, per_layer=True)[0], alpha)


# ---------------------------------------------------------------- baselines


def lowest_entropy_layers(Z, m: int, alpha: float = 1.0, normalize: str = "none") -> LayerSet:
    """The paper's negative control: the m layers with the lowest single-layer entropy."""
    Z, alpha = _checked_layers(Z, m, alpha)
    entropies = single_layer_entropies(Z, alpha, normalize)
    return tuple(sorted(int(l) for l in np.argsort(entropies, kind="stable")[:m]))
