"""The evidence file `elsi select` reads (`draft.evidence`), written from the drafts' records:

- every method's drafts against EAGLE3's on the same questions, per protocol, temperature and tree
  size, at the seed level (`seed_stats.difference`), with the seeds each side has;
- per criterion (the probe's held-out error, set entropy) and temperature, the fits that map the
  criterion's difference between a set and EAGLE3's to the difference in tau at 60 nodes
  (`draft.decision`), judged leave one protocol out (numeric twins left out together: they train
  the same sets on the same data), their intervals widened until they cover 90% of the drafts;
- the pooled criteria test (notebook 10's `criteria_pooled.csv`) and the default method it gives.

    python -m elsi_lib.study.ledger.evidence_file          write elsi_lib/evidence.json (make evidence), and the
                                                     comparisons as data/results/comparisons_seed_level.*
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from ...common.cachefiles import REPO_ROOT, atomic_write_chunks
from ...common.results import results_dir
from ...draft.decision import fit, widening
from ...draft.pooled_checks import OUTCOMES, POOLED_CRITERIA
from ...draft.evidence import EVIDENCE_PATH, SCHEMA, canonical, checked
from ...draft.evidence_checks import CRITERIA, NODES, EvidenceUnavailable
from ...draft.evidence_checks import held_out
from ...draft.evidence_checks import points as fit_points
from ..paper.plots import save_table
from .protocols import PROTOCOLS
from .record_tables import final_rows, verdict
from .draft_records import RecordError, read_records, record_paths, records_dir
from .ledger_tables import tables_now
from .seed_stats import difference
from ..experiments.criteria_vs_drafts import BASELINE

TEMPERATURES = (0.0, 1.0)
TREES = (30, 60)


def comparisons(names=tuple(PROTOCOLS)) -> pd.DataFrame:
    """One row per (protocol, method other than EAGLE3, temperature, nodes): the seed-level difference
    from EAGLE3 (`seed_stats.difference`) with the method's layers, the family, the training prompts and
    each side's criteria (probe error, set entropy)."""
    out = []
    for name in names:
        records = read_records(name)
        if not records:
            continue
        rows = final_rows(records)
        if BASELINE not in set(rows.method):  # nothing to compare with: said, never dropped unsaid
            print(f"{name}: {rows.id.nunique()} drafts but no EAGLE3 draft: no comparison of it", file=sys.stderr)
            continue
        first = rows.drop_duplicates("method").set_index("method")
        base = first.loc[BASELINE]
        for method in [m for m in first.index if m != BASELINE]:
            mine = first.loc[method]
            for T in TEMPERATURES:
                for nodes in TREES:
                    d = difference(rows, method, temperature=T, nodes=nodes)
                    out.append(
                        {
                            "protocol": name,
                            "group": "/".join(PROTOCOLS[name].twins),
                            "family": records[0]["unit"]["family"],
                            "prompts": int(rows.loc[rows.method == method, "prompts"].max()),
                            "id": mine.id,
                            "layers": mine.layers,
                            "baseline layers": base.layers,
                            **d,
                            **{f"d {c}": float(mine[c]) - float(base[c]) for c in CRITERIA},
                        }
                    )
    return pd.DataFrame(out)


def points(table: pd.DataFrame, temperature: float) -> pd.DataFrame:
    """The drafts a criterion's model is fitted on (`draft.evidence_checks.points`, which the reader
    refits them from): 60 nodes, one row per distinct set of a protocol, finite outcome only."""
    rows = fit_points(table.astype(object).where(table.notna(), None).to_dict("records"), temperature)
    return pd.DataFrame(rows, columns=table.columns).reset_index(drop=True)


def out_of_sample(pts: pd.DataFrame, criterion: str) -> pd.DataFrame:
    """Leave one protocol group out (`draft.evidence_checks.held_out`, which the reader recomputes)."""
    records = pts.astype(object).where(pts.notna(), None).to_dict("records")
    return pd.DataFrame(held_out(records, criterion))


def criterion_models(table: pd.DataFrame) -> dict:
    """{criterion: {temperature: {family, pooled, coverage, widen, rests on}}} (`draft.decision.Fit`s as dicts)."""
    out: dict = {}
    for criterion in CRITERIA:
        out[criterion] = {}
        for T in TEMPERATURES:
            pts = points(table, T)
            pts = pts[np.isfinite(pts[f"d {criterion}"].to_numpy(float))]
            held = out_of_sample(pts, criterion) if pts.group.nunique() >= 2 else pd.DataFrame()
            widen = widening(held.ratio) if len(held) else np.nan
            x, y = pts[f"d {criterion}"].to_numpy(float), pts["diff"].to_numpy(float)
            fits = {kind: fit(list(pts.family), x, y, pooled=kind == "pooled") for kind in ("family", "pooled")}
            usable = len(held) > 0 and np.isfinite(widen)
            out[criterion][f"{T:g}"] = {
                **{
                    kind: ({**f.as_dict(), "widen": widen} if (f is not None and usable) else None)
                    for kind, f in fits.items()
                },
                "coverage": float((held.ratio <= 1).mean()) if len(held) else None,
                "coverage widened": float((held.ratio <= widen).mean()) if len(held) else None,
                "widen": widen if np.isfinite(widen) else None,
                "out of sample": held.round(6).to_dict("records"),
                "rests on": {
                    "drafts": int(len(pts)),
                    "protocols": sorted(pts.protocol.unique()),
                    "groups": int(pts.group.nunique()),
                    "families": sorted(pts.family.unique()),
                    "seeds": int(pts[["seeds", "baseline seeds"]].max(axis=1).max()) if len(pts) else 0,
                },
            }
    return out


