"""What the project's own trained drafts showed, read from the one evidence file the study writes
(`elsi_lib/evidence.json`, `make evidence`): a schema version, its provenance (the commit and the
sha256 of every record it rests on) and a checksum over the rest. `elsi select` reads it, and
nothing else of the study, to print

- the decision (`draft.decision`): keep the engine's default set unless the criterion's best set is
  predicted to beat it, with the prediction's interval and what it rests on;
- the family's drafts of the criterion's set against EAGLE3's, at the seed level;
- the pooled criteria test, and so the default method.

A file that is missing, altered or of another schema version is unavailable: the answer still comes,
with one line saying why (`EvidenceUnavailable`), never stale numbers.
"""

from __future__ import annotations

import hashlib
import json
import math

import numpy as np
from functools import lru_cache
from pathlib import Path

from ..selection.methods import METHODS
from .decision import Decision, Fit, decide, widening

SCHEMA = 1
EVIDENCE_PATH = Path(__file__).resolve().parent.parent / "evidence.json"
NODES = 60  # the larger tree of the tables
# the criteria the methods choose by, as the records name them (`selection.methods` declares each method's)
CRITERIA = tuple(dict.fromkeys(m.criterion for m in METHODS.values() if m.criterion))
FAMILY_ALIASES = {  # what a user may type for a bundled family: hub ids and folders, in any capitals
    "smollm2-135m": ("huggingfacetb/smollm2-135m-instruct", "smollm2-135m-instruct"),
    "qwen2.5-coder-0.5b": ("qwen/qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-0.5b-instruct"),
}


class EvidenceUnavailable(ValueError):
    """The evidence file cannot be used; the message says why in one line."""


def canonical(payload: dict) -> bytes:
    """The bytes the checksum is over: sorted keys, no spaces, NaN refused."""
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def load(path: str | Path | None = None) -> dict:
    """The evidence file, checked: readable JSON, schema SCHEMA, the checksum its contents give."""
    path = Path(path or EVIDENCE_PATH)
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise EvidenceUnavailable(f"no evidence file at {path} (make evidence writes it)") from None
    except (OSError, ValueError) as err:
        raise EvidenceUnavailable(f"{path} is not readable JSON ({err})") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        found = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise EvidenceUnavailable(f"{path} has schema {found!r}, this elsi reads schema {SCHEMA}")
    payload = {k: v for k, v in data.items() if k != "checksum"}
    try:
        digest = hashlib.sha256(canonical(payload)).hexdigest()
    except ValueError as err:
        raise EvidenceUnavailable(f"{path}: {err}") from None
    if digest != data.get("checksum"):
        raise EvidenceUnavailable(f"{path} fails its checksum: it was altered after the study wrote it")
    try:
        _check_contents(data, path)
    except EvidenceUnavailable:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as err:  # a shape no check foresaw
        raise EvidenceUnavailable(f"{path}: malformed ({type(err).__name__}: {err})") from None
    return data


ALPHA = 0.05  # the pooled test's level: the probe is the default method when its rho > 0 at p < ALPHA
TEXT_FIELDS = ("protocol", "family", "method", "layers", "baseline", "seed level")
FIT_FIELDS = ("columns", "beta", "xtx_inv", "s2", "df", "widen")


def default_for(pooled: list[dict]) -> str:
    """The method `elsi select` uses by default, from the pooled criteria rows: "probe" when the probe's
    error predicts tau minus EAGLE3's out of sample (pooled rho > 0 at p < ALPHA), else "elsi"."""
    rows = [r for r in pooled if r.get("criterion") == "probe error" and r.get("outcome") == "tau minus EAGLE3"]
    return "probe" if rows and rows[0]["pooled rho"] > 0 and rows[0]["p (stratified permutation)"] < ALPHA else "elsi"


