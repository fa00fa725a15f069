"""Stability of a choice (`elsi select --stability`, Table 1's bootstrap): resample the calibration
prompts with replacement and rerun the selection on each resample's block means (`LayerStats.resampled_Z`).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Protocol

import numpy as np
import pandas as pd

from ..common.checks import is_integer
from ..common.progress import progress_bar
from .select import elsi


class Resamplable(Protocol):
    """What the bootstrap reads of a capture (`hidden.layerstats.LayerStats` is one): each prompt's
    blocks, and Z's block means under per-prompt resample weights. Selection never imports the capture."""

    sample_blocks: np.ndarray | None  # (S,) blocks each prompt filled

    def resampled_Z(self, weights: np.ndarray) -> Iterable[np.ndarray]: ...  # (R, S) -> R of (N, B, d)


MIN_BOOTSTRAP_PROMPTS = 20  # below this, a bootstrap share says little (one prompt: always 100 %)
MAX_BOOTSTRAP_RESAMPLES = 100_000  # the resample weights (n_boot x prompts, int64) are drawn at once


def bootstrap_choices(
    stats: Resamplable, m: int = 3, *, n_boot: int = 100, seed: int = 0, method=elsi, progress: bool = True
):
    """Stability of the choice: resample the calibration prompts with replacement `n_boot` times
    and rerun `method`; returns a DataFrame of chosen sets with their counts and shares."""
    if not is_integer(n_boot) or not 1 <= n_boot <= MAX_BOOTSTRAP_RESAMPLES:
        raise ValueError(
            f"n_boot must be an integer from 1 to {MAX_BOOTSTRAP_RESAMPLES} (the number of "
            f"resamples), got {type(n_boot).__name__} {n_boot!r}"
        )
    if stats.sample_blocks is None:
        raise ValueError("per-sample sums were not kept: capture with keep_samples=True to bootstrap")
    n_samples = len(stats.sample_blocks)
    if n_samples < MIN_BOOTSTRAP_PROMPTS:
        warnings.warn(
            f"the bootstrap rests on {n_samples} prompt(s) with a full block (fewer than "
            f"{MIN_BOOTSTRAP_PROMPTS}): resamples of so few prompts barely differ, so the shares "
            "overstate how stable the choice is",
            UserWarning,
            stacklevel=2,
        )
    rng = np.random.default_rng(seed)
    weights = rng.multinomial(n_samples, np.full(n_samples, 1.0 / n_samples), size=n_boot)  # (R, S)
    chosen = []
    bar = progress_bar(total=n_boot, desc="bootstrap", unit="resample", disable=not progress)
    for start in range(0, n_boot, 10):  # 10 replicates of Z at a time bound the memory
        chosen += [method(Z, m).layers for Z in stats.resampled_Z(weights[start : start + 10])]
        bar.update(len(weights[start : start + 10]))
    bar.close()
    counts = pd.Series(chosen).value_counts()
    return pd.DataFrame({"layers": counts.index, "count": counts.values, "share": counts.values / n_boot})
