"""The capture's pure per-sample steps (paper Eq. 10-11): keep the top fraction rho of a sample's
positions by next-token entropy (`select_positions`), add their blocks of B tokens to running
per-layer float64 sums (`Accumulator`, `accumulate`), checkpointed and restored by key, reduced over
processes under torch.distributed, and finished into `LayerStats` (`finish`).
"""

from __future__ import annotations

import json
import math
import numbers
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from safetensors import safe_open
from safetensors.torch import load, save

from ..common.cachefiles import atomic_write_bytes, content_checksum
from ..selection.entropy import gram_entropy

from .forward import Sample
from .layerstats import LayerStats
from .settings import CaptureSettings


COUNT_KEYS = (
    "samples",
    "tokens_seen",
    "tokens_eligible",
    "retained",
    "dropped_remainder",
    "blocks",
    "samples_without_block",
    "truncated_samples",
)


def select_positions(entropy, eligible, rho: float, how: str = "entropy", generator=None):
    """Indices of the kept positions, in their original order (Eq. 10).

    Keeps ceil(rho * n) of the n eligible positions: those with the highest entropy (ties to the
    earlier position), or a uniformly random subset of the same size (`how="random"`).
    """

    if isinstance(rho, bool) or not isinstance(rho, numbers.Real) or not 0 < rho <= 1:
        raise ValueError(f"rho must be a share of the positions in (0, 1], got {rho!r}")
    if how not in ("entropy", "random"):
        raise ValueError(f"how must be 'entropy' or 'random', got {how!r}")
    entropy, eligible = torch.as_tensor(entropy), torch.as_tensor(eligible, dtype=torch.bool)
    if entropy.dim() != 1 or entropy.shape != eligible.shape:
        raise ValueError(
            f"entropy and eligible must be one value per position, of one length: shapes {tuple(entropy.shape)} "
            f"and {tuple(eligible.shape)}"
        )
    candidates = torch.nonzero(eligible, as_tuple=False).flatten()
    keep = math.ceil(rho * len(candidates) - 1e-9)
    if how == "random":
        chosen = candidates[torch.randperm(len(candidates), generator=generator)[:keep]]
    else:
        order = torch.sort(-entropy[candidates].double(), stable=True).indices
        chosen = candidates[order[:keep]]
    return torch.sort(chosen).values


class Accumulator:
    """Running sums of blocks per layer, float64, and the counts that go with them."""

    def __init__(self, n_layers: int, block: int, dim: int, keep_samples: bool = False):

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

        entropies = (
            np.stack([e for _, e in self.sample_rows]) if self.sample_rows else np.zeros((0, self.block_sum.shape[0]))
        )
        tensors = {
            "block_sum": self.block_sum,
            "final_sum": self.final_sum,
            "abs_max": self.abs_max,
            "abs_sum": self.abs_sum,
            "sample_entropy": torch.from_numpy(entropies),
            "sample_index": torch.tensor([i for i, _ in self.sample_rows], dtype=torch.int64),
        }
        if self.keep_samples:
            shape = (0, *self.block_sum.shape)
            tensors["sample_sums"] = torch.stack(self.sample_sums) if self.sample_sums else torch.zeros(shape)
            tensors["sample_blocks"] = torch.tensor(self.sample_blocks, dtype=torch.int64)
        return tensors

    def save(self, path: Path, key: str) -> None:
        """Checkpoint the sums, counts and position (`next_batch`) atomically, with a checksum over
        every byte that `restore` reads."""

        tensors = {k: v.contiguous() for k, v in self.tensors().items()}
        header = {"key": key, "counts": json.dumps(self.counts), "next_batch": str(self.next_batch)}
        header["checksum"] = content_checksum(header, {k: v.numpy() for k, v in tensors.items()})
        atomic_write_bytes(path, save(tensors, metadata=header))

    def restore(self, path: Path, key: str) -> str | None:
        """Load a checkpoint written for `key`: None when restored, else why not ("absent", or the
        reason it is discarded). A checkpoint that fails its checksum is never used."""

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


