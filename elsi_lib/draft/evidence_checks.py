"""What the evidence file (`draft.evidence`) must hold, checked field by field even behind a valid
checksum (a study bug would otherwise reach users): every comparison's names, layer sets (of its
family's layer count, EAGLE3's the baseline), counts, temperature and an interval that is the
seed-level half-width its variances give; each fit is the least-squares fit its comparisons give
(`draft.decision.fit` on `points`), judged by out-of-sample rows that give its coverage (the pooled
criteria rows: `draft.pooled_checks`). Any malformation is an `EvidenceUnavailable` naming the row and the
field.
"""

from __future__ import annotations

import math
import re
from collections import Counter

import numpy as np
from scipy import stats

from ..inputs.models import REGISTRY
from ..selection.conventions import eagle3_layers
from ..selection.methods import METHODS
from . import decision
from .decision import LEVEL, widening

NODES = 60  # the larger tree of the tables: the fits' outcome
MAX_TEMPERATURE = 2.0  # sampling temperatures the tables use are 0 and 1
BASELINE = "EAGLE3"  # every comparison is a draft against EAGLE3's, on EAGLE3's rule's set
# the criteria the methods choose by, as the records name them (`selection.methods` declares each method's)
CRITERIA = tuple(dict.fromkeys(m.criterion for m in METHODS.values() if m.criterion))
FAMILY_ALIASES = {  # what a user may type for a bundled family: hub ids and folders, in any capitals
    "smollm2-135m": ("huggingfacetb/smollm2-135m-instruct", "smollm2-135m-instruct"),
    "qwen2.5-coder-0.5b": ("qwen/qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-0.5b-instruct"),
}
# a draft's label in the tables: EAGLE2's, or a method's with its set size (and a variant after a comma)
DRAFT_LABEL = re.compile(
    r"EAGLE2|(ELSI|ELSI-C|probe|lowest-entropy|exhaustive) m=\d+(, [A-Za-z][A-Za-z ]*)?"
)  # as spelt
FIT_TOLERANCE = 1e-6  # relative: a stored fit against the refit of its comparisons
# absolute: two records of one set hold one criterion value up to this (the ledger's records check); a row's
# d is a difference of two such values, so two rows of one set may differ by twice it
SAME_SCORE = 1e-6


class EvidenceUnavailable(ValueError):
    """The evidence file cannot be used; the message says why in one line."""


def points(comparisons: list[dict], temperature: float) -> list[dict]:
    """The drafts a criterion's model is fitted on: the comparisons at NODES nodes and `temperature` with
    a measured difference, one per distinct set of a protocol group (numeric twins train the same sets
    on the same data, and two methods that chose the same layers trained one draft: the row of the
    most seeds, then of the most baseline seeds, then of the protocol with more drafts speaks for it,
    the first of equals), EAGLE2 left out (its feature is the last layer after the final norm, not the
    layer set the criteria score)."""
    rows = [
        c
        for c in comparisons
        if float(c["temperature"]) == float(temperature) and c["nodes"] == NODES and c["method"] != "EAGLE2"
        if c.get("diff") is not None and math.isfinite(c["diff"])
    ]
    drafts = Counter(c["protocol"] for c in rows)
    best: dict = {}
    for c in rows:
        key, rank = (c["group"], c["layers"]), (c["seeds"], c["baseline seeds"], drafts[c["protocol"]])
        if key not in best or rank > best[key][0]:
            best[key] = (rank, c)
    return [c for _, c in best.values()]


TEXT_FIELDS = ("protocol", "group", "family", "method", "layers", "baseline layers", "baseline", "seed level")
FIT_FIELDS = ("columns", "beta", "xtx_inv", "s2", "df", "widen")


