"""The README's findings quote the committed tables, each number its own cell, so a rerun that
changes a result makes the prose fail here instead of going stale.

Each finding the README states with numbers is read by a quote pattern below that names the table
(data/results/<name>.csv) and the row of each number from the words around it: method, SpecBench
column, temperature and tree size for the accepted-token tables; model, setting, method and layer
set for the figures' and Table 1's. A quoted number must equal its cell at the precision it is
written (the cell formatted to as many decimals, with a sign where the README writes one), and
every decimal number of the two findings sections (and every percentage of the figures' section)
must be claimed by exactly one parsed quote: a number the patterns do not tie to a cell fails.

The checks take the README's text (`accepted_token_problems(text)`, `figure_problems(text)`, each a
list of what disagrees, empty when all holds), so a script can run them on an edited copy.
"""
from __future__ import annotations

import re
from collections import Counter
from functools import lru_cache
from pathlib import Path

import pandas as pd

from elsi_lib.common.cachefiles import REPO_ROOT

RESULTS = REPO_ROOT / "data" / "results"
README = REPO_ROOT / "docs" / "lab-notes.md"
ACCEPTED = "### What the accepted-token tables show"
FIGURES = "### What the figures show on these models"
DECIMAL = re.compile(r"(?<![\w.])[-+]?\d+\.\d+(?!\w|\.\w)")  # a full stop may end a sentence after it
PERCENT = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)(?:-(\d+(?:\.\d+)?))?\s?%")
NUM = r"[-+]?\d+\.\d+"
T_ = r"(?P<T>\d+(?:\.\d+)?)"
LAYERS = r"\[(?P<{}>\d+(?:,\s*\d+)*)\]"
MODELS = {"SmolLM2": "smollm2-135m", "Qwen": "qwen2.5-coder-0.5b"}
MODEL = r"(?P<model>SmolLM2|Qwen)"
# notebook 06 pairs every method with tables.paired_differences' default baseline
PAIRED_BASELINE = "EAGLE3"
# numbers the README quotes from the paper, not from a table here
PAPER = "the paper's own result"


def section(readme: str | None, heading: str) -> str:
    """The README's section under `heading`, up to the next heading of its level or above."""
    text = README.read_text() if readme is None else readme
    start = text.index(heading)
    marks = ("\n## ", "\n### ") if heading.startswith("### ") else ("\n## ",)
    ends = [e for e in (text.find(m, start + len(heading)) for m in marks) if e >= 0]
    return text[start:min(ends)] if ends else text[start:]


@lru_cache(maxsize=None)
def _read(path: Path) -> pd.DataFrame:
    """A committed table as its text (every cell a string, empty cells ''), as written."""
    return pd.read_csv(path, dtype=str, keep_default_na=False)


def _num(raw) -> float:
    return float(raw) if raw != "" else float("nan")


def _layers(text: str) -> tuple:
    return tuple(int(x) for x in re.findall(r"\d+", text))


def agrees(quoted: str, value: float) -> bool:
    """`quoted` is `value` at the precision it is written: as many decimals, its sign if it has one."""
    digits = len(quoted.split(".")[1]) if "." in quoted else 0
    text = f"{value:+.{digits}f}" if quoted[0] in "+-" else f"{value:.{digits}f}"
    return text == quoted


