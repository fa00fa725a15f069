"""The Findings claims of notebooks 01-05 (`elsi_lib.study.paper.claims`) on hand-made findings tables: two
models "a" and "b" for which every claim holds, then variants that change model b's findings so
that exactly one claim (one row) turns false while every other row, and model a, stays true."""

import numpy as np
import pandas as pd
import pytest

from elsi_lib.study.paper import claims
from elsi_lib.study.paper.layer_sets import EAGLE3_PAPER_READING


def vary(rows: list[dict], changes: dict, **where) -> pd.DataFrame:
    """`rows` as a DataFrame, with `changes` applied to model b's rows that match `where`."""
    where = {"model": "b", **where}
    return pd.DataFrame([{**r, **changes} if all(r[k] == v for k, v in where.items()) else r for r in rows])


def flipped(held: pd.DataFrame, row: int | None, model: str = "b") -> dict:
    """`held` (every claim true) as {model: {claim: bool}}, with claim number `row` of `model` false."""
    expected = {m: {claim: True for claim in held.index} for m in held.columns}
    if row is not None:
        expected[model][held.index[row]] = False
    return expected


def as_bools(held: pd.DataFrame) -> dict:
    return {m: {claim: bool(v) for claim, v in column.items()} for m, column in held.items()}


def check_variant(build, rows, row, changes, **where):
    """build(findings) on the base `rows` holds everywhere; on the variant, exactly claim `row` of b fails."""
    base = build(pd.DataFrame(rows))
    assert as_bools(base) == flipped(base, None)
    held = build(vary(rows, changes, **where))
    assert list(held.index) == list(base.index) and list(held.columns) == ["a", "b"]
    assert as_bools(held) == flipped(base, row)


# ---------------------------------------------------------------- notebook 01

WAVE = {
    "layers": 10,
    "argmax layer": 0,
    "max S_1": 2.0,
    "S_1 last layer": 1.5,
    "argmin layer": 5,
    "min S_1": 0.01,
    "median corr. prompt vs mean": 0.9,
    "median top-row share": 0.95,
    "min S_1, template excluded": 0.5,
    "range S_1, template excluded": 0.5,
}
WAVE_ROWS = [{"model": "a", **WAVE}, {"model": "b", **WAVE}]


@pytest.mark.parametrize(
    "row, changes",
    [
        (0, {"argmax layer": 1}),
        (0, {"S_1 last layer": 0.99}),
        (1, {"argmin layer": 0}),
        (1, {"argmin layer": 9}),
        (1, {"min S_1": 0.04}),
        (2, {"median corr. prompt vs mean": 0.8}),
        (3, {"median top-row share": 0.9}),
        (4, {"min S_1, template excluded": 0.02}),
        (5, {"range S_1, template excluded": 1.0}),
    ],
)
def test_wave_claims(row, changes):
    check_variant(claims.wave_claims, WAVE_ROWS, row, changes)


def test_wave_claims_one_row_per_claim_of_the_prose():
    held = claims.wave_claims(pd.DataFrame(WAVE_ROWS))
    assert held.shape == (6, 2) and held.index[0] == (
        "S_1 is highest at the first layer and at least half as high at the last"
    )


# ---------------------------------------------------------------- notebook 02

PAIR = {
    "companions": 9,
    "companions lowering it": 9,
    "median change, top seed": -0.1,
    "pairs that lose entropy": 0.6,
    "largest gain": 0.2,
    "its companion": 9,
}
PAIR_ROWS = [{"model": "a", **PAIR}, {"model": "b", **PAIR}]
N_LAYERS = {"a": 10, "b": 10}


@pytest.mark.parametrize(
    "row, changes",
    [
        (0, {"companions lowering it": 8}),
        (0, {"median change, top seed": 0.0}),
        (1, {"pairs that lose entropy": 0.5}),
        (2, {"largest gain": 0.0}),
        (2, {"its companion": 8}),
    ],
)
def test_pair_claims(row, changes):
    check_variant(lambda findings: claims.pair_claims(findings, N_LAYERS), PAIR_ROWS, row, changes)


def test_pair_claims_read_the_last_layer_from_n_layers():
    held = claims.pair_claims(pd.DataFrame(PAIR_ROWS), {"a": 10, "b": 11})
    assert as_bools(held) == flipped(held, 2)
    assert held.shape == (3, 2)


# ---------------------------------------------------------------- notebook 03