def _number(where: str, field: str, v, lo: float = -math.inf, hi: float = math.inf, *, integer: bool = False) -> None:
    """EvidenceUnavailable naming `where` and `field` unless `v` is a finite number (an integer if asked:
    never a bool or text) within [lo, hi]."""
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and lo <= v <= hi
    if ok and integer:
        ok = isinstance(v, int)  # a count: 4744, never 4744.0
    if not ok:
        kind = "an integer" if integer else "a number"
        raise EvidenceUnavailable(f"{where}: {field} = {v!r}, not {kind} in [{lo:g}, {hi:g}]")


def _text(where: str, field: str, v) -> None:
    if not (isinstance(v, str) and v and v == v.strip()):
        raise EvidenceUnavailable(f"{where}: {field} = {v!r}, not a name (text without surrounding spaces)")


def _check_fit(where: str, fit) -> None:
    """A least-squares fit as `decision.Fit` holds it: columns (the groups, then "slope"), beta and the
    square (X'X)^-1 of that size, s2 > 0 on df >= 1 degrees of freedom, a widening >= 1."""
    if not isinstance(fit, dict) or sorted(fit) != sorted(FIT_FIELDS):
        raise EvidenceUnavailable(f"{where}: a fit must hold exactly {list(FIT_FIELDS)}")
    columns, beta, inv = fit["columns"], fit["beta"], fit["xtx_inv"]
    if not (
        isinstance(columns, list)
        and len(columns) >= 2
        and columns[-1] == "slope"
        and all(isinstance(c, str) and c for c in columns)
        and len(set(columns)) == len(columns)
    ):
        raise EvidenceUnavailable(f"{where}: columns {columns!r} must be distinct group names, then 'slope'")
    if not (isinstance(beta, list) and len(beta) == len(columns)):
        raise EvidenceUnavailable(
            f"{where}: beta has {len(beta) if isinstance(beta, list) else beta!r} terms, columns {len(columns)}"
        )
    for i, b in enumerate(beta):
        _number(where, f"beta[{i}]", b)
    if not (
        isinstance(inv, list)
        and len(inv) == len(columns)
        and all(isinstance(r, list) and len(r) == len(columns) for r in inv)
    ):
        raise EvidenceUnavailable(f"{where}: xtx_inv is not {len(columns)} x {len(columns)}")
    for i, row in enumerate(inv):
        for j, x in enumerate(row):
            _number(where, f"xtx_inv[{i}][{j}]", x)
        _number(where, f"xtx_inv[{i}][{i}]", row[i], 0)
    matrix = np.array(inv, dtype=float)
    if not np.allclose(matrix, matrix.T, rtol=1e-9, atol=1e-12) or np.linalg.eigvalsh(matrix).min() <= 0:
        raise EvidenceUnavailable(f"{where}: xtx_inv is not a symmetric positive definite matrix ((X'X)^-1 is one)")
    _number(where, "s2", fit["s2"], 1e-300)
    _number(where, "df", fit["df"], 1, integer=True)
    _number(where, "widen", fit["widen"], 1)


def _check_held_out(where: str, entry: dict) -> None:
    """A fit entry's coverage, coverage widened and widening are what its out-of-sample rows give
    (`decision.widening`); the rows themselves are checked against the comparisons first (`_check_refit`).
    No rows, no fit."""
    held = entry["out of sample"]
    if not held:
        if any(entry[k] is not None for k in ("family", "pooled", "coverage", "widen")):
            raise EvidenceUnavailable(f"{where}: a fit or coverage with no out-of-sample rows to judge it by")
        return
    r = np.array([row["ratio"] for row in held])
    slack = 1e-6  # the rows' ratios are rounded to 6 decimals
    expect = {"coverage": float((r <= 1 + slack).mean()), "widen": widening(r)}
    if entry["widen"] is not None:
        expect["coverage widened"] = float((r <= entry["widen"] + slack).mean())
    for field, value in expect.items():
        if entry.get(field) is None or not math.isclose(entry[field], value, rel_tol=1e-4, abs_tol=1e-4):
            raise EvidenceUnavailable(
                f"{where}: {field} = {entry.get(field)!r}, its out-of-sample rows give {value:.6g}"
            )


