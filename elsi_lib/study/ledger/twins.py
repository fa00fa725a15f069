"""bf16 against float32: the units trained under both numeric twins of one family (`Protocol.twins`:
the same data and layer sets under two numeric settings: the draft's matmuls under bf16 autocast on a
CPU with bf16 instructions or in float32 on one without, and on Qwen the target's features too, a live
bf16 forward against a float32 store; "float32 minus bf16" is the two changes together).

Per unit (method, seed 0) and temperature: AVG tau at NODES nodes under each protocol (each over its own
questions), float32 minus bf16 paired over the questions both have rounds on, with a 95% bootstrap
interval (`paired_differences`; so `diff` need not equal the two taus' difference), held-out step-1
accuracy under each, and the reseed range (`record_tables.reseed_range`; the larger of the two twins'
where both have one, the lenient side). The twins agree at a temperature when every unit's difference
lies within that range; until they do the tables keep the two apart (`draft_records.question_frame` refuses
to mix them), and once they do `joined_tables` makes one table of both, each row keeping its numeric
settings."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .protocols import PROTOCOLS
from .record_tables import NODES, final_rows, reseed_range
from .draft_records import read_records
from ..experiments.tables import paired_differences

BF16, F32 = "bf16", "float32"
COLUMNS = [
    "family",
    "twins",
    "unit",
    "method",
    "temperature",
    "nodes",
    "tau bf16",
    "tau float32",
    "diff",
    "low",
    "high",
    "questions",
    "step 1 bf16",
    "step 1 float32",
    "reseed range",
    "within the reseed range",
]
JUDGED = ("yes", "no")


def pairs() -> list[tuple[str, str]]:
    """(bf16 protocol, float32 protocol) for each family's pair of twins (by their draft matmuls), in
    PROTOCOLS' order; ValueError when two protocols of one pair have the same setting."""
    by_twins: dict = {}
    for name, p in PROTOCOLS.items():
        slot = BF16 if p.numeric["draft matmuls"] == BF16 else F32
        twins = by_twins.setdefault(p.twins, {})
        if slot in twins:
            raise ValueError(f"protocols {twins[slot]!r} and {name!r} are both the {slot} twin of {p.twins}")
        twins[slot] = name
    return [(t[BF16], t[F32]) for t in by_twins.values() if BF16 in t and F32 in t]


def pair_name(bf16: str, f32: str) -> str:
    """A pair of twins' name, "<bf16>+<float32>": `compare`'s twins column, `joined_tables`' keys."""
    return f"{bf16}+{f32}"


