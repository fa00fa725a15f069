"""Notebook 06's experiment: drafts on every layer set, trained alike, and tau by replay.

    calibration stats -> `layer_choices.draft_methods` (the layer sets) -> `run`, five stages (the first
    two in `run_data`):
      `evaluation_data`   SpecBench questions, the target's continuations (greedy; a seeded sample per
                          T > 0) and their target features
      `training_data`     the training prompts' replies, their target features, the draft vocabulary
      `train_group`       one lock-step group of drafts per `groups` entry (seed, lm_head start)
      `heldout_accuracy`  step-1..K accuracy of each draft on the held-out conversations
      `replay_draft`      tau per question by replay at every tree size and temperature

Every stage is cached by its full configuration (replies per batch, feature shards, draft
checkpoints during training, replay per question), so `run` resumes where an interruption left it
and a notebook opened later shows only results of its own configuration. Methods are named by
their id (`layer_choices.draft_methods`) in code and cache keys, by their label in tables.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pandas as pd

from ...common.progress import StageClock
from ...hidden.forward import decoder_layers
from ...inputs.models import load_model
from ...draft.features import FeatureStore
from ...draft.model import Eagle3Draft
from ...draft.replay import question_tau, replay
from .curve import curve_drafts, curve_rows, planned_batches, snapshot_batches, trained_reply_tokens
from .experiment_settings import Experiment, from_parameters, numeric_settings  # noqa: F401 (the names notebooks use)
from .run_data import (
    Evaluation,
    TrainingData,
    data_key,
    evaluation_data,
    feature_layers,
    heldout_features,
    training_data,
)
from ...draft.checkpoints import checkpoint_key, checkpoint_path, finished_drafts, snapshot_path
from ...draft.train import step_accuracy, train_drafts
from ...draft.vocabulary import init_lm_head_from_target

LEVER_SUFFIX = ", lm_head not from target"  # the label of a draft whose lm_head starts random ...
LEVER_ID = "eagle3-random-lm-head"  # ... and the id of EAGLE3's, the lever's ablation


@dataclass(frozen=True)
class Group:
    """Drafts trained in lock-step: one seed, one lm_head start, {method id: source} and their labels."""

    seed: int
    lm_head_from_target: bool
    sources: dict
    labels: dict

    @property
    def name(self) -> str:
        return f"seed{self.seed}" + ("" if self.lm_head_from_target else "-lever")


def groups(exp: Experiment, methods: pd.DataFrame) -> list[Group]:
    """Lock-step groups: every method at the first seed, the `reseeded` ones at the others, and
    (`lever_lm_head`) EAGLE3 at the first seed with a randomly initialised lm_head."""
    sources, labels = dict(zip(methods["id"], methods.source)), dict(zip(methods["id"], methods.method))
    missing = [m for m in exp.reseeded + (("eagle3",) if exp.lever_lm_head else ()) if m not in sources]
    if missing:
        raise ValueError(f"methods {missing} (reseeded, or the lever's eagle3) are not among {list(sources)}")
    out = []
    for i, seed in enumerate(exp.seeds):
        ids = list(sources) if i == 0 else list(exp.reseeded)
        out.append(Group(seed, True, {m: sources[m] for m in ids}, {m: labels[m] for m in ids}))
    if exp.lever_lm_head:
        out.append(
            Group(exp.seeds[0], False, {LEVER_ID: sources["eagle3"]}, {LEVER_ID: labels["eagle3"] + LEVER_SUFFIX})
        )
    return out


def make_draft(model, source, d2t, t2d, seed: int, lm_head_from_target: bool = True) -> Eagle3Draft:
    """A fresh draft on `model` reading `source` (a layer set or FINAL_NORM), with the vocabulary maps
    `d2t` / `t2d` and (by default) the target's lm_head rows of that vocabulary."""
    draft = Eagle3Draft.from_target(model, source, len(d2t), seed=seed)
    draft.set_vocabulary(d2t, t2d)
    if lm_head_from_target:
        init_lm_head_from_target(draft, model.get_output_embeddings())
    return draft


