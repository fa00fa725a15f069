"""The task probe's data (`selection.probe`): one teacher-forced forward over calibration conversations
(prompt + reply), rows at the reply positions, reduced to the probe's Gram statistics and cached.

A row is a position t whose next token t+1 is a reply token (t + 1 < T): the output of every decoder
layer at t and the target's input embedding of token t+1 (what EAGLE-3's first draft step reads),
the target's state after its final norm at t+1 (what decides token t+2; the regression target) and
the target's greedy token there. Conversations, not rows, are split into training and held-out ones
(seeded), so no conversation is on both sides.
"""

from __future__ import annotations

import io
import json
from typing import Any

import numpy as np
import torch

from ..common.cachefiles import check_writable, keyed_path, read_checked, write_checked
from ..common.identity import model_fingerprint, tokenizer_fingerprint, versions
from ..common.progress import progress_bar
from ..inputs.chat import reply_starts
from ..inputs.prompts import conversations_hash
from ..selection.probe import ProbeChoice, ProbeStats, probe_choice, probe_stats, set_errors
from .forward import hidden_batches, pad_id, plan_batches, tokenize_samples

FORMAT = 1
RANK = 64  # principal components kept per block (at most the model's width)


@torch.no_grad()
def probe_rows(
    model, tokenizer, conversations, *, max_length: int = 1024, batch_tokens: int = 8192, progress: bool = True
) -> dict:
    """x (n, N + 1, d) float32 (block N the embedding of token t+1), y (n, d) float32, next (n,) int64
    and conversation (n,) int64 for every reply row of `conversations` (module docstring)."""
    samples, _ = tokenize_samples(tokenizer, conversations, max_length)
    starts = reply_starts(tokenizer, conversations, max_length)
    embedding, lm_head = model.get_input_embeddings(), model.get_output_embeddings()
    parts: dict[str, list[np.ndarray]] = {"x": [], "y": [], "next": [], "conversation": []}
    bar = progress_bar(total=len(samples), desc="probe forward", unit="conv", disable=not progress)
    for batch in hidden_batches(
        model,
        samples,
        plan_batches([len(s.ids) for s in samples], 64, batch_tokens),
        pad_id(tokenizer),
        entropies=False,
    ):
        for row, sample in enumerate(batch.samples):
            T, first = len(sample.ids), max(starts[sample.index] - 1, 0)
            t = torch.arange(first, T - 1)  # positions whose next token is a reply token
            if not len(t):
                continue
            ids = torch.tensor(sample.ids)
            layers = torch.stack([h[row, t].float().cpu() for h in batch.layers], 1)  # (n_i, N, d)
            following = embedding(ids[t + 1].to(embedding.weight.device)).float().cpu()[:, None]  # (n_i, 1, d)
            target = batch.final_norm[row, t + 1].float()  # (n_i, d)
            parts["x"].append(torch.cat([layers, following], 1).numpy())
            parts["y"].append(target.cpu().numpy())
            parts["next"].append(lm_head(target).argmax(-1).cpu().numpy())
            parts["conversation"].append(np.full(len(t), sample.index))
        bar.update(len(batch.samples))
    bar.close()
    if not parts["x"]:
        raise ValueError("no conversation has a reply token to probe")
    return {k: np.concatenate(v) for k, v in parts.items()}


def heldout_conversations(n: int, share: float, seed: int) -> np.ndarray:
    """Indices of the held-out conversations: a seeded `share` of n, at least one, never all."""
    if not 0 < share < 1 or n < 2:
        raise ValueError(f"need 0 < heldout_share < 1 and at least 2 conversations, got {share} and {n}")
    count = min(n - 1, max(1, round(share * n)))
    return np.sort(np.random.default_rng(seed).permutation(n)[:count])


