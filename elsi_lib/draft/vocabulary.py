"""EAGLE-3's reduced draft vocabulary: the maps between draft and target token ids (d2t, t2d, in
vLLM's layout) and the draft lm_head's initialisation from the target's rows."""

from __future__ import annotations

from typing import cast

import torch
from torch import nn

NOT_IN_DRAFT = -1  # what `to_draft` returns for a target id outside the draft vocabulary


def draft_vocabulary(token_counts, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """EAGLE-3's reduced vocabulary: the `size` most frequent target tokens (ties: lower id first),
    in ascending target-id order. Returns d2t (size,) int64 offsets, target = draft + d2t[draft]
    (as vLLM's `compute_logits` reads them), and t2d (V,) bool marking the chosen target ids."""
    counts = torch.as_tensor(token_counts)
    if counts.dim() != 1 or not 1 <= size <= len(counts):
        raise ValueError(
            f"need 1-D counts and 1 <= size <= {len(counts)}, got shape {tuple(counts.shape)}, size {size}"
        )
    if (counts < 0).any():
        raise ValueError("token counts must be non-negative")
    order = torch.sort(-counts.double(), stable=True).indices  # most frequent first, lower id on ties
    chosen = order[:size].sort().values  # (size,) ascending target ids
    t2d = torch.zeros(len(counts), dtype=torch.bool)
    t2d[chosen] = True
    return chosen - torch.arange(size), t2d


def to_target(draft_ids, d2t):
    """Draft ids (any shape) -> target ids."""
    return draft_ids + d2t[draft_ids]


def to_draft(target_ids, t2d):
    """Target ids (any shape) -> draft ids; NOT_IN_DRAFT (-1) where the token is not in the draft vocabulary."""
    rank = t2d.long().cumsum(0) - 1  # (V,) draft id of each chosen target id
    return torch.where(t2d[target_ids], rank[target_ids], torch.full_like(target_ids, NOT_IN_DRAFT))


@torch.no_grad()
def init_lm_head_from_target(draft, target_lm_head_weight) -> None:
    """Copy the target's lm_head rows of the draft vocabulary into the draft's lm_head (V, d) -> (V_draft, d)."""
    weight = (
        cast(torch.Tensor, target_lm_head_weight.weight)
        if isinstance(target_lm_head_weight, nn.Module)
        else target_lm_head_weight
    )  # (cast: torch types a module's attributes Tensor | Module)
    expected = (draft.config.vocab_size, draft.config.hidden_size)
    if tuple(weight.shape) != expected:
        raise ValueError(f"target lm_head weight {tuple(weight.shape)}, expected {expected}")
    rows = draft.to_target(torch.arange(draft.config.draft_vocab_size, device=draft.d2t.device))
    draft.lm_head.weight.copy_(weight[rows.to(weight.device)].to(draft.lm_head.weight))
