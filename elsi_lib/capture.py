"""Hidden-state capture: model + conversations -> LayerStats (paper Sec. 4.1-4.2, Eq. 9-11).

Per batch: one forward of the decoder with a hook on every decoder layer (removed in `finally`);
token entropies from the final hidden state through the LM head in chunks (Eq. 9); per sample the
top fraction rho of positions by entropy (Eq. 10); the retained positions cut into blocks of B and
summed into running per-layer sums (Eq. 11). Memory is O(N B d) in the number of prompts. Long
runs checkpoint and resume; under torch.distributed, prompts are sharded and the sums all-reduced.
"""
from __future__ import annotations

import json
import math
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .cachefiles import atomic_write_bytes, cache_dir, sha256_text
from .data import conversations_hash
from .entropy import gram_entropy
from .formatting import model_fingerprint, tokenize_conversation
from .layerstats import CacheError, LayerStats
from .responses import generate_responses, with_replies

EXCLUDE_MODES = ("none", "first", "template")
SELECT_MODES = ("entropy", "random")
COUNT_KEYS = ("samples", "tokens_seen", "tokens_eligible", "retained", "dropped_remainder", "blocks",
              "samples_without_block", "truncated_samples")


@dataclass
class Sample:
    index: int  # position in the caller's conversation list
    ids: list[int]
    is_template: list[bool]  # the chat template added this token

    def eligible(self, exclude) -> list[bool]:
        """Positions that may enter the statistics under `exclude` (see `capture`)."""
        if exclude == "none":
            return [True] * len(self.ids)
        if exclude == "first":
            return [p > 0 for p in range(len(self.ids))]
        if exclude == "template":
            return [not t for t in self.is_template]
        return [not exclude(p, t, tpl) for p, (t, tpl) in enumerate(zip(self.ids, self.is_template))]


# ---------------------------------------------------------------- pure per-sample steps

