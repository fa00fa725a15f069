"""What each page of the documentation site says, read from the committed results and checked as read
(`site` assembles the pages): each paper page's finding from its results CSV (`results_csv`: every row's
columns, values, spellings and duplicates, then what the row, the model and the other rows must agree
on), the ledger's tables and the evidence file against what the committed records give now (the tables
the pages show: `tables`). A file a page needs that is missing is a
`MissingResult`; one that is wrong, a ValueError naming the file, the row and the column.
"""

from __future__ import annotations

import csv
import json
import re
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from ...draft import evidence as ev
from ...draft.evidence_checks import NODES
from ...draft.pooled_checks import OUTCOMES, POOLED_CRITERIA, check_p
from ...hidden.calibration import SELECTIONS
from ...inputs.models import REGISTRY
from ...selection.conventions import eagle3_layers
from ..ledger import twins
from ..ledger.evidence_file import build as build_evidence
from ..ledger.evidence_file import comparisons_table, pooled_criteria_rows
from ..ledger.ledger_tables import records_digest, tables_now
from ..paper.layer_sets import TABLE1_METHODS, TABLE1_SETTINGS
from ..paper.plots import csv_text

FAMILIES = ("smollm2-135m", "qwen2.5-coder-0.5b")


class MissingResult(FileNotFoundError):
    """A results file a page needs is not there."""


def results_csv(
    folder: Path,
    stem: str,
    numbers: tuple = (),
    texts: tuple = (),
    keep=None,
    empty_ok: bool = False,
    integers: tuple = (),
    *,
    enums: dict | None = None,
    ranges: dict | None = None,
    unique: tuple = (),
    optional_numbers: tuple = (),
) -> pd.DataFrame:
    """A results CSV a page reads, checked as it is read, in every row (not only those `keep` keeps): its
    `numbers`, `texts` and `integers` columns there, every number finite, every text non-empty, every
    integer written as one; each `enums` column one of its values (a value spelt otherwise would drop a
    line without a word); each `ranges` column within its (low, high); no two rows alike in the `unique`
    columns (two would print two contradicting lines); then a row at least of those `keep` keeps
    (`empty_ok`: a table of no rows says "none", as numeric_twins does before any twin is compared);
    `optional_numbers` columns there, each cell a number or empty, read as floats.
    ValueError naming the file, the row and the column. Returns the rows kept."""
    path = folder / f"{stem}.csv"
    if not path.is_file():
        raise MissingResult(f"{path}: a page of the site needs it (run the notebook that writes it)")
    try:
        rows = pd.read_csv(path, dtype={c: str for c in integers})
        with open(path, newline="", encoding="utf-8-sig") as handle:
            header = next(csv.reader(handle), [])
    except (ValueError, pd.errors.ParserError, csv.Error) as err:
        raise ValueError(f"{path}: not a results CSV ({err})") from None
    twice = sorted({c for c in header if header.count(c) > 1})
    if twice:  # pandas renames the second "x" to "x.1" and the page reads the first without a word
        raise ValueError(f"{path}: column(s) {twice} named twice in its header")
    enums, ranges = enums or {}, ranges or {}
    missing = [
        c
        for c in dict.fromkeys((*numbers, *texts, *integers, *enums, *ranges, *unique, *optional_numbers))
        if c not in rows.columns
    ]
    if missing:
        raise ValueError(f"{path}: no column(s) {missing} (a page reads them)")
    for column in integers:  # as written, in every row: True, or 3.7 for a layer, is no whole number
        written = rows[column].astype(str)
        bad = np.flatnonzero(~written.str.fullmatch(r"-?\d+").to_numpy(bool))
        if len(bad):
            raise ValueError(f"{path}, row {bad[0] + 2}: {column} = {written.iloc[bad[0]]!r}, not a whole number")
        rows[column] = written.astype(int)
    for column in numbers:  # text is never a number; an empty cell only in a row the page does not read
        if rows[column].dtype == bool:  # a bool column (True) would pass as 1.0
            raise ValueError(f"{path}: {column} holds true/false, not numbers")
        values = pd.to_numeric(rows[column], errors="coerce").to_numpy(float)
        read = np.ones(len(rows), bool) if keep is None else rows.index.isin(keep(rows).index)
        bad = np.flatnonzero(np.isinf(values) | (np.isnan(values) & (rows[column].notna().to_numpy() | read)))
        if len(bad):
            raise ValueError(f"{path}, row {bad[0] + 2}: {column} = {_cell(rows[column].iloc[bad[0]])}, not a number")
    for column in optional_numbers:  # a number or empty (no value there), never text or infinite
        parsed = pd.to_numeric(rows[column], errors="coerce")
        bad = np.flatnonzero(((parsed.isna() & rows[column].notna()) | np.isinf(parsed.to_numpy(float))).to_numpy())
        if len(bad):
            raise ValueError(f"{path}, row {bad[0] + 2}: {column} = {_cell(rows[column].iloc[bad[0]])}, not a number")
        rows[column] = parsed
    for column in texts:
        bad = np.flatnonzero(rows[column].isna().to_numpy() | (rows[column].astype(str).str.strip() == ""))
        if len(bad):
            raise ValueError(f"{path}, row {bad[0] + 2}: {column} is empty")
        spaced = np.flatnonzero((rows[column].astype(str) != rows[column].astype(str).str.strip()).to_numpy())
        if len(spaced):  # "x " is another row than "x" to every check of one row each
            raise ValueError(
                f"{path}, row {spaced[0] + 2}: {column} = {rows[column].iloc[spaced[0]]!r}: spaces around it"
            )
    for column, allowed in enums.items():
        bad = np.flatnonzero(~rows[column].isin(list(allowed)).to_numpy(bool))
        if len(bad):
            raise ValueError(
                f"{path}, row {bad[0] + 2}: {column} = {_cell(rows[column].iloc[bad[0]])}, not one of {sorted(map(str, allowed))}"
            )
    for column, (low, high) in ranges.items():
        values = pd.to_numeric(rows[column], errors="coerce").to_numpy(float)
        bad = np.flatnonzero(~np.isnan(values) & ~((values >= low) & (values <= high)))
        if len(bad):
            raise ValueError(
                f"{path}, row {bad[0] + 2}: {column} = {_cell(rows[column].iloc[bad[0]])}, not in [{low}, {high}]"
            )
    if unique:
        again = np.flatnonzero(rows.duplicated(list(unique)).to_numpy(bool))
        if len(again):
            first = rows.index[rows[list(unique)].eq(rows.iloc[again[0]][list(unique)]).all(axis=1)][0]
            raise ValueError(f"{path}, rows {first + 2} and {again[0] + 2}: the same {', '.join(unique)}: one row each")
    rows = rows if keep is None else keep(rows)
    if rows.empty and not empty_ok:
        raise ValueError(f"{path}: no row the page reads: it would say nothing")
    return rows