def cached_probe_choice(
    model, tokenizer, conversations, m: int, *, k_beam: int = 10, allowed=None, required=(), **probe
) -> ProbeChoice:
    """`selection.probe.probe_choice` of `cached_probe(..., **probe)` for m layers (restricted to
    `allowed` / `required` layers when given), itself cached (a JSON beside the statistics: scoring
    every set takes minutes on 2 cores, reading it a moment)."""
    stats, key = cached_probe(model, tokenizer, conversations, with_key=True, **probe)
    restricted = (
        {}
        if allowed is None and not required
        else {"allowed": sorted(allowed or range(stats.n_layers)), "required": sorted(required)}
    )
    choice_key = {**key, "m": m, "k_beam": k_beam, "choice_format": 1, **restricted}
    path = keyed_path("probe", choice_key, suffix=".json")
    if path.is_file():
        try:
            entry = json.loads(read_checked(path))
            if entry["key"] == choice_key:
                c = entry["choice"]
                return ProbeChoice(
                    tuple(c["layers"]),
                    c["error"],
                    c["ridge"],
                    c["search"],
                    {float(r): e for r, e in c["ridge_errors"].items()},
                )
        except (ValueError, KeyError, TypeError):
            pass  # corrupt or foreign: chosen again below
    choice = probe_choice(stats, m, k_beam=k_beam, allowed=allowed, required=required)
    entry = {
        "key": choice_key,
        "choice": {
            "layers": list(choice.layers),
            "error": choice.error,
            "ridge": choice.ridge,
            "search": choice.search,
            "ridge_errors": choice.ridge_errors,
        },
    }
    write_checked(path, json.dumps(entry).encode())
    return choice


def cached_probe(
    model,
    tokenizer,
    conversations,
    *,
    rank: int | None = None,
    heldout_share: float = 0.25,
    seed: int = 0,
    max_length: int = 1024,
    progress: bool = True,
    with_key: bool = False,
):
    """The probe's statistics of `conversations` on `model` (`selection.probe.probe_stats`, `rank`
    components per block, default RANK or the model's width if smaller), from the cache when one of
    this exact configuration is there and intact (a corrupt or foreign file is rebuilt), else computed
    and cached. With `with_key`: (stats, its cache key)."""
    rank = rank or min(RANK, model.config.hidden_size)
    key = {
        "format": FORMAT,
        "model": model_fingerprint(model),
        "tokenizer": tokenizer_fingerprint(tokenizer),
        "library": versions(),
        "conversations": conversations_hash(conversations),
        "rank": rank,
        "heldout_share": heldout_share,
        "seed": seed,
        "max_length": max_length,
    }
    path = keyed_path("probe", key, suffix=".npz")
    check_writable(path.parent)
    if path.is_file():
        try:
            with np.load(io.BytesIO(read_checked(path))) as data:
                if json.loads(str(data["key"])) == key:
                    return (_stats(data), key) if with_key else _stats(data)
        except (ValueError, KeyError, OSError):
            pass  # corrupt, truncated or of another layout: rebuilt below
    rows = probe_rows(model, tokenizer, conversations, max_length=max_length, progress=progress)
    held = np.isin(rows["conversation"], heldout_conversations(len(conversations), heldout_share, seed))
    stats, _ = probe_stats(
        rows["x"][~held], rows["y"][~held], rows["x"][held], rows["y"][held], rank, heldout_next=rows["next"][held]
    )
    buffer = io.BytesIO()
    arrays: dict[str, Any] = {name: np.asarray(getattr(stats, name)) for name in FIELDS}  # (Any: savez's **kwds)
    np.savez(buffer, key=json.dumps(key), **arrays)
    write_checked(path, buffer.getvalue())
    return (stats, key) if with_key else stats


FIELDS = (
    "gram",
    "cross",
    "heldout_gram",
    "heldout_cross",
    "heldout_yy",
    "n_train",
    "n_heldout",
    "rank",
    "kept_variance",
    "heldout_z",
    "heldout_next",
    "y_mean",
)


def _stats(data) -> ProbeStats:
    scalars = {"heldout_yy": float, "n_train": int, "n_heldout": int, "rank": int}
    return ProbeStats(**{name: scalars[name](data[name]) if name in scalars else data[name] for name in FIELDS})


def cached_probe_error(model, tokenizer, conversations, layers, ridge: float, **probe) -> float:
    """The probe's held-out relative error of one set `layers` at `ridge` (as `probe_choice` scores
    every set), from the cached statistics (`cached_probe`)."""
    stats = cached_probe(model, tokenizer, conversations, **probe)
    return float(set_errors(stats, [tuple(int(l) for l in layers)], ridge)[0])
