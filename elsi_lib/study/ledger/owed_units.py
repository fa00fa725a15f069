"""A protocol's ledger: which of its units have a record, and a run that trains the missing ones in
the ledger's order, in lock-step groups of one seed (`ledger_groups`), each written as a record as it
finishes.

    python -m elsi_lib.study.ledger.owed_units PROTOCOL                   the units present, in its twin, and owed
    python -m elsi_lib.study.ledger.owed_units PROTOCOL --run --budget 150

A run refuses a bf16 protocol on a CPU without bf16 matmul instructions (such a machine adds units
of the float32 twins only). It loads the target, the protocol's layer sets and probe, the evaluation
continuations (archived in git, `run_data.continuations_dir`) and the training data, times a few
training batches of a throwaway draft (the calibration: what a group pays once and what each draft
adds), prints the plan, and trains the largest group of consecutive owed units of one seed whose
estimate fits the minutes left, then the next. A draft trained in a group is the one it would be alone; its record
names the group (`prepared.unit_draft` finds it in the group's checkpoint). Units its numeric twin
has are not trained again once the twins agree within the reseed range (`twins.agreeing_twin`; the
joined table holds them). A unit killed mid-way leaves no record; its group's training checkpoint
resumes on a machine that keeps its cache (the same group only: `unit_groups.next_group` finds it),
and the plan counts only the part left. Committing the records is the
Makefile's (`make ledger-<protocol> COMMIT=1`), never this module's.
"""

from __future__ import annotations

import argparse
import sys
import time

import pandas as pd

from ...common.hardware import bf16_matmul_is_slow
from ...draft import checkpoints
from ..experiments import experiment
from . import prepared
from .draft_records import RecordError, lockstep_groups, read_records, unit_path, write_record
from .protocols import PROTOCOLS, Protocol, protocol
from .twins import agreeing_twin
from .unit_groups import MAX_GROUP, UnitCost, describe, next_group
from .units import started_at_commit

COLUMNS = ["protocol", "method", "seed", "present", "in twin", "owed", "record"]  # table_ledgers'
OUTSIDE = "(outside the ledger)"  # the record column of a record no unit of the ledger names
REPLAY_SHARE = 1 / 3  # replay per draft over training, Table 3's run (912 s / 2,748 s), with no record to go by


def status(proto: Protocol) -> pd.DataFrame:
    """One row per unit of the ledger, in its order: method, seed, present (a record exists), in twin
    (the numeric twin's protocol when the twins agree and it has this unit and this protocol not,
    `twins.agreeing_twin`; else ""), owed (neither: a run trains it), its record's file; then any record of the protocol outside
    the ledger."""

    present = {(r["unit"]["method"], r["unit"]["seed"]) for r in read_records(proto.name)}
    twin = agreeing_twin(proto.name)
    theirs = {(r["unit"]["method"], r["unit"]["seed"]) for r in read_records(twin)} if twin else set()
    rows = [
        {
            "method": m,
            "seed": s,
            "present": (m, s) in present,
            "in twin": twin if (m, s) in theirs - present else "",
            "record": str(unit_path({"protocol": proto.name, "method": m, "seed": s})),
        }
        for m, s in proto.ledger
    ]
    extra = sorted(present - set(proto.ledger))
    rows += [{"method": m, "seed": s, "present": True, "in twin": "", "record": OUTSIDE} for m, s in extra]
    table = pd.DataFrame(rows)
    return table.assign(owed=~table.present & (table["in twin"] == ""))


def table_ledgers(table: str) -> pd.DataFrame:
    """The ledgers of the protocols behind one table (named `table` or `<table>_f32`), one row per
    unit with its protocol; empty when no protocol keeps a ledger for that table."""
    frames = [status(p).assign(protocol=n) for n, p in PROTOCOLS.items() if n in (table, f"{table}_f32")]
    if not frames:
        return pd.DataFrame(columns=COLUMNS)
    return pd.concat(frames, ignore_index=True)[COLUMNS]


def counts(table: pd.DataFrame) -> pd.DataFrame:
    """Per protocol of `table_ledgers`'s rows (or `status`'s with a protocol column): units present, in
    its agreeing twin, owed, and in all (of the ledger's units: a record outside it fills none)."""
    table = table[table.record != OUTSIDE]
    by = table.assign(**{"in twin": table["in twin"] != ""}).groupby("protocol", sort=False)
    return by.agg(
        **{
            "present": ("present", "sum"),
            "in twin": ("in twin", "sum"),
            "owed": ("owed", "sum"),
            "units": ("owed", "size"),
        }
    )


