"""A cost benchmark's record (`bench/bench_cost.py`, `engines/cost_vllm.py`), read and checked before any
page or line reads it: its machine, its settings' names and timings, every row's shape, range and
consistency with the others and with its own clock; ValueError naming the file, the row and the field.
"""

from __future__ import annotations

import datetime
import json
import math
import re
from pathlib import Path

from ...common.checks import unique_keys
from ...draft.evidence import family_of

TOLERANCE = 0.1  # the cost model is asked to predict each measured speed-up within 10%


def _number(value) -> bool:
    """A finite real number (NaN, infinities, text and bools are none)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


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
