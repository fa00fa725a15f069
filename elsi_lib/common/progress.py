"""Progress bars for long work: a widget in a notebook, plain text in a terminal.

`make figures` runs the notebooks headless and sets ELSI_PROGRESS=stderr: the bars then go to the
kernel process's own stderr, which is the terminal running papermill, with rate and time left.
"""

from __future__ import annotations

import json
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pandas as pd


def progress_bar(*, disable: bool = False, **kwargs):
    """A tqdm bar (total=, desc=, unit=, initial= as tqdm takes them)."""
    if os.environ.get("ELSI_PROGRESS") == "stderr":
        from tqdm import tqdm

        return tqdm(file=sys.__stderr__, disable=disable, mininterval=5, dynamic_ncols=False, ncols=100, **kwargs)
    from tqdm.auto import tqdm

    return tqdm(disable=disable, **kwargs)


class StageClock:
    """Wall-clock seconds per stage, summed over the times a stage runs; with `log`, each stage's
    time is also appended to that JSONL file as it ends (finished or interrupted), for `stage_history`."""

    def __init__(self, log=None) -> None:
        self.seconds: dict[str, float] = {}
        self.log = log

    @contextmanager
    def __call__(self, stage: str):
        start, finished = time.perf_counter(), False
        try:
            yield
            finished = True
        finally:
            seconds = time.perf_counter() - start
            self.seconds[stage] = self.seconds.get(stage, 0.0) + seconds
            if self.log is not None:
                Path(self.log).parent.mkdir(parents=True, exist_ok=True)
                with open(self.log, "a") as f:
                    f.write(
                        json.dumps(
                            {
                                "stage": stage,
                                "seconds": round(seconds, 1),
                                "finished": finished,
                                "ended": time.strftime("%Y-%m-%dT%H:%M:%S"),
                            }
                        )
                        + "\n"
                    )

    def frame(self):
        """A DataFrame: stage, seconds, and a total row."""

        rows = [{"stage": s, "seconds": round(v, 1)} for s, v in self.seconds.items()]
        return pd.DataFrame(rows + [{"stage": "total", "seconds": round(sum(self.seconds.values()), 1)}])


def stage_history(log):
    """The stage times a `StageClock(log)` appended, over every run that wrote them: a DataFrame of
    stage, seconds (summed), runs (how many times the stage ran) and interrupted (of those, how many
    ended early), in first-run order, and a total row. A torn last line (a run killed mid-write) is skipped."""

    entries = []
    for line in Path(log).read_text().splitlines() if Path(log).is_file() else []:
        try:
            entries.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    frame = pd.DataFrame(entries, columns=["stage", "seconds", "finished", "ended"])
    by = frame.groupby("stage", sort=False).agg(
        seconds=("seconds", "sum"),
        runs=("seconds", "size"),
        interrupted=("finished", lambda f: int((~f.astype(bool)).sum())),
    )
    by = by.reset_index()
    total = {"stage": "total", "seconds": by.seconds.sum(), "runs": by.runs.sum(), "interrupted": by.interrupted.sum()}
    return pd.concat([by, pd.DataFrame([total])], ignore_index=True)