class Quotes:
    """The quotes parsed from one section: the spans of the numbers they claim, what disagrees."""

    def __init__(self, text: str, results: Path):
        self.text, self.results, self.spans, self.problems, self.unchecked = text, Path(results), [], [], []

    def line(self, pos: int) -> str:
        start = self.text.rfind("\n", 0, pos) + 1
        end = self.text.find("\n", pos)
        return self.text[start:end if end >= 0 else None].strip()

    def find(self, pattern: str, what: str, start: int = 0, end: int | None = None, *, once=False) -> list:
        """The matches of `pattern` (whitespace in it matches any run of spaces and line breaks);
        none is a problem (the README no longer says `what` as this test reads it)."""
        found = list(re.compile(pattern.replace(" ", r"\s+"), re.S).finditer(
            self.text, start, len(self.text) if end is None else end))
        if not found or (once and len(found) > 1):
            self.problems.append(f"{len(found)} quotes of {what} found (want {'one' if once else 'some'})")
        return found

    def table(self, name: str) -> pd.DataFrame:
        return _read(self.results / f"{name}.csv")

    def rows(self, name: str, **keys) -> pd.DataFrame:
        df, mask = self.table(name), None
        for key, want in keys.items():
            col = df[key]
            hit = col.map(_num) == float(want) if isinstance(want, (int, float)) else col == want
            mask = hit if mask is None else mask & hit
        return df if mask is None else df[mask]

    def row(self, name: str, **keys):
        """The one row of table `name` with these keys (numbers compared as numbers), else None."""
        rows = self.rows(name, **keys)
        if len(rows) != 1:
            self.problems.append(f"{len(rows)} rows of {name}.csv have {keys} (want exactly one)")
            return None
        return rows.iloc[0]

    def number(self, m, group: str, value, where: str, *, raw: str | None = None) -> None:
        """Claim the number of `group` in match `m` as `value` (the cell `where` describes)."""
        self.spans.append(m.span(group))
        quoted = m.group(group)
        if value is None:
            self.problems.append(f"{quoted} ({where}): no such cell")
        elif not agrees(quoted, value):
            held = raw if raw is not None else f"{value:.6g}"
            self.problems.append(f"README says {quoted} where {where} holds {held}: {self.line(m.start(group))!r}")

    def cell(self, m, group: str, row, column: str, name: str, *, scale: float = 1.0, negate: bool = False):
        if row is None:
            return self.number(m, group, None, f"{name}.csv {column}")
        raw = row[column]
        keys = ", ".join(f"{k}={row[k]}" for k in row.index[:3])
        self.number(m, group, (-1 if negate else 1) * scale * _num(raw), f"{name}.csv [{keys}] {column!r}",
                    raw=raw)

    def claim(self, m, group: str, why: str) -> None:
        """Claim a number that no table here holds, for the reason `why` (e.g. PAPER)."""
        self.spans.append(m.span(group))
        self.unchecked.append((m.group(group), why))

    def finish(self, *, percents: bool = False) -> list[str]:
        claims = Counter(self.spans)
        numbers = [(m.span(), m.group()) for m in DECIMAL.finditer(self.text)]
        if percents:
            numbers += [(m.span(g), f"{m.group(g)} %") for m in PERCENT.finditer(self.text) for g in (1, 2)
                        if m.group(g)]
        wrong = [f"{quoted} is claimed by {claims[span]} quotes (want exactly one): {self.line(span[0])!r}"
                 for span, quoted in numbers if claims[span] != 1]
        return self.problems + wrong


def _listed(q: Quotes, m, group: str, names, value: str = NUM):
    """The `name value` pairs in group `group` of `m` ('EAGLE3 0.33, ELSI m=3 0.30'), the longest of
    `names` first (method names hold commas)."""
    alternatives = "|".join(re.escape(n).replace(r"\ ", " ") for n in sorted(names, key=len, reverse=True))
    pattern = re.compile(f"(?P<name>{alternatives}) (?P<v>{value})".replace(" ", r"\s+"))
    return [(" ".join(p.group("name").split()), p) for p in pattern.finditer(q.text, *m.span(group))]


def _verdict(q: Quotes, verdict: str, low: float, high: float, where: str) -> None:
    holds = low <= 0 <= high
    said = "holds 0" if verdict == "the interval holds 0" else "below" if verdict.startswith("below") else \
        "above" if verdict.startswith("above") else verdict
    right = {"holds 0": holds, "below": high < 0, "above": low > 0}.get(said, False)
    if not right:
        q.problems.append(f"{where}: README says '{verdict}' of the interval [{low:.4g}, {high:.4g}]")


