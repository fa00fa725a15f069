"""What the Makefile's main targets run, read from `make -n` (nothing is executed)."""

import subprocess

from elsi_lib.common.cachefiles import REPO_ROOT


def _dry(target: str) -> str:
    return subprocess.run(["make", "-n", target], cwd=REPO_ROOT, capture_output=True, text=True, check=True).stdout


def test_make_figures_leaves_the_ledgers_tables_to_make_ledger_tables():
    """`make figures` (100 resamples) never runs notebook 10, whose committed tables are made with 1,000."""
    figures = _dry("figures")
    assert "01_activation_wave.ipynb" in figures and "10_ledger" not in figures


def test_make_test_caches_into_a_folder_of_its_own_and_removes_it():
    text = _dry("test")
    assert "export ELSI_CACHE_DIR=" in text and "rm -rf" in text.split("export ELSI_CACHE_DIR=")[-1]
