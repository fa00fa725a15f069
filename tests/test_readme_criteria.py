"""The README's section on selection criteria (notebook 08) quotes its committed results: every
decimal number in it is tied by its sentence to one cell of data/results/criteria_*.csv (`CLAIMS`)
and must equal it at the precision quoted; a decimal no claim ties fails, as does a claim whose
sentence is gone."""
from __future__ import annotations

import re

import pandas as pd

from elsi_lib.common.cachefiles import REPO_ROOT

RESULTS = REPO_ROOT / "data" / "results"
SECTION = "## Which criterion ranks the trained drafts (notebook 08, `make criteria`)"
DECIMAL = re.compile(r"(?<![\w.])[-+]?\d+\.\d+(?!\w|\.\w)")
N = r"(?P<v>[-+]?\d+\.\d+)"
TAU = "tau minus EAGLE3"


def section() -> str:
    text = (REPO_ROOT / "docs" / "lab-notes.md").read_text()
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    return text[start:end if end > 0 else None]


def rho(criterion, outcome, T, column="rho", protocol="table2"):
    table = pd.read_csv(RESULTS / "criteria_rank_correlations.csv")
    rows = table[(table.protocol == protocol) & (table.criterion == criterion) & (table.outcome == outcome)
                 & (table.temperature == T) & (table.nodes == 60)]
    assert len(rows) == 1
    return float(rows[column].iloc[0])


def draft(method, column):
    table = pd.read_csv(RESULTS / "criteria_drafts.csv")
    rows = table[(table.protocol == "table2") & (table.method == method) & (table.temperature == 0) & (table.nodes == 60)]
    assert len(rows) == 1
    return float(rows[column].iloc[0])


def probe(column, model="smollm2-135m"):
    table = pd.read_csv(RESULTS / "criteria_probe.csv")
    return table.set_index("model").loc[model, column]


def paired(column):
    table = pd.read_csv(RESULTS / "table2_paired_smollm2-135m.csv")
    rows = table[(table.method == "ELSI m=3, template excluded") & (table.nodes == 60) & (table.temperature == 0)]
    assert len(rows) == 1
    return float(rows[column].iloc[0])


def interval(head, criterion, outcome, T):
    """Four claims: 'X [L, H] (p = P)' after `head`: rho, its interval over sets, its p-value."""
    x = r"[-+]?\d+\.\d+"
    def claim(i, column):
        parts = [x, x, x, x]
        parts[i] = N
        return (head + rf"{parts[0]} \[{parts[1]}, {parts[2]}\] \(p = {parts[3]}\)",
                lambda: rho(criterion, outcome, T, column))
    return [claim(0, "rho"), claim(1, "low (sets)"), claim(2, "high (sets)"), claim(3, "p (permutation)")]


X = r"[-+]?\d+\.\d+"
QWEN = "qwen2.5-coder-0.5b"
# the three numbers of "d [low, high]", each claim with one of them as its group
PLACES = [(N, X, X, "diff"), (X, N, X, "low"), (X, X, N, "high")]


def own(baseline, column, protocol="table3"):
    """The probe's own m = 3 draft minus `baseline`'s, 60 nodes, T = 0 (criteria_probe_paired.csv)."""
    def value():
        table = pd.read_csv(RESULTS / "criteria_probe_paired.csv")
        rows = table[(table.protocol == protocol) & (table.baseline == baseline) & (table.temperature == 0)
                     & (table.nodes == 60)]
        assert len(rows) == 1
        return float(rows[column].iloc[0])
    return value


