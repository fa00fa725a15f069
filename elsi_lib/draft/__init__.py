"""EAGLE-3-style drafts conditioned on a chosen set of target layers (issue 12).

`model`: the draft architecture (EAGLE-3, arXiv 2503.01840; vLLM's EAGLE-3 checkpoint layout), its
reduced vocabulary maps and the lm_head initialisation from the target.
"""
from .model import (FAMILIES, NOT_IN_DRAFT, DraftConfig, Eagle3Draft, draft_vocabulary, init_lm_head_from_target,
                    to_draft, to_target)

__all__ = ["FAMILIES", "NOT_IN_DRAFT", "DraftConfig", "Eagle3Draft", "draft_vocabulary", "init_lm_head_from_target",
           "to_draft", "to_target"]
