"""The learning curve of one training run: the drafts as they were after about `Experiment.curve_prompts`
training prompts' worth of batches (one epoch of shuffled batches: after k of its B batches a draft
has seen about k / B of the data), kept by `train_drafts(snapshots=...)`, scored like the finished
drafts (held-out step accuracy, tau by replay), and tabulated per point (`learning_curve`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .tables import AVG, paired_differences, tau_table
from ...draft.checkpoints import finished_drafts, snapshot_key, snapshot_path
from ...draft.train import batch_plan


def _plan(exp, store, seed: int) -> list[list[int]]:
    return batch_plan([store.length(i) for i in range(len(store))], exp.train.batch_tokens, exp.train.epochs, seed)


def planned_batches(exp, store, seed: int) -> int:
    """How many batches `train_drafts` plans for `store` at this seed."""
    return len(_plan(exp, store, seed))


def trained_reply_tokens(exp, store, seed: int) -> np.ndarray:
    """(B,) reply tokens (the positions a draft is scored on, from each reply's start) seen after each
    of the B planned batches, cumulative."""
    return np.cumsum([sum(store.length(i) - store.start(i) for i in batch) for batch in _plan(exp, store, seed)])


def snapshot_batches(exp, n_prompts: int, total: int) -> tuple[int, ...]:
    """Batch counts for `exp.curve_prompts` out of `n_prompts` training prompts in `total` batches
    (prompt counts at or above `n_prompts` are the finished drafts, not snapshots)."""
    return tuple(sorted({max(1, round(total * p / n_prompts)) for p in exp.curve_prompts if 0 < p < n_prompts}))


def curve_drafts(model, group_name: str, full_key: dict, at: int) -> dict:
    """{method id: draft} of a group after `at` batches, from its snapshot."""
    return finished_drafts(snapshot_path(group_name, full_key, at), snapshot_key(full_key, at), model)


def curve_rows(rows, *, at: int, total: int, n_prompts: int, reply_tokens: int | None = None) -> pd.DataFrame:
    """Rows of a snapshot's scores with where on the curve they sit: batches trained, about how many
    training prompts' data that is and (when given) the reply tokens trained on."""
    frame = pd.DataFrame(rows).assign(batches=at, of_batches=total, prompts=round(n_prompts * at / total))
    return frame if reply_tokens is None else frame.assign(reply_tokens=int(reply_tokens))


def check_points(points: pd.DataFrame, steps: list[str]) -> None:
    """Refuse curve rows that one row cannot stand for: a point (prompts, temperature) holding several
    training seeds, reply token counts or batch counts, or a method with several step-k accuracies at
    a point (the table shows one of each; the rows of `curve_rows` have one)."""
    for (prompts, temperature), part in points.groupby(["prompts", "temperature"], sort=True):
        where = f"the curve point at {prompts} prompts, temperature {temperature}"
        _one_value(
            part,
            "seed",
            f"{where} holds training seeds",
            "the learning curve tabulates one seed per point (pass the rows of one seed, e.g. the first)",
        )
        for column in ("reply_tokens", "batches"):
            _one_value(part, column, f"{where} holds several {column}", "its rows sit at one place on the curve")
        for method, rows in part.groupby("method", sort=False):
            for step in steps:
                _one_value(rows, step, f"method {method!r} at {where} has several {step} accuracies", "a draft has one")


def _one_value(frame: pd.DataFrame, column: str, what: str, why: str) -> None:
    """Raise ValueError("<what> <the values>: <why>") when `column` holds several values."""
    values = pd.unique(frame[column])
    if len(values) > 1:
        raise ValueError(f"{what} {sorted(values.tolist())}: {why}")


def learning_curve(
    points: pd.DataFrame, nodes: int, *, baseline: str = "EAGLE3", seed: int = 0, n_boot: int = 1000
) -> pd.DataFrame:
    """One row per (point of the curve, temperature, method) at `nodes`: the held-out step-k accuracy,
    AVG tau with its 95% bootstrap interval and the paired difference from `baseline` on the same
    questions with its interval (`tables.tau_table`, `tables.paired_differences`). `points`: per-question
    rows of `curve_rows` (columns method, seed, temperature, nodes, question_id, column, tau,
    "step k", prompts, reply_tokens, batches), every point with one training seed (`check_points`)."""
    steps = [c for c in points.columns if c.startswith("step ")]
    check_points(points, steps)
    rows = []
    for (prompts, temperature), part in points.groupby(["prompts", "temperature"], sort=True):
        model_seed = int(part.seed.iloc[0])
        tau, low, high = tau_table(
            part, nodes, seed=seed, n_boot=n_boot, model_seed=model_seed, temperature=temperature
        )
        diffs = paired_differences(
            part, nodes, baseline, seed=seed, n_boot=n_boot, model_seed=model_seed, temperature=temperature
        ).set_index("method")
        accuracy = part.groupby("method")[steps].first()
        for method in tau.index:
            d = diffs.loc[method] if method in diffs.index else None
            rows.append(
                {
                    "prompts": int(prompts),
                    "reply_tokens": int(part.reply_tokens.iloc[0]),
                    "batches": int(part.batches.iloc[0]),
                    "temperature": float(temperature),
                    "nodes": nodes,
                    "method": method,
                    **accuracy.loc[method].to_dict(),
                    "tau": tau.loc[method, AVG],
                    "low": low.loc[method, AVG],
                    "high": high.loc[method, AVG],
                    f"minus {baseline}": 0.0 if d is None else d["diff"],
                    "diff low": np.nan if d is None else d["low"],
                    "diff high": np.nan if d is None else d["high"],
                }
            )
    return pd.DataFrame(rows)
