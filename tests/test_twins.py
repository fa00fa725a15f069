"""bf16 against float32 (`study.twins`): the units both numeric twins trained, paired over questions,
judged against the reseed range."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest
from test_records import a_record

from elsi_lib.study.ledger import draft_records as R
from elsi_lib.study.ledger import twins


def record(protocol, method, **kw):
    """a_record with the method's own label (a_record labels every unit ELSI m=3)."""
    return {**a_record(protocol, method, **kw), "label": {"eagle3": "EAGLE3", "elsi-m3": "ELSI m=3"}[method]}


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("ELSI_DRAFT_RECORDS", str(tmp_path))
    return tmp_path


def test_each_parameter_file_has_one_pair_of_twins_bf16_first():
    assert twins.pairs() == [
        ("table3", "table3_f32"),
        ("table2_strong", "table2_strong_f32"),
        ("qwen_strong", "qwen_strong_f32"),
    ]


def test_without_reseeds_the_difference_is_measured_but_not_judged(store):
    R.write_record(record("table3", "eagle3", tau=1.5), store)
    R.write_record(record("table3_f32", "eagle3", tau=1.52), store)
    R.write_record(record("table3_f32", "elsi-m3", tau=1.6), store)  # in one twin only: not compared
    compared = twins.compare("table3", "table3_f32", n_boot=200)
    assert set(compared.unit) == {"eagle3"} and sorted(compared.temperature) == [0.0, 1.0]
    assert compared["diff"].to_numpy() == pytest.approx([0.02, 0.02])
    assert (compared["tau float32"] - compared["tau bf16"]).to_numpy() == pytest.approx([0.02, 0.02])
    assert set(compared["within the reseed range"]) == {"no reseeds yet"}
    assert twins.verdict(compared) == "no reseeds yet"


@pytest.mark.parametrize("reseed_tau, want", [(1.55, "agree"), (1.51, "differ")])
def test_the_twins_agree_when_every_difference_lies_within_the_reseed_range(store, reseed_tau, want):
    R.write_record(record("table3", "eagle3", tau=1.5), store)
    R.write_record(record("table3_f32", "eagle3", tau=1.52), store)  # float32 minus bf16: +0.02
    R.write_record(record("table3_f32", "eagle3", seed=1, tau=reseed_tau), store)  # range 0.03 or 0.01
    R.write_record(record("table3_f32", "elsi-m3", tau=1.6), store)  # the second reseeded method: range 0.005
    R.write_record(record("table3_f32", "elsi-m3", seed=1, tau=1.605), store)
    compared = twins.compare("table3", "table3_f32", n_boot=200)
    assert compared["reseed range"].to_numpy() == pytest.approx([abs(reseed_tau - 1.52)] * 2)
    assert twins.verdict(compared) == want


def test_twins_with_no_records_or_no_shared_unit_compare_nothing(store):
    assert twins.verdict(twins.compare("table2_strong", "table2_strong_f32")) == "no shared units"
    R.write_record(record("table3", "eagle3"), store)
    R.write_record(record("table3_f32", "elsi-m3"), store)
    assert twins.compare("table3", "table3_f32").empty


def test_a_reseed_in_either_twin_gives_the_range_and_the_larger_counts(store):
    R.write_record(record("table3", "eagle3", tau=1.5), store)
    R.write_record(record("table3_f32", "eagle3", tau=1.52), store)
    R.write_record(record("table3", "eagle3", seed=1, tau=1.54), store)  # bf16 range 0.04
    assert twins.verdict(twins.compare("table3", "table3_f32", n_boot=200)) == "no reseeds yet"  # one method
    R.write_record(record("table3", "elsi-m3", tau=1.6), store)
    R.write_record(record("table3", "elsi-m3", seed=1, tau=1.61), store)  # two methods reseeded
    R.write_record(record("table3_f32", "elsi-m3", tau=1.6), store)
    R.write_record(record("table3_f32", "elsi-m3", seed=1, tau=1.605), store)
    R.write_record(record("table3_f32", "eagle3", seed=1, tau=1.525), store)  # float32 range 0.005
    compared = twins.compare("table3", "table3_f32", n_boot=200)
    assert compared["reseed range"].to_numpy() == pytest.approx([0.04] * 4)
    assert twins.verdict(compared) == "agree"
    lines = twins.summary(compared)
    assert len(lines) == 2 and lines[0].startswith(
        "qwen2.5-coder-0.5b (table3 and table3_f32), T = 0: float32 minus bf16 over 2 units"
    )
    assert "+0.000 to +0.020" in lines[0] and lines[0].endswith("reseed range 0.040: agree")


def test_a_verdict_ignores_rows_it_cannot_judge():
    rows = pd.DataFrame({"within the reseed range": ["yes", "no shared questions"]})
    assert twins.verdict(rows) == "agree"
    assert twins.verdict(rows.assign(**{"within the reseed range": ["no shared questions"] * 2})) == "no shared units"
    assert twins.verdict(pd.DataFrame(columns=twins.COLUMNS)) == "no shared units"
    assert twins.summary(pd.DataFrame(columns=twins.COLUMNS)) == []


def test_two_protocols_in_one_twin_slot_are_refused(monkeypatch):
    from elsi_lib.study.ledger import protocols

    extra = dataclasses.replace(protocols.PROTOCOLS["table3"], name="table3_again")
    monkeypatch.setitem(protocols.PROTOCOLS, "table3_again", extra)
    with pytest.raises(ValueError, match="'table3' and 'table3_again' are both the bf16 twin"):
        twins.pairs()


def test_the_ledger_page_says_the_twins_verdict_and_takes_an_empty_comparison(tmp_path, monkeypatch):
    """The page's twins lines are the summary of numeric_twins.csv; where the records compare no twins,
    an empty table (its columns alone) says so and nothing else."""
    import shutil

    from elsi_lib.common.cachefiles import REPO_ROOT
    from elsi_lib.common.results import results_dir
    from elsi_lib.study.pages import findings
    from elsi_lib.study.paper.plots import csv_text

    monkeypatch.setenv("ELSI_DRAFT_RECORDS", str(REPO_ROOT / "data" / "drafts"))  # read, never written
    copy = tmp_path / "results"
    shutil.copytree(results_dir(), copy)
    compared = pd.read_csv(copy / "numeric_twins.csv")
    assert set(findings.ledger(copy)) >= {f"- {line}." for line in twins.summary(compared)}
    empty = pd.DataFrame(columns=twins.COLUMNS)
    empty.to_csv(copy / "numeric_twins.csv", index=False)
    made = {**findings._ledger_made(), "numeric_twins": csv_text(empty)}  # records that compare no twins
    monkeypatch.setattr(findings, "_ledger_made", lambda: made)
    assert not any("float32 minus bf16" in line for line in findings.ledger(copy))
