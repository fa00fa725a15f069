import matplotlib

matplotlib.use("Agg")

import numpy as np
import pandas as pd
import pytest

from elsi_lib import cka_matrix, elsi, elsi_c, transition_scores
from elsi_lib.study.paper import plots

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
    assert md.read_text().splitlines() == [
        "| method | layers | entropy |",
        "|---|---|---|",
        "| ELSI | (1, 2) | 0.1235 |",
        "| EAGLE3 | (2, 4) | 1.0000 |",
    ]


def test_csv_floats_have_six_significant_digits(tmp_path):
    df = pd.DataFrame(
        {
            "model": ["a", "b", "c"],
            "blocks": [275, 12, 3],
            "value": [0.8889783270924079, 2457.0061014197145, -3439.9635721779055],
        }
    )
    csv, _ = plots.save_table(df, "t", tmp_path / "first")
    assert csv.read_text().splitlines() == ["model,blocks,value", "a,275,0.888978", "b,12,2457.01", "c,3,-3439.96"]
    rerun = df.assign(value=df.value * (1 + 1e-13))  # a rerun that differs in round-off only
    again, _ = plots.save_table(rerun, "t", tmp_path / "second")
    assert again.read_bytes() == csv.read_bytes()
    nan = pd.DataFrame({"n": [1, 2], "x": [np.nan, 0.5]})  # a missing value stays empty
    assert plots.save_table(nan, "n", tmp_path)[0].read_text().splitlines() == ["n,x", "1,", "2,0.5"]
    untyped = pd.concat([pd.DataFrame(columns=list(df)), df], ignore_index=True)  # object columns
    assert untyped["value"].dtype == object
    assert plots.save_table(untyped, "t", tmp_path / "third")[0].read_bytes() == csv.read_bytes()


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
    fig = plots.transition_score_panels(
        {"a": {"all": (scores, np.array([1, 4])), "entropy": (scores / 2, [])}, "b": {"all": (scores, np.array([0]))}}
    )
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


def _mesh(ax):
    from matplotlib.collections import QuadMesh

    (mesh,) = [c for c in ax.collections if isinstance(c, QuadMesh)]
    return mesh


def _colorbar_labels(fig):
    return [ax.get_ylabel() for ax in fig.axes if ax.get_label() == "<colorbar>"]


def test_pair_heatmap_cells_hold_the_table_with_seeds_and_layers_at_their_centres():
    rng = np.random.default_rng(3)
    table = rng.uniform(2, 3, size=(3, 20))
    table[1, 4] = np.nan  # a missing cell stays empty, the others keep their place
    fig = plots.pair_heatmaps({"a": (np.array([7, 2, 11]), table), "b": (np.array([0]), rng.uniform(size=(1, 6)))})
    ax = fig.axes[0]
    mesh = _mesh(ax)
    cells = np.ma.asarray(mesh.get_array()).reshape(table.shape)
    assert np.array_equal(cells.filled(np.nan), table, equal_nan=True) and cells.mask[1, 4]
    assert mesh.get_cmap().name == "viridis"
    assert mesh.get_clim() == pytest.approx((np.nanmin(table), np.nanmax(table)))
    assert list(ax.get_yticks()) == [0.5, 1.5, 2.5]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["7", "2", "11"]
    assert list(ax.get_xticks()) == [l + 0.5 for l in range(0, 20, 2)]  # `_layer_ticks`' step for 20 layers
    assert [t.get_text() for t in ax.get_xticklabels()] == [str(l) for l in range(0, 20, 2)]
    assert ax.get_title() == "a: pair entropy $S_1([H_i | H_j])$"
    assert _colorbar_labels(fig) == ["nats", "nats"]  # one colour bar per panel


