"""The study's runs, declared once: which notebook each `make` target executes with which parameter
file, what it needs first and which results it writes. The Makefile's one papermill rule calls
`python -m elsi_lib.study.paper.notebook_runs TARGET`, which prints the run's plan and executes the notebook into
build/ (headless, the `elsi` kernel, progress on the terminal).
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass

from ...common.cachefiles import REPO_ROOT


@dataclass(frozen=True)
class StudyRun:
    notebook: str  # in notebooks/
    parameters: str  # the parameter file papermill injects (notebooks/)
    executed: str  # the executed copy, in build/
    writes: str  # the results it writes (data/results/, figures/)
    needs: str  # what must exist before it runs (the Makefile's prerequisites say the same)


RUNS = {
    "tables": StudyRun(
        "06_accepted_tokens.ipynb",
        "tables_scale.yaml",
        "06_accepted_tokens.ipynb",
        "table2_*_smollm2-135m, fig08_*_smollm2-135m",
        "the calibration statistics (computed when missing)",
    ),
    "tables-qwen": StudyRun(
        "06_accepted_tokens.ipynb",
        "tables_qwen.yaml",
        "06_accepted_tokens_qwen.ipynb",
        "table3_*_qwen2.5-coder-0.5b, fig08_*_qwen2.5-coder-0.5b",
        "the Qwen model (make models) and its vLLM replies (make replies-qwen, archived)",
    ),
    "tables-strong": StudyRun(
        "07_strong_drafts.ipynb",
        "tables_strong.yaml",
        "07_strong_drafts.ipynb",
        "table2_strong_*_smollm2-135m, table2_learning_curve_*, fig09_*",
        "the strong run's vLLM replies (make replies-strong, archived)",
    ),
    "criteria": StudyRun(
        "08_selection_criteria.ipynb",
        "criteria_scale.yaml",
        "08_selection_criteria.ipynb",
        "criteria_*, fig10_*",
        "the drafts' per-question rows in data/results (committed)",
    ),
    "families": StudyRun(
        "09_families.ipynb",
        "families_scale.yaml",
        "09_families.ipynb",
        "families_*, fig11_*",
        "the accepted-token tables of both families in data/results (committed)",
    ),
    "ledger-tables": StudyRun(
        "10_ledger.ipynb",
        "ledger_scale.yaml",
        "10_ledger.ipynb",
        "ledger_findings, criteria_pooled, numeric_twins",
        "the draft records in data/drafts (committed)",
    ),
}


def command(name: str) -> list[str]:
    """The papermill command of run `name`."""
    run = RUNS[name]
    python = REPO_ROOT / ".venv" / "bin" / "papermill"
    return [
        str(python if python.exists() else "papermill"),
        "--no-progress-bar",
        "--cwd",
        "notebooks",
        "-k",
        "elsi",
        "-f",
        f"notebooks/{run.parameters}",
        f"notebooks/{run.notebook}",
        f"build/{run.executed}",
    ]


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in RUNS:
        print(f"usage: python -m elsi_lib.study.paper.notebook_runs {{{','.join(RUNS)}}}", file=sys.stderr)
        return 2
    run = RUNS[argv[0]]
    print(
        f"make {argv[0]}: notebooks/{run.notebook} with notebooks/{run.parameters} -> build/{run.executed}\n"
        f"  needs: {run.needs}\n  writes: {run.writes}",
        flush=True,
    )
    for folder in ("build", "figures", "data/results"):
        (REPO_ROOT / folder).mkdir(parents=True, exist_ok=True)
    return subprocess.run(command(argv[0]), cwd=REPO_ROOT, env={**os.environ, "ELSI_PROGRESS": "stderr"}).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