# ---------------------------------------------------------------- accepted tokens (notebook 06)

def accepted_token_problems(readme: str | None = None, results: Path = RESULTS) -> list[str]:
    """What in the README's accepted-token findings disagrees with data/results/table2_*.csv."""
    q = Quotes(section(readme, ACCEPTED), results)
    intro = q.find(r"(?P<column>AVG|MT|Trans|Sum|QA|M/R|RAG) tau with 95% bootstrap intervals "
                   r"\(`data/results/(?P<name>table2_accepted_tokens_(?P<slug>[\w.-]+))`\)",
                   "the tau table's source", once=True)
    if not intro:
        return q.finish()
    column, name, slug = intro[0].group("column", "name", "slug")
    _tau_table(q, name, column, f"table2_beam_overlap_{slug}", intro[0].end())
    _paired(q, f"table2_paired_{slug}")
    _spread(q, f"table2_seed_spread_{slug}")
    _step_accuracy(q)
    _lever(q)
    return q.finish()


def _tau_table(q: Quotes, name: str, column: str, layer_table: str, after: int) -> None:
    """The Markdown table: a row per method, a column per 'T = t, n nodes', cells 'tau [low, high]'."""
    lines = list(re.finditer(r"^\|.*\|[ \t]*$", q.text[after:], re.M))
    if len(lines) < 3:
        q.problems.append("no Markdown table of tau after the table's source")
        return
    cells = [[(after + line.start() + c.start(1), c.group(1)) for c in re.finditer(r"\|([^|\n]*)(?=\|)", line.group())]
             for line in lines]
    header = [text.strip() for _, text in cells[0]]
    blocks = {j: re.fullmatch(r"T = (\d+(?:\.\d+)?), (\d+) nodes", h) for j, h in enumerate(header)}
    blocks = {j: (float(b.group(1)), int(b.group(2))) for j, b in blocks.items() if b}
    if header[:2] != ["method", "layers"] or not blocks:
        q.problems.append(f"the tau table's header {header} is not method | layers | T = t, n nodes ...")
        return
    cell = re.compile(r" *(?P<tau>\d+\.\d+) \[(?P<low>\d+\.\d+), (?P<high>\d+\.\d+)\] *")
    for row in cells[2:]:
        method = row[0][1].strip()
        layers = q.row(layer_table, method=method)
        if layers is not None and _layers(row[1][1]) != _layers(layers["layers"]):
            q.problems.append(f"README gives {method} the layers {row[1][1].strip()}, {layer_table}.csv "
                              f"{layers['layers']}")
        for j, (temperature, nodes) in blocks.items():
            start, text = row[j]
            m = cell.fullmatch(q.text, start, start + len(text))
            if m is None:
                q.problems.append(f"{method}, T = {temperature:g}, {nodes} nodes: {text.strip()!r} is not 'tau [low, high]'")
                continue
            r = q.row(name, method=method, column=column, temperature=temperature, nodes=nodes)
            for group, col in (("tau", "tau"), ("low", "low"), ("high", "high")):
                q.cell(m, group, r, col, name)


def _items(q: Quotes, m, group: str, pattern: str) -> list:
    """Group `group` of `m` read as items separated by '; ' (a final '.' dropped), each matching
    `pattern` in full; an item that does not is a problem."""
    start, end = m.span(group)
    if q.text[end - 1] == ".":
        end -= 1
    found, compiled = [], re.compile(pattern.replace(" ", r"\s+"), re.S)
    for piece in re.finditer(r"[^;]+", q.text[start:end]):
        lead = len(piece.group()) - len(piece.group().lstrip())
        a, b = start + piece.start() + lead, start + piece.end()
        item = compiled.fullmatch(q.text, a, b)
        if item is None:
            q.problems.append(f"cannot read the item {q.text[a:b]!r}")
        else:
            found.append(item)
    return found


