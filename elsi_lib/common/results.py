"""Where the committed results live and what names their files (the study writes them):
`data/results/{table}_{kind}_{model slug}.csv`.
"""

from __future__ import annotations

import os
from pathlib import Path

from .cachefiles import REPO_ROOT


def results_dir() -> Path:
    """The committed results: $ELSI_RESULTS, else `data/results` in the repository."""
    return Path(os.environ.get("ELSI_RESULTS") or REPO_ROOT / "data" / "results")


def slug(model_name) -> str:
    """A file-name-safe form of a model name, hub id or path (e.g. Qwen/Qwen3-4B -> Qwen--Qwen3-4B)."""
    text = str(model_name).strip().rstrip("/\\")
    text = text.replace("/", "--").replace("\\", "--")
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in text)


def table_name(table: str, kind: str, model) -> str:
    """The name (no suffix) of a table's `kind` ("paired", "question_tau", "accepted_tokens", ...) of
    `model`: the one place the study's result files are named."""
    return f"{table}_{kind}_{slug(model)}"


def result_path(table: str, kind: str, model, folder: Path | None = None) -> Path:
    """The CSV a table's `kind` of `model` lives in (`table_name`), in `folder` (default `results_dir()`)."""
    return Path(folder or results_dir()) / f"{table_name(table, kind, model)}.csv"
