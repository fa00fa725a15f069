"""EAGLE-2 dynamic draft trees and replay acceptance (elsi_lib.draft.tree), on hand-made draft
distributions: a fake step_fn whose next-token log-probs depend only on the drafted path, checked
against a deliberately naive pure-Python EAGLE-2 reference."""

import numpy as np
import pytest
import torch

from elsi_lib.draft.vocabulary import to_target
from elsi_lib.draft.tree import DraftTree, Frontier, accepted_length, build_tree, build_trees, max_nodes, tau

V = 12


def quarter_steps(path, question=0):
    """(V,) log-probs <= 0 in multiples of 1/4 (exact in float32: sums are exact, many ties)."""
    seed = (question * 1_000_003 + sum((t + 1) * 13**k for k, t in enumerate(path))) % 2**31
    g = torch.Generator().manual_seed(seed)
    return -torch.randint(0, 9, (V,), generator=g).float() / 4


def softmax_dist(path, question=0):
    """(V,) proper log-softmax draft distribution, peaked (like a trained draft)."""
    seed = (question * 1_000_003 + sum((t + 1) * 17**k for k, t in enumerate(path))) % 2**31
    g = torch.Generator().manual_seed(seed)
    return torch.log_softmax(3 * torch.randn(V, generator=g), dim=0)


def all_zero(path, question=0):
    """Every token log-prob 0: every candidate ties with its parent."""
    return torch.zeros(V)


def path_step_fn(dist, questions=1):
    """Batched fake draft: state = (paths per question per row, forwarded paths per question).
    Checks the Frontier it receives: rows/draft_ids extend the previous rows' paths, and mask marks
    exactly the forwarded ancestors (and self) of each frontier node."""

    def step_fn(state, frontier):
        if frontier is None:
            rows = [[()] for _ in range(questions)]
            forwarded = [[] for _ in range(questions)]
        else:
            previous, forwarded = state
            rows = [
                [previous[q][r] + (int(t),) for r, t in zip(frontier.rows[q], frontier.draft_ids[q])]
                for q in range(questions)
            ]
            forwarded = [forwarded[q] + rows[q] for q in range(questions)]
            assert all(len(p) == frontier.depth for q in rows for p in q)
            for q in range(questions):
                expected = [[fwd == node[: len(fwd)] for fwd in forwarded[q]] for node in rows[q]]
                assert frontier.mask[q].tolist() == expected
        log_probs = torch.stack([torch.stack([dist(p, q) for p in rows[q]]) for q in range(questions)])
        return log_probs, (rows, forwarded)  # (b, f, V)

    return step_fn


def single_question(batched_step_fn):
    """The unbatched step_fn `build_tree` expects: (f, V) log-probs, Frontier without batch dim."""

    def step_fn(state, frontier):
        if frontier is not None:
            assert frontier.rows.dim() == 1 and frontier.mask.dim() == 2
            frontier = Frontier(frontier.rows[None], frontier.draft_ids[None], frontier.depth, frontier.mask[None])
        log_probs, state = batched_step_fn(state, frontier)
        return log_probs[0], state  # (f, V)

    return step_fn


def reference_candidates(dist, depth, top_k, question=0):
    """Naive EAGLE-2 expansion: [(path, score, parent candidate)] in creation order, float32 sums."""

    def children(path, score):
        lp = dist(path, question).tolist()
        best = sorted(range(V), key=lambda t: (-lp[t], t))[:top_k]
        return [(path + (t,), float(np.float32(score) + np.float32(lp[t]))) for t in best]

    candidates = [(p, s, -1) for p, s in children((), 0.0)]
    frontier = list(range(top_k))
    for _ in range(2, depth + 1):
        new = []
        for f in frontier:
            for p, s in children(*candidates[f][:2]):
                candidates.append((p, s, f))
                new.append(len(candidates) - 1)
        frontier = sorted(new, key=lambda c: (-candidates[c][1], c))[:top_k]
    return candidates


def reference_tree(dist, nodes, depth, top_k, question=0):
    candidates = reference_candidates(dist, depth, top_k, question)
    keep = sorted(sorted(range(len(candidates)), key=lambda c: (-candidates[c][1], c))[:nodes])
    new_index = {c: i for i, c in enumerate(keep)}
    return dict(
        tokens=[candidates[c][0][-1] for c in keep],
        scores=[candidates[c][1] for c in keep],
        depths=[len(candidates[c][0]) for c in keep],
        parents=[new_index[candidates[c][2]] if candidates[c][2] >= 0 else -1 for c in keep],
    )


