"""Hidden-state capture: model + conversations -> LayerStats (paper Sec. 4.1-4.2, Eq. 9-11).

Four steps, one function each: look the result up in the cache (`_cached`); run the batched
teacher-forced forward (`forward.hidden_batches`: per-layer hidden states and token entropies,
Eq. 9); per sample keep the top fraction rho of positions by entropy (Eq. 10) and add their blocks
of B to running per-layer float64 sums (`_accumulate`, `Accumulator`; Eq. 11); finish and cache
(`_finish`). Memory is O(N B d) in the number of prompts. Long runs checkpoint and resume; under
torch.distributed, prompts are sharded and the sums all-reduced. Conversations are captured as
given: to cover the model's own replies, write them first (`replies.reply_conversations`).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from ..common.cachefiles import atomic_write_bytes, check_writable, content_checksum, key_digest, keyed_path
from ..inputs.prompts import conversations_hash
from ..selection.entropy import gram_entropy
from .forward import Sample, check_conversations, hidden_batches, pad_id, plan_batches, tokenize_samples
from ..common.identity import model_fingerprint, tokenizer_fingerprint, versions
from .layerstats import CacheError, LayerStats
from ..common.progress import progress_bar
from .settings import CaptureSettings

COUNT_KEYS = ("samples", "tokens_seen", "tokens_eligible", "retained", "dropped_remainder", "blocks",
              "samples_without_block", "truncated_samples")


# ---------------------------------------------------------------- pure per-sample steps

def select_positions(entropy, eligible, rho: float, how: str = "entropy", generator=None):
    """Indices of the kept positions, in their original order (Eq. 10).

    Keeps ceil(rho * n) of the n eligible positions: those with the highest entropy (ties to the
    earlier position), or a uniformly random subset of the same size (`how="random"`).
    """
    import torch

    candidates = torch.nonzero(eligible, as_tuple=False).flatten()
    keep = math.ceil(rho * len(candidates) - 1e-9)
    if how == "random":
        chosen = candidates[torch.randperm(len(candidates), generator=generator)[:keep]]
    else:
        order = torch.sort(-entropy[candidates].double(), stable=True).indices
        chosen = candidates[order[:keep]]
    return torch.sort(chosen).values



# ---------------------------------------------------------------- state kept across batches

class Accumulator:
    """Running sums of blocks per layer, float64, and the counts that go with them."""

    def __init__(self, n_layers: int, block: int, dim: int, keep_samples: bool = False):
        import torch

        self.keep_samples = keep_samples
        self.sample_sums: list = []  # per sample with a block: (N, B, d) float32 block sum, if kept
        self.sample_blocks: list[int] = []
        self.block_sum = torch.zeros(n_layers, block, dim, dtype=torch.float64)  # (N, B, d)
        self.final_sum = torch.zeros(block, dim, dtype=torch.float64)  # (B, d)
        self.abs_max = torch.zeros(n_layers, dim, dtype=torch.float64)  # (N, d)
        self.abs_sum = torch.zeros(n_layers, dim, dtype=torch.float64)  # (N, d)
        self.counts = dict.fromkeys(COUNT_KEYS, 0)
        self.sample_rows: list[tuple[int, np.ndarray]] = []  # (sample index, (N,) entropies)
        self.next_batch = 0

    def add_sample(self, index: int, layers_kept, final_kept, block: int) -> None:
        """layers_kept (N, k, d), final_kept (k, d): one sample's retained hidden states."""
        import torch

        n_layers, kept, dim = layers_kept.shape
        blocks = kept // block
        self.counts["retained"] += kept
        self.counts["dropped_remainder"] += kept - blocks * block
        if kept:
            magnitude = layers_kept.abs().double()  # (N, k, d)
            self.abs_max = torch.maximum(self.abs_max, magnitude.amax(dim=1))
            self.abs_sum += magnitude.sum(dim=1)
        if blocks == 0:
            self.counts["samples_without_block"] += 1
            return
        used = layers_kept[:, : blocks * block].double().reshape(n_layers, blocks, block, dim)
        sample_sum = used.sum(dim=1)  # (N, B, d)
        self.block_sum += sample_sum
        self.final_sum += final_kept[: blocks * block].double().reshape(blocks, block, dim).sum(dim=0)
        self.counts["blocks"] += blocks
        sample_z = (sample_sum / blocks).numpy()
        grams = sample_z @ sample_z.transpose(0, 2, 1)  # (N, B, B)
        self.sample_rows.append((index, gram_entropy(grams)))
        if self.keep_samples:
            self.sample_sums.append(sample_sum.float())
            self.sample_blocks.append(blocks)

    def tensors(self) -> dict:
        import torch

        entropies = np.stack([e for _, e in self.sample_rows]) if self.sample_rows else \
            np.zeros((0, self.block_sum.shape[0]))
        tensors = {"block_sum": self.block_sum, "final_sum": self.final_sum, "abs_max": self.abs_max,
                   "abs_sum": self.abs_sum, "sample_entropy": torch.from_numpy(entropies),
                   "sample_index": torch.tensor([i for i, _ in self.sample_rows], dtype=torch.int64)}
        if self.keep_samples:
            shape = (0, *self.block_sum.shape)
            tensors["sample_sums"] = torch.stack(self.sample_sums) if self.sample_sums else torch.zeros(shape)
            tensors["sample_blocks"] = torch.tensor(self.sample_blocks, dtype=torch.int64)
        return tensors

    def save(self, path: Path, key: str) -> None:
        """Checkpoint the sums, counts and position (`next_batch`) atomically, with a checksum over
        every byte that `restore` reads."""
        from safetensors.torch import save

        tensors = {k: v.contiguous() for k, v in self.tensors().items()}
        header = {"key": key, "counts": json.dumps(self.counts), "next_batch": str(self.next_batch)}
        header["checksum"] = content_checksum(header, {k: v.numpy() for k, v in tensors.items()})
        atomic_write_bytes(path, save(tensors, metadata=header))

    def restore(self, path: Path, key: str) -> str | None:
        """Load a checkpoint written for `key`: None when restored, else why not ("absent", or the
        reason it is discarded). A checkpoint that fails its checksum is never used."""
        from safetensors import safe_open
        from safetensors.torch import load

        if not path.is_file():
            return "absent"
        try:
            tensors = load(path.read_bytes())
            with safe_open(path, "pt") as handle:
                header = handle.metadata() or {}
            if content_checksum(header, {k: v.numpy() for k, v in tensors.items()}) != header.get("checksum"):
                return "it fails its checksum"
            if header.get("key") != key or self.keep_samples != ("sample_sums" in tensors):
                return "it was written for other inputs"
            counts, next_batch = json.loads(header["counts"]), int(header["next_batch"])
        except Exception as err:  # truncated or foreign file: safetensors raises several kinds
            return f"it is unreadable ({type(err).__name__})"
        self.block_sum, self.final_sum = tensors["block_sum"], tensors["final_sum"]
        self.abs_max, self.abs_sum = tensors["abs_max"], tensors["abs_sum"]
        self.sample_rows = list(zip(tensors["sample_index"].tolist(), tensors["sample_entropy"].numpy()))
        if self.keep_samples:
            self.sample_sums = list(tensors["sample_sums"].unbind(0))
            self.sample_blocks = tensors["sample_blocks"].tolist()
        self.counts, self.next_batch = counts, next_batch
        return None


