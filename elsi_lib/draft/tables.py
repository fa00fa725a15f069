"""Accepted-token tables (paper Tables 2-3) with uncertainty: pure functions over per-question tau.

Input everywhere: a long DataFrame of per-question results with columns method, seed, nodes,
question_id, column (the paper's SpecBench column) and tau (mean accepted + 1 over the question's
rounds), plus rounds. A cell is the mean of its questions' tau (each question weighs the same; EAGLE's
scripts divide total tokens by total rounds instead, which weighs questions by their rounds: with
continuations of one fixed length the two differ little). AVG is sample-weighted: the mean over all
questions, as the paper's AVG over SpecBench's questions. Intervals are percentile bootstraps over questions (seeded), resampled
within each column so that the column sizes stay fixed; paired differences resample the same
questions for both methods.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .corpus import COLUMNS

AVG = "AVG"


def _columns(results) -> list[str]:
    return [c for c in COLUMNS if c in set(results["column"])]


def _resample(frame, n_boot: int, seed: int) -> dict[str, np.ndarray]:
    """{column: (n_boot, Q_c) bootstrap row indices of `frame` within that column}, plus AVG: their
    concatenation (n_boot, Q), a bootstrap stratified by column."""
    rng = np.random.default_rng(seed)
    draws = {col: rng.choice(rows, size=(n_boot, len(rows)), replace=True)
             for col, rows in frame.groupby("column", sort=False).indices.items()}
    draws[AVG] = np.concatenate(list(draws.values()), axis=1)
    return draws


def tau_table(results: pd.DataFrame, nodes: int, *, seed: int = 0, n_boot: int = 1000, model_seed: int = 0):
    """One block of Table 2/3: rows methods (training seed `model_seed`), columns the SpecBench
    columns and AVG; each cell tau with its 95% bootstrap interval. Returns (tau, low, high) frames."""
    block = results[(results.nodes == nodes) & (results.seed == model_seed)].dropna(subset=["tau"])
    methods = list(dict.fromkeys(block["method"]))
    cols = _columns(block) + [AVG]
    tau, low, high = (pd.DataFrame(index=methods, columns=cols, dtype=float) for _ in range(3))
    for method in methods:
        frame = block[block.method == method].sort_values("question_id").reset_index(drop=True)
        values, draws = frame["tau"].to_numpy(), _resample(frame, n_boot, seed)
        for col in cols:
            in_col = np.ones(len(frame), bool) if col == AVG else (frame["column"] == col).to_numpy()
            tau.loc[method, col] = values[in_col].mean()
            low.loc[method, col], high.loc[method, col] = np.percentile(values[draws[col]].mean(axis=1), [2.5, 97.5])
    return tau, low, high


def formatted(tau, low, high, *, bold_best: bool = True, markdown: bool = True) -> pd.DataFrame:
    """Cells as '2.51 [2.40, 2.62]', the best tau of each column in bold (Markdown)."""
    out = pd.DataFrame(index=tau.index, columns=tau.columns, dtype=object)
    for col in tau.columns:
        best = tau[col].max()
        for method in tau.index:
            text = f"{tau.loc[method, col]:.2f} [{low.loc[method, col]:.2f}, {high.loc[method, col]:.2f}]"
            out.loc[method, col] = f"**{text}**" if bold_best and markdown and tau.loc[method, col] == best else text
    return out


def paired_differences(results: pd.DataFrame, nodes: int, baseline: str = "EAGLE3", *, seed: int = 0,
                       n_boot: int = 1000, model_seed: int = 0) -> pd.DataFrame:
    """Each method's AVG tau minus the baseline's on the same questions, with a 95% paired bootstrap
    interval (both methods resampled with the same question indices) and the share of resamples
    where the method is ahead."""
    block = results[(results.nodes == nodes) & (results.seed == model_seed)]
    wide = block.pivot_table(index=["question_id", "column"], columns="method", values="tau").dropna()
    wide = wide.reset_index()
    if baseline not in wide:
        raise ValueError(f"baseline {baseline!r} has no results at {nodes} nodes")
    draws = _resample(wide, n_boot, seed)[AVG]
    rows = []
    for method in [m for m in dict.fromkeys(block["method"]) if m != baseline]:
        diff = (wide[method] - wide[baseline]).to_numpy()
        means = diff[draws].mean(axis=1)
        lo, hi = np.percentile(means, [2.5, 97.5])
        rows.append({"method": method, "nodes": nodes, "diff": diff.mean(), "low": lo, "high": hi,
                     "P(ahead)": float((means > 0).mean()), "questions": len(diff)})
    return pd.DataFrame(rows)


def seed_spread(results: pd.DataFrame, nodes: int) -> pd.DataFrame:
    """AVG tau per (method, training seed) for the methods trained with several seeds, with the
    range (max - min) across seeds: what a reseed alone moves."""
    block = results[results.nodes == nodes]
    per_seed = block.groupby(["method", "seed"])["tau"].mean().unstack("seed")
    per_seed = per_seed[per_seed.notna().sum(axis=1) > 1]
    per_seed.columns = [f"seed {s}" for s in per_seed.columns]
    per_seed["range"] = per_seed.max(axis=1) - per_seed.min(axis=1)
    return per_seed


def rank_correlation(x, y) -> float:
    """Spearman's rank correlation (average ranks on ties)."""
    x, y = pd.Series(np.asarray(x, float)).rank(), pd.Series(np.asarray(y, float)).rank()
    return float(np.corrcoef(x, y)[0, 1])


def summary(results: pd.DataFrame, methods: pd.DataFrame, nodes: int, *, seed: int = 0, n_boot: int = 1000,
            baseline: str = "EAGLE3", model_seed: int = 0) -> pd.DataFrame:
    """Per method at one tree size: AVG tau with its interval, the set entropy of its layers and the
    paired difference from `baseline`: the rows the scatter, the findings and the note quote."""
    tau, low, high = tau_table(results, nodes, seed=seed, n_boot=n_boot, model_seed=model_seed)
    diffs = paired_differences(results, nodes, baseline, seed=seed, n_boot=n_boot,
                               model_seed=model_seed).set_index("method")
    entropy = dict(zip(methods.method, methods.entropy))
    rows = []
    for method in tau.index:
        d = diffs.loc[method] if method in diffs.index else None
        rows.append({"method": method, "nodes": nodes, "tau": tau.loc[method, AVG], "low": low.loc[method, AVG],
                     "high": high.loc[method, AVG], "entropy": entropy.get(method, np.nan),
                     f"minus {baseline}": 0.0 if d is None else d["diff"],
                     "diff low": 0.0 if d is None else d["low"], "diff high": 0.0 if d is None else d["high"]})
    return pd.DataFrame(rows)