def check_contents(data: dict, path) -> None:
    """What the answer reads, checked even behind a valid checksum (a study bug would otherwise reach
    users), every field by type and range, naming the row and the field: each comparison's names, counts,
    temperature and interval (ordered around its difference), one row per (protocol, family, method,
    temperature, nodes); each criterion's fits at the comparisons' temperatures (the pooled rows and the
    default method: `pooled_checks.check_pooled_rows`)."""
    for field in ("comparisons", "models", "pooled_criteria", "default_method"):
        if field not in data:
            raise EvidenceUnavailable(f"{path} has no {field!r}")
    if not all(isinstance(data[f], list) for f in ("comparisons", "pooled_criteria")) or not isinstance(
        data["models"], dict
    ):
        raise EvidenceUnavailable(f"{path}: comparisons and pooled_criteria must be lists, models a mapping")
    provenance = data.get("provenance")
    provenance = provenance if isinstance(provenance, dict) else {}
    records = provenance.get("records")
    if not (
        isinstance(records, dict)
        and records
        and all(
            isinstance(k, str)
            and re.fullmatch(r"[a-z0-9_]+/[a-z0-9][a-z0-9._-]*\.json", k)  # <protocol>/<unit>.json, nowhere else
            and ".." not in k
            and isinstance(v, str)
            and re.fullmatch(r"[0-9a-f]{64}", v)
            for k, v in records.items()
        )
        and (provenance.get("commit") is None or isinstance(provenance["commit"], str))
    ):
        raise EvidenceUnavailable(
            f"{path}: provenance must name each record it rests on (<protocol>/<unit>.json) with its sha256, and a commit"
        )
    if data.get("nodes") != NODES or isinstance(data.get("nodes"), bool):
        raise EvidenceUnavailable(f"{path}: nodes {data.get('nodes')!r}; elsi's readers compare at {NODES}")
    seen: set = set()
    held = {name.split("/")[0] for name in records}  # the protocols the file rests on records of
    protocols: dict = {}  # protocol -> (family, group, prompts): one of each a protocol
    one_draft: dict = {}  # (protocol, layers, T, nodes, seeds a side) -> its numbers: two methods, one draft
    for i, c in enumerate(data["comparisons"]):
        where = (
            f"{path}, comparison {i} ({c.get('protocol')}, {c.get('method')})"
            if isinstance(c, dict)
            else f"{path}, comparison {i}"
        )
        if not isinstance(c, dict):
            raise EvidenceUnavailable(f"{where}: not a row")
        for field in TEXT_FIELDS:
            _text(where, field, c.get(field))
        if c["seed level"] not in ("yes", "no"):
            raise EvidenceUnavailable(f"{where}: seed level = {c['seed level']!r}, not 'yes' or 'no'")
        if c["family"] not in FAMILY_ALIASES:
            raise EvidenceUnavailable(
                f"{where}: family {c['family']!r} is not one of the ledger's {sorted(FAMILY_ALIASES)}"
            )
        _number(where, "temperature", c.get("temperature"), 0, MAX_TEMPERATURE)
        if math.copysign(1.0, c["temperature"]) < 0:
            raise EvidenceUnavailable(f"{where}: temperature -0.0, not a temperature the tables use")
        _number(where, "nodes", c.get("nodes"), 1, integer=True)
        _number(where, "prompts", c.get("prompts"), 1, integer=True)
        _number(where, "questions", c.get("questions"), 0, integer=True)
        for field in ("seeds", "baseline seeds"):
            _number(where, field, c.get(field), 1, integer=True)
        if c["seed level"] == "yes" and max(c["seeds"], c["baseline seeds"]) < 2:
            raise EvidenceUnavailable(f"{where}: seed level 'yes' with one seed a side: no seed variance was measured")
        if c.get("diff") is not None:
            for field in ("diff", "low", "high"):
                _number(where, field, c.get(field))
            if not c["low"] <= c["diff"] <= c["high"]:
                raise EvidenceUnavailable(
                    f"{where}: interval [{c['low']}, {c['high']}] does not hold its diff {c['diff']}"
                )
        key = (c["protocol"], c["family"], c["method"], float(c["temperature"]), c["nodes"])
        if key in seen:
            raise EvidenceUnavailable(f"{where}: listed twice at T = {key[3]:g}, {key[4]} nodes")
        seen.add(key)
        if c["protocol"] not in held:
            raise EvidenceUnavailable(f"{where}: protocol {c['protocol']!r} holds no record this file rests on")
        _check_comparison(where, c, protocols)
        if c["method"] != "EAGLE2" and c.get("diff") is not None:  # EAGLE2's feature is not its set's: another draft
            draft = (c["protocol"], c["layers"], float(c["temperature"]), c["nodes"], c["seeds"], c["baseline seeds"])
            numbers = (c["diff"], c["low"], c["high"])
            first = one_draft.setdefault(draft, (numbers, c["method"]))
            if not all(math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12) for a, b in zip(first[0], numbers)):
                raise EvidenceUnavailable(
                    f"{where}: layers {c['layers']} with {c['seeds']} seed(s) are {first[1]}'s draft too, whose "
                    f"difference is {first[0][0]:+.4f}, not {c['diff']:+.4f}: one draft, one measurement"
                )
    temperatures = {float(c["temperature"]) for c in data["comparisons"]}
    for criterion in CRITERIA:
        entries = data["models"].get(criterion)
        if not isinstance(entries, dict) or not entries:
            raise EvidenceUnavailable(f"{path}: models has no fits for {criterion!r}")
        try:
            held = {float(t) for t in entries}
        except (TypeError, ValueError):
            raise EvidenceUnavailable(f"{path}: models[{criterion!r}] has a temperature that is not a number") from None
        if len(held) != len(entries):
            raise EvidenceUnavailable(f"{path}: models[{criterion!r}] holds one temperature twice ({sorted(entries)})")
        if held != temperatures:
            raise EvidenceUnavailable(
                f"{path}: models[{criterion!r}] holds temperatures {sorted(held)}, the comparisons {sorted(temperatures)}"
            )
        for t, entry in entries.items():
            where = f"{path}, models[{criterion!r}][{t!r}]"
            if not isinstance(entry, dict) or not all(k in entry for k in ("family", "pooled", "coverage", "widen")):
                raise EvidenceUnavailable(f"{where}: not a fit entry (family, pooled, coverage, widen)")
            for kind in ("family", "pooled"):
                if entry[kind] is not None:
                    _check_fit(f"{where}[{kind!r}]", entry[kind])
                    if entry["widen"] is not None and entry[kind]["widen"] != entry["widen"]:
                        raise EvidenceUnavailable(
                            f"{where}: its {kind} fit is widened {entry[kind]['widen']}x, the entry says {entry['widen']}x"
                        )
            if entry["pooled"] is not None and entry["pooled"]["columns"] != ["pooled", "slope"]:
                raise EvidenceUnavailable(
                    f"{where}: the pooled fit's columns are {entry['pooled']['columns']}, not ['pooled', 'slope']"
                )
            if entry["family"] is not None and not set(entry["family"]["columns"][:-1]) <= set(FAMILY_ALIASES):
                raise EvidenceUnavailable(
                    f"{where}: the family fit's columns {entry['family']['columns']} name no ledger family"
                )
            if (
                entry["coverage"] is not None
                and entry["widen"] is not None
                and entry["widen"] > 1
                and "coverage widened" not in entry
            ):
                raise EvidenceUnavailable(f"{where}: widened {entry['widen']}x but no 'coverage widened'")
            for field in ("coverage", "coverage widened"):
                if entry.get(field) is not None:
                    _number(where, field, entry[field], 0, 1)
            if entry["widen"] is not None:
                _number(where, "widen", entry["widen"], 1)
            rests = entry.get("rests on")
            if not isinstance(rests, dict):
                raise EvidenceUnavailable(f"{where}: no 'rests on' (the drafts, protocols, families, seeds behind it)")
            _number(where, "rests on drafts", rests.get("drafts"), 1, integer=True)
            _number(where, "rests on seeds", rests.get("seeds"), 1, integer=True)
            for field in ("protocols", "families"):
                if not (isinstance(rests.get(field), list) and rests[field]):
                    raise EvidenceUnavailable(f"{where}: rests on {field} = {rests.get(field)!r}, not a list of names")
                for name in rests[field]:
                    _text(where, f"rests on {field}", name)
            _check_refit(where, entry, criterion, points(data["comparisons"], float(t)))
            _check_held_out(where, entry)


