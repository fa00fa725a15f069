"""The written accepted-token table: `tau_table`'s blocks as long numeric rows (`tau_long`, one row per
cell), saved as a CSV that reads back to the same floats and a formatted Markdown table
(`save_tau_tables`, `read_tau_csv`), and turned back into blocks (`tau_blocks`) and readable cells
(`tau_formatted`).
"""

from __future__ import annotations

import csv
import math
import re
from pathlib import Path

import pandas as pd

from ...common.hardware import NUMERIC_COLUMNS
from ...draft.corpus import COLUMNS
from ...draft.evidence_checks import MAX_TEMPERATURE
from ..paper.plots import markdown_table, with_numeric
from .tables import AVG, formatted


# One row per cell: `column` is the SpecBench column or AVG; tau the cell's estimate, low and high its
# 95% interval (NaN where it has none), questions the questions behind it (empty where unknown), best
# whether its tau is the highest of its column in its (temperature, nodes) block: the bold cells.
TAU_CSV_COLUMNS = ("method", "column", "temperature", "nodes", "tau", "low", "high", "questions", "best")


_TAU_DTYPES = {
    "method": str,
    "column": str,
    "temperature": float,
    "nodes": int,
    "tau": float,
    "low": float,
    "high": float,
    "questions": "Int64",
    "best": bool,
}


def tau_long(tau, low, high, *, temperature: float, nodes: int) -> pd.DataFrame:
    """A block of `tau_table` (at `temperature` and `nodes`) as long rows of TAU_CSV_COLUMNS, methods
    in the block's order and, within each, the columns in its order; `best` by the rule `formatted`
    bolds by (the column's highest tau, ties all best)."""
    counts = tau.attrs.get("questions", {})
    rows = []
    for method in tau.index:
        for col in tau.columns:
            t, n = tau.loc[method, col], counts.get(method, {}).get(col)
            rows.append(
                {
                    "method": method,
                    "column": col,
                    "temperature": temperature,
                    "nodes": nodes,
                    "tau": t,
                    "low": low.loc[method, col],
                    "high": high.loc[method, col],
                    "questions": pd.NA if n is None else n,
                    "best": bool(t == tau[col].max()),
                }
            )
    return _typed(pd.DataFrame(rows, columns=list(TAU_CSV_COLUMNS)))


def _typed(long: pd.DataFrame) -> pd.DataFrame:
    missing = [c for c in TAU_CSV_COLUMNS if c not in long]
    if missing:
        raise ValueError(f"the accepted-token rows lack the column(s) {missing} (expected: {list(TAU_CSV_COLUMNS)})")
    return long[list(TAU_CSV_COLUMNS)].astype(_TAU_DTYPES)


def tau_blocks(long: pd.DataFrame) -> dict:
    """{(temperature, nodes): (tau, low, high, best)} back from long rows, blocks, methods and columns
    in the order the rows hold them; tau.attrs["questions"] holds the known counts, as `tau_table`'s."""
    long = _typed(long)
    blocks = {}
    for (temperature, nodes), rows in long.groupby(["temperature", "nodes"], sort=False):
        twice = rows[rows.duplicated(["method", "column"], keep=False)]
        if len(twice):
            raise ValueError(
                f"method {twice.method.iloc[0]!r} has column {twice.column.iloc[0]!r} more than once "
                f"at temperature {temperature}, {nodes} nodes"
            )
        methods, cols = list(dict.fromkeys(rows.method)), list(dict.fromkeys(rows.column))
        frames = [
            rows.pivot(index="method", columns="column", values=v).reindex(index=methods, columns=cols)
            for v in ("tau", "low", "high", "best")
        ]
        tau, low, high = (f.astype(float).rename_axis(index=None, columns=None) for f in frames[:3])
        best = frames[3].astype("boolean").fillna(False).astype(bool).rename_axis(index=None, columns=None)
        tau.attrs["questions"] = {
            m: {c: int(n) for c, n in zip(g.column, g.questions) if not pd.isna(n)}
            for m, g in rows.groupby("method", sort=False)
        }
        blocks[float(temperature), int(nodes)] = (tau, low, high, best)
    return blocks


