"""bf16 against float32 (`study.twins`): the units both numeric twins trained, paired over questions,
judged against the reseed range."""

from __future__ import annotations

import pytest
from test_records import a_record

from elsi_lib.study import records as R
from elsi_lib.study import twins


def record(protocol, method, **kw):
    """a_record with the method's own label (a_record labels every unit ELSI m=3)."""
    return {**a_record(protocol, method, **kw), "label": {"eagle3": "EAGLE3", "elsi-m3": "ELSI m=3"}[method]}


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("ELSI_DRAFT_RECORDS", str(tmp_path))
    return tmp_path


def test_each_family_has_one_pair_of_twins_bf16_first():
    assert twins.pairs() == [("table3", "table3_f32"), ("table2_strong", "table2_strong_f32")]


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
    compared = twins.compare("table3", "table3_f32", n_boot=200)
    assert compared["reseed range"].to_numpy() == pytest.approx([abs(reseed_tau - 1.52)] * 2)
    assert twins.verdict(compared) == want


def test_twins_with_no_records_or_no_shared_unit_compare_nothing(store):
    assert twins.verdict(twins.compare("table2_strong", "table2_strong_f32")) == "no shared units"
    R.write_record(record("table3", "eagle3"), store)
    R.write_record(record("table3_f32", "elsi-m3"), store)
    assert twins.compare("table3", "table3_f32").empty