def held_out(pts: list[dict], criterion: str) -> list[dict]:
    """Leave one protocol group out (`points` of one temperature): each held-out draft's prediction from
    the others' fit (the family's where the rest hold its family, else the pooled one, `decision.fit`),
    its 95% half-width, the measured difference and |error| / half-width ("ratio"); none with fewer than
    two groups. The study writes these rows; the reader recomputes them."""
    groups = list(dict.fromkeys(c["group"] for c in pts))
    rows: list[dict] = []
    if len(groups) < 2:
        return rows
    for group in groups:
        train = [c for c in pts if c["group"] != group]
        x = np.array([c[f"d {criterion}"] for c in train], float)
        y = np.array([c["diff"] for c in train], float)
        own = decision.fit([c["family"] for c in train], x, y, pooled=False)
        pooled = decision.fit([c["family"] for c in train], x, y, pooled=True)
        for c in (c for c in pts if c["group"] == group):
            use = own if own is not None and c["family"] in own.columns[:-1] else pooled
            if use is None:
                continue
            d, half = decision.predict(use, c["family"] if use is own else None, c[f"d {criterion}"])
            rows.append(
                {
                    "held out": group,
                    "protocol": c["protocol"],
                    "layers": c["layers"],
                    "model": "family" if use is own else "pooled",
                    "predicted": d,
                    "half": half,
                    "measured": c["diff"],
                    "ratio": abs(c["diff"] - d) / half,
                }
            )
    return rows


