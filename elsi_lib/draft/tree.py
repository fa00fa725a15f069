"""EAGLE-2 dynamic draft trees and acceptance by replay at temperature 0.

Li et al., "EAGLE-2: Faster Inference of Language Models with Dynamic Draft Trees", arXiv 2406.16858,
Sec. 4: *expansion* grows the tree one depth at a time from the top_k frontier nodes ranked by
cumulative draft log-probability (the product of the draft's probabilities along the path, Eq. 1's
value approximation); *reranking* then keeps the `nodes` best of all drafted candidates. Our own code;
SafeAILab/EAGLE `eagle/model/cnets.py` `topK_genrate` does the same with a KV cache.

Node layout: the root (the last accepted token, already known to the target) is NOT a node; nodes
are 0..n-1 in creation order (depth-major), so every parent index is smaller than its child's; a
child of the root has parent -1 and depth 1. Tree depth counts levels below the root: EAGLE's
`depth=5` (5 expansion forwards after the root forward) is our `depth=6`; EAGLE-2's defaults
(total_tokens 60, depth 5, top_k 10) are here `nodes=60, depth=6, top_k=10`.

The draft model is abstracted by `step_fn(state, frontier) -> (log_probs, next_state)`:
- first call `step_fn(root_state, None)`: log_probs (b, 1, V_draft), the root's next-token
  distribution (the draft's forward over the accepted prefix);
- later calls get a `Frontier` (the top_k nodes chosen at the last depth) and return
  log_probs (b, top_k, V_draft), one row per frontier node in the Frontier's order.
`state` is opaque to the tree code (tests pass token paths; the draft passes its hidden states and KV).

Wiring the draft model (`runner.root_step_fn`, with `Eagle3Draft.step` as documented in `model.py`):
- root call: the draft's step-1 row of the root over the accepted prefix (EAGLE-3 alignment:
  features of token t with the embedding of token t+1); the prefix's keys/values are kept.
- frontier call at depth t: input_ids = `frontier.draft_ids` mapped `to_target` (the target
  embedding is shared), hidden = the previous call's output hidden gathered at `frontier.rows`
  (the parent's own hidden, as EAGLE-3 feeds it back), one rotary position for the whole frontier
  (the root's query position + t, EAGLE's `len_posi + i`), and attention: the whole prefix plus
  `frontier.mask` (b, top_k, top_k*t) over all frontier nodes forwarded so far in forwarding order,
  i.e. the node's forwarded ancestors and itself (EAGLE's `tree_mask`).
- target verification: `DraftTree.attention_mask()` for the tree block (prefix visible to all),
  `position_ids(prefix_len)`, tokens in target ids.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from ..common.checks import is_integer

StepFn = Callable[[Any, "Frontier | None"], tuple[torch.Tensor, Any]]


@dataclass(frozen=True)
class Frontier:
    """The top_k nodes the next draft forward expands (EAGLE-2 Sec. 4.1, expansion).

    rows (b, k): each node's parent row in the previous step_fn output (0 for the root's children);
    draft_ids (b, k): each node's token in the draft vocabulary; depth: their depth (1 = root's
    children); mask (b, k, k*depth) bool: which frontier nodes forwarded so far (in forwarding
    order, these last) each node may attend to: its forwarded ancestors and itself."""

    rows: torch.Tensor
    draft_ids: torch.Tensor
    depth: int
    mask: torch.Tensor


@dataclass(frozen=True)
class DraftTree:
    """A draft tree below a root (the last accepted token, not a node).

    tokens (n,) target ids; parents (n,) parent node index, -1 for the root's children, always
    smaller than the node's own index; depths (n,) 1 for the root's children; scores (n,)
    cumulative draft log-probability of the path root -> node."""

    tokens: torch.Tensor
    parents: torch.Tensor
    depths: torch.Tensor
    scores: torch.Tensor

    def __post_init__(self):
        n = len(self.tokens)
        if not all(t.dim() == 1 and len(t) == n for t in (self.tokens, self.parents, self.depths, self.scores)):
            raise ValueError("tokens, parents, depths and scores must be 1-D of one length")
        own = torch.arange(n, device=self.parents.device)
        if not ((self.parents >= -1) & (self.parents < own)).all():
            raise ValueError("every parent must be -1 or an earlier node")
        parent_depth = torch.where(self.parents >= 0, self.depths[self.parents.clamp(min=0)], 0)  # (n,)
        if not (self.depths == parent_depth + 1).all():
            raise ValueError("every depth must be its parent's depth + 1 (1 below the root)")

    def __len__(self) -> int:
        return len(self.tokens)

    def attention_mask(self) -> torch.Tensor:
        """(n, n) bool: node i sees node j iff j is i or an ancestor of i (the prefix and root,
        seen by every node, are implicit). EAGLE-2's tree attention."""
        n = len(self)
        mask = torch.eye(n, dtype=torch.bool, device=self.parents.device)  # (n, n)
        ancestor, rows = self.parents.clone(), torch.arange(n, device=self.parents.device)
        while (ancestor >= 0).any():  # at most max depth - 1 jumps
            has = ancestor >= 0
            mask[rows[has], ancestor[has]] = True
            ancestor = torch.where(has, self.parents[ancestor.clamp(min=0)], -1)
        return mask

    def position_ids(self, prefix_len: int) -> torch.Tensor:
        """(n,) positions for the target's verification forward: `prefix_len` counts the tokens
        before the tree, the root included, so the root sits at prefix_len - 1 and a node of
        depth d at prefix_len - 1 + d."""
        return prefix_len - 1 + self.depths

    def leaves(self) -> torch.Tensor:
        """(L,) indices of the nodes without children, ascending."""
        is_parent = torch.zeros(len(self), dtype=torch.bool, device=self.parents.device)
        is_parent[self.parents[self.parents >= 0]] = True
        return torch.nonzero(~is_parent).flatten()

    def paths(self) -> list[list[int]]:
        """Root-to-leaf paths as node indices (root excluded), one per leaf in leaf order."""
        paths = []
        for leaf in self.leaves().tolist():
            path = [leaf]
            while self.parents[path[-1]] >= 0:
                path.append(int(self.parents[path[-1]]))
            paths.append(path[::-1])
        return paths

    def retrieve_indices(self) -> torch.Tensor:
        """(L, max depth) node indices of each path, padded with -1 (EAGLE's `retrieve_indices`,
        without the root column)."""
        paths = self.paths()
        width = max((len(p) for p in paths), default=0)
        out = torch.full((len(paths), width), -1, dtype=torch.long)
        for row, path in enumerate(paths):
            out[row, : len(path)] = torch.tensor(path, dtype=torch.long)
        return out