def _number(where: str, field: str, v, lo: float = -math.inf, hi: float = math.inf, *, integer: bool = False) -> None:
    """EvidenceUnavailable naming `where` and `field` unless `v` is a finite number (an integer if asked:
    never a bool or text) within [lo, hi]."""
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and lo <= v <= hi
    if ok and integer:
        ok = float(v).is_integer()
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
    """A fit entry's out-of-sample rows agree with what it states: each row's ratio is |measured -
    predicted| / half; coverage, coverage widened and the widening are what those ratios give
    (`decision.widening`); the rows are the drafts it rests on (one per draft, of its protocols and
    held-out groups), and its family fit names only families it rests on. No rows, no fit."""
    held, rests = entry.get("out of sample"), entry["rests on"]
    if not isinstance(held, list):
        raise EvidenceUnavailable(f"{where}: 'out of sample' = {held!r}, not a list of rows")
    if not held:
        if any(entry[k] is not None for k in ("family", "pooled", "coverage", "widen")):
            raise EvidenceUnavailable(f"{where}: a fit or coverage with no out-of-sample rows to judge it by")
        return
    ratios = []
    for i, row in enumerate(held):
        at = f"{where}, out of sample row {i}"
        if not isinstance(row, dict):
            raise EvidenceUnavailable(f"{at}: not a row")
        for field in ("held out", "protocol", "layers"):
            _text(at, field, row.get(field))
        _number(at, "half", row.get("half"), 1e-12)
        for field in ("measured", "predicted"):
            _number(at, field, row.get(field))
        _number(at, "ratio", row.get("ratio"), 0)
        ratio = abs(row["measured"] - row["predicted"]) / row["half"]
        if not math.isclose(row["ratio"], ratio, rel_tol=1e-3, abs_tol=1e-3):
            raise EvidenceUnavailable(f"{at}: ratio {row['ratio']} is not |measured - predicted| / half = {ratio:.6f}")
        if row["protocol"] not in rests["protocols"]:
            raise EvidenceUnavailable(f"{at}: protocol {row['protocol']!r} is not one it rests on {rests['protocols']}")
        ratios.append(row["ratio"])
    r = np.array(ratios)
    if len(held) != rests["drafts"]:
        raise EvidenceUnavailable(f"{where}: {len(held)} out-of-sample rows, but it rests on {rests['drafts']} drafts")
    groups = len({row["held out"] for row in held})
    if groups != rests.get("groups"):
        raise EvidenceUnavailable(f"{where}: its rows hold out {groups} groups, it rests on {rests.get('groups')!r}")
    slack = 1e-6  # the rows' ratios are rounded to 6 decimals
    expect = {"coverage": float((r <= 1 + slack).mean()), "widen": widening(r)}
    if entry["widen"] is not None:
        expect["coverage widened"] = float((r <= entry["widen"] + slack).mean())
    for field, value in expect.items():
        if entry.get(field) is None or not math.isclose(entry[field], value, rel_tol=1e-4, abs_tol=1e-4):
            raise EvidenceUnavailable(
                f"{where}: {field} = {entry.get(field)!r}, its out-of-sample rows give {value:.6g}"
            )
    if entry["family"] is not None and not set(entry["family"]["columns"][:-1]) <= set(rests["families"]):
        raise EvidenceUnavailable(
            f"{where}: the family fit's columns {entry['family']['columns'][:-1]} are not among the families it "
            f"rests on {rests['families']}"
        )