def _layer_ids(where: str, field: str, text, n_layers: int) -> tuple:
    """The ascending distinct layer ids `text` ("1 14 26") names, each one of the family's `n_layers`."""
    ids = tuple(int(x) for x in text.split()) if isinstance(text, str) and re.fullmatch(r"\d+( \d+)*", text) else None
    if ids is None or list(ids) != sorted(set(ids)) or ids[-1] >= n_layers or text != " ".join(map(str, ids)):
        raise EvidenceUnavailable(
            f"{where}: {field} = {text!r}, not ascending distinct layer ids of the family's {n_layers} layers"
        )
    return ids


def _check_comparison(where: str, c: dict, protocols: dict) -> None:
    """One comparison's sets, counts and interval agree with each other and with its protocol's other rows."""
    family, n_layers = c["family"], REGISTRY[c["family"]].n_layers
    ids = _layer_ids(where, "layers", c["layers"], n_layers)
    base = _layer_ids(where, "baseline layers", c["baseline layers"], n_layers)
    rule = tuple(eagle3_layers(n_layers))
    if c["baseline"] != BASELINE or base != rule:
        raise EvidenceUnavailable(
            f"{where}: baseline {c['baseline']!r} on layers {c['baseline layers']!r}: every comparison is against "
            f"{BASELINE}'s rule's set on {family} ({' '.join(map(str, rule))})"
        )
    if not DRAFT_LABEL.fullmatch(c["method"]):
        raise EvidenceUnavailable(
            f"{where}: method {c['method']!r} is not a draft's label (EAGLE2, or a method's label with its set "
            "size, such as 'ELSI m=3' or 'probe m=3, ...')"
        )
    size = re.search(r"\bm=(\d+)\b", c["method"])
    want = int(size.group(1)) if size else {"EAGLE2": 1}.get(c["method"])
    if want is None or len(ids) != want:
        raise EvidenceUnavailable(
            f"{where}: method {c['method']!r} with layers {c['layers']!r}: a label says its set's size "
            "(m=K, or EAGLE2's one layer) and the set must have it"
        )
    if not c["group"].startswith(family + "/"):
        raise EvidenceUnavailable(f"{where}: group {c['group']!r} is not one of {family}'s parameter files")
    for criterion in CRITERIA:
        d = c.get(f"d {criterion}")
        if d is None:
            continue
        _number(where, f"d {criterion}", d)
        if ids == rule and d != 0:
            raise EvidenceUnavailable(f"{where}: d {criterion} {d:+.4g} for the baseline's own set: it is 0 there")
        if c["method"] != "EAGLE2":  # a criterion scores the set on its protocol's capture, whichever method chose it
            first = protocols.setdefault((c["protocol"], c["layers"], criterion), (d, c["method"]))
            if not math.isclose(first[0], d, rel_tol=0.0, abs_tol=2 * SAME_SCORE):
                raise EvidenceUnavailable(
                    f"{where}: d {criterion} {d:+.6g} for layers {c['layers']}, {first[1]}'s row of the same set "
                    f"{first[0]:+.6g}: one set has one score on its protocol's capture"
                )
    mine = (family, c["group"], c["prompts"])
    if protocols.setdefault(c["protocol"], mine) != mine:
        raise EvidenceUnavailable(
            f"{where}: (family, group, prompts) {mine}, its protocol's other rows {protocols[c['protocol']]}"
        )
    drafts = (c["layers"], c["seeds"], c["baseline seeds"], c["seed level"])  # one set of records a method
    if protocols.setdefault((c["protocol"], c["method"]), drafts) != drafts:
        raise EvidenceUnavailable(
            f"{where}: (layers, seeds, baseline seeds, seed level) {drafts}, its method's rows at other "
            f"temperatures or trees {protocols[(c['protocol'], c['method'])]}: one protocol's records give one"
        )
    if c.get("diff") is None:
        return
    _number(where, "questions", c["questions"], 2, integer=True)
    for field in ("questions variance", "seed variance"):
        _number(where, field, c.get(field), 0)
    _number(where, "df", c.get("df"), 1)
    if c["seed level"] == "no" and (max(c["seeds"], c["baseline seeds"]) > 1 or c["seed variance"] != 0):
        raise EvidenceUnavailable(
            f"{where}: seed level 'no' with {c['seeds']} and {c['baseline seeds']} seeds and seed variance "
            f"{c['seed variance']}: a side with two seeds measures the seed variance"
        )
    _check_df(where, c, protocols)
    half = float(stats.t.ppf(0.5 + LEVEL / 2, c["df"]) * math.sqrt(c["questions variance"] + c["seed variance"]))
    for end, width in (("low", c["diff"] - c["low"]), ("high", c["high"] - c["diff"])):
        if not math.isclose(width, half, rel_tol=1e-6, abs_tol=1e-12):
            raise EvidenceUnavailable(
                f"{where}: {end} {c[end]} is {width:.6g} from the difference, its variances and df give a "
                f"95% half-width of {half:.6g}"
            )