def brute_force_mask(parents):
    n = len(parents)
    mask = [[False] * n for _ in range(n)]
    for i in range(n):
        j = i
        while j >= 0:
            mask[i][j] = True
            j = parents[j]
    return torch.tensor(mask, dtype=torch.bool).reshape(n, n)


def node_paths(tree):
    """Token path of every node, walking parents."""
    out = []
    for i in range(len(tree)):
        path, j = [], i
        while j >= 0:
            path.append(int(tree.tokens[j]))
            j = int(tree.parents[j])
        out.append(tuple(path[::-1]))
    return out


# (55, 3, 5) keeps every candidate; (1, 1, 1) is a single node.
SIZES = [(1, 1, 1), (3, 1, 3), (5, 3, 2), (10, 4, 3), (30, 5, 4), (60, 6, 10), (60, 6, 4), (55, 3, 5)]


@pytest.mark.parametrize("nodes,depth,top_k", SIZES)
@pytest.mark.parametrize("dist", [quarter_steps, softmax_dist, all_zero])
def test_tree_matches_naive_eagle2(dist, nodes, depth, top_k):
    tree = build_tree(single_question(path_step_fn(dist)), None, nodes=nodes, depth=depth, top_k=top_k)
    ref = reference_tree(dist, nodes, depth, top_k)
    assert len(tree) == nodes
    assert tree.tokens.tolist() == ref["tokens"]
    assert tree.parents.tolist() == ref["parents"]
    assert tree.depths.tolist() == ref["depths"]
    assert tree.scores.tolist() == ref["scores"]


@pytest.mark.parametrize("nodes,depth,top_k", SIZES)
def test_tree_structure(nodes, depth, top_k):
    (tree,) = build_trees(path_step_fn(softmax_dist), None, nodes=nodes, depth=depth, top_k=top_k)
    own = torch.arange(nodes)
    assert len(tree) == nodes and int(tree.depths.min()) == 1 and int(tree.depths.max()) <= depth
    assert ((tree.parents >= -1) & (tree.parents < own)).all()
    inner = tree.parents >= 0
    assert (tree.depths[inner] == tree.depths[tree.parents[inner]] + 1).all()
    assert (tree.depths[~inner] == 1).all()
    assert (tree.scores[inner] <= tree.scores[tree.parents[inner]]).all()
    siblings = {}
    for i, parent in enumerate(tree.parents.tolist()):
        siblings.setdefault(parent, []).append(int(tree.tokens[i]))
    assert all(len(s) == len(set(s)) for s in siblings.values())  # one top_k list per parent


@pytest.mark.parametrize("nodes,depth,top_k", SIZES)
@pytest.mark.parametrize("dist", [quarter_steps, softmax_dist])
def test_kept_set_is_top_nodes_and_ancestor_closed(dist, nodes, depth, top_k):
    (tree,) = build_trees(path_step_fn(dist), None, nodes=nodes, depth=depth, top_k=top_k)
    candidates = reference_candidates(dist, depth, top_k)
    kept = set(node_paths(tree))
    dropped = [s for p, s, _ in candidates if p not in kept]
    assert len(kept) == nodes and kept <= {p for p, _, _ in candidates}
    assert not dropped or float(tree.scores.min()) >= max(dropped)
    assert all(p[:-1] in kept for p in kept if len(p) > 1)  # every kept node's parent is kept


def test_deterministic_under_ties():
    trees = [build_trees(path_step_fn(all_zero), None, nodes=20, depth=4, top_k=3)[0] for _ in range(2)]
    assert all(torch.equal(getattr(trees[0], f), getattr(trees[1], f)) for f in ("tokens", "parents", "depths"))
    # every candidate ties at 0: the first 20 in creation order = 3 + 9 + the first 8 of depth 3
    assert trees[0].depths.tolist() == [1] * 3 + [2] * 9 + [3] * 8
    assert trees[0].tokens[:3].tolist() == [0, 1, 2]  # ties among siblings: lower draft id first


