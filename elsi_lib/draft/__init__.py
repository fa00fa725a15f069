"""EAGLE-3-style drafts conditioned on a chosen set of target layers (issue 12).

`model`: the draft architecture (EAGLE-3, arXiv 2503.01840; vLLM's EAGLE-3 checkpoint layout), its
config (which carries its feature source: a layer set, or FINAL_NORM for EAGLE-2's normed state),
its reduced vocabulary maps and the lm_head initialisation from the target.
`tree`: EAGLE-2 dynamic draft trees (arXiv 2406.16858) and accepted length / tau by replay at T = 0.
`corpus`, `features`, `train`, `replay`, `tables`, `experiment`: notebook 06's accepted-token experiment.
`decode`: the real speculative decoding loop (tree verification over the target's KV cache, T = 0 and T > 0).
`export`: drafts in the speculators and EAGLE layouts that vLLM and speculators load, and back.
"""
from .model import (FAMILIES, FINAL_NORM, NOT_IN_DRAFT, DraftConfig, Eagle3Draft, draft_vocabulary,
                    init_lm_head_from_target, to_draft, to_target)
from .tree import DraftTree, Frontier, accepted_length, build_tree, build_tree_sizes, build_trees, max_nodes, tau

__all__ = ["FAMILIES", "FINAL_NORM", "NOT_IN_DRAFT", "DraftConfig", "Eagle3Draft", "draft_vocabulary", "init_lm_head_from_target",
           "to_draft", "to_target", "DraftTree", "Frontier", "accepted_length", "build_tree", "build_tree_sizes", "build_trees",
           "max_nodes", "tau"]
