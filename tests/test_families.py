"""Interchangeability of a family's layers (elsi_lib.study.paper.families) on layer stacks of known structure."""

import numpy as np
import pytest

from conftest import random_layers
from elsi_lib.study.paper import families
from elsi_lib.selection.cka import compartments


def blocks(sizes, rows=12, dim=16, noise=0.05, seed=0):
    """Layers in compartments: every layer of a compartment is that compartment's matrix plus a little
    noise (near-identical within, unrelated across)."""
    rng = np.random.default_rng(seed)
    out = []
    for size in sizes:
        base = rng.normal(size=(rows, dim))
        out += [base + noise * rng.normal(size=(rows, dim)) for _ in range(size)]
    return np.stack(out)  # (N, B, d)


def test_one_compartment_is_all_interchangeable_and_many_are_not():
    one, four = families.interchangeability(blocks([8])), families.interchangeability(blocks([2, 2, 2, 2]))
    assert one["pairs with CKA >= 0.95"] == 1.0 and one["layers"] == 8
    # four compartments of two: only the 4 within-compartment pairs of the 28 are alike
    assert four["pairs with CKA >= 0.9"] == pytest.approx(4 / 28)
    assert four["compartments"] == len(compartments(blocks([2, 2, 2, 2])).boundaries) + 1
    assert one["mean off-diagonal CKA"] > four["mean off-diagonal CKA"]


def test_the_shares_follow_the_cka_matrix():
    Z = random_layers(n_layers=7, rows=10, dim=12, seed=3)
    row = families.interchangeability(Z, thresholds=(0.5,))
    M = compartments(Z).cka
    pairs = [M[a, b] for a in range(7) for b in range(a + 1, 7)]
    assert row["pairs with CKA >= 0.5"] == pytest.approx(np.mean(np.array(pairs) >= 0.5))
    assert row["mean off-diagonal CKA"] == pytest.approx(np.mean(pairs))
    assert 0 < row["largest compartment share"] <= 1
    table = families.family_table({"a": Z, "b": blocks([7])})
    assert list(table.model) == ["a", "b"] and table.loc[1, "pairs with CKA >= 0.95"] == 1.0


def test_choice_effects_on_the_committed_table2():
    import pandas as pd
    from pathlib import Path

    results = Path(__file__).resolve().parents[1] / "data" / "results"
    paired = pd.read_csv(results / "table2_paired_smollm2-135m.csv")
    accepted = pd.read_csv(results / "table2_accepted_tokens_smollm2-135m.csv")
    effects = families.choice_effects(paired, accepted, 60)
    at0 = effects[effects.temperature == 0].set_index("effect")
    m3 = paired[(paired.method == "ELSI m=3") & (paired.nodes == 60) & (paired.temperature == 0)].iloc[0]
    assert (
        at0.loc["ELSI m=3 minus EAGLE3", "value"] == m3["diff"] and at0.loc["ELSI m=3 minus EAGLE3", "low"] == m3["low"]
    )
    eagle3 = accepted[
        (accepted.column == "AVG")
        & (accepted.nodes == 60)
        & (accepted.temperature == 0)
        & (accepted.method == "EAGLE3")
    ].tau.iloc[0]
    assert at0.loc["ELSI m=3 minus EAGLE3", "share of EAGLE3's tau"] == pytest.approx(1 + m3["diff"] / eagle3)
    diffs = paired[(paired.nodes == 60) & (paired.temperature == 0)]["diff"]
    assert at0.loc["range of AVG tau across the sets", "value"] == pytest.approx(
        max(diffs.max(), 0) - min(diffs.min(), 0)
    )
    assert not any(e.startswith("best") for e in at0.index)  # no set picked after looking
    with pytest.raises(ValueError, match="no paired difference"):
        families.choice_effects(paired, accepted, 60, methods=("ELSI m=7",))


def test_compare_effects_of_two_families():
    import pandas as pd

    a = pd.DataFrame(
        [{"temperature": 0.0, "nodes": 60, "effect": "ELSI m=3 minus EAGLE3", "value": 0.10, "low": 0.06, "high": 0.14}]
    )
    b = pd.DataFrame(
        [
            {
                "temperature": 0.0,
                "nodes": 60,
                "effect": "ELSI m=3 minus EAGLE3",
                "value": -0.02,
                "low": -0.05,
                "high": 0.01,
            }
        ]
    )
    row = families.compare_effects({"qwen": a, "smol": b}).iloc[0]
    assert row["effect"] == "ELSI m=3 minus EAGLE3" and row["qwen minus smol"] == pytest.approx(0.12)
    se = np.hypot(0.08 / 3.92, 0.06 / 3.92)
    assert row["low"] == pytest.approx(0.12 - 1.96 * se) and row["high"] == pytest.approx(0.12 + 1.96 * se)
    assert "qwen minus smol" not in families.compare_effects({"qwen": a})
