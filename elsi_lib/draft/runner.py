"""The draft's own passes, shared by replay (`replay`) and the real loop (`decode`); training (`train`)
takes its autocast and device from here too.

- `draft_rows`: the causal step-1 pass. Row j pairs the target features of token j with the
  embedding of token j+1 (EAGLE-3's alignment); rows run after the draft's cached rows, causal among
  themselves, and return their hidden states and the extended cache. Replay runs it once over a
  whole teacher-forced sequence (`prefix_pass`); the loop runs it on the prompt, then on each
  round's accepted tokens.
- `root_step_fn`: the tree expansion's step function for a batch of roots, each seeing the prefix
  rows before it (its KV cache) and its own tree nodes (`Frontier.mask`).
- `draft_autocast`, `ran_on`: bf16 autocast on the device the draft's weights live on, and what a
  cache key adds so that it records where the computation ran.
"""

from __future__ import annotations

import torch

from ..common import hardware
from .model import Eagle3Draft


def draft_device(draft: Eagle3Draft) -> torch.device:
    return draft.fc.weight.device


def draft_autocast(draft: Eagle3Draft, enabled: bool):
    """bf16 autocast of the draft's matmuls on its own device (fp32 master weights)."""
    return torch.autocast(draft_device(draft).type, dtype=torch.bfloat16, enabled=enabled)


def resolved_autocast(autocast: bool | None) -> bool:
    """An autocast argument of replay or the loop: None takes this CPU's default
    (`hardware.bf16_autocast_default`: bf16 only where the CPU has bf16 matmul instructions)."""
    return hardware.bf16_autocast_default() if autocast is None else bool(autocast)


def ran_on(draft: Eagle3Draft) -> dict:
    """What a cache key adds about the device: nothing on the CPU (every key so far was computed
    there), the device type elsewhere (bf16 kernels differ between devices)."""
    kind = draft_device(draft).type
    return {} if kind == "cpu" else {"device": kind}


def draft_rows(draft: Eagle3Draft, features, next_tokens, first: int, kv, *, autocast: bool):
    """The draft's step-1 rows first..first+k-1 after its cached rows `kv` ((keys, values)
    (1, KV, first, hd) or None): row j pairs the target features of token j (k, m*d) with the
    embedding of token j+1 (`next_tokens` (k,)). Returns hidden (k, d) and the extended cache."""
    k, device = len(next_tokens), draft_device(draft)
    allowed = torch.ones(k, first + k, dtype=torch.bool, device=device)
    allowed[:, first:] = torch.ones(k, k, dtype=torch.bool, device=device).tril()  # causal among the new rows
    with draft_autocast(draft, autocast):
        _, hidden, new = draft.step(
            next_tokens[None],
            features=features[None],
            positions=torch.arange(first, first + k, device=device),
            allowed=allowed[None, None],
            past=kv,
            logits=False,
        )
    kv = new if kv is None else tuple(torch.cat([a, b], 2) for a, b in zip(kv, new))
    return hidden[0], kv


def prefix_pass(draft: Eagle3Draft, ids, features, *, autocast: bool):
    """`draft_rows` over a whole sequence ids (n,), features (n, m*d): rows 0..n-2. Returns hidden
    (n-1, d) and the keys/values (1, KV, n-1, hd), the draft's cache for every prefix."""
    n = len(ids)
    return draft_rows(draft, features[: n - 1], ids[1:n], 0, None, autocast=autocast)


def log_probs(draft: Eagle3Draft, hidden):
    """The draft's next-token log-probs in float32 (lm_head outside autocast: bf16 logits tie often,
    and ties would decide the tree)."""
    return torch.log_softmax(draft.lm_head(draft.norm(hidden.float())), dim=-1)


def root_step_fn(draft: Eagle3Draft, hidden, kv, roots, autocast: bool):
    """(step_fn, root_state) for `build_tree_sizes` over all `roots` (R,) of one sequence at once:
    root r's first step reads the prefix row r-1's output; a depth-t node runs at position r-1+t
    and sees rows <= r-1 and its own ancestors."""
    R, P = len(roots), kv[0].shape[2]
    roots = roots.to(hidden.device)
    prefix_allowed = torch.arange(P, device=hidden.device)[None, :] <= (roots - 1)[:, None]  # (R, P): rows <= r-1
    prefix = tuple(x.expand(R, -1, -1, -1) for x in kv)  # (R, KV, P, hd)

    def step_fn(state, frontier):
        if frontier is None:
            last = hidden[roots - 1]  # (R, d): the root row's output
            return log_probs(draft, last)[:, None], {"hidden": last[:, None], "kv": None}
        k = frontier.draft_ids.shape[1]
        parent_hidden = state["hidden"].gather(1, frontier.rows[..., None].expand(-1, -1, hidden.shape[-1]))
        tokens = draft.to_target(frontier.draft_ids)  # (R, k)
        positions = (roots - 1)[:, None] + frontier.depth  # (R, 1): depth-t nodes run at r-1+t
        nodes_kv = state["kv"]
        past = prefix if nodes_kv is None else tuple(torch.cat([p, n], 2) for p, n in zip(prefix, nodes_kv))
        allowed = torch.cat([prefix_allowed[:, None, :].expand(R, k, P), frontier.mask], dim=2)[:, None]
        with draft_autocast(draft, autocast):
            _, out, new_kv = draft.step(
                tokens, parent_hidden, positions=positions.expand(R, k), allowed=allowed, past=past, logits=False
            )
        nodes_kv = new_kv if nodes_kv is None else tuple(torch.cat([a, b], 2) for a, b in zip(nodes_kv, new_kv))
        return log_probs(draft, out), {"hidden": out, "kv": nodes_kv}

    return step_fn, None
