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
    stripped = subprocess.run([sys.executable, "-m", "nbstripout", *filter_args(), "--textconv", str(path)],
                              cwd=tmp_path, capture_output=True, check=True).stdout
    assert stripped == path.read_bytes(), (
        f"{path.name} is not what the git filter writes (a cell without an id, or metadata it strips): "
        f"run `.venv/bin/nbstripout {shlex.join(filter_args())} notebooks/{path.name}` once")