def max_nodes(depth: int, top_k: int) -> int:
    """Candidates an EAGLE-2 tree drafts: top_k at depth 1, top_k**2 at each later depth."""
    if not (is_integer(depth) and is_integer(top_k)) or depth < 1 or top_k < 1:
        raise ValueError(f"need integer depth, top_k >= 1, got {depth!r}, {top_k!r}")
    return top_k + (depth - 1) * top_k * top_k


def check_tree_args(nodes, depth, top_k):
    for name, value in (("nodes", nodes), ("depth", depth), ("top_k", top_k)):
        if not is_integer(value):
            raise TypeError(f"{name} must be an integer, got {value!r}")
    if depth < 1 or top_k < 1 or nodes < 1:
        raise ValueError(f"need nodes, depth, top_k >= 1, got {nodes}, {depth}, {top_k}")
    if nodes > max_nodes(depth, top_k):
        raise ValueError(
            f"nodes={nodes} exceeds the {max_nodes(depth, top_k)} candidates of depth={depth}, "
            f"top_k={top_k} (top_k + (depth-1) * top_k**2)"
        )


def _top_children(log_probs, b, rows, top_k):
    """log_probs (b, rows, V) -> values, draft ids (b, rows, top_k): best first, lower draft id on
    ties; values clamped to <= 0 so that scores never grow along a path.

    One torch.topk pass over the vocabulary (a full sort is 15x slower at V = 32k); topk leaves the
    order of ties unspecified, so its result is re-sorted by (value desc, id asc), and a row with a tie
    across the cut (k-th and (k+1)-th equal) falls back to a stable full sort. Only the top values are
    validated: NaN ranks first in topk, so it is caught there. (Rows whose ties were fully sorted
    keep their order through the re-sort: ties there are already in ascending id order.)"""
    if log_probs.dim() != 3 or tuple(log_probs.shape[:2]) != (b, rows):
        raise ValueError(f"step_fn returned log_probs of shape {tuple(log_probs.shape)}, expected ({b}, {rows}, V)")
    vocab = log_probs.shape[-1]
    if vocab < top_k:
        raise ValueError(f"top_k={top_k} exceeds the draft vocabulary ({vocab})")
    log_probs = log_probs.float()
    values, ids = torch.topk(log_probs, min(top_k + 1, vocab), dim=-1)  # (b, f, k or k+1)
    if torch.isnan(values).any() or (values[..., 0] > 1e-4).any():
        raise ValueError("step_fn must return log-probabilities (<= 0, no NaN)")
    ids = ids[..., :top_k]
    if vocab > top_k:  # ties across the cut: those rows alone get a stable full sort
        tied = values[..., top_k] == values[..., top_k - 1]  # (b, f)
        if tied.any():
            ids = ids.clone()
            ids[tied] = torch.sort(log_probs[tied], dim=-1, descending=True, stable=True).indices[:, :top_k]
    ids = ids.sort(dim=-1).values  # ascending id, then a stable sort by value
    order = torch.sort(log_probs.gather(-1, ids), dim=-1, descending=True, stable=True).indices  # (b, f, k)
    ids = ids.gather(-1, order)
    return log_probs.gather(-1, ids).clamp(max=0.0), ids


