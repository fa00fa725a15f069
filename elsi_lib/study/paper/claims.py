"""The claims of the numbered notebooks' Findings prose, checked on a run's findings tables.

Each `*_claims` function takes the findings a notebook computes (the `study.*_findings` tables and
what they are built from) and returns a DataFrame of truth values: one row per claim of the prose,
its index the claim's text, one column per model. `claims_markdown` renders it as the notebook's
"Does each claim hold" table; `check_at_paper_scale` fails a paper-scale run (N_PROMPTS >= 200) in
which a claim does not hold, so that a changed result fails that run instead of contradicting the
text. A smaller run need not bear out every claim.
"""

from __future__ import annotations

import pandas as pd

from .plots import markdown_table
from .layer_sets import EAGLE3_PAPER_READING

PAPER_SCALE = 200  # N_PROMPTS of `make figures`: from here on every claim must hold


def wave_claims(findings: pd.DataFrame) -> pd.DataFrame:
    """Notebook 01 (the activation wave), from `layer_measures.wave_findings`, per model:
    - the peak is the first layer ("argmax layer" == 0) and "S_1 last layer" >= 0.5 x "max S_1";
    - the trough ("argmin layer") lies strictly inside the depth ("layers") and "min S_1" < 0.02 x "max S_1";
    - "median corr. prompt vs mean" > 0.8;
    - "median top-row share" > 0.9;
    - "min S_1, template excluded" > 2 x "min S_1";
    - "range S_1, template excluded" < 0.5 x ("max S_1" - "min S_1")."""
    return pd.DataFrame(
        {
            f["model"]: {
                "S_1 is highest at the first layer and at least half as high at the last": f["argmax layer"] == 0
                and f["S_1 last layer"] >= 0.5 * f["max S_1"],
                "a trough inside the depth falls below 2 % of the peak": 0 < f["argmin layer"] < f["layers"] - 1
                and f["min S_1"] < 0.02 * f["max S_1"],
                "each prompt's curve follows the mean (median correlation above 0.8)": f["median corr. prompt vs mean"]
                > 0.8,
                "one row carries most of Z's energy (median top-row share above 0.9)": f["median top-row share"] > 0.9,
                "without the template positions the lowest S_1 is more than twice as high": f[
                    "min S_1, template excluded"
                ]
                > 2 * f["min S_1"],
                "without the template positions the range shrinks by more than half": f["range S_1, template excluded"]
                < 0.5 * (f["max S_1"] - f["min S_1"]),
            }
            for f in findings.to_dict("records")
        }
    )


def pair_claims(findings: pd.DataFrame, n_layers: dict[str, int]) -> pd.DataFrame:
    """Notebook 02 (pair entropy), from `layer_measures.pair_findings` and n_layers ({model: N}), per model:
    - "companions lowering it" == "companions" (all of them) and "median change, top seed" < 0;
    - "pairs that lose entropy" > 0.5 (a share of all (seed, companion) pairs);
    - "largest gain" > 0 and "its companion" is the last layer, N - 1."""
    return pd.DataFrame(
        {
            f["model"]: {
                "every companion lowers the S_1 of the highest-entropy layer": f["companions lowering it"]
                == f["companions"]
                and f["median change, top seed"] < 0,
                "most (seed, companion) pairs lose entropy": f["pairs that lose entropy"] > 0.5,
                "the largest gain of any seed comes from adding the last layer": f["largest gain"] > 0
                and f["its companion"] == n_layers[f["model"]] - 1,
            }
            for f in findings.to_dict("records")
        }
    )


def variance_claims(findings: pd.DataFrame) -> pd.DataFrame:
    """Notebook 03 (token filtering), from `layer_measures.variance_findings` (rows per model and selection),
    per model, with ratio = "variance / all tokens' (whole depth)" and share = "median top-row share":
    - ratio < 1 for the entropy filter, and its share > 0.9;
    - ratio > 2 for the random selection;
    - for entropy_no_template, share < 0.1 and ratio > 1."""
    by = findings.set_index(["model", "selection"])
    ratio, share = by["variance / all tokens' (whole depth)"], by["median top-row share"]
    return pd.DataFrame(
        {
            name: {
                "the entropy filter lowers the variance over the whole depth": ratio[name, "entropy"] < 1,
                "with the filter one row dominates Z (median top-row share above 0.9)": share[name, "entropy"] > 0.9,
                "as many random positions raise the variance more than two fold": ratio[name, "random"] > 2,
                "without the template positions no row dominates (median top-row share below 0.1)": share[
                    name, "entropy_no_template"
                ]
                < 0.1,
                "without the template positions the variance is above all tokens'": ratio[name, "entropy_no_template"]
                > 1,
            }
            for name in dict.fromkeys(findings.model)
        }
    )


