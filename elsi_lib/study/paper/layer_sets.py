"""Table 1 (paper Sec. 5.1) and its bootstrap: the layer set each method chooses per m, with its set
entropy (Eq. 4-6), under each capture setting (position selection, normalization); the gaps of the
beam searches to the exhaustive optimum; and how often bootstrap resamples of the prompts choose
the same set.
"""

from __future__ import annotations

import pandas as pd

from ...selection.conventions import eagle2_layers, eagle3_layers, eagle3_paper_layers
from ...selection.entropy import set_entropy
from ...selection.select import elsi, elsi_c, exhaustive, lowest_entropy_layers
from ...selection.stability import bootstrap_choices
from .layer_measures import Stats


# Table 1's settings: (position selection, normalization before concatenation)
TABLE1_SETTINGS = {
    "paper": ("entropy", "none"),
    "no_template": ("entropy_no_template", "none"),
    "frobenius": ("entropy", "frobenius"),
}


SINGLE_LAYER_RULE = "ELSI, from layer N//2 (Sec. 5.1)"  # Table 1's m = 1 row under the paper's rule


# "EAGLE3" is the set EAGLE-3 drafts read (`eagle3_layers`, elsi's convention), as everywhere else;
# the paper's Table 1 reads EAGLE's rule one layer deeper (`eagle3_paper_layers`), shown as its own row
EAGLE3_PAPER_READING = "EAGLE3, paper's reading"


TABLE1_METHODS = [
    "EAGLE2",
    "EAGLE3",
    EAGLE3_PAPER_READING,
    "ELSI",
    SINGLE_LAYER_RULE,
    "ELSI-C",
    "exhaustive",
    "lowest-entropy control",
]


