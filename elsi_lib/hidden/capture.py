"""Hidden-state capture: model + conversations -> LayerStats (paper Sec. 4.1-4.2, Eq. 9-11).

Four steps: look the result up in the cache (`_cached`); run the batched teacher-forced forward
(`forward.hidden_batches`: per-layer hidden states and token entropies, Eq. 9); per sample keep the
top fraction rho of positions by entropy (Eq. 10) and add their blocks of B to running per-layer
float64 sums (`accumulate`: `accumulate`, `Accumulator`; Eq. 11); finish and cache (`finish`). Memory is O(N B d) in the number of prompts. Long runs checkpoint and resume; under
torch.distributed, prompts are sharded and the sums all-reduced. Conversations are captured as
given: to cover the model's own replies, write them first (`replies.reply_conversations`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch.distributed as dist


from ..common.cachefiles import check_writable, key_digest, keyed_path
from .forward import (
    HiddenBatch,
    check_conversations,
    decoder_layers,
    hidden_batches,
    pad_id,
    plan_batches,
    tokenize_samples,
)
from ..common.identity import conversations_hash, model_fingerprint, tokenizer_fingerprint, versions
from .accumulate import Accumulator, accumulate, check_some_block, finish
from .layerstats import CacheError, LayerStats
from ..common.progress import progress_bar
from .settings import CaptureSettings


# ---------------------------------------------------------------- pure per-sample steps


# ---------------------------------------------------------------- state kept across batches


# ---------------------------------------------------------------- the entry points


def capture(
    model,
    tokenizer,
    conversations: list[list[dict]],
    settings: CaptureSettings | None = None,
    *,
    batch_size: int = 8,
    max_batch_tokens: int = 4096,
    cache: bool = True,
    checkpoint_every: int = 8,
    progress: bool = True,
    **overrides,
) -> LayerStats:
    """Layer representatives Z (N, block, d) of `model` on `conversations`, and their statistics.

    `settings` (default: the paper's `CaptureSettings`) decides the result; keyword `overrides`
    change single fields, e.g. `capture(model, tokenizer, conversations, rho=0.5, block=16)`.
    Results are cached under the cache directory, keyed by the model's fingerprint, the
    conversations and every setting (a predicate `exclude` disables the cache); batch_size and
    max_batch_tokens only set how many samples share a forward. `capture_variants` computes several
    position selections from one forward pass.
    """
    settings = _settings(settings, overrides)
    return capture_variants(
        model,
        tokenizer,
        conversations,
        {"_": {}},
        settings,
        batch_size=batch_size,
        max_batch_tokens=max_batch_tokens,
        cache=cache,
        checkpoint_every=checkpoint_every,
        progress=progress,
    )["_"]


def capture_variants(
    model,
    tokenizer,
    conversations: list[list[dict]],
    variants: dict[str, dict],
    settings: CaptureSettings | None = None,
    *,
    batch_size: int = 8,
    max_batch_tokens: int = 4096,
    cache: bool = True,
    checkpoint_every: int = 8,
    progress: bool = True,
    on_batch: Callable[[HiddenBatch], None] | None = None,
    **overrides,
) -> dict[str, LayerStats]:
    """Several position selections from one pass over the model: {name: LayerStats}.

    Each variant is a dict that changes `settings` in the fields one pass can vary
    (`CaptureSettings.PER_VARIANT`: rho, select, exclude, keep_samples), e.g.
    {"all": {"rho": 1.0}, "entropy": {}, "random": {"select": "random"}}. Each result equals, and
    is cached exactly as, `capture` with those settings: a variant already cached is not
    recomputed, and the model runs only when some variant is missing. `on_batch`, when given, sees
    every batch the forward yields (after the statistics took theirs), for another use of the same
    forward (`probe_capture.probe_alongside`); it sees none when every variant is cached.
    """

    specs = _variant_settings(variants, _settings(settings, overrides))
    check_conversations(conversations)
    n_layers = len(decoder_layers(model))  # before any work: a model whose layers elsi cannot read
    distributed = dist.is_available() and dist.is_initialized()
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    run = {
        "model": model_fingerprint(model),
        "tokenizer": tokenizer_fingerprint(tokenizer),
        "prompts_sha256": conversations_hash(conversations),
        "n_conversations": len(conversations),
        "batch_size": batch_size,
        "max_batch_tokens": max_batch_tokens,
        "dtype": str(next(model.parameters()).dtype),
        "library": versions(),
    }
    metadata = {name: {**run, **spec.key()} for name, spec in specs.items()}
    results = _cached(metadata, specs, cache)
    todo = [name for name in specs if name not in results]
    if not todo:
        return {name: results[name] for name in specs}
    cache = cache and all(specs[name].cacheable for name in todo)
    if cache:
        check_writable(_path(metadata[todo[0]]).parent)  # before the work, not after it

    shared = specs[todo[0]]  # the fields a pass shares are equal in every variant
    samples, truncated = tokenize_samples(tokenizer, conversations, shared.max_length, shared.on_long)
    for name in todo:
        check_some_block(specs[name], samples, None if name == "_" else name)
    shard = [s for s in samples if s.index % world == rank]
    batches = plan_batches([len(s.ids) for s in shard], batch_size, max_batch_tokens)
    shape = (n_layers, shared.block, model.config.hidden_size)  # (N, B, d)
    partials = {
        name: _path(metadata[name]).with_name(
            f"{key_digest(metadata[name], 32)}.rank{rank}of{world}.partial.safetensors"
        )
        for name in todo
    }
    accs, start = _accumulators(specs, metadata, partials, shape, len(batches), resume=cache)

    bar = progress_bar(
        total=sum(len(s.ids) for s in shard),
        unit="tok",
        unit_scale=True,
        desc="capturing",
        disable=not progress or rank > 0,
    )
    bar.update(sum(len(shard[i].ids) for b in batches[:start] for i in b))
    for number, hidden in enumerate(hidden_batches(model, shard, batches[start:], pad_id(tokenizer)), start):
        for row, sample in enumerate(hidden.samples):
            for name in todo:
                accumulate(accs[name], specs[name], sample, hidden, row)
        if on_batch is not None:
            on_batch(hidden)
        for acc in accs.values():
            acc.next_batch = number + 1
        bar.update(sum(len(s.ids) for s in hidden.samples))
        if cache and checkpoint_every and (number + 1) % checkpoint_every == 0 and number + 1 < len(batches):
            for name in todo:
                accs[name].save(partials[name], key_digest(metadata[name], 32))
    bar.close()

    for name in todo:
        results[name] = finish(accs[name], distributed, truncated, shared.block, metadata[name])
        if cache and rank == 0:
            results[name].save(_path(metadata[name]))
        if cache:
            partials[name].unlink(missing_ok=True)
    if distributed:
        dist.barrier()
    return {name: results[name] for name in specs}


# ---------------------------------------------------------------- the steps


def _settings(settings: CaptureSettings | None, overrides: dict) -> CaptureSettings:
    if "responses" in overrides or "max_new_tokens" in overrides:
        raise TypeError(
            "capture uses the conversations as given; to capture the model's own replies, "
            "write them first: conversations = elsi_lib.reply_conversations(model, tokenizer, prompts)"
        )
    if settings is not None and not isinstance(settings, CaptureSettings):
        raise TypeError(f"settings must be a CaptureSettings, got {type(settings).__name__}")
    return (settings or CaptureSettings()).replace(**overrides)


def _variant_settings(variants: dict[str, dict], settings: CaptureSettings) -> dict[str, CaptureSettings]:
    """Each variant's full settings: `settings` changed in the per-variant fields it names."""
    if not variants:
        raise ValueError("no variants to capture")
    specs = {}
    for name, options in variants.items():
        where = "" if name == "_" else f"variant {name!r}: "
        unknown = set(options) - set(CaptureSettings.PER_VARIANT)
        if unknown:
            raise ValueError(f"{where}unknown option(s) {sorted(unknown)}; use {CaptureSettings.PER_VARIANT}")
        try:
            specs[name] = settings.replace(**options)
        except ValueError as err:
            raise ValueError(f"{where}{err}") from None
    return specs


def _path(metadata: dict) -> Path:
    return keyed_path("stats", metadata, suffix=".safetensors", digits=32)


def _cached(metadata: dict[str, dict], specs: dict[str, CaptureSettings], cache: bool) -> dict[str, LayerStats]:
    """Step 1: the variants whose statistics are cached for exactly their metadata. A corrupt or
    stale entry is reported and left to be recomputed."""
    found = {}
    for name, spec in specs.items():
        path = _path(metadata[name])
        if cache and spec.cacheable and path.is_file():
            try:
                found[name] = LayerStats.load(path, expect_metadata=metadata[name])
            except CacheError as err:
                print(f"recomputing {'' if name == '_' else name + ': '}{err}")
    return found


def _accumulators(specs: dict, metadata: dict, partials: dict, shape: tuple, n_batches: int, resume: bool):
    """Fresh accumulators for the variants in `partials` and the batch to start from; with
    `resume`, where every variant's checkpoint left off. A missing, foreign or corrupt checkpoint
    of any variant means starting over (and saying so); a corrupt one is deleted."""

    def fresh():
        return {name: Accumulator(*shape, specs[name].keep_samples) for name in partials}

    accs = fresh()
    if not resume:
        return accs, 0
    why = {name: accs[name].restore(partials[name], key_digest(metadata[name], 32)) for name in accs}
    starts = {acc.next_batch for acc in accs.values()}
    if all(reason is None for reason in why.values()) and len(starts) == 1:
        start = starts.pop()
        print(f"resuming from a checkpoint: batch {start} of {n_batches}")
        return accs, start
    for name, reason in why.items():
        if reason not in (None, "absent"):
            print(f"discarding the checkpoint {partials[name].name}: {reason}; the capture starts again")
            partials[name].unlink(missing_ok=True)
    return fresh(), 0
