"""The README's findings on the strong drafts (notebook 07, `make tables-strong`) quote its committed
results: the learning-curve table the README shows is `curve_markdown` of
data/results/table2_learning_curve_smollm2-135m.csv row for row, and every decimal number of the
prose around it is tied by its sentence to one cell (`CLAIMS`) and must equal it at the precision
quoted. A decimal no claim ties fails, as does a claim whose sentence is gone.

    python tests/test_readme_strong.py   # prints the table the README must hold
"""
from __future__ import annotations

import pandas as pd

from elsi_lib.common.cachefiles import REPO_ROOT
from test_readme_criteria import check_claims

RESULTS = REPO_ROOT / "data" / "results"
SLUG = "smollm2-135m"
SECTION = "### What the strong drafts show"
N = r"(?P<v>[-+]?\d+\.\d+)"
X = r"[-+]?\d+\.\d+"
NODES = 60


def section() -> str:
    text = (REPO_ROOT / "docs" / "lab-notes.md").read_text()
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    nxt = text.find("\n### ", start + len(SECTION))
    ends = [e for e in (end, nxt) if e > 0]
    return text[start:min(ends) if ends else None]


def curve() -> pd.DataFrame:
    return pd.read_csv(RESULTS / f"table2_learning_curve_{SLUG}.csv")


def cell(method: str, column: str, T: float, prompts: int | None = None) -> float:
    """One cell of the learning curve at `NODES` nodes (`prompts` None: the finished drafts)."""
    table = curve()
    prompts = table.prompts.max() if prompts is None else prompts
    rows = table[(table.method == method) & (table.temperature == T) & (table.nodes == NODES) & (table.prompts == prompts)]
    assert len(rows) == 1, (method, column, T, prompts, len(rows))
    return float(rows[column].iloc[0])


def small(method: str, column: str = "step 1") -> float:
    """The small protocol's held-out step accuracy (notebook 06, seed 0)."""
    table = pd.read_csv(RESULTS / f"table2_step_accuracy_{SLUG}.csv")
    rows = table[(table.method == method) & (table.seed == 0)]
    assert len(rows) == 1
    return float(rows[column].iloc[0])


def curve_markdown(table: pd.DataFrame) -> str:
    """The README's learning-curve table: one row per curve point and method, step-1..3 accuracy, AVG
    tau at `NODES` nodes with its 95% interval and the paired difference from EAGLE3 at T = 0 and 1."""
    lines = ["| prompts | reply tokens | method | step 1 | step 2 | step 3 | tau, T = 0 | minus EAGLE3, T = 0 "
             "| tau, T = 1 | minus EAGLE3, T = 1 |", "|" + "---|" * 10]
    table = table[table.nodes == NODES]
    for (prompts, method), part in table.groupby(["prompts", "method"], sort=True):
        by_t = part.set_index("temperature")
        first = by_t.iloc[0]

        def tau(T):
            r = by_t.loc[T]
            return f"{r.tau:.2f} [{r.low:.2f}, {r.high:.2f}]"

        def diff(T):
            r = by_t.loc[T]
            if method == "EAGLE3":
                return ""
            return f"{r['minus EAGLE3']:+.3f} [{r['diff low']:+.3f}, {r['diff high']:+.3f}]"

        lines.append(f"| {prompts:,} | {int(first.reply_tokens):,} | {method} | {first['step 1']:.3f} | "
                     f"{first['step 2']:.3f} | {first['step 3']:.3f} | {tau(0.0)} | {diff(0.0)} | {tau(1.0)} | {diff(1.0)} |")
    return "\n".join(lines) + "\n"


def finished(method, column, T=0.0):
    return lambda: cell(method, column, T)


def at(prompts, method, column, T=0.0):
    return lambda: cell(method, column, T, prompts)


def small_paired(method, column="diff", T=0.0):
    table = pd.read_csv(RESULTS / f"table2_paired_{SLUG}.csv")
    rows = table[(table.method == method) & (table.nodes == NODES) & (table.temperature == T)]
    assert len(rows) == 1
    return lambda: float(rows[column].iloc[0])


