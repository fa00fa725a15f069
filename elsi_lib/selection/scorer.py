"""Set entropies S_alpha(X_L) (paper Eq. 2 with Eq. 4-6) for many layer sets of one Z, and the
conditional CKA matrices M_L of Alg. 2: everything the selection algorithms (`select`) score with.

`SetScorer` has two interchangeable backends: "gram" (summed B x B Gram matrices and a batched
eigensolver, the default) and "naive" (an SVD of each explicit concatenation, the definition).
Both give the same sets and entropies to round-off.

Every choice is a "best k of these sets" question (`SetScorer.best`). For Shannon entropy the gram
backend answers it without scoring every set. An upper bound on S_1 of any set follows from
per-layer quantities, with no eigensolve: its purity tr(G^2)/tr(G)^2 (`bounds.shannon_upper_bound`)
and a bracket on its largest eigenvalue from one power step (`bounds.top_eigenvalue_bracket`,
`bounds.shannon_upper_bound_dominant`). The k sets of highest bound are scored; their worst score
is a floor, and only sets whose bound reaches it are scored next. The answer is the same as
scoring them all.
"""

from __future__ import annotations

import numpy as np

from .bounds import BoundTerms, layer_bound_terms, set_upper_bounds
from .cka import _cka_from_products, center_gram, conditional_cka_matrices
from ..common.checks import LayerSet, as_layer_stack, check_alpha, check_normalize
from .entropy import concat_layers, grams_of, matrix_entropy, spectrum_entropy
from .scale import power_of_two_shifts
from .threads import MIN_PARALLEL, WORKERS, parallel_map

_CHUNK = 4096  # sets per batched eigensolve or bound pass (bounds memory: 4096 x B x B float64)


class SetScorer:
    """Set entropies S_alpha(X_L) for many layer sets of one Z (N, B, d).

    Z at any scale: where its scale is extreme it is multiplied by a power of two first
    (`scale.power_of_two_shifts`; exact, and the same for all layers with normalize="none", so no
    entropy or CKA changes). self.Z and self.grams are then those of the rescaled Z; on ordinary data
    they are Z and its Grams, bit for bit."""

    def __init__(self, Z, alpha: float = 1.0, normalize: str = "none", backend: str = "gram"):
        if backend not in ("gram", "naive"):
            raise ValueError(f"backend must be 'gram' or 'naive', got {backend!r}")
        self.alpha, self.normalize, self.backend = check_alpha(alpha), check_normalize(normalize), backend
        self.Z = as_layer_stack(Z, check_finite=False)  # checked from the layers' peaks just below
        self.n_layers = self.Z.shape[0]
        shifts = power_of_two_shifts(self.Z, normalize == "none")  # (N,); raises for NaN/Inf, all-zero layers
        if shifts.any():
            self.Z = np.ldexp(self.Z, shifts[:, None, None])
        parts = np.array_split(self.Z, min(WORKERS, self.n_layers))
        self.grams = np.concatenate(parallel_map(lambda part: grams_of(part, normalize), parts))  # (N, B, B)
        self.n_evaluated = 0
        self._memo: dict[LayerSet, float] = {}
        self._products: np.ndarray | None = None  # (N, N) products of the centered Grams, on first use
        self._bound_terms: BoundTerms | None = None  # `bounds.layer_bound_terms`, on first use

    def upper_bounds(self, sets: list[LayerSet]) -> np.ndarray:
        """An upper bound on the entropy of each set, without an eigensolve; +inf where none is
        available (the naive backend, or alpha != 1). Padded by 1e-9 (relative) so that round-off
        can never let it fall below the exact entropy.

        Two bounds, the smaller kept: the purity bound and the dominant-eigenvalue bound, both sums
        of per-layer terms computed once per scorer (`bounds.layer_bound_terms`,
        `bounds.set_upper_bounds`)."""
        if self.backend == "naive" or self.alpha != 1.0:
            return np.full(len(sets), np.inf)
        if len(sets) > _CHUNK:  # bounds memory: the gather in set_upper_bounds is (sets, |L|, |L|, B)
            return np.concatenate([self.upper_bounds(sets[i : i + _CHUNK]) for i in range(0, len(sets), _CHUNK)])
        if self._bound_terms is None:
            self._bound_terms = layer_bound_terms(self.grams)
        return set_upper_bounds(self._bound_terms, sets)

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
                wanted += ranked[keep : keep + int(np.count_nonzero(bounds[keep:] >= floor))]  # bounds descend
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
        n_chunks = max(-(-len(sets) // _CHUNK), min(WORKERS, len(sets) // MIN_PARALLEL), 1)
        bounds = np.linspace(0, len(sets), n_chunks + 1).astype(int)  # equal chunks, one per worker
        chunks = [sets[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
        return np.concatenate(parallel_map(self._gram_chunk, chunks))

    def _gram_chunk(self, sets: list[LayerSet]) -> np.ndarray:
        index = np.array(sets)  # (n, |L|)
        return spectrum_entropy(self.grams[index].sum(axis=1), self.alpha)  # (n, B, B) -> (n,)

    def conditional_cka(self, sets: list[LayerSet]) -> np.ndarray:
        """M_L (N, N) of Alg. 2 for each set L in `sets`: (len(sets), N, N)."""
        if self.backend == "naive":
            out = []
            for layers in sets:
                members = [
                    concat_layers(self.Z, sorted(set(layers) | {i}), self.normalize) for i in range(self.n_layers)
                ]
                centered = center_gram(np.stack([X @ X.T for X in members])).reshape(self.n_layers, -1)
                out.append(_cka_from_products(centered @ centered.T))
            return np.stack(out)
        if self._products is None:
            centered = center_gram(self.grams).reshape(self.n_layers, -1)  # (N, B*B)
            self._products = centered @ centered.T
        return conditional_cka_matrices(self._products, sets)
