"""Wall clock: the cost model's benchmarks (`bench/bench_cost.py` for elsi's loop, `engines/cost_vllm.py`
for vLLM) read back from `bench/results/cost_elsi_*.json`, `cost_vllm_*.json`, and what they show: each
run's finding, the model's accuracy over the runs, each question set's speed-ups (median, range, best),
the levers and the target's dtype (`speed_plots` draws them, `speed_page` writes the docs page).
"""

from __future__ import annotations

import datetime
import json
import re
import math
from pathlib import Path

import numpy as np

from ...common.checks import unique_keys

from ...common.cachefiles import REPO_ROOT
from ...draft.evidence import family_of
from ...draft import cost
from ...draft.corpus import ONE_PER_COLUMN

BENCH = REPO_ROOT / "bench" / "results"
TARGET = 1.3  # the speed-up over plain decoding a draft is asked to pay in vLLM
TOLERANCE = 0.1  # the cost model is asked to predict each measured speed-up within 10%


def _number(value) -> bool:
    """A finite real number (NaN, infinities, text and bools are none)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


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


def _positive(value) -> bool:
    return _number(value) and value > 0


def _no_constant(name: str):
    raise ValueError(f"{name} is no measurement")


def read_json(path: Path):
    """A benchmark file's JSON (one value a key, no NaN or infinity), or ValueError naming the file."""
    try:
        return json.loads(Path(path).read_text(), object_pairs_hook=unique_keys, parse_constant=_no_constant)
    except (OSError, ValueError, RecursionError) as err:
        raise ValueError(f"{path}: not readable JSON ({err})") from None


TIMINGS = ("target forward ms by tokens", "draft side ms by k", "draft ms by shape")  # {size: ms} settings


def check_timings(settings: dict, path: Path) -> None:
    """Each {size: ms} table of a record's settings: sizes named as the benchmarks name them (a count, or
    a shape "KxDxT"), each time a positive number (a ratio of two would otherwise divide by zero), the
    draft's side of a round (derived by a difference) a finite one."""
    for field in TIMINGS:
        if field not in settings:
            continue
        table = settings[field]
        if not isinstance(table, dict) or not table:
            raise ValueError(f"{path}: settings' {field} = {table!r}, not a table of sizes and times")
        derived = field == "draft side ms by k"  # a round less the target's forward: noise can take it below 0
        sizes = r"\d+x\d+x\d+" if field == "draft ms by shape" else r"[1-9]\d*"  # a shape KxDxT, else a count
        for size, ms in table.items():
            if not re.fullmatch(sizes, str(size)) or not (_number(ms) if derived else _positive(ms)):
                kind = "a time" if derived else "a positive time"
                what = "a shape KxDxT" if field == "draft ms by shape" else "a count"
                raise ValueError(f"{path}: settings' {field}[{size!r}] = {ms!r}: {what} and {kind} expected")


def check_machine(machine, path: Path) -> None:
    """A record's machine: its CPU and an ISO date, as text."""
    for field in ("cpu", "date"):
        value = machine.get(field) if isinstance(machine, dict) else None
        if not (isinstance(value, str) and value):
            raise ValueError(f"{path}: machine's {field} = {value!r}, not text")
    try:
        datetime.datetime.fromisoformat(machine["date"])
    except ValueError:
        raise ValueError(f"{path}: machine's date {machine['date']!r} is not an ISO date") from None
    cores, load = machine.get("cores", 1), machine.get("load_1_5_15")
    if isinstance(cores, bool) or not isinstance(cores, int) or cores < 1:
        raise ValueError(f"{path}: machine's cores = {cores!r}, not a count")
    if load is not None and not (
        isinstance(load, list) and len(load) == 3 and all(_number(x) and x >= 0 for x in load)
    ):
        raise ValueError(f"{path}: machine's load_1_5_15 = {load!r}, not three load averages")