def accumulate(acc: "Accumulator", spec: CaptureSettings, sample: Sample, hidden, row: int) -> None:
    """Step 3: one sample of a forward batch into one variant's sums: eligible positions, the
    top rho of them by entropy (or at random, seeded by the sample), their blocks."""

    eligible = torch.tensor(sample.eligible(spec.exclude), dtype=torch.bool)
    generator = torch.Generator().manual_seed(spec.seed * 1_000_003 + sample.index)
    kept = select_positions(hidden.entropies[row], eligible, spec.rho, spec.select, generator)
    kept = kept.to(hidden.final_norm.device)
    layers_kept = torch.stack([h[row].index_select(0, kept) for h in hidden.layers]).cpu()  # (N, k, d)
    acc.add_sample(sample.index, layers_kept, hidden.final_norm[row].index_select(0, kept).cpu(), spec.block)
    acc.counts["tokens_seen"] += len(sample.ids)
    acc.counts["tokens_eligible"] += int(eligible.sum())
    acc.counts["samples"] += 1


def no_block_error(block: int, eligible: int) -> ValueError:
    return ValueError(
        f"no full block of {block} retained tokens in any sample ({eligible} eligible tokens): use more or "
        "longer prompts, a larger rho or a smaller block"
    )


def check_some_block(spec: CaptureSettings, samples: list[Sample], variant: str | None = None) -> None:
    """Before the forward: some sample keeps a full block under `spec` (`select_positions` keeps
    ceil(rho * n) of a sample's n eligible positions, whatever their entropies), else
    `no_block_error`, the one `finish` would raise after the whole forward, with what limits the
    best sample (rho, or max_length where samples were cut) and the variant's name when given."""
    eligible = [sum(s.eligible(spec.exclude)) for s in samples]
    kept = [math.ceil(spec.rho * n - 1e-9) for n in eligible]
    if any(k >= spec.block for k in kept):
        return
    best = max(range(len(samples)), key=lambda i: kept[i]) if samples else None
    why = "no samples"
    if best is not None:
        why = f"the best sample keeps {kept[best]} (rho {spec.rho:g} of its {eligible[best]} eligible tokens"
        if len(samples[best].ids) >= spec.max_length:
            why += f"; it was cut to max_length={spec.max_length} tokens"
        why += ")"
    error = no_block_error(spec.block, sum(eligible))
    prefix = f"variant {variant!r}: " if variant is not None else ""
    raise ValueError(f"{prefix}{error}; {why}")


def finish(acc: "Accumulator", distributed: bool, truncated: int, block: int, metadata: dict) -> LayerStats:
    tensors = _reduce(acc, distributed)
    counts = {k: int(v) for k, v in tensors.pop("counts").items()}
    counts["truncated_samples"] = truncated
    if counts["blocks"] == 0:
        raise no_block_error(block, counts["tokens_eligible"])
    order = np.argsort(tensors["sample_index"].numpy(), kind="stable")
    extra = {}
    if "sample_sums" in tensors:
        extra = {
            "sample_sums": tensors["sample_sums"].numpy()[order],
            "sample_blocks": tensors["sample_blocks"].numpy()[order],
        }
    return LayerStats(
        Z=(tensors["block_sum"] / counts["blocks"]).numpy(),
        final_norm=(tensors["final_sum"] / counts["blocks"]).numpy(),
        sample_entropy=tensors["sample_entropy"].numpy()[order],
        sample_index=tensors["sample_index"].numpy()[order],
        abs_max=tensors["abs_max"].numpy(),
        abs_sum=tensors["abs_sum"].numpy(),
        counts=counts,
        metadata=metadata,
        **extra,
    )


def _reduce(acc: Accumulator, distributed: bool) -> dict:
    """The accumulator's tensors, summed (max for abs_max) over all processes when distributed."""

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