def _expand(step_fn: StepFn, root_state, depth: int, top_k: int):
    """EAGLE-2 expansion: every candidate as (scores, draft ids, parents, depths), each (b, C),
    C = max_nodes(depth, top_k), in creation order."""
    log_probs, state = step_fn(root_state, None)
    b, device = log_probs.shape[0], log_probs.device
    values, ids = _top_children(log_probs, b, 1, top_k)  # (b, 1, k)
    scores, draft_ids = values[:, 0], ids[:, 0]  # (b, k): depth 1 is the first frontier
    cand = [(scores, draft_ids, torch.full_like(draft_ids, -1), torch.full_like(draft_ids, 1))]
    frontier_nodes = torch.arange(top_k, device=device).expand(b, top_k)  # (b, k) candidate index of each frontier node
    rows = torch.zeros(b, top_k, dtype=torch.long, device=device)
    eye = torch.eye(top_k, dtype=torch.bool, device=device).expand(b, top_k, top_k)  # (b, k, k)
    mask = eye
    offset = top_k
    for level in range(2, depth + 1):
        frontier = Frontier(rows=rows, draft_ids=draft_ids, depth=level - 1, mask=mask)
        log_probs, state = step_fn(state, frontier)
        values, ids = _top_children(log_probs, b, top_k, top_k)  # (b, k, k)
        cumulative = (scores[:, :, None] + values).reshape(b, -1)  # (b, k*k), parent-major
        ids = ids.reshape(b, -1)  # (b, k*k)
        parents = frontier_nodes.repeat_interleave(top_k, dim=1)  # (b, k*k)
        cand.append((cumulative, ids, parents, torch.full_like(ids, level)))
        best = torch.sort(cumulative, dim=1, descending=True, stable=True).indices[:, :top_k]  # (b, k)
        rows = best // top_k  # (b, k) parent row in this step's output
        scores, draft_ids = cumulative.gather(1, best), ids.gather(1, best)  # (b, k)
        frontier_nodes = offset + best
        offset += top_k * top_k
        seen = mask.gather(1, rows[:, :, None].expand(-1, -1, mask.shape[-1]))  # (b, k, k*(level-1))
        mask = torch.cat([seen, eye], dim=2)
    return tuple(torch.cat(parts, dim=1) for parts in zip(*cand))  # 4 x (b, C)


def _rerank(scores, draft_ids, parents, depths, nodes, to_target):
    """EAGLE-2 reranking for one question: the `nodes` best candidates (C,) by score, ties by
    creation order, re-indexed in creation order. A child's score is its parent's plus a log-prob
    <= 0 and the parent was created first, so the kept set contains every kept node's parent."""
    order = torch.sort(scores, descending=True, stable=True).indices[:nodes]
    keep = order.sort().values  # (n,) creation order
    # new_index[c + 1] is the kept index of candidate c; slot 0 stands for the root (-1)
    new_index = torch.full((len(scores) + 1,), -1, dtype=torch.long, device=scores.device)
    new_index[keep + 1] = torch.arange(nodes, device=scores.device)
    kept_parents = new_index[parents[keep] + 1]  # (n,)
    if ((kept_parents == -1) & (parents[keep] != -1)).any():
        raise RuntimeError("reranked tree is not ancestor-closed (log-probs increased along a path?)")
    ids = draft_ids[keep]
    return DraftTree(
        tokens=to_target(ids) if to_target is not None else ids,
        parents=kept_parents,
        depths=depths[keep],
        scores=scores[keep],
    )


