"""elsi on its own: the wheel `pip install .` builds, installed into a fresh virtual environment in a
temporary folder away from the repository, answers `elsi select` offline with the calibration prompts
and the evidence it ships (its dependencies come from the project's own environment)."""

import json
import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest
from conftest import replied_conversations, write_sharegpt

from elsi_lib import random_model
from elsi_lib.common.cachefiles import REPO_ROOT


@pytest.fixture(scope="module")
def installed(tmp_path_factory, tiny_tokenizer):
    """(the fresh environment's python, a folder outside the repository holding a tiny random model in
    `model/`) with elsi's wheel installed."""
    root = tmp_path_factory.mktemp("away")
    wheels = root / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(wheels),
            str(REPO_ROOT),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = wheels.glob("elsi-*.whl")
    env = root / "env"
    venv.EnvBuilder(with_pip=False).create(env)
    python = env / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    # the dependencies from this environment (its site folder on the path, never processed as a site
    # folder: the editable install of the checkout it holds stays out)
    (Path(site) / "project_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [str(python), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)],
        check=True,
        capture_output=True,
    )
    random_model(n_layers=8, hidden_size=32, vocab_size=len(tiny_tokenizer), seed=0).save_pretrained(root / "model")
    tiny_tokenizer.save_pretrained(root / "model")
    return python, root


def _environment(root: Path) -> dict:
    keep = {k: v for k, v in os.environ.items() if not k.startswith("ELSI_")}
    return {**keep, "ELSI_CACHE_DIR": str(root / "cache"), "HF_HUB_OFFLINE": "1", "PYTHONPATH": ""}


def _python(python: Path, root: Path, code: str) -> str:
    """What `code` prints, run by the installed environment's python in `root`."""
    done = subprocess.run(
        [str(python), "-c", code], cwd=root, env=_environment(root), check=True, capture_output=True, text=True
    )
    return done.stdout.strip()


def test_the_installed_wheel_answers_away_from_the_checkout(installed):
    python, root = installed
    model = root / "model"
    where = _python(python, root, "import elsi_lib; print(elsi_lib.__file__)")
    assert str(root) in where and str(REPO_ROOT) not in where  # the installed copy, not the checkout
    elsi = python.parent / "elsi"
    done = subprocess.run(
        [str(elsi), "select", "--model", str(model), "--prompts", "4", "--block", "4", "--method", "elsi"]
        + ["--reply-model", "self", "--format", "json"],
        cwd=root,
        env=_environment(root),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["provenance"]["data"] == "calibration mix"  # the prompt sets shipped in the wheel
    assert result["decision"]["verdict"] in ("change", "keep the default") and result["decision"]["rests_on"]
    assert not any("unavailable" in line for line in result["evidence"])  # the evidence shipped too
    assert any(line.startswith("criteria: ") for line in result["evidence"])


def test_an_altered_evidence_file_in_the_wheel_leaves_the_answer(installed):
    """The installed evidence file altered: the answer comes, with one line saying why."""
    python, root = installed
    path = Path(_python(python, root, "from elsi_lib.draft import evidence as ev; print(ev.EVIDENCE_PATH)"))
    text = path.read_text()
    path.write_text(text.replace('"default_method": "probe"', '"default_method": "elsi"', 1))
    try:
        model, data = root / "model", root / "convs.jsonl"
        write_sharegpt(data, replied_conversations(12, seed=3, reply_words=(40, 80)))
        done = subprocess.run(
            [str(python.parent / "elsi"), "select", "--model", str(model), "--data", str(data), "--prompts", "12"]
            + ["--block", "4", "--method", "elsi", "--reply-model", "self"],
            cwd=root,
            env=_environment(root),
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        path.write_text(text)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "evidence: unavailable: " in done.stdout and "checksum" in done.stdout
    assert "decision: none, so the answer is the criterion's set" in done.stdout
    assert "why: the evidence file is unavailable" in done.stdout
