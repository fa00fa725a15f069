"""Tau by replay (elsi_lib.draft.replay) on a tiny random target and a randomly initialised draft:
the batched tree forwards (`root_step_fn` with its KV cache) against a naive re-run of the draft
from scratch, the replay walk against hand-built continuations of known acceptance, and the cache."""
import json

import numpy as np
import pytest
import torch

from conftest import module_feature_store
from elsi_lib import random_model
from elsi_lib.draft.model import Eagle3Draft
from elsi_lib.draft.vocabulary import draft_vocabulary
from elsi_lib.draft.tree import build_tree_sizes, build_trees
from elsi_lib.draft import replay as R
from elsi_lib.draft import runner
from elsi_lib.draft.features import FeatureStore

LAYERS = (0, 1, 2, 3)
SOURCE = (1, 3)
DRAFT_VOCAB = 48

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def store(tiny_model, tiny_tokenizer, tmp_path_factory):
    return module_feature_store(tiny_model, tiny_tokenizer, tmp_path_factory, 4, LAYERS)


def make_draft(model, store, seed=0):
    """A draft with a non-trivial vocabulary map (d2t != 0) and seeded random norms and lm_head."""
    counts = torch.zeros(model.config.vocab_size)
    for i in range(len(store)):
        s = store.sequence(i)
        counts += torch.bincount(torch.cat([s["ids"], s["argmax"]]), minlength=len(counts))
    d2t, t2d = draft_vocabulary(counts, DRAFT_VOCAB)
    assert (d2t != 0).any()
    draft = Eagle3Draft.from_target(model, SOURCE, DRAFT_VOCAB, seed=seed)
    draft.set_vocabulary(d2t, t2d)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for norm in (draft.norm, draft.midlayer.input_layernorm, draft.midlayer.hidden_norm,
                     draft.midlayer.post_attention_layernorm):
            norm.weight.copy_(1 + 0.5 * torch.randn(norm.weight.shape, generator=g))
        draft.lm_head.weight.mul_(4)  # peaked distributions, as a trained draft's
    return draft.eval()


@pytest.fixture(scope="module")
def draft(tiny_model, store):
    return make_draft(tiny_model, store)


# ---------------------------------------------------------------- 1. fast tree forwards == naive re-run

def naive_step_fn(draft, ids, features, r):
    """step_fn for `build_trees` (batch 1) at root r that re-runs `draft.step` from scratch at every
    depth over [prefix rows 0..r-1 ; every tree node forwarded so far] with one full mask."""
    prefix_ids, prefix_g = ids[1:r + 1], draft.project(features[:r])  # (r,), (r, d)

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
            return torch.log_softmax(logits[r - 1:r], -1)[None], \
                {"nodes": [], "last": [-1], "hidden": out[r - 1:r]}
        nodes, first = list(state["nodes"]), len(state["nodes"])
        assert frontier.rows.shape[0] == 1
        for row, draft_id in zip(frontier.rows[0].tolist(), frontier.draft_ids[0].tolist()):
            nodes.append({"token": int(draft.to_target(torch.tensor(draft_id))), "hidden": state["hidden"][row],
                          "pos": r - 1 + frontier.depth, "parent": state["last"][row]})
        logits, out = run(nodes)
        k = len(nodes) - first
        return torch.log_softmax(logits[r + first:], -1)[None], \
            {"nodes": nodes, "last": list(range(first, first + k)), "hidden": out[r + first:]}

    return step_fn