# ---------------------------------------------------------------- the entry points

def capture(model, tokenizer, conversations: list[list[dict]], settings: CaptureSettings | None = None, *,
            batch_size: int = 8, max_batch_tokens: int = 4096, cache: bool = True, checkpoint_every: int = 8,
            progress: bool = True, **overrides) -> LayerStats:
    """Layer representatives Z (N, block, d) of `model` on `conversations`, and their statistics.

    `settings` (default: the paper's `CaptureSettings`) decides the result; keyword `overrides`
    change single fields, e.g. `capture(model, tokenizer, conversations, rho=0.5, block=16)`.
    Results are cached under the cache directory, keyed by the model's fingerprint, the
    conversations and every setting (a predicate `exclude` disables the cache); batch_size and
    max_batch_tokens only set how many samples share a forward. `capture_variants` computes several
    position selections from one forward pass.
    """
    settings = _settings(settings, overrides)
    return capture_variants(model, tokenizer, conversations, {"_": {}}, settings, batch_size=batch_size,
                            max_batch_tokens=max_batch_tokens, cache=cache,
                            checkpoint_every=checkpoint_every, progress=progress)["_"]


def capture_variants(model, tokenizer, conversations: list[list[dict]], variants: dict[str, dict],
                     settings: CaptureSettings | None = None, *, batch_size: int = 8,
                     max_batch_tokens: int = 4096, cache: bool = True, checkpoint_every: int = 8,
                     progress: bool = True, **overrides) -> dict[str, LayerStats]:
    """Several position selections from one pass over the model: {name: LayerStats}.

    Each variant is a dict that changes `settings` in the fields one pass can vary
    (`CaptureSettings.PER_VARIANT`: rho, select, exclude, keep_samples), e.g.
    {"all": {"rho": 1.0}, "entropy": {}, "random": {"select": "random"}}. Each result equals, and
    is cached exactly as, `capture` with those settings: a variant already cached is not
    recomputed, and the model runs only when some variant is missing.
    """
    import torch.distributed as dist

    specs = _variant_settings(variants, _settings(settings, overrides))
    check_conversations(conversations)
    distributed = dist.is_available() and dist.is_initialized()
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    run = {"model": model_fingerprint(model), "tokenizer": tokenizer_fingerprint(tokenizer),
           "prompts_sha256": conversations_hash(conversations),
           "n_conversations": len(conversations), "batch_size": batch_size, "max_batch_tokens": max_batch_tokens,
           "dtype": str(next(model.parameters()).dtype), "library": versions()}
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
    shard = [s for s in samples if s.index % world == rank]
    batches = plan_batches([len(s.ids) for s in shard], batch_size, max_batch_tokens)
    shape = (len(model.get_decoder().layers), shared.block, model.config.hidden_size)  # (N, B, d)
    partials = {name: _path(metadata[name]).with_name(f"{key_digest(metadata[name], 32)}.rank{rank}of{world}.partial.safetensors")
                for name in todo}
    accs, start = _accumulators(specs, metadata, partials, shape, len(batches), resume=cache)

    bar = progress_bar(total=sum(len(s.ids) for s in shard), unit="tok", unit_scale=True, desc="capturing",
                       disable=not progress or rank > 0)
    bar.update(sum(len(shard[i].ids) for b in batches[:start] for i in b))
    for number, hidden in enumerate(hidden_batches(model, shard, batches[start:], pad_id(tokenizer)), start):
        for row, sample in enumerate(hidden.samples):
            for name in todo:
                _accumulate(accs[name], specs[name], sample, hidden, row)
        for acc in accs.values():
            acc.next_batch = number + 1
        bar.update(sum(len(s.ids) for s in hidden.samples))
        if cache and checkpoint_every and (number + 1) % checkpoint_every == 0 and number + 1 < len(batches):
            for name in todo:
                accs[name].save(partials[name], key_digest(metadata[name], 32))
    bar.close()

    for name in todo:
        results[name] = _finish(accs[name], distributed, truncated, shared.block, metadata[name])
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
        raise TypeError("capture uses the conversations as given; to capture the model's own replies, "
                        "write them first: conversations = elsi_lib.reply_conversations(model, tokenizer, prompts)")
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