def _check_df(where: str, c: dict, protocols: dict) -> None:
    """The interval's degrees of freedom are Welch-Satterthwaite's for its variances: the questions' less
    one without seed variance; with it, the seed variance's own df (what the df implies) is a whole
    number, and that df and the between-seed variance (seed variance over 1/seeds + 1/baseline seeds)
    are one for all of a protocol's rows at a temperature and tree (pooled over its methods)."""
    n, v_q, v_s, df = c["questions"], c["questions variance"], c["seed variance"], c["df"]
    if v_s == 0:
        if not math.isclose(df, n - 1, rel_tol=1e-9):
            raise EvidenceUnavailable(f"{where}: df {df:g} without seed variance, but {n} questions give {n - 1}")
        return
    rest = (v_q + v_s) ** 2 / df - v_q**2 / (n - 1)
    df_s = v_s**2 / rest if rest > 0 else math.inf
    if not (math.isfinite(df_s) and df_s >= 1 - 1e-6 and math.isclose(df_s, round(df_s), rel_tol=1e-6)):
        raise EvidenceUnavailable(
            f"{where}: df {df:g} with {n} questions and variances {v_q:.4g} (questions) and {v_s:.4g} (seeds) "
            "is no Welch-Satterthwaite df: it implies no whole number of seed degrees of freedom"
        )
    pooled = (round(df_s), v_s / (1 / c["seeds"] + 1 / c["baseline seeds"]))
    first = protocols.setdefault((c["protocol"], float(c["temperature"]), c["nodes"], "seeds"), pooled)
    if first[0] != pooled[0] or not math.isclose(first[1], pooled[1], rel_tol=1e-6):
        raise EvidenceUnavailable(
            f"{where}: between-seed variance {pooled[1]:.4g} on {pooled[0]} df, the protocol's other rows at T = "
            f"{c['temperature']:g}, {c['nodes']} nodes {first[1]:.4g} on {first[0]}: one pooled seed variance a protocol"
        )


