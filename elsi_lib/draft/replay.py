"""Tau by replay: the accepted lengths of every round of speculative decoding, without the target.

At T = 0 the target's continuation of a question is fixed: its greedy tokens. A round of
speculative decoding starts at a root (the last accepted token, known to the target), the draft
builds its EAGLE-2 tree from the target features of the accepted prefix, and the target accepts the
deepest root path that spells its own continuation, plus one bonus token. So every round is
determined by its root position, and the draft's tree at root r depends only on the prefix:

- one causal step-1 draft pass over the whole teacher-forced sequence gives, at row r-1, the root's
  next-token distribution, and its keys/values are the draft's KV cache for every possible prefix
  (EAGLE-3 re-runs the draft on accepted tokens with the target's features, which is this pass);
- the tree forwards of all roots of a question run as one batch, each root masking the prefix to
  rows <= r-1 (`Frontier.mask` gives the tree part);
- the replay then walks r -> r + accepted + 1 from the first generated token (the prefill's, not a
  round) to the end of the continuation, for every tree size of one shared expansion.

The continuation is the stored sequence after the prompt, cut at the first token that is not the
target's own argmax (a reply's re-tokenisation can differ from the generated ids) and at
`max_tokens`, so that replay scores exactly the target's greedy output.

At T > 0 the same replay runs on a continuation sampled from the target (seeded,
`replies.GumbelSampler`), cut where the stored sequence parts from the sampled ids. This is exact
in distribution: the tree's candidates are fixed by the draft (its top-k), and recursive rejection
at a node (`decode.accept_sampling`) emits a token distributed as the target's and accepts the child
equal to it when there is one; so a round accepts exactly the deepest tree path that spells a target
sample, and the rounds of the real loop and of this replay have the same joint law.
"""

from __future__ import annotations

import json

import numpy as np
import torch

from ..common.cachefiles import per_question_cache, save_per_question, sha256_text
from ..common.progress import progress_bar
from .model import Eagle3Draft
from .runner import prefix_pass, ran_on, resolved_autocast, root_step_fn
from .tree import accepted_length, build_tree_sizes


FORMAT = 1  # bump on any change to replay (or the trees) that changes its result: old results are then not reused


def continuation_end(ids, argmax, start: int, max_tokens: int, sampled=None) -> int:
    """End (exclusive) of the continuation x[start:end] the target produced, at most `max_tokens`
    tokens. ids, argmax (T,). Greedy (`sampled` None): x[j] == argmax[j-1] for start <= j < end.
    Sampled: x[start:end] equals the sampled ids' start (the reply's re-tokenisation may part)."""
    end = start
    while (
        end < len(ids)
        and end - start < max_tokens
        and (
            int(ids[end]) == int(argmax[end - 1])
            if sampled is None
            else end - start < len(sampled) and int(ids[end]) == int(sampled[end - start])
        )
    ):
        end += 1
    return end


@torch.no_grad()
def replay_sequence(
    draft: Eagle3Draft,
    sequence: dict,
    *,
    tree_nodes=(30, 60),
    depth: int = 6,
    top_k: int = 10,
    max_tokens: int = 128,
    autocast: bool = True,
    sampled=None,
) -> dict[int, list[int]]:
    """Accepted lengths of every round of one question, per tree size: {nodes: [a_1, a_2, ...]}
    (tau = mean(a + 1)). `sequence`: a `FeatureStore.sequence` with the draft's own features
    (`store.sequence(i, draft.config.source)`; their width is checked by the draft); `sampled`:
    the target's sampled reply ids when the continuation is a sample (T > 0), None when greedy."""
    ids, argmax, start = sequence["ids"], sequence["argmax"], sequence["start"]
    end = continuation_end(ids, argmax, start, max_tokens, sampled)
    if end - start < 2:  # the prefill's token alone: no round
        return {n: [] for n in tree_nodes}
    hidden, kv = prefix_pass(draft, ids[:end], sequence["features"][:end], autocast=autocast)
    roots = torch.arange(start, end - 1)  # every root that leaves a token to verify
    step_fn, state = root_step_fn(draft, hidden, kv, roots, autocast)
    trees = build_tree_sizes(step_fn, state, tree_nodes=tree_nodes, depth=depth, top_k=top_k, to_target=draft.to_target)
    lengths = {}
    for nodes, per_root in trees.items():
        r, out = start, []
        while r < end - 1:
            remaining = end - 1 - r  # tokens after the root
            a = min(accepted_length(per_root[r - start], ids[r + 1 : end]), remaining - 1)
            out.append(a)
            r += a + 1
        lengths[nodes] = out
    return lengths


def replay(
    draft: Eagle3Draft,
    store,
    *,
    key: dict,
    tree_nodes=(30, 60),
    depth: int = 6,
    top_k: int = 10,
    max_tokens: int = 128,
    autocast: bool | None = None,
    progress: bool = True,
    desc: str = "replay",
    sampled: list | None = None,
) -> list[dict]:
    """`replay_sequence` for every question of `store`, each read at the draft's own source
    (`draft.config.source`), cached per question and resumable. `key` identifies the draft (its checkpoint key and training state); the settings are added. `sampled`:
    per question, the sampled reply ids of a T > 0 continuation (None: greedy). `autocast`: bf16 draft
    matmuls (None: this CPU's default, `runner.resolved_autocast`; the value in effect is in the key)."""
    autocast = resolved_autocast(autocast)
    if sampled is not None and len(sampled) != len(store):
        raise ValueError(f"{len(sampled)} sampled replies for {len(store)} questions")
    full = {
        **key,
        "format": FORMAT,
        "tree_nodes": sorted(tree_nodes),
        "depth": depth,
        "top_k": top_k,
        "max_tokens": max_tokens,
        "autocast": autocast,
        **ran_on(draft),
        "source": str(draft.config.source),
        "store": str(store.folder.name),
        "n": len(store),
        **({"sampled": sha256_text(json.dumps(sampled))} if sampled is not None else {}),
    }
    full = json.loads(json.dumps(full, sort_keys=True))  # as it reads back (tuples become lists)
    path, done = per_question_cache("replay", full)
    bar = progress_bar(
        total=len(store), initial=len(done), desc=desc, unit="question", disable=not progress or len(done) == len(store)
    )
    draft.eval()
    for i in range(len(store)):
        if i in done:
            continue
        result = replay_sequence(
            draft,
            store.sequence(i, draft.config.source),
            tree_nodes=tree_nodes,
            depth=depth,
            top_k=top_k,
            max_tokens=max_tokens,
            autocast=autocast,
            sampled=None if sampled is None else sampled[i],
        )
        done[i] = {str(n): v for n, v in result.items()}
        save_per_question(path, full, done)
        bar.update(1)
    bar.close()
    return [{int(n): v for n, v in done[i].items()} for i in range(len(store))]


def question_tau(lengths: list[int]) -> float:
    """tau of one question: mean of (accepted + 1) over its rounds; NaN without rounds."""
    return float(np.mean(np.asarray(lengths) + 1)) if lengths else float("nan")
