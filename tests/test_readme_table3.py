"""The README's Table 3 section (notebook 06 on Qwen2.5-Coder-0.5B, `make tables-qwen`) and its family
comparison (notebook 09, `make families`) quote their committed results: the table the README shows is
`table3_markdown` of data/results/table3_*.csv row for row, and every decimal number of the prose
around it is tied by its sentence to one cell (`CLAIMS`) and must equal it at the precision quoted. A
decimal no claim ties fails, as does a claim whose sentence is gone.

    python tests/test_readme_table3.py   # prints the table the README must hold
"""
from __future__ import annotations

import pandas as pd

from elsi_lib.common.cachefiles import REPO_ROOT
from test_readme import section as readme_section
from test_readme_criteria import check_claims

RESULTS = REPO_ROOT / "data" / "results"
SLUG, SMOL = "qwen2.5-coder-0.5b", "smollm2-135m"
SECTION = "### Table 3 on the second family (`make tables-qwen`)"
N = r"(?P<v>[-+]?\d+\.\d+)"
X = r"[-+]?\d+\.\d+"
NODES = 60
QWEN, SMOLLM = f"table3: {SLUG}", f"table2: {SMOL}"


def section() -> str:
    return readme_section(None, SECTION)


def read(name: str, slug: str = SLUG, table: str = "table3") -> pd.DataFrame:
    return pd.read_csv(RESULTS / f"{table}_{name}_{slug}.csv")


def one(frame: pd.DataFrame, column: str, **keys) -> float:
    for k, v in keys.items():
        frame = frame[frame[k] == v]
    assert len(frame) == 1, (keys, len(frame))
    return float(frame[column].iloc[0])


def paired(method, T=0.0, column="diff", nodes=NODES, slug=SLUG, table="table3"):
    return lambda: one(read("paired", slug, table), column, method=method, temperature=T, nodes=nodes)


def step(method, column="step 1", slug=SLUG, table="table3"):
    return lambda: one(read("step_accuracy", slug, table), column, method=method, seed=0)


def probe_paired(baseline, T=0.0, column="diff", protocol="table3"):
    return lambda: one(pd.read_csv(RESULTS / "criteria_probe_paired.csv"), column, protocol=protocol, baseline=baseline,
                       temperature=T, nodes=NODES)


def family(name, column, **keys):
    return lambda: one(pd.read_csv(RESULTS / f"families_{name}.csv"), column, **keys)


LOWER = f"{SMOLLM} minus {QWEN}"  # families_compared's column: SmolLM2's effect minus Qwen's
RANGE = "range of AVG tau across the sets"


def share(method, fam, T=0.0):
    return lambda: 100 * family("choice_effects", "share of EAGLE3's tau", effect=f"{method} minus EAGLE3",
                                temperature=T, family=fam)()


def stage(name):
    return lambda: one(read("stage_times"), "seconds", stage=name)


