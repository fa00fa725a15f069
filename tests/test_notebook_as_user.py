"""A notebook run the way a user meets it in JupyterLab: kernel `elsi`, no MPLBACKEND in the
environment, figures inline, no warning that looks like a failure."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from elsi_lib.common.cachefiles import REPO_ROOT, default_cache_dir

from conftest import USER_CACHE_DIR

NOTEBOOK = REPO_ROOT / "notebooks" / "01_activation_wave.ipynb"


def kernel_names() -> set[str]:
    from jupyter_client.kernelspec import KernelSpecManager

    return set(KernelSpecManager().find_kernel_specs())


@pytest.mark.slow
def test_notebook_shows_figures_inline_with_the_elsi_kernel(tmp_path):
    assert "elsi" in kernel_names(), "the Jupyter kernel 'elsi' is missing: run `make venv`"
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    env["ELSI_CACHE_DIR"] = USER_CACHE_DIR or str(default_cache_dir())  # shared with nbval's run
    out = tmp_path / "executed.ipynb"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "papermill",
            "--no-progress-bar",
            "-k",
            "elsi",
            "--cwd",
            str(NOTEBOOK.parent),
            str(NOTEBOOK),
            str(out),
            "-p",
            "FIGURES_DIR",
            str(tmp_path / "figures"),
            "-p",
            "RESULTS_DIR",
            str(tmp_path / "results"),
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    cells = [c for c in json.loads(out.read_text())["cells"] if c["cell_type"] == "code"]
    showing = [c for c in cells if "plt.show()" in "".join(c["source"])]
    assert showing, "the notebook shows no figure"
    for cell in showing:
        kinds = {kind for o in cell["outputs"] for kind in o.get("data", {})}
        assert "image/png" in kinds, f"no inline figure in the cell {''.join(cell['source'])[:60]!r}"
    texts = "".join(json.dumps(o) for c in cells for o in c["outputs"])
    assert "IProgress not found" not in texts
    assert (tmp_path / "figures" / "fig01_activation_wave.png").is_file()  # and the file is still written
