"""The figures of trained drafts: tau by SpecBench column and against set entropy (Fig. 8), the
learning curve (Fig. 9), selection criteria against the drafts (Fig. 10) and what the layer choice
was worth per family (Fig. 11). Written as `plots.save_figure` writes every figure."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..paper.plots import ENTROPY_LABEL, _plt, _sns


def _panel_title(key) -> str:
    """A block key, nodes or (temperature, nodes), as a panel title."""
    if isinstance(key, tuple):
        temperature, nodes = key
        return f"{nodes}-node trees, T = {temperature:g}"
    return f"{key}-node trees"


def _intervals(ax, x, low, high, colors, cap: float):
    """The given 95% intervals as vertical lines from low to high at x, capped (`cap` wide, in data
    units), one colour each; those without an interval (NaN) are left out. Drawn as given: seaborn
    computes no interval here (the project's paired bootstrap did)."""
    x, low, high = (np.asarray(v, dtype=float) for v in (x, low, high))
    keep = np.isfinite(x) & np.isfinite(low) & np.isfinite(high)
    colors = [c for c, k in zip(colors, keep) if k]
    x, low, high = x[keep], low[keep], high[keep]
    ax.vlines(x, low, high, colors=colors, lw=1.0, gid="intervals", zorder=3)
    for end in (low, high):
        ax.hlines(end, x - cap / 2, x + cap / 2, colors=colors, lw=1.0, zorder=3)


def _cell(x: float, categories: list):
    """The category a seaborn artist at x belongs to (category i is drawn at i, dodged less than 0.5)."""
    return categories[int(round(x))]


def tau_by_column(blocks: dict, title: str):
    """Fig. 8: tau per SpecBench column and AVG, one bar per method (a seaborn barplot) with its 95%
    interval as given (not recomputed), one panel per block. blocks: {nodes or (temperature, nodes):
    (tau, low, high)} DataFrames (rows methods, columns categories)."""
    plt, sns = _plt(), _sns()
    from matplotlib.patches import Patch

    fig, axes = plt.subplots(
        len(blocks), 1, figsize=(11, 2.8 * len(blocks) + 1.2), squeeze=False, constrained_layout=True
    )
    every = list(dict.fromkeys(m for _, (tau, _, _) in sorted(blocks.items()) for m in tau.index))
    palette = {method: plt.cm.tab20(i % 20) for i, method in enumerate(every)}  # one colour per method throughout
    for ax, (nodes, (tau, low, high)) in zip(axes[:, 0], sorted(blocks.items())):
        methods, columns = list(tau.index), list(tau.columns)
        long = pd.DataFrame([{"method": m, "column": c, "tau": float(tau.loc[m, c])} for m in methods for c in columns])
        sns.barplot(
            long,
            x="column",
            y="tau",
            hue="method",
            order=columns,
            hue_order=methods,
            palette=palette,
            errorbar=None,
            saturation=1,
            legend=False,
            ax=ax,
        )
        if len(ax.containers) != len(methods):
            raise RuntimeError(f"seaborn drew {len(ax.containers)} groups of bars for {len(methods)} methods")
        x, lows, highs, colors = [], [], [], []
        for method, bars in zip(methods, ax.containers):  # one container per method, bars of its drawn columns
            for bar in bars:
                centre = bar.get_x() + bar.get_width() / 2
                column = _cell(centre, columns)
                x.append(centre)
                lows.append(low.loc[method, column])
                highs.append(high.loc[method, column])
                colors.append("black")
        _intervals(ax, x, lows, highs, colors, cap=0.4 * 0.8 / len(methods))
        ax.set_xlabel("SpecBench column")
        ax.set_ylabel(r"$\tau$ (tokens / target forward)")
        ax.set_ylim(1.0, None)
        ax.set_title(_panel_title(nodes))
        ax.grid(axis="y", alpha=0.3)
        ax.set_axisbelow(True)
        sns.despine(ax=ax)
    handles = [Patch(facecolor=palette[m], label=m) for m in every]
    fig.legend(handles=handles, ncol=6, fontsize=7, loc="outside lower center")
    fig.suptitle(title)
    return fig


def tau_vs_entropy(frame, title: str):
    """tau (AVG) against the set entropy of each method's layers, one panel per tree size (and
    temperature, when `frame` has that column). frame: columns method, nodes, entropy, tau, low, high."""
    plt = _plt()
    by = ["temperature", "nodes"] if "temperature" in frame else ["nodes"]
    groups = list(frame.groupby(by, sort=True))  # keys: (temperature, nodes) or (nodes,)
    fig, axes = plt.subplots(1, len(groups), figsize=(5.2 * len(groups), 4.2), squeeze=False)
    for ax, (key, part) in zip(axes[0], groups):
        ax.errorbar(part.entropy, part.tau, yerr=[part.tau - part.low, part.high - part.tau], fmt="o", capsize=2)
        for row in part.itertuples():
            ax.annotate(row.method, (row.entropy, row.tau), fontsize=7, xytext=(3, 3), textcoords="offset points")
        ax.set_xlabel(ENTROPY_LABEL)
        ax.set_ylabel(r"AVG $\tau$")
        ax.set_title(_panel_title(key if len(key) == 2 else key[0]))
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def learning_curve(table, title: str, baseline: str = "EAGLE3"):
    """Fig. 9: per method, AVG tau (95% interval) and held-out step-1 accuracy against the reply
    tokens its draft was trained on, one column of panels per temperature. table: rows of
    `curve.learning_curve` (reply_tokens, temperature, method, tau, low, high, "step 1")."""
    plt = _plt()
    temperatures = sorted(table.temperature.unique())
    fig, axes = plt.subplots(
        2, len(temperatures), figsize=(5.6 * len(temperatures), 7), squeeze=False, sharex=True, constrained_layout=True
    )
    for j, T in enumerate(temperatures):
        part = table[table.temperature == T]
        for i, (method, rows) in enumerate(part.groupby("method", sort=False)):
            rows = rows.sort_values("reply_tokens")
            style = {"color": plt.cm.tab10(i % 10), "lw": 2.2 if method == baseline else 1.2, "marker": "o", "ms": 3}
            axes[0, j].errorbar(
                rows.reply_tokens,
                rows.tau,
                yerr=[rows.tau - rows.low, rows.high - rows.tau],
                capsize=2,
                label=method,
                **style,
            )
            axes[1, j].plot(rows.reply_tokens, rows["step 1"], **style)  # the same at every T: one draft
        axes[0, j].set_title(f"{int(part.nodes.iloc[0])}-node trees, T = {T:g}")
        axes[0, j].set_ylabel(r"AVG $\tau$")
        axes[1, j].set_ylabel("held-out step-1 accuracy")
        axes[1, j].set_xlabel("reply tokens trained on")
        axes[1, j].set_xscale("log")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, ncol=4, fontsize=8, loc="outside lower center")
    fig.suptitle(title)
    return fig


