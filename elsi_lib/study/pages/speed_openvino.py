"""Wall clock in OpenVINO GenAI, the CPU engine that runs EAGLE-3 drafts as token trees: what
`engines/check_openvino.py` (bench/results/engines_openvino.json: elsi's drafts served, lossless, their
tokens per target forward against elsi's loop) and `bench/bench_openvino_rounds.py`
(openvino_rounds_<target>.json: each chain's and tree's round cost, the tokens per round a speed-up
needs, the cost model out of sample) measured, as lines for the "Wall clock" page. Every number is read
from those files; a file that lacks a field it should have is refused naming the file.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from .speed import BENCH, MIN_QUESTIONS, TOLERANCE, _positive


def _read(path: Path, fields: tuple[str, ...]) -> dict:
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ValueError(f"{path}: not readable JSON ({err})") from None
    if not isinstance(record, dict) or [f for f in ("settings", "rows", "machine") if f not in record]:
        raise ValueError(f"{path}: not a benchmark record (settings, rows, machine)")
    if not isinstance(record["rows"], list) or not isinstance(record["settings"], dict):
        raise ValueError(f"{path}: rows must be a list and settings a mapping")
    for field in ("cpu", "date"):
        if not isinstance(record["machine"].get(field) if isinstance(record["machine"], dict) else None, str):
            raise ValueError(f"{path}: the machine's {field} is missing")
    for i, row in enumerate(record["rows"]):
        if not isinstance(row, dict):
            raise ValueError(f"{path}: row {i} is not a row")
        lacking = [f for f in fields if f not in row]
        if lacking:
            raise ValueError(f"{path}: row {i} lacks {lacking}")
    return record


def _check_check(path: Path, record: dict) -> None:
    """engines_openvino: counts and versions in the settings; per draft run a tau >= 1 (and elsi's, where
    given), lossless a bool, tokens/s positive, and a speed-up only where the run was lossless."""
    s = record["settings"]
    for field in ("questions", "max_tokens"):
        if not (isinstance(s.get(field), int) and not isinstance(s.get(field), bool) and s[field] >= 1):
            raise ValueError(f"{path}: settings' {field} = {s.get(field)!r}, not a count >= 1")
    if not isinstance(s.get("openvino-genai"), str):
        raise ValueError(f"{path}: settings name no openvino-genai version")
    for i, r in enumerate(record["rows"]):
        if r["draft"] == "plain decoding":
            continue
        where = f"{path}: row {i}"
        if not (_positive(r["tau OpenVINO"]) and r["tau OpenVINO"] >= 1):
            raise ValueError(f"{where}: tau OpenVINO = {r['tau OpenVINO']!r}, not a number >= 1")
        if r["tau elsi"] != "" and not (_positive(r["tau elsi"]) and r["tau elsi"] >= 1):
            raise ValueError(f"{where}: tau elsi = {r['tau elsi']!r}, not a number >= 1")
        if not isinstance(r["lossless"], bool):
            raise ValueError(f"{where}: lossless = {r['lossless']!r}, not true or false")
        if not _positive(r["tok/s"]):
            raise ValueError(f"{where}: tok/s = {r['tok/s']!r}, not a positive rate")
        if r["lossless"] and not _positive(r["vs plain"]):
            raise ValueError(f"{where}: vs plain = {r['vs plain']!r}, not a positive speed-up")
        if not r["lossless"] and _positive(r["vs plain"]):
            raise ValueError(f"{where}: a lossy run with a speed-up ({r['vs plain']}): none is reported for one")


def _check_rounds(path: Path, record: dict) -> None:
    """openvino_rounds: positive costs and needs, errors that are percentages."""
    if not isinstance(record["settings"].get("target"), str):
        raise ValueError(f"{path}: settings name no target")
    for i, r in enumerate(record["rows"]):
        for field in [f for f in r if f in ("round ms", "round / step") or f.startswith("tau for ")]:
            if r["decoding"] == "plain" and r[field] == "":
                continue  # the plain row's empty cells (the table's columns)
            if not _positive(r[field]):
                raise ValueError(f"{path}: row {i}: {field} = {r[field]!r}, not a positive number")
    details = record.get("details") or {}
    for i, r in enumerate(details.get("out_of_sample") or []):
        try:
            value = float(str(r["error"]).rstrip("%"))
        except (KeyError, ValueError, TypeError):
            value = math.nan
        if not math.isfinite(value):
            raise ValueError(
                f"{path}: out-of-sample row {i}: error {r.get('error') if isinstance(r, dict) else r!r} is not a percentage"
            )
    for i, r in enumerate(details.get("strong_predictions") or []):
        fields = ("replay tau", "predicted speed-up (decode)", "tau for 1.3x", "questions")
        if (
            not isinstance(r, dict)
            or not all(_positive(r.get(f)) for f in fields)
            or not isinstance(r.get("draft"), str)
        ):
            raise ValueError(f"{path}: strong prediction row {i} lacks a positive {', '.join(fields)} or its draft")


def engine_check(folder: Path = BENCH) -> list[str]:
    """The engine check's finding: lossless runs, agreement with elsi's loop, the best speed-up named as
    the best, the median over the drafts' lossless runs; [] without the record."""
    path = Path(folder) / "engines_openvino.json"
    if not path.is_file():
        return []
    record = _read(path, ("draft", "decoding", "tau OpenVINO", "tau elsi", "lossless", "tok/s", "vs plain"))
    _check_check(path, record)
    s, m = record["settings"], record["machine"]
    runs = [r for r in record["rows"] if r["draft"] != "plain decoding" and not r["draft"].endswith("(control)")]
    if not runs:
        raise ValueError(f"{path}: no draft's run")
    lossless = [r for r in runs if r["lossless"] is True]
    agree = [abs(r["tau OpenVINO"] - r["tau elsi"]) for r in runs if isinstance(r["tau elsi"], (int, float))]
    speedups = sorted(r["vs plain"] for r in lossless)
    best = max(lossless, key=lambda r: r["vs plain"]) if lossless else None
    line = (
        f"**OpenVINO GenAI {s['openvino-genai']}** ({m['cpu']}, {m['date'][:10]}) served elsi's drafts on "
        f"{s['questions']} SpecBench questions, {s['max_tokens']} tokens each: {len(lossless)} of {len(runs)} runs "
        "(chains and trees) gave plain decoding's tokens exactly"
    )
    if agree:
        line += (
            f"; tokens per target forward within {max(agree):.3f} of elsi's own loop on the same drafts and "
            f"questions ({len(agree)} runs)"
        )
    if best is not None:
        line += (
            f". Speed-up over its own plain decoding: median {speedups[len(speedups) // 2]:.2f}x over the lossless "
            f"runs (range {speedups[0]:.2f}-{speedups[-1]:.2f}x); the best, {best['vs plain']}x, is {best['draft']} "
            f"with {best['decoding']} (tau {best['tau OpenVINO']})"
        )
    if s["questions"] < MIN_QUESTIONS or not s.get("repeat"):
        line += (
            f"; {s['questions']} questions, each run once: fewer than the {MIN_QUESTIONS} questions and the repeats "
            "a wall-clock claim needs, so these speed-ups are a check's, not a measurement"
        )
    return [line + "."]


