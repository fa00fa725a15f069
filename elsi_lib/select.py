"""Layer-set selection: ELSI (paper Alg. 1), ELSI-C (Alg. 2), the exhaustive optimum, baselines,
and layer-id conventions of the engines.

All scoring goes through `SetScorer`, which has two interchangeable backends: "gram" (summed
B x B Gram matrices and a batched eigensolver, the default) and "naive" (an SVD of each explicit
concatenation, the definition). Both give the same sets and entropies to round-off.

Every choice is a "best k of these sets" question (`SetScorer.best`). For Shannon entropy the gram
backend answers it without scoring every set. An upper bound on S_1 of any set follows from
per-layer quantities, with no eigensolve: its purity tr(G^2)/tr(G)^2 (`shannon_upper_bound`) and
a bracket on its largest eigenvalue from one power step (`top_eigenvalue_bracket`,
`shannon_upper_bound_dominant`). The k sets of highest bound are scored; their worst score is a
floor, and only sets whose bound reaches it are scored next. The answer is the same as scoring
them all.
"""
from __future__ import annotations

import functools
import itertools
import math
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
from threadpoolctl import ThreadpoolController

from .cka import _cka_from_products, center_gram, conditional_cka_matrices
from .entropy import (NORMALIZATIONS, as_layer_stack, check_alpha, check_layers, concat_layers,
                      gram_entropy, layer_grams, matrix_entropy, shannon_upper_bound,
                      shannon_upper_bound_dominant, top_eigenvalue_bracket)

LayerSet = tuple[int, ...]
_WORKERS = min(4, os.cpu_count() or 1)
_MIN_PARALLEL = 24  # sets per worker below which threads cost more than they save
_CHUNK = 4096  # sets per batched eigensolve or bound pass (bounds memory: 4096 x B x B float64)


@functools.cache
def _pool() -> tuple[ThreadPoolExecutor, ThreadpoolController]:
    return ThreadPoolExecutor(_WORKERS, thread_name_prefix="elsi"), ThreadpoolController()


