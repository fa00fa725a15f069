"""Figures of the paper, drawn from arrays (no model, no capture). Each function returns a
matplotlib Figure; `save_figure` writes it as PNG and PDF under a stable name, `save_table` a
DataFrame as CSV and Markdown."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ...common.figures import _layer_ticks, layer_profile, save_figure  # noqa: F401 (notebooks call plots.save_figure)
from ...common.results import slug  # noqa: F401 (notebooks name files with plots.slug)

ENTROPY_LABEL = "Shannon matrix entropy $S_1$ (nats)"


def _plt():
    import matplotlib.pyplot as plt

    return plt


def _sns():
    """seaborn, imported on first use (as matplotlib is): importing this module stays cheap. No theme is
    set: a function that wants seaborn's look asks for it on its own axes."""
    import seaborn as sns

    return sns


def _cell_ticks(ax, n_layers: int, axis: str = "x"):
    """Layer ticks on a seaborn heatmap, at `_layer_ticks`' spacing: its cell l spans [l, l + 1], so
    each tick sits at l + 0.5, labelled l."""
    _layer_ticks(ax, n_layers, axis=axis)
    ticks = (ax.get_xticks if axis == "x" else ax.get_yticks)()
    (ax.set_xticks if axis == "x" else ax.set_yticks)(ticks + 0.5, [str(int(t)) for t in ticks])


CSV_FLOAT_FORMAT = "%.6g"  # 6 significant digits: round-off below that never changes a written table


def with_numeric(df, numeric: dict | None):
    """`df` with one column per numeric setting of the run that made it (`experiment.numeric_settings`:
    how the drafts' matmuls and the target's features ran), the same on every row; unchanged if None."""
    if numeric is None:
        return df
    clash = sorted(set(numeric) & set(df.columns))
    if clash and any((df[c] != numeric[c]).any() for c in clash):
        raise ValueError(f"the table's rows already name other numeric settings in {clash}")
    return df.assign(**numeric)


def save_table(df, name: str, out_dir, *, markdown: bool = True, numeric: dict | None = None) -> list[Path]:
    """Write `df` as <out_dir>/<name>.csv, floats to 6 significant digits (CSV_FLOAT_FORMAT, so a
    rerun that differs only in round-off writes the same file), and (unless `markdown` is False: data
    no one reads as a table, such as per-question rows) a Markdown table <name>.md, floats to 4
    decimals (`markdown_table`). `numeric`: the run's numeric settings, a column each (`with_numeric`).
    Columns of numbers held as objects (a concat with an empty, untyped frame) are typed first, so the
    format reaches them."""
    df = with_numeric(df, numeric).infer_objects()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    csv, md = out_dir / f"{name}.csv", out_dir / f"{name}.md"
    csv.write_text(csv_text(df))
    if not markdown:
        return [csv]
    md.write_text(markdown_table(df))
    return [csv, md]


def csv_text(df) -> str:
    """`df` as `save_table` writes its CSV (no index, floats to 6 significant digits)."""
    return df.infer_objects().to_csv(index=False, float_format=CSV_FLOAT_FORMAT)


