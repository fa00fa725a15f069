"""The layer sets notebook 06 trains a draft on, each with an identity apart from its label, and their
ranks among all sets by entropy (`beam_overlap`).

A method's `id` (e.g. "elsi-m3") names how its set was chosen and is what code and cache keys use;
its `method` column is the label tables and figures show (e.g. "ELSI m=3"), free to change.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from ..paper import captures
from ..paper.layer_sets import SINGLE_LAYER_RULE, TABLE1_SETTINGS, selection_table
from ...selection.cka import compartments
from ...selection.conventions import eagle3_layers
from ...selection.entropy import set_entropy
from ...selection.scorer import SetScorer
from ...draft.config import FINAL_NORM
from .experiment_settings import from_parameters

# how notebook 05's settings are named in method ids and labels
VARIANTS = {"no_template": ("no-template", "template excluded"), "frobenius": ("frobenius", "Frobenius")}
COLUMNS = ["id", "method", "source", "setting", "m", "layers", "entropy"]
LABELS = {  # each method id of notebook 06's drafts (`draft_methods`) and the tables' label of its drafts
    "eagle2": "EAGLE2",
    "eagle3": "EAGLE3",
    "elsi-m1-rule": "ELSI m=1",
    "elsi-m1": "ELSI m=1, unrestricted",
    **{f"elsi-m{m}": f"ELSI m={m}" for m in (2, 3)},
    **{f"elsi-c-m{m}": f"ELSI-C m={m}" for m in (2, 3)},
    "lowest-entropy-m3": "lowest-entropy m=3",
    **{f"elsi-m3-{slug}": f"ELSI m=3, {label}" for slug, label in VARIANTS.values()},
}


def label_of(method_id) -> str | None:
    """The label of `method_id`'s drafts (the task probe's "probe-m<m>": "probe m=<m>"); None for an id
    no draft of notebook 06 has."""
    probe = (
        re.fullmatch(r"probe-m([1-9]\d*)", method_id) if isinstance(method_id, str) else None
    )  # one spelling: m03 is none
    return f"probe m={probe.group(1)}" if probe else LABELS.get(method_id)


def draft_methods(stats: dict, n_layers: int | None = None, probe: dict | None = None) -> pd.DataFrame:
    """The layer sets of notebook 06 from one model's calibration statistics ({selection: LayerStats}):
    EAGLE2 (the normed last hidden state), EAGLE3 (EAGLE's [2, N//2, N-3] as inputs of those layers,
    converted to elsi's output convention), ELSI m=1 under the paper's rule and unrestricted, ELSI and
    ELSI-C m=2, 3, the lowest-entropy control (m=3), and ELSI m=3 under notebook 05's variants when
    they choose a different set. Columns: id (the method's identity), method (its label), source
    (layer tuple or FINAL_NORM), setting, m, layers (for entropy), entropy (set entropy on the paper
    setting's Z). The unrestricted m = 1 set and a variant are kept only when they add a new set.
    `probe` ({m: layers}, e.g. from `captures.probe_choices`) adds the task probe's sets as
    "probe-m<m>", kept (as the variants) only when another method has not the same set: a second draft on
    the same set would be the same draft."""
    Z = stats["entropy"].Z
    N = n_layers or Z.shape[0]
    tables = {
        name: selection_table(stats[sel].Z, normalize=norm).set_index(["method", "m"])
        for name, (sel, norm) in TABLE1_SETTINGS.items()
    }
    paper = tables["paper"]
    # (id, source, setting, layers for entropy, kept only when new); the label is LABELS'
    rows = [
        ("eagle2", FINAL_NORM, "paper", (N - 1,), False),
        ("eagle3", eagle3_layers(N), "paper", None, False),
        ("elsi-m1-rule", paper.loc[(SINGLE_LAYER_RULE, 1), "layers"], "paper", None, False),
        ("elsi-m1", paper.loc[("ELSI", 1), "layers"], "paper", None, True),
    ]
    for m in (2, 3):
        rows += [
            (f"elsi-m{m}", paper.loc[("ELSI", m), "layers"], "paper", None, False),
            (f"elsi-c-m{m}", paper.loc[("ELSI-C", m), "layers"], "paper", None, False),
        ]
    rows.append(
        (
            "lowest-entropy-m3",
            paper.loc[("lowest-entropy control", 3), "layers"],
            "paper",
            None,
            False,
        )
    )
    for setting, (slug, _) in VARIANTS.items():
        rows.append((f"elsi-m3-{slug}", tables[setting].loc[("ELSI", 3), "layers"], setting, None, True))
    for m, layers in sorted((probe or {}).items()):
        rows.append((f"probe-m{m}", getattr(layers, "layers", layers), "probe", None, True))
    out, seen = [], set()
    for method_id, source, setting, layers, only_if_new in rows:
        source = source if source == FINAL_NORM else tuple(int(l) for l in source)
        if only_if_new and source in seen:
            continue  # the same set as a method above adds nothing
        seen.add(source)
        layers = layers or source
        out.append(
            {
                "id": method_id,
                "method": label_of(method_id),
                "source": source,
                "setting": setting,
                "m": len(layers),
                "layers": layers,
                "entropy": set_entropy(Z, layers),
            }
        )
    return pd.DataFrame(out, columns=COLUMNS)


def method_row(methods: pd.DataFrame, method_id: str) -> pd.Series:
    """The row of `methods` with this id; KeyError naming the ids there are."""
    rows = methods[methods["id"] == method_id]
    if len(rows) != 1:
        raise KeyError(f"no method {method_id!r} among {list(methods['id'])}")
    return rows.iloc[0]


def select_methods(methods: pd.DataFrame, ids, *, present_only: bool = False) -> pd.DataFrame:
    """The rows of `methods` with these ids, in the order given; KeyError naming an id not there,
    unless `present_only` (then it is left out: a variant whose set equals another method's has no
    row of its own)."""
    ids = [i for i in ids if not present_only or i in set(methods["id"])]
    return pd.DataFrame([method_row(methods, i) for i in ids], columns=methods.columns).reset_index(drop=True)


def beam_overlap(Z, methods: pd.DataFrame, *, top: int = 10) -> pd.DataFrame:
    """For each method's set (paper setting's Z): its rank and percentile among all C(N, m) sets by
    set entropy (exact: every set scored), how many of the `top` best m-sets share a layer with it,
    and the CKA compartment (0 = first) of each of its layers."""
    scorer = SetScorer(Z)
    N = Z.shape[0]
    boundaries = list(compartments(Z).boundaries)
    rows, scored = [], {}  # scored: {m: (every m-set, its entropy)}, each m scored once
    for row in methods.itertuples():
        layers = tuple(row.layers)
        if len(layers) not in scored:
            sets = list(itertools.combinations(range(N), len(layers)))
            scored[len(layers)] = sets, scorer.entropies(sets)
        sets, values = scored[len(layers)]
        mine = values[sets.index(layers)]
        rank = int((values > mine + 1e-12).sum()) + 1
        best = [set(sets[i]) for i in np.argsort(-values, kind="stable")[:top]]
        rows.append(
            {
                "method": row.method,
                "layers": layers,
                "entropy": mine,
                "rank": rank,
                "of": len(sets),
                "percentile": 100.0 * (1 - (rank - 1) / len(sets)),
                f"top-{top} sets sharing a layer": sum(bool(s & set(layers)) for s in best),
                "compartments": tuple(int(np.searchsorted(boundaries, l, side="left")) for l in layers),
            }
        )
    return pd.DataFrame(rows)


def run_methods(parameters, *, loaded: tuple | None = None):
    """The experiment of a notebook parameter file (`experiment.from_parameters`) and exactly the methods
    its notebook trained: the same calibration statistics (N_PROMPTS, SEED), the probe's m = 3 set, and
    METHOD_IDS where given. A checkpoint is keyed by every draft of its group, so reading a finished
    run's drafts (`experiment.trained_drafts`) needs this very table. The file must set N_PROMPTS and
    PROBE_RANK (a notebook's own defaults are its tiny ones): notebook 06 (no METHOD_IDS) adds the probe's
    set only when PROBE_RANK is set; notebook 07 (METHOD_IDS) always adds it, PROBE_RANK null meaning
    the probe's default rank, as the notebooks do. `loaded`: the run's (model, tokenizer), when the
    caller holds them."""

    exp, method_ids = from_parameters(parameters)
    params = yaml.safe_load(Path(parameters).read_text()) or {}
    missing = [k for k in ("N_PROMPTS", "PROBE_RANK") if k not in params]
    if missing:
        raise ValueError(
            f"{parameters} does not set {missing}: the notebook's tiny defaults would apply, not the run's"
        )
    n_prompts, seed, rank = params["N_PROMPTS"], params.get("SEED", 0), params["PROBE_RANK"]
    stats = captures.paper_stats([exp.model], n_prompts, seed=seed)[exp.model]
    with_probe = rank is not None or method_ids is not None
    probe = (
        captures.probe_choices(exp.model, n_prompts, (3,), seed=seed, rank=rank, loaded=loaded) if with_probe else None
    )
    methods = draft_methods(stats, probe=probe)
    return exp, (select_methods(methods, method_ids, present_only=True) if method_ids else methods)
