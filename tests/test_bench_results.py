"""Every committed benchmark and engine result (bench/results/*.json) says where and when it ran (the
machine, its load) and holds rows, and its Markdown twin exists: the benchmarks page is built from both."""

from __future__ import annotations

import json

import pytest

from elsi_lib.common.cachefiles import REPO_ROOT

RESULTS = REPO_ROOT / "bench" / "results"
NAMES = sorted(p.stem for p in RESULTS.glob("*.json"))


def test_there_are_results():
    assert len(NAMES) >= 10, NAMES


@pytest.mark.parametrize("name", NAMES)
def test_every_results_file_says_where_and_when_it_ran(name):
    result = json.loads((RESULTS / f"{name}.json").read_text())
    assert {"date", "cpu", "cores", "load_1_5_15"} <= set(result["machine"]) and result["rows"]
    assert (RESULTS / f"{name}.md").is_file()
