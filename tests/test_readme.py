"""The README's findings quote the committed tables: every number it states there must be found
in `data/results/*.csv` at the precision it is quoted, so a rerun that changes a result makes the
prose fail here instead of going stale."""
from __future__ import annotations

import re

from elsi_lib.common.cachefiles import REPO_ROOT

RESULTS = REPO_ROOT / "data" / "results"
NUMBER = r"\d+(?:\.\d+)?"


def findings(heading: str = "### What the figures show on these models") -> str:
    text = (REPO_ROOT / "README.md").read_text()
    start = text.index(heading)
    return text[start:text.index("\n## ", start)]


def table_values() -> list[float]:
    values = []
    for csv in RESULTS.glob("*.csv"):
        values += [float(v) for v in re.findall(r"-?\d+(?:\.\d+)?(?:e-?\d+)?", csv.read_text())]
    return values


def matches(quoted: str, values: list[float], percent: bool = False) -> bool:
    digits = len(quoted.split(".")[1]) if "." in quoted else 0
    target = float(quoted)
    candidates = values + ([100 * v for v in values] if percent else [])
    return any(abs(round(abs(v), digits) - target) < 10 ** -(digits + 3) for v in candidates)


def test_findings_quote_the_committed_tables():
    section, values = findings(), table_values()
    decimals = re.findall(r"(?<![\w.])\d+\.\d+(?![\w.])", section)
    percents = [n for low, high in re.findall(rf"({NUMBER})(?:-({NUMBER}))?\s?%", section) for n in (low, high) if n]
    assert decimals and percents, "no numbers found: did the findings section move?"
    missing = [q for q in decimals if not matches(q, values)] + \
              [f"{q} %" for q in percents if not matches(q, values, percent=True)]
    assert not missing, f"README findings quote numbers that no table in data/results holds: {missing}"


def test_accepted_token_findings_quote_the_committed_tables():
    """The accepted-token results quoted in the README are in data/results/table2_*.csv."""
    section = findings("### What the accepted-token tables show")
    values = []
    for csv in RESULTS.glob("table2_*.csv"):
        values += [float(v) for v in re.findall(r"-?\d+(?:\.\d+)?(?:e-?\d+)?", csv.read_text())]
    decimals = re.findall(r"(?<![\w.])[-+]?\d+\.\d+(?![\w.])", section)
    assert len(decimals) >= 10, "no numbers found: did the accepted-token findings move?"
    missing = [q for q in decimals if not matches(q.lstrip("+-"), values)]
    assert not missing, f"README accepted-token findings quote numbers no table2 CSV holds: {missing}"
