"""The README's benchmark and engine numbers come from the committed runs in bench/results/: each table
the README shows is a results file's table row for row, and every decimal number its prose quotes
in those sections is a value of that section's own results file, at the precision quoted."""
from __future__ import annotations

import json
import re

import pytest

from elsi_lib.common.cachefiles import REPO_ROOT

RESULTS = REPO_ROOT / "bench" / "results"
README = REPO_ROOT / "README.md"
# README section (heading) -> the results files it quotes
SECTIONS = {"### Wall clock of elsi's own loop": ["bench_decoding"],
            "## Speculative decoding, and drafts that engines load": ["engines_vllm"],
            "## Benchmarks": ["bench_selection", "bench_draft", "bench_capture"]}
DECIMAL = re.compile(r"(?<![\w.])\d+\.\d+(?!\w|\.\w)")


def section(text: str, heading: str) -> str:
    start = text.index(heading)
    level = heading.split(" ")[0]
    ends = [m.start() for m in re.finditer(rf"^#{{1,{len(level)}}} ", text[start + len(heading):], re.M)]
    return text[start:start + len(heading) + ends[0]] if ends else text[start:]


def values(record) -> list[float]:
    """Every number in a results record (rows, settings, machine), nested structures flattened."""
    if isinstance(record, bool):
        return []
    if isinstance(record, (int, float)):
        return [float(record)]
    if isinstance(record, str):
        return [float(x) for x in re.findall(r"\d+(?:\.\d+)?", record)]
    if isinstance(record, dict):
        return [v for x in record.values() for v in values(x)]
    if isinstance(record, list):
        return [v for x in record for v in values(x)]
    return []


def table_rows(markdown: str) -> list[str]:
    return [line for line in markdown.splitlines() if line.startswith("| ") and not line.startswith("|---")]


def problems(readme: str) -> list[str]:
    out = []
    for heading, names in SECTIONS.items():
        text = section(readme, heading)
        prose = "\n".join(line for line in text.splitlines() if not line.startswith("|"))
        pool = []
        for name in names:
            record = json.loads((RESULTS / f"{name}.json").read_text())
            pool += values(record)
            rows = table_rows((RESULTS / f"{name}.md").read_text())
            shown = [r for r in rows[1:] if r in text]
            if shown and len(shown) != len(rows) - 1:
                out.append(f"{heading}: shows {len(shown)} of the {len(rows) - 1} rows of {name}.md")
        for table_row in table_rows(text):
            if not any(table_row in (RESULTS / f"{name}.md").read_text() for name in names):
                out.append(f"{heading}: table row not in {names}: {table_row}")
        for quoted in DECIMAL.findall(prose):
            digits = len(quoted.split(".")[1])
            if not any(abs(round(v, digits) - float(quoted)) < 10 ** -(digits + 3) for v in pool):
                out.append(f"{heading}: {quoted} is no value of {names}")
    return out


def test_readme_benchmark_numbers_come_from_the_committed_runs():
    assert problems(README.read_text()) == []


def test_a_changed_benchmark_number_fails():
    readme = README.read_text()
    text = section(readme, "### Wall clock of elsi's own loop")
    rows = table_rows(text)
    assert len(rows) > 2, "the loop's table moved"
    row = rows[2]
    cells = row.split(" | ")
    cells[4] = f"{float(cells[4]) + 0.01:.2f}"  # tau of the first shape
    assert problems(readme.replace(row, " | ".join(cells)))
    prose = next(q for q in DECIMAL.findall("\n".join(l for l in text.splitlines() if not l.startswith("|"))))
    shifted = f"{float(prose) + 10 ** -len(prose.split('.')[1]) * 7:.{len(prose.split('.')[1])}f}"
    assert problems(readme.replace(prose, shifted, 1)), (prose, shifted)


@pytest.mark.parametrize("name", ["bench_decoding", "engines_vllm", "bench_selection", "bench_draft",
                                  "bench_capture"])
def test_every_results_file_says_where_and_when_it_ran(name):
    record = json.loads((RESULTS / f"{name}.json").read_text())
    assert {"date", "cpu", "cores", "load_1_5_15"} <= set(record["machine"]) and record["rows"]