def _check_result(result: dict, path: Path) -> None:
    """A cost benchmark's file, checked before any page or line reads it, naming the file, the row and the
    field: a machine and rows; per-step acceptance rates, shares in [0, 1] (a rate above 1 would predict
    more tokens than the chain allows); times positive; each chain's or tree's tau a number between 1 and
    k + 1 (nodes + 1); one row per chain length; speed-ups positive and a measured one not beyond its
    perfect-acceptance ceiling by more than the model's tolerance."""
    if not isinstance(result, dict) or "rows" not in result or "settings" not in result:
        raise ValueError(f"{path}: not a cost benchmark (no 'rows' and 'settings')")
    if not isinstance(result.get("machine"), dict) or not result["rows"]:
        raise ValueError(f"{path}: no machine or no rows: not a finished cost benchmark")
    check_machine(result["machine"], path)
    if not isinstance(result["settings"], dict) or not isinstance(result["rows"], list):
        raise ValueError(f"{path}: settings must be a mapping and rows a list of rows")
    if result.get("benchmark") != Path(path).stem:
        raise ValueError(f"{path}: benchmark {result.get('benchmark')!r}, not its file's name {Path(path).stem!r}")
    s = result["settings"]
    for field in ("engine", "plain tok/s", "per-step acceptance", "questions", "generated", "plain s", "prefill ms"):
        if field not in s:
            raise ValueError(f"{path}: settings have no {field!r}")
    _check_names(s, path)
    for field, lo in (("questions", 1), ("generated", s["questions"] if isinstance(s["questions"], int) else 1)):
        if not (isinstance(s[field], int) and not isinstance(s[field], bool) and s[field] >= lo):
            raise ValueError(
                f"{path}: settings' {field} = {s[field]!r}, not a count >= {lo} (a question yields a token)"
            )
    if _positive(s["plain s"]) and _positive(s["plain tok/s"]):
        rate = s["generated"] / s["plain s"]
        if abs(s["plain tok/s"] - rate) > 0.01 * rate + 0.01:
            raise ValueError(
                f"{path}: settings' plain tok/s {s['plain tok/s']} is not generated / plain s = {rate:.2f}"
            )
    if "engines per chain" in s and not _count(s["engines per chain"]):
        raise ValueError(f"{path}: settings' engines per chain = {s['engines per chain']!r}, not a count >= 1")
    if "repeat" in s and not _count(s["repeat"]):
        raise ValueError(f"{path}: settings' repeat = {s['repeat']!r}, not a count >= 1")
    if any(isinstance(r, dict) and "spread" in r for r in result["rows"]) and "repeat" not in s:
        raise ValueError(f"{path}: rows give a spread over repeats, settings' repeat = {s.get('repeat')!r}")
    rates = result["settings"]["per-step acceptance"]
    if not isinstance(rates, list) or not rates:
        raise ValueError(f"{path}: settings' per-step acceptance {rates!r} is not a list of rates")
    for i, a in enumerate(rates):
        if not (_number(a) and not isinstance(a, bool) and 0 <= a <= 1):
            raise ValueError(f"{path}: settings' per-step acceptance a_{i + 1} = {a!r}, not a share in [0, 1]")
    chains = [
        r.get("k", r.get("k or nodes"))
        for r in result["rows"]
        if isinstance(r, dict) and r.get("shape", "chain") == "chain"
    ]
    longest = max((k for k in chains if _count(k)), default=0)
    if len(rates) < longest:  # a chain's predicted tau reads one rate a step
        raise ValueError(f"{path}: settings' per-step acceptance has {len(rates)} rates, chains run to k = {longest}")
    check_timings(result["settings"], path)
    for field in ("plain s", "prefill ms", "plain tok/s", "plain decode step ms"):
        if field in result["settings"] and not _positive(result["settings"][field]):
            raise ValueError(f"{path}: settings' {field} = {result['settings'][field]!r}, not a positive time or rate")
    if "with F.linear" in s:  # the same run's verification forward computed the usual way (the lever's other side)
        usual = s["with F.linear"]
        if not (isinstance(usual, dict) and _positive(usual.get("plain decode step ms"))):
            raise ValueError(
                f"{path}: settings' with F.linear = {usual!r}, not timings with a positive plain decode step ms"
            )
        check_timings(usual, Path(f"{path} (with F.linear)"))
        for table in (s, usual):
            if "2" not in table.get("target forward ms by tokens", {}) or not _positive(
                table.get("plain decode step ms")
            ):
                raise ValueError(
                    f"{path}: a weight-first run times the target's forward over 2 tokens and a plain step, both ways"
                )
    vllm = s["engine"].startswith("vLLM ")
    seen: dict = {}
    for i, row in enumerate(result["rows"]):
        if not isinstance(row, dict):
            raise ValueError(f"{path}: row {i} is not a row (a mapping of columns)")
        if vllm and ("k" not in row or "shape" in row) or not vllm and row.get("shape") not in ("chain", "tree"):
            want = "a chain length k (vLLM runs chains)" if vllm else "a shape ('chain' or 'tree') with its k or nodes"
            raise ValueError(f"{path}: row {i}: {want} expected; every row is read, none skipped")
        k = row["k"] if vllm else row.get("k or nodes")
        if not _count(k):
            raise ValueError(f"{path}: row {i}: k {k!r} is not a chain length or tree size >= 1")
        shape = row.get("shape", "chain")
        if shape == "chain" and "depth" in row and row["depth"] != k:  # a chain of k is k deep
            raise ValueError(f"{path}: row {i}: a chain of {k} with depth {row['depth']!r}")
        name = "tau vLLM" if vllm else "tau measured"
        if not _number(row.get(name)) and shape == "chain":
            raise ValueError(f"{path}: row {i}: chain k = {k} has no {name}: tau {row.get(name)!r} is not a number")
        if (shape, k) in seen:
            raise ValueError(f"{path}: row {i}: {shape} k = {k} is also row {seen[shape, k]}")
        seen[shape, k] = i
        tau = row.get("tau vLLM", row.get("tau measured"))
        if (
            tau is not None
            and tau != ""
            and not (_number(tau) and not isinstance(tau, bool) and 1 <= tau <= k + 1 + 1e-9)
        ):
            raise ValueError(f"{path}: row {i} ({shape} {k}): tau {tau!r} is not a number in [1, {k + 1}]")
        for field in ("round ms measured", "round ms predicted"):
            if _number(row.get(field)) and not _positive(row[field]):
                raise ValueError(f"{path}: row {i}: {field} {row[field]!r} is not a positive time")
        for field in ("speed-up measured", "speed-up predicted", "ceiling", "break-even tau"):
            if field in row and not _positive(row[field]):
                raise ValueError(f"{path}: row {i}: {field} {row[field]!r} is not a positive number")
        if shape == "chain":
            for field in ("speed-up measured", "speed-up predicted", "ceiling", "break-even tau", "round ms predicted"):
                if not _positive(row.get(field)):
                    raise ValueError(
                        f"{path}: row {i}: chain k = {k} has {field} {row.get(field)!r}, not a positive number"
                    )
        if not isinstance(row.get("lossless"), bool):
            raise ValueError(f"{path}: row {i}: lossless {row.get('lossless')!r} is not true or false")
        if "error" in row and not (row["error"] == "calibration" or _number(row["error"])):
            raise ValueError(f"{path}: row {i}: error {row['error']!r} is neither a number nor 'calibration'")
        if "spread" in row and row["spread"] != "" and not (_number(row["spread"]) and row["spread"] >= 0):
            raise ValueError(f"{path}: row {i}: spread {row['spread']!r} is no share >= 0 (a range over a median)")
        measured, predicted = row.get("speed-up measured"), row.get("speed-up predicted")
        if _number(row.get("error")) and _number(measured) and _number(predicted):
            if abs(row["error"] - (predicted - measured) / measured) > 0.01:
                raise ValueError(
                    f"{path}: row {i}: error {row['error']} is not (predicted - measured) / measured "
                    f"= {(predicted - measured) / measured:.4f}"
                )
        if _number(predicted) and _number(row.get("ceiling")) and predicted > row["ceiling"] + 1e-6:
            raise ValueError(f"{path}: row {i}: speed-up predicted {predicted} is beyond its ceiling {row['ceiling']}")
        if _number(row.get("speed-up measured")) and _number(row.get("ceiling")):
            if row["speed-up measured"] > row["ceiling"] * (1 + TOLERANCE):
                raise ValueError(
                    f"{path}: row {i}: speed-up measured {row['speed-up measured']} is beyond the ceiling "
                    f"{row['ceiling']} (perfect acceptance) by more than {100 * TOLERANCE:.0f}%"
                )
        _check_clock(row, s, k, path, i)


