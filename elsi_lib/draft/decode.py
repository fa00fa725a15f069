"""Speculative decoding with an EAGLE-3 draft and EAGLE-2 dynamic trees: the real loop.

Batch 1. After the prefill (the prompt through the target, hooks on the draft's layers, the first
token from the target's last logits), every round:

    draft   builds its tree below the root (the last generated token, not yet seen by the target)
            from its KV cache of the accepted prefix (`runner.root_step_fn`, the replay's own code)
    target  verifies [root ; nodes] in one forward over its KV cache: each node sees the prefix, the
            root, its ancestors and itself (`DraftTree.attention_mask`), positions by depth
    accept  T = 0: the target's argmax walk down the tree; T > 0: recursive rejection over each
            node's children (`accept_sampling`); then the target's bonus token
    caches  the target's KV keeps prefix + root + accepted path, contiguous (the rest is dropped);
            the draft runs its step-1 rows over root + accepted tokens with their target features

Target features are rounded to float16, as the feature store holds them for training and replay,
so that the loop's drafts see what the replay's see.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

import torch
from transformers.cache_utils import DynamicLayer

from ..hidden.forward import decoder_layers, layer_outputs
from ..hidden.replies import eos_ids
from ..common.checks import is_integer
from .model import Eagle3Draft
from .config import FINAL_NORM, check_source
from .runner import draft_device, draft_rows, resolved_autocast, root_step_fn
from .tree import DraftTree, check_tree_args, build_trees


@dataclass
class Decoded:
    """One generation: `tokens` (the prefill's token first), `accepted` draft tokens per round
    (len(tokens) = 1 + sum(accepted + 1)), and where the time went (seconds)."""

    tokens: list[int]
    accepted: list[int] = field(default_factory=list)  # per round, after the end-of-sequence and length cuts
    accepted_full: list[int] = field(default_factory=list)  # per round, before them
    prefill_s: float = 0.0
    draft_s: float = 0.0
    verify_s: float = 0.0

    @property
    def tau(self) -> float:
        """Mean tokens per target verification, (accepted + 1) averaged over rounds."""
        return sum(a + 1 for a in self.accepted) / len(self.accepted) if self.accepted else float("nan")


def _additive(allowed, dtype):
    """bool (.., q, k) -> float mask (1, 1, q, k): 0 where allowed, the dtype's minimum elsewhere."""
    mask = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill(~allowed, torch.finfo(dtype).min)
    return mask.view(1, 1, *allowed.shape[-2:])


@torch.no_grad()
def target_forward(model, ids, source, *, cache=None, positions=None, allowed=None, round_features: bool = True):
    """One target forward over `ids` (n,) after `cache` (None: none yet). allowed (n, S + n) bool over
    [cached ; new] keys (None: causal). Returns logits (n, V) float32, the draft's features of the
    new tokens (n, m*d) float32 (float16-rounded unless `round_features` is False; `source` a layer
    set or FINAL_NORM, the normed last hidden state) and the updated cache."""
    source = check_source(source, len(decoder_layers(model)))
    decoder, lm_head = model.get_decoder(), model.get_output_embeddings()
    dtype = next(model.parameters()).dtype
    mask = None if allowed is None else _additive(allowed, dtype)
    with layer_outputs(model) as captured:
        out = decoder(
            input_ids=ids[None],
            attention_mask=mask,
            cache=cache,
            use_cache=True,
            position_ids=None if positions is None else positions[None],
        )
    final = out.last_hidden_state[0]  # (n, d) after the final norm
    features = final if source == FINAL_NORM else torch.cat([captured[l][0] for l in source], dim=-1)  # (n, m*d)
    features = features.half().float() if round_features else features.float()
    return lm_head(final).float(), features, out.cache


def keep_cache(cache, index) -> None:
    """Keep only the cache entries at `index` (k,) (ascending), in place: the accepted path becomes
    contiguous after the prefix."""
    for layer in cache.layers:
        if type(layer) is not DynamicLayer:  # a sliding-window layer also tracks what it dropped
            raise NotImplementedError(f"cannot prune a {type(layer).__name__} cache layer to the accepted path")
        if layer.keys is None or layer.values is None:  # a layer no forward has filled: nothing to keep
            continue
        layer.keys = layer.keys.index_select(-2, index)
        layer.values = layer.values.index_select(-2, index)


def children_of(tree: DraftTree) -> dict[int, list[int]]:
    """{node (-1 = the root): its children, best draft score first}."""
    out: dict[int, list[int]] = {}
    for child, parent in enumerate(tree.parents.tolist()):
        out.setdefault(parent, []).append(child)
    scores = tree.scores.tolist()
    return {p: sorted(c, key=lambda i: (-scores[i], i)) for p, c in out.items()}


def accept_greedy(logits, tree: DraftTree) -> tuple[list[int], int]:
    """T = 0. logits (n + 1, V): row 0 the root's, row i + 1 node i's. Walks from the root to the
    child that is the target's argmax while one exists. Returns (accepted node indices, bonus token)."""
    children, tokens = children_of(tree), tree.tokens.tolist()
    node = -1
    path: list[int] = []
    while True:
        y = int(logits[node + 1].argmax())
        match = [c for c in children.get(node, []) if tokens[c] == y]
        if not match:
            return path, y
        node = match[0]
        path.append(node)


def accept_sampling(logits, tree: DraftTree, temperature: float, generator) -> tuple[list[int], int]:
    """T > 0: recursive rejection over each node's children (SpecInfer; EAGLE's `evaluate_posterior`).
    The tree's candidates are the draft's deterministic top-k, so each is proposed with probability
    1: child c is accepted with probability p(c) under the current target distribution p; a rejected
    c is removed from p (p(c) = 0, renormalised) and the next child is tried; when every child is
    rejected the bonus token is drawn from what is left of p. The token emitted at each node is thus
    distributed exactly as p = softmax(logits / T): the output is the target's own sampling
    distribution. Returns (accepted node indices, bonus token)."""
    children, tokens = children_of(tree), tree.tokens.tolist()
    node = -1
    path: list[int] = []
    while True:
        p = torch.softmax(logits[node + 1].double().cpu() / temperature, dim=-1)  # (V,), on the generator's device
        for child in children.get(node, []):
            token = tokens[child]
            if float(torch.rand((), generator=generator, dtype=torch.float64)) < float(p[token]):
                break
            p[token] = 0.0
            p = p / p.sum()
        else:
            return path, int(torch.multinomial(p, 1, generator=generator))
        node = child
        path.append(node)


@torch.no_grad()
def speculative_generate(
    target,
    draft: Eagle3Draft,
    prompt_ids,
    *,
    max_new_tokens: int,
    nodes: int = 60,
    depth: int = 6,
    top_k: int = 10,
    temperature: float = 0.0,
    seed: int = 0,
    stop_at_eos: bool = True,
    autocast: bool | None = None,
    round_features: bool = True,
) -> Decoded:
    """Generate up to `max_new_tokens` after `prompt_ids` (P,) with `draft` reading its own source
    (`draft.config.source`, checked against `target` with the rest of its shape). T = 0 equals the target's greedy decoding; T > 0 samples from the
    target's distribution at that temperature (seeded). A chain of k is `nodes=k, depth=k, top_k=1`.
    With `stop_at_eos`, generation ends at the target's end-of-sequence token. `autocast` (bf16 draft
    matmuls) and `round_features` (float16 features) reproduce training and replay; both off, the
    draft runs in float32 as an engine running in float32 would; `autocast=None` takes this CPU's default
    (`runner.resolved_autocast`: bf16 only with bf16 matmul instructions). Every argument is checked
    before the prefill."""
    autocast = resolved_autocast(autocast)
    prompt_ids = check_generate_args(
        target,
        draft,
        prompt_ids,
        max_new_tokens=max_new_tokens,
        nodes=nodes,
        depth=depth,
        top_k=top_k,
        temperature=temperature,
    )
    source = draft.config.source
    device = next(target.parameters()).device  # the draft's weights are checked to live there too
    if draft_device(draft) != device:
        raise ValueError(f"the draft is on {draft_device(draft)}, the target on {device}: move both to one device")
    prompt_ids = prompt_ids.to(device)
    generator = torch.Generator().manual_seed(seed)  # sampling draws on the CPU: the same stream on any device
    eos = set(eos_ids(target)) if stop_at_eos else set()
    draft.eval()

    def pick(row):  # the prefill's token: argmax, or a sample at T > 0
        if temperature == 0:
            return int(row.argmax())
        return int(torch.multinomial(torch.softmax(row.double().cpu() / temperature, -1), 1, generator=generator))

    start = time.perf_counter()
    logits, features, cache = target_forward(target, prompt_ids, source, round_features=round_features)
    out = Decoded(tokens=[pick(logits[-1])])
    P = len(prompt_ids)  # tokens the target has cached; the root sits at position P
    hidden, kv = draft_rows(
        draft,
        features,
        torch.cat([prompt_ids[1:], torch.tensor(out.tokens, device=device)]),
        0,
        None,
        autocast=autocast,
    )  # rows 0..P-1: hidden (P, d)
    out.prefill_s = time.perf_counter() - start
    while len(out.tokens) < max_new_tokens and out.tokens[-1] not in eos:
        t0 = time.perf_counter()
        step_fn, state = root_step_fn(draft, hidden, kv, torch.tensor([P], device=device), autocast)
        tree = build_trees(step_fn, state, nodes=nodes, depth=depth, top_k=top_k, to_target=draft.to_target)[0]
        t1 = time.perf_counter()
        n = len(tree)
        ids = torch.cat([torch.tensor(out.tokens[-1:], device=device), tree.tokens])  # (n + 1,) root, then the nodes
        allowed = torch.ones(n + 1, P + n + 1, dtype=torch.bool, device=device)  # the prefix: seen by all
        allowed[0, P + 1 :] = False  # the root sees itself
        allowed[1:, P + 1 :] = tree.attention_mask()  # a node: itself and its ancestors
        positions = torch.cat([torch.tensor([P], device=device), tree.position_ids(P + 1)])  # (n + 1,)
        logits, features, cache = target_forward(
            target, ids, source, cache=cache, positions=positions, allowed=allowed, round_features=round_features
        )
        path, bonus = (
            accept_greedy(logits, tree) if temperature == 0 else accept_sampling(logits, tree, temperature, generator)
        )
        out.accepted_full.append(len(path))  # before the cuts below (what an engine's counters see)
        path, bonus = cut_path(path, bonus, tree, eos, room=max_new_tokens - len(out.tokens) - 1)
        t2 = time.perf_counter()
        rows = torch.tensor([0] + [node + 1 for node in path], device=device)  # verified rows kept: root + accepted
        keep_cache(cache, torch.cat([torch.arange(P, device=device), P + rows]))
        new = [int(tree.tokens[node]) for node in path] + [bonus]
        more, kv = draft_rows(draft, features[rows], torch.tensor(new, device=device), P, kv, autocast=autocast)
        hidden = torch.cat([hidden, more])  # (P + len(rows), d)
        out.draft_s += (t1 - t0) + (time.perf_counter() - t2)
        out.verify_s += t2 - t1
        out.accepted.append(len(path))
        out.tokens.extend(new)
        P += len(rows)
    out.tokens = cut(out.tokens, max_new_tokens, eos)
    return out


def check_generate_args(
    target, draft: Eagle3Draft, prompt_ids, *, max_new_tokens, nodes, depth, top_k, temperature
) -> torch.Tensor:
    """`speculative_generate`'s arguments, refused with the argument named; returns the prompt as
    a (P,) int64 tensor. The draft must fit the target (`DraftConfig.check_target`), and the
    target's attention must be full (a sliding-window cache cannot be pruned to the accepted path)."""
    draft.config.check_target(target)
    config = target.config
    sliding = [t for t in (getattr(config, "layer_types", None) or []) if "sliding" in str(t)]
    if sliding or (getattr(config, "use_sliding_window", False) and getattr(config, "sliding_window", None)):
        raise NotImplementedError(
            "the target has sliding-window attention layers, whose cache cannot be pruned "
            "to the accepted path; speculative_generate supports full attention only"
        )
    if not is_integer(max_new_tokens) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be an integer >= 1, got {max_new_tokens!r}")
    if (
        isinstance(temperature, bool)
        or not isinstance(temperature, (int, float))
        or not math.isfinite(temperature)
        or temperature < 0
    ):
        raise ValueError(f"temperature must be a finite number >= 0, got {temperature!r}")
    check_tree_args(nodes, depth, top_k)
    if top_k > draft.config.draft_vocab_size:
        raise ValueError(f"top_k = {top_k} exceeds the draft vocabulary ({draft.config.draft_vocab_size} tokens)")
    if isinstance(prompt_ids, torch.Tensor):
        prompt = prompt_ids.detach().cpu()
    else:
        array = np.asarray(prompt_ids)
        if array.dtype == object or not (np.issubdtype(array.dtype, np.integer) or array.size == 0):
            raise TypeError(f"prompt_ids must be integer token ids, got dtype {array.dtype}")
        prompt = torch.from_numpy(array.astype(np.int64)) if array.size else torch.zeros(0, dtype=torch.long)
    if prompt.dtype in (torch.bool,) or prompt.is_floating_point() or prompt.is_complex():
        raise TypeError(f"prompt_ids must be integer token ids, got {prompt.dtype}")
    if prompt.dim() != 1:
        raise ValueError(f"prompt_ids must be one sequence (P,) of token ids, got shape {tuple(prompt.shape)}")
    if len(prompt) == 0:
        raise ValueError("prompt_ids is empty: the prefill needs at least one token")
    vocab = draft.config.vocab_size
    if int(prompt.min()) < 0 or int(prompt.max()) >= vocab:
        raise ValueError(
            f"prompt_ids must lie in 0..{vocab - 1} (the target's vocabulary), got "
            f"{int(prompt.min())}..{int(prompt.max())}"
        )
    return prompt.long()


def cut_path(path: list[int], bonus: int, tree: DraftTree, eos, room: int) -> tuple[list[int], int]:
    """A round's accepted path and bonus token after the generation's two limits: an accepted
    end-of-sequence token ends the generation (it becomes the round's last token), and at most
    `room` accepted nodes fit before `max_new_tokens` (the next node's token, the target's own
    choice after them, becomes the bonus)."""
    ends = [j for j, node in enumerate(path) if int(tree.tokens[node]) in eos]
    if ends:
        path, bonus = path[: ends[0]], int(tree.tokens[path[ends[0]]])
    if len(path) > room:
        path, bonus = path[:room], int(tree.tokens[path[room]])
    return path, bonus


def cut(tokens: list[int], max_new_tokens: int, eos) -> list[int]:
    """At most `max_new_tokens`, ending at the first end-of-sequence token (kept)."""
    tokens = tokens[:max_new_tokens]
    for i, t in enumerate(tokens):
        if t in eos:
            return tokens[: i + 1]
    return tokens