def _paired(q: Quotes, name: str) -> None:
    item = rf"(?P<method>.+?) (?P<diff>{NUM}) \[(?P<low>{NUM}), (?P<high>{NUM})\] \((?P<verdict>[^)]*)\)"
    for m in q.find(rf"Paired difference from (?P<base>[^\s]+) at (?P<nodes>\d+) nodes, T = {T_}: (?P<items>[^\n]*)",
                    "the paired differences"):
        base, nodes, temperature = m.group("base"), int(m.group("nodes")), float(m.group("T"))
        if base != PAIRED_BASELINE:
            q.problems.append(f"README pairs with {base}: {name}.csv holds differences from {PAIRED_BASELINE}")
        for it in _items(q, m, "items", item):
            method = " ".join(it.group("method").split())
            r = q.row(name, method=method, nodes=nodes, temperature=temperature)
            for group, col in (("diff", "diff"), ("low", "low"), ("high", "high")):
                q.cell(it, group, r, col, name)
            if r is not None:
                verdict = it.group("verdict")
                if verdict not in ("the interval holds 0", f"below {base}", f"above {base}"):
                    q.problems.append(f"{method}: cannot read the verdict {verdict!r}")
                _verdict(q, verdict, _num(r["low"]), _num(r["high"]), f"{name}.csv {method}, {nodes} nodes, "
                         f"T = {temperature:g}")


def _spread(q: Quotes, name: str) -> None:
    item = rf"(?P<method>.+?) (?P<range>\d+\.\d+) \(T = {T_}\)"
    for m in q.find(r"Reseeding alone moves AVG tau at (?P<nodes>\d+) nodes by (?P<items>[^\n]*)", "the seed spread"):
        for it in _items(q, m, "items", item):
            r = q.row(name, method=" ".join(it.group("method").split()), nodes=int(m.group("nodes")),
                      temperature=float(it.group("T")))
            q.cell(it, "range", r, "range", name)


def _step_accuracy(q: Quotes) -> None:
    for m in q.find(r"held-out step-(?P<step>\d+) accuracy \(training seed (?P<seed>\d+)\): (?P<items>[^()]+?) "
                    r"\(`(?P<name>table2_step_accuracy_[\w.-]+)`\)", "the step accuracy"):
        name, step, seed = m.group("name"), m.group("step"), int(m.group("seed"))
        for method, it in _listed(q, m, "items", set(q.table(name)["method"])):
            q.cell(it, "v", q.row(name, method=method, seed=seed), f"step {step}", name)


def _lever(q: Quotes) -> None:
    """'bought x tau at n nodes, T = t (`table2_lever_lm_head_*`)': x is minus the paired diff of the
    random-lm_head draft from EAGLE3, its interval below 0; 'nothing measurable at T = t2': at the
    same size the interval holds 0."""
    for m in q.find(rf"bought (?P<v>\d+\.\d+) tau at (?P<nodes>\d+) nodes, T = {T_} "
                    r"\(`(?P<name>table2_lever_lm_head_[\w.-]+)`\)(?:, and nothing measurable at T = "
                    r"(?P<T2>\d+(?:\.\d+)?))?", "the lm_head lever"):
        name, nodes = m.group("name"), int(m.group("nodes"))
        r = q.row(name, nodes=nodes, temperature=float(m.group("T")))
        q.cell(m, "v", r, "diff", name, negate=True)
        if r is not None and not _num(r["high"]) < 0:
            q.problems.append(f"README says the lm_head initialisation bought tau, but {name}.csv's interval "
                              f"[{r['low']}, {r['high']}] holds 0")
        if m.group("T2") is not None and (r2 := q.row(name, nodes=nodes, temperature=float(m.group("T2")))) is not None:
            _verdict(q, "the interval holds 0", _num(r2["low"]), _num(r2["high"]),
                     f"{name}.csv {nodes} nodes, T = {m.group('T2')} ('nothing measurable')")


# ---------------------------------------------------------------- figures and Table 1 (notebooks 01-05)

