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
    import shutil

    from elsi_lib.common.results import results_dir
    from elsi_lib.study.pages import site

    copy = tmp_path / "results"
    shutil.copytree(results_dir(), copy)
    compared = pd.read_csv(copy / "numeric_twins.csv")
    assert set(site._ledger(copy)) >= {f"- {line}." for line in twins.summary(compared)}
    pd.DataFrame(columns=twins.COLUMNS).to_csv(copy / "numeric_twins.csv", index=False)
    assert not any("float32 minus bf16" in line for line in site._ledger(copy))


def agreeing_twins(store):
    """Qwen's twins with a reseed range of 0.03 and float32 minus bf16 +0.02 on EAGLE3: they agree."""
    R.write_record(record("table3", "eagle3", tau=1.5), store)
    R.write_record(record("table3_f32", "eagle3", tau=1.52), store)
    R.write_record(record("table3_f32", "eagle3", seed=1, tau=1.55), store)
    R.write_record(record("table3_f32", "elsi-m3", tau=1.6), store)
    R.write_record(record("table3_f32", "elsi-m3", seed=1, tau=1.605), store)
    return twins.compare("table3", "table3_f32", n_boot=200)


def a_probe_record(protocol, tau=1.7):
    """The probe's set, a draft of its own (other layers and step 1 than a_record's)."""
    r = {**a_record(protocol, "probe-m3", tau=tau), "label": "probe m=3", "layers": "2 12 20"}
    r["step accuracy"] = {**r["step accuracy"], "step 1": 0.35}
    return r


def test_twins_that_agree_make_one_table_each_row_keeping_its_numeric_setting(store):
    from elsi_lib.study.ledger import record_tables

    compared = agreeing_twins(store)
    assert twins.verdict(compared) == "agree"
    assert twins.joined_tables(compared) == {}  # the bf16 twin adds no unit: the float32 table is the join
    R.write_record(a_probe_record("table3"), store)  # a unit only the bf16 twin has
    joined = twins.joined_tables(compared)
    assert list(joined) == ["table3+table3_f32"]
    records = joined["table3+table3_f32"]
    units = sorted((r["unit"]["protocol"], r["unit"]["method"], r["unit"]["seed"]) for r in records)
    assert units == [
        ("table3", "probe-m3", 0),  # the bf16 EAGLE3 seed 0 is left out: the float32 twin has that unit
        ("table3_f32", "eagle3", 0),
        ("table3_f32", "eagle3", 1),
        ("table3_f32", "elsi-m3", 0),
        ("table3_f32", "elsi-m3", 1),
    ]
    with pytest.raises(R.RecordError, match="twins that agree may"):
        R.question_frame(records)
    rows = R.question_frame(records, twins=True)
    assert set(rows.loc[rows.id == "probe-m3", "draft matmuls"]) == {"bf16"}
    assert set(rows.loc[rows.id != "probe-m3", "draft matmuls"]) == {"float32"}
    found = record_tables.findings("table3+table3_f32", records=records, n_boot=200)
    assert set(found.protocol) == {"table3+table3_f32"} and set(found.method) == {"ELSI m=3", "probe m=3"}
    assert set(found.drafts) == {5}  # EAGLE3's two seeds (its rule's set), ELSI m = 3's two, the probe's one
    table = record_tables.drafts(["table3", "table3_f32"], joined=joined)
    assert set(table.protocol) == {"table3+table3_f32"} and "probe-m3" in set(table.id)
    assert set(record_tables.drafts(["table3", "table3_f32"]).protocol) == {"table3", "table3_f32"}


def test_a_pair_of_twins_joins_on_its_own_verdict_not_its_familys(store):
    """Qwen's 936-prompt twins agree; the 5,000-prompt twins share no unit yet, so their tables stay
    apart although they are the same family's."""
    compared = pd.concat(
        [agreeing_twins(store), twins.compare("qwen_strong", "qwen_strong_f32", n_boot=200)], ignore_index=True
    )
    R.write_record(a_probe_record("qwen_strong"), store)
    R.write_record(a_probe_record("table3"), store)
    assert set(compared.twins) == {"table3+table3_f32"}
    assert list(twins.joined_tables(compared)) == ["table3+table3_f32"]


