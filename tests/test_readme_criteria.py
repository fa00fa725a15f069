"""The README's section on selection criteria (notebook 08) quotes its committed results: every
decimal number in it is tied by its sentence to one cell of data/results/criteria_*.csv (`CLAIMS`)
and must equal it at the precision quoted; a decimal no claim ties fails, as does a claim whose
sentence is gone."""
from __future__ import annotations

import re

import pandas as pd
import pytest

from elsi_lib.common.cachefiles import REPO_ROOT

RESULTS = REPO_ROOT / "data" / "results"
SECTION = "## Which criterion predicts the trained draft (notebook 08, `make criteria`)"
DECIMAL = re.compile(r"(?<![\w.])[-+]?\d+\.\d+(?!\w|\.\w)")
N = r"(?P<v>[-+]?\d+\.\d+)"
TAU = "tau minus EAGLE3"


def section() -> str:
    text = (REPO_ROOT / "README.md").read_text()
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    return text[start:end if end > 0 else None]


def rho(criterion, outcome, T, column="rho"):
    table = pd.read_csv(RESULTS / "criteria_rank_correlations.csv")
    rows = table[(table.protocol == "table2") & (table.criterion == criterion) & (table.outcome == outcome)
                 & (table.temperature == T) & (table.nodes == 60)]
    assert len(rows) == 1
    return float(rows[column].iloc[0])


def draft(method, column):
    table = pd.read_csv(RESULTS / "criteria_drafts.csv")
    rows = table[(table.protocol == "table2") & (table.method == method) & (table.temperature == 0) & (table.nodes == 60)]
    assert len(rows) == 1
    return float(rows[column].iloc[0])


def interval(pattern_head, criterion, outcome, T):
    """Three claims: 'rho X [L, H]' after `pattern_head`."""
    lo, hi = r"(?P<v>[-+]?\d+\.\d+)", r"(?P<v>[-+]?\d+\.\d+)"
    return [(pattern_head + rf"{N} \[[-+]?\d+\.\d+, [-+]?\d+\.\d+\]", lambda: rho(criterion, outcome, T)),
            (pattern_head + rf"[-+]?\d+\.\d+ \[{lo}, [-+]?\d+\.\d+\]", lambda: rho(criterion, outcome, T, "low (sets)")),
            (pattern_head + rf"[-+]?\d+\.\d+ \[[-+]?\d+\.\d+, {hi}\]", lambda: rho(criterion, outcome, T, "high (sets)"))]


CLAIMS = [
    (rf"ridge chosen by held-out error \({N}\)", lambda: draft("EAGLE3", "ridge")),
    *interval(r"rank them:\*\* rho ", "set entropy", "step 1", 0.0),
    *interval(r"accuracy and\s+", "set entropy", TAU, 0.0),
    *interval(r"error does:\*\* rho ", "probe error", "step 1", 0.0),
    *interval(r"step-1 accuracy, ", "probe error", TAU, 0.0),
    *interval(r"at T = 0 and ", "probe error", TAU, 1.0),
    (rf"\(error {N}\)", lambda: draft("ELSI m=3, template excluded", "probe error")),
    (rf"best draft at T = 0 \({N} against EAGLE3\)", lambda: draft("ELSI m=3, template excluded", TAU)),
    (rf"highest step-1 accuracy \({N}\)", lambda: draft("EAGLE3", "step 1")),
    (rf"scores {N}, 7th of the 11", lambda: draft("EAGLE3", "probe error")),
    (rf"ranks EAGLE3 second \({N},", lambda: draft("EAGLE3", "probe agreement")),
    (rf"template-excluded set's {N}\)", lambda: draft("ELSI m=3, template excluded", "probe agreement")),
    *interval(r"less well: rho ", "probe agreement", "step 1", 0.0),
]


def agrees(quoted: str, value: float) -> bool:
    digits = len(quoted.split(".")[1])
    return (f"{value:+.{digits}f}" if quoted[0] in "+-" else f"{value:.{digits}f}") == quoted


def test_every_number_of_the_criteria_section_is_its_cell():
    text, claimed = section(), []
    for pattern, value in CLAIMS:
        found = list(re.finditer(pattern.replace(" ", r"\s+"), text))
        assert len(found) == 1, f"{len(found)} matches of {pattern!r} (want one)"
        m = found[0]
        claimed.append(m.span("v"))
        assert agrees(m.group("v"), value()), f"README says {m.group('v')} where the results hold {value():.6g}: {pattern!r}"
    loose = [m.group() for m in DECIMAL.finditer(text) if m.span() not in claimed]
    assert not loose, f"decimals in the criteria section that no claim ties to a result: {loose}"


def test_seventh_of_eleven_is_the_probes_rank_of_eagle3():
    table = pd.read_csv(RESULTS / "criteria_drafts.csv")
    part = table[(table.protocol == "table2") & (table.temperature == 0) & (table.nodes == 60)]
    order = part.sort_values("probe error", kind="stable").method.tolist()
    assert len(order) == 11 and order.index("EAGLE3") + 1 == 7
    assert "7th of the 11" in section()
    assert part.loc[part["probe error"].idxmin(), "method"] == "ELSI m=3, template excluded"
    assert part.loc[part[TAU].idxmax(), "method"] == "ELSI m=3, template excluded"
    assert part.sort_values("probe agreement").method.tolist()[-2:] == ["EAGLE3", "ELSI m=3, template excluded"]
