"""Lock-step groups in a ledger run (elsi_lib.study.ledger.unit_groups, owed_units.run, prepared): the largest
group of one seed's owed units that fits, a started group resumed (and only the same group), records
that name their group and drafts found in the group's checkpoint, and a calibration split into what a
group pays once and what each draft adds."""

from __future__ import annotations

import types
from pathlib import Path

import pandas as pd
import pytest
import torch

from elsi_lib.study.ledger import owed_units, prepared
from elsi_lib.study.ledger import draft_records as R
from elsi_lib.study.ledger.unit_groups import GROUP_MARGIN, MAX_GROUP, UnitCost, describe, next_group
from elsi_lib.study.ledger.protocols import protocol
from test_records import questions

MIN = 60.0
COST = UnitCost(shared_s=40 * MIN, draft_s=20 * MIN, rest_s=5 * MIN)  # alone 65 min; two 90; three 115


def nothing_trained(ids, seed):
    return 0.0, 0.0


def test_the_largest_group_that_fits_with_margin_is_planned():
    owed = [("a", 0), ("b", 0), ("c", 0), ("d", 0)]
    assert COST.seconds(3, 3) == 115 * MIN and 115 * GROUP_MARGIN > 120  # three do not fit 120 with margin
    plan = next_group(owed, COST, 120 * MIN, nothing_trained)
    assert plan.ids == plan.owed == ("a", "b") and plan.fits and plan.need_s == 90 * MIN
    plan = next_group(owed, COST, 1000 * MIN, nothing_trained)
    assert plan.ids == ("a", "b", "c", "d")[:MAX_GROUP] and plan.fits
    alone = next_group(owed, COST, 70 * MIN, nothing_trained)  # a unit alone needs no margin
    assert alone.ids == ("a",) and alone.fits
    short = next_group(owed, COST, 60 * MIN, nothing_trained)
    assert short.ids == ("a",) and not short.fits and "about 65 min" in describe(short)
    assert next_group([], COST, 1000 * MIN, nothing_trained) is None


def test_a_group_holds_consecutive_units_of_one_seed_never_jumping_the_ledgers_order():
    """A reseed the ledger puts before later seed-0 rows (its reseed range decides the twins) is not
    overtaken by them."""
    owed = [("a", 0), ("a", 1), ("b", 0), ("b", 1)]
    assert next_group(owed, COST, 1000 * MIN, nothing_trained).ids == ("a",)
    later = next_group(owed[1:], COST, 1000 * MIN, nothing_trained)
    assert (later.seed, later.ids) == (1, ("a",))
    assert next_group([("a", 0), ("b", 0), ("a", 1)], COST, 1000 * MIN, nothing_trained).ids == ("a", "b")
    assert next_group([("a", 0), ("b", 0)], COST, 1000 * MIN, nothing_trained, max_group=1).ids == ("a",)


def test_a_started_group_is_resumed_even_where_a_larger_one_would_fit():
    owed = [("a", 0), ("b", 0), ("c", 0)]

    def trained(ids, seed):
        return (0.5, 1800.0) if ids == ("a", "b") else (0.0, 0.0)

    plan = next_group(owed, COST, 1000 * MIN, trained)
    assert plan.ids == ("a", "b") and plan.share == 0.5 and plan.seconds_before == 1800.0
    assert plan.need_s == 0.5 * 80 * MIN + 2 * 5 * MIN and "resuming at 50%" in describe(plan)
    tight = next_group(owed, COST, 30 * MIN, trained)
    assert tight.ids == ("a", "b") and not tight.fits  # never a fresh group in its place


def test_a_group_whose_records_are_partly_written_evaluates_the_rest():
    """The sitting ended after the group's training and one record: the next run on this machine
    evaluates the others from the same checkpoint, training nothing."""
    owed = [("b", 0), ("c", 0), ("d", 0)]

    def trained(ids, seed):
        return (1.0, 7000.0) if ids == ("a", "b", "c") else (0.0, 0.0)

    plan = next_group(owed, COST, 1000 * MIN, trained, recorded_groups=[(("a", "b", "c"), 0), (("x", "b"), 1)])
    assert plan.ids == ("a", "b", "c") and plan.owed == ("b", "c") and plan.need_s == 2 * 5 * MIN
    fresh = next_group(owed, COST, 1000 * MIN, nothing_trained, recorded_groups=[(("a", "b", "c"), 0)])
    assert fresh.ids == ("b", "c", "d") and fresh.share == 0.0  # the checkpoint is gone: a new group