def assert_fast_trees_equal_naive(draft, ids, features, roots, sizes=(6, 14), depth=4, top_k=3):
    """Returns the fast trees {nodes: [tree per root]} after checking them against the naive ones."""
    with torch.no_grad():
        hidden, kv = runner.prefix_pass(draft, ids, features, autocast=False)
        step_fn, state = runner.root_step_fn(draft, hidden, kv, roots, autocast=False)
        fast = build_tree_sizes(step_fn, state, sizes=sizes, depth=depth, top_k=top_k, to_target=draft.to_target)
        for q, r in enumerate(roots.tolist()):
            for nodes in sizes:
                naive = build_trees(naive_step_fn(draft, ids, features, r), None, nodes=nodes, depth=depth,
                                    top_k=top_k, to_target=draft.to_target)[0]
                got = fast[nodes][q]
                assert got.tokens.tolist() == naive.tokens.tolist(), (r, nodes)
                assert got.parents.tolist() == naive.parents.tolist(), (r, nodes)
                assert got.depths.tolist() == naive.depths.tolist(), (r, nodes)
                torch.testing.assert_close(got.scores, naive.scores, atol=1e-5, rtol=1e-5)
    # Non-trivial: trees reach depth >= 2, and differ between roots (the prefix mask matters).
    assert max(int(t.depths.max()) for t in fast[max(sizes)]) >= 2
    assert len({tuple(t.tokens.tolist()) for t in fast[max(sizes)]}) > 1
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
            return build_tree_sizes(step_fn, state, sizes=[10], depth=3, top_k=3, to_target=draft.to_target)[10][0]

    before = tree(ids)
    ids[r + 1:] = (ids[r + 1:] + 7) % len(draft.t2d)
    after = tree(ids)
    assert before.tokens.tolist() == after.tokens.tolist()
    torch.testing.assert_close(before.scores, after.scores, atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------- 2. replay walk

def single_root_tree(draft, ids, features, r, nodes, depth, top_k):
    with torch.no_grad():
        hidden, kv = runner.prefix_pass(draft, ids[:r + 1], features[:r + 1], autocast=False)
        step_fn, state = runner.root_step_fn(draft, hidden, kv, torch.tensor([r]), autocast=False)
        return build_tree_sizes(step_fn, state, sizes=[nodes], depth=depth, top_k=top_k,
                                to_target=draft.to_target)[nodes][0]


def known_acceptance_sequence(draft, store, script, nodes, depth, top_k):
    """A sequence whose continuation is built round by round so that the round at root r accepts
    exactly q tokens: the next q tokens spell a path of the draft's own tree at r, the one after
    is a token outside the draft vocabulary (in no tree). Returns (sequence dict, end, accepted)."""
    s = store.sequence(2, SOURCE)
    ids, features, start = s["ids"].clone(), s["features"], s["start"]
    outside = int(torch.nonzero(~draft.t2d)[0])
    r, accepted = start, []
    for q in script:
        tree = single_root_tree(draft, ids, features, r, nodes, depth, top_k)
        q = min(q, int(tree.depths.max()))
        node = int(torch.nonzero(tree.depths == q)[0]) if q else -1
        path = []
        while node >= 0:
            path.append(int(tree.tokens[node]))
            node = int(tree.parents[node])
        ids[r + 1:r + 1 + q] = torch.tensor(path[::-1], dtype=torch.long)
        ids[r + 1 + q] = outside
        accepted.append(q)
        r += q + 1
    end = r + 1
    assert end < len(ids), "sequence too short for the script"
    argmax = s["argmax"].clone()
    argmax[start - 1:end - 1] = ids[start:end]  # the continuation is the target's greedy output ...
    argmax[end - 1] = (ids[end] + 1) % len(draft.t2d)  # ... up to end
    return {**s, "ids": ids, "argmax": argmax}, end, accepted


def test_replay_sequence_known_acceptance(draft, store):
    depth, top_k, sizes = 4, 2, (10, 14)
    script = [2, 0, 3, 1, 4, 0, 1]
    sequence, end, accepted = known_acceptance_sequence(draft, store, script, min(sizes), depth, top_k)
    assert R.continuation_end(sequence["ids"], sequence["argmax"], sequence["start"], 1000) == end
    assert sum(accepted) >= 6 and max(accepted) >= 3  # the script was mostly realisable
    out = R.replay_sequence(draft, sequence, sizes=sizes, depth=depth, top_k=top_k, max_tokens=1000, autocast=False)
    assert set(out) == set(sizes)
    for nodes in sizes:  # a larger tree contains the smaller one; the breaking token is in neither
        assert out[nodes] == accepted
        assert sum(a + 1 for a in out[nodes]) == end - sequence["start"] - 1
        assert all(0 <= a <= depth for a in out[nodes])
    # max_tokens cuts the continuation: the round reaching the cut is capped to the tokens left.
    for max_tokens in (4, 7, 9):
        expected, r, last = [], sequence["start"], sequence["start"] + max_tokens - 1
        for a in accepted:
            if r >= last:
                break
            expected.append(min(a, last - r - 1))
            r += expected[-1] + 1
        cut = R.replay_sequence(draft, sequence, sizes=sizes, depth=depth, top_k=top_k, max_tokens=max_tokens,
                                autocast=False)
        assert cut == {nodes: expected for nodes in sizes}
        assert sum(a + 1 for a in expected) == max_tokens - 1
    assert accepted[:3] == [2, 0, 3] and cut[min(sizes)][:3] == [2, 0, 3]  # max_tokens=9 ...
    assert R.replay_sequence(draft, sequence, sizes=sizes, depth=depth, top_k=top_k, max_tokens=7,
                             autocast=False)[min(sizes)] == [2, 0, 1]  # ... and 7: the third round is capped


def test_replay_sequence_walk_with_scripted_acceptance(draft, store, monkeypatch):
    """The walk r -> r + a + 1, the cap at the tokens left, and that round r gets root r's tree and
    the continuation after r; accepted_length replaced by a script."""
    s = store.sequence(0, SOURCE)
    start = s["start"]
    argmax = s["argmax"].clone()
    argmax[:-1] = s["ids"][1:]  # everything is the target's greedy output
    sequence = {**s, "argmax": argmax}
    end = start + 12
    built = {}

    def spy_build(*args, **kwargs):
        built.update(build_tree_sizes(*args, **kwargs))
        return built

    script, calls = iter([2, 0, 3, 6]), []

    def fake_accepted(tree, continuation):
        root = end - len(continuation) - 1
        assert torch.equal(torch.as_tensor(continuation), s["ids"][root + 1:end])
        assert tree is built[5][root - start]  # the tree of this root
        calls.append(root)
        return next(script)

    monkeypatch.setattr(R, "build_tree_sizes", spy_build)
    monkeypatch.setattr(R, "accepted_length", fake_accepted)
    out = R.replay_sequence(draft, sequence, sizes=(5,), depth=3, top_k=2, max_tokens=12, autocast=False)
    assert len(built[5]) == end - 1 - start  # one tree per root start..end-2
    assert calls == [start, start + 3, start + 4, start + 8]
    assert out == {5: [2, 0, 3, 2]}  # the last 6 is capped to the 2 tokens before the end
    assert sum(a + 1 for a in out[5]) == end - start - 1


def test_replay_sequence_without_rounds(draft, store):
    s = store.sequence(0, SOURCE)
    argmax = s["argmax"].clone()
    argmax[s["start"] - 1] = s["ids"][s["start"]]  # the prefill's token is greedy ...
    argmax[s["start"]] = (s["ids"][s["start"] + 1] + 1) % len(draft.t2d)  # ... the next is not
    assert R.continuation_end(s["ids"], argmax, s["start"], 100) == s["start"] + 1
    assert R.replay_sequence(draft, {**s, "argmax": argmax}, sizes=(3, 5), depth=2, top_k=2) == {3: [], 5: []}


# ---------------------------------------------------------------- 3. continuation_end

@pytest.mark.parametrize("argmax,start,max_tokens,end", [
    ([6, 7, 0, 9, 10, 0], 1, 10, 3),    # x[1], x[2] greedy; x[3] = 8 != argmax[2] = 0: stops at the mismatch
    ([6, 7, 8, 9, 10, 0], 1, 10, 6),    # all greedy: stops at the end of the sequence
    ([6, 7, 8, 9, 10, 0], 1, 3, 4),     # max_tokens
    ([6, 7, 8, 9, 10, 0], 2, 0, 2),     # max_tokens = 0
    ([0, 0, 0, 0, 0, 0], 2, 10, 2),     # mismatch at start itself
    ([6, 7, 8, 9, 10, 0], 6, 10, 6),    # start at the end
    ([6, 0, 8, 9, 10, 0], 4, 10, 6),    # a mismatch before start is irrelevant
])
def test_continuation_end_hand_made(argmax, start, max_tokens, end):
    ids = torch.tensor([5, 6, 7, 8, 9, 10])
    assert R.continuation_end(ids, torch.tensor(argmax), start, max_tokens) == end


@pytest.mark.parametrize("sampled,start,max_tokens,end", [
    ([7, 8, 9], 2, 10, 5),         # the whole sample, then the stored sequence goes on: stops after the sample
    ([7, 8, 0, 10], 2, 10, 4),     # re-tokenisation parts at the third token
    ([7, 8, 9, 10], 2, 2, 4),      # max_tokens
    ([0], 2, 10, 2),               # parts at once
    ([7, 8, 9, 10, 11, 12], 2, 10, 6),  # a sample longer than the stored sequence
])
def test_continuation_end_of_a_sample_ignores_argmax(sampled, start, max_tokens, end):
    ids = torch.tensor([5, 6, 7, 8, 9, 10])
    argmax = torch.zeros(6, dtype=torch.long)  # never the stored token: a greedy cut would stop at start
    assert R.continuation_end(ids, argmax, start, max_tokens, sampled) == end


def test_replay_of_a_sample_scores_the_sampled_tokens(draft, store):
    """At T > 0 replay walks the sampled continuation (not the argmax): with the stored tokens as the
    sample it scores rounds where greedy replay of the same sequence (random argmax) may stop at once."""
    s = store.sequence(0, SOURCE)
    sample = s["ids"][s["start"]:].tolist()
    out = R.replay_sequence(draft, s, sizes=(6,), depth=3, top_k=3, max_tokens=1000, autocast=False,
                            sampled=sample)[6]
    assert sum(a + 1 for a in out) == len(sample) - 1  # every sampled token after the first is covered
    with pytest.raises(ValueError, match="sampled replies"):
        R.replay(draft, store, key={"t": 1}, sizes=(6,), depth=3, top_k=3, sampled=[sample])


def test_replay_of_a_sample_equals_greedy_replay_of_the_same_tokens(draft, greedy_store):
    """The same tokens as a sample, or as greedy tokens (argmax = the next stored token): the rounds agree."""
    for i in range(len(greedy_store)):
        s = greedy_store.sequence(i, SOURCE)
        greedy = R.replay_sequence(draft, s, sizes=(6, 12), depth=3, top_k=3, max_tokens=1000, autocast=False)
        sampled = R.replay_sequence(draft, {**s, "argmax": torch.zeros_like(s["argmax"])}, sizes=(6, 12), depth=3,
                                    top_k=3, max_tokens=1000, autocast=False, sampled=s["ids"][s["start"]:].tolist())
        assert sampled == greedy and len(greedy[6]) > 0


# ---------------------------------------------------------------- 4. replay cache

@pytest.fixture
def greedy_store(store):
    """The module store with every stored token made the target's greedy one (long continuations)."""
    shards = []
    for shard in store.shards:
        argmax = np.roll(np.asarray(shard["ids"]), -1).astype(np.int32)
        shards.append({**shard, "argmax": argmax})
    return FeatureStore(store.folder, store.layers, shards)


def test_replay_caches_and_ignores_a_corrupt_cache(draft, greedy_store, monkeypatch, tmp_path):
    options = dict(key={"draft": "test"}, sizes=(4, 8), depth=3, top_k=2, max_tokens=10, autocast=False,
                   progress=False)
    original, calls = R.replay_sequence, []

    def counting(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(R, "replay_sequence", counting)
    first = R.replay(draft, greedy_store, **options)
    assert len(calls) == len(greedy_store) == len(first)
    for i, result in enumerate(first):  # the cached results are replay_sequence's
        assert result == original(draft, greedy_store.sequence(i, SOURCE), sizes=(4, 8), depth=3, top_k=2,
                                  max_tokens=10, autocast=False)
        assert sum(a + 1 for a in result[4]) == 9 and sum(a + 1 for a in result[8]) == 9
    (path,) = (tmp_path / "cache" / "replay").glob("*.json")

    def refuse(*args, **kwargs):
        raise AssertionError("replay_sequence called although every question is cached")

    monkeypatch.setattr(R, "replay_sequence", refuse)
    assert R.replay(draft, greedy_store, **options) == first

    # An edited result (checksum no longer matches): the whole file is ignored and recomputed.
    saved = json.loads(path.read_text())
    saved["results"]["0"]["4"] = [7, 7]
    path.write_text(json.dumps(saved))
    monkeypatch.setattr(R, "replay_sequence", counting)
    calls.clear()
    assert R.replay(draft, greedy_store, **options) == first
    assert len(calls) == len(greedy_store)

    # A truncated file: recomputed too.
    path.write_text(path.read_text()[:40])
    calls.clear()
    assert R.replay(draft, greedy_store, **options) == first
    assert len(calls) == len(greedy_store)

    # A consistent file missing one question: only that question is computed (resume).
    saved = json.loads(path.read_text())
    del saved["results"]["2"]
    saved["checksum"] = R.sha256_text(json.dumps(saved["results"]))
    path.write_text(json.dumps(saved))
    calls.clear()
    assert R.replay(draft, greedy_store, **options) == first
    assert len(calls) == 1

    # Other settings are another cache entry.
    calls.clear()
    other = R.replay(draft, greedy_store, **{**options, "max_tokens": 6})
    assert len(calls) == len(greedy_store)
    assert all(sum(a + 1 for a in result[4]) == 5 for result in other)
    assert len(list((tmp_path / "cache" / "replay").glob("*.json"))) == 2


def test_replay_cache_reused_for_a_key_with_tuples(draft, greedy_store, monkeypatch):
    options = dict(key={"experiment": {"sizes": (4, 8), "seeds": (0, 1)}}, sizes=(4, 8), depth=3, top_k=2,
                   max_tokens=6, autocast=False, progress=False)
    first = R.replay(draft, greedy_store, **options)

    def refuse(*args, **kwargs):
        raise AssertionError("replay_sequence called although every question is cached")

    monkeypatch.setattr(R, "replay_sequence", refuse)
    assert R.replay(draft, greedy_store, **options) == first
