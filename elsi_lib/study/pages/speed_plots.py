"""The cost model's figures from the benchmarks' records (`speed.cost_results`): each run's chains on the
model's line (`curves`), and every out-of-sample chain's measured speed-up against its predicted one with
the 10% band the model is held to (`accuracy`).

    .venv/bin/python -m elsi_lib.study.pages.speed_page   # writes both into figures/
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np

from .cost_records import TOLERANCE
from .speed import curve, label, predicted_chains


def curves(results: list[dict]):
    """One panel a run, vLLM's runs first (the engine users serve with), then elsi's loop: each chain's
    speed-up against tokens per round from its measured costs, from break-even to its ceiling (triangle),
    and the measured run (dot)."""
    import matplotlib.pyplot as plt

    results = sorted(results, key=lambda r: not r["settings"]["engine"].startswith("vLLM"))  # stable
    cols = min(3, len(results))  # three panels a row, each title wrapped to the panel's width
    rows = -(-len(results) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.6 * rows), squeeze=False)
    for ax in axes.flat[len(results) :]:
        ax.set_visible(False)
    for ax, result in zip(axes.flat, results):
        colors = plt.get_cmap("viridis")(np.linspace(0, 0.85, max(1, len(result["chains"]))))
        for color, row in zip(colors, result["chains"]):
            k = row["k"]
            taus = np.linspace(1, k + 1, 50)
            ax.plot(taus, curve(result["settings"], row["round ms predicted"], taus), color=color, lw=1.2)
            ax.plot([k + 1], curve(result["settings"], row["round ms predicted"], [k + 1]), "^", color=color, ms=5)
            ax.plot(row["tau measured"], row["speed-up measured"], "o", color=color, mec="black", label=f"k = {k}")
        ax.axhline(1.0, color="grey", ls="--", lw=1, label="break-even")
        ax.set_xlabel("tokens per round (tau)")
        ax.set_ylabel("speed-up over plain decoding")
        ax.set_title("\n".join(textwrap.wrap(label(result), 62)), fontsize=8)
        ax.legend(fontsize=7, loc="upper left")
    top = 0.5 / (3.6 * rows)  # half an inch on top for the title
    fig.suptitle(
        "Chains: the cost model's line (measured costs), its ceiling (triangle), the measured run (dot)",
        y=1 - top / 3,
        va="top",
    )
    fig.tight_layout(rect=(0, 0, 1, 1 - top))
    return fig


def accuracy(results: list[dict]):
    """Measured against predicted speed-up for every chain predicted out of sample, vLLM's (float32 dots,
    bf16 squares) and elsi's loop's (triangles), one colour a family; the band is |error| <= TOLERANCE
    (error = predicted / measured - 1), and a bar is a repeated run's spread around its measurement."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 5.6))
    families = sorted({r["settings"].get("model") or r["settings"].get("family") for r in results})
    colours = dict(zip(families, plt.get_cmap("tab10")(np.arange(len(families)))))
    seen = set()
    low, high = np.inf, -np.inf
    for result in results:
        s = result["settings"]
        family = s.get("model") or s.get("family")
        vllm = s["engine"].startswith("vLLM")
        marker = ("s" if s.get("dtype") == "bfloat16" else "o") if vllm else "^"
        kind = ("vLLM, target " + s.get("dtype", "float32")) if vllm else "elsi's loop"
        for row in predicted_chains(result["chains"]):
            x, y = row["speed-up predicted"], row["speed-up measured"]
            low, high = min(low, x, y), max(high, x, y)
            key = (family, kind)
            bar = y * row["spread"] / 2 if isinstance(row.get("spread"), (int, float)) else None
            ax.errorbar(
                x,
                y,
                yerr=bar,
                fmt=marker,
                color=colours[family],
                mec="black",
                mew=0.5,
                ms=6,
                elinewidth=0.8,
                label=f"{family}, {kind}" if key not in seen else None,
            )
            seen.add(key)
    if not seen:
        ax.text(0.5, 0.5, "no chain predicted out of sample yet", ha="center", transform=ax.transAxes)
        return fig
    line = np.linspace(0.95 * low, 1.05 * high, 2)
    ax.plot(line, line, color="black", lw=1, label="measured = predicted")
    ax.fill_between(
        line,
        line / (1 + TOLERANCE),
        line / (1 - TOLERANCE),
        color="grey",
        alpha=0.2,
        label=f"within {100 * TOLERANCE:.0f}%",
    )
    ax.axhline(1.0, color="grey", ls="--", lw=1)
    ax.set_xlabel("speed-up predicted (the cost model, out of sample)")
    ax.set_ylabel("speed-up measured")
    ax.set_title("Every chain the cost model predicted out of sample", fontsize=10)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    return fig


def save_figures(results: list[dict], folder: Path) -> list[Path]:
    """cost_model.png (`curves`) and cost_accuracy.png (`accuracy`) written into `folder`; their paths."""
    import matplotlib.pyplot as plt

    out = []
    for name, draw in (("cost_model.png", curves), ("cost_accuracy.png", accuracy)):
        fig = draw(results)
        fig.savefig(Path(folder) / name, dpi=90)
        plt.close(fig)
        out.append(Path(folder) / name)
    return out
