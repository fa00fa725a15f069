"""The README is a front door: at most 15 KB; the evidence line of its `elsi select` example is the one
the evidence file gives today (draft/evidence.py), the numbers of its opening are that file's, the
notebooks and files it names exist."""

import re

from elsi_lib.common.cachefiles import REPO_ROOT
from elsi_lib.draft import evidence as ev

README = REPO_ROOT / "README.md"


def test_the_readme_is_short():
    assert README.stat().st_size <= 15_000


def test_its_evidence_line_is_the_committed_results():
    text = README.read_text()
    quoted = [line for line in text.splitlines() if line.startswith("evidence: ")]
    assert quoted, "the README's example shows no evidence line"
    answer = re.search(r"^probe m=3 +\(([\d, ]+)\)", text, re.M)  # the example's set, which the line compares
    assert answer, "the README's example shows no probe m=3 row"
    layers = tuple(int(x) for x in answer[1].split(","))
    assert quoted[0] == ev.comparison_lines(ev.load(), "smollm2-135m", "probe", 3, layers)[0]  # the default method's


def test_what_it_names_exists():
    text = README.read_text()
    for notebook in set(re.findall(r"`(\d\d_\w+\.ipynb)`", text)):
        assert (REPO_ROOT / "notebooks" / notebook).is_file(), notebook
    for path in set(re.findall(r"\]\(([^)#:]+)\)", text)):
        assert (REPO_ROOT / path).exists(), path


def test_its_criteria_line_is_the_committed_pooled_test():
    quoted = [line for line in README.read_text().splitlines() if line.startswith("criteria: ")]
    assert quoted == [ev.criterion_line(ev.load())]


def _cell(c: dict) -> str:
    return f"{c['diff']:+.3f} [{c['low']:+.3f}, {c['high']:+.3f}]"


def _seeds(c: dict) -> str:
    """ "one seed each", or "one seed each against EAGLE3's two": the seeds of a comparison's two sides."""
    words = {1: "one", 2: "two", 3: "three"}
    mine = f"{words[c['seeds']]} seed{'s' * (c['seeds'] > 1)} each"
    return mine if c["seeds"] == c["baseline seeds"] else f"{mine} against EAGLE3's {words[c['baseline seeds']]}"


def _side(c: dict) -> str:
    """ "two seeds each", or "one seed against EAGLE3's two": one comparison's seeds on both sides."""
    words = {1: "one", 2: "two", 3: "three"}
    mine = f"{words[c['seeds']]} seed{'s' * (c['seeds'] > 1)}"
    return (
        f"{mine} each" if c["seeds"] == c["baseline seeds"] else f"{mine} against EAGLE3's {words[c['baseline seeds']]}"
    )


def test_its_opening_numbers_are_the_evidence_files():
    """Every number the opening quotes is a seed-level comparison in the evidence file, with the seeds
    it names; "every trained set is below EAGLE3's at T = 0" on SmolLM2 holds for every draft there."""
    evidence = ev.load()
    text = " ".join(README.read_text().split())
    rows = [c for c in evidence["comparisons"] if c["nodes"] == 60]

    def one(protocol, method, t):
        (c,) = [c for c in rows if c["protocol"] == protocol and c["method"] == method and c["temperature"] == t]
        return c

    probe = one("table3_f32", "probe m=3", 0.0)
    assert f"probe's set leads at T = 0 ({_cell(probe)}, one seed against EAGLE3's three)" in text
    assert (probe["seeds"], probe["baseline seeds"], probe["prompts"]) == (1, 3, 936) and probe["low"] > 0
    assert one("table3_f32", "probe m=3", 1.0)["low"] <= 0  # "but not at T = 1"
    elsi = one("table3_f32", "ELSI m=3", 0.0)
    assert f"ELSI's set does not lead at three seeds each ({_cell(elsi)})" in text
    assert (elsi["seeds"], elsi["baseline seeds"]) == (3, 3) and elsi["low"] <= 0
    strong, paper = one("qwen_strong", "probe m=3", 0.0), one("qwen_strong", "ELSI m=3", 0.0)
    if (strong["seeds"], strong["baseline seeds"]) == (paper["seeds"], paper["baseline seeds"]):  # one phrase
        said = f"the probe's lead is not shown ({_cell(strong)}), nor ELSI's ({_cell(paper)}), {_seeds(strong)}"
    else:
        said = f"the probe's lead is not shown ({_cell(strong)}, {_side(strong)}), nor ELSI's ({_cell(paper)}, {_side(paper)})"
    assert f"on 4,744 prompts {said}" in text
    assert strong["low"] <= 0 and paper["low"] <= 0 and strong["prompts"] == 4744
    smol = one("table2_strong", "ELSI m=3", 0.0)
    probe = one("table2_strong", "probe m=3", 0.0)
    words = {1: "one", 2: "two", 3: "three"}
    assert (
        f"ELSI's and the probe's with intervals below zero ({_cell(smol)}, {words[smol['seeds']]} seeds against "
        f"{words[smol['baseline seeds']]}; {_cell(probe)}, {words[probe['seeds']]} seeds each)" in text
    )
    assert smol["high"] < 0 and probe["high"] < 0 and probe["seeds"] == probe["baseline seeds"]
    assert all(c["diff"] < 0 for c in rows if c["family"] == "smollm2-135m" and c["temperature"] == 0.0)


def test_its_decision_is_the_evidence_files():
    """The example's decision line: recomputed from the criterion values it prints and the evidence file,
    the same verdict and predicted cells; and "on both families the command keeps the default" holds for
    the probe's and ELSI's drafted sets of each family at their recorded criteria."""
    text = README.read_text()
    line = next(l for l in text.splitlines() if l.strip().startswith("probe error: ("))
    m = re.search(r"probe error: \(([\d, ]+)\) ([\d.]+), the default ([\d.]+)", line)
    best, score, base = tuple(int(v) for v in m.group(1).split(", ")), float(m.group(2)), float(m.group(3))
    made = ev.decision("probe", "smollm2-135m", score - base, best, (1, 14, 26), ev.load())
    for t, (d, lo, hi) in made.predicted.items():
        assert f"T = {t:g}: {d:+.3f} [{lo:+.3f}, {hi:+.3f}]" in line
    assert ("decision: keep the default (1, 14, 26)" in text) == (made.verdict == "keep the default")
    evidence = ev.load()
    for c in evidence["comparisons"]:
        if c["nodes"] == 60 and c["temperature"] == 0.0 and c["method"] in ("probe m=3", "ELSI m=3"):
            criterion = "probe" if c["method"].startswith("probe") else "elsi"
            dscore = c["d probe error"] if criterion == "probe" else c["d set entropy"]
            default = tuple(map(int, c["baseline layers"].split()))
            chosen = tuple(map(int, c["layers"].split()))
            assert ev.decision(criterion, c["family"], dscore, chosen, default, evidence).verdict == "keep the default"