def criteria(name, column, **keys):
    table = pd.read_csv(RESULTS / f"{name}.csv")
    for k, v in keys.items():
        table = table[table[k] == v]
    return lambda: float(table[column].iloc[0])


# the targets, quoted as targets (not results)
TARGET_STEP1, TARGET_TAU = 0.45, 2.2
LAST = 4744

# (pattern with one group v, the cell it must equal)
CLAIMS: list = [
    (rf"step-1 accuracy {N} \(the small", finished("EAGLE3", "step 1")),
    (rf"small protocol's EAGLE3: {N};", lambda: small("EAGLE3")),
    (rf"the target was {N}\) and", lambda: TARGET_STEP1),
    (rf"AVG tau {N} at 60 nodes, T = 0 \(the", finished("EAGLE3", "tau")),
    (rf"\(the target was {N}: not", lambda: TARGET_TAU),
    (rf"\({N} from 3,000 to 4,744", lambda: cell("EAGLE3", "tau", 0.0) - cell("EAGLE3", "tau", 0.0, 3000)),
    (rf"every point: {N},", at(1001, "ELSI m=3", "minus EAGLE3")),
    (rf"every point: {X}, {N} and", at(3000, "ELSI m=3", "minus EAGLE3")),
    (rf"and {N} at 1,001, 3,000", at(LAST, "ELSI m=3", "minus EAGLE3")),
    (rf"comparison was {N} with", small_paired("ELSI m=3")),
    (rf"relative error {N}, against", criteria("criteria_probe", "its error", model=SLUG)),
    (rf"against EAGLE3's {N}\)", criteria("criteria_drafts", "probe error", protocol="table2", method="EAGLE3")),
    (rf"between the two: {N} \[", finished("probe m=3", "minus EAGLE3")),
    (rf"two: {X} \[{N}, {X}\]", finished("probe m=3", "diff low")),
    (rf"two: {X} \[{X}, {N}\]", finished("probe m=3", "diff high")),
]


def test_the_learning_curve_table_is_the_committed_one():
    assert curve_markdown(curve()) in section()


def test_every_decimal_of_the_prose_is_its_cell():
    text = section()
    table = curve_markdown(curve())
    start = text.index(table)
    prose = text[:start] + " " * len(table) + text[start + len(table):]
    check_claims(prose, CLAIMS, "the strong drafts' findings")


def test_the_words_of_the_strong_findings():
    text = " ".join(section().split())
    table = curve()
    assert sorted(table.prompts.unique()) == [1001, 3000, LAST]
    zero = table[(table.temperature == 0) & (table.method == "ELSI m=3")]
    assert (zero["diff high"] < 0).all(), "ELSI m=3 below EAGLE3 at every point, T = 0"
    one = table[(table.temperature == 1) & (table.method != "EAGLE3")]
    assert ((one["diff low"] <= 0) & (one["diff high"] >= 0)).all(), "every T = 1 interval holds 0"
    assert small_paired("ELSI m=3", "low")() <= 0 <= small_paired("ELSI m=3", "high")()
    for prompts, part in table[table.temperature == 0].groupby("prompts"):
        order = part.sort_values("step 1", ascending=False).method.tolist()
        assert order == ["EAGLE3", "probe m=3", "ELSI m=3"], (prompts, order)
    probe = finished("probe m=3", "diff high")()
    assert probe < 0 and finished("probe m=3", "minus EAGLE3")() > finished("ELSI m=3", "minus EAGLE3")()
    assert cell("EAGLE3", "step 1", 0.0) > TARGET_STEP1 and cell("EAGLE3", "tau", 0.0) < TARGET_TAU
    assert "ELSI m = 3 (9, 10, 29)" in text and "(21, 28, 29)" in text
    stages = pd.read_csv(RESULTS / f"table2_strong_stage_times_{SLUG}.csv").set_index("stage")
    whole = " ".join((REPO_ROOT / "docs" / "lab-notes.md").read_text().split())
    assert f"({stages.loc['total', 'seconds']:,.0f} s of stages" in whole


if __name__ == "__main__":
    print(curve_markdown(curve()))