def tau_formatted(long: pd.DataFrame, *, markdown: bool = True) -> pd.DataFrame:
    """The long rows as the table readers see: one row per (temperature, nodes, method), its cells
    formatted (`formatted`, the cells marked best in bold), then the temperature and tree size."""
    return pd.concat(
        [
            formatted(tau, low, high, best=best, markdown=markdown)
            .rename_axis("method")
            .reset_index()
            .assign(temperature=temperature, nodes=nodes)
            for (temperature, nodes), (tau, low, high, best) in tau_blocks(long).items()
        ],
        ignore_index=True,
    )


def stated_numeric(long: pd.DataFrame) -> dict:
    """The numeric settings a table's rows state (its NUMERIC_COLUMNS present), one value each: a
    column with two values is refused (one table, one run's settings); a table with no rows states none."""
    stated = {}
    for c in (c for c in NUMERIC_COLUMNS if c in long.columns):
        values = sorted(set(long[c].astype(str)))
        if len(values) > 1:
            raise ValueError(f"the table's column {c!r} holds {values}: one table states one run's settings")
        stated.update({c: v for v in values})
    return stated


def tau_markdown(long: pd.DataFrame) -> str:
    """The Markdown table of `tau_formatted` (bold best cells, temperature to 4 decimals), and a line
    under it with the numeric settings the rows state (`stated_numeric`), if any."""
    text = markdown_table(tau_formatted(long.drop(columns=[c for c in NUMERIC_COLUMNS if c in long.columns])))
    settings = "; ".join(f"{k}: {v}" for k, v in stated_numeric(long).items())
    return text + (f"\nNumeric settings: {settings}.\n" if settings else "")


def save_tau_tables(long: pd.DataFrame, name: str, out_dir, *, numeric: dict | None = None) -> list[Path]:
    """Write the long rows as <out_dir>/<name>.csv (numbers only, floats at full precision: pandas
    reads back the same floats) and their formatted table as <name>.md (`tau_markdown`). `numeric`:
    the run's numeric settings (`experiment.numeric_settings`), a column each in the CSV and a line
    under the Markdown table."""
    long = _typed(long)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    csv, md = out_dir / f"{name}.csv", out_dir / f"{name}.md"
    long = with_numeric(long, numeric)
    long.to_csv(csv, index=False)
    md.write_text(tau_markdown(long))
    return [csv, md]


NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|[+-]?(inf|nan)", re.IGNORECASE)


def _cell(
    where: str,
    field: str,
    text: str,
    *,
    integer: bool = False,
    lo: float = -math.inf,
    hi: float = math.inf,
    empty: bool = False,
) -> float:
    """One CSV cell as a number (NaN for an empty cell where `empty` allows it), else ValueError naming
    the file, the row and the field."""
    if text == "":
        if empty:
            return math.nan
        raise ValueError(f"{where}: {field} is empty")
    if not NUMBER.fullmatch(text):  # Python's float() also takes "1_8" and " 2 "
        raise ValueError(f"{where}: {field} = {text!r}, not a number")
    value = float(text)
    if not (math.isfinite(value) and lo <= value <= hi) or (integer and not value.is_integer()):
        kind = "an integer" if integer else "a number"
        raise ValueError(f"{where}: {field} = {text!r}, not {kind} in [{lo:g}, {hi:g}]")
    return value


AVERAGE_SLACK = 0.01  # two-decimal cells: the columns' mean and the AVG cell each rounded by up to 0.005


