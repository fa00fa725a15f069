"""What every unit of one protocol shares, loaded once per run (`Prepared.load`): the target, the
protocol's layer sets and task probe, the evaluation continuations and features, the training data
and held-out features; a calibration of this machine (`calibrate`); and a finished unit's record.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import pandas as pd
import torch

from ..draft.train import batch_plan, collate, soft_targets, train_step
from ..inputs.models import load_model
from .protocols import Protocol
from .run_data import (
    continuations_dir,
    data_key,
    evaluation_data,
    feature_layers,
    heldout_features,
    training_data,
)
from .units import unit_record

CALIBRATION_BATCHES = 4  # training batches timed (the first is a warm-up, not counted)


def protocol_methods(proto: Protocol, loaded: tuple) -> tuple[pd.DataFrame, dict]:
    """The protocol's methods table (`draft_methods`: its calibration statistics and its probe's m = 3
    set) and the probe's choices."""
    from . import calibration
    from .methods import draft_methods

    n = proto.calibration_prompts
    stats = calibration.paper_stats([proto.family], n, seed=0)[proto.family]
    choice = calibration.probe_choices(proto.family, n, (3,), seed=0, rank=proto.probe_rank, loaded=loaded)
    return draft_methods(stats, probe=choice), choice


def unit_group(method_id: str, seed: int, methods: pd.DataFrame):
    """The lock-step group a ledger unit trains alone in (its checkpoint's key)."""
    from .experiment import Group

    row = methods.set_index("id", drop=False).loc[method_id]
    return Group(seed, True, {method_id: row.source}, {method_id: row.method})


def unit_draft(proto: Protocol, method_id: str, seed: int = 0, loaded: tuple | None = None):
    """A finished ledger unit's draft, read from its checkpoint alone (never trained here: a missing
    or unfinished checkpoint raises RuntimeError naming the command that trains it); for decoding,
    benchmarks and export. Returns (model, tokenizer, draft)."""
    from ..draft.checkpoints import finished_drafts
    from .experiment import group_checkpoint
    from .protocol import numeric_settings

    model, tokenizer = loaded or load_model(proto.family)
    methods, _ = protocol_methods(proto, (model, tokenizer))
    if method_id not in set(methods.id):
        raise ValueError(f"{method_id!r} is not a method of {proto.name}; its methods: {', '.join(methods.id)}")
    exp = proto.experiment()
    path, full_key = group_checkpoint(exp, data_key(exp, model, tokenizer), unit_group(method_id, seed, methods))
    try:
        draft = finished_drafts(path, full_key, model)[method_id]
    except RuntimeError as error:
        raise RuntimeError(f"{proto.name} {method_id} seed {seed}: {error} (make ledger-{proto.name})") from None
    draft.numeric = numeric_settings(exp)
    return model, tokenizer, draft


@dataclass
class Prepared:
    proto: Protocol
    exp: object
    model: object
    tokenizer: object
    methods: pd.DataFrame  # indexed by method id
    key: dict
    evaluation: object
    data: object
    heldout: object
    probe: object
    ridge: float
    lm_head: object

    @classmethod
    def load(cls, proto: Protocol, progress: bool = True) -> "Prepared":
        from . import calibration

        exp = proto.experiment()
        model, tokenizer = load_model(proto.family)
        n, rank = proto.calibration_prompts, proto.probe_rank
        methods, choice = protocol_methods(proto, (model, tokenizer))
        layers = feature_layers(methods, len(model.get_decoder().layers))  # every method's: one store for all
        evaluation = evaluation_data(exp, model, tokenizer, layers, progress, archive=continuations_dir())
        data = training_data(exp, methods, model, tokenizer, progress)
        heldout = heldout_features(exp, model, tokenizer, data, layers, progress)
        probe = calibration.probe_statistics(proto.family, n, seed=0, rank=rank, loaded=(model, tokenizer))
        lm_head = model.get_output_embeddings().weight.detach().float().numpy()
        return cls(
            proto,
            exp,
            model,
            tokenizer,
            methods.set_index("id", drop=False),
            data_key(exp, model, tokenizer),
            evaluation,
            data,
            heldout,
            probe,
            choice[3].ridge,
            lm_head,
        )

    def calibrate(self, seed: int = 0) -> float:
        """Seconds one unit's training takes on this machine: a throwaway draft of the protocol's
        widest set trained on CALIBRATION_BATCHES of its batches (not saved), scaled to the plan."""
        from .experiment import make_draft

        widest = self.methods.loc[self.methods.m.idxmax()]
        draft = make_draft(self.model, widest.source, self.data.d2t, self.data.t2d, seed)
        drafts, optimisers = {"x": draft}, {"x": torch.optim.AdamW(draft.parameters(), lr=1e-4)}
        store, settings = self.data.store, self.exp.train
        plan = batch_plan([store.length(i) for i in range(len(store))], settings.batch_tokens, settings.epochs, seed)
        rows = self.model.get_output_embeddings().weight[self.data.t2d].detach().float()
        seconds = []
        for indices in plan[:CALIBRATION_BATCHES]:
            t = time.monotonic()
            batch = collate(store, indices, [widest.source])
            train_step(drafts, optimisers, batch, soft_targets(batch["final_norm"], rows), settings, 1e-4)
            seconds.append(time.monotonic() - t)
        per_batch = sum(seconds[1:]) / max(1, len(seconds) - 1)
        return per_batch * len(plan)

    def record(self, method_id: str, seed: int, accuracy: dict, rows: pd.DataFrame, stages: dict) -> dict:
        from .validation import probe_scores

        method = self.methods.loc[method_id]
        scores = probe_scores([method.layers], self.probe, self.ridge, self.lm_head).iloc[0]
        return unit_record(
            self.proto,
            {"id": method_id, "method": method.method, "layers": method.layers, "entropy": method.entropy},
            seed,
            prompts=len(self.data.train_convs),
            accuracy=accuracy,
            rows=rows,
            probe={"probe error": float(scores["probe error"]), "probe agreement": float(scores["probe agreement"])},
            stages=stages,
        )