def criteria_vs_drafts(drafts, correlations, title: str, criteria=("set entropy", "probe error")):
    """Fig. 10: each criterion's score of a draft's layer set (rows) against what the draft measured
    (columns: held-out step-1 accuracy, AVG tau minus EAGLE3's), one colour per protocol and curve
    point, Spearman's signed rho in each legend with its interval (over questions and sets where
    there is one, else over sets). drafts:
    `criteria_vs_drafts.draft_table` rows (protocol, prompts, method, criteria columns, "step 1", "tau minus
    EAGLE3") with the probe's columns joined;
    correlations: `criteria_vs_drafts.rank_correlations` rows."""
    plt = _plt()
    criteria = [c for c in criteria if c in drafts]
    outcomes = [("step 1", "held-out step-1 accuracy"), ("tau minus EAGLE3", r"AVG $\tau$ minus EAGLE3's (paired)")]
    fig, axes = plt.subplots(
        len(criteria), 2, figsize=(11, 4.2 * len(criteria)), squeeze=False, constrained_layout=True
    )
    if drafts.temperature.nunique() != 1 or correlations.temperature.nunique() != 1:
        raise ValueError("pass the drafts and correlations of one temperature (step accuracy would show twice)")
    points = list(drafts.groupby(["protocol", "prompts"], sort=False))
    for i, criterion in enumerate(criteria):
        for j, (outcome, label) in enumerate(outcomes):
            ax = axes[i, j]
            for k, ((protocol, prompts), part) in enumerate(points):
                r = correlations[
                    (correlations.protocol == protocol)
                    & (correlations.prompts == prompts)
                    & (correlations.criterion == criterion)
                    & (correlations.outcome == outcome)
                ]
                kind = "questions and sets" if len(r) and pd.notna(r["low (questions and sets)"].iloc[0]) else "sets"
                rho = (
                    f": rho {r.rho.iloc[0]:+.2f} [{r[f'low ({kind})'].iloc[0]:+.2f}, {r[f'high ({kind})'].iloc[0]:+.2f}]"
                    if len(r)
                    else ""
                )
                ax.plot(
                    part[criterion],
                    part[outcome],
                    "o",
                    color=plt.cm.tab10(k % 10),
                    ms=5,
                    label=f"{protocol}, {int(prompts):,} prompts{rho}",
                )
                for method, x, y in zip(part.method, part[criterion], part[outcome]):
                    ax.annotate(method, (x, y), fontsize=6, xytext=(2, 2), textcoords="offset points")
            ax.set_xlabel(criterion + (" (lower is predicted better)" if criterion == "probe error" else ""))
            ax.set_ylabel(label)
            ax.legend(fontsize=7)
    fig.suptitle(title)
    return fig