def _one_blas_thread(fn):
    """Run a selection with BLAS held at one thread: its products are small, and OpenBLAS's own
    threads keep spinning after each call, stealing the cores `_parallel_map` splits work over."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with _pool()[1].limit(limits=1, user_api="blas"):
            return fn(*args, **kwargs)
    return wrapper


def _parallel_map(fn, parts: list) -> list:
    """fn over parts on a few threads (numpy's BLAS and eigensolver release the GIL). Each call is
    small, so BLAS's own threads are held at one meanwhile: they would only compete."""
    if len(parts) < 2 or _WORKERS < 2:
        return [fn(p) for p in parts]
    pool, controller = _pool()
    with controller.limit(limits=1, user_api="blas"):
        return list(pool.map(fn, parts))


def _power_vector(G: np.ndarray, steps: int = 12) -> np.ndarray:
    """A unit vector near G's top eigenvector, by power iteration from a fixed start (a few
    matrix-vector products; an eigensolver costs more). Any vector gives valid bounds in
    `top_eigenvalue_bracket`; a better one gives tighter bounds."""
    v = np.random.default_rng(0).normal(size=G.shape[0])
    for _ in range(steps):
        v = G @ v
        v /= np.sqrt(v @ v) or 1.0
    return v


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
        chain, node = [], self.layers
        while node is not None:
            chain.append(node)
            node = parents.get(node)
        return chain[::-1]

    def frontier(self):
        """The beams as a DataFrame: depth, layers, entropy, parent, on_path (leads to the choice)."""
        import pandas as pd

        path = set(self.path())
        rows = [{"depth": d, "layers": e.layers, "entropy": e.entropy, "parent": e.parent,
                 "on_path": e.layers in path}
                for d, entries in sorted(self.beams.items()) for e in entries]
        return pd.DataFrame(rows, columns=["depth", "layers", "entropy", "parent", "on_path"])


class SetScorer:
    """Set entropies S_alpha(X_L) for many layer sets of one Z (N, B, d)."""

    def __init__(self, Z, alpha: float = 1.0, normalize: str = "none", backend: str = "gram"):
        if backend not in ("gram", "naive"):
            raise ValueError(f"backend must be 'gram' or 'naive', got {backend!r}")
        if normalize not in NORMALIZATIONS:
            raise ValueError(f"normalize must be one of {NORMALIZATIONS}, got {normalize!r}")
        self.Z = as_layer_stack(Z, check_finite=False)  # layer_grams checks finiteness from the traces
        self.n_layers = self.Z.shape[0]
        self.alpha, self.normalize, self.backend = check_alpha(alpha), normalize, backend
        parts = np.array_split(self.Z, min(_WORKERS, self.n_layers))
        self.grams = np.concatenate(_parallel_map(lambda part: layer_grams(part, normalize), parts))  # (N, B, B)
        self.n_evaluated = 0
        self._memo: dict[LayerSet, float] = {}
        self._products = None
        self._bound_terms = None

    def upper_bounds(self, sets: list[LayerSet]) -> np.ndarray:
        """An upper bound on the entropy of each set, without an eigensolve; +inf where none is
        available (the naive backend, or alpha != 1). Padded by 1e-9 (relative) so that round-off
        can never let it fall below the exact entropy.

        Two bounds, the smaller kept. The purity tr(G^2)/tr(G)^2 of a set's Gram G follows from
        the layers' Gram inner products (`shannon_upper_bound`). The largest eigenvalue is
        bracketed by one power step from a vector v shared by all sets, close to the top
        eigenvector of the sum of all layers' Grams: G v and G G v are sums of per-layer G_a v and
        G_a G_b v
        (`top_eigenvalue_bracket`), and a dominant eigenvalue tightens the bound
        (`shannon_upper_bound_dominant`)."""
        if self.backend == "naive" or self.alpha != 1.0:
            return np.full(len(sets), np.inf)
        if len(sets) > _CHUNK:  # bounds memory: the gather below is (sets, |L|, |L|, B)
            return np.concatenate([self.upper_bounds(sets[i:i + _CHUNK]) for i in range(0, len(sets), _CHUNK)])
        if self._bound_terms is None:
            flat = self.grams.reshape(self.n_layers, -1)  # (N, B*B)
            stacked = self.grams.reshape(-1, self.grams.shape[1])  # (N*B, B): one product, not N
            v = _power_vector(self.grams.sum(axis=0))  # (B,)
            Gv = (stacked @ v).reshape(self.n_layers, -1)  # (N, B): G_a v
            GGv = (stacked @ Gv.T).reshape(self.n_layers, -1, self.n_layers)  # (N, B, N): [a, :, b] = G_a G_b v
            self._bound_terms = (flat @ flat.T, np.trace(self.grams, axis1=1, axis2=2), Gv, GGv)  # <G_a, G_b>, tr G_a
        inner, traces, Gv, GGv = self._bound_terms
        index = np.array(sets)  # (n, |L|)
        rows, cols = index[:, :, None], index[:, None, :]
        trace, frob2 = traces[index].sum(axis=1), inner[rows, cols].sum(axis=(1, 2))  # tr G, tr G^2
        low, high = top_eigenvalue_bracket(Gv[index].sum(axis=1), GGv[rows, :, cols].sum(axis=(1, 2)),
                                           trace, frob2)
        purity, n = frob2 / trace**2, self.grams.shape[1]
        bound = np.minimum(shannon_upper_bound(purity, n),
                           shannon_upper_bound_dominant(purity, low / trace, high / trace, n))
        return bound + 1e-9 * np.maximum(1.0, np.abs(bound))

    def best(self, groups: list[tuple[list[LayerSet], int]]) -> list[list[tuple[LayerSet, float]]]:
        """For each (sets, keep) in `groups` (every set of one size): the `keep` sets of highest
        entropy with their entropies, best first, ties broken by the sets' lexicographic order.

        Exact, in two batches shared by all groups. First each group's `keep` sets of highest upper
        bound are scored; their worst score t is a floor for the group's final keep-th best. Then
        every set whose bound reaches t is scored; any other set's entropy is below t, so it cannot
        be among the best. With no bound (+inf) the second batch is every set."""
        distinct = list(dict.fromkeys(s for sets, _ in groups for s in sets))  # all of one size
        bound_of = dict(zip(distinct, self.upper_bounds(distinct))) if distinct else {}
        plans = []  # per group: its sets in decreasing bound order, their bounds, keep
        for sets, keep in groups:
            bounds = np.array([bound_of[s] for s in sets])
            order = np.argsort(-bounds, kind="stable")
            plans.append(([sets[i] for i in order], bounds[order], min(keep, len(sets))))
        self.entropies([s for ranked, _, keep in plans for s in ranked[:keep]])
        wanted = []
        for ranked, bounds, keep in plans:
            if keep:
                floor = self.entropies(ranked[:keep]).min()
                wanted += ranked[keep:keep + int(np.count_nonzero(bounds[keep:] >= floor))]  # bounds descend
        self.entropies(wanted)
        answers = []
        for ranked, bounds, keep in plans:
            scored = [s for s in ranked if s in self._memo]
            top = sorted(scored, key=lambda s: (-self._memo[s], s))[:keep]
            answers.append([(s, self._memo[s]) for s in top])
        return answers

    def entropies(self, sets: list[LayerSet]) -> np.ndarray:
        """S_alpha of each set in `sets` (sorted tuples of one size). Each distinct set is
        computed once per scorer; repeats are looked up."""
        missing = list(dict.fromkeys(s for s in sets if s not in self._memo))
        if missing:
            self.n_evaluated += len(missing)
            self._memo.update(zip(missing, self._compute(missing)))
        return np.array([self._memo[s] for s in sets], dtype=np.float64)

    def _compute(self, sets: list[LayerSet]) -> np.ndarray:
        if self.backend == "naive":
            return np.array([matrix_entropy(concat_layers(self.Z, s, self.normalize), self.alpha) for s in sets])
        n_chunks = max(-(-len(sets) // _CHUNK), min(_WORKERS, len(sets) // _MIN_PARALLEL), 1)
        bounds = np.linspace(0, len(sets), n_chunks + 1).astype(int)  # equal chunks, one per worker
        chunks = [sets[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
        return np.concatenate(_parallel_map(self._gram_chunk, chunks))

    def _gram_chunk(self, sets: list[LayerSet]) -> np.ndarray:
        index = np.array(sets)  # (n, |L|)
        return gram_entropy(self.grams[index].sum(axis=1), self.alpha)  # (n, B, B) -> (n,)

    def conditional_cka(self, sets: list[LayerSet]) -> np.ndarray:
        """M_L (N, N) of Alg. 2 for each set L in `sets`: (len(sets), N, N)."""
        if self.backend == "naive":
            out = []
            for layers in sets:
                members = [concat_layers(self.Z, sorted(set(layers) | {i}), self.normalize)
                           for i in range(self.n_layers)]
                centered = center_gram(np.stack([X @ X.T for X in members])).reshape(self.n_layers, -1)
                out.append(_cka_from_products(centered @ centered.T))
            return np.stack(out)
        if self._products is None:
            centered = center_gram(self.grams).reshape(self.n_layers, -1)  # (N, B*B)
            self._products = centered @ centered.T
        return conditional_cka_matrices(self._products, sets)


def _check_size(m: int, n_layers: int) -> None:
    if not isinstance(m, (int, np.integer)) or not 1 <= m <= n_layers:
        raise ValueError(f"m must be an integer in 1..{n_layers} (the number of layers), got {m!r}")


def _check_positive(**values) -> None:
    for name, value in values.items():
        if not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")


def _seed_beam(scorer: SetScorer, k_beam: int) -> list[BeamEntry]:
    singles = [(l,) for l in range(scorer.n_layers)]
    return [BeamEntry(s, e) for s, e in scorer.best([(singles, k_beam)])[0]]


def _best_single(scorer: SetScorer, min_single_layer: int | None) -> BeamEntry:
    lowest = 0 if min_single_layer is None else min_single_layer
    if not 0 <= lowest < scorer.n_layers:
        raise ValueError(f"min_single_layer must lie in 0..{scorer.n_layers - 1}, got {min_single_layer}")
    singles = [(l,) for l in range(lowest, scorer.n_layers)]
    return BeamEntry(*scorer.best([(singles, 1)])[0][0])


def _beam_search(scorer: SetScorer, m: int, k_beam: int, pools, min_single_layer, method, params):
    """Shared skeleton of Alg. 1 and 2. `pools(beam)` gives, per beam member, the layer sets it may
    expand to and how many of the best of them to keep; the kept sets are deduplicated (the first
    parent found is kept) and the beam pruned to k_beam by entropy."""
    _check_size(m, scorer.n_layers)
    beams = {1: _seed_beam(scorer, k_beam)}
    if m == 1:
        best = _best_single(scorer, min_single_layer)
        return Selection(best.layers, best.entropy, method, beams, params, scorer.n_evaluated)
    for depth in range(2, m + 1):
        per_member = pools(beams[depth - 1])  # [(member, [candidate sets], keep)]
        choosy = [(sets, keep) for _, sets, keep in per_member if keep < len(sets)]
        kept = iter(scorer.best(choosy))  # one shared batch per round for the whole beam
        parents: dict[LayerSet, LayerSet] = {}
        for member, sets, keep in per_member:
            for s in ([s for s, _ in next(kept)] if keep < len(sets) else sets):
                parents.setdefault(s, member.layers)  # dedup: the first parent found
        top = scorer.best([(list(parents), k_beam)])[0]
        beams[depth] = [BeamEntry(s, e, parents[s]) for s, e in top]
    best = beams[m][0]
    return Selection(best.layers, best.entropy, method, beams, params, scorer.n_evaluated)


def _extensions(member: LayerSet, pool) -> list[LayerSet]:
    return [tuple(sorted(member + (int(j),))) for j in pool if j not in member]


@_one_blas_thread
def elsi(Z, m: int, k_beam: int = 10, k_expand: int = 5, alpha: float = 1.0, *, normalize: str = "none",
         min_single_layer: int | None = None, backend: str = "gram") -> Selection:
    """ELSI (paper Alg. 1): beam search over layer sets scored by set entropy S_alpha.

    The beam starts from the k_beam highest-entropy single layers; each member is extended by its
    k_expand best single-layer additions; candidates are deduplicated and the beam pruned to k_beam
    by entropy, until size m. min_single_layer (the paper's Llama rule) restricts the m=1 answer to
    layers >= that index.
    """
    _check_positive(k_beam=k_beam, k_expand=k_expand)
    scorer = SetScorer(Z, alpha, normalize, backend)

    def pools(beam: list[BeamEntry]):
        return [(member, _extensions(member.layers, range(scorer.n_layers)), k_expand) for member in beam]

    params = dict(m=m, k_beam=k_beam, k_expand=k_expand, alpha=alpha, normalize=normalize,
                  min_single_layer=min_single_layer)
    return _beam_search(scorer, m, k_beam, pools, min_single_layer, "ELSI", params)


def conditional_transition_scores(M_L: np.ndarray) -> np.ndarray:
    """delta_L(r) = ||M_L(r, :) - M_L(r-1, :)|| for r >= 1 and delta_L(0) = 0 (Alg. 2):
    (..., N, N) -> (..., N)."""
    steps = np.linalg.norm(np.diff(M_L, axis=-2), axis=-1)  # (..., N-1)
    return np.concatenate([np.zeros(steps.shape[:-1] + (1,)), steps], axis=-1)


@_one_blas_thread
def elsi_c(Z, m: int, k_beam: int = 10, k_pool: int = 5, alpha: float = 1.0, *, normalize: str = "none",
           min_single_layer: int | None = None, backend: str = "gram") -> Selection:
    """ELSI-C (paper Alg. 2): beam search whose expansion pool for a member L is the k_pool layers
    outside L with the highest conditional-CKA transition scores delta_L; candidates are
    deduplicated and the beam pruned to k_beam by set entropy, as in ELSI."""
    _check_positive(k_beam=k_beam, k_pool=k_pool)
    scorer = SetScorer(Z, alpha, normalize, backend)

    def pools(beam: list[BeamEntry]):
        out = []
        deltas = conditional_transition_scores(scorer.conditional_cka([member.layers for member in beam]))  # (k, N)
        for member, delta in zip(beam, deltas):  # deltas is fresh: its rows may be written
            delta[list(member.layers)] = -np.inf  # members last; the stable sort keeps the rest's order
            outside = np.argsort(-delta, kind="stable")[:min(k_pool, scorer.n_layers - len(member.layers))]
            out.append((member, _extensions(member.layers, outside), k_pool))
        return out

    params = dict(m=m, k_beam=k_beam, k_pool=k_pool, alpha=alpha, normalize=normalize,
                  min_single_layer=min_single_layer)
    return _beam_search(scorer, m, k_beam, pools, min_single_layer, "ELSI-C", params)


@_one_blas_thread
def exhaustive(Z, m: int, alpha: float = 1.0, *, normalize: str = "none", keep: int = 10,
               backend: str = "gram", max_sets: int = 5_000_000) -> Selection:
    """The exact optimum over all C(N, m) sets; beams[m] holds the `keep` best. (For Shannon
    entropy the gram backend skips the sets whose upper bound rules them out; see SetScorer.best.)"""
    scorer = SetScorer(Z, alpha, normalize, backend)
    _check_size(m, scorer.n_layers)
    total = math.comb(scorer.n_layers, m)
    if total > max_sets:
        raise ValueError(f"C({scorer.n_layers}, {m}) = {total} sets exceeds max_sets={max_sets}")
    sets = list(itertools.combinations(range(scorer.n_layers), m))
    top = [BeamEntry(s, e) for s, e in scorer.best([(sets, keep)])[0]]
    params = dict(m=m, alpha=alpha, normalize=normalize)
    return Selection(top[0].layers, top[0].entropy, "exhaustive", {m: top}, params, scorer.n_evaluated)


def single_layer_entropies(Z, alpha: float = 1.0, normalize: str = "none") -> np.ndarray:
    """S_alpha of each layer alone, (N,): the paper's per-layer curve (Fig. 2)."""
    return gram_entropy(layer_grams(Z, normalize), check_alpha(alpha))


# ---------------------------------------------------------------- baselines and conventions

def eagle2_layers(n_layers: int) -> LayerSet:
    """EAGLE-2 conditions on the last layer only: (N-1,)."""
    return (n_layers - 1,)


def eagle3_layers(n_layers: int) -> LayerSet:
    """EAGLE-3's fixed rule as the paper writes it, (2, N//2, N-3), in the paper's convention
    (output of decoder layer l). EAGLE's reference code captures the *inputs* of those layers,
    i.e. the outputs of (1, N//2-1, N-4): `convert_layer_ids(eagle3_layers(n), "input", "output", n)`."""
    if n_layers < 6:
        raise ValueError(f"the EAGLE-3 rule needs at least 6 layers, got {n_layers}")
    return (2, n_layers // 2, n_layers - 3)


def lowest_entropy_layers(Z, m: int, alpha: float = 1.0, normalize: str = "none") -> LayerSet:
    """The paper's negative control: the m layers with the lowest single-layer entropy."""
    entropies = single_layer_entropies(Z, alpha, normalize)
    _check_size(m, len(entropies))
    return tuple(sorted(int(l) for l in np.argsort(entropies, kind="stable")[:m]))


# "output": id l is the output of decoder layer l (0..N-1): the paper, elsi, SGLang/SpecForge.
# "input":  id l is the input of decoder layer l (1..N; input of l = output of l-1): EAGLE's code,
#           vLLM and speculators. Input id 0 would be the embeddings, which no set here contains.
CONVENTIONS = {"output": 0, "input": 1}
ENGINE_CONVENTIONS = {"elsi": "output", "paper": "output", "sglang": "output", "specforge": "output",
                      "eagle": "input", "vllm": "input", "speculators": "input"}


def convert_layer_ids(layers, source: str, target: str, n_layers: int) -> LayerSet:
    """Convert a layer set between id conventions (see CONVENTIONS; engine names are accepted).

    e.g. convert_layer_ids((1, 14, 26), "elsi", "vllm", 30) == (2, 15, 27).
    """
    def offset(name):
        key = ENGINE_CONVENTIONS.get(name, name)
        if key not in CONVENTIONS:
            raise ValueError(f"unknown convention {name!r}; use one of "
                             f"{sorted(CONVENTIONS) + sorted(ENGINE_CONVENTIONS)}")
        return CONVENTIONS[key]

    shift = offset(source)
    lowest = shift
    ids = list(layers)
    for layer in ids:
        if not lowest <= layer < n_layers + lowest:
            raise ValueError(f"layer id {layer} is out of range for {n_layers} layers in the {source!r} "
                             f"convention ({lowest}..{n_layers - 1 + lowest})")
    as_output = check_layers([l - shift for l in ids], n_layers)
    return tuple(l + offset(target) for l in as_output)