def figure_problems(readme: str | None = None, results: Path = RESULTS) -> list[str]:
    """What in the README's figure findings disagrees with data/results/fig*_*.csv and table1_*.csv."""
    q = Quotes(section(readme, FIGURES), results)
    summary, variance, selection = "fig02_layer_entropy_summary", "fig04_variance_reduction", "table1_layer_selection"

    def per_model(m, group, column, name=summary, **keys):
        for model, it in _listed(q, m, group, MODELS):
            q.cell(it, "v", q.row(name, model=MODELS[model], **keys), column, name)

    for m in q.find(r"S_1 is highest at layer (?P<layer>\d+) \((?P<items>[^)]*?) nats\)", "the highest S_1", once=True):
        per_model(m, "items", "max S_1")
        for model in MODELS.values():
            if (r := q.row(summary, model=model)) is not None and r["argmax layer"] != m.group("layer"):
                q.problems.append(f"{summary}.csv: S_1 of {model} is highest at layer {r['argmax layer']}")
    for m in q.find(r"\(lowest: (?P<items>[^)]*)\)", "the lowest S_1", once=True):
        per_model(m, "items", "min S_1")
    for m in q.find(r"median share of Z's largest row over layers is (?P<items>.+?)\.(?=\s)", "the top-row share",
                    once=True):
        per_model(m, "items", "top-row energy share, median")

    reductions = ["early reduction %", "middle reduction %", "late reduction %"]
    for m in q.find(r"variance reduction \((?P<lo>\d+)-(?P<hi>\d+) % per regime here, (?P<plo>\d+)-(?P<phi>\d+) % "
                    r"in the paper\)", "the variance reduction", once=True):
        values = q.rows(variance, selection="entropy")[reductions].map(_num).to_numpy().ravel()
        where = f"{variance}.csv selection=entropy, {', '.join(reductions)}, both models"
        q.number(m, "lo", values.min(), f"the least of {where}")
        q.number(m, "hi", values.max(), f"the most of {where}")
        q.claim(m, "plo", PAPER)
        q.claim(m, "phi", PAPER)
    for m in q.find(r"a rise in the middle and late regimes \((?P<lo>\d+)-(?P<hi>\d+) %\)", "the rise", once=True):
        rows = pd.concat([q.rows(variance, selection=s) for s in ("random", "entropy_no_template")])
        rise = -rows[reductions[1:]].map(_num).to_numpy().ravel()
        where = f"{variance}.csv selection=random and entropy_no_template, middle and late, both models, negated"
        if not (rise > 0).all():
            q.problems.append(f"README says a rise, but some of {where} are not: {sorted(rise)}")
        q.number(m, "lo", rise.min(), f"the least of {where}")
        q.number(m, "hi", rise.max(), f"the most of {where}")

    def layer_set(it, setting, method, layers_group, value_group, model):
        layers = _layers(it.group(layers_group))
        r = q.row(selection, model=model, setting=setting, method=method, m=len(layers))
        if r is not None and _layers(r["layers"]) != layers:
            q.problems.append(f"README gives {method} ({model}, {setting}, m={len(layers)}) the layers "
                              f"{list(layers)}, {selection}.csv {r['layers']}")
        q.cell(it, value_group, r, "entropy", selection)
        return r

    against = rf"{MODEL} {LAYERS.format('a')} (?P<va>{NUM}) against {LAYERS.format('b')} (?P<vb>{NUM})(?: nats)?"
    for setting, what in (("paper", r"ELSI's sets have far higher entropy than EAGLE3's, the set drafts read"),
                          ("frobenius", r"Frobenius normalization narrows the margin over EAGLE3 most")):
        for m in q.find(rf"{what} \((?P<items>[^)]*)\)", f"ELSI against EAGLE3 ({setting})", once=True):
            for it in q.find(against, f"ELSI against EAGLE3 ({setting}) per model", *m.span("items")):
                model = MODELS[it.group("model")]
                layer_set(it, setting, "ELSI", "a", "va", model)
                layer_set(it, setting, "EAGLE3", "b", "vb", model)
    for m in q.find(r"the paper's reading of EAGLE3 \(its own row: (?P<items>[^)]*)\)", "the paper's EAGLE3", once=True):
        for it in q.find(rf"{MODEL} {LAYERS.format('a')} (?P<va>{NUM})", "the paper's EAGLE3 per model", *m.span("items")):
            layer_set(it, "paper", "EAGLE3, paper's reading", "a", "va", MODELS[it.group("model")])
    for m in q.find(rf"ELSI-C misses it in some cases \({MODEL}, m = (?P<m>\d+): {LAYERS.format('a')} (?P<va>{NUM})\)",
                    "ELSI-C's miss", once=True):
        model = MODELS[m.group("model")]
        r = layer_set(m, "paper", "ELSI-C", "a", "va", model)
        best = q.row(selection, model=model, setting="paper", method="exhaustive", m=int(m.group("m")))
        if r is not None and best is not None and _layers(r["layers"]) == _layers(best["layers"]):
            q.problems.append(f"README says ELSI-C misses the optimum, {selection}.csv has it at {best['layers']}")
    for m in q.find(r"picks the last layer \((?P<items>[^)]*?) nats\) where the unrestricted choice is layer (?P<layer>\d+)",
                    "the single-layer rule", once=True):
        for model, it in _listed(q, m, "items", MODELS):
            model = MODELS[model]
            r = q.row(selection, model=model, setting="paper", method="ELSI, from layer N//2 (Sec. 5.1)", m=1)
            q.cell(it, "v", r, "entropy", selection)
            n_layers = q.row(summary, model=model)
            if r is not None and n_layers is not None and _layers(r["layers"]) != (int(n_layers["layers"]) - 1,):
                q.problems.append(f"{selection}.csv: the single-layer rule picks {r['layers']} in {model}, not the last")
            free = q.row(selection, model=model, setting="paper", method="ELSI", m=1)
            if free is not None and _layers(free["layers"]) != (int(m.group("layer")),):
                q.problems.append(f"{selection}.csv: the unrestricted choice in {model} is {free['layers']}")
    for m in q.find(r"Bootstrap over prompts: (?P<items>.*?resamples)", "the bootstrap over prompts", once=True):
        for it in q.find(r"(?P<model>Qwen|SmolLM2)'s (?:choice is stable \(|holds in )(?P<v>\d+) %",
                         "the bootstrap share per model", *m.span("items")):
            r = q.row("table1_bootstrap", model=MODELS[it.group("model")], **{"chosen on all prompts": "True"})
            q.cell(it, "v", r, "share", "table1_bootstrap", scale=100)
    return q.finish(percents=True)


# ---------------------------------------------------------------- the tests

def test_figure_findings_quote_their_own_cells():
    problems = figure_problems()
    assert not problems, "README figure findings disagree with data/results:\n" + "\n".join(problems)


def test_accepted_token_findings_quote_their_own_cells():
    """Each number of the accepted-token findings is its own cell of data/results/table2_*.csv."""
    problems = accepted_token_problems()
    assert not problems, "README accepted-token findings disagree with data/results:\n" + "\n".join(problems)


def test_a_number_moved_to_another_cell_fails():
    """Swapping two of the table's quotes (each still a value of the table) fails both: a number
    must be its own cell, not any cell."""
    text = README.read_text()
    part = section(text, ACCEPTED)
    old = "| EAGLE2 | (29,) | 1.65 [1.62, 1.68] | 1.72 [1.68, 1.76] |"
    assert old in part
    swapped = text.replace(old, "| EAGLE2 | (29,) | 1.72 [1.68, 1.76] | 1.65 [1.62, 1.68] |")
    assert len([p for p in accepted_token_problems(swapped) if "README says" in p]) == 6
    unclaimed = text.replace(part, part + "\nA stray figure: 1.65.\n")
    assert any("claimed by 0 quotes" in p for p in accepted_token_problems(unclaimed))