def _cell(value) -> str:
    """A cell as a message quotes it: numpy's numbers as plain ones."""
    return repr(value.item() if isinstance(value, np.generic) else value)


def layer_ids(path: Path, row: int, text: str, n_layers: int, size: int | None = None) -> tuple:
    """A layer set as the tables write it ("(1, 14, 26)", "[0, 8]"): ascending distinct ids of the model's
    `n_layers` (`size` of them, when given); ValueError naming the file and the row otherwise."""
    written = re.fullmatch(r"\(\s*(\d+(?:\s*,\s*\d+)*)\s*,?\s*\)|\[\s*(\d+(?:\s*,\s*\d+)*)\s*\]", str(text).strip())
    ids = tuple(int(v) for v in (written[1] or written[2]).split(",")) if written else ()
    if not ids or list(ids) != sorted(set(ids)) or ids[0] < 0 or ids[-1] >= n_layers or (size and len(ids) != size):
        raise ValueError(
            f"{path}, row {row + 2}: layers {text!r}: {size or 'some'} ascending distinct ids of {n_layers} layers expected"
        )
    return ids


def n_layers_of(model: str) -> int:
    return REGISTRY[model].n_layers


def wave(folder):
    rows = results_csv(
        folder,
        "fig02_layer_entropy_summary",
        ("max S_1", "min S_1", "range", "top-row energy share, median"),
        ("model",),
        integers=("layers", "argmax layer", "argmin layer"),
        enums={"model": FAMILIES},
        ranges={"min S_1": (0, np.inf), "top-row energy share, median": (0, 1)},
        unique=("model",),
    )
    path = folder / "fig02_layer_entropy_summary.csv"
    for i, r in rows.iterrows():
        problem = (
            f"layers {r.layers}, but {r.model} has {n_layers_of(r.model)}"
            if r.layers != n_layers_of(r.model)
            else "a peak or trough layer outside the model's"
            if not (0 <= r["argmax layer"] < r.layers and 0 <= r["argmin layer"] < r.layers)
            else "max S_1 below min S_1"
            if r["max S_1"] < r["min S_1"]
            else "range is not max S_1 - min S_1"
            if abs(r["range"] - (r["max S_1"] - r["min S_1"])) > 1e-5 * max(1.0, abs(r["range"]))
            else None
        )
        if problem:
            raise ValueError(f"{path}, row {i + 2}: {problem}")
    return [
        f"- {r.model}: per-layer entropy S_1 peaks at layer {r['argmax layer']} ({r['max S_1']:.3f}) and "
        f"falls to {r['min S_1']:.4f} at layer {r['argmin layer']}; the largest block row holds a median "
        f"{r['top-row energy share, median']:.0%} of Z's energy (an attention sink)."
        for _, r in rows.iterrows()
    ]


