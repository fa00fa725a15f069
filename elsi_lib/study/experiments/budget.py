"""What an accepted-token run (`experiment.run`) will cost, before anything runs: minutes per stage
from per-unit costs measured on this 2-core machine."""

from __future__ import annotations

import math
import numbers

import pandas as pd

from ...draft import corpus
from .experiment import groups


# Measured in the first paper-scale runs (2026-11-30): replies 1.9 s each (batches of 16, up to 256
# tokens), features about 370 tok/s, training about 1,550 draft-tokens/s in lock-step (batches of
# 512 tokens), 283 tokens per training conversation, replay 0.7 s per question and draft (both sizes);
# vLLM's replies 1.43 s each (3,072 training prompts in 73 min, `make replies-strong`); a live
# target forward: `live_tok_s`, bench/bench_live.py, whose bf16-autocast forward ran at 1.9x the float32 one.
# `plan(rates=...)` overrides any of them by its key.
RATES = {
    "reply_s": 1.9,
    "vllm_reply_s": 1.43,
    "feature_tok_s": 370.0,
    "live_tok_s": 330.0,
    "live_bf16_speedup": 1.9,
    "train_tok_s": 1550.0,
    "replay_s_per_q": 0.7,
    "tokens_per_conv": 283.0,
}


def _checked_rates(rates: dict) -> dict:
    """`rates`, each a known key (RATES) with a positive number: a misspelt key would otherwise leave
    its default in place, silently."""
    unknown = sorted(set(rates) - set(RATES))
    if unknown:
        raise ValueError(
            f"unknown rate{'s' * (len(unknown) > 1)} {', '.join(map(repr, unknown))}; the known rates "
            f"are {', '.join(map(repr, RATES))}"
        )
    for name, value in rates.items():
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 < value < math.inf:
            raise ValueError(f"rate {name!r} must be a positive number, got {value!r}")
    return rates


def plan(exp, methods: pd.DataFrame, rates: dict | None = None) -> pd.DataFrame:
    """Estimated time of each stage from per-unit costs measured on this 2-core machine (pass `rates`
    to override): minutes per stage, before anything runs."""
    r = {**RATES, **_checked_rates(rates or {})}
    all_groups = groups(exp, methods)
    n_drafts = sum(len(g.sources) for g in all_groups)
    n_eval = exp.eval_per_column * len(corpus.COLUMNS)
    train_tokens = (exp.n_train - exp.n_heldout) * r["tokens_per_conv"] * exp.train.epochs
    n_T = len(exp.temperatures)
    reply_s = r["vllm_reply_s"] if exp.reply_engine == "vllm" else r["reply_s"]
    stored = (exp.n_heldout if exp.features == "live" else exp.n_train) + n_T * n_eval
    scored = n_drafts + len(exp.curve_prompts) * len(all_groups[0].sources)  # the curve's snapshots too
    written = getattr(exp, "reply_request", 0)  # the first n_train replies of a request already written: read
    rows = [
        (
            f"replies (the first {exp.n_train} of {written} written by vllm; SpecBench)"
            if written
            else f"replies ({exp.n_train} training prompts, {exp.reply_engine}; SpecBench)",
            (0 if written else exp.n_train * reply_s) + n_T * n_eval * r["reply_s"],
        ),
        ("stored target features", stored * r["tokens_per_conv"] / r["feature_tok_s"]),
    ]
    if exp.features == "live":
        rows.append(
            (
                f"live target forward{' (bf16)' if exp.live_bf16 else ''} ({len(all_groups)} training run{'s' * (len(all_groups) > 1)})",
                len(all_groups) * train_tokens / (r["live_tok_s"] * (r["live_bf16_speedup"] if exp.live_bf16 else 1)),
            )
        )
    rows += [
        (f"training {n_drafts} drafts", n_drafts * train_tokens / r["train_tok_s"]),
        (
            f"replay {scored} drafts x {n_eval} questions" + (f" x {n_T} temperatures" if n_T > 1 else ""),
            scored * n_eval * n_T * r["replay_s_per_q"],
        ),
    ]
    frame = pd.DataFrame(rows, columns=["stage", "minutes"])
    frame["minutes"] = (frame["minutes"] / 60).round(1)
    return pd.concat([frame, pd.DataFrame([{"stage": "total", "minutes": frame["minutes"].sum()}])], ignore_index=True)