def pooled_criteria_rows(folder: Path | None = None) -> list[dict]:
    """criteria_pooled.csv's rows as the evidence file holds them (an empty cell is None)."""
    path = Path(folder or results_dir()) / "criteria_pooled.csv"
    if not path.is_file():  # without it the default method would fall back without a word
        raise FileNotFoundError(
            f"{path}: no pooled criteria test (make ledger-tables writes it; the evidence needs it)"
        )
    rows = pd.read_csv(path, keep_default_na=False, na_values=[""])  # an empty cell is no value, not NaN in JSON
    return rows.astype(object).where(rows.notna(), None).to_dict("records")


def pooled_drafts(text: str) -> str:
    """The drafts a criteria_pooled.csv's rows pool, as written: "20 drafts of table3_f32 qwen_strong" (each
    different count and protocols joined by "; " where rows differ)."""
    rows = pd.read_csv(io.StringIO(text), keep_default_na=False)
    if not {"drafts", "protocols"} <= set(rows.columns):
        return "?"
    return "; ".join(dict.fromkeys(f"{n} drafts of {p}" for n, p in zip(rows["drafts"], rows["protocols"])))


def _commit() -> str | None:
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return done.stdout.strip()


def build(folder: Path | None = None) -> dict:
    """The evidence file's contents (module docstring), with its provenance and checksum; the pooled
    criteria from `folder`'s criteria_pooled.csv (default: the results folder)."""
    table = comparisons()
    root = records_dir()
    if table.empty:
        raise ValueError(f"records folder {root}: no draft compared with EAGLE3's, so nothing to give evidence of")
    pooled = pooled_criteria_rows(folder)
    have = {(r["criterion"], r["outcome"]) for r in pooled}
    lacking = sorted({(c, o) for c in POOLED_CRITERIA for o in OUTCOMES} - have)
    path = Path(folder or results_dir()) / "criteria_pooled.csv"
    found, now = path.read_text(), tables_now()["criteria_pooled"]
    if lacking:  # a row missing would read as a criterion never tested, and move the default method unsaid
        rows = pd.read_csv(io.StringIO(now))
        untestable = sorted(set(lacking) - set(zip(rows.get("criterion", []), rows.get("outcome", []))))
        if untestable:  # a rerun cannot help: no protocol of these records holds the criterion to test
            raise ValueError(
                f"records folder {root}: no protocol's drafts can test {untestable} (the pooled test needs the "
                "criterion and the outcome for three or more drafts of a protocol): no evidence from these records"
            )
        raise ValueError(f"{path}: no row for {lacking} (make ledger-tables writes them from the records)")
    if found != now:  # made from other records, or altered
        drafts = (pooled_drafts(found), pooled_drafts(now))
        pools = (
            f"the same {drafts[0]}, other values" if drafts[0] == drafts[1] else "{}, the records {}".format(*drafts)
        )
        raise ValueError(
            f"{path}: not what the records give now (it pools {pools}): stale or altered; `make ledger-tables` "
            "writes it anew from the records"
        )
    payload = {
        "schema": SCHEMA,
        "provenance": {
            "commit": _commit(),
            "records": {
                str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in record_paths(root)
            },
        },
        "nodes": NODES,
        "default_method": verdict(pd.DataFrame(pooled)),
        "pooled_criteria": pooled,
        "comparisons": table.replace({np.nan: None}).to_dict("records"),
        "models": criterion_models(table),
    }
    return {**payload, "checksum": hashlib.sha256(canonical(payload)).hexdigest()}


def comparisons_table(evidence: dict) -> pd.DataFrame:
    """The evidence file's comparisons as the docs show them (comparisons_seed_level)."""
    columns = ["protocol", "family", "prompts", "method", "layers", "temperature", "nodes", "diff", "low", "high"]
    columns += ["seeds", "baseline seeds", "seed level", "questions"]
    return pd.DataFrame(evidence["comparisons"])[columns]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(EVIDENCE_PATH), help="where to write it (default: the package's)")
    args = parser.parse_args(argv)
    if Path(args.out).is_dir():
        parser.error(f"--out {args.out} is a folder: give the evidence file's path")
    existing = next((p for p in Path(args.out).absolute().parents if p.exists()), None)
    if existing is not None and not existing.is_dir():
        parser.error(f"--out {args.out}: {existing} is a file, not a folder the evidence file could go in")
    if Path(args.out).is_symlink():  # replaced by a file, the link's target would keep the old evidence
        parser.error(f"--out {args.out} is a link: give the evidence file's own path ({Path(args.out).resolve()})")
    if Path(args.out).name in ("comparisons_seed_level.csv", "comparisons_seed_level.md"):  # the table beside it
        parser.error(f"--out {args.out}: the comparisons table is written beside the evidence under that name")
    try:
        evidence = build()
        raw = json.dumps(evidence, indent=1, sort_keys=True).encode() + b"\n"
        checked(raw, Path(args.out))  # what `elsi select` would refuse is never written
    except EvidenceUnavailable as err:
        sys.exit(f"evidence: nothing written: the file made would be refused as it is read: {err}")
    except (OSError, ValueError, RecordError) as err:  # nothing written: the committed file stays as it was
        sys.exit(f"evidence: {err}")
    atomic_write_chunks(args.out, [raw])
    beside = Path(args.out).resolve() != EVIDENCE_PATH.resolve()  # another file's table goes beside it
    save_table(
        comparisons_table(evidence), "comparisons_seed_level", Path(args.out).parent if beside else results_dir()
    )
    print(f"wrote {args.out}: {len(evidence['comparisons'])} comparisons, default method {evidence['default_method']}")


if __name__ == "__main__":
    main()
