"""The study's runs are declared once (elsi_lib.study.paper.notebook_runs): every notebook and parameter file they
name exists, and the Makefile's one papermill rule covers exactly them."""

import re

from elsi_lib.common.cachefiles import REPO_ROOT
from elsi_lib.study.paper.notebook_runs import RUNS, command, main


def test_every_run_names_files_that_exist():
    for name, run in RUNS.items():
        assert (REPO_ROOT / "notebooks" / run.notebook).is_file(), name
        assert (REPO_ROOT / "notebooks" / run.parameters).is_file(), name
        assert command(name)[-3:] == [
            f"notebooks/{run.parameters}",
            f"notebooks/{run.notebook}",
            f"build/{run.executed}",
        ]
    assert len({run.executed for run in RUNS.values()}) == len(RUNS)  # no run overwrites another's executed copy


def test_the_makefile_has_one_rule_over_the_registry():
    makefile = (REPO_ROOT / "Makefile").read_text()
    declared = re.search(r"^STUDY_RUNS := (.+)$", makefile, re.M).group(1).split()
    assert declared == list(RUNS)
    for run in RUNS.values():  # no recipe of its own: the registry's one rule runs it
        assert f"-f notebooks/{run.parameters}" not in makefile, run.parameters


def test_an_unknown_run_is_refused(capsys):
    assert main(["tables-llama"]) == 2 and "usage" in capsys.readouterr().err