def token_entropy(final_hidden, lm_head, softcap: float | None = None, chunk_elements: int = 1 << 25):
    """H_t = -sum_v p_t(v) log p_t(v) of the next-token distribution (Eq. 9), (T, d) -> (T,).

    Logits are formed `chunk_elements // vocab` positions at a time, so a large vocabulary never
    materializes a (T x V) tensor.
    """
    import torch

    vocab = lm_head.weight.shape[0]
    step = max(1, chunk_elements // vocab)
    out = []
    for start in range(0, final_hidden.shape[0], step):
        logits = lm_head(final_hidden[start:start + step]).float()  # (c, V)
        if softcap:
            logits = softcap * torch.tanh(logits / softcap)
        logp = torch.log_softmax(logits, dim=-1)
        out.append(-(logp.exp() * logp).sum(dim=-1))  # (c,)
    return torch.cat(out) if out else final_hidden.new_zeros(0, dtype=torch.float32)


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
        from safetensors.torch import save

        header = {"key": key, "counts": json.dumps(self.counts), "next_batch": str(self.next_batch)}
        atomic_write_bytes(path, save({k: v.contiguous() for k, v in self.tensors().items()}, metadata=header))

    def restore(self, path: Path, key: str) -> bool:
        """Load a checkpoint written for `key`; False (and no change) when absent, foreign or broken."""
        from safetensors import safe_open
        from safetensors.torch import load

        try:
            tensors = load(path.read_bytes())
            with safe_open(path, "pt") as handle:
                header = handle.metadata() or {}
            if header.get("key") != key:
                return False
            counts, next_batch = json.loads(header["counts"]), int(header["next_batch"])
        except Exception:
            return False
        self.block_sum, self.final_sum = tensors["block_sum"], tensors["final_sum"]
        self.abs_max, self.abs_sum = tensors["abs_max"], tensors["abs_sum"]
        if self.keep_samples != ("sample_sums" in tensors):
            return False
        self.sample_rows = list(zip(tensors["sample_index"].tolist(), tensors["sample_entropy"].numpy()))
        if self.keep_samples:
            self.sample_sums = list(tensors["sample_sums"].unbind(0))
            self.sample_blocks = tensors["sample_blocks"].tolist()
        self.counts, self.next_batch = counts, next_batch
        return True


# ---------------------------------------------------------------- model plumbing

@contextmanager
def layer_outputs(model):
    """Collect the output of every decoder layer during a forward; hooks removed in `finally`."""
    decoder = model.get_decoder()
    captured: list = [None] * len(decoder.layers)

    def hook_for(i):
        def hook(module, args, output):
            captured[i] = (output[0] if isinstance(output, tuple) else output).detach()
        return hook

    handles = [layer.register_forward_hook(hook_for(i)) for i, layer in enumerate(decoder.layers)]
    try:
        yield captured
    finally:
        for handle in handles:
            handle.remove()


def plan_batches(lengths: list[int], batch_size: int, max_batch_tokens: int) -> list[list[int]]:
    """Group sample positions by length into batches of at most `batch_size` samples and
    `max_batch_tokens` padded tokens; deterministic for given lengths."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    batches, current = [], []
    for i in order:
        if current and (len(current) + 1 > batch_size or (len(current) + 1) * lengths[i] > max_batch_tokens):
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches


def pad_batch(samples: list[Sample], pad_id: int):
    """Right-padded (b, T) ids and attention mask."""
    import torch

    width = max(len(s.ids) for s in samples)
    ids = torch.full((len(samples), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(samples), width), dtype=torch.long)
    for row, s in enumerate(samples):
        ids[row, : len(s.ids)] = torch.tensor(s.ids)
        mask[row, : len(s.ids)] = 1
    return ids, mask


def _check_finite(hidden, layer: str, samples: list[Sample]) -> None:
    import torch

    if torch.isfinite(hidden).all():  # padding rows included: finite too in the normal case
        return
    for row, s in enumerate(samples):
        if not torch.isfinite(hidden[row, : len(s.ids)]).all():
            raise FloatingPointError(f"NaN or Inf in the hidden state of {layer} for sample {s.index} "
                                     "(fp16 overflow? load the model in bfloat16 or float32)")


# ---------------------------------------------------------------- the entry point

def _prepare(tokenizer, conversations, max_length, on_long) -> tuple[list[Sample], int]:
    samples, truncated = [], 0
    for index, conversation in enumerate(conversations):
        ids, is_template = tokenize_conversation(tokenizer, conversation)
        if len(ids) > max_length:
            if on_long == "error":
                raise ValueError(f"conversation {index} has {len(ids)} tokens > max_length={max_length} "
                                 "(pass on_long='truncate' to cut it)")
            ids, is_template = ids[:max_length], is_template[:max_length]
            truncated += 1
        samples.append(Sample(index, ids, list(is_template)))
    return samples, truncated


VARIANT_KEYS = ("rho", "select", "exclude", "keep_samples")


def _validate_variant(name: str, rho, exclude, select) -> None:
    where = "" if name == "_" else f"variant {name!r}: "
    if not 0 < rho <= 1:
        raise ValueError(f"{where}rho must lie in (0, 1], got {rho}")
    if not (callable(exclude) or exclude in EXCLUDE_MODES):
        raise ValueError(f"{where}exclude must be one of {EXCLUDE_MODES} or a predicate, got {exclude!r}")
    if select not in SELECT_MODES:
        raise ValueError(f"{where}select must be one of {SELECT_MODES}, got {select!r}")


def _validate(conversations, block, on_long, responses, max_length):
    if not conversations:
        raise ValueError("no conversations to capture")
    if not isinstance(block, int) or block < 2:
        raise ValueError(f"block must be an integer >= 2, got {block!r}")
    if on_long not in ("truncate", "error"):
        raise ValueError(f"on_long must be 'truncate' or 'error', got {on_long!r}")
    if responses not in ("generate", "none"):
        raise ValueError(f"responses must be 'generate' or 'none', got {responses!r}")
    if max_length < 2:
        raise ValueError("max_length must be >= 2")
    for i, conversation in enumerate(conversations):
        if not conversation or not all(isinstance(m, dict) and "content" in m and "role" in m for m in conversation):
            raise ValueError(f"conversation {i} must be a non-empty list of {{role, content}} messages")


def capture(model, tokenizer, conversations: list[list[dict]], *, rho: float = 0.3, block: int = 32,
            max_length: int = 1024, batch_size: int = 8, max_batch_tokens: int = 4096,
            responses: str = "generate", max_new_tokens: int = 128, exclude="none", select: str = "entropy",
            seed: int = 0, on_long: str = "truncate", keep_samples: bool = False, cache: bool = True,
            checkpoint_every: int = 8, progress: bool = True) -> LayerStats:
    """Layer representatives Z (N, block, d) of `model` on `conversations`, and their statistics.

    rho: fraction of each sample's eligible positions kept (1 keeps all). block: B, rows of Z.
    responses: "generate" appends the model's own greedy reply (cached) before capturing; "none"
    uses the conversations as they are. exclude: "none" (the paper), "first" (position 0),
    "template" (every token the chat template adds) or a predicate (position, token_id,
    is_template) -> bool that is True for positions to leave out. select: "entropy" (the paper) or
    "random" (the same number of positions, seeded: a control). on_long: "truncate" prompts longer
    than max_length (counted) or raise ("error"). keep_samples: also keep each sample's block sum
    (S, N, B, d float32, for bootstrapping over prompts; memory grows with S). Results are cached
    under the cache directory, keyed by everything that produced them (a predicate `exclude`
    disables the cache). `capture_variants` computes several selections from one forward pass.
    """
    variant = dict(rho=rho, exclude=exclude, select=select, keep_samples=keep_samples)
    return capture_variants(model, tokenizer, conversations, {"_": variant}, block=block, max_length=max_length,
                            batch_size=batch_size, max_batch_tokens=max_batch_tokens, responses=responses,
                            max_new_tokens=max_new_tokens, seed=seed, on_long=on_long, cache=cache,
                            checkpoint_every=checkpoint_every, progress=progress)["_"]


def capture_variants(model, tokenizer, conversations: list[list[dict]], variants: dict[str, dict], *,
                     block: int = 32, max_length: int = 1024, batch_size: int = 8, max_batch_tokens: int = 4096,
                     responses: str = "generate", max_new_tokens: int = 128, seed: int = 0,
                     on_long: str = "truncate", cache: bool = True, checkpoint_every: int = 8,
                     progress: bool = True) -> dict[str, LayerStats]:
    """Several position selections from one pass over the model: {name: LayerStats}.

    Each variant is a dict of `capture`'s per-selection options (rho, select, exclude,
    keep_samples; missing ones take capture's defaults), e.g.
    {"all": {"rho": 1.0}, "entropy": {}, "random": {"select": "random"}}. Each result equals, and
    is cached exactly as, `capture` with those options: a variant already cached is not recomputed,
    and the model runs only when some variant is missing.
    """
    import torch
    import torch.distributed as dist
    from tqdm.auto import tqdm

    if not variants:
        raise ValueError("no variants to capture")
    specs = {}
    for name, options in variants.items():
        unknown = set(options) - set(VARIANT_KEYS)
        if unknown:
            raise ValueError(f"variant {name!r}: unknown option(s) {sorted(unknown)}; use {VARIANT_KEYS}")
        spec = {"rho": 0.3, "select": "entropy", "exclude": "none", "keep_samples": False, **options}
        _validate_variant(name, spec["rho"], spec["exclude"], spec["select"])
        specs[name] = spec
    _validate(conversations, block, on_long, responses, max_length)
    distributed = dist.is_available() and dist.is_initialized()
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    fingerprint = model_fingerprint(model)
    common = {"model": fingerprint, "prompts_sha256": conversations_hash(conversations),
              "n_conversations": len(conversations), "block": block, "max_length": max_length,
              "batch_size": batch_size, "max_batch_tokens": max_batch_tokens, "responses": responses,
              "max_new_tokens": max_new_tokens if responses == "generate" else None, "seed": seed,
              "on_long": on_long, "dtype": str(next(model.parameters()).dtype), "library": _versions()}
    metadata, keys, paths, results = {}, {}, {}, {}
    for name, spec in specs.items():
        exclude = spec["exclude"]
        metadata[name] = {**common, "rho": spec["rho"], "select": spec["select"],
                          "exclude": exclude if isinstance(exclude, str) else
                          f"predicate:{getattr(exclude, '__qualname__', '?')}"}
        if spec["keep_samples"]:
            metadata[name]["keep_samples"] = True
        keys[name] = sha256_text(json.dumps(metadata[name], sort_keys=True))[:32]
        paths[name] = cache_dir() / "stats" / f"{keys[name]}.safetensors"
        cacheable = cache and isinstance(exclude, str)
        if cacheable and paths[name].is_file():
            try:
                results[name] = LayerStats.load(paths[name], expect_metadata=metadata[name])
            except CacheError as err:
                print(f"recomputing {'' if name == '_' else name + ': '}{err}")
    todo = [name for name in specs if name not in results]
    if not todo:
        return {name: results[name] for name in specs}
    cache = cache and all(isinstance(specs[name]["exclude"], str) for name in todo)

    if responses == "generate":
        replies = generate_responses(model, tokenizer, conversations, max_new_tokens=max_new_tokens,
                                     max_prompt_tokens=max_length, batch_size=batch_size, cache=cache,
                                     progress=progress and rank == 0, fingerprint=fingerprint)
        conversations = with_replies(conversations, replies)
    samples, truncated = _prepare(tokenizer, conversations, max_length, on_long)
    shard = [s for s in samples if s.index % world == rank]
    batches = plan_batches([len(s.ids) for s in shard], batch_size, max_batch_tokens)

    decoder, lm_head = model.get_decoder(), model.get_output_embeddings()
    n_layers, dim = len(decoder.layers), model.config.hidden_size
    softcap = getattr(model.config, "final_logit_softcapping", None)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
    accs = {name: Accumulator(n_layers, block, dim, specs[name]["keep_samples"]) for name in todo}
    partials = {name: paths[name].with_name(f"{keys[name]}.rank{rank}of{world}.partial.safetensors")
                for name in todo}
    if cache:
        restored = [accs[name].restore(partials[name], keys[name]) for name in todo]
        if all(restored) and len({accs[name].next_batch for name in todo}) == 1:
            print(f"resuming from a checkpoint: batch {accs[todo[0]].next_batch} of {len(batches)}")
        else:  # a partial set of checkpoints is not trusted: start over
            accs = {name: Accumulator(n_layers, block, dim, specs[name]["keep_samples"]) for name in todo}
    start = accs[todo[0]].next_batch
    device = next(model.parameters()).device

    bar = tqdm(total=sum(len(s.ids) for s in shard), unit="tok", desc="capturing", disable=not progress or rank)
    bar.update(sum(len(shard[i].ids) for b in batches[:start] for i in b))
    with torch.no_grad(), layer_outputs(model) as captured:
        for number in range(start, len(batches)):
            batch = [shard[i] for i in batches[number]]
            ids, mask = pad_batch(batch, pad_id)
            final = decoder(input_ids=ids.to(device), attention_mask=mask.to(device), use_cache=False).last_hidden_state
            for layer, hidden in enumerate(captured):
                _check_finite(hidden, f"layer {layer}", batch)
            _check_finite(final, "the final norm", batch)
            lengths = [len(s.ids) for s in batch]
            # one LM-head pass over the batch's real positions (row-major: row 0's tokens first)
            entropies = token_entropy(final[mask.bool().to(device)], lm_head, softcap).cpu().split(lengths)
            for row, sample in enumerate(batch):
                for name in todo:
                    spec, acc = specs[name], accs[name]
                    eligible = torch.tensor(sample.eligible(spec["exclude"]), dtype=torch.bool)
                    generator = torch.Generator().manual_seed(seed * 1_000_003 + sample.index)
                    kept = select_positions(entropies[row], eligible, spec["rho"], spec["select"], generator).to(device)
                    layers_kept = torch.stack([h[row].index_select(0, kept) for h in captured]).cpu()  # (N, k, d)
                    acc.add_sample(sample.index, layers_kept, final[row].index_select(0, kept).cpu(), block)
                    acc.counts["tokens_seen"] += lengths[row]
                    acc.counts["tokens_eligible"] += int(eligible.sum())
                    acc.counts["samples"] += 1
            for acc in accs.values():
                acc.next_batch = number + 1
            bar.update(int(mask.sum()))
            if cache and checkpoint_every and (number + 1) % checkpoint_every == 0 and number + 1 < len(batches):
                for name in todo:
                    accs[name].save(partials[name], keys[name])
    bar.close()

    for name in todo:
        results[name] = _finish(accs[name], distributed, truncated, block, metadata[name])
        if cache and rank == 0:
            results[name].save(paths[name])
        if cache:
            partials[name].unlink(missing_ok=True)
    if distributed:
        dist.barrier()
    return {name: results[name] for name in specs}


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
        gathered = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, [tensors[k] for k in per_sample])
        for position, k in enumerate(per_sample):
            tensors[k] = torch.cat([part[position] for part in gathered])
    tensors["counts"] = dict(zip(COUNT_KEYS, counts.tolist()))
    return tensors


def _versions() -> dict:
    import torch
    import transformers

    from . import __version__

    return {"elsi": __version__, "torch": torch.__version__, "transformers": transformers.__version__}