def _group_key(key: dict, group: Group) -> dict:
    """A lock-step group's part of its checkpoint key: `data_key`'s, the seed and the lm_head start."""
    return {**key, "seed": group.seed, **({} if group.lm_head_from_target else {"lm_head": "random"})}


def group_checkpoint(exp: Experiment, key: dict, group: Group, device: str = "cpu"):
    """(path, full key) of one lock-step group's checkpoint; `key` is `data_key`'s."""
    full_key = checkpoint_key(group.sources, replace(exp.train, seed=group.seed), _group_key(key, group), device)
    return checkpoint_path(group.name, full_key), full_key


def train_group(
    exp: Experiment,
    model,
    key: dict,
    data: TrainingData,
    group: Group,
    *,
    progress: bool = True,
    max_batches: int | None = None,
    snapshots: tuple[int, ...] = (),
) -> tuple[dict, dict]:
    """One lock-step group's drafts, trained or resumed from their checkpoint (`group_checkpoint`),
    kept also after the `snapshots` batch counts. Returns ({method id: draft}, train_drafts' output)."""
    drafts = {
        m: make_draft(model, src, data.d2t, data.t2d, group.seed, group.lm_head_from_target)
        for m, src in group.sources.items()
    }
    target_rows = model.get_output_embeddings().weight[data.t2d].detach().float()
    device = next(model.parameters()).device.type
    path, _ = group_checkpoint(exp, key, group, device)
    out = train_drafts(
        drafts,
        data.store,
        target_rows,
        replace(exp.train, seed=group.seed),
        key=_group_key(key, group),
        name=group.name,
        progress=progress,
        max_batches=max_batches,
        snapshots=snapshots,
    )
    assert out["path"] == path, "the checkpoint key is built in group_checkpoint only"
    for draft in drafts.values():
        draft.numeric = numeric_settings(exp)  # what its export's elsi.json records
    return drafts, out


def trained_drafts(exp: Experiment, methods: pd.DataFrame, *, loaded: tuple | None = None) -> dict:
    """The drafts `run` trained at the first seed (lm_head from the target), {method id: Eagle3Draft},
    read from their finished checkpoint alone (each draft's config, source and vocabulary maps are
    stored there; no reply or feature is rebuilt): what notebook 06 measured, for decoding or
    export. Refuses (RuntimeError) when that checkpoint is missing, corrupt or unfinished; it never
    trains (run `make tables`)."""
    model, tokenizer = loaded or load_model(exp.model)
    group = groups(exp, methods)[0]
    device = next(model.parameters()).device.type
    path, full_key = group_checkpoint(exp, data_key(exp, model, tokenizer), group, device)
    drafts = finished_drafts(path, full_key, model)
    for method, source in group.sources.items():
        if drafts[method].config.source != source:
            raise RuntimeError(f"{path}: {method} reads {drafts[method].config.source}, the methods say {source}")
        drafts[method].numeric = numeric_settings(exp)  # the checkpoint's key holds exp's settings
    return drafts


def heldout_accuracy(exp: Experiment, draft: Eagle3Draft, store: FeatureStore) -> dict:
    """{"step k": held-out step-k accuracy} for k = 1..ttt_steps."""
    acc = step_accuracy(draft, store, exp.train.ttt_steps, autocast=exp.train.autocast_bf16)
    return {f"step {k + 1}": a for k, a in enumerate(acc)}