VARIANCE = {"entropy": (0.5, 0.95), "random": (2.5, 0.5), "entropy_no_template": (1.5, 0.05)}  # (ratio, share)
VARIANCE_ROWS = [
    {
        "model": m,
        "selection": sel,
        "variance / all tokens' (whole depth)": ratio,
        "regimes where it is lower": "2 of 3",
        "median top-row share": share,
    }
    for m in ("a", "b")
    for sel, (ratio, share) in VARIANCE.items()
]
RATIO, SHARE = "variance / all tokens' (whole depth)", "median top-row share"


@pytest.mark.parametrize(
    "row, selection, changes",
    [
        (0, "entropy", {RATIO: 1.0}),
        (1, "entropy", {SHARE: 0.9}),
        (2, "random", {RATIO: 2.0}),
        (3, "entropy_no_template", {SHARE: 0.1}),
        (4, "entropy_no_template", {RATIO: 1.0}),
    ],
)
def test_variance_claims(row, selection, changes):
    check_variant(claims.variance_claims, VARIANCE_ROWS, row, changes, selection=selection)


def test_variance_claims_one_column_per_model_in_order():
    held = claims.variance_claims(pd.DataFrame(VARIANCE_ROWS[3:] + VARIANCE_ROWS[:3]))
    assert list(held.columns) == ["b", "a"] and held.shape == (5, 2)


# ---------------------------------------------------------------- notebook 04

COMPARTMENT = {
    "boundaries, all": [3, 7],
    "boundaries, entropy": [2, 8],
    "mean CKA, all": 0.3,
    "mean CKA, entropy": 0.5,
    "max delta, all": 1.0,
    "max delta, entropy": 0.6,
}
COMPARTMENT_ROWS = [{"model": "a", **COMPARTMENT}, {"model": "b", **COMPARTMENT}]


@pytest.mark.parametrize(
    "row, changes",
    [
        (0, {"boundaries, all": [3]}),
        (0, {"boundaries, entropy": []}),
        (1, {"mean CKA, entropy": 0.3}),
        (2, {"max delta, entropy": 1.0}),
    ],
)
def test_compartment_claims(row, changes):
    check_variant(claims.compartment_claims, COMPARTMENT_ROWS, row, changes)


# ---------------------------------------------------------------- notebook 05


def selection_findings(model):
    """table1_findings' columns for one model (N = 10) in the three settings; every claim holds."""
    values = {  # ELSI / EAGLE3, ELSI m=3, paper's reading, ELSI layer m=1, ELSI m=1, EAGLE2, from N//2 layer, set
        "paper": (2.5, 1.2, 0.5, 0, 1.0, 0.5, 9, (0, 4, 9)),
        "no_template": (2.5, 0.3, 0.1, 0, 0.4, 0.2, 7, (0, 5, 9)),
        "frobenius": (1.6, 1.0, 0.4, 0, 0.9, 0.6, 8, (0, 2, 9)),
    }
    columns = (
        "ELSI / EAGLE3",
        "ELSI, m=3",
        EAGLE3_PAPER_READING,
        "ELSI layer, m=1",
        "ELSI, m=1",
        "EAGLE2",
        "from N//2, layer",
        "ELSI set, m=3",
    )
    return [{"model": model, "setting": s, **dict(zip(columns, v))} for s, v in values.items()]


SELECTION = {
    "findings": selection_findings("a") + selection_findings("b"),
    "table1": [
        {"model": m, "setting": s, "method": method, "m": len(layers), "layers": layers}
        for m in ("a", "b")
        for s, method, layers in [
            ("frobenius", "ELSI", (0,)),
            ("frobenius", "ELSI", (0, 9)),
            ("frobenius", "ELSI", (0, 2, 9)),
            ("frobenius", "EAGLE3", (1, 5, 7)),
            ("no_template", "ELSI", (5, 9)),
        ]
    ],
    "gaps": [
        {"model": m, "setting": s, "m": 3, "method": method, "gap": gap, "optimal": gap == 0}
        for m in ("a", "b")
        for s, method, gap in [
            ("paper", "ELSI", 0.0),
            ("frobenius", "ELSI", 0.0),
            ("paper", "ELSI-C", 0.02),
            ("frobenius", "ELSI-C", 0.0),
        ]
    ],
    "boot": [
        {"model": m, "layers": layers, "count": count, "chosen on all prompts": layers == (0, 4, 9)}
        for m in ("a", "b")
        for layers, count in [((0, 4, 9), 6), ((0, 5, 9), 2)]
    ],
}