CLOCK_TOLERANCE = 0.05  # a round's measured cost leaves out its bookkeeping: 3% at most in the committed runs


def _check_clock(row: dict, s: dict, k, path: Path, i: int) -> None:
    """A chain's or tree's measured speed-up is what its own clock gives: plain decoding's seconds over the
    run's (vLLM keeps each run's seconds: within rounding), or over the prefill and its rounds at their
    measured cost (within CLOCK_TOLERANCE)."""
    run = s.get("runs", {}).get(str(k)) if isinstance(s.get("runs"), dict) else None
    if isinstance(run, dict):  # vLLM keeps each chain's run: its row says what the run's counts say
        if "lossless" in run and run["lossless"] is not row.get("lossless"):
            raise ValueError(f"{path}: row {i}: lossless {row.get('lossless')}, but its run's is {run['lossless']!r}")
        if _positive(run.get("drafts")) and _number(run.get("accepted")) and _number(row.get("tau vLLM")):
            tau = 1 + run["accepted"] / run["drafts"]
            if abs(row["tau vLLM"] - tau) > 0.0005 + 1e-9:
                raise ValueError(
                    f"{path}: row {i}: tau vLLM {row['tau vLLM']}, but its run's 1 + accepted / drafts = {tau:.3f}"
                )
    measured = row.get("speed-up measured")
    if not _positive(measured):
        return
    if isinstance(run, dict) and _positive(run.get("seconds")):
        if abs(measured - s["plain s"] / run["seconds"]) > 0.0005 + 0.001 * measured:
            raise ValueError(
                f"{path}: row {i}: speed-up measured {measured} is not plain s / the run's seconds "
                f"= {s['plain s'] / run['seconds']:.3f}"
            )
    rounds = row.get("rounds measured", run.get("drafts") if isinstance(run, dict) else None)
    if _positive(rounds) and _positive(row.get("round ms measured")) and _positive(s.get("prefill ms")):
        implied = s["plain s"] / ((s["prefill ms"] + rounds * row["round ms measured"]) / 1000)
        if abs(measured / implied - 1) > CLOCK_TOLERANCE:
            raise ValueError(
                f"{path}: row {i}: speed-up measured {measured}, but plain s over the prefill and its {rounds:g} "
                f"rounds of {row['round ms measured']} ms gives {implied:.3f}"
            )


