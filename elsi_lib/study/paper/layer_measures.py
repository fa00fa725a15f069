"""The paper's measurements of the layers (Figs. 1-6) as functions the notebooks call: the tables and
derived statistics built from LayerStats (Table 1, the layer sets each method chooses: `layer_sets`). The data they start from comes from `captures.paper_stats`:
calibration conversations and one capture of every position selection per model.

A notebook cell calls one function per figure or table; the `*_findings` functions give the numbers
its Findings cell quotes, so that the prose is rendered from the run rather than copied into it.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ...selection.cka import COMPARTMENT_PROMINENCE, Compartments, compartments, cka_matrix  # noqa: F401
from ...hidden.layerstats import LayerStats
from ...selection.scorer import SetScorer
from ...selection.select import single_layer_entropies
from ...selection.stability import MAX_BOOTSTRAP_RESAMPLES, MIN_BOOTSTRAP_PROMPTS, bootstrap_choices  # noqa: F401

Stats = dict[str, dict[str, LayerStats]]  # {model: {selection: LayerStats}}, as `paper_stats` returns
REGIMES = ("early", "middle", "late")
PAPER_FIG4 = {"early reduction %": 48.4, "middle reduction %": 45.8, "late reduction %": 35.6}  # Qwen3-4B


def capture_label(stats: LayerStats) -> str:
    """'rho = 0.3, B = 32': the capture settings a figure title shows, read from the capture itself."""
    return f"rho = {stats.metadata['rho']}, B = {stats.metadata['block']}"


# ---------------------------------------------------------------- the activation wave (Fig. 1-2)


def entropy_wave(stats: LayerStats) -> pd.DataFrame:
    """Fig. 1's numbers, one row per layer (index `layer`): mean and std over prompts of each prompt's
    own S_1 (Eq. 6 of its block average), and S_1 of Z (all prompts' blocks)."""
    per_prompt = stats.sample_entropy  # (S, N)
    return pd.DataFrame(
        {
            "mean S_1 over prompts": per_prompt.mean(axis=0),
            "std over prompts": per_prompt.std(axis=0, ddof=1),
            "S_1 of Z (all prompts)": stats.layer_entropy(),
        },
        index=pd.RangeIndex(stats.n_layers, name="layer"),
    )


def entropy_summary(stats: Stats, selection: str = "entropy") -> pd.DataFrame:
    """Fig. 2's numbers, one row per model: where S_1 of Z peaks and bottoms out, its range, and the
    median over layers of the energy share of Z's largest row."""
    rows = []
    for name, by_selection in stats.items():
        curve = by_selection[selection].layer_entropy()  # (N,)
        rows.append(
            {
                "model": name,
                "layers": len(curve),
                "argmax layer": int(np.argmax(curve)),
                "max S_1": curve.max(),
                "argmin layer": int(np.argmin(curve)),
                "min S_1": curve.min(),
                "range": np.ptp(curve),
                "top-row energy share, median": float(np.median(by_selection[selection].top_row_energy_share())),
            }
        )
    return pd.DataFrame(rows)


def wave_findings(stats: Stats, trough_fraction: float = 0.1) -> pd.DataFrame:
    """Notebook 01's findings per model: S_1 of Z at its peak, both ends and lowest layer, the trough
    (layers below `trough_fraction` x the maximum), the median top-row share, the same curve with the
    template positions excluded, and how closely each prompt's curve follows the mean (Fig. 1)."""
    rows = []
    for name, by_selection in stats.items():
        curve, plain = by_selection["entropy"].layer_entropy(), by_selection["entropy_no_template"].layer_entropy()
        per_prompt = by_selection["entropy"].sample_entropy  # (S, N)
        mean = per_prompt.mean(axis=0)
        trough = np.flatnonzero(curve < trough_fraction * curve.max())
        rows.append(
            {
                "model": name,
                "layers": len(curve),
                "argmax layer": int(np.argmax(curve)),
                "max S_1": curve.max(),
                "S_1 first layer": curve[0],
                "S_1 last layer": curve[-1],
                "argmin layer": int(np.argmin(curve)),
                "min S_1": curve.min(),
                f"layers below {trough_fraction:g} x max": _runs(trough),
                "median top-row share": float(np.median(by_selection["entropy"].top_row_energy_share())),
                "range S_1, template excluded": np.ptp(plain),
                "min S_1, template excluded": plain.min(),
                "median corr. prompt vs mean": float(np.median([np.corrcoef(row, mean)[0, 1] for row in per_prompt])),
            }
        )
    return pd.DataFrame(rows)


def _runs(layers) -> str:
    """'2-18, 21' for the sorted layer indices [2, 3, ..., 18, 21]."""
    layers, runs = [int(l) for l in layers], []
    for l in layers:
        if runs and l == runs[-1][1] + 1:
            runs[-1][1] = l
        else:
            runs.append([l, l])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs) or "none"