def _check_average(where: str, taus: pd.Series, counts: pd.Series) -> None:
    """An AVG cell is the mean over its columns' questions: their count-weighted mean where every count is
    known, else somewhere between its lowest and highest column (any weighting's mean lies there)."""
    columns = taus.drop(AVG, errors="ignore").dropna()
    if AVG not in taus.index or pd.isna(taus[AVG]) or columns.empty:
        return
    avg = float(taus[AVG])
    known = counts.drop(AVG, errors="ignore").reindex(columns.index)
    if known.notna().all() and len(columns) > 1:
        mean = float((columns * known.astype(float)).sum() / known.astype(float).sum())
        if abs(avg - mean) > AVERAGE_SLACK:
            raise ValueError(f"{where}: AVG {avg} is not its columns' mean over their questions ({mean:.3f})")
    elif not columns.min() - AVERAGE_SLACK <= avg <= columns.max() + AVERAGE_SLACK:
        raise ValueError(
            f"{where}: AVG {avg} lies outside its columns' range [{columns.min()}, {columns.max()}]: no mean of them"
        )


def read_tau_csv(path) -> pd.DataFrame:
    """A CSV `save_tau_tables` wrote, with its dtypes (questions a nullable integer: empty where the
    count is unknown), and the numeric settings' columns where it has them. Every cell is checked as it
    is read, and a wrong one refused naming the file, the CSV row and the field: names without stray
    spaces; temperature >= 0; nodes a whole number >= 1; tau within [1, nodes + 1] and inside its
    interval [low, high] (both ends or neither); questions a whole count, tau empty only with none;
    best literally True or False, a best cell its column's highest in its block and every column with a
    tau holding one; one row per (method, column, temperature, nodes)."""
    path = Path(path)
    try:
        with open(path, newline="") as handle:
            lines = list(csv.reader(handle))
        raw = pd.read_csv(path, dtype=str, keep_default_na=False, index_col=False)
    except (OSError, UnicodeDecodeError, csv.Error, pd.errors.EmptyDataError, pd.errors.ParserError) as err:
        raise ValueError(f"{path}: not an accepted-token CSV ({err})") from None
    header = lines[0] if lines else []
    if len(set(header)) != len(header):
        raise ValueError(f"{path}: a column named twice in its header {header}")
    for n, fields in enumerate(lines[1:], 2):
        if len(fields) != len(header):
            raise ValueError(f"{path}, row {n}: {len(fields)} fields, its header {len(header)}")
    missing = [c for c in TAU_CSV_COLUMNS if c not in raw.columns]
    if missing:
        raise ValueError(f"{path}: no column(s) {missing} (expected: {list(TAU_CSV_COLUMNS)})")
    if raw.empty:
        raise ValueError(f"{path}: a header and no rows: no accepted-token cell")
    try:
        stated_numeric(raw)
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None
    rows, seen = [], {}
    for i, r in enumerate(raw.to_dict("records")):
        where = f"{path}, row {i + 2}"  # the CSV's line: the header is line 1
        for field in ("method", "column"):
            if not r[field] or r[field] != r[field].strip() or "|" in r[field] or "\n" in r[field]:
                raise ValueError(f"{where}: {field} = {r[field]!r}, not a name (text without surrounding spaces)")
        if r["column"] not in (*COLUMNS, AVG):
            raise ValueError(f"{where}: column = {r['column']!r}, not one of the paper's {[*COLUMNS, AVG]}")
        temperature = _cell(where, "temperature", r["temperature"], lo=0, hi=MAX_TEMPERATURE)
        if r["temperature"].startswith("-"):
            raise ValueError(f"{where}: temperature = {r['temperature']!r}, a negative zero (the tables sample at 0)")
        nodes = _cell(where, "nodes", r["nodes"], integer=True, lo=1)
        tau = _cell(where, "tau", r["tau"], lo=1, hi=nodes + 1, empty=True)
        low, high = (_cell(where, f, r[f], lo=1, hi=nodes + 1, empty=True) for f in ("low", "high"))
        questions = _cell(where, "questions", r["questions"], integer=True, lo=0, empty=True)
        if r["best"] not in ("True", "False"):
            raise ValueError(f"{where}: best = {r['best']!r}, not True or False")
        if math.isnan(low) != math.isnan(high) or (not math.isnan(low) and not low <= tau <= high):
            raise ValueError(f"{where}: tau {r['tau']!r} is not inside its interval [{r['low']!r}, {r['high']!r}]")
        if not math.isnan(tau) and questions == 0:
            raise ValueError(f"{where}: tau {r['tau']!r} over 0 questions (a cell with no question has no tau)")
        if math.isnan(tau) and not questions == 0:
            raise ValueError(
                f"{where}: tau is empty but questions is {r['questions']!r} (only a cell without questions has none)"
            )
        key = (r["method"], r["column"], temperature, int(nodes))
        if key in seen:
            raise ValueError(
                f"{where}: {key[0]!r}, {key[1]!r} at T = {temperature:g}, {int(nodes)} nodes is also row {seen[key]}"
            )
        seen[key] = i + 2
        rows.append({**r, "temperature": temperature, "nodes": int(nodes), "tau": tau, "low": low, "high": high,
                     "questions": pd.NA if math.isnan(questions) else int(questions), "best": r["best"] == "True"})  # fmt: skip
    frame = pd.DataFrame(rows, columns=list(raw.columns))
    typed = _typed(frame)
    # a table is whole: in each block every method has every column (a cell without questions is written
    # as one), so a row lost from the file is never shown as "no questions"
    methods, all_columns = set(typed.method), set(typed.column)
    for (temperature, nodes), block in typed.groupby(["temperature", "nodes"], sort=False):
        columns = set(block.column)
        for what, have, every in (("method", set(block.method), methods), ("column", columns, all_columns)):
            if have != every:  # a block that lost a method (its baseline, say) or a column the others show
                raise ValueError(
                    f"{path}: the block at T = {temperature:g}, {nodes} nodes has no {what} {sorted(every - have)}, "
                    "which the table's other blocks have: its rows are missing"
                )
        for method, rows_ in block.groupby("method", sort=False):
            lacking = sorted(columns - set(rows_.column))
            if lacking:
                raise ValueError(
                    f"{path}: {method} at T = {temperature:g}, {nodes} nodes has no row for {lacking}, which "
                    "other methods of the block have: a row is missing"
                )
    # AVG counts every question of the columns it averages (where the counts are known) and is their mean
    for (temperature, nodes, method), rows_ in typed.groupby(["temperature", "nodes", "method"], sort=False):
        counts = rows_.set_index("column").questions
        taus = rows_.set_index("column").tau
        where = f"{path}: {method} at T = {temperature:g}, {nodes} nodes"
        if AVG in counts.index and counts.notna().all() and len(counts) > 1:
            if int(counts[AVG]) != int(counts.drop(AVG).sum()):
                raise ValueError(
                    f"{where}: AVG counts {int(counts[AVG])} questions, its columns {int(counts.drop(AVG).sum())}"
                )
        _check_average(where, taus, counts)
    # a best cell holds its column's highest tau; every column with a tau has one (a cell that ties it only
    # once rounded, as in a table read back from two decimals, may stay unmarked: the CSV's best decides)
    block = typed.groupby(["temperature", "nodes", "column"])
    top, marked = block.tau.transform("max"), block.best.transform("any")
    wrong = typed.index[(typed.best & (typed.tau != top)) | (~marked & top.notna())]
    if len(wrong):
        r = typed.loc[wrong[0]]
        raise ValueError(
            f"{path}, row {wrong[0] + 2}: "
            + (
                f"best = True but its tau {r.tau} is below its column's highest"
                if r.best
                else "no cell of its column is best"
            )
            + f" at T = {r.temperature:g}, {r.nodes} nodes"
        )
    return pd.concat([typed, frame[[c for c in frame.columns if c not in TAU_CSV_COLUMNS]]], axis=1)
