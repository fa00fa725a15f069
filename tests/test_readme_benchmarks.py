"""The README's benchmark and engine numbers come from the committed runs in bench/results/: each table
the README shows there is a results file's table row for row, and every decimal number its prose
quotes in those sections is tied by its sentence to one value of one results file (`CLAIMS`), which
it must equal at the precision quoted. A decimal no claim ties fails, as does a claim whose sentence
is gone."""
from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from elsi_lib.common.cachefiles import REPO_ROOT

RESULTS = REPO_ROOT / "bench" / "results"
README = REPO_ROOT / "docs" / "lab-notes.md"
LOOP, ENGINES, BENCH = ("### Wall clock of elsi's own loop", "## Speculative decoding, and drafts that engines load",
                        "## Benchmarks")
REPLIES = "### Training replies through vLLM"
LIVE = "### Stored or live features"
THREADS = "### vLLM on every core"
STRONG = "### The strong drafts in vLLM"
QWEN_ENGINE = "### The second family in vLLM"
SECTIONS = {LOOP: ["bench_decoding"], ENGINES: ["engines_vllm"],
            BENCH: ["bench_selection", "bench_draft", "bench_capture", "bench_probe"], REPLIES: ["bench_replies"], LIVE: ["bench_live"],
            THREADS: ["bench_vllm_threads"], STRONG: ["engines_vllm_strong"],
            QWEN_ENGINE: ["engines_vllm_qwen"]}
DECIMAL = re.compile(r"(?<![\w.])\d+\.\d+(?=x\b|[^\w.]|\.(?!\w)|$)")  # 0.80x and "0.87." count too
V = r"(?P<v>\d+\.\d+)"


def row(name: str, **match):
    """The one row of a results file whose fields equal `match`."""
    rows = [r for r in json.loads((RESULTS / f"{name}.json").read_text())["rows"]
            if all(r.get(k) == v for k, v in match.items())]
    assert len(rows) == 1, (name, match, len(rows))
    return rows[0]


def record(name: str) -> dict:
    return json.loads((RESULTS / f"{name}.json").read_text())


def engine_row(words: str) -> dict:
    """The one bench_replies row whose engine names `words`."""
    rows = [r for r in record("bench_replies")["rows"] if words in r["engine"]]
    assert len(rows) == 1, (words, len(rows))
    return rows[0]


def live(measure: str) -> float:
    return row("bench_live", measure=measure)["value"]


def live_note(label: str) -> float:
    """A number bench_live's note states (per-token costs and their ratio)."""
    return float(re.search(label + r" (\d+\.\d+)", record("bench_live")["notes"]).group(1))


def strong(draft: str, k: int, column: str = "tau vLLM"):
    return row("engines_vllm_strong", draft=draft, layout="speculators", k=k)[column]


def strong_step1(method: str) -> float:
    """Held-out step-1 accuracy of a strong draft (notebook 07's committed table, seed 0)."""
    table = pd.read_csv(REPO_ROOT / "data" / "results" / "table2_strong_step_accuracy_smollm2-135m.csv")
    return table.set_index("method").loc[method, "step 1"]


def best(name: str, column: str, **match):
    return max(r[column] for r in record(name)["rows"] if all(r.get(k) == v for k, v in match.items()))


