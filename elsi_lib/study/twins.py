"""bf16 against float32: the units trained under both numeric twins of one family (`Protocol.twins`:
the same data and layer sets; the draft's matmuls under bf16 autocast on a CPU with bf16 instructions,
or in float32 on one without), compared with what a reseed alone moves.

Per unit (method, seed 0) and temperature: AVG tau at NODES nodes under each protocol, float32 minus
bf16 paired over the questions both have rounds on with a 95% bootstrap interval (`paired_differences`),
held-out step-1 accuracy under each, and the reseed range (the largest AVG tau range across seeds of
a method, in either twin). The twins agree when every unit's difference lies within that range; the
tables keep the two apart until they do (`records.question_frame` refuses to mix them)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .protocols import PROTOCOLS
from .record_tables import NODES, final_rows
from .records import read_records
from .tables import paired_differences, seed_spread

BF16, F32 = "bf16", "float32"


def pairs() -> list[tuple[str, str]]:
    """(bf16 protocol, float32 protocol) for each family's pair of twins, in PROTOCOLS' order."""
    by_twins: dict = {}
    for name, p in PROTOCOLS.items():
        by_twins.setdefault(p.twins, {})[BF16 if "bf16" in str(p.numeric) else F32] = name
    return [(t[BF16], t[F32]) for t in by_twins.values() if BF16 in t and F32 in t]


def _reseed_range(rows: pd.DataFrame, temperature: float) -> float:
    """The largest AVG tau range across seeds of any method in `rows` at `temperature`; NaN without reseeds."""
    block = rows[rows.temperature == temperature]
    spread = seed_spread(block, NODES) if len(block) else pd.DataFrame()
    return float(spread["range"].max()) if len(spread) else np.nan


def compare(bf16: str, f32: str, *, n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
    """One row per unit of seed 0 present in both protocols and temperature: AVG tau under each, float32
    minus bf16 (diff, low, high, questions), step 1 under each, the reseed range and whether the
    difference lies within it ("yes", "no", or "no reseeds yet"). Empty when the twins share no unit."""
    rows = {name: final_rows(read_records(name)) for name in (bf16, f32)}
    if any(r.empty for r in rows.values()):
        return pd.DataFrame()
    shared = sorted(set(rows[bf16].loc[rows[bf16].seed == 0, "id"]) & set(rows[f32].loc[rows[f32].seed == 0, "id"]))
    out = []
    for T in sorted(set(rows[bf16].temperature) & set(rows[f32].temperature)):
        floor = np.nanmax([_reseed_range(r, T) for r in rows.values()] + [-np.inf])
        floor = floor if np.isfinite(floor) else np.nan
        for unit in shared:
            mine = {n: r[(r.id == unit) & (r.seed == 0) & (r.temperature == T)] for n, r in rows.items()}
            both = pd.concat([mine[bf16].assign(method=BF16), mine[f32].assign(method=F32)], ignore_index=True)
            d = paired_differences(both, NODES, baseline=BF16, n_boot=n_boot, seed=seed, temperature=T).iloc[0]
            within = "no reseeds yet" if np.isnan(floor) else ("yes" if abs(d["diff"]) <= floor else "no")
            at = {n: m[m.nodes == NODES] for n, m in mine.items()}
            out.append(
                {
                    "family": PROTOCOLS[f32].family,
                    "unit": unit,
                    "method": mine[f32].method.iloc[0],
                    "temperature": float(T),
                    "nodes": NODES,
                    "tau bf16": float(at[bf16].tau.mean()),
                    "tau float32": float(at[f32].tau.mean()),
                    "diff": float(d["diff"]),
                    "low": float(d["low"]),
                    "high": float(d["high"]),
                    "questions": int(d["questions"]),
                    "step 1 bf16": float(mine[bf16]["step 1"].iloc[0]),
                    "step 1 float32": float(mine[f32]["step 1"].iloc[0]),
                    "reseed range": floor,
                    "within the reseed range": within,
                }
            )
    return pd.DataFrame(out)


def verdict(compared: pd.DataFrame) -> str:
    """ "agree" when every unit's difference lies within the reseed range, "differ" when one does not,
    "no reseeds yet" while no twin has a method trained with two seeds, "no shared units" when empty."""
    if compared.empty:
        return "no shared units"
    within = set(compared["within the reseed range"])
    return "no reseeds yet" if within == {"no reseeds yet"} else ("agree" if within == {"yes"} else "differ")
