"""Training features without a store: one target forward per training batch, feeding every draft of a
lock-step group (for data too large to store: ~1.15 kB per token and layer in float16).

`LiveFeatures` answers what `train.train_drafts` asks of a `features.FeatureStore` (its length, each
sequence's length, reply start and token ids, and the reply tokens for the draft vocabulary) from the
tokenised conversations alone, and builds each batch (`collate`) by running the target on that
batch's sequences. The states are rounded to float16 and back, as a store would hold them, so a
draft sees the values a store would give it up to the float noise of a different padding. With
`bf16` the target's forward runs under bfloat16 autocast (its weights stay float32): faster on a CPU
with AMX, and other values; whether drafts lose held-out accuracy by it is measured, not assumed.

Three savings that change no value a draft reads (`bench/bench_live_batch.py` measures them):
- the target's greedy token (`argmax`, the full-vocabulary LM head in float32, as a store computes
  it) is formed only where training reads it, from the position before each reply's first token
  (`train.ttt_unroll` scores only rows that predict a reply token); elsewhere it is 0;
- under `bf16`, the decoder's linear weights are rounded to bfloat16 once, not by autocast at every
  forward: autocast's cast of a float32 weight is that same rounding, so the forward is bit for bit
  the same. The copies assume the target's weights do not change (a frozen target);
- where the CPU has bf16 matmul instructions, that greedy token is screened in bfloat16 and decided in
  float32 (`greedy.greedy_next`): the head's argmax wherever a worst-case bound certifies it, the
  float32 head's full row wherever it does not (a store's features use it too).
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import torch

from ..common.hardware import warn_if_bf16_is_slow
from ..hidden.forward import hidden_batches, pad_id, tokenize_samples
from ..inputs.chat import reply_starts
from .features import checked_layers, is_final_norm
from .greedy import greedy_next


def read_positions(valid, start):
    """Where training reads the target's greedy token: valid (b, T), start (b,) -> (b, T) bool, from
    the position before each reply's first token on (`train.ttt_unroll` scores rows predicting a reply token)."""
    return valid & (torch.arange(valid.shape[1])[None] >= start[:, None] - 1)


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
        self._bf16_weights: list | None = None  # (linear, its weight in bfloat16), made at the first bf16 forward

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
        start (b,), final_norm (b, T, d), argmax (b, T: from each reply's start - 1 on, 0 before) and, per source (a layer tuple or
        FINAL_NORM), features (b, T, m*d), float32 on the CPU, zero on padding."""
        positions = list(range(len(indices)))
        samples = [self.samples[i] for i in indices]
        device = next(self.model.parameters()).device
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=self.bf16), self._weights_for_autocast():
            batch = next(hidden_batches(self.model, samples, [positions], self._pad, entropies=False))
        valid = torch.zeros(len(samples), max(len(s.ids) for s in samples), dtype=torch.bool)
        for row, sample in enumerate(samples):
            valid[row, : len(sample.ids)] = True
        read = read_positions(valid, torch.tensor([self.starts[i] for i in indices]))  # (b, T)
        as_stored = lambda x: x.to(torch.float16).float().cpu() * valid[..., None]  # noqa: E731  (b, T, d)
        final_norm = as_stored(batch.final_norm)
        lm_head = self.model.get_output_embeddings()
        argmax = greedy_next(batch.final_norm[read.to(device)].float(), lm_head)  # (n_read,), as the store: in float32
        out = {
            "ids": torch.zeros(valid.shape, dtype=torch.long),
            "valid": valid,
            "argmax": torch.zeros(valid.shape, dtype=torch.long),
            "final_norm": final_norm,
            "start": torch.tensor([self.starts[i] for i in indices]),
        }
        out["ids"][valid] = torch.cat([torch.tensor(s.ids) for s in samples])
        out["argmax"][read] = argmax.cpu()
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

    @contextmanager
    def _weights_for_autocast(self):
        """Under `bf16`, the decoder's linears hold their bfloat16 copies for the forward (restored after)."""
        if not self.bf16:
            yield
            return
        if self._bf16_weights is None:
            linears = [m for m in self.model.get_decoder().modules() if isinstance(m, torch.nn.Linear)]
            self._bf16_weights = [
                (m, torch.nn.Parameter(m.weight.detach().to(torch.bfloat16), requires_grad=False)) for m in linears
            ]
        kept = [(m, m._parameters["weight"]) for m, _ in self._bf16_weights]
        try:
            for m, half in self._bf16_weights:
                m._parameters["weight"] = half
            yield
        finally:
            for m, weight in kept:
                m._parameters["weight"] = weight