def table3_markdown() -> str:
    """The README's Table 3 summary: per method its layers, set entropy, held-out step-1 accuracy, and
    AVG tau at `NODES` nodes with its 95% interval and the paired difference from EAGLE3, T = 0 and 1."""
    accepted = read("accepted_tokens")
    avg = accepted[(accepted["column"] == "AVG") & (accepted.nodes == NODES)].set_index(["method", "temperature"])
    diffs = read("paired")
    diffs = diffs[diffs.nodes == NODES].set_index(["method", "temperature"])
    sets = read("beam_overlap").set_index("method")
    steps = read("step_accuracy").query("seed == 0").set_index("method")
    lines = ["| method | layers | set entropy | step 1 | tau, T = 0 | minus EAGLE3, T = 0 | tau, T = 1 "
             "| minus EAGLE3, T = 1 |", "|" + "---|" * 8]
    for method in sets.index:
        cells = []
        for T in (0.0, 1.0):
            r = avg.loc[(method, T)]
            cells.append(f"{r.tau:.2f} [{r.low:.2f}, {r.high:.2f}]")
            if method == "EAGLE3":
                cells.append("")
            else:
                d = diffs.loc[(method, T)]
                cells.append(f"{d['diff']:+.3f} [{d.low:+.3f}, {d.high:+.3f}]")
        lines.append(f"| {method} | {sets.loc[method, 'layers']} | {sets.loc[method, 'entropy']:.3f} | "
                     f"{steps.loc[method, 'step 1']:.3f} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


PAPER_QWEN3_GAIN = 0.085  # the paper's Table 2 (Qwen3-4B): ELSI m = 3 minus EAGLE3, quoted, not measured here
REPLIES = REPO_ROOT / "data" / "replies" / "266527db43019007565c25f8.partial.jsonl.gz"  # `make replies-qwen`'s archive


def steps_range(end):
    return lambda: getattr(read("step_accuracy")["step 1"], end)()


# (pattern with one group v, the cell it must equal)
CLAIMS: list = [
    (rf"tree sizes, {N} tau at 60 nodes", paired("ELSI m=3")),
    (rf"on Qwen3-4B: {N}\)", lambda: PAPER_QWEN3_GAIN),
    (rf"is higher \({N} against", step("ELSI m=3")),
    (rf"is higher \({X} against {N}\)", step("EAGLE3")),
    (rf"the four: {N} \[", probe_paired("ELSI m=3")),
    (rf"the four: {X} \[{N}, {X}\]", probe_paired("ELSI m=3", column="low")),
    (rf"the four: {X} \[{X}, {N}\]", probe_paired("ELSI m=3", column="high")),
    (rf"\(at T = 1 {N} \[", probe_paired("ELSI m=3", 1.0)),
    (rf"\(at T = 1 {X} \[{N}, {X}\]", probe_paired("ELSI m=3", 1.0, "low")),
    (rf"\(at T = 1 {X} \[{X}, {N}\]", probe_paired("ELSI m=3", 1.0, "high")),
    (rf"step-1\s+accuracy {N}\. One layer", step("probe m=3")),
    (rf"slightly above \({N} \[", paired("ELSI m=1", 1.0, nodes=30)),
    (rf"slightly above \({X} \[{N},", paired("ELSI m=1", 1.0, "low", nodes=30)),
    (rf"slightly above \({X} \[{X}, {N}\]", paired("ELSI m=1", 1.0, "high", nodes=30)),
    (rf"beat EAGLE3 \({N} \[", paired("ELSI m=3", slug=SMOL, table="table2")),
    (rf"beat EAGLE3 \({X} \[{N},", paired("ELSI m=3", column="low", slug=SMOL, table="table2")),
    (rf"beat EAGLE3 \({X} \[{X}, {N}\]", paired("ELSI m=3", column="high", slug=SMOL, table="table2")),
    (rf"trails it \({N} \[", paired("ELSI m=1", slug=SMOL, table="table2")),
    (rf"trails it \({X} \[{N},", paired("ELSI m=1", column="low", slug=SMOL, table="table2")),
    (rf"trails it \({X} \[{X}, {N}\]", paired("ELSI m=1", column="high", slug=SMOL, table="table2")),
    (rf"than on Qwen by {N}", family("compared", LOWER, effect="ELSI m=3 minus EAGLE3", temperature=0.0)),
    (rf"than on Qwen by {X}\s+\[{N},", family("compared", "low", effect="ELSI m=3 minus EAGLE3", temperature=0.0)),
    (rf"than on Qwen by {X}\s+\[{X}, {N}\]", family("compared", "high", effect="ELSI m=3 minus EAGLE3", temperature=0.0)),
    (rf"at T = 0 and {N} \[", family("compared", LOWER, effect="ELSI m=3 minus EAGLE3", temperature=1.0)),
    (rf"at T = 0 and {X} \[{N},", family("compared", "low", effect="ELSI m=3 minus EAGLE3", temperature=1.0)),
    (rf"at T = 0 and {X} \[{X}, {N}\] at T = 1", family("compared", "high", effect="ELSI m=3 minus EAGLE3",
                                                          temperature=1.0)),
    (rf"at T = 0, by {N}", family("compared", LOWER, effect="ELSI m=1 minus EAGLE3", temperature=0.0)),
    (rf"at T = 0, by {X}\s+\[{N},", family("compared", "low", effect="ELSI m=1 minus EAGLE3", temperature=0.0)),
    (rf"at T = 0, by {X}\s+\[{X}, {N}\]", family("compared", "high", effect="ELSI m=1 minus EAGLE3", temperature=0.0)),
    (rf"ELSI m = 3 reaches {N}% on Qwen", share("ELSI m=3", QWEN)),
    (rf"on Qwen and {N}% on SmolLM2, m = 1", share("ELSI m=3", SMOLLM)),
    (rf"m = 1 {N}%\s+and", share("ELSI m=1", QWEN)),
    (rf"m = 1 {X}%\s+and {N}%\.", share("ELSI m=1", SMOLLM)),
    (rf"mean off-diagonal CKA {N} on SmolLM2", family("interchangeability", "mean off-diagonal CKA", family=SMOLLM)),
    (rf"on SmolLM2 and {N} on Qwen, layer", family("interchangeability", "mean off-diagonal CKA", family=QWEN)),
    (rf"at or above {N} {X}%", lambda: 0.95),
    (rf"at or above {X} {N}%", lambda: 100 * family("interchangeability", "pairs with CKA >= 0.95", family=SMOLLM)()),
    (rf"% and {N}%, three", lambda: 100 * family("interchangeability", "pairs with CKA >= 0.95", family=QWEN)()),
    (rf"across the sets \({N} on SmolLM2", family("choice_effects", "value", effect=RANGE, temperature=0.0, family=SMOLLM)),
    (rf"drafts, {N} on Qwen's 4\)", family("choice_effects", "value", effect=RANGE, temperature=0.0, family=QWEN)),
    (rf"\(step-1 accuracy {N} to", steps_range("min")),
    (rf"\(step-1 accuracy {X} to {N}\)", steps_range("max")),
]


def test_the_table3_summary_is_the_committed_one():
    assert table3_markdown() in section()


def test_every_decimal_of_the_prose_is_its_cell():
    text = section()
    table = table3_markdown()
    start = text.index(table)
    prose = text[:start] + " " * len(table) + text[start + len(table):]
    check_claims(prose, CLAIMS, "the Table 3 section")


def test_the_words_of_the_table3_findings():
    text = " ".join(section().split())
    diffs = read("paired")
    elsi3 = diffs[diffs.method == "ELSI m=3"]
    assert len(elsi3) == 4 and (elsi3.low > 0).all(), "ELSI m=3 above EAGLE3 at both temperatures and tree sizes"
    m1 = diffs[(diffs.method == "ELSI m=1") & (diffs.nodes == NODES)]
    assert ((m1.low <= 0) & (m1.high >= 0)).all(), "m = 1's intervals at 60 nodes hold 0"
    accepted = read("accepted_tokens").query("column == 'AVG'")
    for _, block in accepted.groupby(["temperature", "nodes"]):
        assert block.loc[block.tau.idxmax(), "method"] == "probe m=3", "the probe's draft the best of the four"
    steps = read("step_accuracy")
    assert steps.loc[steps["step 1"].idxmax(), "method"] == "probe m=3"
    probe = pd.read_csv(RESULTS / "criteria_probe_paired.csv").query("protocol == 'table3' and nodes == @NODES")
    zero, one_ = (probe[(probe.baseline == "ELSI m=3") & (probe.temperature == T)].iloc[0] for T in (0.0, 1.0))
    assert zero.low > 0 and one_.low <= 0 <= one_.high
    overlap = read("beam_overlap").set_index("method")
    assert overlap.loc["ELSI m=3", "rank"] == 1 and f"all {overlap.loc['ELSI m=3', 'of']:,} triples" in text
    assert "ELSI m = 3 (1, 22, 23)" in text and "EAGLE3's (1, 11, 20)" in text and "(19, 21, 23)" in text
    assert "the last (23, the layer EAGLE2 reads" in text and overlap.loc["ELSI m=1", "layers"] == "(23,)"
    loop = read("loop_vs_replay")
    assert loop["rounds agree"].all() and loop["loop output is greedy"].all()
    assert set(loop.method) == {"EAGLE3", "ELSI m=3"} and loop.groupby("method").column.nunique().eq(6).all()
    small = read("paired", SMOL, "table2").query("nodes == @NODES and temperature == 0")
    m1_small = small[small.method == "ELSI m=1"].iloc[0]
    assert m1_small.high < 0 and "m = 1 trails it" in text


def test_the_words_of_the_family_comparison():
    text = " ".join(section().split())
    inter = pd.read_csv(RESULTS / "families_interchangeability.csv").set_index("family")
    assert list(inter.compartments) == [3, 3] and "three compartments each" in text
    for column in [c for c in inter.columns if c.startswith("pairs with") or c.startswith("mean")]:
        assert inter.loc[SMOLLM, column] > inter.loc[QWEN, column], f"SmolLM2 the more interchangeable on {column}"
    effects = pd.read_csv(RESULTS / "families_choice_effects.csv").query("temperature == 0")
    m3 = effects[effects.effect == "ELSI m=3 minus EAGLE3"].set_index("family")
    assert m3.loc[QWEN, "low"] > 0 and m3.loc[SMOLLM, "value"] < 0 and round(1 - m3.loc[SMOLLM, "share of EAGLE3's tau"], 2) == 0.01
    m1 = effects[effects.effect == "ELSI m=1 minus EAGLE3"].set_index("family")
    assert m1.loc[QWEN, "low"] <= 0 <= m1.loc[QWEN, "high"] and m1.loc[SMOLLM, "high"] < 0
    compared = pd.read_csv(RESULTS / "families_compared.csv")
    named = compared[compared.effect.str.endswith("minus EAGLE3") & (compared.temperature == 0)]
    assert (named.high < 0).all(), "at T = 0 both effects lower on SmolLM2, intervals below 0"
    smol, qwen = (read("accepted_tokens", slug, table).method.nunique() for slug, table in ((SMOL, "table2"), (SLUG, "table3")))
    assert f"on SmolLM2's {smol} drafts" in text and f"on Qwen's {qwen})" in text


def test_the_integers_of_the_table3_section():
    import gzip
    import json

    text = " ".join(section().split())
    rows = [json.loads(line) for line in gzip.open(REPLIES, "rt")][1:]  # the first line is the request's header
    assert len(rows) == 1000 and "1,000 training prompts (936 trained on, 64 held out)" in text
    assert f"{sum(len(r['ids']) for r in rows):,} reply tokens" in text
    questions = read("paired").groupby("temperature").questions.max()
    assert f"Seed 0, {questions[0.0]} SpecBench questions ({questions[1.0]} at T = 1" in text
    named = {"load the target": None, "evaluation replies and features": "SpecBench continuations and their float32 "
             "features", "training replies and features": "the training replies (read from the archive) and "
             "held-out features", "training seed0 (4 drafts)": "the four drafts in lock-step on live bf16 features",
             "held-out step accuracy": "held-out step accuracy", "replay": "replay"}
    for name, words in named.items():
        if words:
            assert f"{words} {stage(name)():,.0f} s" in text, name
    assert f"`table3_stage_times_*`: {stage('total')():,.0f} s in all on 2 cores)" in text


if __name__ == "__main__":
    print(table3_markdown())