def check_machine(proto: Protocol) -> None:
    """Refuse a bf16 protocol where bf16 autocast is 31-110x slower (no bf16 matmul instructions)."""
    exp = proto.experiment()
    if (exp.train.autocast_bf16 or exp.live_bf16) and bf16_matmul_is_slow():
        f32 = [n for n, p in PROTOCOLS.items() if p.family == proto.family and "bf16" not in str(p.numeric)]
        f32.sort(key=lambda n: PROTOCOLS[n].twins != proto.twins)  # its own float32 twin first
        raise SystemExit(
            f"{proto.name} trains under bf16 autocast, and this CPU has no bf16 matmul instructions (31-110x "
            f"slower here): it adds units of float32 protocols only ({', '.join(f32)})"
        )


def trained_before(exp, key: dict, group, device: str = "cpu") -> tuple[float, float]:
    """(share of its batches, training seconds) a unit's drafts already have in this machine's cache:
    its checkpoint from a run that stopped mid-unit (resumed where it stopped); (0.0, 0.0) without
    one, or with one of another configuration or that does not read back."""

    path, full_key = experiment.group_checkpoint(exp, key, group, device)
    state, _ = checkpoints.read_checkpoint(path)
    if state is None or state["key"] != full_key or not state["total"]:
        return 0.0, 0.0
    return state["done"] / state["total"], float(state.get("seconds", 0.0))


def rest_seconds(proto: Protocol, train_s: float) -> float:
    """A unit's seconds after its training (held-out accuracy and replay), before one of `proto` has
    measured them here: the median over the records of its family's protocols (its own first, and
    with evaluation questions like its own; held-out time scaled by the number held out), since
    neither depends on how many prompts a draft trained on; `train_s` * REPLAY_SHARE without one."""
    exp = proto.experiment()
    evaluation = (exp.eval_per_column, exp.replay_tokens)
    for names in ([proto.name], [n for n, p in PROTOCOLS.items() if p.family == proto.family]):
        seconds = []
        for name in names:
            other = PROTOCOLS[name].experiment()
            if (other.eval_per_column, other.replay_tokens) != evaluation:
                continue
            for record in read_records(name):
                stage = record["stages"].get("seconds", {})  # a converted record has none
                if "replay" in stage and "held-out step accuracy" in stage:
                    held = stage["held-out step accuracy"] * exp.n_heldout / other.n_heldout
                    seconds.append(stage["replay"] + held)
        if seconds:
            return float(pd.Series(seconds).median())
    return train_s * REPLAY_SHARE


def recorded_groups(proto: Protocol) -> list:
    """[(method ids, seed)] of the lock-step groups `proto`'s records name (`units.unit_record`)."""
    return [(ids, seed) for (_, seed), ids in lockstep_groups(proto.name).items()]