def _check_contents(data: dict, path: Path) -> None:
    """What the answer reads, checked even behind a valid checksum (a study bug would otherwise reach
    users), every field by type and range, naming the row and the field: each comparison's names, counts,
    temperature and interval (ordered around its difference), one row per (protocol, family, method,
    temperature, nodes); each criterion's fits at the comparisons' temperatures; one pooled row per
    (criterion, outcome) with rho in [-1, 1] and p in (0, 1]; and a default method that is the one the
    pooled test gives (`default_for`)."""
    for field in ("comparisons", "models", "pooled_criteria", "default_method"):
        if field not in data:
            raise EvidenceUnavailable(f"{path} has no {field!r}")
    if not all(isinstance(data[f], list) for f in ("comparisons", "pooled_criteria")) or not isinstance(
        data["models"], dict
    ):
        raise EvidenceUnavailable(f"{path}: comparisons and pooled_criteria must be lists, models a mapping")
    seen: set = set()
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
        _number(where, "temperature", c.get("temperature"), 0)
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
            _check_held_out(where, entry)
    pairs = set()
    for i, r in enumerate(data["pooled_criteria"]):
        where = f"{path}, pooled criteria row {i}"
        if not isinstance(r, dict):
            raise EvidenceUnavailable(f"{where}: not a row")
        _text(where, "criterion", r.get("criterion"))
        _text(where, "outcome", r.get("outcome"))
        _text(where, "protocols", r.get("protocols"))
        _number(where, "pooled rho", r.get("pooled rho"), -1, 1)
        _number(where, "p (stratified permutation)", r.get("p (stratified permutation)"), 1e-300, 1)
        _number(where, "drafts", r.get("drafts"), 3, integer=True)
        protocols = r["protocols"].split()
        for field in ("per protocol rho", "per protocol p"):
            if r.get(field) is not None and len(str(r[field]).split()) != len(protocols):
                raise EvidenceUnavailable(
                    f"{where}: {field} {r[field]!r} has not one value for each of its protocols {protocols}"
                )
        if r["drafts"] < 3 * len(protocols):
            raise EvidenceUnavailable(
                f"{where}: {r['drafts']} drafts over {len(protocols)} protocols, fewer than the 3 a rank test needs in each"
            )
        pair = (r["criterion"], r["outcome"])
        if pair in pairs:
            raise EvidenceUnavailable(f"{where}: a pooled criteria row listed twice ({pair})")
        pairs.add(pair)
    chooses = [name for name, m in METHODS.items() if m.criterion]
    if data["default_method"] not in chooses:
        raise EvidenceUnavailable(f"{path}: default_method {data['default_method']!r} is not one of {chooses}")
    if data["default_method"] != default_for(data["pooled_criteria"]):
        raise EvidenceUnavailable(
            f"{path}: default_method {data['default_method']!r}, but its pooled criteria row gives "
            f"{default_for(data['pooled_criteria'])!r} (the probe is the default when its rho > 0 at p < {ALPHA})"
        )


@lru_cache(maxsize=4)
def _cached(path: str, stamp: float) -> dict:
    return load(path)


def current() -> dict:
    """The package's evidence file (cached while it is unchanged)."""
    try:
        stamp = EVIDENCE_PATH.stat().st_mtime
    except OSError:
        stamp = -1.0
    return _cached(str(EVIDENCE_PATH), stamp)


def family_of(model: str) -> str | None:
    """The bundled family a model name means, as the registry matches it: its registry name exactly, its
    hub id or a folder named as the hub id's last part (where a hub download lands) in any capitals;
    else None. A folder or hub id that ends
    in the registry name alone (HuggingFaceTB/SmolLM2-135M: the base model, not the instruct one the
    evidence was measured on) is not the family."""
    name = str(model).rstrip("/")
    for family, aliases in FAMILY_ALIASES.items():
        if name == family or name.lower() in aliases or Path(name.lower()).name in aliases[1:]:
            return family
    return None


def label(method: str, m: int) -> str | None:
    """The tables' label of a method's draft (None: a method the study trains no draft of)."""
    declared = METHODS.get(method)
    if declared is None or method in ("exhaustive", "eagle3"):  # no draft of either is trained here
        return None
    return declared.label.format(m=m)


def default_method(evidence: dict | None = None) -> str:
    """The method `elsi select` uses when none is given: the probe where its error predicted the
    drafts out of sample (the pooled test), else ELSI, the paper's method."""
    try:
        evidence = evidence or current()
    except EvidenceUnavailable:
        return "elsi"
    return evidence["default_method"]


def criterion_of(method: str) -> str | None:
    """The criterion `method` chooses by ("set entropy", "probe error"), None for a fixed method."""
    return METHODS[method].criterion


def _fits(evidence: dict, criterion: str) -> dict:
    out = {}
    for t, entry in evidence["models"][criterion].items():
        out[float(t)] = {
            kind: (Fit(**{k: _tuple(v) for k, v in entry[kind].items()}) if entry[kind] else None)
            for kind in ("family", "pooled")
        }
    return out


def _tuple(v):
    return tuple(_tuple(x) for x in v) if isinstance(v, list) else v


def measured(evidence: dict, family: str | None, layers: tuple, nodes: int = NODES) -> list[dict]:
    """The family's seed-level differences of drafts of exactly `layers` against EAGLE3's."""
    text = " ".join(map(str, layers))
    return [
        c
        for c in evidence["comparisons"]
        if c["family"] == family and c["layers"] == text and c["nodes"] == nodes and c["diff"] is not None
    ]