def test_twins_that_do_not_agree_are_never_joined(store):
    R.write_record(record("table3", "eagle3", tau=1.5), store)
    R.write_record(record("table3_f32", "eagle3", tau=1.52), store)
    R.write_record(a_probe_record("table3"), store)
    compared = twins.compare("table3", "table3_f32", n_boot=200)
    assert twins.verdict(compared) == "no reseeds yet" and twins.joined_tables(compared) == {}
    R.write_record(record("table3_f32", "eagle3", seed=1, tau=1.51), store)  # range 0.01 < +0.02: differ
    R.write_record(record("table3_f32", "elsi-m3", tau=1.6), store)
    R.write_record(record("table3_f32", "elsi-m3", seed=1, tau=1.605), store)
    compared = twins.compare("table3", "table3_f32", n_boot=200)
    assert twins.verdict(compared) == "differ" and twins.joined_tables(compared) == {}
    other_family = [*R.read_records("table3"), *R.read_records("table2_strong_f32")]
    other_family.append(a_record("table2_strong_f32", "eagle3"))
    with pytest.raises(R.RecordError, match="different numeric settings"):
        R.question_frame(other_family, twins=True)  # two families' protocols are no pair of twins


def test_a_ledger_does_not_train_again_the_units_its_agreeing_twin_has(store):
    from elsi_lib.study.ledger import owed_units
    from elsi_lib.study.ledger.protocols import protocol

    R.write_record(record("table3", "eagle3", tau=1.5), store)
    R.write_record(record("table3_f32", "eagle3", tau=1.52), store)
    R.write_record(a_probe_record("table3"), store)
    assert twins.agreeing_twin("table3_f32") is None  # no reseeds yet: every unit the float32 twin lacks is owed
    before = owed_units.status(protocol("table3_f32"))
    assert (before["in twin"] == "").all() and before.owed.sum() == 15
    agreeing_twins(store)  # a reseed range of 0.03 against +0.02: the twins agree
    assert twins.agreeing_twin("table3_f32") == "table3" and twins.agreeing_twin("table3") == "table3_f32"
    f32 = owed_units.status(protocol("table3_f32")).set_index(["method", "seed"])
    assert f32.loc[("probe-m3", 0), "in twin"] == "table3" and not f32.loc[("probe-m3", 0), "owed"]
    assert f32.owed.sum() == 16 - 4 - 1  # its own four units and the bf16 twin's probe draft
    bf16 = owed_units.status(protocol("table3")).set_index(["method", "seed"])
    assert bf16.loc[("elsi-m3", 1), "in twin"] == "table3_f32" and bf16.owed.sum() == 16 - 2 - 3
    both = owed_units.counts(owed_units.table_ledgers("table3"))
    assert both.loc["table3_f32"].tolist() == [4, 1, 11, 16] and both.loc["table3"].tolist() == [2, 3, 11, 16]


def test_a_run_trains_nothing_when_every_unit_is_present_or_in_its_agreeing_twin(store, monkeypatch, capsys):
    from elsi_lib.study.ledger import owed_units, prepared
    from elsi_lib.study.ledger.protocols import PROTOCOLS, Protocol

    agreeing_twins(store)  # table3_f32: EAGLE3 and ELSI m = 3 seeds 0 and 1; table3: EAGLE3 seed 0
    small = Protocol(
        "table3",
        "qwen2.5-coder-0.5b",
        "notebooks/tables_qwen.yaml",
        (("train.autocast_bf16", True),),
        (("eagle3", 0), ("elsi-m3", 0), ("elsi-m3", 1)),
    )
    monkeypatch.setitem(PROTOCOLS, "table3", small)
    monkeypatch.setattr(owed_units, "check_machine", lambda proto: None)
    monkeypatch.setattr(prepared.Prepared, "load", lambda *a, **k: pytest.fail("prepared a protocol that owes nothing"))
    table = owed_units.status(small)
    assert table.owed.sum() == 0 and table["in twin"].tolist() == ["", "table3_f32", "table3_f32"]
    assert owed_units.run(small, 10) == []
    assert "every unit of the ledger has its record" in capsys.readouterr().out