def test_a_measured_group_rescales_the_cost():
    measured = COST.measured(2, trained_s=80 * MIN * 1.2, rest_s=6 * MIN)
    assert measured.shared_s == pytest.approx(48 * MIN) and measured.draft_s == pytest.approx(24 * MIN)
    assert measured.rest_s == 6 * MIN
    assert COST.measured(2, trained_s=0.0, rest_s=None) == COST  # nothing measured: nothing learnt


# ------------------------------------------------------------------------------------------ a run


class Clock:
    def __init__(self):
        self.now = 0.0

    def monotonic(self):
        return self.now


METHODS = pd.DataFrame(
    {
        "id": ["eagle3", "elsi-m3", "probe-m3", "eagle2", "elsi-m1-rule"],
        "method": ["EAGLE3", "ELSI m=3", "probe m=3", "EAGLE2", "ELSI m=1"],
        "m": [3, 3, 3, 1, 1],
        "source": [(2, 15, 27), (3, 9, 29), (5, 9, 20), "final_norm", (29,)],
        "layers": [
            (1, 14, 26),
            (3, 9, 29),
            (5, 9, 20),
            (29,),
            (29,),
        ],  # records hold elsi's ids (EAGLE3: its rule on 30 layers)
        "entropy": [0.8, 0.9, 0.7, 0.5, 0.6],
    }
).set_index("id", drop=False)


def fake_run(monkeypatch, tmp_path, clock, shared_min=40.0, draft_min=20.0, noise=0.0, done=None):
    """owed_units.run on table2_strong with everything heavy faked: training advances the clock by the
    calibration's own estimate, each draft's evaluation by 20 min (the protocol's fallback rest,
    a third of a unit's training, when no record has measured it). Returns the groups trained."""
    from elsi_lib.study.experiments import experiment

    monkeypatch.setenv("ELSI_DRAFT_RECORDS", str(tmp_path))
    proto = protocol("table2_strong")
    trained_groups = []

    class Ready:
        methods, key, data, heldout, evaluation = METHODS, {}, None, None, None
        exp = types.SimpleNamespace(train=types.SimpleNamespace(feature_noise=noise))
        model = torch.nn.Linear(1, 1)

        def calibrate(self):
            return shared_min * MIN, draft_min * MIN

        def record(self, method_id, seed, accuracy, rows, stages, group=()):
            return _record(proto, method_id, seed, accuracy=accuracy, rows=rows, stages=stages, group=group)

    def train_group(exp, model, key, data, group, progress=True):
        trained_groups.append(tuple(group.sources))
        if tuple(group.sources) not in (done or ()):  # a finished checkpoint trains nothing
            clock.now += (shared_min + draft_min * len(group.sources)) * MIN
        return {m: m for m in group.sources}, {"done": 9, "total": 9, "path": Path("seed0-abc.ckpt")}

    def heldout_accuracy(exp, draft, store):
        return {"step 1": 0.5, "step 2": 0.4, "step 3": 0.3}

    def replay_draft(exp, draft, evaluation, key, *, label, seed, progress=True):
        clock.now += 20 * MIN
        return [  # each draft's own numbers (a seed's taus copied to another seed would be refused)
            {
                "temperature": t,
                "nodes": n,
                "question_id": q,
                "column": column,
                "tau": 1.5 + 0.01 * seed + 0.001 * len(label),
            }
            for t in (0.0, 1.0)
            for n in (30, 60)
            for q, column in questions()
        ]

    monkeypatch.setattr(owed_units, "time", clock)
    monkeypatch.setattr(owed_units, "check_machine", lambda proto: None)
    monkeypatch.setattr(prepared.Prepared, "load", classmethod(lambda cls, proto, progress=True: Ready()))
    for name, fn in (
        ("train_group", train_group),
        ("heldout_accuracy", heldout_accuracy),
        ("replay_draft", replay_draft),
    ):
        monkeypatch.setattr(experiment, name, fn)
    return proto, trained_groups