# (section, pattern with the quoted number as group v, the value it must be)
CLAIMS = [
    (LOOP, rf"this 2-core CPU, load {V}\s+when it began", lambda: record("bench_decoding")["machine"]["load_1_5_15"][0]),
    (LOOP, rf"KV cache\): {V} tok/s", lambda: record("bench_decoding")["settings"]["plain tok/s"]),
    (LOOP, rf"the best, a chain of 1, runs at {V}x",
     lambda: row("bench_decoding", shape="chain", nodes=1)["vs plain"]),
    (LOOP, rf"draft included, costs {V} plain steps", lambda: min(r["break-even tau"] for r in record("bench_decoding")["rows"])),
    (LOOP, rf"tau {V} for a chain of 1", lambda: row("bench_decoding", shape="chain", nodes=1)["tau"]),
    (LOOP, rf"at most {V} for 60 nodes", lambda: best("bench_decoding", "tau")),
    (LOOP, rf"needs tau above {V} at a chain of 1", lambda: row("bench_decoding", shape="chain", nodes=1)["break-even tau"]),
    (ENGINES, rf"1 \+ accepted / drafts, within {V}", lambda: record("engines_vllm")["settings"]["tolerance"]),
    (ENGINES, rf"\n?{V} against [\d.]+ at k = 1", lambda: row("engines_vllm", draft="ELSI m=3", layout="speculators", k=1)["tau vLLM"]),
    (ENGINES, rf"[\d.]+ against {V} at k = 1", lambda: row("engines_vllm", draft="EAGLE3", layout="speculators", k=1)["tau vLLM"]),
    (ENGINES, rf"and {V} against [\d.]+ from k = 3 on", lambda: row("engines_vllm", draft="ELSI m=3", layout="speculators", k=3)["tau vLLM"]),
    (ENGINES, rf"against {V} from k = 3 on", lambda: row("engines_vllm", draft="EAGLE3", layout="speculators", k=3)["tau vLLM"]),
    (ENGINES, rf"the best speed-up is\s+{V}x \(ELSI m = 3, k = 1\)",
     lambda: row("engines_vllm", draft="ELSI m=3", layout="speculators", k=1)["vs plain"]),
    (STRONG, rf"load {V} when vLLM began", lambda: record("engines_vllm_strong")["machine"]["load_1_5_15"][0]),
    (STRONG, rf"EAGLE3 at k = 1: {V} against", lambda: strong("EAGLE3", 1)),
    (STRONG, rf"k = 1: [\d.]+ against {V}\)", lambda: row("engines_vllm", draft="EAGLE3", layout="speculators", k=1)["tau vLLM"]),
    (STRONG, rf"\({V} against [\d.]+ at k = 1,", lambda: strong("EAGLE3", 1)),
    (STRONG, rf"against {V} at k = 1,", lambda: strong("ELSI m=3", 1)),
    (STRONG, rf"k = 1, {V} against", lambda: strong("EAGLE3", 5)),
    (STRONG, rf"against {V} at k = 5\)", lambda: strong("ELSI m=3", 5)),
    (STRONG, rf"payoff is {V}x plain decoding at best", lambda: max(r["vs plain"] for r in record("engines_vllm_strong")["rows"]
                                                                  if r["draft"] != "plain decoding")),
    (STRONG, rf"short of the {V}x\s+target", lambda: 1.3),  # the target, not a result
    (STRONG, rf"in a share {V} of its rounds", lambda: strong("EAGLE3", 1) - 1),
    (STRONG, rf"step-1 accuracy on conversations like its training data is {V}", lambda: strong_step1("EAGLE3")),
    (BENCH, rf"capture at {V}x\s+a bare forward", lambda: row("bench_capture", measure="capture")["ratio"]),
    (BENCH, rf"a run that began at load {V}", lambda: record("bench_capture")["machine"]["load_1_5_15"][0]),
    (BENCH, rf"a ratio of {V}, inside", lambda: record("bench_capture")["settings"]["peak memory MiB"]["SmolLM2-135M"]["ratio"]),
    (BENCH, rf"`bench/results/bench_draft.md`, 2026-12-01, load {V}", lambda: record("bench_draft")["machine"]["load_1_5_15"][0]),
    (BENCH, rf"; {V} ms per\s+round", lambda: row("bench_draft", measure="EAGLE-2 tree logic per round")["value"]),
    (BENCH, rf"replay {V} s per question", lambda: row("bench_draft", measure="replay, one question (30 + 60 nodes)")["value"]),
    (BENCH, rf"this\s+2-core CPU, load {V} when it began", lambda: record("bench_selection")["machine"]["load_1_5_15"][0]),
    (BENCH, rf"bench_probe.md`, load {V} when", lambda: record("bench_probe")["machine"]["load_1_5_15"][0]),
    (BENCH, rf"4,060 triples in {V} s", lambda: row("bench_probe", layers=30)["all triples (s)"]),
    (BENCH, rf"\({V} ms a triple\)", lambda: row("bench_probe", layers=30)["ms per triple"]),
    (BENCH, rf"its beam search in {V} s", lambda: row("bench_probe", layers=30)["beam k=10 (s)"]),
    (BENCH, rf"size\) {V} ms a triple", lambda: row("bench_probe", layers=36)["ms per triple"]),
    (BENCH, rf"7,140 in about {V} s", lambda: row("bench_probe", layers=36)["all triples (s)"]),
    (BENCH, rf"the beam search in {V} s;", lambda: row("bench_probe", layers=36)["beam k=10 (s)"]),
    (QWEN_ENGINE, rf"load {V} when it was written", lambda: record("engines_vllm_qwen")["machine"]["load_1_5_15"][0]),
    (QWEN_ENGINE, rf"every k \({V} at k = 1,", lambda: row("engines_vllm_qwen", layout="speculators", k=1)["tau vLLM"]),
    (QWEN_ENGINE, rf"at k = 1, {V} from k = 3 on\)", lambda: row("engines_vllm_qwen", layout="speculators", k=3)["tau vLLM"]),
    (QWEN_ENGINE, rf"pay: {V}x plain decoding at best", lambda: max(r["vs plain"] for r in record("engines_vllm_qwen")["rows"]
                                                                   if r["draft"] != "plain decoding")),
    (REPLIES, rf"this 2-core CPU, load {V} when it began", lambda: record("bench_replies")["machine"]["load_1_5_15"][0]),
    (REPLIES, rf"on all 128 prompts, {V}x as fast", lambda: engine_row("less its start-up")["vs batch 16"]),
    (REPLIES, rf"\({V}x with it", lambda: engine_row("start-up included")["vs batch 16"]),
    (THREADS, rf"this 2-core CPU, load\s+{V} when it began",
     lambda: record("bench_vllm_threads")["machine"]["load_1_5_15"][0]),
    (THREADS, rf"all 96 prompts, {V}x as fast", lambda: row("bench_vllm_threads", engine="vLLM 0.32.0, every core "
                                                         "(engine_environment)")["vs default"]),
    (LIVE, rf"load {V} when it began", lambda: record("bench_live")["machine"]["load_1_5_15"][0]),
    (LIVE, rf"a store costs {V} ms", lambda: live_note("store")),
    (LIVE, rf"live\s+features {V} ms", lambda: live_note("live")),
    (LIVE, rf"ms \({V}x\)", lambda: live_note("store / live")),
    (LIVE, rf"runs\s+at {V}x the float32 one",
     lambda: live("live bf16 autocast, batches of 2048") / live("live float32, batches of 2048")),
    (LIVE, rf"features within {V} of", lambda: live("bf16 forward: relative feature difference")),
    (LIVE, rf"equal at {V} of positions", lambda: live("bf16 forward: target argmax agreement")),
    (LIVE, rf"seven drafts {V}x faster",
     lambda: live("training 7 drafts in lock-step, batches of 2048") / live("training 7 drafts in lock-step, batches of 512")),
]