def selection_table(Z, *, set_sizes=(1, 2, 3), normalize: str = "none", min_single_layer: int | None = None):
    """Table 1 rows: layer sets and set entropies of EAGLE2, EAGLE3, ELSI, ELSI-C, the exhaustive
    optimum and the lowest-entropy control, for each m in `set_sizes` (fixed baselines at their own m).
    EAGLE3 is the set EAGLE-3 drafts read (`eagle3_layers`: (1, 14, 26) on 30 layers); the paper's
    reading of EAGLE's rule, (2, N//2, N-3) as outputs (`eagle3_paper_layers`), is the separate row
    EAGLE3_PAPER_READING.
    For m = 1 a second ELSI row (SINGLE_LAYER_RULE) applies the paper's rule (Sec. 5.1): the
    highest-entropy layer from the middle of the depth on, min_single_layer = N // 2.
    `min_single_layer` restricts the m = 1 answer of the ELSI and ELSI-C rows themselves."""
    n_layers = Z.shape[0]
    rows = []

    def add(method, m, layers, entropy=None):
        value = set_entropy(Z, layers, normalize=normalize) if entropy is None else entropy
        rows.append({"method": method, "m": m, "layers": tuple(int(l) for l in layers), "entropy": float(value)})

    add("EAGLE2", 1, eagle2_layers(n_layers))
    add("EAGLE3", 3, eagle3_layers(n_layers))
    add(EAGLE3_PAPER_READING, 3, eagle3_paper_layers(n_layers))
    for m in set_sizes:
        add("ELSI", m, *_pair(elsi(Z, m, normalize=normalize, min_single_layer=min_single_layer)))
        if m == 1:
            add(SINGLE_LAYER_RULE, 1, *_pair(elsi(Z, 1, normalize=normalize, min_single_layer=n_layers // 2)))
        add("ELSI-C", m, *_pair(elsi_c(Z, m, normalize=normalize, min_single_layer=min_single_layer)))
        add("exhaustive", m, *_pair(exhaustive(Z, m, normalize=normalize)))
        add("lowest-entropy control", m, lowest_entropy_layers(Z, m, normalize=normalize))
    return pd.DataFrame(rows)


def _pair(selection):
    return selection.layers, selection.entropy


def table1(stats: Stats, set_sizes=(1, 2, 3), settings: dict = TABLE1_SETTINGS) -> pd.DataFrame:
    """Table 1 over models and `settings` ({name: (selection, normalization)}): `selection_table`
    of each, with columns model, setting, method, m, layers, entropy."""
    tables = [
        selection_table(by_selection[selection].Z, set_sizes=set_sizes, normalize=normalize).assign(
            model=name, setting=setting
        )
        for name, by_selection in stats.items()
        for setting, (selection, normalize) in settings.items()
    ]
    return pd.concat(tables, ignore_index=True)[["model", "setting", "method", "m", "layers", "entropy"]]


def side_by_side(table: pd.DataFrame) -> pd.DataFrame:
    """Table 1 with the settings as columns: one row per (model, m, method), each cell the layer set
    and its entropy to 3 decimals ("[9, 10, 29] 0.692"), settings in their order in `table`."""
    cells = table.assign(cell=[f"{list(l)} {e:.3f}" for l, e in zip(table.layers, table.entropy)])
    wide = cells.pivot(index=["model", "method", "m"], columns="setting", values="cell")
    wide = wide[list(dict.fromkeys(table.setting))].reset_index()
    wide["method"] = pd.Categorical(wide["method"], TABLE1_METHODS, ordered=True)
    wide = wide.sort_values(["model", "m", "method"]).reset_index(drop=True)
    wide.columns.name = None
    return wide


def optimum_gaps(table: pd.DataFrame, methods=("ELSI", "ELSI-C")) -> pd.DataFrame:
    """For each (model, setting, m) of Table 1 and each of `methods`: its set, the exhaustive
    optimum's, the entropy gap (optimum - method, >= 0) and whether it is the optimum."""
    best = table[table.method == "exhaustive"].set_index(["model", "setting", "m"])
    rows = []
    for row in table[table.method.isin(methods)].itertuples():
        optimum = best.loc[(row.model, row.setting, row.m)]
        rows.append(
            {
                "model": row.model,
                "setting": row.setting,
                "m": row.m,
                "method": row.method,
                "layers": row.layers,
                "optimum": optimum.layers,
                "gap": optimum.entropy - row.entropy,
                "optimal": row.layers == optimum.layers,
            }
        )
    return pd.DataFrame(rows)


def table1_findings(table: pd.DataFrame) -> pd.DataFrame:
    """Notebook 05's findings per (model, setting) of Table 1: ELSI against EAGLE3 (the set drafts
    read) at EAGLE3's m = 3, with the paper's reading of EAGLE3 (EAGLE3_PAPER_READING) alongside,
    and at m = 1 against EAGLE2, unrestricted and under the paper's rule (SINGLE_LAYER_RULE)."""
    by = table.set_index(["model", "setting", "method", "m"])
    rows = []
    for model, setting in dict.fromkeys(zip(table.model, table.setting)):
        eagle3, chosen = by.loc[(model, setting, "EAGLE3", 3)], by.loc[(model, setting, "ELSI", 3)]
        paper_reading = by.loc[(model, setting, EAGLE3_PAPER_READING, 3)]
        single, rule = by.loc[(model, setting, "ELSI", 1)], by.loc[(model, setting, SINGLE_LAYER_RULE, 1)]
        rows.append(
            {
                "model": model,
                "setting": setting,
                "EAGLE3": eagle3.entropy,
                "ELSI, m=3": chosen.entropy,
                "ELSI / EAGLE3": chosen.entropy / eagle3.entropy,
                "ELSI set, m=3": chosen.layers,
                "EAGLE3 set": eagle3.layers,
                EAGLE3_PAPER_READING: paper_reading.entropy,
                "paper's reading, set": paper_reading.layers,
                "EAGLE2": by.loc[(model, setting, "EAGLE2", 1)].entropy,
                "ELSI, m=1": single.entropy,
                "ELSI layer, m=1": single.layers[0],
                "from N//2": rule.entropy,
                "from N//2, layer": rule.layers[0],
            }
        )
    return pd.DataFrame(rows)


def path_start(selection) -> tuple[int, int | None]:
    """Where Fig. 7's highlighted path starts: (the single layer the chosen set grew from, its rank
    in the first beam, 0 = the best single layer; None when it is not in that beam)."""
    first, seeds = selection.path()[0], [entry.layers for entry in selection.beams[1]]
    return first[0], seeds.index(first) if first in seeds else None


def bootstrap_table(
    stats: Stats, m: int = 3, *, n_boot: int = 100, seed: int = 0, progress: bool = True
) -> pd.DataFrame:
    """Table 1's stability: per model, ELSI's m-layer choices over `n_boot` bootstrap resamples of
    the prompts (`bootstrap_choices` on the paper's selection), each marked if it is the set chosen
    on all prompts."""
    tables = []
    for name, by_selection in stats.items():
        counts = bootstrap_choices(by_selection["entropy"], m, n_boot=n_boot, seed=seed, progress=progress)
        full = elsi(by_selection["entropy"].Z, m).layers
        tables.append(counts.assign(model=name, **{"chosen on all prompts": counts.layers == full}))
    return pd.concat(tables, ignore_index=True)[["model", "layers", "count", "share", "chosen on all prompts"]]