def markdown_table(df, digits: int = 4) -> str:
    """`df` as a Markdown table (no index), floats to `digits` decimals."""

    def cell(v):
        if isinstance(v, (float, np.floating)):
            return f"{v:.{digits}f}"
        return str(v)

    lines = ["| " + " | ".join(map(str, df.columns)) + " |", "|" + "---|" * len(df.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines) + "\n"


def entropy_curves(sample_entropy: np.ndarray, title: str, max_lines: int = 60, without_block: int = 0):
    """Fig. 1: per-layer S_1 of each prompt's own block average (thin lines) and their mean.
    sample_entropy: (S, N), one row per prompt that filled a block; `without_block` prompts had none
    (too short) and are named in the legend."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4))
    n_prompts, layers = len(sample_entropy), np.arange(sample_entropy.shape[1])
    for row in sample_entropy[:max_lines]:
        ax.plot(layers, row, color="tab:blue", alpha=0.15, lw=0.8)
    mean_label = (
        f"mean over {n_prompts} prompts"
        if not without_block
        else f"mean over {n_prompts} of {n_prompts + without_block} prompts ({without_block} had no full block)"
    )
    ax.plot(layers, sample_entropy.mean(axis=0), color="black", lw=2, label=mean_label)
    ax.plot(
        [],
        [],
        color="tab:blue",
        alpha=0.5,
        lw=0.8,
        label=f"single prompts (first {min(max_lines, len(sample_entropy))})",
    )
    ax.set(xlabel="layer l (output of decoder layer l)", ylabel=ENTROPY_LABEL, title=title)
    _layer_ticks(ax, len(layers))
    ax.legend(loc="best", fontsize=8)
    ax.grid(alpha=0.3)
    return fig


def layer_entropy_families(curves: dict[str, np.ndarray], title: str = "Per-layer entropy across depth"):
    """Fig. 2: per-layer S_1 of Z for several models; left by layer index, right by relative depth."""
    plt = _plt()
    fig, (raw, rel) = plt.subplots(1, 2, figsize=(11, 4))
    for name, curve in curves.items():
        layers = np.arange(len(curve))
        raw.plot(layers, curve, marker="o", ms=3, label=f"{name} ({len(curve)} layers)")
        rel.plot(layers / max(len(curve) - 1, 1), curve, marker="o", ms=3, label=name)
    raw.set(xlabel="layer l", ylabel=ENTROPY_LABEL, title="by layer index")
    rel.set(xlabel="relative depth l / (N-1)", ylabel=ENTROPY_LABEL, title="by relative depth")
    for ax in (raw, rel):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def pair_heatmaps(panels: dict[str, tuple[np.ndarray, np.ndarray]]):
    """Fig. 3: for each model, S_1([H_i | H_j]) of the top seed layers i (rows) with every layer j
    (a seaborn heatmap per model: cell (i, j) spans [j, j + 1] x [i, i + 1])."""
    plt, sns = _plt(), _sns()
    fig, axes = plt.subplots(1, len(panels), figsize=(7 * len(panels), 4.2), squeeze=False)
    for ax, (name, (seeds, table)) in zip(axes[0], panels.items()):
        table = np.asarray(table, dtype=float)
        sns.heatmap(
            table,
            ax=ax,
            cmap="viridis",
            xticklabels=False,
            yticklabels=[str(s) for s in seeds],
            cbar_kws={"label": "nats"},
        )
        ax.tick_params(axis="y", labelrotation=0)
        _cell_ticks(ax, table.shape[1])
        ax.set(
            xlabel="companion layer j",
            ylabel="seed layer i (by S_1, best first)",
            title=f"{name}: pair entropy $S_1([H_i | H_j])$",
        )
    fig.tight_layout()
    return fig


def variance_panels(
    variances: dict[str, np.ndarray], labels: np.ndarray, title: str, shares: dict[str, np.ndarray] | None = None
):
    """Fig. 4: cross-prompt entropy variance per layer for each position selection (log scale),
    regimes shaded; optionally, below, the energy share of Z's largest row per layer."""
    plt = _plt()
    rows = 2 if shares else 1
    fig, axes = plt.subplots(rows, 1, figsize=(8, 3.6 * rows), sharex=True, squeeze=False)
    ax = axes[0, 0]
    layers = np.arange(len(labels))
    for name, var in variances.items():
        ax.plot(layers, var, marker="o", ms=3, label=name)
    ax.set_yscale("log")
    ax.set(ylabel="variance across prompts (nats$^2$)", title=title)
    _shade_regimes(ax, labels)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    if shares:
        share_ax = axes[1, 0]
        for name, share in shares.items():
            share_ax.plot(layers, share, marker=".", label=name)
        share_ax.set(ylabel="energy share of Z's largest row", ylim=(0, 1.05))
        _shade_regimes(share_ax, labels)
        share_ax.legend(fontsize=8)
        share_ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("layer l")
    _layer_ticks(axes[-1, 0], len(labels))
    fig.tight_layout()
    return fig


def _shade_regimes(ax, labels):
    colours = {"early": "tab:green", "middle": "tab:orange", "late": "tab:purple"}
    for regime, colour in colours.items():
        where = np.flatnonzero(labels == regime)
        if len(where):
            ax.axvspan(where[0] - 0.5, where[-1] + 0.5, color=colour, alpha=0.07)
            ax.text(
                (where[0] + where[-1]) / 2,
                0.98,
                regime,
                transform=ax.get_xaxis_transform(),
                ha="center",
                va="top",
                fontsize=8,
                color=colour,
            )


def cka_heatmaps(panels: dict[str, tuple[np.ndarray, np.ndarray]], title: str | None = None):
    """Fig. 5/6: pairwise CKA heatmaps (seaborn; cell l spans [l, l + 1]) with compartment boundaries:
    a boundary after layer l is a dashed line between cells l and l + 1 (at l + 1)."""
    plt, sns = _plt(), _sns()
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.6), squeeze=False)
    for ax, (name, (M, boundaries)) in zip(axes[0], panels.items()):
        M = np.asarray(M, dtype=float)
        sns.heatmap(
            M,
            ax=ax,
            cmap="magma",
            vmin=0,
            vmax=1,
            square=True,
            xticklabels=False,
            yticklabels=False,
            cbar_kws={"label": "linear CKA", "fraction": 0.046},
        )
        for b in boundaries:
            ax.axhline(b + 1, color="cyan", lw=1.2, ls="--")
            ax.axvline(b + 1, color="cyan", lw=1.2, ls="--")
        _cell_ticks(ax, len(M))
        _cell_ticks(ax, len(M), axis="y")
        ax.set(xlabel="layer", ylabel="layer", title=name)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def transition_score_panels(panels: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]]):
    """Fig. 6 (right): for each model, the transition scores delta_l (Eq. 8) of each selection
    ({model: {selection: (scores (N-1,), boundaries)}}), drawn between layers l and l+1 (at l + 0.5),
    boundaries circled."""
    plt = _plt()
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 3.2), squeeze=False)
    for ax, (name, by_selection) in zip(axes[0], panels.items()):
        for selection, (scores, boundaries) in by_selection.items():
            ax.plot(np.arange(len(scores)) + 0.5, scores, marker="o", ms=3, label=selection)
            b = np.asarray(boundaries, dtype=int)
            ax.scatter(b + 0.5, scores[b], s=80, facecolors="none", edgecolors="red")
        ax.set(xlabel="between layers l and l+1 (at l + 0.5)", ylabel="transition score delta_l", title=name)
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


