"""The tables each page of the documentation site shows, made from their CSV (never the Markdown
beside it) and checked as read: the accepted-token tables by `read_tau_csv`, a protocol's records table
against what its records give now, the CSVs a finding reads by that finding (`findings`), and every other
by its declared check (`TABLE_CHECKS`: a table without one is refused); every table's intervals hold
their estimates. A file that is missing is a `MissingResult`; one that is wrong, a ValueError naming the
file, the row and the column.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ..experiments.tau_files import read_tau_csv, tau_markdown
from ..ledger import paper_tables
from ..ledger.paper_tables import paper_table
from ..paper.plots import csv_text, markdown_table
from .findings import FAMILIES, MissingResult, layer_ids, check_made, n_layers_of, results_csv


def _pair_gains(folder: Path, stem: str) -> pd.DataFrame:
    path = folder / f"{stem}.csv"
    rows = results_csv(
        folder, stem, ("S_1 alone", "S_1 with it", "gain", "median gain"), ("model",),
        integers=("seed layer", "best companion", "companions that lower S_1"),
        enums={"model": FAMILIES}, ranges={"S_1 alone": (0, np.inf), "S_1 with it": (0, np.inf)},
        unique=("model", "seed layer"),
    )  # fmt: skip
    for i, r in rows.iterrows():
        N = n_layers_of(r.model)
        if not (0 <= r["seed layer"] < N and 0 <= r["best companion"] < N and 0 <= r["companions that lower S_1"] < N):
            raise ValueError(f"{path}, row {i + 2}: a layer or a count of layers outside {r.model}'s {N}")
        if abs(r.gain - (r["S_1 with it"] - r["S_1 alone"])) > 2e-5 * max(1.0, abs(r.gain)):
            raise ValueError(
                f"{path}, row {i + 2}: gain {r.gain}, but S_1 with it less S_1 alone is {r['S_1 with it'] - r['S_1 alone']:.6g}"
            )
        others, lower = N - 1, r["companions that lower S_1"]  # the seed's companions: every other layer
        if r["best companion"] == r["seed layer"] or r["median gain"] > r.gain + 1e-9:
            raise ValueError(
                f"{path}, row {i + 2}: the best companion is another layer whose gain ({r.gain}) no companion's "
                f"median ({r['median gain']}) exceeds"
            )
        if (r["median gain"] < 0 and 2 * lower < others) or (r["median gain"] > 0 and 2 * lower > others):
            raise ValueError(
                f"{path}, row {i + 2}: median gain {r['median gain']} with {lower} of {others} companions lowering S_1"
            )
    return rows


def _bootstrap(folder: Path, stem: str) -> pd.DataFrame:
    path = folder / f"{stem}.csv"
    rows = results_csv(
        folder, stem, ("share",), ("model", "layers", "chosen on all prompts"), integers=("count",),
        enums={"model": FAMILIES, "chosen on all prompts": (True, False)}, ranges={"count": (1, np.inf)},
        unique=("model", "layers"),
    )  # fmt: skip
    for model, group in rows.groupby("model"):
        total = group["count"].sum()
        for i, r in group.iterrows():
            layer_ids(path, i, r.layers, n_layers_of(model))
            if abs(r.share - r["count"] / total) > 1e-4:
                raise ValueError(
                    f"{path}, row {i + 2}: share {r.share}, but its count {r['count']} of {total} is {r['count'] / total:.4g}"
                )
        if int(group["chosen on all prompts"].sum()) != 1:
            raise ValueError(
                f"{path}: {model} has {int(group['chosen on all prompts'].sum())} sets chosen on all prompts, not one"
            )
    return rows


def _paired(folder: Path, stem: str) -> pd.DataFrame:
    rows = results_csv(
        folder, stem, ("diff", "low", "high", "P(ahead)", "temperature"), ("method",), integers=("nodes", "questions"),
        ranges={"P(ahead)": (0, 1), "questions": (1, np.inf), "temperature": (0, 2), "nodes": (1, np.inf)},
        unique=("method", "nodes", "temperature"),
    )  # fmt: skip
    path = folder / f"{stem}.csv"
    for i, r in rows.iterrows():  # P(ahead): the resamples' share above zero, so beyond the interval's side
        if not r.low <= r["diff"] <= r.high:
            raise ValueError(f"{path}, row {i + 2}: diff {r['diff']} outside its interval [{r.low}, {r.high}]")
        if (r.low > 0 and r["P(ahead)"] < 0.95) or (r.high < 0 and r["P(ahead)"] > 0.05):
            raise ValueError(
                f"{path}, row {i + 2}: P(ahead) {r['P(ahead)']} beside an interval [{r.low}, {r.high}] wholly on one "
                "side of zero (its resamples lie there: P(ahead) at least 0.95 above, at most 0.05 below)"
            )
    return rows


def _curve(folder: Path, stem: str) -> pd.DataFrame:
    path = folder / f"{stem}.csv"
    steps = ("step 1", "step 2", "step 3")
    rows = results_csv(
        folder, stem, (*steps, "tau", "low", "high", "minus EAGLE3", "temperature"), ("method",),
        integers=("prompts", "reply_tokens", "batches", "nodes"),
        ranges={**{s: (0, 1) for s in steps}, "tau": (1, np.inf), "prompts": (1, np.inf), "temperature": (0, 2)},
        unique=("prompts", "temperature", "nodes", "method"),
    )  # fmt: skip
    for end in ("diff low", "diff high"):  # empty on EAGLE3's rows; a number everywhere else
        if end not in rows.columns:
            raise ValueError(f"{path}: no column {end!r} (the page reads it)")
        parsed = pd.to_numeric(rows[end], errors="coerce")
        bad = rows.index[(parsed.isna() & rows[end].notna()) | np.isinf(parsed.to_numpy(float))]
        if len(bad):
            raise ValueError(f"{path}, row {bad[0] + 2}: {end} = {rows[end][bad[0]]!r}, not a number")
        rows[end] = parsed
    lacking = rows.index[(rows.method != "EAGLE3") & (rows["diff low"].isna() | rows["diff high"].isna())]
    if len(lacking):
        raise ValueError(f"{path}, row {lacking[0] + 2}: a difference from EAGLE3 without its interval")
    outside = rows.index[
        (rows.method != "EAGLE3")
        & ~((rows["diff low"] <= rows["minus EAGLE3"]) & (rows["minus EAGLE3"] <= rows["diff high"]))
    ]
    if len(outside):
        raise ValueError(f"{path}, row {outside[0] + 2}: minus EAGLE3 outside its interval [diff low, diff high]")
    return rows


def _interchangeability(folder: Path, stem: str) -> pd.DataFrame:
    path = folder / f"{stem}.csv"
    shares = [c for c in pd.read_csv(folder / f"{stem}.csv", nrows=0).columns if c.startswith("pairs with CKA")]
    rows = results_csv(
        folder, stem, (*shares, "mean off-diagonal CKA", "largest compartment share"), ("model", "family"),
        integers=("layers", "compartments"), enums={"model": FAMILIES},
        ranges={**{c: (0, 1) for c in (*shares, "mean off-diagonal CKA", "largest compartment share")}, "compartments": (1, np.inf)},
        unique=("model",),
    )  # fmt: skip
    for i, r in rows.iterrows():
        if r.layers != n_layers_of(r.model) or r.compartments > r.layers:
            raise ValueError(
                f"{path}, row {i + 2}: layers {r.layers} and compartments {r.compartments}: {r.model} has {n_layers_of(r.model)} layers"
            )
        if r["largest compartment share"] < 1 / r.compartments - 1e-6:  # the largest of k parts holds 1/k at least
            raise ValueError(
                f"{path}, row {i + 2}: largest compartment share {r['largest compartment share']} of {r.compartments} compartments"
            )
        by_threshold = sorted(shares, key=lambda c: float(c.rsplit(">=", 1)[1]))
        if any(r[a] < r[b] for a, b in zip(by_threshold, by_threshold[1:])):  # above a higher bar: fewer pairs
            raise ValueError(f"{path}, row {i + 2}: {by_threshold}: shares must not grow with the threshold")
    return rows


TABLE_CHECKS = {  # the checks of each table a page shows (beyond the findings' own CSVs and the records')
    "fig03_pair_gains": _pair_gains,
    "table1_bootstrap": _bootstrap,
    "_paired_": _paired,
    "_learning_curve_": _curve,
    "families_interchangeability": _interchangeability,
}

# the tables whose CSV a finding reads and checks whole (every row), or the ledger's against the records
CHECKED_BY_FINDINGS = (
    "fig02_layer_entropy_summary",
    "fig04_variance_reduction",
    "fig05_boundaries",
    "table1_layer_selection",
    "criteria_rank_correlations",
    "families_compared",
    "comparisons_seed_level",
    "ledger_findings",
    "criteria_pooled",
)


def table_markdown(folder: Path, stem: str) -> str:
    """A page's table, made from its CSV (never the .md beside it, which could say otherwise): the
    accepted-token tables as `tau_markdown` lays them out (their CSV checked by `read_tau_csv`), a
    protocol's records table as `paper_tables.markdown` (the CSV what its records give), any other as
    `markdown_table`."""
    path = folder / f"{stem}.csv"
    if not path.is_file():
        raise MissingResult(f"{path}: a page of the site needs it (run the notebook that writes it)")
    if "_accepted_tokens_" in stem:
        return tau_markdown(read_tau_csv(path))
    if "_records_" in stem:
        table = paper_table(stem.split("_records_")[0])
        check_made(path, csv_text(table), "python -m elsi_lib.study.ledger.paper_tables")
        return paper_tables.markdown(table)
    try:
        table = pd.read_csv(path)
    except (ValueError, pd.errors.ParserError) as err:
        raise ValueError(f"{path}: not a results CSV ({err})") from None
    if table.empty:
        raise ValueError(f"{path}: no rows")
    checks = [check for key, check in TABLE_CHECKS.items() if key in stem]
    if not checks and stem not in CHECKED_BY_FINDINGS:  # every table a page shows is checked somewhere
        raise ValueError(f"{path}: no check is declared for this table (tables.TABLE_CHECKS)")
    for check in checks:
        check(folder, stem)
    _check_intervals(table, path)
    return markdown_table(table)


INTERVALS = {  # (low, high) -> the estimate they bound, the first of these columns a table has
    ("low", "high"): ("diff", "tau", "value"),
    ("diff low", "diff high"): ("minus EAGLE3",),
    ("low (sets)", "high (sets)"): ("rho",),
    ("low (questions and sets)", "high (questions and sets)"): ("rho",),
}


def _check_intervals(table: pd.DataFrame, path: Path) -> None:
    """A table's intervals hold their estimates (a diff, a tau, a value between its low and high), and a
    learning curve's "minus EAGLE3" is its tau less EAGLE3's at the same point: ValueError naming the row."""
    for (low, high), estimates in INTERVALS.items():
        estimate = next((c for c in estimates if c in table.columns), None)
        if estimate is None or low not in table.columns or high not in table.columns:
            continue
        values = [pd.to_numeric(table[c], errors="coerce").to_numpy(float) for c in (low, estimate, high)]
        lo, mid, hi = values
        bad = np.flatnonzero(np.isfinite(lo) & np.isfinite(hi) & ~((lo <= mid + 1e-9) & (mid <= hi + 1e-9)))
        if len(bad):
            i = bad[0]
            raise ValueError(f"{path}, row {i + 2}: {estimate} {mid[i]} outside its interval [{lo[i]}, {hi[i]}]")
    if {"prompts", "method", "tau", "minus EAGLE3"} <= set(table.columns):  # a learning curve
        points = [c for c in ("prompts", "temperature", "nodes") if c in table.columns]
        base = table[table.method == "EAGLE3"].set_index(points)["tau"]
        for i, r in table.iterrows():
            key = tuple(r[c] for c in points)
            key = key[0] if len(key) == 1 else key
            if (
                key in base.index
                and np.isfinite(r["minus EAGLE3"])
                and abs(r.tau - base[key] - r["minus EAGLE3"]) > 2e-5
            ):
                raise ValueError(
                    f"{path}, row {i + 2}: minus EAGLE3 {r['minus EAGLE3']}, but its tau less EAGLE3's is {r.tau - base[key]:.6g}"
                )