def filtering(folder):
    reductions = ("early reduction %", "middle reduction %", "late reduction %")
    rows = results_csv(
        folder,
        "fig04_variance_reduction",
        reductions,
        ("model", "selection", "regimes"),
        keep=lambda rows: rows[rows.selection != "all"],  # the baseline the reductions are against: none its own
        enums={"model": FAMILIES, "selection": tuple(SELECTIONS)},
        ranges={c: (-np.inf, 100) for c in reductions},  # a variance cut by more than all of it is no cut
        unique=("model", "selection"),
    )
    path = folder / "fig04_variance_reduction.csv"
    _regimes_agree(path, rows, folder)
    kept = rows[rows.selection == "entropy"]
    lacking = sorted(set(rows.model) - set(kept.model))
    if lacking:
        raise ValueError(f"{path}: no entropy row for {lacking}: the page reads it")
    return [
        f"- {r.model}: the entropy filter cuts the cross-prompt variance by {r['early reduction %']:.1f}% "
        f"(early layers), {r['middle reduction %']:.1f}% (middle), {r['late reduction %']:.1f}% (late)."
        for _, r in kept.iterrows()
    ]


def _regimes_agree(path: Path, rows: pd.DataFrame, folder: Path) -> None:
    """One split into regimes a model (its every row's), the one Fig. 5's entropy boundaries give: the two
    most prominent of them (`layer_measures.regimes`), so both among them, and thirds of the depth only
    where there are fewer than two."""
    boundaries = {}
    if (folder / "fig05_boundaries.csv").is_file():  # Fig. 5's page checks its own file: read what parses
        fig05 = pd.read_csv(folder / "fig05_boundaries.csv")
        for i, r in fig05.iterrows():
            try:
                if r.selection == "entropy":
                    text, N = r["boundaries (after layer)"], n_layers_of(r.model)
                    boundaries[r.model] = set(layer_ids(folder / "fig05_boundaries.csv", i, text, N))
            except (KeyError, ValueError, AttributeError):
                continue
    for model, group in rows.groupby("model", sort=False):
        texts = group.regimes.unique()
        if len(texts) != 1:
            raise ValueError(
                f"{path}, row {group.index[1] + 2}: {model}'s rows split its layers two ways: {list(texts)}"
            )
        named = re.fullmatch(r"CKA boundaries after layers (\d+) and (\d+)", texts[0])
        found = boundaries.get(model)
        if found is None:
            continue
        agrees = {int(named[1]), int(named[2])} <= found if named else len(found) < 2 and texts[0].startswith("thirds")
        if not agrees:
            raise ValueError(
                f"{path}, row {group.index[0] + 2}: {model}'s regimes {texts[0]!r}, but Fig. 5's entropy boundaries "
                f"are after layers {sorted(found)} (fig05_boundaries.csv)"
            )


def compartments(folder):
    rows = results_csv(
        folder,
        "fig05_boundaries",
        ("mean off-diagonal CKA",),
        ("model", "selection", "boundaries (after layer)"),
        enums={"model": FAMILIES, "selection": tuple(SELECTIONS)},
        ranges={"mean off-diagonal CKA": (0, 1)},
        unique=("model", "selection"),
    )
    for i, r in rows.iterrows():  # a boundary after layer l lies between l and l + 1: never after the last
        layer_ids(folder / "fig05_boundaries.csv", i, r["boundaries (after layer)"], n_layers_of(r.model) - 1)
    return [
        f"- {r.model}, {r.selection} tokens: CKA boundaries after layers {r['boundaries (after layer)']}, "
        f"mean off-diagonal CKA {r['mean off-diagonal CKA']:.3f}."
        for _, r in rows.iterrows()
    ]