def family_effects(effects, interchange, title: str):
    """Fig. 11: per family, what the layer choice was worth (each named effect minus EAGLE3 as a
    seaborn point, its paired 95% interval drawn as given; one panel per temperature) beside how
    interchangeable its layers are (a bar per family: the share of layer pairs with CKA >= 0.9).
    effects: `families.choice_effects` rows with a family column; interchange: `families.family_table`
    rows with a family column."""
    plt, sns = _plt(), _sns()
    from matplotlib.lines import Line2D

    named = effects[effects.effect.str.endswith("minus EAGLE3")]
    temperatures = sorted(named.temperature.unique())
    fig, axes = plt.subplots(
        1, len(temperatures) + 1, figsize=(4.6 * (len(temperatures) + 1), 4), squeeze=False, constrained_layout=True
    )
    families_ = list(dict.fromkeys(named.family))
    palette = {f: plt.cm.tab10(i % 10) for i, f in enumerate(dict.fromkeys([*families_, *interchange.family]))}
    for ax, T in zip(axes[0], temperatures):
        part = named[named.temperature == T]
        kinds = list(dict.fromkeys(part.effect))
        sns.pointplot(
            part,
            x="effect",
            y="value",
            hue="family",
            order=kinds,
            hue_order=families_,
            palette=palette,
            errorbar=None,
            dodge=0.3 if len(families_) > 1 else False,
            linestyle="none",  # seaborn's default marker, "o"; no line: the layer sets are not a sequence
            legend=False,  # its legend would add empty lines to ax.lines; drawn below instead
            ax=ax,
        )
        if len(ax.lines) != len(families_):
            raise RuntimeError(f"seaborn drew {len(ax.lines)} series of points for {len(families_)} families")
        x, lows, highs, colors = [], [], [], []
        for family, points in zip(families_, ax.lines):  # one line of points per family, in hue order
            rows = part[part.family == family].set_index("effect")
            for centre in points.get_xdata():
                kind = _cell(centre, kinds)
                if kind in rows.index:
                    x.append(centre)
                    lows.append(rows.loc[kind, "low"])
                    highs.append(rows.loc[kind, "high"])
                    colors.append(palette[family])
        _intervals(ax, x, lows, highs, colors, cap=0.08)
        ax.axhline(0, color="0.5", lw=0.8)
        ax.set_xticks(np.arange(len(kinds)), [k.replace(" minus EAGLE3", "") for k in kinds], fontsize=8)
        ax.set_ylabel(r"AVG $\tau$ minus EAGLE3's (paired)")
        ax.set_xlabel("layer set")
        ax.set_title(f"{int(part.nodes.iloc[0])}-node trees, T = {T:g}")
        ax.grid(axis="y", alpha=0.3)
        ax.set_axisbelow(True)
        sns.despine(ax=ax)
    ax = axes[0, -1]
    column = "pairs with CKA >= 0.9"
    sns.barplot(
        interchange,
        x="family",
        y=column,
        hue="family",
        order=list(interchange.family),
        palette=palette,
        errorbar=None,
        saturation=1,
        legend=False,
        ax=ax,
    )
    ax.tick_params(axis="x", labelsize=8)
    ax.set_ylabel(f"share of layer {column}")
    ax.set_xlabel("family")
    ax.set_title("how interchangeable the layers are")
    sns.despine(ax=ax)
    marks = [Line2D([], [], color=palette[f], marker="o", ls="none", label=f) for f in families_]
    fig.legend(handles=marks, ncol=min(len(marks), 4), fontsize=8, loc="outside lower center")  # off the points
    fig.suptitle(title)
    return fig