def section(text: str, heading: str) -> str:
    """The text under `heading` up to the next heading of any level."""
    start = text.index(heading)
    ends = [m.start() for m in re.finditer(r"^#+ ", text[start + len(heading):], re.M)]
    return text[start:start + len(heading) + ends[0]] if ends else text[start:]


def table_rows(markdown: str) -> list[str]:
    return [line for line in markdown.splitlines() if line.startswith("| ") and not line.startswith("|---")]


def agrees(quoted: str, value: float) -> bool:
    digits = len(quoted.split(".")[1])
    return abs(round(float(value), digits) - float(quoted)) < 10 ** -(digits + 3)


def problems(readme: str) -> list[str]:
    out = []
    for heading, names in SECTIONS.items():
        text = section(readme, heading)
        tables = {name: table_rows((RESULTS / f"{name}.md").read_text()) for name in names}
        for name, rows in tables.items():
            shown = [r for r in rows[1:] if r in text]
            if shown and len(shown) != len(rows) - 1:
                out.append(f"{heading}: shows {len(shown)} of the {len(rows) - 1} rows of {name}.md")
        for line in table_rows(text):
            if not any(line in rows for rows in tables.values()):
                out.append(f"{heading}: table row in no results file of {names}: {line}")
        prose = "\n".join(line for line in text.splitlines() if not line.startswith("|"))
        claimed = {}
        for where, pattern, value in CLAIMS:
            if where != heading:
                continue
            found = list(re.finditer(pattern, prose))
            if len(found) != 1:
                out.append(f"{heading}: {len(found)} sentences match {pattern!r} (want one)")
                continue
            m = found[0]
            claimed[m.start("v")] = m.group("v")
            if not agrees(m.group("v"), value()):
                out.append(f"{heading}: {m.group('v')} quoted, the results say {value()} ({pattern!r})")
        for m in DECIMAL.finditer(prose):
            if m.start() not in claimed:
                out.append(f"{heading}: {m.group()} is tied to no results value (add it to CLAIMS)")
    return out