BEAM_PARAMS = ("k_beam", "k_expand", "k_pool")  # the beam-search settings a Fig. 7 title shows


def beam_tree(selection, name: str):
    """Fig. 7: the ELSI beam at each depth (x), members ranked by entropy (y); edges join each member
    to the set it extended; the path to the chosen set is highlighted. It starts from the single
    layer the chosen set grew from, which need not be the best single layer (rank 0). The title
    names the model and the search's own settings (`selection.params`)."""
    plt = _plt()
    settings = ", ".join(f"{k} = {selection.params[k]}" for k in BEAM_PARAMS if k in selection.params)
    title = (
        f"{name}: {selection.method} beam frontier, m = {selection.params.get('m', len(selection.layers))} ({settings})"
    )
    frontier = selection.frontier()
    fig, ax = plt.subplots(figsize=(9, 5.5))
    position = {}
    for depth, group in frontier.groupby("depth"):
        for rank, row in enumerate(group.itertuples()):
            position[row.layers] = (depth, rank)
    for row in frontier.itertuples():
        x, y = position[row.layers]
        if row.parent in position:
            px, py = position[row.parent]
            ax.plot(
                [px, x], [py, y], color="tab:red" if row.on_path else "0.75", lw=2.2 if row.on_path else 0.8, zorder=1
            )
    points = ax.scatter(
        [position[l][0] for l in frontier.layers],
        [position[l][1] for l in frontier.layers],
        c=frontier.entropy,
        cmap="viridis",
        s=60,
        zorder=2,
        edgecolors="black",
        linewidths=0.4,
    )
    for row in frontier.itertuples():
        x, y = position[row.layers]
        ax.annotate(
            f"{list(row.layers)}  {row.entropy:.3f}",
            (x, y),
            xytext=(6, -3),
            textcoords="offset points",
            fontsize=7,
            fontweight="bold" if row.on_path else "normal",
        )
    ax.invert_yaxis()
    depths = sorted(frontier.depth.unique())
    ax.set_xticks(depths, [f"|L| = {d}" for d in depths])
    ax.set_xlim(min(depths) - 0.3, max(depths) + 0.9)
    ax.set(xlabel="beam depth: set size |L|", ylabel="rank in the beam (0 = highest entropy)", title=title)
    fig.colorbar(points, ax=ax, label="set entropy $S_1$ (nats)")
    fig.tight_layout()
    return fig
