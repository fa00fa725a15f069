"""Draft records (elsi_lib.study.ledger.draft_records, units, protocols, ledger): one unit, one checked record that is
never replaced by other numbers, the committed per-question results as records without retraining, and
the ledger of units each protocol owes."""

from __future__ import annotations

import json
import os

import pandas as pd
import pytest

from elsi_lib.common.results import results_dir
from elsi_lib.inputs.models import REGISTRY
from elsi_lib.selection.methods import METHODS
from elsi_lib.study.experiments.layer_choices import label_of
from elsi_lib.study.ledger import owed_units
from elsi_lib.study.ledger import draft_records as R
from elsi_lib.study.ledger.protocols import PROTOCOLS, protocol
from elsi_lib.study.ledger.units import unit_record

TABLE3 = "table3_question_tau_qwen2.5-coder-0.5b.csv"
STRONG = "table2_strong_question_tau_smollm2-135m.csv"


def questions(per_column: int = 20) -> list:
    """The first `per_column` SpecBench questions of each paper column (id, column), as a protocol's
    evaluation asks them (eval_per_column each): records hold real questions."""
    by_column: dict = {}
    for q, column in sorted(R.specbench_columns().items()):
        by_column.setdefault(column, [])
        if len(by_column[column]) < per_column:
            by_column[column].append((q, column))
    return sorted(pair for pairs in by_column.values() for pair in pairs)


def rows(per_column=20, tau=1.5):
    return pd.DataFrame(
        [
            [T, nodes, q, column, tau + 0.001 * i]
            for T in (0.0, 1.0)
            for nodes in (30, 60)
            for i, (q, column) in enumerate(questions(per_column))
        ],
        columns=list(R.QUESTION_FIELDS),
    )


def a_record(name="table3_f32", method="elsi-m3", seed=0, tau=1.5, stages=None, label=None):
    proto = protocol(name)
    exp = proto.experiment()
    fixed = METHODS[method].fixed if method in METHODS else None  # a fixed method's set is its rule's
    layers = fixed(REGISTRY[proto.family].n_layers) if fixed else (1, 22, 23)
    return unit_record(
        proto,
        {"id": method, "method": label or label_of(method), "layers": layers, "entropy": 0.845},
        seed,
        prompts=exp.n_train - exp.n_heldout,
        accuracy={"step 1": 0.3, "step 2": 0.25, "step 3": 0.2},
        rows=rows(tau=tau),
        probe={"probe error": 0.63, "probe agreement": 0.2},
        stages=stages or {"training": 10.0},
        machine={"cpu": "test"},
    )