def test_a_run_trains_a_group_and_each_record_names_it(tmp_path, monkeypatch, capsys):
    """160 minutes: two drafts in lock-step (40 + 2 x 20 of training, 2 x 20 of evaluation = 120; with
    margin 150) fit, three (160, with margin 200) do not; then the next alone (80) does not fit the 40
    left. Both records name the group; a unit's draft is looked for in that group's checkpoint."""
    monkeypatch.setattr(owed_units, "trained_before", lambda exp, key, group, device: (0.0, 0.0))
    proto, trained = fake_run(monkeypatch, tmp_path, Clock())
    written = owed_units.run(proto, 160, progress=False)
    out = capsys.readouterr().out
    assert trained == [("eagle3", "elsi-m3")] and [r["unit"]["method"] for r in written] == ["eagle3", "elsi-m3"]
    assert "2 drafts in lock-step (eagle3, elsi-m3) seed 0: about 120 min" in out
    assert "stopping before probe-m3 seed 0: about 80 min, 40 min left" in out
    for record in R.read_records("table2_strong", tmp_path):
        assert record["stages"]["group"] == ["eagle3", "elsi-m3"]
        assert record["stages"]["seconds"]["training"] == 80 * MIN
    assert prepared.recorded_group(proto, "elsi-m3", 0) == ("eagle3", "elsi-m3")
    assert prepared.recorded_group(proto, "probe-m3", 0) == ("probe-m3",)  # no record: alone
    assert owed_units.recorded_groups(proto) == [(("eagle3", "elsi-m3"), 0)] * 2
    group = prepared.lockstep_group(("eagle3", "elsi-m3"), 0, METHODS)
    assert group.sources == {"eagle3": (2, 15, 27), "elsi-m3": (3, 9, 29)} and group.seed == 0


def test_a_run_resumes_its_started_group_not_a_larger_one(tmp_path, monkeypatch, capsys):
    """EAGLE2 alone was cut at 50% on this machine: it resumes alone, although EAGLE2 and ELSI m = 1
    in lock-step would fit; the record's training counts both sittings'."""
    started = {("eagle2",): (0.5, 3000.0)}

    def trained_before(exp, key, group, device):
        return started.get(tuple(group.sources), (0.0, 0.0))

    monkeypatch.setattr(owed_units, "trained_before", trained_before)
    proto, trained = fake_run(monkeypatch, tmp_path, Clock())
    for method, seed in (("eagle3", 0), ("elsi-m3", 0), ("probe-m3", 0), ("eagle3", 1), ("elsi-m3", 1)):
        R.write_record(_record(proto, method, seed), tmp_path)
    owed_units.run(proto, 1000, progress=False)
    assert (
        trained[:2] == [("eagle2",), ("elsi-m1-rule",)] and "eagle2 seed 0, resuming at 50%" in capsys.readouterr().out
    )
    assert trained[2:] == [("probe-m3",), ("probe-m3", "eagle3")]  # then the reseeds, seed 2's in lock-step
    by_unit = {(r["unit"]["method"], r["unit"]["seed"]): r for r in R.read_records("table2_strong", tmp_path)}
    assert by_unit[("eagle2", 0)]["stages"]["seconds"]["training"] == 3000.0 + (40 + 20) * MIN  # both sittings'


def test_a_run_evaluates_the_rest_of_a_group_its_records_name_training_nothing(tmp_path, monkeypatch, capsys):
    """The sitting ended after the group's training and its first record: on this machine the next
    run reads the finished checkpoint and evaluates the other draft (20 min), the group's training
    seconds kept from the checkpoint."""
    group = ("eagle3", "elsi-m3")

    def trained_before(exp, key, g, device):
        return (1.0, 4800.0) if tuple(g.sources) == group else (0.0, 0.0)

    monkeypatch.setattr(owed_units, "trained_before", trained_before)
    clock = Clock()
    proto, trained = fake_run(monkeypatch, tmp_path, clock, done={group})
    R.write_record({**_record(proto, "eagle3"), "stages": {"seconds": {}, "group": list(group)}}, tmp_path)
    owed_units.run(proto, 25, progress=False)
    out = capsys.readouterr().out
    assert trained == [group] and "2 drafts in lock-step (eagle3, elsi-m3) seed 0, resuming at 100%" in out
    assert ", evaluating elsi-m3: about 20 min" in out and clock.now == 20 * MIN
    mine = R.read_records("table2_strong", tmp_path)
    assert [r["unit"]["method"] for r in mine] == ["eagle3", "elsi-m3"]
    assert mine[1]["stages"] == {
        "seconds": {"training": 4800.0, "held-out step accuracy": 0.0, "replay": 1200.0},
        "group": list(group),
    }


