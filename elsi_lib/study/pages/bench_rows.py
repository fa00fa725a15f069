"""What any benchmark record's rows must hold, whatever the benchmark (`bench/record.py` writes them): the
rules a table on the benchmarks page is checked by before it is shown. Each names the file, the row
and the column it refuses.

- a column of true/false holds nothing else (an empty cell, "" or null, is no value);
- a time or a rate ("... ms", "... s", "seconds", "tok/s", "ms per ...", "... ms/round", "... (s)", or a
  "value" whose "unit" is one) positive; no row without a value;
- a ratio "X / Y" what its row's "X ... ms" over "Y ... ms" give, within their rounding;
- a speed ratio "vs X" its row's tok/s over the reference's (the row whose "vs X" is 1, else the
  settings' "X tok/s"), within their rounding; tok/s what tokens over seconds give;
- a tau at least 1 and at most k + 1 (a chain of k) or nodes + 1 (a tree);
- a count of equal outputs ("... equal ...") a whole number within the questions or prompts run;
- no two rows alike in every column of text and whole numbers (a second would contradict the first).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from ...common.checks import half_unit, ratio_holds
from .cost_records import _number

TIME = re.compile(r"( ms| s|tok/s|seconds| \(s\))$|^ms | ms/")  # "draft ms", "all triples (s)", "ms per triple"


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _empty(value) -> bool:
    return value is None or value == ""


def _kind(value) -> str:
    return "true/false" if isinstance(value, bool) else "numbers" if _number(value) else "text"


def check_rows(rows: list[dict], path: Path, settings: dict | None = None) -> None:
    """The rules above over `rows` (a record's), `settings` its settings; ValueError naming what is wrong."""
    settings = settings or {}
    columns = list(dict.fromkeys(c for r in rows for c in r))
    for c in columns:  # a yes/no column holds nothing else ("maybe" is no answer; numbers may sit beside a word)
        kinds = {_kind(r[c]) for r in rows if not _empty(r.get(c))}
        if "true/false" in kinds and len(kinds) > 1:
            i = next(i for i, r in enumerate(rows) if not _empty(r.get(c)) and not isinstance(r[c], bool))
            raise ValueError(f"{path}: row {i}: {c} = {rows[i][c]!r}: the column holds true/false")
    timed = [c for c in columns if TIME.search(c)]
    for i, r in enumerate(rows):
        if all(_empty(v) for v in r.values()):
            raise ValueError(f"{path}: row {i} holds no value (an empty row of the table)")
        for c in timed:  # a number above 0, or no value ("", as a plain row's empty cells)
            if not _empty(r.get(c)) and not (_number(r[c]) and r[c] > 0):
                raise ValueError(f"{path}: row {i}: {c} = {r[c]!r}, not a positive time or rate")
        unit = r.get("unit")  # a "value" whose unit is a time or a rate ("tok/s", "ms per batch")
        if isinstance(unit, str) and TIME.search(f"x {unit.split(' per ')[0]}") and not _empty(r.get("value")):
            if not (_number(r["value"]) and r["value"] > 0):
                raise ValueError(f"{path}: row {i}: value = {r['value']!r} ({unit}), not a positive time or rate")
        _check_ratios(r, i, columns, path)
        _check_taus(r, i, path)
        _check_counts(r, i, path, settings)
    _check_speeds(rows, columns, path, settings)
    name = [c for c in columns if all(isinstance(r.get(c), str) or _whole(r.get(c)) for r in rows)]
    seen: dict = {}
    for i, r in enumerate(rows):
        key = tuple(r.get(c) for c in name)
        if name and key in seen:
            raise ValueError(f"{path}: rows {seen[key]} and {i} are alike in {name}: one row each")
        seen[key] = i


def _check_ratios(r: dict, i: int, columns: list, path: Path) -> None:
    """ "X / Y" is the row's "X ... ms" over its "Y ... ms"; a bare "ratio" beside "naive s" and "fast s" is
    the naive time over the fast one, by name (never by the columns' order)."""
    pairs = []
    for c in [c for c in columns if " / " in c]:
        top, bottom = c.split(" / ", 1)
        a = [x for x in columns if x.endswith(" ms") and x.startswith(top + " ")]
        b = [x for x in columns if x.endswith(" ms") and x.startswith(bottom + " ")]
        if len(a) == 1 and len(b) == 1:
            pairs.append((c, a[0], b[0]))
    if {"ratio", "naive s", "fast s"} <= set(columns):  # the selection benchmark's: the naive time over the fast
        pairs.append(("ratio", "naive s", "fast s"))
    for c, a, b in pairs:
        if not all(_number(r.get(x)) for x in (c, a, b)):
            continue
        if not ratio_holds(r[c], r[a], r[b]):
            raise ValueError(f"{path}: row {i}: {c} = {r[c]}, but {a} / {b} = {r[a] / r[b]:.3f}")


def _check_taus(r: dict, i: int, path: Path) -> None:
    """A tau (tokens a target forward yields) is at least 1, at most the drafted tokens plus one: a chain's
    k, a tree's depth (one path of it is accepted) or else its nodes."""
    sizes = [r[c] for c in ("k", "depth", "nodes") if _whole(r.get(c))]
    size = min(sizes) if sizes else None
    for c in [c for c in r if c.startswith("tau") and _number(r.get(c))]:
        top = size + 1 if size is not None else math.inf
        if not 1 - half_unit(r[c]) <= r[c] <= top + half_unit(r[c]):
            raise ValueError(f"{path}: row {i}: {c} = {r[c]}, not in [1, {top}] (tokens a target forward yields)")


def _check_counts(r: dict, i: int, path: Path, settings: dict) -> None:
    """Outputs or replies found equal are a count of the questions or prompts run."""
    run = next((settings[k] for k in ("questions", "prompts") if _whole(settings.get(k))), None)
    for c in [c for c in r if " equal " in f" {c} " and not _empty(r.get(c))]:
        if not (_whole(r[c]) and 0 <= r[c] <= (run if run is not None else r[c])):
            raise ValueError(f"{path}: row {i}: {c} = {r[c]!r}, not a count of the {run} run")


def _check_speeds(rows: list[dict], columns: list, path: Path, settings: dict) -> None:
    """ "vs X" is tok/s over the reference's; tok/s is tokens over seconds where a row holds both."""
    for i, r in enumerate(rows):
        if all(_number(r.get(c)) for c in ("tokens", "seconds", "tok/s")):
            if not ratio_holds(r["tok/s"], r["tokens"], r["seconds"]):
                raise ValueError(
                    f"{path}: row {i}: tok/s = {r['tok/s']}, but tokens / seconds = {r['tokens'] / r['seconds']:.1f}"
                )
    if "tok/s" not in columns:
        return
    for c in [c for c in columns if c.startswith("vs ")]:
        reference = next((r["tok/s"] for r in rows if r.get(c) == 1 and _number(r.get("tok/s"))), None)
        if reference is None and _number(settings.get(f"{c[3:]} tok/s")):
            reference = settings[f"{c[3:]} tok/s"]
        if reference is None:
            raise ValueError(f"{path}: {c}: no row of {c} = 1 and no settings' {c[3:]!r} tok/s to read it against")
        if not reference > 0:  # a ratio to a rate at or below zero holds for any value
            raise ValueError(f"{path}: {c}: its reference, {c[3:]} tok/s = {reference}, is not a positive rate")
        for i, r in enumerate(rows):
            if _number(r.get(c)) and _number(r.get("tok/s")) and not ratio_holds(r[c], r["tok/s"], reference):
                raise ValueError(
                    f"{path}: row {i}: {c} = {r[c]}, but its tok/s {r['tok/s']} over {reference} is {r['tok/s'] / reference:.2f}"
                )