def test_a_record_reads_back_as_the_rows_it_was_made_from(tmp_path):
    path, written = R.write_record(a_record(), tmp_path)
    assert written and path == tmp_path / "table3_f32" / "elsi-m3-seed0.json"
    frame = R.question_frame(R.read_records("table3_f32", tmp_path))
    want = rows().sort_values(["temperature", "nodes", "question_id"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(frame[list(R.QUESTION_FIELDS)], want, check_dtype=False)
    assert set(frame["draft matmuls"]) == {"float32"} and set(frame.prompts) == {936}
    assert frame[["step 1", "probe error", "set entropy"]].iloc[0].tolist() == [0.3, 0.63, 0.845]


def test_the_same_unit_again_keeps_the_first_and_other_numbers_are_refused(tmp_path):
    path, _ = R.write_record(a_record(), tmp_path)
    before = path.read_bytes()
    again = a_record()
    again["stages"] = {"seconds": {"training": 99.0}}  # how it was made is not a number of the unit
    again["ran on"] = {"cpu": "another"}
    assert R.write_record(again, tmp_path) == (path, False) and path.read_bytes() == before
    with pytest.raises(R.RecordConflict, match=r"elsi-m3-seed0\.json.*\['questions'\]"):
        R.write_record(a_record(tau=1.6), tmp_path)
    assert path.read_bytes() == before
    other = a_record(name="table3")  # another protocol: its own file, never this one
    other["numeric"] = protocol("table3").numeric
    assert R.write_record(other, tmp_path)[0].parent.name == "table3" and path.read_bytes() == before


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda r: r.pop("step accuracy"), r"missing field\(s\) \['step accuracy'\]"),
        (lambda r: r["unit"].update(method="elsi-m9"), "field 'unit' names no method: 'elsi-m9'"),
        # one method, one spelling: "probe-m03" would be a second table row beside "probe-m3"
        (
            lambda r: r["unit"].update(method="probe-m03") or r.update(label="probe m=03"),
            "names no method: 'probe-m03'",
        ),
        (lambda r: r["unit"].update(protocol="table9"), "no protocol 'table9'"),
        (lambda r: r["unit"].update(family="smollm2-135m"), "table3_f32 is on qwen2.5-coder-0.5b"),
        (lambda r: r.update({"protocol digest": "0" * 16}), "another definition of its protocol"),
        (lambda r: r.update(numeric={"draft matmuls": "bf16", "target features": "x"}), "field 'numeric'"),
        (lambda r: r["questions"][0].__setitem__(4, 0.5), "tau 0.5 for question"),
        (lambda r: r["questions"][0].__setitem__(4, 500.0), r"outside \[1, "),  # far above what the tree allows
        (lambda r: r["questions"][0].__setitem__(0, "0"), "temperature '0'"),
        (lambda r: r["step accuracy"].update({"step 1": 1.5}), "not a share in"),
        (lambda r: r.update(prompts=-5), "field 'prompts' is -5"),
        (lambda r: r.update(prompts=1), "field 'prompts' is 1; table3_f32's drafts train on 936"),
        (lambda r: r.update({"probe error": "low"}), "'probe error' is 'low', not a finite number"),
        (lambda r: r.update({"probe error": float("inf")}), "'probe error' is inf, not a finite number"),
        (lambda r: r.update({"probe agreement": 5.0}), r"'probe agreement' is 5.0, not a finite number in \[0, 1\]"),
        (
            lambda r: r.update(label="EAGLE2"),
            "field 'label' is 'EAGLE2'; method elsi-m3's drafts are labelled 'ELSI m=3'",
        ),
        (
            lambda r: r["questions"][-1].__setitem__(4, 61.0),
            r"tau 61.0 for question \d+ is outside \[1, 7\] \(60 nodes, depth 6\)",
        ),
        (lambda r: r["questions"][0].__setitem__(3, "M/R"), r"in column 'M/R'; SpecBench puts it in 'MT'"),
        (lambda r: r["questions"][0].__setitem__(0, 50.0), r"temperature 50.0 .* not a number in \[0, 2\]"),
        (lambda r: r["questions"].__setitem__(0, [0.0, 30]), "is not"),
        (lambda r: r["stages"].update(group=["eagle3", "eagle2"]), "lock-step group"),
        (lambda r: r.update(stages=[]), "field 'stages' is list, not a mapping of stages"),
        (lambda r: r["stages"].update(group=["elsi-m3", "elsi-m3"]), "two or more distinct"),
        (lambda r: r.update(layers="banana"), "field 'layers' is 'banana'"),
        (lambda r: r.update(layers="23 1 22"), "ascending distinct"),
        (lambda r: r.update(label=" ELSI m=3"), "field 'label'"),
        (lambda r: r.update({"set entropy": float("nan")}), "'set entropy' is nan"),
        (lambda r: r.update({"set entropy": -3.0}), "'set entropy' is -3.0"),
        (lambda r: r["questions"][0].__setitem__(2, None), "question id None"),
        (lambda r: r["questions"][0].__setitem__(3, ""), "column ''"),
        (lambda r: r["questions"][0].__setitem__(0, float("inf")), "temperature inf"),
        (lambda r: r.update(curve=[{"prompts": 100, "step accuracy": r["step accuracy"]}]), r"lacks \['questions'\]"),
        (lambda r: r["questions"].append(list(r["questions"][0])), "listed twice at T = 0"),
        (lambda r: r.update(format=True), "field 'format' is True"),
        (lambda r: r["step accuracy"].update({s: float("nan") for s in r["step accuracy"]}), "no step measured"),
        (lambda r: r["stages"].update(seconds={"replay": -5.0}), "seconds {'replay': -5.0}, not a mapping"),
        (lambda r: r["stages"].update(seconds={"replay": "349"}), "seconds {'replay': '349'}, not a mapping"),
        (lambda r: r["stages"].update(group=["elsi-m3", "probe-m7"]), "methods of table3_f32's ledger"),
        (lambda r: r.update(questions=[q for q in r["questions"] if q[0] == 1.0 or q[3] == "MT"]), "hold other than"),
        (lambda r: r.update(questions=[q for q in r["questions"] if q[1] == 60]), "the protocol evaluates"),
    ],
)
def test_a_record_that_cannot_be_used_is_refused_naming_file_and_field(tmp_path, change, message):
    path, _ = R.write_record(a_record(), tmp_path)
    record = json.loads(path.read_text())
    change(record)
    path.write_text(json.dumps(record))
    with pytest.raises(R.RecordError, match=message) as err:
        R.read_records("table3_f32", tmp_path)
    assert str(path) in str(err.value)


