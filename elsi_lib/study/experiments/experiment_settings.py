"""What fixes a run's numbers (`Experiment`: the training data, the training and numeric settings, the
evaluation questions), read from a notebook's parameter file (`from_parameters`), checked field by
field before any work, and the numeric settings every result records (`numeric_settings`).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ...common.hardware import NUMERIC_COLUMNS, numeric_label
from ...draft.train import TrainSettings

# Experiment's count fields and the least value of each; COUNT_TUPLES: (least value, may the tuple be empty).
COUNTS = {
    "n_train": 1,
    "n_heldout": 0,
    "train_max_new_tokens": 1,
    "eval_per_column": 1,
    "replay_tokens": 1,
    "draft_vocab": 1,
    "depth": 1,
    "top_k": 1,
    "max_length": 1,
    "reply_request": 0,
    "eval_max_length": 1,
    "eval_seed": 0,
}
COUNT_TUPLES = {"tree_nodes": (1, False), "seeds": (0, False), "curve_prompts": (1, True)}


def _check_count(name: str, value, least: int) -> None:
    """`value` is an integer (a bool is not one) of at least `least`; the error names the field."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer >= {least}, got {type(value).__name__} {value!r}")
    if value < least:
        raise ValueError(f"{name} must be an integer >= {least}, got {value}")


def _check_distinct(name: str, values) -> None:
    """No value of a tuple field twice (its runs would be keyed alike)."""
    repeated = sorted({v for v in values if list(values).count(v) > 1})
    if repeated:
        raise ValueError(f"{name} {tuple(values)!r}: {repeated} repeated; give each value once")


@dataclass(frozen=True)
class Experiment:
    """Everything that defines notebook 06's numbers (the cache keys are built from it)."""

    model: str = "smollm2-135m"
    n_train: int = 1000  # training prompts (the target replies to each)
    n_heldout: int = 64  # of those, held out for step accuracy
    train_max_new_tokens: int = 256
    eval_per_column: int = 20  # SpecBench questions per paper column
    replay_tokens: int = 128  # greedy continuation tokens generated and replayed per question
    draft_vocab: int = 8192
    tree_nodes: tuple[int, ...] = (30, 60)  # draft tree sizes (nodes) replayed
    temperatures: tuple[float, ...] = (0.0, 1.0)  # T > 0: replay of a seeded sampled continuation (replay.py)
    depth: int = 6
    top_k: int = 10
    seeds: tuple[int, ...] = (0, 1, 2)  # seed 0 trains every method; later seeds the `reseeded`
    reseeded: tuple[str, ...] = ("eagle3", "elsi-m3")  # method ids
    lever_lm_head: bool = True  # also train EAGLE3 without the lm_head initialisation (what that lever buys)
    train: TrainSettings = field(default_factory=TrainSettings)
    max_length: int = 1024  # training conversations (prompt + reply) keep their first max_length tokens
    reply_engine: str = "hf"  # who writes the training replies: "hf" (transformers) or "vllm" (engines' env)
    reply_request: int = 0  # > n_train: the first n_train replies of vLLM's request for this many prompts (written)
    curve_prompts: tuple[int, ...] = ()  # learning curve: the first seed's drafts also after about this many prompts
    features: str = "store"  # training features: "store" (float16 shards, built once) or "live" (`live.LiveFeatures`)
    live_bf16: bool = False  # live features from a bfloat16-autocast target forward
    eval_seed: int = 0  # which SpecBench questions
    eval_max_length: int = 2048  # SpecBench prompts reach 1,343 tokens (summarization): none is cut

    def __post_init__(self):
        if self.reply_engine not in ("hf", "vllm") or self.features not in ("store", "live"):
            raise ValueError(
                f"reply_engine must be 'hf' or 'vllm' and features 'store' or 'live', got "
                f"{self.reply_engine!r} and {self.features!r}"
            )
        if self.live_bf16 and self.features != "live":
            raise ValueError("live_bf16 applies to features='live' only")
        if self.reply_request and (self.reply_engine != "vllm" or self.reply_request <= self.n_train):
            raise ValueError(
                f"reply_request reads the first n_train ({self.n_train}) replies of a vLLM request for "
                f"more prompts (0: a request of exactly n_train); got {self.reply_request} with reply_engine "
                f"{self.reply_engine!r}"
            )
        self._check_counts()

    def _check_counts(self) -> None:
        """Every count in its range (COUNTS, COUNT_TUPLES, temperatures >= 0), the tuples non-empty where a
        run needs one and without repeats, and n_heldout below n_train (the drafts train on the rest)."""
        for name, least in COUNTS.items():
            _check_count(name, getattr(self, name), least)
        for name, (least, may_be_empty) in COUNT_TUPLES.items():
            values = getattr(self, name)
            if not values and not may_be_empty:
                raise ValueError(f"{name} must hold at least one value, got {values!r}")
            for value in values:
                _check_count(f"every value of {name}", value, least)
            _check_distinct(name, values)
        if not self.temperatures or any(
            isinstance(t, bool) or not isinstance(t, numbers.Real) or not t >= 0 for t in self.temperatures
        ):
            raise ValueError(f"temperatures must be a non-empty tuple of numbers >= 0, got {self.temperatures!r}")
        _check_distinct("temperatures", self.temperatures)
        if self.n_heldout >= self.n_train:
            raise ValueError(
                f"n_heldout {self.n_heldout} must be less than n_train {self.n_train}: the held-out "
                f"conversations are taken from the n_train training prompts, and the drafts train on "
                f"the n_train - n_heldout others"
            )

    @classmethod
    def from_dict(cls, params: dict) -> "Experiment":
        params = dict(params)
        train = TrainSettings(**params.pop("train", {}))
        params = {k: tuple(v) if isinstance(v, list) else v for k, v in params.items()}
        return cls(train=train, **params)


def from_parameters(path) -> tuple[Experiment, list | None]:
    """The experiment of a notebook parameter file (the YAML `make tables` / `make tables-strong` pass
    to papermill: MODEL, EXPERIMENT and, for notebook 07, METHOD_IDS): (Experiment, method ids or None)."""

    params = yaml.safe_load(Path(path).read_text()) or {}
    experiment = Experiment.from_dict(
        {**({"model": params["MODEL"]} if "MODEL" in params else {}), **(params.get("EXPERIMENT") or {})}
    )
    return experiment, params.get("METHOD_IDS")


def numeric_settings(exp: Experiment) -> dict:
    """How `exp`'s numbers are computed, as every table, per-question row and export records them: the
    drafts' matmuls (bf16 autocast or float32: `TrainSettings.autocast_bf16`, by default the CPU's) and
    the target's forward that gives the training features (stored: float32 forward, float16 shards;
    live: bf16 autocast or float32)."""
    forward = numeric_label(exp.live_bf16) if exp.features == "live" else "float32"
    return dict(zip(NUMERIC_COLUMNS, (numeric_label(exp.train.autocast_bf16), f"{exp.features} ({forward} forward)")))