CLAIMS = [
    (rf"by\s+held-out error \({N}\)", lambda: probe("ridge")),
    *interval(r"agreement here:\*\* rho ", "set entropy", "step 1", 0.0),
    *interval(r"step-1 accuracy and ", "set entropy", TAU, 0.0),
    *interval(r"error ranks them:\*\* rho ", "probe error", "step 1", 0.0),
    *interval(r"with step-1 accuracy, ", "probe error", TAU, 0.0),
    *interval(r"at T = 0 and ", "probe error", TAU, 1.0),
    (rf"\(error {N}\)", lambda: draft("ELSI m=3, template excluded", "probe error")),
    (rf"tied with EAGLE3 \({N},", lambda: draft("ELSI m=3, template excluded", TAU)),
    (rf"paired interval {N} to", lambda: paired("low")),
    (rf"paired interval [-+]?\d+\.\d+ to {N}\)", lambda: paired("high")),
    (rf"highest step-1 accuracy \({N}\)", lambda: draft("EAGLE3", "step 1")),
    (rf"scores {N}, 7th of the 11", lambda: draft("EAGLE3", "probe error")),
    (rf"EAGLE3 second \({N},", lambda: draft("EAGLE3", "probe agreement")),
    (rf"template-excluded set's {N}\)", lambda: draft("ELSI m=3, template excluded", "probe agreement")),
    *interval(r"less well: rho ", "probe agreement", "step 1", 0.0),
    # the strong drafts: the last point of the curve (the test below checks every point says the same)
    (rf"in reverse \(rho {N} with", lambda: strong_rho("set entropy", "step 1")),
    (rf"half right \(rho {N}:", lambda: strong_rho("probe error", "step 1")),
    (rf"exactly right \(rho {N} with", lambda: strong_rho("probe agreement", "step 1")),
    # the second family (Table 3 on Qwen)
    (rf"held-out error {N}, was trained", lambda: probe("its error", QWEN)),
    (rf"tau\s+do \(rho {N}, p", lambda: rho("probe error", "step 1", 0.0, protocol="table3")),
    (rf"tau\s+do \(rho {X}, p = {N} and", lambda: rho("probe error", "step 1", 0.0, "p (permutation)", "table3")),
    (rf"tau\s+do \(rho {X}, p = {X} and {N},", lambda: rho("probe error", TAU, 0.0, "p (permutation)", "table3")),
    (rf"only loosely \(rho {N}, p", lambda: rho("set entropy", "step 1", 0.0, protocol="table3")),
    (rf"only loosely \(rho {X}, p = {N} and", lambda: rho("set entropy", "step 1", 0.0, "p (permutation)", "table3")),
    (rf"only loosely \(rho {X}, p = {X} and {N}\)", lambda: rho("set entropy", TAU, 0.0, "p (permutation)", "table3")),
    (rf"the wrong way \(rho {N}\)", lambda: rho("probe agreement", "step 1", 0.0, protocol="table3")),
    (rf"with tau is {N} \(p", lambda: rho("probe error", TAU, 1.0, protocol="table3")),
    (rf"with tau is {X} \(p = {N}\)", lambda: rho("probe error", TAU, 1.0, "p (permutation)", "table3")),
    *[(rf"four, {a} \[{b}, {c}\] over EAGLE3", own("EAGLE3", col)) for a, b, c, col in PLACES],
    *[(rf"over EAGLE3 and {a} \[{b}, {c}\] over\s+ELSI", own("ELSI m=3", col)) for a, b, c, col in PLACES],
    *[(rf"between them\s+\({a} \[{b}, {c}\] from EAGLE3", own("EAGLE3", col, "table2_strong")) for a, b, c, col in PLACES],
    *[(rf"from EAGLE3, {a} \[{b}, {c}\] from ELSI", own("ELSI m=3", col, "table2_strong")) for a, b, c, col in PLACES],
]


def strong_rho(criterion, outcome, T=0.0, prompts=None):
    table = pd.read_csv(RESULTS / "criteria_rank_correlations.csv")
    table = table[(table.protocol == "table2_strong") & (table.nodes == 60)]
    prompts = table.prompts.max() if prompts is None else prompts
    rows = table[(table.criterion == criterion) & (table.outcome == outcome) & (table.temperature == T)
                 & (table.prompts == prompts)]
    assert len(rows) == 1
    return float(rows.rho.iloc[0])


def test_the_strong_drafts_rank_the_same_at_every_point():
    table = pd.read_csv(RESULTS / "criteria_rank_correlations.csv")
    strong = table[(table.protocol == "table2_strong") & (table.nodes == 60)]
    assert sorted(strong.prompts.unique()) == [1001, 3000, 4744] and set(strong.temperature) == {0.0, 1.0}
    assert set(strong["distinct sets"]) == {3}
    want = {"set entropy": -1.0, "probe error": -0.5, "probe agreement": 1.0}
    for r in strong.itertuples():
        assert r.rho == want[r.criterion], (r.prompts, r.temperature, r.criterion, r.outcome, r.rho)
    assert (strong["p (permutation)"] >= 0.3).all()  # "at best about a third"


