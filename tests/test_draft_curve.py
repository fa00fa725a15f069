"""The learning-curve table (elsi_lib.study.experiments.curve.learning_curve) on hand-made per-question rows:
each point's tau, interval and paired difference are the accepted-token tables' own, and its
accuracy and token counts are carried from the rows."""

import numpy as np
import pandas as pd
import pytest

from elsi_lib.study.experiments import tables as T
from elsi_lib.study.experiments.curve import learning_curve, snapshot_batches
from elsi_lib.study.experiments import draft_plots


def points(seed: int = 0) -> pd.DataFrame:
    """Two points (500 and 2,000 prompts), two temperatures, EAGLE3 and a method that gains 0.5 on
    every question at the second point only; 12 questions in two columns."""
    rng = np.random.default_rng(seed)
    rows = []
    for prompts, tokens, batches in ((500, 10_000, 4), (2000, 40_000, 16)):
        for temperature in (0.0, 1.0):
            base = 1.5 + rng.random(12) + prompts / 2000
            for method, gain, acc in (("EAGLE3", 0.0, 0.3), ("ELSI m=3", 0.5 * (prompts == 2000), 0.25)):
                for q in range(12):
                    rows.append(
                        {
                            "method": method,
                            "seed": 0,
                            "temperature": temperature,
                            "nodes": 60,
                            "question_id": q,
                            "column": "MT" if q < 6 else "QA",
                            "tau": base[q] + gain,
                            "step 1": acc + prompts / 1e4,
                            "step 2": acc / 2,
                            "prompts": prompts,
                            "reply_tokens": tokens,
                            "batches": batches,
                        }
                    )
    return pd.DataFrame(rows)


def test_each_point_is_the_accepted_token_tables_own():
    rows = points()
    table = learning_curve(rows, 60, n_boot=200)
    assert len(table) == 2 * 2 * 2
    for (prompts, temperature), part in rows.groupby(["prompts", "temperature"]):
        tau, low, high = T.tau_table(part, 60, n_boot=200, temperature=temperature)
        mine = table[(table.prompts == prompts) & (table.temperature == temperature)].set_index("method")
        assert mine.tau.to_dict() == pytest.approx(tau[T.AVG].to_dict())
        assert mine.low.to_dict() == pytest.approx(low[T.AVG].to_dict())
        assert mine.reply_tokens.iloc[0] == part.reply_tokens.iloc[0]
        assert mine.loc["ELSI m=3", "step 1"] == pytest.approx(0.25 + prompts / 1e4)
    late = table[(table.prompts == 2000) & (table.method == "ELSI m=3")]
    assert late["minus EAGLE3"].to_numpy() == pytest.approx([0.5, 0.5])  # the same gain on every question
    assert late[["diff low", "diff high"]].to_numpy().ravel() == pytest.approx([0.5] * 4)
    early = table[(table.prompts == 500) & (table.method == "ELSI m=3")]
    assert early["minus EAGLE3"].to_numpy() == pytest.approx([0, 0])
    assert table[table.method == "EAGLE3"]["diff low"].isna().all()  # the baseline has no difference from itself


def test_a_point_without_the_baseline_is_refused():
    rows = points()
    with pytest.raises(ValueError, match="baseline 'EAGLE3'"):
        learning_curve(rows[rows.method != "EAGLE3"], 60, n_boot=200)


def test_snapshot_batches_leave_the_finished_drafts_out():
    class Exp:
        curve_prompts = (1000, 3000, 15000, 20000, 0)

    assert snapshot_batches(Exp, 15000, 3000) == (200, 600)


def test_learning_curve_figure_has_a_panel_per_temperature():
    fig = draft_plots.learning_curve(learning_curve(points(), 60, n_boot=200), "curve")
    assert len(fig.axes) == 4
    tau_axis = fig.axes[0]
    assert sorted(tau_axis.get_legend_handles_labels()[1]) == ["EAGLE3", "ELSI m=3"]


def test_a_point_with_two_training_seeds_is_refused():
    """A point holding two seeds' rows is refused: tabulated, it would sit at its first row's seed, with
    the other seed's accuracy mixed in by `first` and the seed column dropped."""
    rows = points()
    second = rows[rows.prompts == 2000].assign(seed=1, tau=lambda f: f.tau + 1.0)
    with pytest.raises(ValueError, match=r"2000 prompts.*seeds \[0, 1\]"):
        learning_curve(pd.concat([rows, second], ignore_index=True), 60, n_boot=200)
    # each point of one seed, not the same at every point: tabulated as the one-seed rows are
    other = points().assign(seed=lambda f: np.where(f.prompts == 2000, 1, 0))
    pd.testing.assert_frame_equal(learning_curve(other, 60, n_boot=200), learning_curve(rows, 60, n_boot=200))


@pytest.mark.parametrize("column", ["reply_tokens", "batches"])
def test_a_point_whose_rows_disagree_on_where_it_sits_is_refused(column):
    rows = points()
    rows.loc[(rows.prompts == 500) & (rows.method == "ELSI m=3"), column] += 1
    with pytest.raises(ValueError, match=rf"500 prompts.*{column}"):
        learning_curve(rows, 60, n_boot=200)


def test_a_method_with_two_step_accuracies_at_a_point_is_refused():
    rows = points()
    rows.loc[(rows.prompts == 500) & (rows.method == "ELSI m=3") & (rows.question_id == 3), "step 1"] = 0.9
    with pytest.raises(ValueError, match=r"'ELSI m=3'.*500 prompts.*step 1"):
        learning_curve(rows, 60, n_boot=200)
