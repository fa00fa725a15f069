"""The learning curve of one training run: the drafts as they were after about `Experiment.curve_prompts`
training prompts' worth of batches (one epoch of shuffled batches: after k of its B batches a draft
has seen about k / B of the data), kept by `train_drafts(snapshots=...)`, scored like the finished
drafts (held-out step accuracy, tau by replay)."""
from __future__ import annotations

import pandas as pd

from .train import batch_plan, finished_drafts, snapshot_key, snapshot_path


def planned_batches(exp, store, seed: int) -> int:
    """How many batches `train_drafts` plans for `store` at this seed."""
    return len(batch_plan([store.length(i) for i in range(len(store))], exp.train.batch_tokens, exp.train.epochs,
                          seed))


def snapshot_batches(exp, n_prompts: int, total: int) -> tuple[int, ...]:
    """Batch counts for `exp.curve_prompts` out of `n_prompts` training prompts in `total` batches
    (prompt counts at or above `n_prompts` are the finished drafts, not snapshots)."""
    return tuple(sorted({max(1, round(total * p / n_prompts)) for p in exp.curve_prompts if 0 < p < n_prompts}))


def curve_drafts(model, group_name: str, full_key: dict, at: int) -> dict:
    """{method id: draft} of a group after `at` batches, from its snapshot."""
    return finished_drafts(snapshot_path(group_name, full_key, at), snapshot_key(full_key, at), model)


def curve_rows(rows: list[dict], *, at: int, total: int, n_prompts: int) -> pd.DataFrame:
    """Rows of a snapshot's scores with where on the curve they sit: batches trained and about how
    many training prompts' data that is."""
    return pd.DataFrame(rows).assign(batches=at, of_batches=total, prompts=round(n_prompts * at / total))