# ---------------------------------------------------------------- pair entropy (Fig. 3)


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


def pair_gains(panels: dict[str, tuple[np.ndarray, np.ndarray]]) -> pd.DataFrame:
    """Fig. 3's table: for each model's (seed layers, pair table) from `pair_entropy_table`, one row
    per seed: S_1 alone, its best companion and the gain, the median gain over all companions, and
    how many companions lower S_1."""
    rows = []
    for name, (seeds, table) in panels.items():
        for pair_row, seed in zip(table, seeds):
            rows.append({"model": name, "seed layer": int(seed), **_gains(pair_row, int(seed))})
    return pd.DataFrame(rows)


def _gains(pair_row: np.ndarray, seed: int) -> dict:
    """One seed's row of `pair_gains` from its pair entropies (N,) (entry `seed`: the seed alone)."""
    alone = pair_row[seed]
    others = np.delete(np.arange(len(pair_row)), seed)  # (N-1,)
    best = others[np.argmax(pair_row[others])]
    return {
        "S_1 alone": alone,
        "best companion": int(best),
        "S_1 with it": pair_row[best],
        "gain": pair_row[best] - alone,
        "median gain": float(np.median(pair_row[others] - alone)),
        "companions that lower S_1": int(np.sum(pair_row[others] < alone)),
    }


def pair_findings(gains: pd.DataFrame, n_layers: dict[str, int]) -> pd.DataFrame:
    """Notebook 02's findings per model from `pair_gains` (n_layers: {model: N}): how many companions
    lower S_1 of the top seed and its median change, the share of all (seed, companion) pairs that
    lose entropy, and the largest gain with its seed and companion."""
    rows = []
    for name, g in gains.groupby("model", sort=False):
        top, best = g.iloc[0], g.loc[g.gain.idxmax()]
        rows.append(
            {
                "model": name,
                "top seed": int(top["seed layer"]),
                "companions": n_layers[name] - 1,
                "companions lowering it": int(top["companions that lower S_1"]),
                "median change, top seed": top["median gain"],
                "pairs that lose entropy": g["companions that lower S_1"].sum() / (len(g) * (n_layers[name] - 1)),
                "largest gain": best.gain,
                "its seed": int(best["seed layer"]),
                "its companion": int(best["best companion"]),
            }
        )
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- CKA compartments (Fig. 5-6)


def boundary_table(views: dict[tuple[str, str], Compartments]) -> pd.DataFrame:
    """Fig. 5's table, one row per (model, selection): the boundaries, the mean off-diagonal CKA
    (how alike the layers look) and the largest transition score with its contrast to the median."""
    rows = []
    for (name, selection), view in views.items():
        off_diagonal = view.cka[~np.eye(len(view.cka), dtype=bool)]  # (N(N-1),)
        rows.append(
            {
                "model": name,
                "selection": selection,
                "boundaries (after layer)": view.boundaries.tolist(),
                "mean off-diagonal CKA": off_diagonal.mean(),
                "max delta": view.scores.max(),
                "delta contrast (max / median)": view.scores.max() / np.median(view.scores),
            }
        )
    return pd.DataFrame(rows)


def compartment_findings(stats: Stats, boundaries: pd.DataFrame) -> pd.DataFrame:
    """Notebook 04's findings per model from `boundary_table`: the boundaries, mean off-diagonal CKA
    and largest transition score with all tokens and with the entropy filter side by side, and where
    S_1 of the filtered Z (notebook 01's curve) changes most between neighbouring layers."""
    table = boundaries.set_index(["model", "selection"])
    rows = []
    for name, by_selection in stats.items():
        step = np.abs(np.diff(by_selection["entropy"].layer_entropy()))  # (N-1,)
        row = {"model": name}
        for column, short in [
            ("boundaries (after layer)", "boundaries"),
            ("mean off-diagonal CKA", "mean CKA"),
            ("max delta", "max delta"),
        ]:
            row.update({f"{short}, {sel}": table.loc[(name, sel), column] for sel in ("all", "entropy")})
        rows.append({**row, "largest S_1 step (after layer)": int(np.argmax(step))})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- token filtering (Fig. 4)


