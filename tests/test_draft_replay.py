"""Tau by replay (elsi_lib.draft.replay) on a tiny random target and a randomly initialised draft:
the replay walk against hand-built continuations of known acceptance, samples, and the cache."""

import json

import numpy as np
import pytest
import torch

from conftest import module_feature_store, peaked_draft
from elsi_lib.draft.tree import build_tree_sizes
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
    return peaked_draft(model, store, SOURCE, DRAFT_VOCAB, seed)


@pytest.fixture(scope="module")
def draft(tiny_model, store):
    return make_draft(tiny_model, store)


# ---------------------------------------------------------------- 2. replay walk


def single_root_tree(draft, ids, features, r, nodes, depth, top_k):
    with torch.no_grad():
        hidden, kv = runner.prefix_pass(draft, ids[: r + 1], features[: r + 1], autocast=False)
        step_fn, state = runner.root_step_fn(draft, hidden, kv, torch.tensor([r]), autocast=False)
        return build_tree_sizes(
            step_fn, state, tree_nodes=[nodes], depth=depth, top_k=top_k, to_target=draft.to_target
        )[nodes][0]


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
        ids[r + 1 : r + 1 + q] = torch.tensor(path[::-1], dtype=torch.long)
        ids[r + 1 + q] = outside
        accepted.append(q)
        r += q + 1
    end = r + 1
    assert end < len(ids), "sequence too short for the script"
    argmax = s["argmax"].clone()
    argmax[start - 1 : end - 1] = ids[start:end]  # the continuation is the target's greedy output ...
    argmax[end - 1] = (ids[end] + 1) % len(draft.t2d)  # ... up to end
    return {**s, "ids": ids, "argmax": argmax}, end, accepted


def test_replay_sequence_known_acceptance(draft, store):
    depth, top_k, tree_nodes = 4, 2, (10, 14)
    script = [2, 0, 3, 1, 4, 0, 1]
    sequence, end, accepted = known_acceptance_sequence(draft, store, script, min(tree_nodes), depth, top_k)
    assert R.continuation_end(sequence["ids"], sequence["argmax"], sequence["start"], 1000) == end
    assert sum(accepted) >= 6 and max(accepted) >= 3  # the script was mostly realisable
    out = R.replay_sequence(
        draft, sequence, tree_nodes=tree_nodes, depth=depth, top_k=top_k, max_tokens=1000, autocast=False
    )
    assert set(out) == set(tree_nodes)
    for nodes in tree_nodes:  # a larger tree contains the smaller one; the breaking token is in neither
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
        cut = R.replay_sequence(
            draft, sequence, tree_nodes=tree_nodes, depth=depth, top_k=top_k, max_tokens=max_tokens, autocast=False
        )
        assert cut == {nodes: expected for nodes in tree_nodes}
        assert sum(a + 1 for a in expected) == max_tokens - 1
    assert accepted[:3] == [2, 0, 3] and cut[min(tree_nodes)][:3] == [2, 0, 3]  # max_tokens=9 ...
    assert R.replay_sequence(
        draft, sequence, tree_nodes=tree_nodes, depth=depth, top_k=top_k, max_tokens=7, autocast=False
    )[min(tree_nodes)] == [2, 0, 1]  # ... and 7: the third round is capped


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
        assert torch.equal(torch.as_tensor(continuation), s["ids"][root + 1 : end])
        assert tree is built[5][root - start]  # the tree of this root
        calls.append(root)
        return next(script)

    monkeypatch.setattr(R, "build_tree_sizes", spy_build)
    monkeypatch.setattr(R, "accepted_length", fake_accepted)
    out = R.replay_sequence(draft, sequence, tree_nodes=(5,), depth=3, top_k=2, max_tokens=12, autocast=False)
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
    assert R.replay_sequence(draft, {**s, "argmax": argmax}, tree_nodes=(3, 5), depth=2, top_k=2) == {3: [], 5: []}


# ---------------------------------------------------------------- 3. continuation_end