def selection(folder):
    path = folder / "table1_layer_selection.csv"
    rows = results_csv(
        folder,
        "table1_layer_selection",
        ("entropy",),
        ("model", "setting", "method", "layers"),
        integers=("m",),
        enums={"model": FAMILIES, "setting": tuple(TABLE1_SETTINGS), "method": tuple(TABLE1_METHODS)},
        ranges={"m": (1, np.inf), "entropy": (0, np.inf)},
        unique=("model", "setting", "method", "m"),
    )
    for i, r in rows.iterrows():
        N = n_layers_of(r.model)
        ids = layer_ids(path, i, r.layers, N, r.m)
        if r.method == "EAGLE3" and ids != tuple(eagle3_layers(N)):
            raise ValueError(f"{path}, row {i + 2}: EAGLE3's layers {r.layers}, its rule gives {eagle3_layers(N)}")
    best = rows[rows.method == "exhaustive"].set_index(["model", "setting", "m"])["entropy"]
    for i, r in rows.iterrows():  # the exhaustive optimum is the most a set of its size can have
        key = (r.model, r.setting, r.m)
        if key in best.index and r.entropy > best[key] + 1e-6 and r.method not in ("EAGLE2",):
            raise ValueError(
                f"{path}, row {i + 2}: {r.method}'s set entropy {r.entropy} above the exhaustive optimum {best[key]}"
            )
    seen: dict = {}  # one set has one entropy in a setting, whichever method chose it (EAGLE2's is its own feature)
    for i, r in rows[rows.method != "EAGLE2"].iterrows():
        key = (r.model, r.setting, layer_ids(path, i, r.layers, n_layers_of(r.model)))
        if key in seen and abs(rows.entropy[seen[key]] - r.entropy) > 1e-6:
            raise ValueError(
                f"{path}, rows {seen[key] + 2} and {i + 2}: {r.model} {r.setting} set {r.layers} with two entropies "
                f"({rows.entropy[seen[key]]} and {r.entropy})"
            )
        seen.setdefault(key, i)
    kept = rows[(rows.setting == "paper") & (rows.m == 3) & rows.method.isin(["ELSI", "EAGLE3", "exhaustive"])]
    for model in sorted(set(rows.model)):
        lacking = sorted({"ELSI", "EAGLE3", "exhaustive"} - set(kept[kept.model == model].method))
        if lacking:
            raise ValueError(f"{path}: {model} has no paper-setting m = 3 row of {lacking}: the page reads them")
    return [f"- {r.model}, {r.method}: {r.layers}, set entropy {r.entropy:.4f}." for _, r in kept.iterrows()]


def drafts(families, methods=("elsi", "probe")):
    def finding(folder):
        evidence, lines = check_evidence(folder), []
        for family in families:
            for method in methods:
                found = ev.comparison_lines(evidence, family, method, 3)
                lines += [f"- {line.removeprefix('evidence: ').strip()}." for line in found if "none of" not in line]
        if not lines:
            raise MissingResult(f"{folder}: no records' comparison for {', '.join(families)} in {ev.EVIDENCE_PATH}")
        return lines

    return finding


