"""The paper's experiments as functions the numbered notebooks call: the tables and derived
statistics built from LayerStats. The data they start from comes from `calibration.paper_stats`
(re-exported here): calibration conversations and one capture of every position selection per model.
"""
from __future__ import annotations

import math

import numpy as np

from .calibration import (SELECTIONS, calibration_conversations, capture_selections, describe, model_names,
                          paper_stats)
from .cka import cka_matrix, find_boundaries, transition_scores
from .layerstats import LayerStats
from .select import (SetScorer, eagle2_layers, eagle3_layers, elsi, elsi_c, exhaustive,
                     lowest_entropy_layers, single_layer_entropies)

# ---------------------------------------------------------------- tables and derived statistics

def pair_entropy_table(Z, seeds: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """Fig. 3: S_1([H_i | H_j]) for the `seeds` layers of highest S_1 (rows, best first) against every
    layer j (columns); the diagonal entry i = j is S_1(H_i) alone. Returns (seed layers, (k, N))."""
    single = single_layer_entropies(Z)
    order = np.argsort(-single, kind="stable")[:seeds]
    scorer = SetScorer(Z)
    n_layers = len(single)
    table = np.empty((len(order), n_layers))
    for row, i in enumerate(order):
        companions = [j for j in range(n_layers) if j != i]
        table[row, companions] = scorer.entropies([tuple(sorted((int(i), j))) for j in companions])
        table[row, i] = single[i]
    return order, table


def cross_prompt_variance(stats: LayerStats) -> np.ndarray:
    """Per layer, the variance across prompts of each prompt's own block-average entropy, (N,)."""
    return stats.sample_entropy.var(axis=0, ddof=1)


def regimes(Z, *, relative_prominence: float = 0.2) -> tuple[np.ndarray, str]:
    """Label each layer early / middle / late. The two most prominent CKA transition peaks (Eq. 8)
    split the depth; with fewer than two peaks, thirds of the depth. Returns (labels (N,), how)."""
    n_layers = Z.shape[0]
    bounds = np.sort(find_boundaries(transition_scores(cka_matrix(Z)), relative_prominence=relative_prominence,
                                     top_k=2, include_edges=False))
    if len(bounds) == 2:
        cut1, cut2, how = bounds[0] + 1, bounds[1] + 1, f"CKA boundaries after layers {bounds[0]} and {bounds[1]}"
    else:
        cut1, cut2, how = math.ceil(n_layers / 3), math.ceil(2 * n_layers / 3), "thirds of the depth (CKA gave < 2 peaks)"
    labels = np.array(["early"] * cut1 + ["middle"] * (cut2 - cut1) + ["late"] * (n_layers - cut2))
    return labels, how


def variance_reduction(baseline: np.ndarray, filtered: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """Per regime, 1 - mean filtered variance / mean baseline variance (the paper's Fig. 4 numbers)."""
    return {r: float(1 - filtered[labels == r].mean() / baseline[labels == r].mean())
            for r in ("early", "middle", "late")}


def selection_table(Z, *, sizes=(1, 2, 3), normalize: str = "none", min_single_layer: int | None = None):
    """Table 1 rows: layer sets and set entropies of EAGLE2, EAGLE3, ELSI, ELSI-C, the exhaustive
    optimum and the lowest-entropy control, for each m in `sizes` (fixed baselines at their own m)."""
    import pandas as pd

    from .entropy import set_entropy

    n_layers = Z.shape[0]
    rows = []

    def add(method, m, layers, entropy=None):
        value = set_entropy(Z, layers, normalize=normalize) if entropy is None else entropy
        rows.append({"method": method, "m": m, "layers": tuple(int(l) for l in layers), "entropy": float(value)})

    add("EAGLE2", 1, eagle2_layers(n_layers))
    add("EAGLE3", 3, eagle3_layers(n_layers))
    for m in sizes:
        add("ELSI", m, *_pair(elsi(Z, m, normalize=normalize, min_single_layer=min_single_layer)))
        add("ELSI-C", m, *_pair(elsi_c(Z, m, normalize=normalize, min_single_layer=min_single_layer)))
        add("exhaustive", m, *_pair(exhaustive(Z, m, normalize=normalize)))
        add("lowest-entropy control", m, lowest_entropy_layers(Z, m, normalize=normalize))
    return pd.DataFrame(rows)


def _pair(selection):
    return selection.layers, selection.entropy


def bootstrap_choices(stats: LayerStats, m: int = 3, *, n_boot: int = 100, seed: int = 0, method=elsi,
                      progress: bool = True):
    """Stability of the choice: resample the calibration prompts with replacement `n_boot` times
    and rerun `method`; returns a DataFrame of chosen sets with their counts and shares."""
    import pandas as pd
    from tqdm.auto import tqdm

    rng = np.random.default_rng(seed)
    n_samples = len(stats.sample_blocks)
    weights = rng.multinomial(n_samples, np.full(n_samples, 1.0 / n_samples), size=n_boot)  # (R, S)
    chosen = []
    for start in tqdm(range(0, n_boot, 10), desc="bootstrap (10 replicates a step)", disable=not progress):
        chosen += [method(Z, m).layers for Z in stats.resampled_Z(weights[start:start + 10])]
    counts = pd.Series(chosen).value_counts()
    return pd.DataFrame({"layers": counts.index, "count": counts.values, "share": counts.values / n_boot})

