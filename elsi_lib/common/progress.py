"""Progress bars for long work: a widget in a notebook, plain text in a terminal.

`make figures` runs the notebooks headless and sets ELSI_PROGRESS=stderr: the bars then go to the
kernel process's own stderr, which is the terminal running papermill, with rate and time left.
"""
from __future__ import annotations

import os
import sys


def progress_bar(*, disable: bool = False, **kwargs):
    """A tqdm bar (total=, desc=, unit=, initial= as tqdm takes them)."""
    if os.environ.get("ELSI_PROGRESS") == "stderr":
        from tqdm import tqdm

        return tqdm(file=sys.__stderr__, disable=disable, mininterval=5, dynamic_ncols=False, ncols=100, **kwargs)
    from tqdm.auto import tqdm

    return tqdm(disable=disable, **kwargs)