def criteria(folder):
    path = folder / "criteria_rank_correlations.csv"
    rows = results_csv(
        folder,
        "criteria_rank_correlations",
        ("temperature", "rho", "p (permutation)", "low (sets)", "high (sets)"),
        ("protocol", "outcome", "criterion"),
        integers=("prompts", "nodes", "drafts", "distinct sets"),
        enums={"criterion": POOLED_CRITERIA, "outcome": OUTCOMES},
        ranges={
            "temperature": (0, 2),
            "rho": (-1, 1),
            "p (permutation)": (0, 1),
            "drafts": (3, np.inf),
            "prompts": (1, np.inf),
            "nodes": (1, np.inf),
            "low (questions and sets)": (-1, 1),
            "high (questions and sets)": (-1, 1),
        },
        unique=("protocol", "prompts", "temperature", "nodes", "criterion", "outcome"),
        optional_numbers=("low (questions and sets)", "high (questions and sets)"),  # empty: not resampled
    )
    for i, r in rows.iterrows():
        for kind in ("sets", "questions and sets"):  # each bootstrap's interval around its rho
            low, high = r[f"low ({kind})"], r[f"high ({kind})"]
            if kind != "sets" and pd.isna(low) and pd.isna(high):  # not resampled over questions: no interval
                continue
            if not (low <= r.rho <= high and -1 <= low and high <= 1):
                raise ValueError(
                    f"{path}, row {i + 2}: rho {r.rho:+.3f} against its interval ({kind}) [{low:+.3f}, {high:+.3f}]: "
                    "an interval within [-1, 1] that holds its rho expected"
                )
        if r["distinct sets"] > r.drafts or r["distinct sets"] < 1:
            raise ValueError(f"{path}, row {i + 2}: {r['distinct sets']} distinct sets of {r.drafts} drafts")
        try:  # a permutation p of its drafts' rho (notebook 08: 10,000 shuffles)
            check_p(
                f"{path}, row {i + 2}",
                "p (permutation)",
                r["p (permutation)"],
                r.rho,
                1e-6,
                1 / (r.drafts - 1),
                False,
                10_000,
            )
        except ev.EvidenceUnavailable as err:
            raise ValueError(str(err)) from None
    kept = rows[(rows.nodes == NODES) & (rows.temperature == 0) & (rows.outcome == "tau minus EAGLE3")]
    if kept.empty:
        raise ValueError(f"{path}: no row the page reads: it would say nothing")
    return [
        f"- {r.protocol} ({r.prompts:,} training prompts, {r.drafts} drafts): {r.criterion} against tau minus "
        f"EAGLE3's, Spearman rho {r.rho:+.2f}, permutation p = {r['p (permutation)']:.3f}."
        for _, r in kept.iterrows()
    ]


def families(folder):
    path = folder / "families_compared.csv"
    rows = results_csv(
        folder,
        "families_compared",
        ("temperature",),
        ("effect",),
        integers=("nodes",),
        ranges={"temperature": (0, 2), "nodes": (1, np.inf)},
        unique=("temperature", "nodes", "effect"),
    )
    values = [c for c in rows.columns if c.startswith("value (") and c.endswith(")")]
    if len(values) != 2:
        raise ValueError(f"{path}: columns {values}: the value of each of two families expected")
    first, second = (c.removeprefix("value (").removesuffix(")") for c in values)
    last = f"{first} minus {second}"
    if last not in rows.columns:
        raise ValueError(f"{path}: no column {last!r}, the first family minus the second")
    for column in (*values, last, "low", "high"):  # text is never a number; an empty cell is no value
        if column in rows.columns:
            parsed = pd.to_numeric(rows[column], errors="coerce")
            bad = np.flatnonzero((parsed.isna() & rows[column].notna()).to_numpy() | np.isinf(parsed.to_numpy(float)))
            if len(bad):
                raise ValueError(
                    f"{path}, row {bad[0] + 2}: {column} = {_cell(rows[column].iloc[bad[0]])}, not a number"
                )
    a, b, d = (pd.to_numeric(rows[c], errors="coerce").to_numpy(float) for c in (*values, last))
    for i in range(len(rows)):
        if not np.isfinite(d[i]) or (np.isfinite(a[i]) and np.isfinite(b[i]) and abs(d[i] - (a[i] - b[i])) > 1e-5):
            raise ValueError(f"{path}, row {i + 2}: {last} = {rows[last].iloc[i]!r}, not {values[0]} minus {values[1]}")
        for value, low, high in ((last, "low", "high"), *((v, f"low {v[6:]}", f"high {v[6:]}") for v in values)):
            x, lo, hi = (
                pd.to_numeric(rows[c], errors="coerce").iloc[i] if c in rows.columns else np.nan
                for c in (value, low, high)
            )
            if np.isfinite(lo) != np.isfinite(hi) or (np.isfinite(lo) and not (np.isfinite(x) and lo <= x <= hi)):
                raise ValueError(f"{path}, row {i + 2}: an interval [{lo}, {hi}] that does not hold {value} {x}")
    kept = rows[rows.effect.str.contains("minus EAGLE3") & (rows.nodes == NODES)]
    if kept.empty:
        raise ValueError(f"{path}: no row the page reads: it would say nothing")
    return [f"- T = {r.temperature:g}, {r.effect}: {r[last]:+.3f} ({last})." for _, r in kept.iterrows()]