def run(proto: Protocol, budget_minutes: float, *, progress: bool = True) -> list:
    """Train the owed units of `proto` (`status`: neither present nor in an agreeing twin) in ledger
    order, in lock-step groups of one seed (`unit_groups.next_group`) while each group's estimate
    fits the budget; each unit's record is written (and committed) as it is evaluated. Returns the
    records written."""

    started = time.monotonic()
    started_at_commit()  # the code this run trains with, named in each of its records
    check_machine(proto)
    table = status(proto)
    owed = list(zip(table.method[table.owed], table.seed[table.owed]))
    print(table.to_string(index=False), flush=True)
    if not owed:
        print(f"{proto.name}: every unit of the ledger has its record (its own or its agreeing twin's)")
        return []
    print(
        f"preparing {proto.name}: the target, its layer sets and probe, the evaluation and training data (what this "
        "machine's cache lacks is computed first, which on a new machine can take over an hour; the budget counts it)",
        flush=True,
    )
    ready = prepared.Prepared.load(proto, progress=progress)
    print(f"prepared in {(time.monotonic() - started) / 60:.1f} min (cached now: a rerun here reads it)", flush=True)
    for method_id, seed in [u for u in owed if u[0] not in ready.methods.index]:
        print(f"{method_id}: not among this family's methods (its set is another method's): skipped")
    owed = [u for u in owed if u[0] in ready.methods.index]
    shared_s, draft_s = ready.calibrate()
    cost = UnitCost(shared_s, draft_s, rest_seconds(proto, shared_s + draft_s))
    print(
        f"calibration: a unit alone about {cost.seconds(1, 1) / 60:.1f} min on this machine; in lock-step a group "
        f"pays {shared_s / 60:.1f} min of training once and {draft_s / 60:.1f} per draft, then "
        f"{cost.rest_s / 60:.1f} per draft (held-out accuracy, replay)",
        flush=True,
    )
    device = next(ready.model.parameters()).device.type
    # feature noise is drawn per batch for the sources a batch holds: in a group, a draft's noise
    # would depend on the other drafts' sets, so under noise every unit trains alone
    max_group = 1 if getattr(ready.exp.train, "feature_noise", 0.0) else MAX_GROUP

    def trained(ids, seed):
        return trained_before(ready.exp, ready.key, prepared.lockstep_group(ids, seed, ready.methods), device)

    written = []
    while owed:
        left = budget_minutes * 60 - (time.monotonic() - started)
        plan = next_group(owed, cost, left, trained, recorded_groups(proto), max_group)
        if not plan.fits:
            print(
                f"stopping before {describe(plan)}, {left / 60:.0f} min left (a rerun here needs the estimate "
                "plus reading its cached preparation)",
                flush=True,
            )
            break
        print(f"next: {describe(plan)} ({left / 60:.0f} min left)", flush=True)
        group = prepared.lockstep_group(plan.ids, plan.seed, ready.methods)
        t = time.monotonic()
        drafts, out = experiment.train_group(ready.exp, ready.model, ready.key, ready.data, group, progress=progress)
        if out["done"] < out["total"]:
            raise RuntimeError(f"training of {', '.join(plan.ids)} stopped at batch {out['done']} of {out['total']}")
        trained_s = time.monotonic() - t
        rests = []
        for method_id in plan.owed:
            clock = {"training": plan.seconds_before + trained_s}  # the group's, every sitting's
            t = time.monotonic()
            accuracy = experiment.heldout_accuracy(ready.exp, drafts[method_id], ready.heldout)
            clock["held-out step accuracy"] = time.monotonic() - t
            t = time.monotonic()
            rows = experiment.replay_draft(
                ready.exp,
                drafts[method_id],
                ready.evaluation,
                {"checkpoint": out["path"].name, "method": method_id},
                label=ready.methods.loc[method_id].method,
                seed=plan.seed,
                progress=progress,
            )
            clock["replay"] = time.monotonic() - t
            rests.append(clock["replay"] + clock["held-out step accuracy"])
            record = ready.record(method_id, plan.seed, accuracy, pd.DataFrame(rows), clock, group=plan.ids)
            path, new = write_record(record)
            print(
                f"{method_id} seed {plan.seed}: {'written' if new else 'the same as'} {path} "
                f"(the group's training {clock['training'] / 60:.1f} min, its evaluation {rests[-1] / 60:.1f})",
                flush=True,
            )
            written.append(record)
            owed.remove((method_id, plan.seed))
        cost = cost.measured(len(plan.ids), plan.seconds_before + trained_s, sum(rests) / len(rests))
    return written


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m elsi_lib.study.ledger.owed_units", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("protocol", choices=sorted(PROTOCOLS))
    parser.add_argument(
        "--run", action="store_true", help="train the owed units (missing, and not in an agreeing twin)"
    )
    parser.add_argument("--budget", type=float, default=150.0, help="minutes the run may take (default 150)")
    args = parser.parse_args(argv)
    if args.budget <= 0:
        parser.error(f"--budget must be a positive number of minutes, got {args.budget}")
    proto = protocol(args.protocol)
    if not args.run:
        try:
            table = status(proto)
        except RecordError as err:  # a malformed record: named, one line
            print(f"owed_units: {err}", file=sys.stderr)
            return 1
        print(table.to_string(index=False))
        units = table[table.record != OUTSIDE]  # a record outside the ledger fills none of its units
        twin = set(units["in twin"]) - {""}
        also = f" and {int((units['in twin'] != '').sum())} in its agreeing twin {twin.pop()}" if twin else ""
        outside = len(table) - len(units)
        print(
            f"{proto.name}: {int(units.present.sum())} of {len(proto.ledger)} units present{also}"
            + (f" ({outside} record(s) outside the ledger)" if outside else "")
            + f"; numeric {proto.numeric}"
        )
        return 0
    run(proto, args.budget)
    return 0


if __name__ == "__main__":
    sys.exit(main())