def test_the_integers_and_words_of_the_second_family():
    text = " ".join(section().split())
    table = pd.read_csv(RESULTS / "criteria_rank_correlations.csv")
    qwen = table[(table.protocol == "table3") & (table.nodes == 60)]
    assert set(qwen["distinct sets"]) == {4} and set(qwen.drafts) == {4} and "four drafts on four sets" in text
    assert f"{probe('training rows', QWEN):,} training and {probe('held-out rows', QWEN):,} held-out rows" in text
    chosen = tuple(int(x) for x in probe("probe's m=3 set", QWEN).split())
    assert f"its m = 3 choice {chosen}" in text
    # a perfect ordering of four: 2 of the 4! orderings reach |rho| = 1, the least two-sided p-value
    assert "2 of 24 orderings" in text and abs(rho("probe error", "step 1", 0.0, "p (permutation)", "table3") - 2 / 24) < 0.01
    drafts = pd.read_csv(RESULTS / "criteria_drafts.csv")
    zero = drafts[(drafts.protocol == "table3") & (drafts.temperature == 0) & (drafts.nodes == 60)]
    assert zero.loc[zero[TAU].idxmax(), "method"] == "probe m=3", "the probe's own draft the best of the four"
    assert own("ELSI m=3", "low")() > 0 and own("ELSI m=3", "low", "table2_strong")() <= 0
    assert own("EAGLE3", "low")() > 0 and own("EAGLE3", "high", "table2_strong")() < 0


def agrees(quoted: str, value: float) -> bool:
    """`quoted` is `value` at the precision it is written (its sign too where it has one)."""
    digits = len(quoted.split(".")[1])
    return (f"{value:+.{digits}f}" if quoted[0] in "+-" else f"{value:.{digits}f}") == quoted


def check_claims(text: str, claims: list, what: str) -> None:
    """Each (pattern, value) claim matches `text` once and its group v equals value() as quoted; every
    decimal of `text` is claimed (`what` names the section in the message)."""
    claimed = []
    for pattern, value in claims:
        found = list(re.finditer(pattern.replace(" ", r"\s+"), text))
        assert len(found) == 1, f"{len(found)} matches of {pattern!r} (want one)"
        m = found[0]
        claimed.append(m.span("v"))
        assert agrees(m.group("v"), value()), f"README says {m.group('v')} where the results hold {value():.6g}: {pattern!r}"
    loose = [m.group() for m in DECIMAL.finditer(text) if m.span() not in claimed]
    assert not loose, f"decimals in {what} that no claim ties to a result: {loose}"


def test_every_number_of_the_criteria_section_is_its_cell():
    check_claims(section(), CLAIMS, "the criteria section")


def test_seventh_of_eleven_is_the_probes_rank_of_eagle3():
    table = pd.read_csv(RESULTS / "criteria_drafts.csv")
    part = table[(table.protocol == "table2") & (table.temperature == 0) & (table.nodes == 60)]
    order = part.sort_values("probe error", kind="stable").method.tolist()
    assert len(order) == 11 and order.index("EAGLE3") + 1 == 7
    assert "7th of the 11" in section()
    assert part.loc[part["probe error"].idxmin(), "method"] == "ELSI m=3, template excluded"
    assert part.loc[part[TAU].idxmax(), "method"] == "ELSI m=3, template excluded"
    assert part.sort_values("probe agreement").method.tolist()[-2:] == ["EAGLE3", "ELSI m=3, template excluded"]


def test_the_integers_of_the_criteria_section():
    text = " ".join(section().split())
    table = pd.read_csv(RESULTS / "criteria_drafts.csv")
    part = table[(table.protocol == "table2") & (table.temperature == 0) & (table.nodes == 60)]
    correlations = pd.read_csv(RESULTS / "criteria_rank_correlations.csv")
    assert f"{len(part)} drafts (Table 2 on SmolLM2: {part.prompts.iloc[0]} training prompts" in text
    table2 = correlations[correlations.protocol == "table2"]
    assert f"sit on {part.layers.nunique()} distinct sets" in text and set(table2["distinct sets"]) == {10}
    assert set(part[part.layers == "29"].method) == {"EAGLE2", "ELSI m=1"}
    assert f"every reply position of the {probe('calibration conversations')} calibration conversations" in text
    assert f"({probe('training rows'):,} training and {probe('held-out rows'):,} held-out rows), {probe('rank')} principal" in text
    chosen = tuple(int(x) for x in probe("probe's m=3 set").split())
    assert f"its own m = 3 set {chosen}" in text
    assert "EAGLE3's (1, 14, 26)" in text and part.set_index("method").loc["EAGLE3", "layers"] == "1 14 26"
    assert "template-excluded (2, 20, 29)" in text
    assert part.set_index("method").loc["ELSI m=3, template excluded", "layers"] == "2 20 29"
