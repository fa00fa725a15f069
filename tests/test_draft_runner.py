"""The draft's shared passes (elsi_lib.draft.runner) on a tiny random target: the batched tree
forwards (`root_step_fn` with the prefix KV cache of `prefix_pass`) against a naive re-run of the
draft from scratch, for several roots at once, a Qwen2 GQA draft, and the prefix mask."""

import pytest
import torch

from conftest import module_feature_store, peaked_draft
from elsi_lib import random_model
from elsi_lib.draft import runner
from elsi_lib.draft.model import Eagle3Draft
from elsi_lib.draft.tree import build_tree_sizes, build_trees
from elsi_lib.draft.vocabulary import draft_vocabulary

LAYERS = (0, 1, 2, 3)
SOURCE = (1, 3)
DRAFT_VOCAB = 48

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def store(tiny_model, tiny_tokenizer, tmp_path_factory):
    return module_feature_store(tiny_model, tiny_tokenizer, tmp_path_factory, 4, LAYERS)


@pytest.fixture(scope="module")
def draft(tiny_model, store):
    return peaked_draft(tiny_model, store, SOURCE, DRAFT_VOCAB)


def naive_step_fn(draft, ids, features, r):
    """step_fn for `build_trees` (batch 1) at root r that re-runs `draft.step` from scratch at every
    depth over [prefix rows 0..r-1 ; every tree node forwarded so far] with one full mask."""
    prefix_ids, prefix_g = ids[1 : r + 1], draft.project(features[:r])  # (r,), (r, d)

    def run(nodes):
        T = r + len(nodes)
        tokens = torch.cat([prefix_ids, torch.tensor([n["token"] for n in nodes], dtype=torch.long)])
        hidden = torch.cat([prefix_g] + [n["hidden"][None] for n in nodes])  # (T, d)
        positions = torch.cat([torch.arange(r), torch.tensor([n["pos"] for n in nodes], dtype=torch.long)])
        allowed = torch.zeros(T, T, dtype=torch.bool)
        allowed[:r, :r] = torch.ones(r, r, dtype=torch.bool).tril()  # causal prefix
        allowed[r:, :r] = True  # every node sees the whole prefix ...
        for i in range(len(nodes)):
            j = i
            while j >= 0:  # ... and itself and its ancestors
                allowed[r + i, r + j] = True
                j = nodes[j]["parent"]
        logits, out, _ = draft.step(tokens[None], hidden[None], positions=positions, allowed=allowed[None, None])
        return logits[0], out[0]

    def step_fn(state, frontier):
        if frontier is None:
            logits, out = run([])
            return torch.log_softmax(logits[r - 1 : r], -1)[None], {"nodes": [], "last": [-1], "hidden": out[r - 1 : r]}
        nodes, first = list(state["nodes"]), len(state["nodes"])
        assert frontier.rows.shape[0] == 1
        for row, draft_id in zip(frontier.rows[0].tolist(), frontier.draft_ids[0].tolist()):
            nodes.append(
                {
                    "token": int(draft.to_target(torch.tensor(draft_id))),
                    "hidden": state["hidden"][row],
                    "pos": r - 1 + frontier.depth,
                    "parent": state["last"][row],
                }
            )
        logits, out = run(nodes)
        k = len(nodes) - first
        return torch.log_softmax(logits[r + first :], -1)[None], {
            "nodes": nodes,
            "last": list(range(first, first + k)),
            "hidden": out[r + first :],
        }

    return step_fn


def assert_fast_trees_equal_naive(draft, ids, features, roots, tree_nodes=(6, 14), depth=4, top_k=3):
    """Returns the fast trees {nodes: [tree per root]} after checking them against the naive ones."""
    with torch.no_grad():
        hidden, kv = runner.prefix_pass(draft, ids, features, autocast=False)
        step_fn, state = runner.root_step_fn(draft, hidden, kv, roots, autocast=False)
        fast = build_tree_sizes(
            step_fn, state, tree_nodes=tree_nodes, depth=depth, top_k=top_k, to_target=draft.to_target
        )
        for q, r in enumerate(roots.tolist()):
            for nodes in tree_nodes:
                naive = build_trees(
                    naive_step_fn(draft, ids, features, r),
                    None,
                    nodes=nodes,
                    depth=depth,
                    top_k=top_k,
                    to_target=draft.to_target,
                )[0]
                got = fast[nodes][q]
                assert got.tokens.tolist() == naive.tokens.tolist(), (r, nodes)
                assert got.parents.tolist() == naive.parents.tolist(), (r, nodes)
                assert got.depths.tolist() == naive.depths.tolist(), (r, nodes)
                torch.testing.assert_close(got.scores, naive.scores, atol=1e-5, rtol=1e-5)
    # Non-trivial: trees reach depth >= 2, and differ between roots (the prefix mask matters).
    assert max(int(t.depths.max()) for t in fast[max(tree_nodes)]) >= 2
    assert len({tuple(t.tokens.tolist()) for t in fast[max(tree_nodes)]}) > 1
    return fast


@pytest.mark.parametrize("sequence", [0, 3])
def test_root_step_fn_trees_equal_naive_rerun(draft, store, sequence):
    s = store.sequence(sequence, SOURCE)
    n = len(s["ids"])
    assert_fast_trees_equal_naive(draft, s["ids"], s["features"], torch.tensor([1, 2, n // 3, s["start"], n - 2]))


def test_root_step_fn_trees_equal_naive_rerun_qwen2_gqa():
    """Grouped-query attention (4 heads, 2 KV heads) through the KV cache; random ids and features."""
    target = random_model("qwen2", n_layers=3, hidden_size=32, vocab_size=120, num_key_value_heads=2, seed=1)
    draft = Eagle3Draft.from_target(target, (0, 2), 40, seed=2)
    g = torch.Generator().manual_seed(3)
    draft.set_vocabulary(*draft_vocabulary(torch.rand(120, generator=g), 40))
    with torch.no_grad():
        draft.lm_head.weight.mul_(4)
    draft.eval()
    ids, features = torch.randint(0, 120, (30,), generator=g), torch.randn(30, 64, generator=g)
    assert_fast_trees_equal_naive(draft, ids, features, torch.tensor([1, 9, 17, 28]))


def test_root_step_fn_masks_later_prefix_rows(draft, store):
    """A root's tree does not change when the tokens after the root (beyond the prefix) change."""
    s = store.sequence(1, SOURCE)
    ids, features = s["ids"].clone(), s["features"]
    r = len(ids) // 2

    def tree(ids):
        with torch.no_grad():
            hidden, kv = runner.prefix_pass(draft, ids, features, autocast=False)
            step_fn, state = runner.root_step_fn(draft, hidden, kv, torch.tensor([r]), autocast=False)
            return build_tree_sizes(step_fn, state, tree_nodes=[10], depth=3, top_k=3, to_target=draft.to_target)[10][0]

    before = tree(ids)
    ids[r + 1 :] = (ids[r + 1 :] + 7) % len(draft.t2d)
    after = tree(ids)
    assert before.tokens.tolist() == after.tokens.tolist()
    torch.testing.assert_close(before.scores, after.scores, atol=1e-5, rtol=1e-5)
