"""What every unit of one protocol shares, loaded once per run (`Prepared.load`): the target, the
protocol's layer sets and task probe, the evaluation continuations and features, the training data
and held-out features; a calibration of this machine (`calibrate`); and a finished unit's record.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import pandas as pd
import torch

from ...draft import checkpoints
from ...draft.train import batch_plan, collate, soft_targets, train_step
from ...hidden.forward import decoder_layers
from ...inputs.models import load_model
from ..experiments import experiment
from ..experiments.criteria_vs_drafts import probe_scores
from ..experiments.experiment_settings import numeric_settings
from ..experiments.layer_choices import draft_methods
from ..paper import captures
from .draft_records import lockstep_groups
from .protocols import Protocol
from ..experiments.run_data import (
    continuations_dir,
    data_key,
    evaluation_data,
    feature_layers,
    heldout_features,
    training_data,
)
from .units import unit_record

CALIBRATION_BATCHES = 8  # training batches timed, spread over the plan (after one warm-up)


def protocol_methods(proto: Protocol, loaded: tuple) -> tuple[pd.DataFrame, dict]:
    """The protocol's methods table (`draft_methods`: its calibration statistics and its probe's m = 3
    set) and the probe's choices."""

    n = proto.calibration_prompts
    stats = captures.paper_stats([proto.family], n, seed=0)[proto.family]
    choice = captures.probe_choices(proto.family, n, (3,), seed=0, rank=proto.probe_rank, loaded=loaded)
    return draft_methods(stats, probe=choice), choice


def lockstep_group(ids, seed: int, methods: pd.DataFrame):
    """The lock-step group ledger units `ids` (method ids, ledger order) train in: its checkpoint's
    key. A unit trained alone is a group of one."""

    rows = methods.set_index("id", drop=False).loc[list(ids)]
    return experiment.Group(seed, True, dict(zip(rows.id, rows.source)), dict(zip(rows.id, rows.method)))


def recorded_group(proto: Protocol, method_id: str, seed: int = 0) -> tuple:
    """The method ids a unit trained with in lock-step, as its record names them (`units.unit_record`);
    (method_id,) for a unit trained alone, a record from before groups, or no record yet."""

    return lockstep_groups(proto.name).get((method_id, seed), (method_id,))


def unit_draft(proto: Protocol, method_id: str, seed: int = 0, loaded: tuple | None = None):
    """A finished ledger unit's draft, read from its group's checkpoint alone (`recorded_group`; never
    trained here: a missing or unfinished checkpoint raises RuntimeError naming the command that
    trains it); for decoding, benchmarks and export. Returns (model, tokenizer, draft)."""

    model, tokenizer = loaded or load_model(proto.family)
    methods, _ = protocol_methods(proto, (model, tokenizer))
    if method_id not in set(methods.id):
        raise ValueError(f"{method_id!r} is not a method of {proto.name}; its methods: {', '.join(methods.id)}")
    exp = proto.experiment()
    group = lockstep_group(recorded_group(proto, method_id, seed), seed, methods)
    path, full_key = experiment.group_checkpoint(exp, data_key(exp, model, tokenizer), group)
    try:
        draft = checkpoints.finished_drafts(path, full_key, model)[method_id]
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

        exp = proto.experiment()
        model, tokenizer = load_model(proto.family)
        n, rank = proto.calibration_prompts, proto.probe_rank
        methods, choice = protocol_methods(proto, (model, tokenizer))
        layers = feature_layers(methods, len(decoder_layers(model)))  # every method's: one store for all
        evaluation = evaluation_data(exp, model, tokenizer, layers, progress, archive=continuations_dir())
        data = training_data(exp, methods, model, tokenizer, progress)
        heldout = heldout_features(exp, model, tokenizer, data, layers, progress)
        probe = captures.probe_statistics(proto.family, n, seed=0, rank=rank, loaded=(model, tokenizer))
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

    def calibrate(self, seed: int = 0) -> tuple[float, float]:
        """Seconds of one group's training on this machine, in two parts scaled to the plan: what a
        group pays once per batch (the batch with the target's features and greedy token, the soft
        targets) and what each draft adds (its training step). Timed on CALIBRATION_BATCHES batches
        spread evenly over the plan (their lengths vary), after one untimed warm-up, with a throwaway
        draft of the protocol's widest set (not saved)."""

        widest = self.methods.loc[self.methods.m.idxmax()]
        draft = experiment.make_draft(self.model, widest.source, self.data.d2t, self.data.t2d, seed)
        drafts, optimisers = {"x": draft}, {"x": torch.optim.AdamW(draft.parameters(), lr=1e-4)}
        store, settings = self.data.store, self.exp.train
        plan = batch_plan([store.length(i) for i in range(len(store))], settings.batch_tokens, settings.epochs, seed)
        rows = self.model.get_output_embeddings().weight[self.data.t2d].detach().float()
        if not plan:
            raise ValueError(f"{self.proto.name}: no training batch to calibrate on (an empty store)")
        n = min(CALIBRATION_BATCHES, len(plan))
        timed = [plan[0]] + [plan[int((i + 0.5) * len(plan) / n)] for i in range(n)]  # the first warms up
        shared, step = [], []
        for indices in timed:
            t = time.monotonic()
            batch = collate(store, indices, [widest.source])
            targets = soft_targets(batch["final_norm"], rows)
            t_step = time.monotonic()
            train_step(drafts, optimisers, batch, targets, settings, 1e-4)
            shared.append(t_step - t)
            step.append(time.monotonic() - t_step)
        return sum(shared[1:]) / n * len(plan), sum(step[1:]) / n * len(plan)

    def record(
        self, method_id: str, seed: int, accuracy: dict, rows: pd.DataFrame, stages: dict, group: tuple = ()
    ) -> dict:

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
            group=group,
        )
