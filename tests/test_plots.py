import matplotlib

matplotlib.use("Agg")

import numpy as np
import pandas as pd
import pytest

from elsi_lib import cka_matrix, elsi, elsi_c, transition_scores
from elsi_lib.study import plots

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
        plots.transition_score_panels({"a": {"all": (rng.uniform(size=7), np.array([2]))}}),
        plots.beam_tree(elsi(Z, 3, k_beam=3), "m"),
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


def test_csv_floats_have_six_significant_digits(tmp_path):
    df = pd.DataFrame({"model": ["a", "b", "c"], "blocks": [275, 12, 3],
                       "value": [0.8889783270924079, 2457.0061014197145, -3439.9635721779055]})
    csv, _ = plots.save_table(df, "t", tmp_path / "first")
    assert csv.read_text().splitlines() == ["model,blocks,value", "a,275,0.888978", "b,12,2457.01", "c,3,-3439.96"]
    rerun = df.assign(value=df.value * (1 + 1e-13))  # a rerun that differs in round-off only
    again, _ = plots.save_table(rerun, "t", tmp_path / "second")
    assert again.read_bytes() == csv.read_bytes()
    nan = pd.DataFrame({"n": [1, 2], "x": [np.nan, 0.5]})  # a missing value stays empty
    assert plots.save_table(nan, "n", tmp_path)[0].read_text().splitlines() == ["n,x", "1,", "2,0.5"]


def test_entropy_curves_count_the_prompts_without_a_block():
    curves = np.random.default_rng(0).uniform(size=(14, 6))
    fig = plots.entropy_curves(curves, "m: curves", without_block=2)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels[0] == "mean over 14 of 16 prompts (2 had no full block)"
    fig = plots.entropy_curves(curves, "m: curves")
    assert fig.axes[0].get_legend().get_texts()[0].get_text() == "mean over 14 prompts"


def test_transition_score_panels_draw_scores_and_circle_boundaries():
    Z = random_layers(n_layers=8, rows=6, dim=12, seed=2)
    scores = transition_scores(cka_matrix(Z))
    fig = plots.transition_score_panels({"a": {"all": (scores, np.array([1, 4])), "entropy": (scores / 2, [])},
                                         "b": {"all": (scores, np.array([0]))}})
    first, second = fig.axes
    assert first.get_title() == "a" and second.get_title() == "b"
    line = first.get_lines()[0]
    assert np.allclose(line.get_xdata(), np.arange(7) + 0.5) and np.allclose(line.get_ydata(), scores)
    circles = first.collections[0].get_offsets()
    assert np.allclose(circles, np.column_stack([[1.5, 4.5], scores[[1, 4]]]))
    assert len(first.collections[1].get_offsets()) == 0  # no boundary, no circle
    assert [t.get_text() for t in first.get_legend().get_texts()] == ["all", "entropy"]


def test_beam_tree_title_shows_the_settings_used():
    Z = random_layers(n_layers=8, rows=6, dim=12, seed=1)
    fig = plots.beam_tree(elsi(Z, 3, k_beam=4, k_expand=2), "smollm2")
    assert fig.axes[0].get_title() == "smollm2: ELSI beam frontier, m = 3 (k_beam = 4, k_expand = 2)"
    fig = plots.beam_tree(elsi_c(Z, 2, k_beam=3, k_pool=6), "qwen")
    assert fig.axes[0].get_title() == "qwen: ELSI-C beam frontier, m = 2 (k_beam = 3, k_pool = 6)"


def test_slug_makes_model_names_file_safe():
    assert plots.slug("smollm2-135m") == "smollm2-135m"
    assert plots.slug("Qwen/Qwen3-4B-Instruct-2507") == "Qwen--Qwen3-4B-Instruct-2507"
    assert plots.slug("/data/my model/") == "--data--my_model"
