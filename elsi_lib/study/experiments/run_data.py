"""The data stages of a run (`experiment.run`): what the drafts train on and what they are scored on.

    `training_data`    the training prompts' replies (by the protocol's reply engine), split into
                       training and held-out conversations, their target features (a store of
                       float16 shards, or live), and the draft vocabulary the replies give
    `evaluation_data`  SpecBench questions with the target's continuations at every temperature
                       (greedy; a seeded sample per T > 0) and their target features

`data_key` is what every draft's checkpoint depends on besides its training settings.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from ...draft import corpus, features
from ...draft.features import FeatureStore, build_features
from ...hidden.forward import decoder_layers
from ...draft.live import LiveFeatures
from ...draft.config import FINAL_NORM
from ...draft.vocabulary import draft_vocabulary
from .experiment_settings import Experiment
from ...common.cachefiles import REPO_ROOT
from ...common.identity import model_fingerprint, tokenizer_fingerprint, versions
from ...common.identity import conversations_hash


def continuations_dir() -> Path:
    """Where the target's SpecBench continuations are archived (gzipped reply caches, committed, so that
    a new machine recomputes only their features): $ELSI_CONTINUATIONS, else `data/continuations`."""
    return Path(os.environ.get("ELSI_CONTINUATIONS") or REPO_ROOT / "data" / "continuations")


def data_key(exp: Experiment, model, tokenizer) -> dict:
    """What the drafts' training depends on besides TrainSettings (which `train_drafts` adds): the
    target (fingerprint, not its name or path), the training prompts and how their replies and
    features are made, and the draft vocabulary. Known before any reply or feature exists (so
    `trained_drafts` finds a checkpoint without rebuilding the data); the evaluation settings are
    left out, so that changing them never retrains a draft."""

    data = {
        name: getattr(exp, name)
        for name in ("n_train", "n_heldout", "train_max_new_tokens", "draft_vocab", "max_length")
    }
    return {
        "data": data,
        "model": model_fingerprint(model),
        "tokenizer": tokenizer_fingerprint(tokenizer),
        "library": versions(),
        "prompts": conversations_hash(corpus.training_prompt_list(exp.n_train)),
        "replies": corpus.reply_identity(exp.reply_engine),
        "features_format": features.FORMAT,
        **({"features": "live"} if exp.features == "live" else {}),
        **({"live_bf16": True} if exp.live_bf16 else {}),
        **({"reply_request": exp.reply_request} if exp.reply_request else {}),
    }


def feature_layers(methods: pd.DataFrame, n_layers: int) -> list[int]:
    """Every layer a method reads, and the last (features are stored once for all drafts)."""
    return sorted({l for s in methods.source if s != FINAL_NORM for l in s} | {n_layers - 1})


@dataclass
class TrainingData:
    """The training side: conversations (prompt + the target's reply), split into training and
    held-out ones, the training features of `layers`, and the shared draft vocabulary maps."""

    train_convs: list
    heldout_convs: list
    layers: list[int]
    store: FeatureStore | LiveFeatures
    reply_tokens: np.ndarray
    d2t: torch.Tensor
    t2d: torch.Tensor

    def vocabulary_coverage(self, vocab_size: int) -> float:
        """The share of the training replies' tokens inside the draft vocabulary."""
        counts = np.bincount(self.reply_tokens, minlength=vocab_size)
        return float(counts[self.t2d.numpy()].sum() / counts.sum())


def training_conversations(exp: Experiment, model, tokenizer, progress: bool = True) -> list:
    """The n_train training prompts, each followed by the target's reply, as `exp` says they are
    written: by its reply engine, or (reply_request) the first n_train of a larger vLLM request's
    replies, read without the engine."""
    if exp.reply_request:
        return corpus.training_conversations_written(
            model,
            tokenizer,
            exp.reply_request,
            exp.n_train,
            max_new_tokens=exp.train_max_new_tokens,
            max_length=exp.max_length,
        )
    return corpus.training_conversations(
        model,
        tokenizer,
        exp.n_train,
        max_new_tokens=exp.train_max_new_tokens,
        max_length=exp.max_length,
        progress=progress,
        engine=exp.reply_engine,
    )


def training_data(exp: Experiment, methods: pd.DataFrame, model, tokenizer, progress: bool = True) -> TrainingData:
    """Replies to the training prompts (the `n_heldout` last ones held out), the training feature
    store over every layer any method reads, and the draft vocabulary of the training replies."""
    convs = training_conversations(exp, model, tokenizer, progress=progress)
    train_convs, heldout_convs = convs[: exp.n_train - exp.n_heldout], convs[exp.n_train - exp.n_heldout :]
    layers = feature_layers(methods, len(decoder_layers(model)))
    if exp.features == "live":
        store = LiveFeatures(model, tokenizer, train_convs, layers, max_length=exp.max_length, bf16=exp.live_bf16)
    else:
        store = build_features(
            model,
            tokenizer,
            train_convs,
            layers,
            max_length=exp.max_length,
            progress=progress,
            desc="target features (train)",
        )
    reply_tokens = store.reply_tokens()
    counts = np.bincount(reply_tokens, minlength=model.config.vocab_size)
    d2t, t2d = draft_vocabulary(torch.from_numpy(counts), exp.draft_vocab)
    return TrainingData(train_convs, heldout_convs, layers, store, reply_tokens, d2t, t2d)


def heldout_features(exp: Experiment, model, tokenizer, data: TrainingData, layers, progress: bool = True):
    """The target features of the held-out conversations, at the stored layers (step accuracy reads them)."""
    return build_features(
        model,
        tokenizer,
        data.heldout_convs,
        layers,
        max_length=exp.max_length,
        progress=progress,
        desc="target features (held-out)",
    )


@dataclass
class Evaluation:
    """The evaluation side: SpecBench questions, and per temperature the target's continuations, the
    sampled ids (None at T = 0) and their target features."""

    questions: pd.DataFrame
    conversations: dict
    sampled: dict
    stores: dict


def evaluation_data(
    exp: Experiment, model, tokenizer, layers, progress: bool = True, archive: Path | None = None
) -> Evaluation:
    """SpecBench questions with the target's continuations at every temperature, and their features;
    `archive` (e.g. `continuations_dir()`): where the continuations are archived and read from."""
    if not exp.temperatures or min(exp.temperatures) < 0:
        raise ValueError(f"temperatures must be non-empty and >= 0, got {exp.temperatures}")
    questions = corpus.eval_questions(exp.eval_per_column, seed=exp.eval_seed)
    conversations, sampled, stores = {}, {}, {}
    for T in exp.temperatures:
        out = corpus.eval_conversations(
            model,
            tokenizer,
            questions,
            max_new_tokens=exp.replay_tokens,
            max_length=exp.eval_max_length,
            progress=progress,
            temperature=T,
            seed=exp.eval_seed,
            archive=archive,
        )
        conversations[T], sampled[T] = (out, None) if T == 0 else out
    for T in exp.temperatures:  # after every reply: the features of one temperature need only its own
        name = "SpecBench" if T == 0 else f"SpecBench T={T:g}"
        stores[T] = build_features(
            model,
            tokenizer,
            conversations[T],
            layers,
            max_length=exp.eval_max_length,
            progress=progress,
            desc=f"target features ({name})",
        )
    return Evaluation(questions, conversations, sampled, stores)
