"""The protocols that trained drafts are units of, and the ledger of units each one owes.

A unit is (family, protocol, method id, seed): one draft. A protocol fixes everything else that
makes its numbers: the training data (prompts, reply engine, n_train), the training settings, the
numeric settings (draft matmuls, target features) and the evaluation questions. Its `ledger` lists
its units in the order a run trains them (the baselines first, reseeds last but where said); `make ledger-<name>`
trains the missing ones (`ledger.owed_units`). A protocol's `digest` is written into each of its records,
so that a record of a protocol whose definition has since changed is refused, never mixed in.

The bf16 protocols are the committed Tables 2 and 3 as they ran (a CPU with bf16 matmul
instructions); each has a float32 twin with the same data, which a CPU without them can add units
to (bf16 autocast runs 31-110x slower there, `bench/bench_bf16.py`). The two share a table only once
their units agree within the reseed range (`twins.joined_tables`). `qwen_strong` (and its twin) is
the strong protocol's data on Qwen2.5-Coder-0.5B, the memory-bound target of the wall-clock runs: 5,000 of its own
vLLM replies, one draft per set.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, replace

from ...common.cachefiles import REPO_ROOT
from ..experiments.experiment_settings import Experiment, from_parameters, numeric_settings

QWEN, SMOLLM2 = "qwen2.5-coder-0.5b", "smollm2-135m"

# the paper's Table 3 layout on the second family: its eight rows, then the reseeds of the two that decide
TABLE3_LEDGER = (
    ("eagle3", 0),
    ("elsi-m3", 0),
    ("elsi-m1-rule", 0),
    ("probe-m3", 0),
    ("eagle2", 0),
    ("elsi-m2", 0),
    ("elsi-c-m2", 0),
    ("elsi-c-m3", 0),
    ("lowest-entropy-m3", 0),
    ("elsi-m3-no-template", 0),
    ("eagle3", 1),
    ("elsi-m3", 1),
    ("eagle3", 2),
    ("elsi-m3", 2),
    # beyond the paper's rows: the two other sets Qwen's calibration gives (ELSI m = 1 unrestricted, (0,),
    # and ELSI m = 3 under the Frobenius variant, (0, 1, 23)), for the criteria's out-of-sample test
    ("elsi-m1", 0),
    ("elsi-m3-frobenius", 0),
)
STRONG_LEDGER = (
    ("eagle3", 0),
    ("elsi-m3", 0),
    ("probe-m3", 0),
    # the reseeds of EAGLE3 and ELSI m = 3 before the other rows: they give SmolLM2's reseed range
    # (`record_tables.reseed_range` needs both), which decides whether its twins (bf16 and float32,
    # `twins.compare`) differ beyond seed noise, and so whether both kinds of machine add to one table
    ("eagle3", 1),
    ("elsi-m3", 1),
    ("eagle2", 0),
    ("elsi-m1-rule", 0),
    ("elsi-c-m3", 0),
    ("lowest-entropy-m3", 0),
    ("elsi-m3-no-template", 0),
    # beyond the paper's ten: two more sets for the criteria's out-of-sample test (SmolLM2's ELSI and
    # ELSI-C m = 2 sets, (10, 29) and (2, 10) on Table 2's calibration, differ from every set above)
    ("elsi-m2", 0),
    ("elsi-c-m2", 0),
    # the seed-level noise floor of the probe's set against EAGLE3's: every trained set trails
    # EAGLE3 at T = 0 on this family, so its verdict rests on seeds of both
    ("probe-m3", 1),
    ("probe-m3", 2),
    ("eagle3", 2),
)
# the strong protocol's data on Qwen2.5-Coder-0.5B (the wall-clock runs' memory-bound target): the probe's m = 3
# set first, the strongest of Table 3's drafts (its T = 0 AVG tau at 60 nodes 0.07-0.09 above EAGLE3's
# under both numeric twins), the one served in vLLM; then the baseline and the paper's method
QWEN_STRONG_LEDGER = (
    ("probe-m3", 0),
    ("eagle3", 0),
    ("elsi-m3", 0),
    # the reseeds that say whether the probe's lead over EAGLE3 at this scale is a reseed's worth
    ("eagle3", 1),
    ("probe-m3", 1),
    ("eagle3", 2),
    ("probe-m3", 2),
)


@dataclass(frozen=True)
class Protocol:
    """One protocol: its name (the tables' prefix), the family, the notebook parameter file its
    Experiment comes from, the fields this protocol sets on top of it, and its ledger."""

    name: str
    family: str
    parameters: str  # notebooks/<file>.yaml, relative to the repository
    overrides: tuple = ()  # ((Experiment field or "train.<field>", value), ...)
    ledger: tuple = ()
    calibration_prompts: int = 200  # the calibration conversations behind its layer sets
    probe_rank: int = 64  # the task probe's components per block (its probe-m3 set)

    def experiment(self) -> Experiment:
        """The Experiment every unit of this protocol trains under, its seeds those of the ledger."""
        exp, _ = from_parameters(REPO_ROOT / self.parameters)
        train = {k.split(".", 1)[1]: v for k, v in self.overrides if k.startswith("train.")}
        plain = {k: v for k, v in self.overrides if not k.startswith("train.")}
        seeds = tuple(sorted({seed for _, seed in self.ledger}))
        return replace(exp, **plain, train=replace(exp.train, **train), seeds=seeds, reseeded=(), lever_lm_head=False)

    @property
    def twins(self) -> tuple[str, str]:
        """What this protocol shares with its numeric twin (the family and the parameter file: the same
        data and layer sets, trained under other numeric settings). Twins rank the same sets with the
        same criteria, so the pooled criteria count one of them (`record_tables.pooled_criteria`)."""
        return self.family, self.parameters

    @property
    def numeric(self) -> dict:
        return numeric_settings(self.experiment())

    @property
    def digest(self) -> str:
        """16 hex digits of what fixes a unit's numbers: the Experiment without the run's own layout
        (seeds, which methods are reseeded, the lever, the curve points, how often to checkpoint)."""
        fields = dataclasses.asdict(self.experiment())
        for name in ("seeds", "reseeded", "lever_lm_head", "curve_prompts"):
            fields.pop(name)
        fields["train"].pop("checkpoint_seconds")
        blob = json.dumps({"family": self.family, **fields}, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


PROTOCOLS = {
    p.name: p
    for p in (
        Protocol(
            "table3",
            QWEN,
            "notebooks/tables_qwen.yaml",
            (("train.autocast_bf16", True),),
            TABLE3_LEDGER,
        ),
        Protocol(
            "table3_f32",
            QWEN,
            "notebooks/tables_qwen.yaml",
            (("train.autocast_bf16", False), ("features", "store"), ("live_bf16", False)),
            TABLE3_LEDGER,
        ),
        Protocol(
            "table2_strong",
            SMOLLM2,
            "notebooks/tables_strong.yaml",
            (("train.autocast_bf16", True),),
            STRONG_LEDGER,
        ),
        Protocol(
            "table2_strong_f32",
            SMOLLM2,
            "notebooks/tables_strong.yaml",
            (("train.autocast_bf16", False), ("live_bf16", False), ("curve_prompts", ())),
            STRONG_LEDGER,
        ),
        Protocol(
            "qwen_strong",
            QWEN,
            "notebooks/tables_qwen_strong.yaml",
            (("train.autocast_bf16", True),),
            QWEN_STRONG_LEDGER,
        ),
        # features live in float32 too: a store of 5,000 conversations' features over the sets' layers
        # would take tens of GB; a unit of this twin on a CPU without bf16 instructions likely exceeds one
        # sitting, which the run's plan says before it starts one
        Protocol(
            "qwen_strong_f32",
            QWEN,
            "notebooks/tables_qwen_strong.yaml",
            (("train.autocast_bf16", False), ("live_bf16", False)),
            QWEN_STRONG_LEDGER,
        ),
    )
}


def protocol(name: str) -> Protocol:
    """The protocol named `name`; KeyError naming the known ones."""
    if name not in PROTOCOLS:
        raise KeyError(f"no protocol {name!r}: the protocols are {sorted(PROTOCOLS)}")
    return PROTOCOLS[name]