def selection_claims(n_layers=None, **frames):
    inputs = {name: frames.get(name, pd.DataFrame(rows)) for name, rows in SELECTION.items()}
    return claims.selection_claims(
        inputs["findings"], inputs["table1"], inputs["gaps"], inputs["boot"], n_layers or N_LAYERS
    )


@pytest.mark.parametrize(
    "row, frame, where, changes",
    [
        (0, "findings", {"setting": "frobenius"}, {"ELSI / EAGLE3": 1.4}),
        (0, "findings", {"setting": "paper"}, {"ELSI / EAGLE3": 1.9}),
        (None, "findings", {"setting": "frobenius"}, {"ELSI / EAGLE3": 1.9}),  # 1.5 times suffices there
        (1, "findings", {"setting": "frobenius"}, {EAGLE3_PAPER_READING: 0.6}),
        (2, "findings", {"setting": "no_template"}, {"ELSI layer, m=1": 3}),
        (2, "findings", {"setting": "paper"}, {"EAGLE2": 1.0}),
        (3, "findings", {"setting": "paper"}, {"from N//2, layer": 8}),
        (None, "findings", {"setting": "frobenius"}, {"from N//2, layer": 9}),  # the paper setting's only
        (4, "gaps", {"method": "ELSI", "setting": "frobenius"}, {"gap": 0.01, "optimal": False}),
        (5, "gaps", {"method": "ELSI-C", "setting": "paper"}, {"gap": 0.05}),
        (5, "gaps", {"method": "ELSI-C", "setting": "paper"}, {"gap": 0.0, "optimal": True}),
        (6, "findings", {"setting": "no_template"}, {"ELSI set, m=3": (0, 4, 9)}),
        (6, "findings", {"setting": "no_template"}, {"ELSI, m=3": 0.5}),
        (7, "findings", {"setting": "frobenius"}, {"ELSI set, m=3": (0, 4, 9)}),
        (7, "findings", {"setting": "frobenius"}, {"ELSI set, m=3": (0, 5, 9)}),
        (7, "table1", {"setting": "frobenius", "method": "ELSI", "m": 2}, {"layers": (3, 9)}),
        (None, "table1", {"setting": "no_template", "method": "ELSI"}, {"layers": (3, 9)}),  # frobenius ELSI only
        (8, "boot", {"layers": (0, 4, 9)}, {"chosen on all prompts": False}),
    ],
)
def test_selection_claims(row, frame, where, changes):
    base = selection_claims()
    assert as_bools(base) == flipped(base, None) and base.shape == (9, 2)
    held = selection_claims(**{frame: vary(SELECTION[frame], changes, **where)})
    assert list(held.index) == list(base.index) and list(held.columns) == ["a", "b"]
    assert as_bools(held) == flipped(base, row)


def test_selection_claims_read_the_last_layer_from_n_layers_and_follow_its_order():
    held = selection_claims(n_layers={"b": 11, "a": 10})
    assert list(held.columns) == ["b", "a"]
    assert as_bools(held) == flipped(held, 3)


# ---------------------------------------------------------------- the table and the paper-scale check


def test_claims_markdown():
    held = pd.DataFrame({"a": {"x holds": True, "y holds": np.False_}, "b": {"x holds": np.True_, "y holds": True}})
    assert claims.claims_markdown(held, 16) == (
        "**Does each claim hold at this run's scale (16 prompts)?**\n\n"
        "| claim | a | b |\n|---|---|---|\n| x holds | yes | yes |\n| y holds | **no** | yes |\n"
    )


def test_check_at_paper_scale_raises_only_at_paper_scale_and_names_the_failing_claim():
    held = claims.wave_claims(vary(WAVE_ROWS, {"median top-row share": 0.5}))
    failing, holding = held.index[3], held.index[0]
    for n_prompts in (16, 199):
        claims.check_at_paper_scale(held, n_prompts)  # a smaller run need not bear out every claim
    for n_prompts in (200, 1000):
        with pytest.raises(AssertionError, match="claims that do not hold at paper scale") as error:
            claims.check_at_paper_scale(held, n_prompts)
        assert failing in str(error.value) and holding not in str(error.value)
    with pytest.raises(AssertionError):
        claims.check_at_paper_scale(held, 50, paper_scale=50)
    for n_prompts in (200, 1000):
        claims.check_at_paper_scale(claims.wave_claims(pd.DataFrame(WAVE_ROWS)), n_prompts)  # all hold