def test_batched_equals_single_questions():
    b, nodes, depth, top_k = 3, 25, 5, 4
    trees = build_trees(path_step_fn(softmax_dist, questions=b), None, nodes=nodes, depth=depth, top_k=top_k)
    for q, tree in enumerate(trees):
        ref = reference_tree(softmax_dist, nodes, depth, top_k, question=q)
        assert tree.tokens.tolist() == ref["tokens"] and tree.parents.tolist() == ref["parents"]
    assert len({tuple(t.tokens.tolist()) for t in trees}) == b


def test_to_target_maps_tokens():
    d2t = torch.arange(V) * 3  # draft id i -> target id 4 i
    plain = build_trees(path_step_fn(softmax_dist), None, nodes=15, depth=4, top_k=3)[0]
    mapped = build_trees(
        path_step_fn(softmax_dist), None, nodes=15, depth=4, top_k=3, to_target=lambda ids: to_target(ids, d2t)
    )[0]
    assert torch.equal(mapped.tokens, 4 * plain.tokens) and torch.equal(mapped.parents, plain.parents)


def test_step_calls_and_frontier_shapes():
    calls = []
    inner = path_step_fn(softmax_dist)

    def step_fn(state, frontier):
        calls.append(None if frontier is None else (frontier.depth, tuple(frontier.mask.shape)))
        return inner(state, frontier)

    build_trees(step_fn, None, nodes=10, depth=4, top_k=3)
    assert calls == [None, (1, (1, 3, 3)), (2, (1, 3, 6)), (3, (1, 3, 9))]  # depth calls, none after the last


def test_bad_arguments():
    step_fn = path_step_fn(softmax_dist)
    assert max_nodes(6, 10) == 510 and max_nodes(1, 4) == 4
    with pytest.raises(ValueError, match="exceeds the 21 candidates"):
        build_trees(step_fn, None, nodes=22, depth=3, top_k=3)
    build_trees(step_fn, None, nodes=21, depth=3, top_k=3)  # exactly every candidate is fine
    with pytest.raises(ValueError, match="draft vocabulary"):
        build_trees(step_fn, None, nodes=5, depth=1, top_k=V + 1)
    with pytest.raises(ValueError, match=">= 1"):
        build_trees(step_fn, None, nodes=0, depth=2, top_k=2)
    with pytest.raises(ValueError, match="log-probabilities"):
        build_trees(lambda s, f: (torch.ones(1, 1, V), s), None, nodes=2, depth=1, top_k=2)
    with pytest.raises(ValueError, match="shape"):
        build_trees(lambda s, f: (torch.zeros(1, V), s), None, nodes=2, depth=1, top_k=2)


@pytest.mark.parametrize("nodes,depth,top_k", SIZES)
def test_attention_mask_equals_brute_force(nodes, depth, top_k):
    (tree,) = build_trees(path_step_fn(quarter_steps), None, nodes=nodes, depth=depth, top_k=top_k)
    assert torch.equal(tree.attention_mask(), brute_force_mask(tree.parents.tolist()))
    assert torch.equal(tree.attention_mask().sum(1), tree.depths)  # a node sees its depth-many path nodes


# Hand-made tree (root excluded), tokens in brackets:
#   root -> 0[5] -> 2[3] -> 4[9]
#                -> 3[4]
#        -> 1[7] -> 5[8] -> 6[1] -> 7[2]
#        -> 8[5] -> 9[6]                    (a duplicate 5 under the root, reaching another path)
HAND = DraftTree(
    tokens=torch.tensor([5, 7, 3, 4, 9, 8, 1, 2, 5, 6]),
    parents=torch.tensor([-1, -1, 0, 0, 2, 1, 5, 6, -1, 8]),
    depths=torch.tensor([1, 1, 2, 2, 3, 2, 3, 4, 1, 2]),
    scores=-torch.arange(10, dtype=torch.float),
)


@pytest.mark.parametrize(
    "continuation,accepted",
    [
        ([5, 3, 9, 6, 6], 3),  # a deep path, then a miss
        ([5, 3, 9], 3),  # the continuation ends exactly at the leaf
        ([5, 0, 0], 1),  # only the first token
        ([6, 5, 3], 0),  # nothing
        ([5, 4, 9, 9], 2),  # a matching path of 2 while the sibling branch 1-5-6-7 is 4 deep
        ([7, 8, 0], 2),  # inside the deepest branch, missing before its end
        ([7, 8, 1, 2, 4], 4),  # the whole deepest branch
        ([5, 3], 2),  # continuation shorter than the path 0-2-4
        ([7], 1),
        ([], 0),
        ([5, 6], 2),  # only through the duplicate root child 8
    ],
)
def test_accepted_length_hand_made(continuation, accepted):
    assert accepted_length(HAND, continuation) == accepted
    assert accepted_length(HAND, torch.tensor(continuation, dtype=torch.long)) == accepted