def test_a_record_with_a_key_twice_is_refused(tmp_path):
    """A record with a key twice is refused: json would keep the last of two "prompts" keys without a word."""
    path, _ = R.write_record(a_record(), tmp_path)
    text = path.read_text()
    path.write_text(text.replace('"prompts": 936,', '"prompts": 5, "prompts": 936,', 1))
    with pytest.raises(R.RecordError, match="key 'prompts' appears twice"):
        R.read_records("table3_f32", tmp_path)


def test_a_record_under_another_units_path_is_refused(tmp_path):
    path, _ = R.write_record(a_record(), tmp_path)
    path.rename(path.with_name("eagle3-seed0.json"))
    with pytest.raises(R.RecordError, match="belongs at"):
        R.read_records("table3_f32", tmp_path)


def test_a_table_never_mixes_numeric_settings(tmp_path):
    bf16 = a_record(name="table3")
    with pytest.raises(R.RecordError, match="different numeric settings"):
        R.question_frame([a_record(), bf16])


def test_a_killed_write_leaves_no_record(tmp_path, monkeypatch):
    def killed(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        R.write_record(a_record(), tmp_path)
    assert not (tmp_path / "table3_f32" / "elsi-m3-seed0.json").exists()
    monkeypatch.undo()
    assert R.write_record(a_record(), tmp_path)[1]  # the rerun writes it


@pytest.mark.parametrize("name, csv", [("table3", TABLE3), ("table2_strong", STRONG)])
def test_the_committed_records_are_the_committed_rows(name, csv, monkeypatch):
    monkeypatch.delenv("ELSI_DRAFT_RECORDS")
    records = R.read_records(name)
    converted = [r for r in records if r["ran on"].get("converted from", "").endswith(csv)]
    assert converted, f"no record of {name} converted from {csv}"
    back = R.question_frame(converted)
    committed = pd.read_csv(results_dir() / csv)
    assert len(back) == len(committed)
    key = ["prompts", "id", "seed", "temperature", "nodes", "question_id"]
    a, b = (f.sort_values(key).reset_index(drop=True) for f in (committed, back))
    for column in ("tau", "step 1", "set entropy", "layers"):
        pd.testing.assert_series_equal(a[column], b[column], check_dtype=False, obj=column)


def test_the_ledger_lists_its_units_in_order_and_which_are_present(tmp_path, monkeypatch):
    monkeypatch.setenv("ELSI_DRAFT_RECORDS", str(tmp_path))
    R.write_record(a_record(), tmp_path)
    table = owed_units.status(protocol("table3_f32"))
    assert list(zip(table.method, table.seed))[:2] == [("eagle3", 0), ("elsi-m3", 0)]
    assert table.present.tolist()[:2] == [False, True] and table.present.sum() == 1
    assert len(table) == len(protocol("table3_f32").ledger) == 16


def test_a_record_outside_the_ledger_fills_none_of_its_units(tmp_path, monkeypatch, capsys):
    """A seed the ledger does not name is listed, but counts toward no unit: the status line (the one
    `make ledger-status` shows) says how many of the ledger's units are present, and the record apart."""
    monkeypatch.setenv("ELSI_DRAFT_RECORDS", str(tmp_path))
    R.write_record(a_record(seed=0), tmp_path)
    R.write_record(a_record(seed=7, tau=1.6), tmp_path)
    assert owed_units.main(["table3_f32"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("table3_f32: 1 of 16 units present (1 record(s) outside the ledger)"), last
    both = owed_units.counts(owed_units.table_ledgers("table3"))
    assert both.loc["table3_f32", ["present", "owed", "units"]].tolist() == [1, 15, 16]


def test_a_hidden_file_beside_the_records_is_none_and_a_malformed_record_ends_the_status_in_one_line(
    tmp_path, monkeypatch, capsys
):
    """macOS's ._NAME.json beside a record is no record; a record that fails its checks ends the status
    with the record's name and why, not a traceback."""
    monkeypatch.setenv("ELSI_DRAFT_RECORDS", str(tmp_path))
    R.write_record(a_record(seed=0), tmp_path)
    (tmp_path / "table3_f32" / "._eagle3-seed0.json").write_bytes(b"\x00\x05\x16\x07 AppleDouble")
    assert len(R.read_records("table3_f32")) == 1 and owed_units.main(["table3_f32"]) == 0
    (tmp_path / "table3_f32" / "elsi-m3-seed0.json").write_text("{}")
    capsys.readouterr()
    assert owed_units.main(["table3_f32"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("owed_units: ") and "elsi-m3-seed0.json" in err and len(err.strip().splitlines()) == 1


def test_a_tables_ledgers_are_its_protocol_and_the_float32_twin(tmp_path, monkeypatch):
    monkeypatch.setenv("ELSI_DRAFT_RECORDS", str(tmp_path))
    R.write_record(a_record(), tmp_path)
    both = owed_units.table_ledgers("table3")
    assert both.groupby("protocol", sort=False).present.agg(["sum", "size"]).values.tolist() == [[0, 16], [1, 16]]
    assert owed_units.table_ledgers("table2").empty  # the small Table 2 keeps no ledger


def test_a_bf16_protocol_is_refused_where_bf16_is_slow(monkeypatch):
    monkeypatch.setattr(owed_units, "bf16_matmul_is_slow", lambda: True)
    with pytest.raises(SystemExit, match=r"only \(table3_f32, qwen_strong_f32\)"):
        owed_units.check_machine(protocol("table3"))
    with pytest.raises(SystemExit, match=r"only \(qwen_strong_f32, table3_f32\)"):
        owed_units.check_machine(protocol("qwen_strong"))
    owed_units.check_machine(protocol("table3_f32"))  # the float32 twin runs


def test_every_protocol_has_a_float32_twin_with_its_data():
    for name, proto in PROTOCOLS.items():
        if name.endswith("_f32"):
            continue
        twin = PROTOCOLS[f"{name}_f32"]
        a, b = proto.experiment(), twin.experiment()
        assert (a.n_train, a.reply_engine, a.eval_per_column, a.replay_tokens) == (
            b.n_train,
            b.reply_engine,
            b.eval_per_column,
            b.replay_tokens,
        )
        assert proto.numeric["draft matmuls"] == "bf16" and twin.numeric["draft matmuls"] == "float32"
        assert proto.digest != twin.digest


def test_the_ledger_command_refuses_a_bad_budget(capsys):
    with pytest.raises(SystemExit) as err:
        owed_units.main(["table3_f32", "--run", "--budget", "-1"])
    assert err.value.code == 2 and "--budget" in capsys.readouterr().err


def test_a_unit_resumed_mid_way_is_planned_by_the_part_left(tmp_path, monkeypatch, capsys):
    """A unit whose checkpoint this machine holds at 75% needs a quarter of its training and the rest:
    40 minutes fit it (15 + 20), while from the start (60 + 20) they do not."""
    import types

    import torch

    from elsi_lib.study.experiments import experiment
    from elsi_lib.study.ledger import prepared

    monkeypatch.setenv("ELSI_DRAFT_RECORDS", str(tmp_path))

    class Ready:
        methods = pd.DataFrame({"id": ["eagle3"], "method": ["EAGLE3"], "m": [3]}).set_index("id", drop=False)
        exp = types.SimpleNamespace(train=types.SimpleNamespace(feature_noise=0.0))
        key = data = None
        model = torch.nn.Linear(1, 1)

        def calibrate(self):
            return 1200.0, 2400.0  # an hour of training alone; its replay and held-out share a third of it

    class Trained(Exception):
        pass

    def train_group(*args, **kwargs):
        raise Trained

    monkeypatch.setattr(prepared.Prepared, "load", classmethod(lambda cls, proto, progress=True: Ready()))
    monkeypatch.setattr(prepared, "lockstep_group", lambda ids, seed, methods: "group")
    monkeypatch.setattr(experiment, "train_group", train_group)
    monkeypatch.setattr(owed_units, "check_machine", lambda proto: None)
    monkeypatch.setattr(owed_units, "trained_before", lambda exp, key, group, device: (0.75, 2700.0))
    with pytest.raises(Trained):
        owed_units.run(protocol("table3_f32"), 40, progress=False)
    assert "next: eagle3 seed 0, resuming at 75%: about 35 min" in capsys.readouterr().out
    monkeypatch.setattr(owed_units, "trained_before", lambda exp, key, group, device: (0.0, 0.0))
    assert owed_units.run(protocol("table3_f32"), 40, progress=False) == []
    assert "stopping before eagle3 seed 0: about 80 min" in capsys.readouterr().out


def test_a_units_rest_is_estimated_from_its_familys_records_not_its_training(tmp_path, monkeypatch):
    """Held-out accuracy and replay do not grow with the training prompts: a 5,000-prompt Qwen unit is
    planned with what Qwen's records measured (held-out time scaled from 64 to 256 conversations), its
    own protocol's first; a family without such records falls back on a share of the training."""
    monkeypatch.setenv("ELSI_DRAFT_RECORDS", str(tmp_path))
    assert owed_units.rest_seconds(protocol("qwen_strong"), 3600.0) == pytest.approx(1200.0)  # no record yet
    for method, replay in (("elsi-m3", 300.0), ("eagle3", 340.0), ("probe-m3", 320.0)):
        stages = {"training": 800.0, "replay": replay, "held-out step accuracy": 16.0}
        R.write_record(a_record("table3_f32", method, stages=stages), tmp_path)
    assert owed_units.rest_seconds(protocol("qwen_strong"), 3600.0) == pytest.approx(320.0 + 16.0 * 256 / 64)
    assert owed_units.rest_seconds(protocol("table2_strong"), 3600.0) == pytest.approx(1200.0)  # another family's
    own = {"training": 9000.0, "replay": 200.0, "held-out step accuracy": 60.0}
    R.write_record(a_record("qwen_strong", "probe-m3", stages=own), tmp_path)
    assert owed_units.rest_seconds(protocol("qwen_strong"), 3600.0) == pytest.approx(260.0)


def test_a_checkpoint_of_another_configuration_counts_as_nothing_trained(monkeypatch):
    from elsi_lib.draft import checkpoints
    from elsi_lib.study.experiments import experiment

    monkeypatch.setattr(experiment, "group_checkpoint", lambda exp, key, group, device: ("path", {"mine": 1}))
    state = {"key": {"mine": 1}, "done": 30, "total": 120, "seconds": 90.0}
    monkeypatch.setattr(checkpoints, "read_checkpoint", lambda path: (state, None))
    assert owed_units.trained_before(None, {}, None) == (0.25, 90.0)
    monkeypatch.setattr(checkpoints, "read_checkpoint", lambda path: ({**state, "key": {"other": 1}}, None))
    assert owed_units.trained_before(None, {}, None) == (0.0, 0.0)
    monkeypatch.setattr(checkpoints, "read_checkpoint", lambda path: (None, "no checkpoint"))
    assert owed_units.trained_before(None, {}, None) == (0.0, 0.0)


def test_a_record_names_the_commit_its_run_started_at(monkeypatch):
    """A ledger run asks for the commit at its start; a commit made beside it (a record of an earlier
    unit, other work) is not the code that ran, so the records keep the first answer."""
    import subprocess
    import types

    from elsi_lib.study.ledger import units

    heads, real_run = iter(["aaa", "bbb"]), subprocess.run

    def run(args, *rest, **kwargs):
        if args[:1] == ["git"]:
            return types.SimpleNamespace(stdout=next(heads) + "\n")
        return real_run(args, *rest, **kwargs)

    units.started_at_commit.cache_clear()
    monkeypatch.setattr(units.subprocess, "run", run)
    try:
        assert units.started_at_commit() == "aaa"
        assert units.ran_on()["commit"] == "aaa"  # HEAD is "bbb" by now
    finally:
        units.started_at_commit.cache_clear()


def test_a_records_folder_that_does_not_exist_is_refused(tmp_path, monkeypatch):
    """Read as empty, a ledger run would train every unit again: refused, naming the folder."""
    from elsi_lib.study.ledger.draft_records import RecordError, read_records

    monkeypatch.setenv("ELSI_DRAFT_RECORDS", str(tmp_path / "nowhere"))
    with pytest.raises(RecordError, match="nowhere does not exist"):
        read_records("table3_f32")


def test_a_folder_that_holds_no_protocols_folders_is_refused_as_the_records_folder(tmp_path, monkeypatch):
    """The data folder one level above the records reads as a ledger with no records at all, which a run
    would train again: a folder holding anything but protocols' folders is refused, naming what it holds."""
    from elsi_lib.study.ledger.draft_records import RecordError, read_records

    (tmp_path / "drafts" / "table3_f32").mkdir(parents=True)
    (tmp_path / "results").mkdir()
    monkeypatch.setenv("ELSI_DRAFT_RECORDS", str(tmp_path))
    with pytest.raises(RecordError, match=r"holds \['drafts', 'results'\], which are no protocol's folders"):
        read_records("table3_f32")
    monkeypatch.setenv("ELSI_DRAFT_RECORDS", str(tmp_path / "drafts"))
    assert read_records("table3_f32") == []


def test_one_methods_seeds_share_a_label_and_a_set_and_labels_name_one_method(tmp_path):
    """One method's seeds share a set and a label names one method: otherwise a record relabelled as another
    method's pools two different sets as one method's seeds, and two seeds of one method with different
    layers take the first seed's set without a word."""
    first, _ = R.write_record(a_record(seed=0), tmp_path)
    second, _ = R.write_record(a_record(seed=1, tau=1.6), tmp_path)
    assert len(R.read_records("table3_f32", tmp_path)) == 2
    record = json.loads(second.read_text())
    record["layers"] = "1 21 23"
    second.write_text(json.dumps(record))
    with pytest.raises(R.RecordError, match=rf"{second.name}.*layers '1 21 23'.*{first.name}.*'1 22 23'"):
        R.read_records("table3_f32", tmp_path)
    second.unlink()
    with pytest.raises(
        R.RecordError, match="field 'label' is 'ELSI m=3'; method eagle3's drafts are labelled 'EAGLE3'"
    ):
        R.write_record(a_record(method="eagle3", label="ELSI m=3"), tmp_path)


def test_a_protocols_records_ask_the_same_questions_and_no_seed_is_another_copied(tmp_path):
    """A protocol's records ask the same questions and no seed's numbers are another's copied: a record
    with 5 of the protocol's questions, or seed 0's numbers recorded as seed 1, is refused, not passed."""
    R.write_record(a_record(seed=0), tmp_path)
    copied, _ = R.write_record(a_record(seed=1), tmp_path)  # the very same taus
    with pytest.raises(R.RecordError, match="every tau is within 0.001 of elsi-m3-seed0.json's"):
        R.read_records("table3_f32", tmp_path)
    copied.unlink()
    for row in (0, 1):  # a copy with one tau set to NaN, the first or another: still a copy
        blanked = a_record(seed=1)
        blanked["questions"][row] = [*blanked["questions"][row][:4], float("nan")]
        copied, _ = R.write_record(blanked, tmp_path)
        with pytest.raises(R.RecordError, match="every tau is within 0.001 of elsi-m3-seed0.json's"):
            R.read_records("table3_f32", tmp_path)
        copied.unlink()
    nudged = a_record(seed=1)  # the same taus, each moved by 4e-4 (rounded): still one draft recorded twice
    nudged["questions"] = [[*row[:4], row[4] + 4e-4] for row in nudged["questions"]]
    copied, _ = R.write_record(nudged, tmp_path)
    with pytest.raises(R.RecordError, match="every tau is within 0.001 of elsi-m3-seed0.json's"):
        R.read_records("table3_f32", tmp_path)
    copied.unlink()
    rounded = a_record(seed=1)  # seed 0's taus rounded to 2 decimals: gaps up to 0.005, still one draft
    rounded["questions"] = [[*row[:4], round(row[4], 2)] for row in rounded["questions"]]
    copied, _ = R.write_record(rounded, tmp_path)
    with pytest.raises(R.RecordError, match="every tau is elsi-m3-seed0.json's rounded to the decimals"):
        R.read_records("table3_f32", tmp_path)
    copied.unlink()
    moved = a_record(seed=1)  # every tau 0.005 from seed 0's, not a rounding of it: another draft
    moved["questions"] = [[*row[:4], row[4] + 0.005] for row in moved["questions"]]
    moved_path, _ = R.write_record(moved, tmp_path)
    assert len(R.read_records("table3_f32", tmp_path)) == 2
    moved_path.unlink()
    fewer = a_record(seed=1, tau=1.6)
    fewer["questions"] = fewer["questions"][:2]
    with pytest.raises(R.RecordError, match=r"blocks \[\(0.0, 30\)\] \(temperature, nodes\), the protocol evaluates"):
        R.write_record(fewer, tmp_path)
    mt_only = a_record(seed=1, tau=1.6)  # the protocol's blocks, but one block's other columns cut
    mt_only["questions"] = [r for r in mt_only["questions"] if r[0] == 1.0 or r[3] == "MT"]
    with pytest.raises(R.RecordError, match=r"at T = 0, 30 nodes the columns .* hold other than the protocol's 20"):
        R.write_record(mt_only, tmp_path)
    other = a_record(seed=1, tau=1.6)  # as many questions, other ones: each column's first swapped for its 21st
    ids = sorted(R.specbench_columns().items())
    swap = {min(q for q, c in ids if c == col): [q for q, c in ids if c == col][20] for col in {c for _, c in ids}}
    other["questions"] = [[t, n, swap.get(q, q), col, tau] for t, n, q, col, tau in other["questions"]]
    path, _ = R.write_record(other, tmp_path)
    with pytest.raises(R.RecordError, match="are not elsi-m3-seed0.json's"):
        R.read_records("table3_f32", tmp_path)
    path.unlink()
    with pytest.raises(R.RecordError, match="table 3"):
        R.read_records("table 3", tmp_path)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda r: r.update(layers="22 23"), "holds 2 layers; method elsi-m3 has 3"),
        (lambda r: r.update(layers="01 22 23"), "field 'layers' is '01 22 23', not ascending distinct layer ids"),
        (lambda r: r.update(layers="1 22 24"), "names layer 24; qwen2.5-coder-0.5b has 24"),
        (
            lambda r: r.update(layers="1 12 20", unit=dict(r["unit"], method="eagle3"), label="EAGLE3"),
            r"not eagle3's set on qwen2.5-coder-0.5b \(EAGLE-3's rule \[2, N//2, N-3\], 24 layers: 1 11 20\)",
        ),
        (lambda r: r.update(curve=[dict(r, curve=[]), dict(r, curve=[])]), "each point once"),
    ],
)
def test_a_records_set_and_curve_fit_its_method(tmp_path, change, message):
    path, _ = R.write_record(a_record(), tmp_path)
    record = json.loads(path.read_text())
    change(record)
    path.write_text(json.dumps(record))
    with pytest.raises(R.RecordError, match=message):
        R.read_records("table3_f32", tmp_path)


def test_one_set_has_one_set_of_criteria_in_a_protocol(tmp_path):
    """A set's criteria (set entropy, the probe's error and agreement) are the protocol's calibration's: two
    records of one set that disagree (another method or seed on the same layers) would put two points for
    one set into the pooled criteria test."""
    R.write_record(a_record(seed=0), tmp_path)
    other = a_record(method="elsi-c-m3")  # the same set (1, 22, 23)
    other["set entropy"] = 0.1
    R.write_record(other, tmp_path)
    with pytest.raises(R.RecordError, match=r"layers 1 22 23 with .* of the same set has"):
        R.read_records("table3_f32", tmp_path)


def test_a_record_that_measured_nothing_in_a_block_is_refused(tmp_path):
    """Every tau of a temperature and tree NaN: the draft measured nothing there, and the tables would fail
    later naming no file."""
    record = a_record()
    record["questions"] = [
        [t, n, q, c, float("nan") if (t, n) == (0.0, 60) else tau] for t, n, q, c, tau in record["questions"]
    ]
    with pytest.raises(R.RecordError, match="no question has a tau at T = 0, 60 nodes"):
        R.write_record(record, tmp_path)
    thin = a_record()  # all but one question of a block without a tau: its AVG would be one question's
    first = next(q for t, n, q, c, tau in thin["questions"] if (t, n) == (0.0, 60))
    thin["questions"] = [
        [t, n, q, c, float("nan") if (t, n) == (0.0, 60) and q != first else tau]
        for t, n, q, c, tau in thin["questions"]
    ]
    with pytest.raises(R.RecordError, match=r"questions without a tau \(T = 0, 60 nodes: \d+ of \d+\), more than 10%"):
        R.write_record(thin, tmp_path)


def test_the_records_are_the_protocol_folders_json_files_and_nothing_else(tmp_path, monkeypatch):
    """A record spelt NAME.JSON or "NAME.json " or moved into a subfolder would be left out of every table
    without a word, as would a protocol folder replaced by a file (all refused); a hidden folder (.git, an
    editor's backup) holds no record; a records folder that is a file is said to be one."""
    path, _ = R.write_record(a_record(), tmp_path)
    (tmp_path / ".old").mkdir()
    (tmp_path / ".old" / "x.json").write_text("{}")
    assert R.record_paths(tmp_path) == [path]
    for name in ("elsi-m3-seed0.JSON", "elsi-m3-seed0.json ", "old/elsi-m3-seed0.json"):
        moved = path.parent / name
        moved.parent.mkdir(exist_ok=True)
        path.rename(moved)
        with pytest.raises(R.RecordError, match=rf"\['{name.split('/')[0]}'\] are no records"):
            R.read_records("table3_f32", tmp_path)
        moved.rename(path)
        if moved.parent != path.parent:
            moved.parent.rmdir()
    other = tmp_path / "table3"
    other.write_text("")
    with pytest.raises(R.RecordError, match="table3: a file where the protocol's folder of records belongs"):
        R.read_records("table3_f32", tmp_path)
    (tmp_path / "file").write_text("")
    with pytest.raises(R.RecordError, match="records folder .*file is a file, not a folder"):
        R.record_paths(tmp_path / "file")