def replay_draft(
    exp: Experiment,
    draft: Eagle3Draft,
    evaluation: Evaluation,
    key: dict,
    *,
    label: str,
    seed: int,
    progress: bool = True,
) -> list[dict]:
    """Per-question tau rows of one draft at every temperature and tree size (`replay`, cached under
    `key`, which identifies the draft)."""
    key = {
        **key,
        "questions": {"per_column": exp.eval_per_column, "seed": exp.eval_seed, "max_length": exp.eval_max_length},
    }
    rows = []
    for T in exp.temperatures:
        per_question = replay(
            draft,
            evaluation.stores[T],
            key={**key, **({"temperature": T} if T else {})},
            tree_nodes=exp.tree_nodes,
            depth=exp.depth,
            top_k=exp.top_k,
            max_tokens=exp.replay_tokens,
            autocast=exp.train.autocast_bf16,
            progress=progress,
            sampled=evaluation.sampled[T],
            desc=f"replay {label} (seed {seed}, T = {T:g})",
        )
        for q, lengths in zip(evaluation.questions.itertuples(), per_question):
            for nodes, rounds in lengths.items():
                rows.append(
                    {
                        "temperature": T,
                        "nodes": nodes,
                        "question_id": q.question_id,
                        "category": q.category,
                        "column": q.column,
                        "tau": question_tau(rounds),
                        "rounds": len(rounds),
                        "accepted": rounds,
                    }
                )
    return rows


@dataclass
class Run:
    """What `run` measured. `results`: per-question tau (id, method label, seed, temperature, nodes,
    question_id, category, column, tau, rounds, accepted) of the drafts with the target's lm_head
    rows; `lever`: the same for the lm_head lever's drafts; `accuracy`: held-out step accuracy per
    draft; `training`: per-batch logs per group; `questions`: the SpecBench questions; `corpus`: the
    sizes of the training data; `drafts`: the first seed's {method id: draft}; `model`, `tokenizer`,
    `evaluation`: the target and the evaluation data, for the real loop; `stage_times`: wall-clock
    seconds of each stage in this run (near zero where a cache answered); `numeric`: how the drafts'
    matmuls and the target's features ran (`numeric_settings`), a column of every frame and each
    draft's `numeric`."""

    results: pd.DataFrame
    lever: pd.DataFrame
    accuracy: pd.DataFrame
    training: dict
    questions: pd.DataFrame
    corpus: dict
    drafts: dict
    model: object = field(repr=False)
    tokenizer: object = field(repr=False)
    evaluation: Evaluation = field(repr=False)
    stage_times: pd.DataFrame = field(default_factory=pd.DataFrame)
    curve: pd.DataFrame = field(
        default_factory=pd.DataFrame
    )  # the learning curve's rows: snapshots, then the finished drafts
    numeric: dict = field(default_factory=dict)  # `numeric_settings`: a column of every frame above that has rows


