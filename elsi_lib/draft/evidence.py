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
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..common.checks import unique_keys
from ..inputs.models import REGISTRY, bundled_weights_of
from ..selection.conventions import eagle3_layers
from ..selection.methods import METHODS
from .decision import Decision, Fit, decide
from .pooled_checks import check_pooled_rows
from .evidence_checks import (
    FAMILY_ALIASES,
    NODES,
    EvidenceUnavailable,
    check_contents,
    points,
)

SCHEMA = 1
EVIDENCE_PATH = Path(__file__).resolve().parent.parent / "evidence.json"


def canonical(payload: dict) -> bytes:
    """The bytes the checksum is over: sorted keys, no spaces, NaN refused."""
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def load(path: str | Path | None = None) -> dict:
    """The evidence file, checked: readable JSON, schema SCHEMA, the checksum its contents give."""
    path = Path(path or EVIDENCE_PATH)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise EvidenceUnavailable(f"no evidence file at {path} (make evidence writes it)") from None
    except OSError as err:
        raise EvidenceUnavailable(f"{path} is not readable JSON ({err})") from None
    return checked(raw, path)


def checked(raw: bytes, path: Path) -> dict:
    """The evidence file's bytes `raw` (named `path` in errors) as `load` reads them, checked: the builder
    runs this on what it made before writing it, so it never writes a file the reader refuses."""
    try:
        data = json.loads(raw, object_pairs_hook=unique_keys)
    except (ValueError, RecursionError) as err:
        raise EvidenceUnavailable(f"{path} is not readable JSON ({err})") from None
    if not isinstance(data, dict) or type(data.get("schema")) is not int or data["schema"] != SCHEMA:
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
        check_contents(data, path)
        check_pooled_rows(data, path)
    except EvidenceUnavailable:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as err:  # a shape no check foresaw
        raise EvidenceUnavailable(f"{path}: malformed ({type(err).__name__}: {err})") from None
    return data


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
    hub id in any capitals, or an existing folder named as the hub id's last part (where a hub download
    lands) whose config.json has the family's shape (layers, d, vocabulary); else None. Another owner's hub
    id of the same name ("someone/SmolLM2-135M-Instruct", a fine-tune perhaps), a folder of another model
    under that name, and a name ending in the registry name alone (HuggingFaceTB/SmolLM2-135M: the base
    model, not the instruct one the evidence was measured on) are not the family."""
    if str(model) in FAMILY_ALIASES:  # a registry name is the bundled model, as the loader reads it
        return str(model)
    name = str(model).rstrip("/")
    folder = Path(name).name.lower() if Path(name).is_dir() else None  # what the loader reads is a folder then
    for family, aliases in FAMILY_ALIASES.items():
        if folder is not None and (folder in aliases[1:] or name.lower() in aliases):
            entry = REGISTRY[family]
            shape = (entry.n_layers, entry.hidden_size, entry.vocab_size)
            return family if _shape(Path(name)) == shape else None  # its config decides
        if folder is None and name.lower() in aliases:
            return family
    return bundled_weights_of(name)  # the bundled GGUF by its path, or the folder elsi converted it into


def _shape(folder: Path) -> tuple | None:
    """(decoder layers, d, vocabulary) of a model folder's config.json (None without a readable one)."""
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(config, dict):
        return None
    config = config.get("text_config", config) if isinstance(config.get("text_config"), dict) else config
    return tuple(config.get(k) for k in ("num_hidden_layers", "hidden_size", "vocab_size"))


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
    out: dict[float, dict[str, Any]] = {}
    for t, entry in evidence["models"][criterion].items():
        out[float(t)] = {
            kind: (Fit(**{k: _tuple(v) for k, v in entry[kind].items()}) if entry[kind] else None)
            for kind in ("family", "pooled")
        }
        if entry["coverage"] is None:  # withheld untested: why, by the protocol groups the drafts came from
            out[float(t)]["unjudged"] = unjudged_reason(entry["rests on"]["groups"])
    return out


def unjudged_reason(groups: int) -> str:
    """Why a criterion's model could not be judged out of sample, from its drafts' protocol groups."""
    if groups <= 1:
        return "its drafts come from one protocol group"
    return (
        f"no one of its {groups} protocol groups could be predicted from the others' drafts (too few to fit without it)"
    )


def _tuple(v):
    return tuple(_tuple(x) for x in v) if isinstance(v, list) else v