def test_under_feature_noise_every_unit_trains_alone(tmp_path, monkeypatch):
    monkeypatch.setattr(owed_units, "trained_before", lambda exp, key, group, device: (0.0, 0.0))
    proto, trained = fake_run(monkeypatch, tmp_path, Clock(), noise=0.1)
    owed_units.run(proto, 130, progress=False)
    assert trained == [("eagle3",)]


def _record(proto, method, seed=0, *, accuracy=None, rows=None, stages=None, group=()):
    """A record of one of METHODS' units (the ledger's own `Prepared.record`, without a model)."""
    from elsi_lib.study.ledger.units import unit_record

    m = METHODS.loc[method]
    return unit_record(
        proto,
        {"id": method, "method": m.method, "layers": m.layers, "entropy": m.entropy},
        seed,
        prompts=4744,
        accuracy=accuracy or {"step 1": 0.5, "step 2": 0.4, "step 3": 0.3},
        rows=pd.DataFrame(
            [
                [t, n, q, column, 1.5 + 0.01 * seed + 0.001 * len(method)]
                for t in (0.0, 1.0)
                for n in (30, 60)
                for q, column in questions()
            ],
            columns=list(R.QUESTION_FIELDS),
        )  # the questions the fake replay asks
        if rows is None
        else rows,
        probe={"probe error": 0.5, "probe agreement": 0.3},
        stages=stages,
        group=group,
        machine={"cpu": "test"},
    )


# ---------------------------------------------------------------------------------- calibration


def test_the_calibration_times_batches_spread_over_the_plan_in_two_parts(monkeypatch):
    """One warm-up batch, then CALIBRATION_BATCHES spread evenly over the plan; the batch and its soft
    targets (what a group pays once) apart from the draft's step (what each draft adds), both scaled
    to the plan's batch count."""
    from elsi_lib.study.experiments import experiment

    clock, seen = Clock(), []

    class Store:
        def __len__(self):
            return 400

        def length(self, i):
            return 64

    def collate(store, indices, sources):
        seen.append(tuple(indices))
        clock.now += 3.0 if len(seen) == 1 else 1.0  # the warm-up is slower
        return {"final_norm": None}

    def train_step(drafts, optimisers, batch, targets, settings, lr):
        clock.now += 0.5

    monkeypatch.setattr(prepared, "time", clock)
    monkeypatch.setattr(prepared, "collate", collate)
    monkeypatch.setattr(prepared, "soft_targets", lambda final_norm, rows: None)
    monkeypatch.setattr(prepared, "train_step", train_step)
    monkeypatch.setattr(experiment, "make_draft", lambda *a, **k: torch.nn.Linear(1, 1))
    settings = types.SimpleNamespace(batch_tokens=256, epochs=1.0)
    head = torch.nn.Linear(4, 10, bias=False)
    ready = prepared.Prepared(
        protocol("table2_strong"),
        types.SimpleNamespace(train=settings),
        types.SimpleNamespace(get_output_embeddings=lambda: head),
        None,
        METHODS,
        {},
        None,
        types.SimpleNamespace(store=Store(), d2t=None, t2d=torch.arange(5)),
        None,
        None,
        0.0,
        None,
    )
    plan = prepared.batch_plan([64] * 400, 256, 1.0, 0)
    shared, per_draft = ready.calibrate()
    assert len(seen) == 1 + prepared.CALIBRATION_BATCHES and seen[0] == tuple(plan[0])
    positions = [plan.index(list(b)) for b in seen[1:]]
    assert positions == sorted(positions) and positions[-1] > 0.8 * len(plan)  # spread to the end
    assert shared == pytest.approx(1.0 * len(plan)) and per_draft == pytest.approx(0.5 * len(plan))
