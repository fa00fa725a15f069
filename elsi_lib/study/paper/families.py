"""How interchangeable a family's layers are, the paper's explanation of why a layer choice is worth
more on one family than on another (Table 2 against Table 3): from a model's calibration Z alone,
the share of layer pairs whose linear CKA (Eq. 7) reaches a threshold, the mean off-diagonal CKA, and
the CKA compartments notebook 04 finds (Eq. 8 transition-score peaks); and, beside it, what the layer
choice was worth in that family's accepted-token table."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...selection.cka import compartments

THRESHOLDS = (0.8, 0.9, 0.95)


def interchangeability(Z, thresholds=THRESHOLDS) -> dict:
    """One model's row: layers, the share of the N(N-1)/2 layer pairs with CKA >= each threshold,
    the mean off-diagonal CKA, the number of compartments and the largest one's share of the layers."""
    view = compartments(Z)
    M, N = view.cka, view.cka.shape[0]
    upper = M[np.triu_indices(N, k=1)]  # (N(N-1)/2,) every pair once
    edges = [0, *[int(b) + 1 for b in view.boundaries], N]  # a boundary l lies between layers l and l+1
    sizes = np.diff(edges)
    return {
        "layers": N,
        **{f"pairs with CKA >= {t:g}": float((upper >= t).mean()) for t in thresholds},
        "mean off-diagonal CKA": float(upper.mean()),
        "compartments": len(sizes),
        "largest compartment share": float(sizes.max() / N),
    }


def family_table(Zs: dict) -> pd.DataFrame:
    """{model: Z} -> one `interchangeability` row per model."""
    return pd.DataFrame([{"model": model, **interchangeability(Z)} for model, Z in Zs.items()])


def choice_effects(
    paired: pd.DataFrame, accepted: pd.DataFrame, nodes: int, methods=("ELSI m=3", "ELSI m=1")
) -> pd.DataFrame:
    """What the layer choice was worth in one family's accepted-token table at `nodes`, per
    temperature, from its committed CSVs (`tables.paired_differences` rows with a temperature
    column; `tau_files.tau_long` rows, for EAGLE3's AVG tau): each of `methods` (named before looking:
    no "best set", whose interval would ignore that it was picked) minus EAGLE3 with its paired 95%
    interval and its AVG tau as a share of EAGLE3's (1 + diff / EAGLE3's tau: the paired differences
    are at full precision where the accepted-token CSV may be rounded), and the range of the paired
    differences across all the table's sets (EAGLE3 at 0)."""
    rows = []
    for T, block in paired[paired.nodes == nodes].groupby("temperature"):
        base = accepted[
            (accepted.column == "AVG")
            & (accepted.nodes == nodes)
            & (accepted.temperature == T)
            & (accepted.method == "EAGLE3")
        ]
        if len(base) != 1:
            raise ValueError(f"no EAGLE3 AVG tau at {nodes} nodes, T = {T}")
        eagle3 = float(base.tau.iloc[0])
        diff = block.set_index("method")
        for method in methods:
            if method not in diff.index:
                raise ValueError(f"no paired difference of {method!r} from EAGLE3 at {nodes} nodes, T = {T}")
            d = diff.loc[method]
            rows.append(
                {
                    "temperature": float(T),
                    "nodes": nodes,
                    "effect": f"{method} minus EAGLE3",
                    "value": float(d["diff"]),
                    "low": float(d["low"]),
                    "high": float(d["high"]),
                    "share of EAGLE3's tau": 1 + float(d["diff"]) / eagle3,
                }
            )
        spread = [0.0, *diff["diff"].astype(float)]
        rows.append(
            {
                "temperature": float(T),
                "nodes": nodes,
                "effect": "range of AVG tau across the sets",
                "value": max(spread) - min(spread),
                "low": np.nan,
                "high": np.nan,
                "share of EAGLE3's tau": np.nan,
            }
        )
    return pd.DataFrame(rows)


def compare_effects(effects: dict) -> pd.DataFrame:
    """{family: `choice_effects` frame} -> one row per effect and temperature present in every
    family: each family's value and, for two families, their difference (first minus second) with an
    approximate 95% interval from the two intervals as if independent (normal, se = width / 3.92
    each). The families are scored on the same SpecBench questions, so their errors may be
    correlated (in either direction): a paired bootstrap over the shared questions needs both
    families' per-question rows, and this interval is only a guide."""
    names = list(effects)
    key = ["temperature", "nodes", "effect"]
    merged = None
    for name in names:
        part = effects[name][[*key, "value", "low", "high"]].rename(
            columns={c: f"{c} ({name})" for c in ("value", "low", "high")}
        )
        merged = part if merged is None else merged.merge(part, on=key)
    if len(names) == 2:
        a, b = names
        se = np.sqrt(
            ((merged[f"high ({a})"] - merged[f"low ({a})"]) / 3.92) ** 2
            + ((merged[f"high ({b})"] - merged[f"low ({b})"]) / 3.92) ** 2
        )
        merged[f"{a} minus {b}"] = merged[f"value ({a})"] - merged[f"value ({b})"]
        merged["low"] = merged[f"{a} minus {b}"] - 1.96 * se
        merged["high"] = merged[f"{a} minus {b}"] + 1.96 * se
    return merged