@pytest.mark.parametrize(
    "argmax,start,max_tokens,end",
    [
        ([6, 7, 0, 9, 10, 0], 1, 10, 3),  # x[1], x[2] greedy; x[3] = 8 != argmax[2] = 0: stops at the mismatch
        ([6, 7, 8, 9, 10, 0], 1, 10, 6),  # all greedy: stops at the end of the sequence
        ([6, 7, 8, 9, 10, 0], 1, 3, 4),  # max_tokens
        ([6, 7, 8, 9, 10, 0], 2, 0, 2),  # max_tokens = 0
        ([0, 0, 0, 0, 0, 0], 2, 10, 2),  # mismatch at start itself
        ([6, 7, 8, 9, 10, 0], 6, 10, 6),  # start at the end
        ([6, 0, 8, 9, 10, 0], 4, 10, 6),  # a mismatch before start is irrelevant
    ],
)
def test_continuation_end_hand_made(argmax, start, max_tokens, end):
    ids = torch.tensor([5, 6, 7, 8, 9, 10])
    assert R.continuation_end(ids, torch.tensor(argmax), start, max_tokens) == end


@pytest.mark.parametrize(
    "sampled,start,max_tokens,end",
    [
        ([7, 8, 9], 2, 10, 5),  # the whole sample, then the stored sequence goes on: stops after the sample
        ([7, 8, 0, 10], 2, 10, 4),  # re-tokenisation parts at the third token
        ([7, 8, 9, 10], 2, 2, 4),  # max_tokens
        ([0], 2, 10, 2),  # parts at once
        ([7, 8, 9, 10, 11, 12], 2, 10, 6),  # a sample longer than the stored sequence
    ],
)
def test_continuation_end_of_a_sample_ignores_argmax(sampled, start, max_tokens, end):
    ids = torch.tensor([5, 6, 7, 8, 9, 10])
    argmax = torch.zeros(6, dtype=torch.long)  # never the stored token: a greedy cut would stop at start
    assert R.continuation_end(ids, argmax, start, max_tokens, sampled) == end


def test_replay_of_a_sample_scores_the_sampled_tokens(draft, store):
    """At T > 0 replay walks the sampled continuation (not the argmax): with the stored tokens as the
    sample it scores rounds where greedy replay of the same sequence (random argmax) may stop at once."""
    s = store.sequence(0, SOURCE)
    sample = s["ids"][s["start"] :].tolist()
    out = R.replay_sequence(
        draft, s, tree_nodes=(6,), depth=3, top_k=3, max_tokens=1000, autocast=False, sampled=sample
    )[6]
    assert sum(a + 1 for a in out) == len(sample) - 1  # every sampled token after the first is covered
    with pytest.raises(ValueError, match="sampled replies"):
        R.replay(draft, store, key={"t": 1}, tree_nodes=(6,), depth=3, top_k=3, sampled=[sample])


def test_replay_of_a_sample_equals_greedy_replay_of_the_same_tokens(draft, greedy_store):
    """The same tokens as a sample, or as greedy tokens (argmax = the next stored token): the rounds agree."""
    for i in range(len(greedy_store)):
        s = greedy_store.sequence(i, SOURCE)
        greedy = R.replay_sequence(draft, s, tree_nodes=(6, 12), depth=3, top_k=3, max_tokens=1000, autocast=False)
        sampled = R.replay_sequence(
            draft,
            {**s, "argmax": torch.zeros_like(s["argmax"])},
            tree_nodes=(6, 12),
            depth=3,
            top_k=3,
            max_tokens=1000,
            autocast=False,
            sampled=s["ids"][s["start"] :].tolist(),
        )
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
    options = dict(
        key={"draft": "test"}, tree_nodes=(4, 8), depth=3, top_k=2, max_tokens=10, autocast=False, progress=False
    )
    original, calls = R.replay_sequence, []

    def counting(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(R, "replay_sequence", counting)
    first = R.replay(draft, greedy_store, **options)
    assert len(calls) == len(greedy_store) == len(first)
    for i, result in enumerate(first):  # the cached results are replay_sequence's
        assert result == original(
            draft, greedy_store.sequence(i, SOURCE), tree_nodes=(4, 8), depth=3, top_k=2, max_tokens=10, autocast=False
        )
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
    options = dict(
        key={"experiment": {"tree_nodes": (4, 8), "seeds": (0, 1)}},
        tree_nodes=(4, 8),
        depth=3,
        top_k=2,
        max_tokens=6,
        autocast=False,
        progress=False,
    )
    first = R.replay(draft, greedy_store, **options)

    def refuse(*args, **kwargs):
        raise AssertionError("replay_sequence called although every question is cached")

    monkeypatch.setattr(R, "replay_sequence", refuse)
    assert R.replay(draft, greedy_store, **options) == first
