"""Training features without a store: one target forward per training batch, feeding every draft of a
lock-step group (for data too large to store: ~1.15 kB per token and layer in float16).

`LiveFeatures` answers what `train.train_drafts` asks of a `features.FeatureStore` (its length, each
sequence's length, reply start and token ids, and the reply tokens for the draft vocabulary) from the
tokenised conversations alone, and builds each batch (`collate`) by running the target on that
batch's sequences. The states are rounded to float16 and back, as a store would hold them, so a
draft sees the values a store would give it up to the float noise of a different padding. With
`bf16` the target's forward runs under bfloat16 autocast (its weights stay float32): faster on a CPU
with AMX, and other values; whether drafts lose held-out accuracy by it is measured, not assumed.
"""

from __future__ import annotations

import numpy as np
import torch

from ..common.hardware import warn_if_bf16_is_slow
from ..hidden.forward import hidden_batches, pad_id, tokenize_samples
from ..inputs.chat import reply_starts
from .features import checked_layers, greedy_next, is_final_norm


class LiveFeatures:
    """`conversations` (prompt + the target's reply) of `model`, ready to be forwarded batch by batch
    at `layers` (elsi convention: layer l = output of decoder layer l)."""

    def __init__(self, model, tokenizer, conversations, layers, *, max_length: int = 1024, bf16: bool = False):
        self.layers = checked_layers(model, layers)
        self.model, self._pad, self.bf16, self.max_length = model, pad_id(tokenizer), bf16, max_length
        if bf16:
            warn_if_bf16_is_slow(next(model.parameters()).device.type, "the live target forward")
        self.samples, _ = tokenize_samples(tokenizer, conversations, max_length)
        self.starts = reply_starts(tokenizer, conversations, max_length)

    def __len__(self) -> int:
        return len(self.samples)

    def length(self, i: int) -> int:
        return len(self.samples[i].ids)

    def start(self, i: int) -> int:
        """Index of sequence i's first reply token."""
        return self.starts[i]

    def ids(self, i: int) -> np.ndarray:
        """Token ids (T,) of sequence i."""
        return np.asarray(self.samples[i].ids, dtype=np.int64)

    def reply_tokens(self) -> np.ndarray:
        """Every sequence's reply tokens, concatenated."""
        return np.concatenate([self.ids(i)[self.start(i) :] for i in range(len(self))] or [np.zeros(0, np.int64)])

    @torch.no_grad()
    def collate(self, indices, sources) -> dict:
        """`train.collate`'s batch of `indices`, from one target forward: ids (b, T), valid (b, T),
        start (b,), final_norm (b, T, d), argmax (b, T) and, per source (a layer tuple or
        FINAL_NORM), features (b, T, m*d), float32 on the CPU, zero on padding."""
        positions = list(range(len(indices)))
        samples = [self.samples[i] for i in indices]
        device = next(self.model.parameters()).device
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=self.bf16):  # bf16: the target's matmuls
            batch = next(hidden_batches(self.model, samples, [positions], self._pad, entropies=False))
        valid = torch.zeros(len(samples), max(len(s.ids) for s in samples), dtype=torch.bool)
        for row, sample in enumerate(samples):
            valid[row, : len(sample.ids)] = True
        as_stored = lambda x: x.to(torch.float16).float().cpu() * valid[..., None]  # noqa: E731  (b, T, d)
        final_norm = as_stored(batch.final_norm)
        lm_head = self.model.get_output_embeddings()
        argmax = greedy_next(batch.final_norm[valid.to(device)].float(), lm_head)  # (n,), as the store: in float32
        out = {
            "ids": torch.zeros(valid.shape, dtype=torch.long),
            "valid": valid,
            "argmax": torch.zeros(valid.shape, dtype=torch.long),
            "final_norm": final_norm,
            "start": torch.tensor([self.starts[i] for i in indices]),
        }
        out["ids"][valid] = torch.cat([torch.tensor(s.ids) for s in samples])
        out["argmax"][valid] = argmax.cpu()
        out["features"] = {}
        for src in sources:
            if is_final_norm(src):
                out["features"][src] = final_norm
                continue
            absent = [l for l in src if l not in self.layers]
            if absent:
                raise ValueError(f"layers {absent} are not among these live features' layers {self.layers}")
            out["features"][src] = torch.cat([as_stored(batch.layers[l]) for l in src], dim=-1)  # (b, T, m*d)
        return out