def regimes(Z) -> tuple[np.ndarray, str]:
    """Label each layer early / middle / late: the two most prominent boundaries of `compartments(Z)`
    (the detector notebook 04 draws) split the depth; with fewer than two, thirds of the depth.
    Returns (labels (N,), how the split was made)."""
    n_layers = Z.shape[0]
    bounds = compartments(Z, top_k=2).boundaries
    if len(bounds) == 2:
        cut1, cut2, how = bounds[0] + 1, bounds[1] + 1, f"CKA boundaries after layers {bounds[0]} and {bounds[1]}"
    else:
        cut1, cut2 = math.ceil(n_layers / 3), math.ceil(2 * n_layers / 3)
        how = f"thirds of the depth (fewer than two CKA boundaries: {bounds.tolist()})"
    labels = np.array(["early"] * cut1 + ["middle"] * (cut2 - cut1) + ["late"] * (n_layers - cut2))
    return labels, how


def cross_prompt_variance(stats: LayerStats) -> np.ndarray:
    """Per layer, the variance across prompts of each prompt's own block-average entropy, (N,)."""
    return stats.sample_entropy.var(axis=0, ddof=1)


def variance_reduction(baseline: np.ndarray, filtered: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """Per regime, 1 - mean filtered variance / mean baseline variance (the paper's Fig. 4 numbers)."""
    return {r: float(1 - filtered[labels == r].mean() / baseline[labels == r].mean()) for r in REGIMES}


def variance_reduction_table(stats: Stats, regimes_by_model: dict[str, tuple[np.ndarray, str]]) -> pd.DataFrame:
    """Fig. 4's table: per model, each selection's variance reduction (%) against all tokens per
    regime (`regimes`), then the baseline's own row; with blocks and the median top-row share."""
    rows = []
    for name, by_selection in stats.items():
        labels, how = regimes_by_model[name]
        baseline = cross_prompt_variance(by_selection["all"])  # (N,)
        for selection in [s for s in by_selection if s != "all"] + ["all"]:
            s = by_selection[selection]
            reduction = {} if selection == "all" else variance_reduction(baseline, cross_prompt_variance(s), labels)
            rows.append(
                {
                    "model": name,
                    "selection": selection,
                    **{f"{r} reduction %": 100 * v for r, v in reduction.items()},
                    "regimes": how,
                    "blocks": s.counts["blocks"],
                    "median top-row share": float(np.median(s.top_row_energy_share())),
                }
            )
    return pd.DataFrame(rows)


def variance_reduction_vs_paper(reductions: pd.DataFrame) -> pd.DataFrame:
    """The paper's Fig. 4 numbers (Qwen3-4B) above each model's entropy-filter row of `reductions`."""
    ours = reductions[reductions.selection == "entropy"].set_index("model")[list(PAPER_FIG4)]
    return pd.concat([pd.DataFrame([PAPER_FIG4], index=["paper: Qwen3-4B"]), ours])


def variance_findings(stats: Stats, regimes_by_model: dict[str, tuple[np.ndarray, str]]) -> pd.DataFrame:
    """Notebook 03's findings, one row per (model, selection other than all): the variance across
    prompts over the whole depth as a multiple of all tokens' (mean over layers, like one regime
    spanning every layer), in how many regimes it is lower, and the median top-row share."""
    rows = []
    for name, by_selection in stats.items():
        baseline, labels = cross_prompt_variance(by_selection["all"]), regimes_by_model[name][0]
        for selection, s in by_selection.items():
            if selection != "all":
                variance = cross_prompt_variance(s)  # (N,)
                lower = sum(v > 0 for v in variance_reduction(baseline, variance, labels).values())
                rows.append(
                    {
                        "model": name,
                        "selection": selection,
                        "variance / all tokens' (whole depth)": variance.mean() / baseline.mean(),
                        "regimes where it is lower": f"{lower} of {len(REGIMES)}",
                        "median top-row share": float(np.median(s.top_row_energy_share())),
                    }
                )
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- notebook 05: selection (Table 1, Fig. 7)