def test_accepted_length_matches_path_walk():
    (tree,) = build_trees(path_step_fn(softmax_dist), None, nodes=30, depth=5, top_k=4)
    g = torch.Generator().manual_seed(0)
    for path in tree.paths():
        tokens = tree.tokens[path].tolist()
        assert accepted_length(tree, tokens + [V + 1]) == len(path)
        cut = int(torch.randint(0, len(path), (1,), generator=g))
        assert accepted_length(tree, tokens[:cut] + [V + 1]) == cut


def test_hand_made_tree_helpers():
    assert HAND.paths() == [[0, 3], [0, 2, 4], [1, 5, 6, 7], [8, 9]]
    assert HAND.leaves().tolist() == [3, 4, 7, 9]
    assert HAND.retrieve_indices().tolist() == [[0, 3, -1, -1], [0, 2, 4, -1], [1, 5, 6, 7], [8, 9, -1, -1]]
    assert HAND.position_ids(10).tolist() == [10, 10, 11, 11, 12, 11, 12, 13, 10, 11]  # root at 9
    expected = brute_force_mask(HAND.parents.tolist())
    assert torch.equal(HAND.attention_mask(), expected)
    assert HAND.attention_mask()[7].nonzero().flatten().tolist() == [1, 5, 6, 7]


def test_draft_tree_validation():
    ok = dict(
        tokens=torch.tensor([1, 2]),
        parents=torch.tensor([-1, 0]),
        depths=torch.tensor([1, 2]),
        scores=torch.tensor([-1.0, -2.0]),
    )
    DraftTree(**ok)
    with pytest.raises(ValueError, match="earlier node"):
        DraftTree(**{**ok, "parents": torch.tensor([1, -1]), "depths": torch.tensor([2, 1])})
    with pytest.raises(ValueError, match="depth"):
        DraftTree(**{**ok, "depths": torch.tensor([1, 3])})
    with pytest.raises(ValueError, match="one length"):
        DraftTree(**{**ok, "scores": torch.tensor([-1.0])})


def test_tau():
    assert tau([0]) == 1.0  # nothing accepted: the bonus token alone
    assert tau([3, 1, 0, 2]) == pytest.approx(2.5)
    assert tau(torch.tensor([4, 4])) == 5.0
    with pytest.raises(ValueError):
        tau([])
    with pytest.raises(ValueError):
        tau([1, -1])
    for bad in ([1, float("nan")], [1, float("inf")], [0.5, 1.25]):  # a round accepts a whole number of tokens
        with pytest.raises(ValueError, match="whole numbers"):
            tau(bad)


@pytest.mark.parametrize(
    "log_probs,top_k,tokens",
    [
        ([-1.0, -0.5, -0.5, -3.0, -2.0, -0.5], 4, [1, 2, 5, 0]),  # ties inside the kept top_k (topk path)
        ([-1.0, -0.5, -1.0, -3.0, -1.0], 2, [1, 0]),  # a tie across the cut (stable sort path)
        ([-2.0, -1.0], 2, [1, 0]),  # top_k == vocabulary
    ],
)
def test_sibling_ties_go_to_lower_draft_id(log_probs, top_k, tokens):
    fixed = torch.tensor(log_probs)[None]  # (1, V)
    tree = build_tree(lambda state, frontier: (fixed, state), None, nodes=top_k, depth=1, top_k=top_k)
    assert tree.tokens.tolist() == tokens and tree.parents.tolist() == [-1] * top_k


def test_nan_log_probs_rejected():
    bad = torch.log_softmax(torch.randn(1, 1, V), -1)
    bad[0, 0, 3] = float("nan")
    with pytest.raises(ValueError, match="log-probabilities"):
        build_trees(lambda s, f: (bad, s), None, nodes=2, depth=1, top_k=2)


@pytest.mark.parametrize("depth, top_k", [(0, 3), (-2, 3), (2, 0), (2.0, 3)])
def test_max_nodes_refuses_what_is_no_tree(depth, top_k):
    with pytest.raises(ValueError, match="depth, top_k"):
        max_nodes(depth, top_k)
