"""The committed notebooks carry no outputs, and each is exactly what the git filter writes
(nbstripout with the Makefile's NBSTRIPOUT_ARGS, set up by the venv target, see .gitattributes): so
the filter never rewrites a committed notebook, and one saved in JupyterLab adds nothing to `git diff`."""

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def filter_args() -> list[str]:
    """The clean filter's options: the Makefile's NBSTRIPOUT_ARGS (continuation lines joined)."""
    makefile = (ROOT / "Makefile").read_text().replace("\\\n", " ")
    match = re.search(r"^NBSTRIPOUT_ARGS :?= (.*)$", makefile, re.M)
    assert match, "the Makefile no longer defines NBSTRIPOUT_ARGS"
    return shlex.split(match.group(1))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_notebook_has_no_outputs(path):
    cells = json.loads(path.read_text())["cells"]
    run = [i for i, c in enumerate(cells) if c["cell_type"] == "code" and (c["outputs"] or c["execution_count"])]
    assert not run, f"{path.name}: cells {run} have outputs or execution counts"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_notebook_is_what_the_git_filter_writes(path, tmp_path):
    pytest.importorskip("nbstripout")
    # run outside the repository, so that no git config of this checkout changes the result
    stripped = subprocess.run(
        [sys.executable, "-m", "nbstripout", *filter_args(), "--textconv", str(path)],
        cwd=tmp_path,
        capture_output=True,
        check=True,
    ).stdout
    assert stripped == path.read_bytes(), (
        f"{path.name} is not what the git filter writes (a cell without an id, or metadata it strips): "
        f"run `.venv/bin/nbstripout {shlex.join(filter_args())} notebooks/{path.name}` once"
    )


# each parameter file and the notebook(s) `make` injects it into (the Makefile's papermill -f lines, study/paper/notebook_runs.py)
PARAMETER_FILES = {
    "paper_scale.yaml": [p.name for p in NOTEBOOKS if p.name[:2] not in ("06", "07", "08", "09")],
    "tables_scale.yaml": ["06_accepted_tokens.ipynb"],
    "tables_qwen.yaml": ["06_accepted_tokens.ipynb"],
    "tables_strong.yaml": ["07_strong_drafts.ipynb"],
    "criteria_scale.yaml": ["08_selection_criteria.ipynb"],
    "families_scale.yaml": ["09_families.ipynb"],
    "criteria_small.yaml": ["08_selection_criteria.ipynb"],
    "families_small.yaml": ["09_families.ipynb"],
}


def declared_parameters(path) -> set:
    cells = [c for c in json.loads(path.read_text())["cells"] if "parameters" in c["metadata"].get("tags", [])]
    assert len(cells) == 1, f"{path.name}: {len(cells)} cells tagged parameters"
    return set(re.findall(r"^([A-Z_][A-Z0-9_]*)\s*=", "".join(cells[0]["source"]), re.M))


@pytest.mark.parametrize("name", sorted(PARAMETER_FILES))
def test_parameter_files_set_only_what_their_notebooks_declare(name):
    import yaml

    given = set(yaml.safe_load((ROOT / "notebooks" / name).read_text()))
    from elsi_lib.study.paper.notebook_runs import RUNS

    passed = f"-f notebooks/{name}" in (ROOT / "Makefile").read_text() or any(
        r.parameters == name for r in RUNS.values()
    )
    assert passed, f"no make target passes {name}"
    # paper_scale.yaml is shared by notebooks 00-05: each takes what it declares
    declared = set().union(*(declared_parameters(ROOT / "notebooks" / n) for n in PARAMETER_FILES[name]))
    assert given <= declared, f"{name} sets {sorted(given - declared)}, which no notebook it is passed to declares"