def test_cka_heatmap_cells_hold_the_matrix_and_boundaries_fall_between_layers():
    Z = random_layers(n_layers=12, rows=6, dim=12, seed=4)
    M = cka_matrix(Z)
    fig = plots.cka_heatmaps({"all": (M, np.array([2, 7])), "none": (M / 2, np.array([], dtype=int))}, "t")
    ax, other = [a for a in fig.axes if a.get_label() != "<colorbar>"]
    mesh = _mesh(ax)
    assert np.allclose(mesh.get_array().reshape(M.shape), M) and mesh.get_clim() == (0, 1)
    assert np.allclose(_mesh(other).get_array().reshape(M.shape), M / 2)
    # a boundary after layer b: between cells b ([b, b + 1]) and b + 1, on both axes
    rows = sorted(line.get_ydata()[0] for line in ax.get_lines() if line.get_ydata()[0] == line.get_ydata()[1])
    cols = sorted(line.get_xdata()[0] for line in ax.get_lines() if line.get_xdata()[0] == line.get_xdata()[1])
    assert rows == [3, 8] and cols == [3, 8] and not other.get_lines()
    for ticks, labels in ((ax.get_xticks(), ax.get_xticklabels()), (ax.get_yticks(), ax.get_yticklabels())):
        assert list(ticks) == [l + 0.5 for l in range(12)]
        assert [t.get_text() for t in labels] == [str(l) for l in range(12)]
    assert ax.get_title() == "all" and fig._suptitle.get_text() == "t"
    assert _colorbar_labels(fig) == ["linear CKA", "linear CKA"]


def _same_segments(ax, expected) -> bool:
    """The interval lines of `ax` are exactly `expected`, [((x, low), (x, high)), ...], in any order."""
    (lines,) = [c for c in ax.collections if c.get_gid() == "intervals"]
    drawn = sorted(tuple(np.ravel(s)) for s in lines.get_segments())
    return len(drawn) == len(expected) and np.allclose(drawn, sorted(tuple(np.ravel(s)) for s in expected))


def test_tau_by_column_draws_a_bar_and_the_given_interval_per_method_and_column():
    from elsi_lib.study.experiments import draft_plots

    methods, columns = ["EAGLE3", "ELSI m=3", "random"], ["MT", "QA", "AVG"]
    rng = np.random.default_rng(5)
    blocks = {}
    for key in ((1.0, 60), (0.0, 60)):
        tau = pd.DataFrame(rng.uniform(1.4, 2.2, size=(3, 3)), index=methods, columns=columns)
        low, high = tau - rng.uniform(0.05, 0.1, size=(3, 3)), tau + rng.uniform(0.05, 0.1, size=(3, 3))
        blocks[key] = (tau, low, high)
    blocks[0.0, 60][1].loc["random", "QA"] = np.nan  # too few questions: no interval, the bar still drawn
    blocks[0.0, 60][2].loc["random", "QA"] = np.nan
    kept = {k: tuple(f.copy() for f in v) for k, v in blocks.items()}
    fig = draft_plots.tau_by_column(blocks, "m: tau by column")
    for k, frames in blocks.items():  # only drawn: the inputs are as they were
        for a, b in zip(frames, kept[k]):
            pd.testing.assert_frame_equal(a, b)
    panels = fig.axes
    assert [ax.get_title() for ax in panels] == ["60-node trees, T = 0", "60-node trees, T = 1"]
    for ax, key in zip(panels, [(0.0, 60), (1.0, 60)]):
        tau, low, high = blocks[key]
        assert len(ax.patches) == len(methods) * len(columns)  # one bar per (method, column)
        assert not ax.get_lines()  # no interval of seaborn's own (errorbar=None)
        drawn, expected = {}, []
        for method, bars in zip(methods, ax.containers):
            for bar in bars:
                centre = bar.get_x() + bar.get_width() / 2
                column = columns[round(centre)]
                drawn[method, column] = bar.get_height()
                if np.isfinite(low.loc[method, column]):
                    expected.append(((centre, low.loc[method, column]), (centre, high.loc[method, column])))
        assert drawn == pytest.approx({(m, c): tau.loc[m, c] for m in methods for c in columns})
        assert _same_segments(ax, expected)  # exactly low..high at each bar
        assert len(expected) == 9 - (key == (0.0, 60))
        assert [t.get_text() for t in ax.get_xticklabels()] == columns
        assert ax.get_ylabel() and ax.get_xlabel() == "SpecBench column" and ax.get_ylim()[0] == 1.0
    assert [t.get_text() for t in fig.legends[0].get_texts()] == methods
    assert fig._suptitle.get_text() == "m: tau by column"


