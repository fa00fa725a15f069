"""Two methods compared at the seed level: the difference in AVG tau (accepted tokens per target
forward) between two methods' drafts, with a 95% interval that holds what a reseed moves as well as
what the questions do.

For methods A and B, each trained at n_A and n_B seeds and evaluated on the same questions:

    d_q   = mean over A's seeds of tau_q  -  mean over B's seeds of tau_q     (paired by question q)
    diff  = mean_q d_q
    v_q   = var_q(d_q) / n_questions                      the questions' share
    v_s   = s2_seed * (1/n_A + 1/n_B)                     the seeds' share

s2_seed is the between-seed variance of a draft's AVG tau on the same questions, pooled over the
protocol's methods with two or more seeds (`seed_variance`, df = sum of (seeds - 1)). The interval is
diff +- t(df) sqrt(v_q + v_s) with Welch-Satterthwaite's df. Where no method of the protocol has two
seeds, the seeds' share is unknown: the interval is the questions' alone and says so (`seed_level`
"no": a difference between two single-seed drafts is one training run against another).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

LEVEL = 0.95


def _block(rows: pd.DataFrame, temperature: float, nodes: int) -> pd.DataFrame:
    block = rows[(rows.temperature == temperature) & (rows.nodes == nodes)]
    repeated = block.duplicated(["method", "seed", "question_id"])
    if repeated.any():
        r = block[repeated].iloc[0]
        raise ValueError(
            f"{r.method} seed {r.seed} has question {r.question_id} twice at T = {temperature:g}, "
            f"{nodes} nodes: one draft's question is one row"
        )
    return block


def per_seed(block: pd.DataFrame, method: str) -> pd.DataFrame:
    """(questions, seeds) of one method's tau: a column per training seed that has a tau here (a seed
    whose every question lacks one says nothing of the method, and is not counted as a seed)."""
    mine = block[block.method == method]
    return mine.pivot(index="question_id", columns="seed", values="tau").sort_index().dropna(axis=1, how="all")


def seed_variance(rows: pd.DataFrame, *, temperature: float, nodes: int) -> tuple[float, int]:
    """(s2, df): the between-seed variance of AVG tau (over the questions every seed of the method has
    a round on), pooled over the methods with two or more seeds; (nan, 0) without one."""
    block = _block(rows, temperature, nodes)
    ss, df = 0.0, 0
    for method in block.method.unique():
        wide = per_seed(block, method).dropna()
        if wide.shape[1] < 2 or wide.empty:
            continue
        avg = wide.mean(axis=0).to_numpy(float)  # (seeds,)
        ss += float(((avg - avg.mean()) ** 2).sum())
        df += len(avg) - 1
    return (ss / df, df) if df else (np.nan, 0)


def _half_width(values: np.ndarray, seed_share: float, s2: float, df_s: int) -> tuple[float, float, float, float]:
    """(half-width of the 95% interval, the questions' variance, the seeds', the df) of a mean over the questions
    `values` (questions,) whose seeds add `seed_share` * s2 (pooled between-seed variance on df_s degrees
    of freedom; none when df_s is 0): t at Welch-Satterthwaite's df times the root of the summed variances."""
    n = len(values)
    v_q = float(values.var(ddof=1) / n)
    v_s = 0.0 if df_s == 0 else s2 * seed_share
    v = v_q + v_s
    denominator = v_q**2 / (n - 1) + (v_s**2 / df_s if df_s else 0.0)
    df = v**2 / denominator if denominator > 0 else float(n - 1)
    return float(stats.t.ppf(0.5 + LEVEL / 2, df) * np.sqrt(v)), v_q, v_s, float(df)


def difference(
    rows: pd.DataFrame, method: str, baseline: str = "EAGLE3", *, temperature: float, nodes: int = 60
) -> dict:
    """`method` minus `baseline` at the seed level (module docstring): diff, low, high, the questions
    paired, each side's seeds, the seeds' and questions' variances, and whether the interval holds
    the seeds' variance ("yes") or could not ("no": no method of `rows` has two seeds)."""
    block = _block(rows, temperature, nodes)
    a, b = per_seed(block, method), per_seed(block, baseline)
    if a.empty or b.empty:
        missing = method if a.empty else baseline
        raise ValueError(f"{missing} has no rows at T = {temperature:g}, {nodes} nodes")
    qa, qb = a.mean(axis=1, skipna=True), b.mean(axis=1, skipna=True)
    both = qa.index.intersection(qb.index)
    d = (qa[both] - qb[both]).dropna().to_numpy(float)  # (questions,)
    n = len(d)
    out = {
        "method": method,
        "baseline": baseline,
        "temperature": float(temperature),
        "nodes": nodes,
        "questions": n,
        "seeds": a.shape[1],
        "baseline seeds": b.shape[1],
    }
    if n < 2:
        return {**out, "diff": np.nan, "low": np.nan, "high": np.nan, "seed level": "no"}
    s2, df_s = seed_variance(rows, temperature=temperature, nodes=nodes)
    half, v_q, v_s, df = _half_width(d, 1 / a.shape[1] + 1 / b.shape[1], s2, df_s)
    diff = float(d.mean())
    return {
        **out,
        "diff": diff,
        "low": diff - half,
        "high": diff + half,
        "questions variance": v_q,
        "seed variance": v_s,
        "df": float(df),
        "seed level": "yes" if df_s else "no",
    }


def level(rows: pd.DataFrame, method: str, *, temperature: float, nodes: int) -> dict:
    """One method's AVG tau (the seed-averaged mean over the questions) with its seed-level 95% interval:
    the questions' variance of the seed-averaged tau plus the protocol's pooled seed variance over the
    method's seeds (`seed_variance`); the questions' alone, said so, where no method has two seeds."""
    block = _block(rows, temperature, nodes)
    wide = per_seed(block, method)
    q = wide.mean(axis=1, skipna=True).dropna().to_numpy(float)  # (questions,)
    n, seeds = len(q), wide.shape[1]
    if n < 2:
        return {
            "AVG": float(q.mean()) if n else np.nan,
            "low": np.nan,
            "high": np.nan,
            "seeds": seeds,
            "seed level": "no",
        }
    s2, df_s = seed_variance(rows, temperature=temperature, nodes=nodes)
    half = _half_width(q, 1 / seeds, s2, df_s)[0]
    avg = float(q.mean())
    return {"AVG": avg, "low": avg - half, "high": avg + half, "seeds": seeds, "seed level": "yes" if df_s else "no"}
