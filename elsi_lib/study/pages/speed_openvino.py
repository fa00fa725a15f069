"""Wall clock in OpenVINO GenAI, the CPU engine that runs EAGLE-3 drafts as token trees: what
`engines/check_openvino.py` (bench/results/engines_openvino.json: elsi's drafts served, lossless, their
tokens per target forward against elsi's loop) and `bench/bench_openvino_rounds.py`
(openvino_rounds_<target>.json: each chain's and tree's round cost, the tokens per round a speed-up
needs, the cost model out of sample) measured, as lines for the "Wall clock" page. Every number is read
from those files; a file that lacks a field it should have is refused naming the file.
"""

from __future__ import annotations

import json
from pathlib import Path

from .speed import BENCH, MIN_QUESTIONS, TOLERANCE


def _read(path: Path, fields: tuple[str, ...]) -> dict:
    try:
        record = json.loads(path.read_text())
    except ValueError as err:
        raise ValueError(f"{path}: not readable JSON ({err})") from None
    missing = [f for f in ("settings", "rows", "machine") if f not in record]
    if missing:
        raise ValueError(f"{path}: no {missing} (not a benchmark record)")
    for i, row in enumerate(record["rows"]):
        lacking = [f for f in fields if f not in row]
        if lacking:
            raise ValueError(f"{path}: row {i} lacks {lacking}")
    return record


def engine_check(folder: Path = BENCH) -> list[str]:
    """The engine check's finding: lossless runs, agreement with elsi's loop, the best speed-up named as
    the best, the median over the drafts' lossless runs; [] without the record."""
    path = Path(folder) / "engines_openvino.json"
    if not path.is_file():
        return []
    record = _read(path, ("draft", "decoding", "tau OpenVINO", "tau elsi", "lossless", "tok/s", "vs plain"))
    s, m = record["settings"], record["machine"]
    runs = [r for r in record["rows"] if r["draft"] != "plain decoding"]
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
    if s["questions"] < MIN_QUESTIONS:
        line += f"; {s['questions']} questions, fewer than the {MIN_QUESTIONS} a wall-clock claim needs: a check"
    return [line + "."]


def round_costs(folder: Path = BENCH) -> list[str]:
    """Per target: a plain step, each shape's round in plain steps, the tokens per round 1.3x needs on the
    trees, the cost model's out-of-sample accuracy and the strong drafts' predicted speed-ups."""
    lines = []
    for path in sorted(Path(folder).glob("openvino_rounds_*.json")):
        record = _read(path, ("questions", "decoding", "round ms", "round / step"))
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
