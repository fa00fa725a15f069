"""Wall clock on an accelerator: `bench/bench_cost_device.py`'s records (a random target and draft on a
GPU, the draft in float32 and under bf16 autocast) read back from `bench/results/cost_device_*.json`, what
they show and the README's sentence on them. Nothing in the project depends on them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .cost_records import _number, _positive, check_machine, check_timings, read_json
from .speed import BENCH, unique_runs


def device_results(folder: Path = BENCH) -> list[dict]:
    """The cost benchmark's records from an accelerator (`bench/bench_cost_device.py`: a random target
    and draft), name order, each checked (`check_device`)."""
    out = []
    for path in sorted(Path(folder).glob("cost_device_*.json")):
        result = read_json(path)
        check_device(result, path)
        out.append(result)
    unique_runs(out)
    seen: dict = {}
    for r in out:  # one record a device, model and draft setting: a second would double its finding
        key = (r["settings"]["device"], r["settings"]["model"], r["settings"]["draft autocast"])
        if key in seen:
            raise ValueError(f"{seen[key]} and {r['benchmark']} are both {key}: one record each")
        seen[key] = r["benchmark"]
    devices = sorted({r["settings"]["device"] for r in out})
    if len(devices) > 1:
        raise ValueError(f"{folder}: accelerator records of {devices}: the device line speaks for one device")
    return out


def check_device(result, path: Path) -> None:
    """An accelerator record, before any line reads it, naming the file, the row and the field: its machine,
    its settings (device, model, torch as text; the draft's autocast true or false; question count and plain
    decoding's rate and step positive; its timing tables), and rows of chains and trees with a size,
    a ceiling and tau of 1 or more, and an error."""
    if not isinstance(result, dict) or not isinstance(result.get("settings"), dict) or not result.get("rows"):
        raise ValueError(f"{path}: not an accelerator cost record (settings and rows)")
    check_machine(result.get("machine"), path)
    if result.get("benchmark") != Path(path).stem:
        raise ValueError(f"{path}: benchmark {result.get('benchmark')!r}, not its file's name {Path(path).stem!r}")
    s = result["settings"]
    for field in ("device", "model", "torch"):
        if not (isinstance(s.get(field), str) and s[field]):
            raise ValueError(f"{path}: settings' {field} = {s.get(field)!r}, not text")
    if not isinstance(s.get("draft autocast"), bool):
        raise ValueError(f"{path}: settings' draft autocast = {s.get('draft autocast')!r}, not true or false")
    for field in ("questions", "plain tok/s", "plain decode step ms"):
        if not _positive(s.get(field)):
            raise ValueError(f"{path}: settings' {field} = {s.get(field)!r}, not a positive number")
    for field in ("target forward ms by tokens", "draft ms by shape"):
        if field not in s:
            raise ValueError(f"{path}: settings have no {field!r}")
    check_timings(s, path)
    if _positive(s.get("plain s")) and _positive(s.get("generated")):
        rate = s["generated"] / s["plain s"]
        if abs(s["plain tok/s"] - rate) > 0.01 * rate + 0.01:
            raise ValueError(
                f"{path}: settings' plain tok/s {s['plain tok/s']} is not generated / plain s = {rate:.2f}"
            )
    for i, row in enumerate(result["rows"]):
        if not (isinstance(row, dict) and row.get("shape") in ("chain", "tree")):
            raise ValueError(f"{path}: row {i} is not a chain's or a tree's")
        size = row.get("k or nodes")
        if not (isinstance(size, int) and not isinstance(size, bool) and size >= 1):
            raise ValueError(f"{path}: row {i}: k or nodes = {size!r}, not a size >= 1")
        for field, lo in (("ceiling", 1.0), ("tau measured", 1.0)):
            if not (_positive(row.get(field)) and row[field] >= lo):
                raise ValueError(f"{path}: row {i}: {field} = {row.get(field)!r}, not a number >= {lo:g}")
        if not _number(row.get("error")):  # every shape is predicted out of sample here: no calibration row
            raise ValueError(f"{path}: row {i}: error = {row.get('error')!r}, not a number")
        depth = row.get("depth", size)
        bound = size + 1 if row["shape"] == "chain" or not _number(depth) else depth + 1
        if row["tau measured"] > bound + 1e-9:
            raise ValueError(
                f"{path}: row {i}: tau measured {row['tau measured']} beyond the {bound} a {row['shape']} of {size} allows"
            )
    chains = [r["k or nodes"] for r in result["rows"] if r["shape"] == "chain"]
    if not chains:
        raise ValueError(f"{path}: no chain's row (the finding reads the longest chain's draft time)")
    longest = max(chains)
    if f"{longest}x{longest}x1" not in s["draft ms by shape"]:
        raise ValueError(f"{path}: settings' draft ms by shape has no {longest}x{longest}x1, the longest chain's")


def _device_terms(result: dict) -> dict:
    """One accelerator record's terms: the target's forward at its fewest and most tokens (ms), its
    longest chain k and that chain's draft ms per step, the row with the highest ceiling, the |errors|."""
    s, rows = result["settings"], result["rows"]
    forward = {int(n): ms for n, ms in s["target forward ms by tokens"].items()}
    k = max(r["k or nodes"] for r in rows if r["shape"] == "chain")
    return {
        "few": min(forward),
        "many": max(forward),
        "forward": forward,
        "k": k,
        "step": s["draft ms by shape"][f"{k}x{k}x1"] / k,
        "top": max(rows, key=lambda r: r["ceiling"]),
        "errors": sorted(abs(r["error"]) for r in rows),
    }


def _autocast_pairs(results: list[dict]) -> list[tuple]:
    """(model, k, float32 settings, bf16 settings) for each model with a record of each draft setting, k
    the float32 record's longest chain."""
    by_model: dict = {}
    for result in results:
        by_model.setdefault(result["settings"]["model"], {})[result["settings"]["draft autocast"]] = result
    return [
        (model, _device_terms(pair[False])["k"], pair[False]["settings"], pair[True]["settings"])
        for model, pair in by_model.items()
        if set(pair) == {False, True}
    ]


def device_finding(results: list[dict]) -> list[str]:
    """What the accelerator's records show, from their rows: how the target's forward grows with its
    tokens, what a draft step costs against it, the ceiling, the model's errors; and, per model, what
    the draft's bf16 autocast changed."""
    lines = []
    for result in results:
        s, rows, t = result["settings"], result["rows"], _device_terms(result)
        few, many, forward, top, errors = t["few"], t["many"], t["forward"], t["top"], t["errors"]
        lines.append(
            f"**{s['device']}, {s['model']}, draft autocast {'bf16' if s['draft autocast'] else 'off'}** "
            f"(torch {s['torch']}, {result['machine']['date'][:10]}, {s['questions']} random prompts): plain "
            f"decoding {s['plain tok/s']} tokens/s. The target's forward over {many} tokens costs "
            f"{forward[many]:.1f} ms against {forward[few]:.1f} ms over {few} ({forward[many] / forward[few]:.2f}x); "
            f"a draft step {t['step']:.1f} ms ({100 * t['step'] / s['plain decode step ms']:.0f}% of a plain "
            f"decoding step). With perfect acceptance the {top['shape']} of {top['k or nodes']} would reach "
            f"{top['ceiling']}x; "
            + (
                "the random draft is never accepted (tau 1.00). "
                if max(r["tau measured"] for r in rows) == 1.0
                else f"the random draft's tau is {min(r['tau measured'] for r in rows):.2f}-{max(r['tau measured'] for r in rows):.2f}. "
            )
            + f"The model's predicted speed-ups fall within {100 * float(np.median(errors)):.0f}% of the measured "
            f"ones at the median shape, {100 * errors[-1]:.0f}% at the worst ({len(errors)} shapes)."
        )
    for model, k, off, on in _autocast_pairs(results):
        off_ms, on_ms = (x["draft ms by shape"][f"{k}x{k}x1"] for x in (off, on))
        lines.append(
            f"bf16 autocast took the draft's chain of {k} on {model} from {off_ms:.1f} ms to {on_ms:.1f} ms "
            f"({on_ms / off_ms:.2f}x). The two runs' plain decoding, float32 in both, ran at {off['plain tok/s']} "
            f"and {on['plain tok/s']} tokens/s: a difference of that size between runs bounds what this "
            "comparison says."
        )
    return lines


def device_line(folder: Path = BENCH) -> str | None:
    """The README's sentence on the accelerator's records (`device_finding`'s terms over all of them, as
    ranges); None when there are none."""
    results = device_results(folder)
    if not results:
        return None

    def span(values, fmt):
        return f"{fmt.format(min(values))}-{fmt.format(max(values))}"

    terms = [(r["settings"], _device_terms(r)) for r in results]
    growth = [t["forward"][t["many"]] / t["forward"][t["few"]] for _, t in terms]
    step = [100 * t["step"] / s["plain decode step ms"] for s, t in terms]
    ceiling = [t["top"]["ceiling"] for _, t in terms]
    autocast = [
        on["draft ms by shape"][f"{k}x{k}x1"] / off["draft ms by shape"][f"{k}x{k}x1"]
        for _, k, off, on in _autocast_pairs(results)
    ]
    s0, t0 = terms[0]
    line = (
        f"On an {s0['device']} (`bench/bench_cost_device.py`, a random target and draft, {len(results)} runs) "
        f"the target's forward over {t0['many']} tokens cost {span(growth, '{:.2f}')}x its forward over "
        f"{t0['few']}, so with perfect acceptance the best chain or tree could reach {span(ceiling, '{:.2f}')}x "
        f"plain decoding; a draft step cost {span(step, '{:.0f}')}% of a plain decoding step"
    )
    if autocast:
        line += f", and bf16 autocast took the draft's chain to {span(autocast, '{:.2f}')}x its float32 time"
    return line + "."