def compartment_claims(findings: pd.DataFrame) -> pd.DataFrame:
    """Notebook 04 (CKA compartments), from `layer_measures.compartment_findings`, per model:
    - "boundaries, all" and "boundaries, entropy" both hold at least two boundaries;
    - "mean CKA, entropy" > "mean CKA, all";
    - "max delta, entropy" < "max delta, all"."""
    return pd.DataFrame(
        {
            f["model"]: {
                "the detector finds at least two boundaries, with and without the filter": min(
                    len(f["boundaries, all"]), len(f["boundaries, entropy"])
                )
                >= 2,
                "filtering raises the mean off-diagonal CKA": f["mean CKA, entropy"] > f["mean CKA, all"],
                "filtering lowers the largest transition score": f["max delta, entropy"] < f["max delta, all"],
            }
            for f in findings.to_dict("records")
        }
    )


def selection_claims(
    findings: pd.DataFrame, table1: pd.DataFrame, gaps: pd.DataFrame, boot: pd.DataFrame, n_layers: dict[str, int]
) -> pd.DataFrame:
    """Notebook 05 (layer selection), one column per model of n_layers ({model: N}, in that order).
    From `layer_sets.table1_findings` (rows per model and setting paper / no_template / frobenius):
    - "ELSI / EAGLE3" >= 1.5 in every setting and >= 2 outside frobenius;
    - "ELSI, m=3" >= 2 x the EAGLE3_PAPER_READING column in every setting;
    - "ELSI layer, m=1" is 0 and "ELSI, m=1" > "EAGLE2" in every setting;
    - in the paper setting "from N//2, layer" is the last layer, N - 1;
    - "ELSI set, m=3" of no_template differs from paper's, and paper's "ELSI, m=3" >= 3 x no_template's;
    - frobenius's "ELSI set, m=3" is neither of those two, and (from `table1`) every frobenius ELSI set
      holds layer 0.
    From `layer_sets.optimum_gaps(table1)`: every ELSI row is "optimal"; some ELSI-C rows are not, all
    with "gap" < 0.05. From `layer_sets.bootstrap_table`: the model's first (most frequent) resampled set
    is "chosen on all prompts"."""
    f = findings.set_index(["model", "setting"])
    elsi_rows, elsi_c = gaps[gaps.method == "ELSI"], gaps[gaps.method == "ELSI-C"]
    misses = elsi_c[~elsi_c.optimal]
    claims = {}
    for m, n in n_layers.items():
        fm, last = f.loc[m], n - 1
        paper, plain, frob = (fm.loc[s] for s in ("paper", "no_template", "frobenius"))
        own_misses = misses[misses.model == m]
        frob_sets = table1[(table1.model == m) & (table1.setting == "frobenius") & (table1.method == "ELSI")].layers
        claims[m] = {
            "ELSI's m = 3 entropy is at least twice EAGLE3's in every setting (1.5 times with Frobenius normalization)": (
                fm["ELSI / EAGLE3"] >= 1.5
            ).all()
            and (fm.drop("frobenius")["ELSI / EAGLE3"] >= 2).all(),
            "ELSI's m = 3 entropy is at least twice that of the paper's reading of EAGLE3, in every setting": (
                fm["ELSI, m=3"] >= 2 * fm[EAGLE3_PAPER_READING]
            ).all(),
            "ELSI's best single layer is layer 0 in every setting and beats EAGLE2's last layer": (
                fm["ELSI layer, m=1"] == 0
            ).all()
            and (fm["ELSI, m=1"] > fm["EAGLE2"]).all(),
            "in the paper setting the single-layer rule (from N//2) takes the last layer": paper["from N//2, layer"]
            == last,
            "ELSI finds the exact optimum in every setting and m": elsi_rows[elsi_rows.model == m].optimal.all(),
            "ELSI-C misses it in some cases, by less than 0.05 nats": 0 < len(own_misses)
            and own_misses.gap.max() < 0.05,
            "excluding the sink positions changes the m = 3 set and cuts its entropy at least three fold": plain[
                "ELSI set, m=3"
            ]
            != paper["ELSI set, m=3"]
            and paper["ELSI, m=3"] >= 3 * plain["ELSI, m=3"],
            "Frobenius normalization changes the m = 3 set again and puts layer 0 in every ELSI set": frob[
                "ELSI set, m=3"
            ]
            not in (paper["ELSI set, m=3"], plain["ELSI set, m=3"])
            and all(0 in l for l in frob_sets),
            "the set chosen on all prompts is the most frequent on the bootstrap resamples": bool(
                boot[boot.model == m].iloc[0]["chosen on all prompts"]
            ),
        }
    return pd.DataFrame(claims)


def claims_markdown(claims: pd.DataFrame, n_prompts: int) -> str:
    """The notebook's table of `claims`: a bold heading naming the run's scale, then one row per
    claim with "yes" or "**no**" per model."""
    table = claims.map({True: "yes", False: "**no**"}.get).rename_axis("claim").reset_index()
    return f"**Does each claim hold at this run's scale ({n_prompts} prompts)?**\n\n" + markdown_table(table)


def check_at_paper_scale(claims: pd.DataFrame, n_prompts: int, paper_scale: int = PAPER_SCALE) -> None:
    """At paper scale (n_prompts >= paper_scale) every claim must hold for every model: raise an
    AssertionError listing the claims (rows, their full text) that do not. Below that scale, check nothing."""
    if n_prompts >= paper_scale and not claims.to_numpy().all():
        raise AssertionError(f"claims that do not hold at paper scale:\n{claims[~claims.all(axis=1)].to_string()}")
