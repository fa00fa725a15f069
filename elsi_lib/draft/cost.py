"""What speculative decoding buys in wall clock: the standard cost model, from measured costs and
measured acceptance (Leviathan et al., arXiv 2211.17192, Sec. 3.3; EAGLE's chains and trees alike).

A round drafts, verifies [root ; nodes] in one target forward and keeps the accepted path plus the
target's bonus token. With conditional per-step acceptance rates a_1..a_k (a_i: the chance that the
i-th draft token is accepted once the first i - 1 were), a chain of k yields

    E[tokens per round] = 1 + sum_{i=1..k} prod_{j<=i} a_j                    (at most k + 1)

and costs  round_s = draft_s + verify_s(k + 1 tokens) + other_s  (acceptance, cache pruning, the
draft's update rows). Against plain decoding at plain_s per token, the decode phase runs

    speed-up = E[tokens per round] * plain_s / round_s,

which breaks even at E[tokens per round] = round_s / plain_s and reaches its ceiling, perfect
acceptance, at k + 1 tokens per round. Pure functions of numbers: the benchmarks measure the
numbers (bench/bench_cost.py, engines/cost_vllm.py).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import numpy as np


def _real(name: str, value, lo: float = -math.inf, hi: float = math.inf, *, above: bool = False) -> float:
    """`value` as a float: a finite real number (never text or a bool) in [lo, hi] (lo excluded when
    `above`); ValueError naming `name` otherwise."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)) and math.isfinite(value)
    if not ok or not (lo < value if above else lo <= value) or not value <= hi:
        low = "(" if above else "["
        raise ValueError(f"{name} must be a finite number in {low}{lo:g}, {hi:g}], got {value!r}")
    return float(value)


def _count(name: str, value, lo: int = 0) -> int:
    """`value` as a whole number >= lo (an int, or a float with no fraction; never text or a bool)."""
    if not (isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)) and math.isfinite(value)):
        raise ValueError(f"{name} must be a whole number >= {lo}, got {value!r}")
    whole = float(value)
    if not whole.is_integer() or whole < lo:
        raise ValueError(f"{name} must be a whole number >= {lo}, got {value!r}")
    return int(whole)


def _check_rates(rates: Sequence[float]) -> list[float]:
    if isinstance(rates, (str, bytes)) or not isinstance(rates, Sequence | np.ndarray):  # a set loses the steps' order
        raise ValueError(f"acceptance rates must be a sequence of numbers in [0, 1] (a_1..a_k in order), got {rates!r}")
    return [_real(f"acceptance rate a_{i}", a, 0.0, 1.0) for i, a in enumerate(rates, 1)]


def step_acceptance(accepted: Sequence[int], k: int) -> list[float]:
    """Conditional per-step acceptance rates a_1..a_k from a chain's rounds: `accepted` holds each
    round's accepted draft tokens (0..k, before any end-of-sequence or length cut). a_i is the
    share of rounds that accepted at least i among those that accepted at least i - 1; a step no
    round reached gets a_i = 0 (nothing is known to be accepted there)."""
    k = _count("k", k, 1)
    if isinstance(accepted, (str, bytes, dict)) or not isinstance(accepted, Sequence | np.ndarray):
        raise ValueError(f"accepted counts must be a sequence of whole numbers, one per round, got {accepted!r}")
    counts = [_count(f"accepted count of round {i}", c) for i, c in enumerate(accepted, 1)]
    if not counts:
        raise ValueError("no rounds: acceptance needs at least one round")
    if min(counts) < 0 or max(counts) > k:
        raise ValueError(f"accepted counts must lie in 0..{k} for a chain of {k}, got {min(counts)}..{max(counts)}")
    reached = [sum(c >= i for c in counts) for i in range(k + 1)]  # rounds with >= i accepted
    return [reached[i] / reached[i - 1] if reached[i - 1] else 0.0 for i in range(1, k + 1)]


def tokens_per_round(rates: Sequence[float]) -> float:
    """E[tokens per round] of a chain with conditional acceptance `rates` (a_1..a_k): the bonus
    token plus the expected accepted prefix, 1 + sum_i prod_{j<=i} a_j."""
    total, alive = 1.0, 1.0
    for a in _check_rates(rates):
        alive *= a
        total += alive
    return total


def round_seconds(draft_s: float, verify_s: float, other_s: float = 0.0) -> float:
    """Seconds of one round: the draft's steps, the target's verification forward, the rest."""
    parts = {"draft_s": draft_s, "verify_s": verify_s, "other_s": other_s}
    total = sum(_real(f"{name} (seconds)", value, 0.0) for name, value in parts.items())
    if total <= 0:
        raise ValueError("a round must take some time: draft_s + verify_s + other_s is 0")
    return total


def speedup(tokens: float, round_s: float, plain_s: float) -> float:
    """Decode-phase speed-up over plain decoding: `tokens` per round of `round_s` seconds against
    one token per `plain_s` seconds."""
    tokens = _real("tokens per round", tokens, 1.0)
    round_s, plain_s = _real("round_s", round_s, 0.0, above=True), _real("plain_s", plain_s, 0.0, above=True)
    return tokens * plain_s / round_s


def break_even(round_s: float, plain_s: float) -> float:
    """Tokens per round at which a round of `round_s` seconds pays exactly what plain decoding does."""
    return _real("round_s", round_s, 0.0, above=True) / _real("plain_s", plain_s, 0.0, above=True)


def generation_seconds(generated: int, prompts: int, tokens: float, round_s: float, prefill_s: float) -> float:
    """Seconds to generate `generated` tokens over `prompts` generations: each generation's prefill
    (which yields its first token) then rounds of `tokens` tokens each."""
    prompts = _count("prompts", prompts, 1)
    generated = _count("generated tokens", generated, prompts)  # each generation yields one at least
    tokens = _real("tokens per round", tokens, 1.0)
    round_s, prefill_s = _real("round_s", round_s, 0.0, above=True), _real("prefill_s", prefill_s, 0.0)
    return prompts * prefill_s + (generated - prompts) / tokens * round_s
