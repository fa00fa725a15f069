"""Draft checkpoints: where a lock-step group's training state lives (keyed by everything that trained
it), written atomically behind a checksum, read back only when whole and of the same key.

A checkpoint holds every draft's record and weights, the optimisers, the batch counter, the log and
the training seconds so far; `train.train_drafts` resumes from it and `finished_drafts` reads the
trained drafts back without the training data.
"""

from __future__ import annotations

import io
import sys
from dataclasses import asdict

import torch

from ..common.cachefiles import keyed_path, read_checked, remove_stale_tmp, write_checked
from .model import draft_from_record


FORMAT = 1  # bump on any change to training that changes its result: old checkpoints are then not reused


def checkpoint_path(name: str, key: dict):
    return keyed_path("drafts", key, prefix=name, suffix=".pt")


def snapshot_key(full_key: dict, at: int) -> dict:
    """The key of a group's drafts as they were after `at` batches (`train_drafts(snapshots=...)`)."""
    return {**full_key, "snapshot_at": int(at)}


def snapshot_path(name: str, full_key: dict, at: int):
    return checkpoint_path(f"{name}-at{int(at)}", snapshot_key(full_key, at))


def save_checkpoint(path, state: dict) -> None:
    """Write a training checkpoint atomically, behind a sha256 of its bytes (`read_checkpoint`)."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    write_checked(path, buffer.getvalue())


def read_checkpoint(path) -> tuple[dict | None, str | None]:
    """(state, None) for a checkpoint whose checksum holds; (None, why not) for a missing,
    truncated, altered or foreign file, which is never read further."""
    remove_stale_tmp(path)  # the temporary file of a write killed before its rename, with a warning
    if not path.is_file():
        return None, "no checkpoint"
    try:
        state = torch.load(io.BytesIO(read_checked(path)), weights_only=False)
    except Exception as err:  # a checksum failure, or bytes that pass it but do not unpickle
        return None, f"{type(err).__name__}: {err}"
    if not isinstance(state, dict) or not {"key", "done", "total", "log", "drafts"} <= set(state):
        return None, "not a training checkpoint"
    return state, None


# settings added after checkpoints existed: at their default they stay out of the key, so that those
# checkpoints (trained without them) are still found
UNKEYED_DEFAULTS = {"feature_noise": 0.0}


def checkpoint_key(sources: dict, settings, key: dict, device: str = "cpu") -> dict:
    """The full key of a lock-step group's checkpoint: the caller's `key` (target, data, starting
    point), the training format and settings (`train.TrainSettings`, not how often to save), each method's source
    ({method: layer set or FINAL_NORM}) and, off the CPU, the device type training ran on."""
    trained_by = {
        k: v
        for k, v in asdict(settings).items()
        if k != "checkpoint_seconds" and not (k in UNKEYED_DEFAULTS and v == UNKEYED_DEFAULTS[k])
    }
    return {
        **key,
        "format": FORMAT,
        "settings": trained_by,
        "methods": {m: str(s) for m, s in sources.items()},
        **({} if device == "cpu" else {"device": device}),
    }


def finished_drafts(path, full_key: dict, target) -> dict:
    """{method: Eagle3Draft} read back from the finished checkpoint at `path` (built with
    `full_key`), on `target`'s embedding: from the drafts' own records (config, source and
    vocabulary maps), never from the training data. RuntimeError naming the file when it is
    missing, corrupt, of another configuration or unfinished."""
    state, problem = read_checkpoint(path)
    if state is None:
        raise RuntimeError(
            f"{path}: {problem}; train the drafts first (the run that trains them: `make tables`, `make tables-strong`)"
        )
    if state["key"] != full_key:
        raise RuntimeError(f"{path} holds drafts of another configuration; train these first")
    if state["done"] < state["total"]:
        raise RuntimeError(
            f"{path}: the drafts are trained to batch {state['done']} of {state['total']}; "
            "finish them first (rerun `make tables` or `make tables-strong`: training resumes)"
        )
    return {m: draft_from_record(record, target) for m, record in state["drafts"].items()}


def resume(path, full_key: dict, drafts: dict, optimisers: dict) -> tuple[int, list, float]:
    """(batches done, log, training seconds so far) from the checkpoint at `path`, loaded into `drafts`
    and `optimisers`; (0, [], 0.0)
    without one. A corrupt or foreign file is discarded (with a message), never resumed."""
    state, problem = read_checkpoint(path)
    if state is None and path.is_file():
        print(f"discarding checkpoint {path.name} ({problem}); training from the start", file=sys.stderr)
        path.unlink()
    if state is None or state["key"] != full_key:
        return 0, [], 0.0
    for m in drafts:
        drafts[m].load_state_dict(state["drafts"][m]["weights"])
        optimisers[m].load_state_dict(state["optimisers"][m])
    return state["done"], state["log"], float(state.get("seconds", 0.0))
