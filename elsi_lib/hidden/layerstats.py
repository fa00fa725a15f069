"""LayerStats: what `capture` produces and everything downstream consumes (paper Sec. 4.1-4.2).

Z (N, B, d) float64 holds the layer representatives: the mean over all retained blocks of B
tokens (Eq. 11). Saved as safetensors (arrays) plus JSON (counts, metadata) with a checksum, written
atomically; `load` refuses a truncated, corrupt or foreign file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from safetensors import safe_open
from safetensors.numpy import load, save

from ..common.cachefiles import atomic_write_bytes, content_checksum
from ..selection.entropy import gram_entropy, layer_grams

ARRAYS = ("Z", "final_norm", "sample_entropy", "sample_index", "abs_max", "abs_sum")
OPTIONAL_ARRAYS = ("sample_sums", "sample_blocks")  # present when captured with keep_samples=True


class CacheError(ValueError):
    """A saved LayerStats that is truncated, corrupt or was produced from other inputs."""


@dataclass
class LayerStats:
    """Layer representatives and the statistics that came with them.

    Z: (N, B, d) mean retained block per layer, layer l = output of decoder layer l.
    final_norm: (B, d) the same for the last layer after the final norm (EAGLE-2's input).
    sample_entropy: (S, N) Shannon entropy of each sample's own block average per layer (Fig. 1, 4).
    sample_index: (S,) which input conversation each row of sample_entropy belongs to.
    abs_max, abs_sum: (N, d) max and sum of |h| over retained tokens (massive activations).
    sample_sums, sample_blocks: per-sample block sums and block counts (rows as sample_entropy),
    only with keep_samples=True; `resampled_Z` builds Z for a bootstrap replicate from them.
    counts: tokens seen / eligible / retained / dropped remainder, blocks, skipped and truncated samples.
    metadata: model id and config hash, prompt-set hash, rho, block, max_length, ..., library version.
    """

    Z: np.ndarray
    final_norm: np.ndarray
    sample_entropy: np.ndarray
    sample_index: np.ndarray
    abs_max: np.ndarray
    abs_sum: np.ndarray
    counts: dict = field(default_factory=dict)
    metadata: dict = field(default_factory=dict)
    sample_sums: np.ndarray | None = None  # (S, N, B, d) float32: each sample's sum of its blocks
    sample_blocks: np.ndarray | None = None  # (S,) how many blocks each sample contributed

    @property
    def n_layers(self) -> int:
        return self.Z.shape[0]

    def layer_entropy(self, alpha: float = 1.0) -> np.ndarray:
        """S_alpha of each layer's representative, (N,)."""
        return gram_entropy(layer_grams(self.Z), alpha)

    def top_row_energy_share(self) -> np.ndarray:
        """Per layer, the share of ||Z_l||_F^2 carried by its largest row, (N,): near 1 when one
        position (an attention sink) dominates the representative."""
        row_energy = (self.Z**2).sum(axis=2)  # (N, B)
        return row_energy.max(axis=1) / row_energy.sum(axis=1)

    def massive_dimensions(self, factor: float = 100.0) -> list[list[int]]:
        """Per layer, the feature dimensions whose largest |activation| over retained tokens is
        more than `factor` times the median (over dimensions) mean |activation|."""
        tokens = max(self.counts.get("retained", 1), 1)
        typical = np.median(self.abs_sum / tokens, axis=1, keepdims=True)  # (N, 1)
        return [np.flatnonzero(row).tolist() for row in self.abs_max > factor * typical]

    def resampled_Z(self, weights) -> np.ndarray:
        """Z had the samples been drawn `weights` times each (a bootstrap replicate: multinomial
        counts): sum_s w_s sums_s / sum_s w_s blocks_s, in float64. weights (S,) gives (N, B, d);
        weights (R, S), R replicates at once, gives (R, N, B, d)."""
        if self.sample_sums is None or self.sample_blocks is None:  # kept together (keep_samples=True)
            raise ValueError("per-sample sums were not kept: capture with keep_samples=True")
        weights = np.asarray(weights, dtype=np.float64)
        table = np.atleast_2d(weights)  # (R, S)
        if weights.ndim > 2 or table.shape[1] != len(self.sample_blocks) or np.any(table < 0):
            raise ValueError(
                f"weights must have shape ({len(self.sample_blocks)},) or (R, "
                f"{len(self.sample_blocks)}) and be non-negative, got {weights.shape}"
            )
        blocks = table @ self.sample_blocks  # (R,)
        if np.any(blocks == 0):
            raise ValueError("the weights select no block")
        flat = self.sample_sums.reshape(table.shape[1], -1)  # (S, N*B*d) float32
        out = np.empty((len(table), flat.shape[1]))
        step = 1 << 16  # columns per float64 chunk: bounds the temporary copy
        for start in range(0, flat.shape[1], step):
            out[:, start : start + step] = table @ flat[:, start : start + step].astype(np.float64)
        out = (out / blocks[:, None]).reshape(len(table), *self.Z.shape)
        return out[0] if weights.ndim == 1 else out

    # ------------------------------------------------------------ persistence

    def save(self, path: str | Path) -> Path:
        """Write `path` (.safetensors) atomically, with counts, metadata and a checksum over both
        and every array."""

        arrays = {
            name: np.ascontiguousarray(getattr(self, name))
            for name in ARRAYS + OPTIONAL_ARRAYS
            if getattr(self, name) is not None
        }
        header = {
            "counts": json.dumps(self.counts, sort_keys=True),
            "metadata": json.dumps(self.metadata, sort_keys=True),
        }
        header["checksum"] = content_checksum(header, arrays)
        path = Path(path)
        atomic_write_bytes(path, save(arrays, metadata=header))
        return path

    @classmethod
    def load(cls, path: str | Path, expect_metadata: dict | None = None) -> "LayerStats":
        """Read a saved LayerStats; CacheError when it is unreadable, fails its checksum, or its
        metadata differs from `expect_metadata` (a stale cache)."""

        path = Path(path)
        try:
            payload = path.read_bytes()
            arrays = load(payload)
            with safe_open(path, "np") as handle:
                header = handle.metadata() or {}
            counts, metadata = json.loads(header["counts"]), json.loads(header["metadata"])
        except Exception as err:  # truncated or foreign file: safetensors raises several kinds
            raise CacheError(f"{path}: unreadable LayerStats ({type(err).__name__}: {err})") from err
        if set(arrays) - set(OPTIONAL_ARRAYS) != set(ARRAYS) or content_checksum(header, arrays) != header.get(
            "checksum"
        ):
            raise CacheError(f"{path}: checksum mismatch (corrupt file)")
        if expect_metadata is not None and metadata != json.loads(json.dumps(expect_metadata, sort_keys=True)):
            raise CacheError(f"{path}: stale (produced from other inputs or settings)")
        return cls(**arrays, counts=counts, metadata=metadata)
