import matplotlib

matplotlib.use("Agg")

import numpy as np
import pandas as pd
import pytest

from elsi_lib import cka_matrix, elsi, plots

from conftest import random_layers


@pytest.fixture(autouse=True)
def close_figures():
    import matplotlib.pyplot as plt

    yield
    plt.close("all")


def test_every_figure_is_labelled(tmp_path):
    Z = random_layers(n_layers=8, rows=6, dim=12, seed=1)
    rng = np.random.default_rng(0)
    labels = np.array(["early"] * 3 + ["middle"] * 3 + ["late"] * 2)
    figures = [
        plots.entropy_curves(rng.uniform(size=(5, 8)), "m: curves"),
        plots.layer_entropy_families({"a": rng.uniform(size=8), "b": rng.uniform(size=6)}),
        plots.pair_heatmaps({"a": (np.arange(3), rng.uniform(size=(3, 8)))}),
        plots.variance_panels({"all": rng.uniform(size=8)}, labels, "m: variance", {"all": rng.uniform(size=8)}),
        plots.cka_heatmaps({"a": (cka_matrix(Z), np.array([2]))}),
        plots.beam_tree(elsi(Z, 3, k_beam=3), "m: beam"),
    ]
    for fig in figures:
        panels = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
        for ax in fig.axes:
            if ax not in panels:
                assert ax.get_ylabel()  # colour bars say what they show
        assert all(ax.get_ylabel() for ax in panels), "unlabelled y axis"
        assert any(ax.get_xlabel() for ax in panels), "unlabelled x axis"  # stacked panels share one
        assert any(ax.get_title() for ax in panels) or fig._suptitle is not None


def test_save_figure_writes_png_and_pdf_identically(tmp_path):
    fig = plots.entropy_curves(np.random.default_rng(0).uniform(size=(4, 6)), "m: curves")
    first = plots.save_figure(fig, "fig", tmp_path / "a")
    second = plots.save_figure(fig, "fig", tmp_path / "b")
    assert [p.suffix for p in first] == [".png", ".pdf"]
    for a, b in zip(first, second):
        assert a.read_bytes() == b.read_bytes()  # no timestamps: same inputs, same files


def test_tables_as_csv_and_markdown(tmp_path):
    df = pd.DataFrame({"method": ["ELSI", "EAGLE3"], "layers": [(1, 2), (2, 4)], "entropy": [0.123456, 1.0]})
    csv, md = plots.save_table(df, "t", tmp_path)
    assert pd.read_csv(csv).shape == (2, 3)
    assert md.read_text().splitlines() == ["| method | layers | entropy |", "|---|---|---|",
                                           "| ELSI | (1, 2) | 0.1235 |", "| EAGLE3 | (2, 4) | 1.0000 |"]


def test_slug_makes_model_names_file_safe():
    assert plots.slug("smollm2-135m") == "smollm2-135m"
    assert plots.slug("Qwen/Qwen3-4B-Instruct-2507") == "Qwen--Qwen3-4B-Instruct-2507"
    assert plots.slug("/data/my model/") == "--data--my_model"