def _number_like(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _close(a, b) -> bool:
    return bool(np.allclose(np.asarray(a, float), np.asarray(b, float), rtol=FIT_TOLERANCE, atol=1e-12))


def _check_refit(where: str, entry: dict, criterion: str, pts: list[dict]) -> None:
    """A fit entry is what its comparisons give: the fit refitted on its points (the same least squares the
    study ran), and it rests on exactly those drafts, protocols, groups, families and seeds."""
    pts = [c for c in pts if c.get(f"d {criterion}") is not None]
    x = np.array([c[f"d {criterion}"] for c in pts], float)
    y = np.array([c["diff"] for c in pts], float)
    for kind in ("family", "pooled"):
        stored = entry[kind]
        refit = decision.fit([c["family"] for c in pts], x, y, pooled=kind == "pooled")
        if stored is None:  # none only where no fit exists or no out-of-sample judgement (widen) was made
            if refit is not None and entry.get("widen") is not None:
                raise EvidenceUnavailable(
                    f"{where}[{kind!r}]: no fit, but its {len(pts)} comparisons give one (the decision would fall "
                    "back to another fit)"
                )
            continue
        differs = (
            refit is None
            or list(refit.columns) != stored["columns"]
            or refit.df != stored["df"]
            or not all(_close(getattr(refit, k), stored[k]) for k in ("beta", "xtx_inv", "s2"))
        )
        if differs:
            raise EvidenceUnavailable(
                f"{where}[{kind!r}]: not the fit its {len(pts)} comparisons at {NODES} nodes give"
                + ("" if refit is None else f" (columns {list(refit.columns)}, df {refit.df}, s2 {refit.s2:.6g})")
            )
    expected = held_out(pts, criterion)
    found = entry.get("out of sample")
    rows: list = found if isinstance(found, list) else []
    same = isinstance(found, list) and len(rows) == len(expected)
    for mine, theirs in zip(rows if same else [], expected):
        same = (
            same
            and isinstance(mine, dict)
            and all(
                mine.get(k) == theirs[k]
                if isinstance(theirs[k], str)
                else _number_like(mine.get(k)) and abs(mine[k] - theirs[k]) <= 2e-6 + 1e-6 * abs(theirs[k])
                for k in theirs
            )
        )
    if not same:
        raise EvidenceUnavailable(
            f"{where}: its out-of-sample rows are not what leaving each protocol group out of its comparisons "
            f"gives ({len(expected)} rows)"
        )
    rests = entry["rests on"]
    given = {
        "drafts": len(pts),
        "protocols": sorted({c["protocol"] for c in pts}),
        "groups": len({c["group"] for c in pts}),
        "families": sorted({c["family"] for c in pts}),
        "seeds": max((max(c["seeds"], c["baseline seeds"]) for c in pts), default=0),
    }
    for field, value in given.items():
        if rests.get(field) != value:
            raise EvidenceUnavailable(f"{where}: rests on {field} {rests.get(field)!r}, its comparisons give {value!r}")