@torch.no_grad()
def build_trees(
    step_fn: StepFn,
    root_state,
    *,
    nodes: int,
    depth: int,
    top_k: int,
    to_target: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> list[DraftTree]:
    """EAGLE-2 dynamic draft trees (arXiv 2406.16858 Sec. 4) for a batch of b questions.

    Expansion: the root's top_k children form the first frontier; each later depth drafts the
    top_k children of every frontier node (top_k**2 candidates) and keeps the top_k by cumulative
    log-probability as the next frontier, until `depth` levels exist. Reranking: the `nodes` best of
    all candidates by cumulative log-probability; ties go to the earlier-created candidate (draft id
    order among siblings), so the result is deterministic and ancestor-closed.
    `to_target` maps draft ids to target ids (e.g. `draft.to_target`); identity when None.
    Raises ValueError when `nodes` exceeds `max_nodes(depth, top_k)` (no silent cap)."""
    return build_tree_sizes(step_fn, root_state, tree_nodes=[nodes], depth=depth, top_k=top_k, to_target=to_target)[
        nodes
    ]


@torch.no_grad()
def build_tree_sizes(
    step_fn: StepFn,
    root_state,
    *,
    tree_nodes,
    depth: int,
    top_k: int,
    to_target: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> dict[int, list[DraftTree]]:
    """`build_trees` for several `nodes` values from one expansion: EAGLE-2's expansion does not
    depend on `nodes` (only reranking does), so {nodes: trees} equals separate `build_trees` calls."""
    tree_nodes = sorted(set(tree_nodes))
    if not tree_nodes:
        raise ValueError("tree_nodes must name at least one tree size")
    for nodes in tree_nodes:
        check_tree_args(nodes, depth, top_k)
    scores, draft_ids, parents, depths = _expand(step_fn, root_state, depth, top_k)  # each (b, C)
    return {
        nodes: [
            _rerank(scores[q], draft_ids[q], parents[q], depths[q], nodes, to_target) for q in range(scores.shape[0])
        ]
        for nodes in tree_nodes
    }


def build_tree(
    step_fn: StepFn,
    root_state,
    *,
    nodes: int,
    depth: int,
    top_k: int,
    to_target: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> DraftTree:
    """One question's EAGLE-2 tree: as `build_trees`, with step_fn returning (f, V) log-probs
    (f = 1 for the root, top_k after) and Frontier fields without the batch dimension."""

    def batched(state, frontier):
        if frontier is not None:
            frontier = Frontier(
                rows=frontier.rows[0], draft_ids=frontier.draft_ids[0], depth=frontier.depth, mask=frontier.mask[0]
            )
        log_probs, state = step_fn(state, frontier)
        return log_probs[None], state  # (1, f, V)

    return build_trees(batched, root_state, nodes=nodes, depth=depth, top_k=top_k, to_target=to_target)[0]


def accepted_length(tree: DraftTree, continuation) -> int:
    """Tokens of `tree` the target accepts at temperature 0: the depth of the deepest node whose
    root path spells the start of `continuation` (the target's greedy tokens after the root).
    The round then advances by this + 1 (the target's bonus token). EAGLE-2 Sec. 3 / 4 verification."""
    continuation = torch.as_tensor(continuation, dtype=torch.long, device=tree.tokens.device).flatten()
    depths = tree.depths
    reachable = depths <= len(continuation)  # (n,)
    expected = torch.full_like(tree.tokens, -1)
    expected[reachable] = continuation[depths[reachable] - 1]  # (n,) the token each node must equal
    token_ok = reachable & (tree.tokens == expected)  # (n,)
    matched: list[bool] = []  # walked in Python: n is small, and parents come first
    for ok, parent in zip(token_ok.tolist(), tree.parents.tolist()):
        matched.append(ok and (parent < 0 or matched[parent]))
    return max((d for d, m in zip(depths.tolist(), matched) if m), default=0)


def tau(accept_lengths) -> float:
    """Mean tokens per target forward: mean over rounds of (accepted + 1), the +1 being the bonus
    token (EAGLE-2's average acceptance length tau)."""
    lengths = torch.as_tensor(accept_lengths, dtype=torch.float64).flatten()
    if len(lengths) == 0:
        raise ValueError("tau needs at least one round")
    if not torch.isfinite(lengths).all() or (lengths < 0).any() or (lengths != lengths.round()).any():
        raise ValueError(f"accepted lengths must be whole numbers >= 0, one per round, got {accept_lengths!r}")
    return float((lengths + 1).mean())