def measured(evidence: dict, family: str | None, layers: tuple, default: tuple, nodes: int = NODES) -> list[dict]:
    """The family's seed-level differences of drafts of exactly `layers` against drafts of exactly
    `default` (the comparisons' baseline is EAGLE3's set: against another default, such as OpenVINO's
    reading of the rule, none was measured)."""
    text, base = " ".join(map(str, layers)), " ".join(map(str, default))
    found: dict = {}  # two methods that chose one set trained one draft: the row of the most seeds speaks for it
    for c in evidence["comparisons"]:
        if (
            c["family"] == family
            and c["method"] != "EAGLE2"  # EAGLE2 reads its layer after the final norm: not the set's draft
            and c["layers"] == text
            and c["baseline layers"] == base
            and c["nodes"] == nodes
            and c["diff"] is not None
        ):
            key = (c["protocol"], float(c["temperature"]))
            if key not in found or c["seeds"] > found[key]["seeds"]:
                found[key] = c
    return list(found.values())


def decision(
    method: str, model: str, dscore: float, best: tuple, default: tuple, evidence: dict, baseline: tuple | None = None
) -> Decision:
    """`draft.decision.decide` for `method`'s best set against the engine's `default` on `model`. The fits
    predict a set's tau minus that of EAGLE3's rule's set (`baseline`; by default the family's): against
    another default their family intercept cancels (`decide(..., anchored=False)`)."""
    family = family_of(model)
    if baseline is None and family is not None:
        baseline = tuple(eagle3_layers(REGISTRY[family].n_layers))
    anchored = baseline is None or tuple(default) == tuple(baseline)
    criterion = str(criterion_of(method))
    fits = _fits(evidence, criterion)
    sizes = {
        len(c["layers"].split())
        for t in fits
        for c in points(evidence["comparisons"], float(t))
        if c.get(f"d {criterion}") is not None
    }
    return decide(
        fits, family, dscore, best, default, measured(evidence, family, best, default), anchored=anchored, sizes=sizes
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
            cover = f"not judged out of sample ({unjudged_reason(r['groups'])})"
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


def comparison_lines(evidence: dict, model: str, method: str, m: int, layers: tuple | None = None) -> list[str]:
    """The family's drafts of `method`'s set against EAGLE3's, per protocol (the most training prompts
    first, then the most seeds), at the seed level, at NODES nodes; a protocol whose drafts of the method
    chose another set than `layers` (the answer's, where given) says so."""
    family, name = family_of(model), label(method, m)
    if method == "eagle3":
        return ["evidence: EAGLE3's fixed set is the baseline every trained draft here is compared with"]
    if method == "eagle2":  # as `measured`: its drafts here read another state than an engine's id of the layer
        return [
            "evidence: none for this set: the EAGLE2 drafts here read the last layer's state after the final norm, "
            "while an engine's id of the last layer gives its state before it"
        ]
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
        other = layers is not None and c["layers"] != " ".join(map(str, sorted(layers)))
        lines.append(
            f"{name} drafts (layers {c['layers']}{', not this answer' + chr(39) + 's set' if other else ''}) on {family} "
            f"({protocol}: {c['prompts']:,} training prompts, {seeds}): tau minus EAGLE3's at {NODES} nodes {cells}"
        )
    return ["evidence: " + lines[0], *("  " + line for line in lines[1:])]


def criterion_line(evidence: dict, method: str | None = None) -> str | None:
    """The pooled criteria test in one line, and the default method it gives (and, where `method`, the one
    the answer used, is another, that it is); None without it."""
    rows = [
        r for r in evidence["pooled_criteria"] if r["criterion"] == "probe error" and r["outcome"] == "tau minus EAGLE3"
    ]
    if not rows:
        return None
    r = rows[0]
    held = evidence["default_method"] == "probe"
    return (
        f"criteria: a lower probe error against a higher tau minus EAGLE3's, pooled out of sample over "
        f"{int(r['drafts'])} drafts ({r['protocols']}): rho {r['pooled rho']:+.2f}, "
        f"p = {r['p (stratified permutation)']:.3f}; "
        + (
            "it tells poor sets from good ones, so the probe's set is the one compared with the default"
            if held
            else "no criterion has been shown to predict which draft is best, so ELSI's set is the one compared"
        )
        + (
            ""
            if method in (None, evidence["default_method"])
            else f" by default; this answer compares --method {method}'s set" + _own_criterion(evidence, method)
        )
    )


def _own_criterion(evidence: dict, method: str) -> str:
    """The pooled test of `method`'s own criterion, where it is another than the probe's error."""
    criterion = criterion_of(method)
    rows = [
        r for r in evidence["pooled_criteria"] if r["criterion"] == criterion and r["outcome"] == "tau minus EAGLE3"
    ]
    if criterion in (None, "probe error") or not rows:
        return ""
    r = rows[0]
    return f", whose {criterion} shows rho {r['pooled rho']:+.2f}, p = {r['p (stratified permutation)']:.3f} there"