def run(
    exp: Experiment, methods: pd.DataFrame, *, progress: bool = True, loaded: tuple | None = None, stage_log=None
) -> Run:
    """Run (or resume from the caches) the whole experiment: the five stages of the module docstring.
    `stage_log`: a JSONL file each stage's time is appended to as it ends (`progress.stage_history`
    sums a run interrupted and resumed over several sessions)."""
    clock = StageClock(stage_log)
    with clock("load the target"):
        model, tokenizer = loaded or load_model(exp.model)
        key = data_key(exp, model, tokenizer)
    layers = feature_layers(methods, len(decoder_layers(model)))
    with clock("evaluation replies and features"):
        evaluation = evaluation_data(exp, model, tokenizer, layers, progress)
    with clock("training replies and features"):
        data = training_data(exp, methods, model, tokenizer, progress)
        heldout = heldout_features(exp, model, tokenizer, data, layers, progress)
    results, lever, accuracy, logs, first_drafts, curve = [], [], [], {}, {}, []
    numeric = numeric_settings(exp)
    for i, group in enumerate(groups(exp, methods)):
        total = planned_batches(exp, data.store, group.seed)
        at = snapshot_batches(exp, len(data.train_convs), total) if i == 0 else ()
        with clock(f"training {group.name} ({len(group.sources)} draft{'s' * (len(group.sources) > 1)})"):
            drafts, out = train_group(exp, model, key, data, group, progress=progress, snapshots=at)
        if out["done"] < out["total"]:
            raise RuntimeError(f"training of {group.name} stopped at batch {out['done']} of {out['total']}")
        logs[group.name] = out["log"]
        if group.seed == exp.seeds[0] and group.lm_head_from_target:
            first_drafts = drafts
        for method_id, draft in drafts.items():
            label = group.labels[method_id]
            with clock("held-out step accuracy"):
                accuracy.append({"method": label, "seed": group.seed, **heldout_accuracy(exp, draft, heldout)})
            with clock("replay"):
                rows = replay_draft(
                    exp,
                    draft,
                    evaluation,
                    {"checkpoint": out["path"].name, "method": method_id},
                    label=label,
                    seed=group.seed,
                    progress=progress,
                )
            (results if group.lm_head_from_target else lever).extend(
                {"id": method_id, "method": label, "seed": group.seed, **row} for row in rows
            )
        if at:  # the learning curve: the snapshots, then the finished drafts as its last point
            tokens = trained_reply_tokens(exp, data.store, group.seed)
            full_key = group_checkpoint(exp, key, group, next(model.parameters()).device.type)[1]
            with clock("learning curve"):
                curve += [
                    score_snapshot(
                        exp,
                        model,
                        group,
                        full_key,
                        out["total"],
                        k,
                        heldout,
                        evaluation,
                        len(data.train_convs),
                        progress,
                        reply_tokens=tokens[k - 1],
                    )
                    for k in at
                ]
            scores = {a["method"]: a for a in accuracy if a["seed"] == group.seed}
            curve.append(
                curve_rows(
                    [{**r, **scores[r["method"]]} for r in results if r["seed"] == group.seed],
                    at=out["total"],
                    total=out["total"],
                    n_prompts=len(data.train_convs),
                    reply_tokens=tokens[-1],
                )
            )
    corpus_sizes = {
        "training conversations": len(data.train_convs),
        "held-out conversations": len(data.heldout_convs),
        "training reply tokens": len(data.reply_tokens),
        "SpecBench questions": len(evaluation.questions),
        "draft vocabulary": exp.draft_vocab,
        "draft vocabulary coverage of reply tokens": data.vocabulary_coverage(model.config.vocab_size),
    }
    frames = [pd.DataFrame(rows) for rows in (results, lever, accuracy)]
    frames.append(pd.concat(curve, ignore_index=True) if curve else pd.DataFrame())
    results, lever, accuracy, curve = [f.assign(**numeric) if len(f) else f for f in frames]
    return Run(
        results,
        lever,
        accuracy,
        logs,
        evaluation.questions.drop(columns="conversation"),
        corpus_sizes,
        first_drafts,
        model,
        tokenizer,
        evaluation,
        clock.frame(),
        curve,
        numeric,
    )


def score_snapshot(
    exp: Experiment,
    model,
    group: Group,
    full_key: dict,
    total: int,
    at: int,
    heldout,
    evaluation,
    n_prompts: int,
    progress: bool = True,
    reply_tokens: int | None = None,
) -> pd.DataFrame:
    """Held-out step accuracy and tau by replay of a group's drafts after `at` of its `total` batches
    (`full_key`: the group's checkpoint key, `group_checkpoint`), with where on the curve they sit
    (`curve.curve_rows`)."""
    rows = []
    for method_id, draft in curve_drafts(model, group.name, full_key, at).items():
        accuracy = heldout_accuracy(exp, draft, heldout)
        key = {"checkpoint": snapshot_path(group.name, full_key, at).name, "method": method_id}
        rows += [
            {"id": method_id, "method": group.labels[method_id], "seed": group.seed, **accuracy, **row}
            for row in replay_draft(
                exp,
                draft,
                evaluation,
                key,
                label=f"{group.labels[method_id]} at {at}",
                seed=group.seed,
                progress=progress,
            )
        ]
    return curve_rows(rows, at=at, total=total, n_prompts=n_prompts, reply_tokens=reply_tokens)