def _count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


DTYPES = ("float32", "bfloat16")


def _check_names(s: dict, path: Path) -> None:
    """The settings that sort a run onto a page line: its engine ("vLLM <version>" or elsi's loop), its
    target (family or model) and draft as text, the target's dtype one of DTYPES, a question set named."""
    engine = s["engine"]
    if not (
        isinstance(engine, str) and (engine.startswith("vLLM ") or engine == "elsi" or engine.startswith("elsi, "))
    ):
        raise ValueError(f"{path}: settings' engine = {engine!r}: 'vLLM <version>' or elsi's loop ('elsi...') expected")
    for field in ("draft", *(["family"] if engine.startswith("vLLM ") else [])):
        if not (isinstance(s.get(field), str) and s[field].strip()):
            raise ValueError(f"{path}: settings' {field} = {s.get(field)!r}, not a name")
    if not any(isinstance(s.get(f), str) and s[f].strip() for f in ("family", "model")):
        raise ValueError(f"{path}: settings name no target (family or model)")
    for field in ("family", "model"):  # the lines sort runs by this name: a bundled family one spelling
        named = family_of(s[field]) if isinstance(s.get(field), str) else None
        if named is not None and named != s[field]:
            raise ValueError(f"{path}: settings' {field} = {s[field]!r}: the bundled family is named {named!r}")
    if s.get("dtype", "float32") not in DTYPES:
        raise ValueError(f"{path}: settings' dtype = {s.get('dtype')!r}, not one of {DTYPES}")
    if "question set" in s and not (isinstance(s["question set"], str) and s["question set"].strip()):
        raise ValueError(f"{path}: settings' question set = {s['question set']!r}, not a name")


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