def compare(bf16: str, f32: str, *, n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
    """One row per unit of seed 0 present in both protocols and temperature (COLUMNS): AVG tau under
    each, float32 minus bf16 (diff, low, high, questions), step 1 under each, the reseed range and whether
    the difference lies within it ("yes", "no", "no reseeds yet", or "no shared questions"). Empty when
    the twins share no unit; a unit without rows at NODES nodes and T in either twin is left out at T."""
    rows = {name: final_rows(read_records(name)) for name in (bf16, f32)}
    if any(r.empty for r in rows.values()):
        return pd.DataFrame(columns=COLUMNS)
    shared = sorted(set(rows[bf16].loc[rows[bf16].seed == 0, "id"]) & set(rows[f32].loc[rows[f32].seed == 0, "id"]))
    out = []
    for T in sorted(set(rows[bf16].temperature) & set(rows[f32].temperature)):
        floor = np.nanmax([reseed_range(r[r.temperature == T]) for r in rows.values()] + [-np.inf])
        floor = float(floor) if np.isfinite(floor) else np.nan
        for unit in shared:
            mine = {n: r[(r.id == unit) & (r.seed == 0) & (r.temperature == T)] for n, r in rows.items()}
            at = {n: m[(m.nodes == NODES) & m.tau.notna()] for n, m in mine.items()}
            if any(m.empty for m in at.values()):
                continue
            both = pd.concat([mine[bf16].assign(method=BF16), mine[f32].assign(method=F32)], ignore_index=True)
            d = paired_differences(both, NODES, baseline=BF16, n_boot=n_boot, seed=seed, temperature=T).iloc[0]
            if np.isnan(d["diff"]):
                within = "no shared questions"
            elif np.isnan(floor):
                within = "no reseeds yet"
            else:
                within = "yes" if abs(d["diff"]) <= floor else "no"
            out.append(
                [
                    PROTOCOLS[f32].family,
                    pair_name(bf16, f32),
                    unit,
                    mine[f32].method.iloc[0],
                    float(T),
                    NODES,
                    float(at[bf16].tau.mean()),
                    float(at[f32].tau.mean()),
                    float(d["diff"]),
                    float(d["low"]),
                    float(d["high"]),
                    int(d["questions"]),
                    float(mine[bf16]["step 1"].iloc[0]),
                    float(mine[f32]["step 1"].iloc[0]),
                    floor,
                    within,
                ]
            )
    return pd.DataFrame(out, columns=COLUMNS)


def verdict(compared: pd.DataFrame) -> str:
    """Over `compare`'s rows: "agree" when every judged unit's difference lies within the reseed range,
    "differ" when one does not, "no reseeds yet" while there is no reseed range, and "no shared units"
    when no unit could be compared."""
    within = set(compared["within the reseed range"]) if len(compared) else set()
    if within & set(JUDGED):
        return "agree" if within & set(JUDGED) == {"yes"} else "differ"
    return "no reseeds yet" if "no reseeds yet" in within else "no shared units"


def summary(compared: pd.DataFrame) -> list[str]:
    """One line per (pair of twins, temperature) of `compare`'s rows: the range of the differences, the
    reseed range and the verdict (the notebook's findings and the docs page)."""
    lines = []
    for (pair, T), block in compared.groupby(["twins", "temperature"], sort=False) if len(compared) else []:
        floor = block["reseed range"].max()
        lines.append(
            f"{block.family.iloc[0]} ({pair.replace('+', ' and ')}), T = {T:g}: float32 minus bf16 over {block.unit.nunique()} units trained both ways, "
            f"{block['diff'].min():+.3f} to {block['diff'].max():+.3f} in AVG tau at {NODES} nodes; "
            + (f"reseed range {floor:.3f}: " if np.isfinite(floor) else "")
            + verdict(block)
        )
    return lines


def agree(compared: pd.DataFrame) -> bool:
    """Whether one pair's `compare` rows say "agree" at every temperature they judge (False when empty)."""
    return bool(len(compared)) and all(verdict(block) == "agree" for _, block in compared.groupby("temperature"))


def agreeing_twin(name: str) -> str | None:
    """The numeric twin of protocol `name` when the two agree (`agree` over the records present), else
    None: its units stand for this protocol's (the ledger does not train them again)."""
    for bf16, f32 in pairs():
        if name in (bf16, f32) and agree(compare(bf16, f32)):
            return f32 if name == bf16 else bf16
    return None


def joined_tables(compared: pd.DataFrame) -> dict[str, list[dict]]:
    """{"<bf16>+<float32>": records} for each pair of twins whose own verdict is "agree" at every
    temperature `compared` (`compare`'s rows of the records present) judged (another pair's of the same
    family does not stand for it: the equivalence is measured per pair): the float32 twin's records (the twin any
    CPU adds units to), then the bf16 twin's records of the units it lacks, each keeping its numeric
    settings. Only pairs the join adds a unit to (else the float32 twin's table already is the join)."""
    out = {}
    for bf16, f32 in pairs():
        if not agree(compared[compared.twins == pair_name(bf16, f32)] if len(compared) else compared):
            continue
        own = read_records(f32)
        have = {(r["unit"]["method"], r["unit"]["seed"]) for r in own}
        extra = [r for r in read_records(bf16) if (r["unit"]["method"], r["unit"]["seed"]) not in have]
        if extra:
            out[pair_name(bf16, f32)] = own + extra
    return out
