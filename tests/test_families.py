"""Interchangeability of a family's layers (elsi_lib.paper.families) on layer stacks of known structure."""
import numpy as np
import pytest

from conftest import random_layers
from elsi_lib.paper import families
from elsi_lib.paper.study import compartments


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