def test_family_effects_draw_each_paired_difference_with_its_given_interval():
    from elsi_lib.study.experiments import draft_plots

    families = ["table2: small", "table3: other"]
    rows = []
    for f, family in enumerate(families):
        for T in (0.0, 1.0):
            for e, method in enumerate(("ELSI m=3", "ELSI m=1")):
                value = 0.01 * (f + 1) * (e - 0.5) + T / 10
                rows.append(
                    dict(
                        temperature=T,
                        nodes=60,
                        effect=f"{method} minus EAGLE3",
                        value=value,
                        low=value - 0.02 - f / 100,
                        high=value + 0.03,
                        family=family,
                    )
                )
            rows.append(
                dict(
                    temperature=T,
                    nodes=60,
                    effect="range of AVG tau across the sets",
                    value=0.2,
                    low=np.nan,
                    high=np.nan,
                    family=family,
                )
            )
    effects = pd.DataFrame(rows)
    interchange = pd.DataFrame({"family": families, "pairs with CKA >= 0.9": [0.99, 0.9]})
    fig = draft_plots.family_effects(effects, interchange, "families")
    *panels, shares = fig.axes
    assert [ax.get_title() for ax in panels] == ["60-node trees, T = 0", "60-node trees, T = 1"]
    kinds = ["ELSI m=3 minus EAGLE3", "ELSI m=1 minus EAGLE3"]
    for ax, T in zip(panels, (0.0, 1.0)):
        *points, zero = ax.get_lines()  # a line of points per family (no seaborn interval), then y = 0
        assert len(points) == len(families) and list(zero.get_ydata()) == [0, 0]
        expected = []
        for family, line in zip(families, points):
            part = effects[(effects.family == family) & (effects.temperature == T)].set_index("effect")
            x = line.get_xdata()
            assert [kinds[round(v)] for v in x] == kinds  # the range row is no effect: not drawn
            assert list(line.get_ydata()) == pytest.approx(part.loc[kinds, "value"].tolist())
            expected += [((v, part.loc[k, "low"]), (v, part.loc[k, "high"])) for v, k in zip(x, kinds)]
        assert _same_segments(ax, expected)
        assert [t.get_text() for t in ax.get_xticklabels()] == ["ELSI m=3", "ELSI m=1"]
    assert [p.get_height() for p in shares.patches] == pytest.approx([0.99, 0.9])
    assert [t.get_text() for t in shares.get_xticklabels()] == families
    assert [t.get_text() for t in fig.legends[0].get_texts()] == families
    colours = [tuple(p.get_facecolor()) for p in shares.patches]  # a family's colour is the same in every panel
    assert colours == [tuple(matplotlib.colors.to_rgba(line.get_color())) for line in panels[0].get_lines()[:2]]


def test_the_statistical_figures_leave_the_style_alone_and_seaborn_unimported_until_drawn():
    import subprocess
    import sys

    import matplotlib as mpl
    from elsi_lib.study.experiments import draft_plots

    tau = pd.DataFrame([[1.5, 1.6]], index=["EAGLE3"], columns=["MT", "AVG"])
    with mpl.rc_context({"axes.facecolor": "#123456", "font.size": 7.5}):  # a style no seaborn theme sets
        before = dict(mpl.rcParams)
        plots.pair_heatmaps({"a": (np.arange(2), np.eye(2))})
        plots.cka_heatmaps({"a": (np.eye(4), np.array([1]))})
        draft_plots.tau_by_column({60: (tau, tau - 0.1, tau + 0.1)}, "t")
        assert dict(mpl.rcParams) == before  # no global seaborn theme as a side effect
    code = "import sys, elsi_lib.study.paper.plots, elsi_lib.study.experiments.draft_plots; sys.exit('seaborn' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