def round_costs(folder: Path = BENCH) -> list[str]:
    """Per target: a plain step, each shape's round in plain steps, the tokens per round 1.3x needs on the
    trees, the cost model's out-of-sample accuracy and the strong drafts' predicted speed-ups."""
    lines = []
    for path in sorted(Path(folder).glob("openvino_rounds_*.json")):
        record = _read(path, ("questions", "decoding", "round ms", "round / step"))
        _check_rounds(path, record)
        s, m = record["settings"], record["machine"]
        for kind in dict.fromkeys(r["questions"] for r in record["rows"]):
            rows = [r for r in record["rows"] if r["questions"] == kind]
            plain = next((r for r in rows if r["decoding"] == "plain"), None)
            if plain is None:
                raise ValueError(f"{path}: no plain decoding row for the {kind} questions")
            shapes = [r for r in rows if r["decoding"] != "plain"]
            lines.append(
                f"**OpenVINO GenAI, {s['target']}, {kind} questions** ({m['cpu']}, {m['date'][:10]}): a plain "
                f"decoding step {plain['round ms']} ms; one round costs "
                + ", ".join(f"{r['round / step']}x a step ({r['decoding']})" for r in shapes)
                + "; so 1.3x plain decoding needs tokens per round of "
                + ", ".join(f"{r['tau for 1.3x']} ({r['decoding']})" for r in shapes if "tau for 1.3x" in r)
                + "".join(
                    f"; {r['decoding']} changed the output with an untrained draft (lossy)"
                    for r in shapes
                    if r.get("lossless") is False
                )
                + "."
            )
        details = record.get("details", {})
        oos = details.get("out_of_sample") or []
        if oos:
            errors = [abs(float(str(r["error"]).rstrip("%"))) / 100 for r in oos]
            lines.append(
                f"The cost model on {s['target']} in OpenVINO GenAI, out of sample (each trained draft's speed-up "
                "from its tokens per round and the untrained draft's round costs alone): "
                f"{sum(e <= TOLERANCE for e in errors)} of {len(errors)} runs within 10% of the measured speed-up "
                f"(worst {100 * max(errors):.1f}%)."
            )
        for r in details.get("strong_predictions") or []:
            lines.append(
                f"Predicted, not measured: {r['draft']} made tau {r['replay tau']} on {r['questions']} mixed "
                f"questions in elsi's replay ({r['tree']}); at this machine's round cost that is "
                f"{r['predicted speed-up (decode)']}x plain decoding in OpenVINO GenAI (1.3x needs tau {r['tau for 1.3x']})."
            )
    return lines
