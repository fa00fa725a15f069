"""Saving figures under stable names, and the one figure the `elsi` command draws (`elsi report`'s
depth profile); the paper's figures are the study's (`paper.plots`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def _plt():
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, name: str, out_dir) -> list[Path]:
    """Write `fig` as <out_dir>/<name>.png (150 dpi) and .pdf; metadata fixed so reruns are identical."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{name}.png", out_dir / f"{name}.pdf"]
    fig.savefig(paths[0], dpi=150, bbox_inches="tight", metadata={"Software": None})
    fig.savefig(paths[1], bbox_inches="tight", metadata={"Creator": None, "Producer": None, "CreationDate": None})
    return paths


def _layer_ticks(ax, n_layers: int, axis: str = "x", step: int | None = None):
    step = step or (1 if n_layers <= 16 else 2 if n_layers <= 32 else 4)
    ticks = np.arange(0, n_layers, step)
    (ax.set_xticks if axis == "x" else ax.set_yticks)(ticks)


def layer_profile(entropy, top_row_energy, boundaries, title: str):
    """`elsi report`'s figure: per-layer entropy (Eq. 5) and the share of Z_l's energy in its largest
    block row (an attention-sink block), CKA compartment boundaries as dashed lines."""
    plt = _plt()
    fig, axes = plt.subplots(2, 1, figsize=(8, 5.2), sharex=True)
    layers = np.arange(len(entropy))
    axes[0].plot(layers, entropy, "o-", ms=3)
    axes[0].set_ylabel("layer entropy")
    axes[1].plot(layers, top_row_energy, "o-", ms=3, color="tab:red")
    axes[1].set_ylabel("top-row energy share")
    axes[1].set_ylim(0, 1.02)
    axes[1].set_xlabel("layer (output of decoder layer l)")
    for ax in axes:
        for b in boundaries:
            ax.axvline(b + 0.5, color="grey", ls="--", lw=0.8)  # delta_b: between layers b and b + 1
    _layer_ticks(axes[1], len(entropy))
    fig.suptitle(title)
    fig.tight_layout()
    return fig