def _ledger_made() -> dict:
    return tables_now()


def check_made(path: Path, text: str, how: str) -> None:
    """The results file at `path` is exactly `text` (what `how` writes from the committed data), else
    ValueError naming the file and its first line that differs: stale or altered, never shown."""
    if not path.is_file():
        raise MissingResult(f"{path}: a page of the site needs it ({how} writes it)")
    try:
        found = path.read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: not readable text ({err})") from None
    if found != text:
        line = next((i for i, (a, b) in enumerate(zip(found.splitlines(), text.splitlines()), 1) if a != b), None)
        line = line or min(len(found.splitlines()), len(text.splitlines())) + 1
        raise ValueError(
            f"{path}, line {line}: not what the committed records give: stale or altered (`{how}` writes it anew)"
        )


@lru_cache(maxsize=2)
def _evidence_made_for(records: str, pooled: str, folder: str) -> dict:
    """What `make evidence` would write now (for one content of the records and of criteria_pooled.csv)."""
    return json.loads(json.dumps(build_evidence(Path(folder))))


def check_evidence(folder: Path) -> dict:
    """The evidence file the pages quote, checked against what the committed records (and `folder`'s
    pooled criteria) give now: the same records by their sha256, comparisons, pooled rows and default
    method, and fits within round-off; ValueError naming what differs otherwise (stale or altered)."""
    evidence = ev.load()
    pooled = folder / "criteria_pooled.csv"
    check_made(
        pooled, _ledger_made()["criteria_pooled"], "make ledger-tables"
    )  # what the evidence's pooled rows come from
    made = _evidence_made_for(records_digest(), pooled.read_text() if pooled.is_file() else "", str(folder))
    for part in ("schema", "nodes", "default_method", "pooled_criteria", "comparisons"):
        if evidence[part] != made[part]:
            raise ValueError(f"{ev.EVIDENCE_PATH}: its {part} are not what the committed records give (make evidence)")
    if evidence["provenance"]["records"] != made["provenance"]["records"]:
        raise ValueError(f"{ev.EVIDENCE_PATH}: it rests on other records than the committed ones (make evidence)")
    if not _close(evidence["models"], made["models"]):
        raise ValueError(f"{ev.EVIDENCE_PATH}: its fits are not what its comparisons give (make evidence)")
    return evidence


def _close(a, b) -> bool:
    """Two JSON values alike, their numbers within a relative 1e-9 (a write and read back)."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, (int, float)) and not isinstance(b, bool):
        return abs(a - b) <= 1e-9 * max(1.0, abs(a))
    return a == b


def ledger(folder):
    made = _ledger_made()
    for name in made:
        check_made(folder / f"{name}.csv", made[name], "make ledger-tables")
    evidence = check_evidence(folder)
    check_made(folder / "comparisons_seed_level.csv", csv_text(comparisons_table(evidence)), "make evidence")
    if evidence["pooled_criteria"] != pooled_criteria_rows(folder):
        raise ValueError(
            f"{ev.EVIDENCE_PATH}: its pooled criteria are not {folder / 'criteria_pooled.csv'}'s (make evidence)"
        )
    found = pd.read_csv(folder / "ledger_findings.csv")
    pooled = pd.DataFrame(evidence["pooled_criteria"])
    lines = [
        f"- {r.protocol}, T = {r.temperature:g}, seed {r.seed}: {r.method} minus EAGLE3 {r['diff']:+.3f} "
        f"[{r.low:+.3f}, {r.high:+.3f}] "
        f"({r.drafts} drafts; one seed against one: the questions' interval only)."
        for _, r in found[found.temperature == 0].iterrows()
    ]
    lines += [
        f"- {r.criterion} against {r.outcome}, pooled over {r.drafts} drafts: rho {r['pooled rho']:+.2f}, "
        f"stratified permutation p = {r['p (stratified permutation)']:.3f} (per protocol: "
        + ", ".join(
            f"{name} {rho} p = {p}"
            for name, rho, p in zip(r.protocols.split(), r["per protocol rho"].split(), r["per protocol p"].split())
        )
        + ")."
        for _, r in pooled.iterrows()
    ]
    return lines + [f"- {line}." for line in twins.summary(pd.read_csv(folder / "numeric_twins.csv"))]
