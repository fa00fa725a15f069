"""Records made from one finished unit (`unit_record`), and what a unit ran on (`ran_on`: the CPU, whether it has bf16 matmul instructions, torch, elsi, the commit)."""

from __future__ import annotations

import functools
import subprocess

import pandas as pd
import torch

from ...common.cachefiles import REPO_ROOT
from ...common.hardware import bf16_matmul_is_slow, cpu_model
from ...common.version import __version__
from ..experiments.criteria_vs_drafts import layers_text
from .protocols import Protocol
from .draft_records import FORMAT, QUESTION_FIELDS, STEPS


@functools.cache
def started_at_commit() -> str | None:
    """The checkout's commit when this process first asked (a ledger run asks at its start, so that its
    records name the code that ran, not a commit made beside the run meanwhile); None outside git."""
    try:
        return subprocess.run(
            ["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def ran_on() -> dict:
    """The machine and software a unit ran on (kept beside its numbers, never compared); the commit is
    `started_at_commit`'s."""

    commit = started_at_commit()
    return {
        "cpu": cpu_model(),
        "bf16 matmul instructions": not bf16_matmul_is_slow(),
        "cores": torch.get_num_threads(),
        "torch": torch.__version__,
        "elsi": __version__,
        "commit": commit,
    }


def _questions(rows: pd.DataFrame) -> list[list]:
    """[[temperature, nodes, question_id, column, tau], ...] sorted, as a record holds them."""
    frame = rows[list(QUESTION_FIELDS)].sort_values(["temperature", "nodes", "question_id"])
    return [[float(t), int(n), int(q), str(c), float(tau)] for t, n, q, c, tau in frame.itertuples(index=False)]


def _point(prompts: int, accuracy: dict, rows: pd.DataFrame) -> dict:
    return {
        "prompts": int(prompts),
        "step accuracy": {s: float(accuracy[s]) for s in STEPS},
        "questions": _questions(rows),
    }


def unit_record(
    proto: Protocol,
    method: dict,
    seed: int,
    *,
    prompts: int,
    accuracy: dict,
    rows: pd.DataFrame,
    probe: dict,
    curve: list[dict] = (),
    stages: dict | None = None,
    group: tuple = (),
    machine: dict | None = None,
) -> dict:
    """The record of one finished unit: `method` a row of `layer_choices.draft_methods` (id, method, layers,
    entropy), `accuracy` {"step k": ...}, `rows` its per-question tau (QUESTION_FIELDS), `probe`
    {"probe error", "probe agreement"} of its set, `curve` earlier points ({prompts, accuracy, rows}),
    `stages` seconds per stage (a group's training is the whole group's), `group` the method ids it
    trained with in lock-step when more than itself."""

    return {
        "format": FORMAT,
        "unit": {"family": proto.family, "protocol": proto.name, "method": method["id"], "seed": int(seed)},
        "protocol digest": proto.digest,
        "label": method["method"],
        "layers": layers_text(method["layers"]),
        "set entropy": float(method["entropy"]),
        "probe error": probe.get("probe error"),
        "probe agreement": probe.get("probe agreement"),
        "numeric": proto.numeric,
        **_point(prompts, accuracy, rows),
        "curve": [_point(p["prompts"], p["accuracy"], p["rows"]) for p in curve],
        "stages": {"seconds": stages or {}, **({"group": list(group)} if len(group) > 1 else {})},
        "ran on": machine if machine is not None else ran_on(),
    }
