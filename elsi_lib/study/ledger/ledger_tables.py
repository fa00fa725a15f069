"""Notebook 10's tables, made from the committed draft records in one call, so that the notebook writes
them and the docs site checks the committed files against them (`site._ledger`):

- numeric_twins: each unit both numeric twins trained, float32 minus bf16 (`twins.compare`);
- ledger_findings: each protocol's (and each joined pair of twins') drafts against EAGLE3
  (`record_tables.findings`);
- criteria_pooled: the criteria pooled over the protocols (`record_tables.pooled_criteria`).
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

import pandas as pd
import yaml

from ...common.cachefiles import REPO_ROOT
from ..paper.plots import csv_text
from . import record_tables, twins
from .draft_records import record_paths, records_dir
from .protocols import PROTOCOLS

SCALE = REPO_ROOT / "notebooks" / "ledger_scale.yaml"  # the resampling `make ledger-tables` writes them with


def ledger_tables(*, n_boot: int, n_perm: int, seed: int) -> dict:
    """{"numeric_twins", "ledger_findings", "criteria_pooled": the tables; "joined": the records of twins
    that agree and differ in units; "drafts": the pooled test's drafts}."""
    compared = pd.concat([twins.compare(b, f, n_boot=n_boot, seed=seed) for b, f in twins.pairs()], ignore_index=True)
    joined = twins.joined_tables(compared)  # {"<bf16>+<float32>": records}
    found = pd.concat(
        [record_tables.findings(n, n_boot=n_boot, seed=seed) for n in PROTOCOLS]
        + [record_tables.findings(n, records=r, n_boot=n_boot, seed=seed) for n, r in joined.items()],
        ignore_index=True,
    )
    drafts = record_tables.drafts(joined=joined)
    pooled = record_tables.pooled_criteria(drafts, n_perm=n_perm, seed=seed)
    return {
        "numeric_twins": compared,
        "ledger_findings": found,
        "criteria_pooled": pooled,
        "joined": joined,
        "drafts": drafts,
    }


def committed_scale(path: Path = SCALE) -> dict:
    """{"n_boot", "n_perm", "seed"} of the parameter file the committed tables were made with."""
    params = yaml.safe_load(Path(path).read_text())
    return {"n_boot": params["N_BOOT"], "n_perm": params["N_PERM"], "seed": params.get("SEED", 0)}


def records_digest() -> str:
    """What the records folder holds, by content: the key of `tables_now`."""
    root = records_dir()
    digest = hashlib.sha256(str(root).encode())
    for path in record_paths(root):
        digest.update(str(path.relative_to(root)).encode() + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def tables_now() -> dict:
    """{name: CSV text} of the three tables as the records give them now, at the committed resampling:
    what the committed files (and the evidence built from criteria_pooled.csv) are checked against."""
    return _tables_for(records_digest())


@lru_cache(maxsize=2)
def _tables_for(records: str) -> dict:
    tables = ledger_tables(**committed_scale())  # made once a process for one content of the records folder
    return {name: csv_text(tables[name]) for name in ("ledger_findings", "criteria_pooled", "numeric_twins")}