def decision(method: str, model: str, dscore: float, best: tuple, default: tuple, evidence: dict) -> Decision:
    """`draft.decision.decide` for `method`'s best set against the engine's `default` on `model`."""
    family = family_of(model)
    return decide(
        _fits(evidence, str(criterion_of(method))), family, dscore, best, default, measured(evidence, family, best)
    )


def rests_on(evidence: dict, method: str) -> list[str]:
    """What the prediction rests on: per temperature the drafts, protocols, seeds and the out-of-sample
    coverage of its intervals (leave one protocol out), and the widening that coverage asked for."""
    criterion = str(criterion_of(method))
    entries = evidence["models"][criterion]
    lines = [f"the prediction ({criterion} difference -> tau difference) rests on:"]
    for t, e in sorted(entries.items(), key=lambda kv: float(kv[0])):
        r = e["rests on"]
        if e["coverage"] is None:
            cover = "not judged out of sample (one protocol group)"
        else:
            cover = (
                f"its 95% intervals covered {100 * e['coverage']:.0f}% of them out of sample (leave one protocol out)"
            )
            if e["widen"] and e["widen"] > 1:
                cover += f", so they are widened {e['widen']:.2f}x (to {100 * e['coverage widened']:.0f}%)"
        lines.append(
            f"T = {float(t):g}: {r['drafts']} drafts of {len(r['protocols'])} protocols "
            f"({', '.join(r['families'])}), up to {r['seeds']} seeds a method; {cover}"
        )
    return lines


def comparison_lines(evidence: dict, model: str, method: str, m: int) -> list[str]:
    """The family's drafts of `method`'s set against EAGLE3's, per protocol (the most training prompts
    first, then the most seeds), at the seed level, at NODES nodes."""
    family, name = family_of(model), label(method, m)
    if method == "eagle3":
        return ["evidence: EAGLE3's fixed set is the baseline every trained draft here is compared with"]
    rows = [
        c
        for c in evidence["comparisons"]
        if c["method"] == name and c["nodes"] == NODES and c["family"] == family and c["diff"] is not None
    ]
    if family is None or not rows:
        where = (
            f"{model} is not a family the ledger holds" if family is None else f"no {name or method} draft on {family}"
        )
        return [f"evidence: none of this model's own: {where}"]
    lines = []
    mine_rows = list(rows)  # the most training prompts first, then the most seeds
    mine_rows.sort(key=lambda c: (-c["prompts"], -(c["seeds"] + c["baseline seeds"])))
    for protocol in dict.fromkeys(c["protocol"] for c in mine_rows):
        mine = sorted((c for c in rows if c["protocol"] == protocol), key=lambda c: c["temperature"])
        cells = "; ".join(
            f"T = {c['temperature']:g}: {c['diff']:+.3f} [{c['low']:+.3f}, {c['high']:+.3f}]" for c in mine
        )
        c = mine[0]
        seeds = f"{c['seeds']} seed{'s' * (c['seeds'] > 1)} against EAGLE3's {c['baseline seeds']}"
        seeds += "" if c["seed level"] == "yes" else ", seed variance not measured"
        lines.append(
            f"{name} drafts (layers {c['layers']}) on {family} ({protocol}: {c['prompts']:,} training prompts, {seeds}): tau minus "
            f"EAGLE3's at {NODES} nodes {cells}"
        )
    return ["evidence: " + lines[0], *("  " + line for line in lines[1:])]


def criterion_line(evidence: dict) -> str | None:
    """The pooled criteria test in one line, and the default method it gives; None without it."""
    rows = [
        r for r in evidence["pooled_criteria"] if r["criterion"] == "probe error" and r["outcome"] == "tau minus EAGLE3"
    ]
    if not rows:
        return None
    r = rows[0]
    held = evidence["default_method"] == "probe"
    return (
        f"criteria: the probe's error against tau minus EAGLE3's, pooled out of sample over {int(r['drafts'])} drafts "
        f"({r['protocols']}): rho {r['pooled rho']:+.2f}, p = {r['p (stratified permutation)']:.3f}; "
        + (
            "it tells poor sets from good ones, so the probe's set is the one compared with the default"
            if held
            else "no criterion has been shown to predict which draft is best, so ELSI's set is the one compared"
        )
    )