def test_readme_benchmark_numbers_come_from_the_committed_runs():
    assert problems(README.read_text()) == []


def test_every_shifted_benchmark_number_fails():
    """Each quoted decimal of those sections shifted by one in its last digit, one at a time, and a
    table cell changed: every change is caught."""
    readme = README.read_text()
    survivors = []
    for heading in SECTIONS:
        text = section(readme, heading)
        prose_lines = [line for line in text.splitlines() if not line.startswith("|")]
        for line in prose_lines:
            for m in DECIMAL.finditer(line):
                q = m.group()
                digits = len(q.split(".")[1])
                for step in (1, -1):
                    shifted = f"{float(q) + step * 10 ** -digits:.{digits}f}"
                    changed = line[:m.start()] + shifted + line[m.end():]
                    if not problems(readme.replace(line, changed, 1)):
                        survivors.append((heading, q, shifted))
    assert not survivors
    line = table_rows(section(readme, LOOP))[2]
    cells = line.split(" | ")
    cells[4] = f"{float(cells[4]) + 0.01:g}"  # tau of the first shape
    assert problems(readme.replace(line, " | ".join(cells)))


@pytest.mark.parametrize("name", ["bench_decoding", "engines_vllm", "engines_vllm_qwen", "engines_vllm_strong", "bench_selection", "bench_draft",
                                  "bench_capture", "bench_replies", "bench_vllm_threads"])
def test_every_results_file_says_where_and_when_it_ran(name):
    result = record(name)
    assert {"date", "cpu", "cores", "load_1_5_15"} <= set(result["machine"]) and result["rows"]


def test_the_strong_engine_section_says_what_its_held_out_set_holds():
    """The strong engine section explains the gap between held-out step-1 accuracy and acceptance by the
    held-out conversations' sources (counted here from the prompt mix) and by SpecBench's math column
    having the highest tau of every row of the strong tables."""
    from collections import Counter

    from elsi_lib.draft.corpus import training_prompt_sets

    text = " ".join(section(README.read_text(), STRONG).split())
    held_out = Counter(training_prompt_sets(5000)[-256:])
    assert held_out == {"gpteacher-code": 86, "gpteacher-roleplay": 85, "gsm8k-train": 85}
    assert "GPTeacher code 86, GPTeacher role-play 85, GSM8K 85" in text
    tables = pd.read_csv(REPO_ROOT / "data" / "results" / "table2_strong_accepted_tokens_smollm2-135m.csv")
    columns = tables[tables.column != "AVG"]
    best = columns.loc[columns.groupby(["method", "temperature", "nodes"]).tau.idxmax(), "column"]
    assert set(best) == {"M/R"} and "its math column, the nearest to GSM8K, has the highest tau" in text


def test_the_qwen_engine_section_says_what_was_checked():
    """Lossless on every question, acceptance equal to elsi's at every k, the best k the one quoted."""
    rows = [r for r in record("engines_vllm_qwen")["rows"] if r["draft"] != "plain decoding"]
    questions = record("engines_vllm_qwen")["settings"]["questions"]
    assert all(r["tau vLLM"] == r["tau elsi"] and r["outputs equal to elsi's"] == questions for r in rows)
    assert {r["layout"] for r in rows} == {"speculators", "eagle"}
    best = max(rows, key=lambda r: r["vs plain"])
    text = " ".join(section(README.read_text(), QWEN_ENGINE).split())
    assert f"at best (k = {best['k']})" in text and f"on all {questions} questions" in text
    assert row("engines_vllm_qwen", layout="speculators", k=5)["tau vLLM"] == row("engines_vllm_qwen", layout="speculators", k=3)["tau vLLM"]


def test_the_bf16_range_the_readme_quotes_is_the_bench():
    """"31 to 110 times slower" in the README (and the library's warning) is bench_bf16's range of ratios."""
    ratios = [r["bf16 / float32"] for r in record("bench_bf16")["rows"]]
    quoted = f"{min(ratios):.0f} to {max(ratios):.0f} times slower"
    assert quoted in " ".join(README.read_text().split())
    assert record("bench_bf16")["settings"]["bf16 flags present"] == [], "measured on a CPU without bf16 matmul instructions"
    from elsi_lib.common import hardware
    assert quoted in " ".join(hardware.__doc__.split())