def _accumulate(acc: "Accumulator", spec: CaptureSettings, sample: Sample, hidden, row: int) -> None:
    """Step 3: one sample of a forward batch into one variant's sums: eligible positions, the
    top rho of them by entropy (or at random, seeded by the sample), their blocks."""
    import torch

    eligible = torch.tensor(sample.eligible(spec.exclude), dtype=torch.bool)
    generator = torch.Generator().manual_seed(spec.seed * 1_000_003 + sample.index)
    kept = select_positions(hidden.entropies[row], eligible, spec.rho, spec.select, generator)
    kept = kept.to(hidden.final_norm.device)
    layers_kept = torch.stack([h[row].index_select(0, kept) for h in hidden.layers]).cpu()  # (N, k, d)
    acc.add_sample(sample.index, layers_kept, hidden.final_norm[row].index_select(0, kept).cpu(), spec.block)
    acc.counts["tokens_seen"] += len(sample.ids)
    acc.counts["tokens_eligible"] += int(eligible.sum())
    acc.counts["samples"] += 1


def _finish(acc: "Accumulator", distributed: bool, truncated: int, block: int, metadata: dict) -> LayerStats:
    tensors = _reduce(acc, distributed)
    counts = {k: int(v) for k, v in tensors.pop("counts").items()}
    counts["truncated_samples"] = truncated
    if counts["blocks"] == 0:
        raise ValueError(f"no full block of {block} retained tokens in any sample "
                         f"({counts['tokens_eligible']} eligible tokens): use more or longer prompts, "
                         "a larger rho or a smaller block")
    order = np.argsort(tensors["sample_index"].numpy(), kind="stable")
    extra = {}
    if "sample_sums" in tensors:
        extra = {"sample_sums": tensors["sample_sums"].numpy()[order],
                 "sample_blocks": tensors["sample_blocks"].numpy()[order]}
    return LayerStats(
        Z=(tensors["block_sum"] / counts["blocks"]).numpy(),
        final_norm=(tensors["final_sum"] / counts["blocks"]).numpy(),
        sample_entropy=tensors["sample_entropy"].numpy()[order],
        sample_index=tensors["sample_index"].numpy()[order],
        abs_max=tensors["abs_max"].numpy(), abs_sum=tensors["abs_sum"].numpy(),
        counts=counts, metadata=metadata, **extra)


def _reduce(acc: Accumulator, distributed: bool) -> dict:
    """The accumulator's tensors, summed (max for abs_max) over all processes when distributed."""
    import torch
    import torch.distributed as dist

    tensors = acc.tensors()
    counts = torch.tensor([acc.counts[k] for k in COUNT_KEYS], dtype=torch.float64)
    if distributed:
        for name in ("block_sum", "final_sum", "abs_sum"):
            dist.all_reduce(tensors[name], op=dist.ReduceOp.SUM)
        dist.all_reduce(tensors["abs_max"], op=dist.ReduceOp.MAX)
        dist.all_reduce(counts, op=dist.ReduceOp.SUM)
        per_sample = [k for k in ("sample_entropy", "sample_index", "sample_sums", "sample_blocks") if k in tensors]
        gathered: list = [None] * dist.get_world_size()  # each process's per-sample tensors
        dist.all_gather_object(gathered, [tensors[k] for k in per_sample])
        for position, k in enumerate(per_sample):
            tensors[k] = torch.cat([part[position] for part in gathered])
    tensors["counts"] = dict(zip(COUNT_KEYS, counts.tolist()))
    return tensors
