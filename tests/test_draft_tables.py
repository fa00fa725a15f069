"""Notebook 06's tables (elsi_lib.study.experiments.tables: tau per paper column with stratified bootstrap
intervals, paired differences, seed spread, rank correlation, summary) on small synthetic
per-question frames with hand-computed values."""

import math

import numpy as np
import pandas as pd
import pytest

from elsi_lib.study.experiments import tables as T
from elsi_lib.study.experiments import tau_files as F


pytestmark = pytest.mark.usefixtures("one_torch_thread")


# ---------------------------------------------------------------- synthetic per-question results


def frame(per_method: dict, *, nodes: int = 30, seed: int = 0, start_id: int = 0) -> pd.DataFrame:
    """{method: {column: [tau, ...]}} as the long results frame; question ids are numbered over the
    columns in order (the same ids for every method, so methods are paired question by question)."""
    rows = []
    for method, by_column in per_method.items():
        qid = start_id
        for column, taus in by_column.items():
            for tau in taus:
                rows.append(
                    {
                        "method": method,
                        "seed": seed,
                        "nodes": nodes,
                        "question_id": qid,
                        "column": column,
                        "tau": float(tau),
                        "rounds": 10,
                    }
                )
                qid += 1
    return pd.DataFrame(rows)


def width(low, high, method, col=T.AVG):
    return high.loc[method, col] - low.loc[method, col]


# ---------------------------------------------------------------- tau_table


def test_tau_table_cells_are_column_means_and_avg_is_sample_weighted():
    results = frame({"A": {"QA": [10, 20], "MT": [1, 2, 3]}, "B": {"QA": [4, 4], "MT": [2, 2, 5]}})
    tau, low, high = T.tau_table(results, 30, n_boot=200)
    assert list(tau.columns) == ["MT", "QA", "AVG"]  # the paper's column order, AVG last
    assert list(tau.index) == ["A", "B"]  # first-appearance order
    assert tau.loc["A", "MT"] == pytest.approx(2.0)
    assert tau.loc["A", "QA"] == pytest.approx(15.0)
    assert tau.loc["A", "AVG"] == pytest.approx(36 / 5)  # mean over questions, not (2 + 15) / 2 = 8.5
    assert tau.loc["B", "MT"] == pytest.approx(3.0)
    assert tau.loc["B", "QA"] == pytest.approx(4.0)
    assert tau.loc["B", "AVG"] == pytest.approx(17 / 5)
    assert low.shape == high.shape == tau.shape


def test_tau_table_keeps_only_the_block_and_drops_missing_tau():
    base = frame({"A": {"MT": [1, 2, 3], "QA": [4, 5]}})
    other_nodes = frame({"A": {"MT": [100, 100, 100], "QA": [100, 100]}, "C": {"MT": [9, 9, 9]}}, nodes=60)
    other_seed = frame({"A": {"MT": [50, 50, 50], "QA": [50, 50]}}, seed=1)
    missing = pd.DataFrame(
        [{"method": "A", "seed": 0, "nodes": 30, "question_id": 99, "column": "MT", "tau": np.nan, "rounds": 0}]
    )
    tau, low, high = T.tau_table(pd.concat([base, other_nodes, other_seed, missing], ignore_index=True), 30, n_boot=200)
    assert list(tau.index) == ["A"]
    assert tau.loc["A", "MT"] == pytest.approx(2.0)
    assert tau.loc["A", "QA"] == pytest.approx(4.5)
    assert tau.loc["A", "AVG"] == pytest.approx(3.0)
    assert np.isfinite(low.to_numpy()).all() and np.isfinite(high.to_numpy()).all()
    tau1, _, _ = T.tau_table(pd.concat([base, other_seed], ignore_index=True), 30, n_boot=100, model_seed=1)
    assert tau1.loc["A", "AVG"] == pytest.approx(50.0)


def test_tau_table_intervals_contain_the_estimate():
    rng = np.random.default_rng(0)
    results = frame(
        {
            m: {"MT": rng.uniform(1, 4, 12), "QA": rng.uniform(2, 3, 9), "RAG": rng.uniform(1, 5, 7)}
            for m in ("A", "B", "C")
        }
    )
    tau, low, high = T.tau_table(results, 30, n_boot=500)
    assert (low.to_numpy() <= tau.to_numpy()).all() and (tau.to_numpy() <= high.to_numpy()).all()
    assert (low.to_numpy() < high.to_numpy()).all()  # nothing degenerate here


def test_tau_table_interval_is_degenerate_when_a_column_is_constant():
    results = frame({"A": {"MT": [2.5, 2.5, 2.5, 2.5], "QA": [1.0, 3.0, 2.0]}})
    tau, low, high = T.tau_table(results, 30, n_boot=300)
    assert low.loc["A", "MT"] == high.loc["A", "MT"] == tau.loc["A", "MT"] == pytest.approx(2.5)
    assert low.loc["A", "QA"] < high.loc["A", "QA"]


def test_tau_table_avg_bootstrap_is_stratified_by_column():
    """Each column constant but the columns differ: an unstratified bootstrap over all 5 questions
    would move the AVG (any draw with another MT/QA mix); one stratified by column keeps 3 MT and 2 QA
    questions in every draw, so the AVG interval collapses to (3 * 1 + 2 * 3) / 5 = 1.8."""
    results = frame({"A": {"MT": [1.0, 1.0, 1.0], "QA": [3.0, 3.0]}})
    tau, low, high = T.tau_table(results, 30, n_boot=500)
    assert tau.loc["A", "AVG"] == pytest.approx(1.8)
    assert low.loc["A", "AVG"] == pytest.approx(1.8)
    assert high.loc["A", "AVG"] == pytest.approx(1.8)


def test_avg_interval_of_one_question_per_column_is_not_zero_width():
    """One question per column: every stratum resamples to itself, so a stratified AVG interval would
    have zero width however the questions differ. AVG then resamples all questions together: an
    interval with width that holds the estimate, while each one-question cell has none; the paired
    difference does the same."""
    columns = ["MT", "Trans", "Sum", "QA", "M/R", "RAG"]
    taus = [1.0, 1.2, 1.0, 1.6, 1.1, 1.0]
    results = frame(
        {
            "A": {c: [t] for c, t in zip(columns, taus)},
            "B": {c: [t + d] for c, t, d in zip(columns, taus, [0.0, 0.3, 0.0, 0.0, 0.1, 0.0])},
        }
    )
    tau, low, high = T.tau_table(results, 30, n_boot=500)
    assert low.loc["A", "AVG"] < tau.loc["A", "AVG"] < high.loc["A", "AVG"]
    assert low.loc["A", columns].isna().all()
    paired = T.paired_differences(results, 30, baseline="A", n_boot=500).set_index("method")
    assert paired.loc["B", "low"] < paired.loc["B", "diff"] < paired.loc["B", "high"]


def test_tau_table_interval_shrinks_as_questions_are_added():
    taus = {"MT": [1.0, 2.0, 3.5, 4.0], "QA": [1.5, 2.5, 3.0, 5.0]}
    few = frame({"A": taus})
    many = frame({"A": {col: values * 4 for col, values in taus.items()}})  # the same values, 4x the questions
    _, low_few, high_few = T.tau_table(few, 30, n_boot=2000)
    tau_many, low_many, high_many = T.tau_table(many, 30, n_boot=2000)
    assert tau_many.loc["A", "AVG"] == pytest.approx(22.5 / 8)
    for col in ("MT", "QA", "AVG"):
        assert width(low_many, high_many, "A", col) < 0.75 * width(low_few, high_few, "A", col)


def test_tau_table_is_deterministic_for_a_seed():
    rng = np.random.default_rng(1)
    results = frame({"A": {"MT": rng.uniform(1, 4, 10), "Sum": rng.uniform(1, 4, 10)}})
    first = T.tau_table(results, 30, seed=3, n_boot=300)
    again = T.tau_table(results, 30, seed=3, n_boot=300)
    other = T.tau_table(results, 30, seed=4, n_boot=300)
    for a, b in zip(first, again):
        pd.testing.assert_frame_equal(a, b)
    pd.testing.assert_frame_equal(first[0], other[0])  # the estimate does not depend on the seed
    assert not (first[1].equals(other[1]) and first[2].equals(other[2]))


def test_resample_draws_within_each_column():
    results = frame({"A": {"MT": [1, 2, 3], "QA": [4, 5], "RAG": [6, 7, 8, 9]}})
    draws = T._resample(results, 50, seed=0)
    assert set(draws) == {"MT", "QA", "RAG", T.AVG}
    rows = {col: set(np.flatnonzero(results["column"] == col)) for col in ("MT", "QA", "RAG")}
    for col, members in rows.items():
        assert draws[col].shape == (50, len(members))
        assert set(np.unique(draws[col])) <= members
    assert draws[T.AVG].shape == (50, 9)
    columns = results["column"].to_numpy()[draws[T.AVG]]
    for col, members in rows.items():
        assert ((columns == col).sum(axis=1) == len(members)).all()  # every AVG draw keeps the column sizes
    again = T._resample(results, 50, seed=0)
    assert all(np.array_equal(draws[k], again[k]) for k in draws)


# ---------------------------------------------------------------- formatted


def test_formatted_bolds_exactly_the_best_of_each_column():
    idx, cols = ["A", "B", "C"], ["MT", "AVG"]
    tau = pd.DataFrame([[2.0, 3.0], [2.5, 1.0], [1.0, 2.0]], index=idx, columns=cols)
    low, high = tau - 0.25, tau + 0.125
    out = T.formatted(tau, low, high)
    assert out.loc["B", "MT"] == "**2.50 [2.25, 2.62]**"
    assert out.loc["A", "AVG"] == "**3.00 [2.75, 3.12]**"
    assert out.loc["A", "MT"] == "2.00 [1.75, 2.12]"
    bold = out.apply(lambda s: s.str.startswith("**"))
    assert bold.sum().to_dict() == {"MT": 1, "AVG": 1}
    assert bold.loc["B", "MT"] and bold.loc["A", "AVG"]
    for kwargs in ({"bold_best": False}, {"markdown": False}):
        plain = T.formatted(tau, low, high, **kwargs)
        assert not plain.apply(lambda s: s.str.contains(r"\*")).to_numpy().any()
        assert plain.loc["B", "MT"] == "2.50 [2.25, 2.62]"


# ---------------------------------------------------------------- paired_differences


def correlated_results(n=40, seed=0):
    """B = A + 0.1 + small noise, A spread widely: strongly correlated per question. C is below A
    on every question, D above (every tau >= 1, as tau = mean(accepted + 1) always is)."""
    rng = np.random.default_rng(seed)
    a = {"MT": rng.uniform(1.5, 4, n // 2), "QA": rng.uniform(1.5, 4, n - n // 2)}
    b = {c: v + 0.1 + rng.normal(0, 0.01, len(v)) for c, v in a.items()}
    c = {col: v - rng.uniform(0.05, 0.5, len(v)) for col, v in a.items()}
    d = {col: v + rng.uniform(0.05, 0.5, len(v)) for col, v in a.items()}
    return frame({"A": a, "B": b, "C": c, "D": d}), a, b


def test_paired_difference_is_the_mean_per_question_difference():
    results, a, b = correlated_results()
    diffs = T.paired_differences(results, 30, "A", n_boot=500).set_index("method")
    assert list(diffs.index) == ["B", "C", "D"]  # the baseline has no row
    expected = np.mean(np.concatenate([b["MT"] - a["MT"], b["QA"] - a["QA"]]))
    assert diffs.loc["B", "diff"] == pytest.approx(expected)
    assert diffs.loc["B", "questions"] == 40
    assert (diffs["nodes"] == 30).all()
    assert (diffs["low"] <= diffs["diff"]).all() and (diffs["diff"] <= diffs["high"]).all()


def test_paired_interval_is_narrower_than_independent_intervals():
    results, _, _ = correlated_results()
    tau, low, high = T.tau_table(results, 30, n_boot=1000)
    row = T.paired_differences(results, 30, "A", n_boot=1000).set_index("method").loc["B"]
    independent = math.hypot(width(low, high, "A"), width(low, high, "B"))
    assert row["diff"] == pytest.approx(tau.loc["B", "AVG"] - tau.loc["A", "AVG"])
    assert row["high"] - row["low"] < 0.1 * independent
    assert row["low"] > 0.09 and row["high"] < 0.11


def test_paired_share_ahead_is_one_when_better_on_every_question_and_zero_when_worse():
    results, _, _ = correlated_results()
    diffs = T.paired_differences(results, 30, "A", n_boot=300).set_index("method")
    assert diffs.loc["D", "P(ahead)"] == 1.0
    assert diffs.loc["C", "P(ahead)"] == 0.0


def test_paired_bootstrap_is_stratified_by_column():
    """Differences +1 on the 3 MT questions and -1 on the 2 QA ones: stratified, every draw's mean is
    (3 - 2) / 5 = 0.2; unstratified, draws with more QA questions would go down to -1."""
    results = frame({"base": {"MT": [1.0, 2.0, 3.0], "QA": [5.0, 6.0]}, "X": {"MT": [2.0, 3.0, 4.0], "QA": [4.0, 5.0]}})
    row = T.paired_differences(results, 30, "base", n_boot=500).iloc[0]
    assert row["diff"] == pytest.approx(0.2)
    assert row["low"] == pytest.approx(0.2) and row["high"] == pytest.approx(0.2)
    assert row["P(ahead)"] == 1.0


def test_paired_differences_use_only_questions_every_method_answered():
    results = frame({"base": {"MT": [1.0, 2.0, 3.0]}, "X": {"MT": [2.0, 2.0, 5.0]}})
    results = results[~((results.method == "base") & (results.question_id == 2))]  # base lacks question 2
    row = T.paired_differences(results, 30, "base", n_boot=100).iloc[0]
    assert row["questions"] == 2
    assert row["diff"] == pytest.approx(0.5)  # (1 + 0) / 2, not counting question 2's +2


def test_paired_differences_missing_baseline_raises():
    results, _, _ = correlated_results()
    with pytest.raises(ValueError, match="EAGLE3"):
        T.paired_differences(results, 30)
    with pytest.raises(ValueError, match="'A'"):
        T.paired_differences(results, 60, "A")  # no results at that tree size


# ---------------------------------------------------------------- seed_spread, rank_correlation, summary


def test_seed_spread_keeps_reseeded_methods_and_their_range():
    results = pd.concat(
        [
            frame({"A": {"MT": [2.0, 2.0], "QA": [2.0]}}, seed=0),
            frame({"A": {"MT": [2.0, 3.0], "QA": [2.5]}}, seed=1),  # AVG 2.5
            frame({"A": {"MT": [1.0, 2.0], "QA": [2.4]}}, seed=2),  # AVG 1.8
            frame({"B": {"MT": [5.0, 5.0], "QA": [5.0]}}, seed=0),  # one seed only: dropped
            frame({"C": {"MT": [1.0, 1.0], "QA": [1.0]}}, seed=0),
            frame({"C": {"MT": [4.0, 4.0], "QA": [4.0]}}, seed=2),
            frame({"A": {"MT": [90.0, 90.0], "QA": [90.0]}}, seed=3, nodes=60),  # another tree size
        ],
        ignore_index=True,
    )
    spread = T.seed_spread(results, 30)
    assert list(spread.index) == ["A", "C"]
    assert list(spread.columns) == ["seed 0", "seed 1", "seed 2", "range"]
    assert spread.loc["A", ["seed 0", "seed 1", "seed 2"]].tolist() == pytest.approx([2.0, 2.5, 1.8])
    assert spread.loc["A", "range"] == pytest.approx(0.7)
    assert np.isnan(spread.loc["C", "seed 1"])
    assert spread.loc["C", "range"] == pytest.approx(3.0)


def test_rank_correlation_hand_values_with_ties():
    assert T.rank_correlation([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(0.8)  # 1 - 6 * 2 / (4 * 15)
    assert T.rank_correlation([1, 2, 3, 4], [40, 30, 20, 10]) == pytest.approx(-1.0)
    # ranks (1, 2.5, 2.5, 4) against (1, 2, 3, 4): 4.5 / sqrt(4.5 * 5)
    assert T.rank_correlation([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(4.5 / math.sqrt(22.5))


def test_rank_correlation_matches_scipy():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(2)
    for _ in range(5):
        x = rng.integers(0, 5, 15).astype(float)  # many ties
        y = x + rng.integers(-2, 3, 15)
        assert T.rank_correlation(x, y) == pytest.approx(stats.spearmanr(x, y).statistic, abs=1e-12)


def test_summary_rows():
    results, _, _ = correlated_results()
    results["method"] = results["method"].replace({"A": "EAGLE3"})
    methods = pd.DataFrame({"method": ["EAGLE3", "B", "C"], "entropy": [1.5, 2.5, 0.5]})
    out = T.summary(results, methods, 30, n_boot=300).set_index("method")
    tau, low, high = T.tau_table(results, 30, n_boot=300)
    diffs = T.paired_differences(results, 30, n_boot=300).set_index("method")
    assert list(out.index) == ["EAGLE3", "B", "C", "D"]
    assert out.loc["EAGLE3", ["minus EAGLE3", "diff low", "diff high"]].tolist() == [0.0, 0.0, 0.0]
    for m in ("B", "C", "D"):
        assert out.loc[m, "minus EAGLE3"] == pytest.approx(diffs.loc[m, "diff"])
        assert out.loc[m, "diff low"] == pytest.approx(diffs.loc[m, "low"])
        assert out.loc[m, "diff high"] == pytest.approx(diffs.loc[m, "high"])
    assert out["tau"].tolist() == pytest.approx(tau[T.AVG].tolist())
    assert out["low"].tolist() == pytest.approx(low[T.AVG].tolist())
    assert out.loc["B", "entropy"] == 2.5 and out.loc["EAGLE3", "entropy"] == 1.5
    assert np.isnan(out.loc["D", "entropy"])  # not among `methods`
    assert out.loc["B", "minus EAGLE3"] == pytest.approx(0.1, abs=0.01)


# ---------------------------------------------------------------- what the tables refuse to estimate


def test_a_cell_of_one_question_has_no_interval():
    results = frame({"A": {"MT": [2.5], "QA": [1.0, 2.0, 3.0]}, "B": {"MT": [3.0], "QA": [1.5, 2.5, 1.0]}})
    tau, low, high = T.tau_table(results, 30, n_boot=200)
    assert tau.loc["A", "MT"] == pytest.approx(2.5)  # the estimate stays, its interval does not
    assert np.isnan(low.loc["A", "MT"]) and np.isnan(high.loc["A", "MT"])
    assert low.loc["A", "QA"] < high.loc["A", "QA"] and low.loc["A", T.AVG] < high.loc["A", T.AVG]
    out = T.formatted(tau, low, high)
    assert out.loc["A", "MT"] == "2.50 [no interval: 1 question]"
    assert out.loc["B", "MT"] == "**3.00 [no interval: 1 question]**"
    assert out.loc["A", "QA"].startswith("**2.00 [") and "no interval" not in out.loc["A", "AVG"]
    lone = frame({"A": {"MT": [2.0]}})  # one question in all: AVG has no interval either
    tau, low, high = T.tau_table(lone, 30, n_boot=200)
    assert np.isnan(low.loc["A", T.AVG]) and np.isnan(high.loc["A", T.AVG])
    assert T.formatted(tau, low, high, markdown=False).loc["A", T.AVG] == "2.00 [no interval: 1 question]"
    assert T.MIN_QUESTIONS >= 2


def test_a_paired_difference_of_one_question_has_no_interval():
    results = frame({"base": {"MT": [1.0, 2.0]}, "X": {"MT": [2.0, 3.0]}})
    results = results[~((results.method == "X") & (results.question_id == 1))]  # X shares one question
    row = T.paired_differences(results, 30, "base", n_boot=200).iloc[0]
    assert row["questions"] == 1 and row["diff"] == pytest.approx(1.0)
    assert np.isnan(row["low"]) and np.isnan(row["high"]) and np.isnan(row["P(ahead)"])


@pytest.mark.parametrize("n_boot", [1, 10, 99, 0, -5])
def test_too_few_resamples_are_refused(n_boot):
    results, _, _ = correlated_results()
    methods = pd.DataFrame({"method": ["A"], "entropy": [1.0]})
    with pytest.raises(ValueError, match="n_boot"):
        T.tau_table(results, 30, n_boot=n_boot)
    with pytest.raises(ValueError, match="n_boot"):
        T.paired_differences(results, 30, "A", n_boot=n_boot)
    with pytest.raises(ValueError, match="n_boot"):
        T.summary(results, methods, 30, n_boot=n_boot, baseline="A")


@pytest.mark.parametrize("n_boot", [200.0, 250.5, True, "200", None])
def test_non_integer_resample_counts_are_refused(n_boot):
    results, _, _ = correlated_results()
    with pytest.raises(ValueError, match="n_boot"):
        T.tau_table(results, 30, n_boot=n_boot)
    with pytest.raises(ValueError, match="n_boot"):
        T.paired_differences(results, 30, "A", n_boot=n_boot)


def test_tau_table_accepts_a_numpy_integer_n_boot():
    results, _, _ = correlated_results()
    first = T.tau_table(results, 30, n_boot=np.int64(T.MIN_BOOT))
    again = T.tau_table(results, 30, n_boot=T.MIN_BOOT)
    for a, b in zip(first, again):
        pd.testing.assert_frame_equal(a, b)


def test_an_unrelated_method_with_fewer_questions_changes_no_other_row():
    results, _, _ = correlated_results()
    few = frame({"E": {"MT": [2.0, 3.0, 1.5], "QA": [2.5, 1.0]}})  # 5 of the 40 questions
    few["question_id"] = [0, 1, 2, 20, 21]  # ids of MT and QA questions of the others
    more = pd.concat([results, few], ignore_index=True)
    before = T.paired_differences(results, 30, "A", n_boot=300).set_index("method")
    after = T.paired_differences(more, 30, "A", n_boot=300).set_index("method")
    assert list(after.index) == ["B", "C", "D", "E"]
    pd.testing.assert_frame_equal(after.loc[["B", "C", "D"]], before)
    assert (after.loc[["B", "C", "D"], "questions"] == 40).all() and after.loc["E", "questions"] == 5
    shared = results[(results.method == "A") & results.question_id.isin(few.question_id)]
    assert after.loc["E", "diff"] == pytest.approx(few.tau.mean() - shared.tau.mean())
    tau_before, low_before, high_before = T.tau_table(results, 30, n_boot=300)
    tau_after, low_after, high_after = T.tau_table(more, 30, n_boot=300)
    for a, b in ((tau_before, tau_after), (low_before, low_after), (high_before, high_after)):
        pd.testing.assert_frame_equal(b.loc[a.index], a)


def test_each_method_is_paired_with_the_baseline_on_the_questions_those_two_share():
    results = frame(
        {"base": {"MT": [1.0, 2.0, 3.0, 4.0]}, "X": {"MT": [2.0, 3.0, 4.0, 5.0]}, "Y": {"MT": [1.0, 1.0, 1.0, 9.0]}}
    )
    results = results[~((results.method == "Y") & (results.question_id < 2))]  # Y has questions 2, 3 only
    diffs = T.paired_differences(results, 30, "base", n_boot=200).set_index("method")
    assert diffs.loc["X", "questions"] == 4 and diffs.loc["X", "diff"] == pytest.approx(1.0)
    assert diffs.loc["Y", "questions"] == 2 and diffs.loc["Y", "diff"] == pytest.approx((-2.0 + 5.0) / 2)


def two_temperatures():
    """Both temperatures' rows in one frame, as experiment.run returns them; A trained with 2 seeds."""

    def at(temperature, a, b, a1):
        return pd.concat(
            [frame({"A": {"MT": a}, "B": {"MT": b}}), frame({"A": {"MT": a1}}, seed=1)], ignore_index=True
        ).assign(temperature=temperature)

    cold = at(0.0, [1.0, 2.0, 3.0], [2.0, 2.0, 4.0], [1.0, 1.0, 2.0])
    hot = at(1.0, [5.0, 5.0, 6.0], [1.0, 1.5, 2.0], [3.0, 4.0, 4.0])
    return pd.concat([cold, hot], ignore_index=True), cold, hot


def as_tuple(x):
    return x if isinstance(x, tuple) else (x,)


def test_several_temperatures_must_be_chosen_between():
    both, cold, hot = two_temperatures()
    methods = pd.DataFrame({"method": ["A", "B"], "entropy": [1.0, 2.0]})
    calls = {
        "tau_table": lambda r, **k: T.tau_table(r, 30, n_boot=200, **k),
        "paired_differences": lambda r, **k: T.paired_differences(r, 30, "A", n_boot=200, **k),
        "seed_spread": lambda r, **k: T.seed_spread(r, 30, **k),
        "summary": lambda r, **k: T.summary(r, methods, 30, n_boot=200, baseline="A", **k),
    }
    for name, call in calls.items():
        with pytest.raises(ValueError, match=r"temperatures \[0\.0, 1\.0\]"):
            call(both)
        for temperature, part in ((0.0, cold), (1, hot)):
            for a, b in zip(as_tuple(call(both, temperature=temperature)), as_tuple(call(part))):
                pd.testing.assert_frame_equal(a, b, obj=name)  # the same as on the filtered frame
        with pytest.raises(ValueError, match=r"0\.5.*\[0\.0, 1\.0\]"):
            call(both, temperature=0.5)
    tau, _, _ = T.tau_table(both, 30, n_boot=200, temperature=1.0)
    assert tau.loc["A", "MT"] == pytest.approx(16 / 3)  # not averaged with T = 0's 2.0
    assert T.seed_spread(both, 30, temperature=1.0).loc["A", "range"] == pytest.approx(16 / 3 - 11 / 3)


def test_a_temperature_asked_of_results_without_one_is_refused():
    results = frame({"A": {"MT": [1.0, 2.0, 3.0]}})  # no temperature column: one, unrecorded
    T.tau_table(results, 30, n_boot=200)
    for temperature in (0, 1.0):
        with pytest.raises(ValueError, match="temperature"):
            T.tau_table(results, 30, n_boot=200, temperature=temperature)


def test_a_duplicated_question_is_refused():
    results = frame({"A": {"MT": [1.0, 2.0, 3.0]}, "B": {"MT": [2.0, 2.0, 4.0]}})
    twice = pd.concat([results, results.iloc[[4]]], ignore_index=True)  # B's question 1 again
    for call in (
        lambda r: T.tau_table(r, 30, n_boot=200),
        lambda r: T.paired_differences(r, 30, "A", n_boot=200),
        lambda r: T.seed_spread(r, 30),
    ):
        with pytest.raises(ValueError, match=r"'B'.*question 1"):
            call(twice)
    # the same question at another tree size, seed or temperature is no duplicate
    T.tau_table(pd.concat([results, results.assign(nodes=60), results.assign(seed=1)]), 30, n_boot=200)


def test_a_question_labelled_with_two_columns_is_refused():
    results = frame({"A": {"MT": [1.0, 2.0], "QA": [3.0, 3.0]}, "B": {"MT": [2.0, 2.0], "QA": [4.0, 4.0]}})
    results.loc[(results.method == "B") & (results.question_id == 0), "column"] = "QA"
    for call in (lambda r: T.tau_table(r, 30, n_boot=200), lambda r: T.paired_differences(r, 30, "A", n_boot=200)):
        with pytest.raises(ValueError, match=r"question 0.*'MT'.*'QA'"):
            call(results)


def test_a_method_without_a_finite_tau_is_refused():
    results = frame({"A": {"MT": [1.0, 2.0, 3.0]}, "B": {"MT": [2.0, 2.0, 4.0]}, "C": {"MT": [2.0, 3.0, 3.0]}})
    results.loc[results.method == "B", "tau"] = np.nan
    methods = pd.DataFrame({"method": ["A"], "entropy": [1.0]})
    for call in (
        lambda r: T.tau_table(r, 30, n_boot=200),
        lambda r: T.paired_differences(r, 30, "A", n_boot=200),
        lambda r: T.seed_spread(r, 30),
        lambda r: T.summary(r, methods, 30, n_boot=200, baseline="A"),
    ):
        with pytest.raises(ValueError, match=r"'B'.*no finite tau"):
            call(results)


def test_a_question_without_a_round_is_dropped_for_that_method_only():
    results = frame({"A": {"MT": [1.0, 2.0, 3.0]}, "B": {"MT": [2.0, 2.0, 4.0]}})
    results.loc[(results.method == "B") & (results.question_id == 2), ["tau", "rounds"]] = [np.nan, 0]
    tau, _, _ = T.tau_table(results, 30, n_boot=200)
    assert tau.loc["A", "MT"] == pytest.approx(2.0) and tau.loc["B", "MT"] == pytest.approx(2.0)
    row = T.paired_differences(results, 30, "A", n_boot=200).iloc[0]
    assert row["questions"] == 2 and row["diff"] == pytest.approx(0.5)


@pytest.mark.parametrize("bad", [0.5, 0.0, -1.0, np.inf, -np.inf])
def test_a_tau_below_one_or_infinite_is_refused(bad):
    results = frame({"A": {"MT": [1.0, 2.0, 3.0]}, "B": {"MT": [2.0, 2.0, 4.0]}})
    results.loc[(results.method == "B") & (results.question_id == 2), "tau"] = bad
    for call in (
        lambda r: T.tau_table(r, 30, n_boot=200),
        lambda r: T.paired_differences(r, 30, "A", n_boot=200),
        lambda r: T.seed_spread(r, 30),
    ):
        with pytest.raises(ValueError, match=r"'B'.*question 2"):
            call(results)
    results.loc[(results.method == "B") & (results.question_id == 2), "tau"] = 1.0  # no draft token accepted
    T.tau_table(results, 30, n_boot=200)


TABLE_CALLS = (
    lambda r, n: T.tau_table(r, n, n_boot=200),
    lambda r, n: T.paired_differences(r, n, "A", n_boot=200),
    lambda r, n: T.seed_spread(r, n),
)


def test_missing_columns_are_named():
    results, _, _ = correlated_results()
    for call in TABLE_CALLS:
        with pytest.raises(ValueError, match=r"'question_id', 'column'"):
            call(results.drop(columns=["question_id", "column"]), 30)


def test_an_absent_tree_size_or_training_seed_lists_those_present():
    results, _, _ = correlated_results()
    both = pd.concat([results, results.assign(nodes=12)], ignore_index=True)
    for call in TABLE_CALLS:
        with pytest.raises(ValueError, match=r"60 nodes.*\[12, 30\]"):
            call(both, 60)
    with pytest.raises(ValueError, match=r"training seed 3.*\[0\]"):
        T.tau_table(results, 30, n_boot=200, model_seed=3)


# ---------------------------------------------------------------- the written accepted-token table


def written_blocks():
    """Blocks as notebook 06 builds them: two temperatures x two sizes, a column where method B has
    no question (n/a) and one where A has a single question (no interval)."""
    rng = np.random.default_rng(5)
    blocks = {}
    for temperature in (0.0, 1.0):
        for nodes in (30, 60):
            results = frame(
                {
                    "A": {"MT": rng.uniform(1, 3, 6), "QA": rng.uniform(1, 3, 5), "RAG": [2.0]},
                    "B": {"MT": rng.uniform(1, 3, 6), "QA": rng.uniform(1, 3, 5)},
                },
                nodes=nodes,
            )
            blocks[temperature, nodes] = T.tau_table(results, nodes, n_boot=200, seed=1)
    return blocks


def old_markdown(blocks) -> str:
    """The reference Markdown: the formatted blocks, concatenated (the layout the written table keeps)."""
    from elsi_lib.study.paper.plots import markdown_table

    return markdown_table(
        pd.concat(
            [
                T.formatted(*b).rename_axis("method").reset_index().assign(temperature=t, nodes=n)
                for (t, n), b in blocks.items()
            ],
            ignore_index=True,
        )
    )


def written_long(blocks):
    return pd.concat([F.tau_long(*b, temperature=t, nodes=n) for (t, n), b in blocks.items()], ignore_index=True)


def test_tau_long_holds_each_cell_as_numbers():
    blocks = written_blocks()
    long = written_long(blocks)
    assert list(long.columns) == list(F.TAU_CSV_COLUMNS)
    assert len(long) == 4 * 2 * 4  # blocks x methods x (MT, QA, RAG, AVG)
    for col in ("temperature", "tau", "low", "high"):
        assert long[col].dtype == np.float64, col
    assert long["nodes"].dtype == np.int64 and long["best"].dtype == bool
    for (t, n), (tau, low, high) in blocks.items():
        rows = long[(long.temperature == t) & (long.nodes == n)].set_index(["method", "column"])
        for method in tau.index:
            for col in tau.columns:
                got = rows.loc[(method, col)]
                for name, frame_ in (("tau", tau), ("low", low), ("high", high)):
                    want = frame_.loc[method, col]
                    assert (np.isnan(want) and np.isnan(got[name])) or got[name] == want  # exact: no rounding
                assert got["questions"] == tau.attrs["questions"][method][col]
        bold = T.formatted(tau, low, high).apply(lambda s: s.str.startswith("**"))
        assert rows["best"].unstack().loc[tau.index, tau.columns].equals(bold)  # best is what the Markdown bolds
    a = long[(long.method == "A") & (long.column == "RAG")]
    assert (a.questions == 1).all() and a.low.isna().all() and a.tau.notna().all()
    b = long[(long.method == "B") & (long.column == "RAG")]
    assert (b.questions == 0).all() and b.tau.isna().all() and not b.best.any()


def test_tau_csv_is_numeric_and_round_trips_through_pandas(tmp_path):
    long = written_long(written_blocks())
    csv, md = F.save_tau_tables(long, "table2_accepted_tokens_x", tmp_path)
    assert (csv.name, md.name) == ("table2_accepted_tokens_x.csv", "table2_accepted_tokens_x.md")
    text = csv.read_text()
    assert "**" not in text and "[" not in text and "n/a" not in text  # no formatting in the CSV
    plain = pd.read_csv(csv)  # a pandas user's read, no options
    assert list(plain.columns) == list(F.TAU_CSV_COLUMNS)
    for col in ("temperature", "tau", "low", "high", "questions"):
        assert pd.api.types.is_numeric_dtype(plain[col]), col
    assert plain["best"].dtype == bool
    for col in ("tau", "low", "high"):  # full precision: the very same floats come back
        np.testing.assert_array_equal(plain[col].to_numpy(), long[col].to_numpy())
    pd.testing.assert_frame_equal(F.read_tau_csv(csv), long)
    assert plain.tau.between(plain.low, plain.high).sum() == plain.low.notna().sum()  # estimate inside its interval


def test_tau_markdown_is_the_formatted_table_as_before(tmp_path):
    blocks = written_blocks()
    long = written_long(blocks)
    _, md = F.save_tau_tables(long, "t", tmp_path)
    before = old_markdown(blocks)
    assert md.read_text() == before  # byte for byte the formatted blocks' Markdown
    assert F.tau_markdown(F.read_tau_csv(tmp_path / "t.csv")) == before  # and again from the CSV alone
    assert "**" in before and "[no interval: 1 question]" in before and "n/a [no questions]" in before
    assert before.splitlines()[0] == "| method | MT | QA | RAG | AVG | temperature | nodes |"
    assert "| 0.0000 | 30 |" in before  # temperature to 4 decimals, nodes an integer


def test_the_marked_best_is_bolded_where_printed_values_tie():
    """Read back at 2 decimals, two cells can tie that did not in the run: the CSV's `best` decides."""
    long = pd.DataFrame(
        {
            "method": ["A", "B"],
            "column": ["AVG", "AVG"],
            "temperature": [0.0, 0.0],
            "nodes": [30, 30],
            "tau": [1.55, 1.55],
            "low": [1.5, 1.5],
            "high": [1.61, 1.6],
            "questions": [pd.NA, pd.NA],
            "best": [False, True],
        }
    )
    out = F.tau_formatted(long)
    assert out["AVG"].tolist() == ["1.55 [1.50, 1.61]", "**1.55 [1.50, 1.60]**"]
    assert F.tau_formatted(long, markdown=False)["AVG"].tolist() == ["1.55 [1.50, 1.61]", "1.55 [1.50, 1.60]"]
    unknown = long.assign(low=np.nan, high=np.nan)  # count unknown: said so, as `formatted` does
    assert F.tau_formatted(unknown)["AVG"].iloc[0] == f"1.55 [no interval: fewer than {T.MIN_QUESTIONS} questions]"
    with pytest.raises(ValueError, match="more than once"):
        F.tau_blocks(pd.concat([long, long]))
    with pytest.raises(ValueError, match="lack the column"):
        F.tau_markdown(long.drop(columns="best"))


def test_committed_accepted_token_tables_are_numbers_that_render_the_committed_markdown():
    from elsi_lib.common.cachefiles import REPO_ROOT
    from elsi_lib.common.hardware import NUMERIC_COLUMNS

    paths = sorted((REPO_ROOT / "data" / "results").glob("table*_accepted_tokens_*.csv"))
    assert len(paths) >= 3
    for path in paths:
        plain = pd.read_csv(path)
        assert list(plain.columns) == [*F.TAU_CSV_COLUMNS, *NUMERIC_COLUMNS], path.name
        for col in ("temperature", "nodes", "tau", "low", "high"):
            assert pd.api.types.is_numeric_dtype(plain[col]), (path.name, col)
        assert (plain.low <= plain.tau).all() and (plain.tau <= plain.high).all()
        best = plain.groupby(["temperature", "nodes", "column"]).best.sum()
        assert (best >= 1).all()  # every column of every block has its bold cell
        assert F.tau_markdown(F.read_tau_csv(path)) == path.with_suffix(".md").read_text()


# The tables notebooks 06 and 07 write with the run's numeric settings (`numeric=run.numeric`), and the
# protocol whose drafts' records state the settings of each (its name's prefix, but for the learning
# curve, which notebook 07's strong protocol draws).
NUMERIC_KINDS = (
    "accepted_tokens",
    "paired",
    "seed_spread",
    "step_accuracy",
    "loop_vs_replay",
    "lever_lm_head",
    "beam_overlap",
    "learning_curve",
)
PROTOCOL_OF = {"table2_learning_curve": "table2_strong"}


def committed_numeric_tables():
    from elsi_lib.common.cachefiles import REPO_ROOT

    results = REPO_ROOT / "data" / "results"
    for path in sorted(results.glob("table*.csv")):
        for kind in NUMERIC_KINDS:
            head, sep, _ = path.stem.partition(f"_{kind}_")
            if sep:
                yield path, PROTOCOL_OF.get(f"{head}_{kind}", head)


def test_every_committed_draft_table_states_its_numeric_settings_and_they_are_its_records():
    """Each table of drafts' numbers says how they were computed (bf16 or float32 matmuls, the target
    forward behind the features), one value per table, in the CSV and in its Markdown; where its
    protocol's drafts have records, the table states what they state."""
    import json

    from elsi_lib.common.cachefiles import REPO_ROOT
    from elsi_lib.common.hardware import NUMERIC_COLUMNS

    found = list(committed_numeric_tables())
    assert len(found) >= 17 and {p for _, p in found} >= {"table2", "table3", "table2_strong"}
    checked = 0
    for path, protocol in found:
        frame = pd.read_csv(path, keep_default_na=False)
        assert set(NUMERIC_COLUMNS) <= set(frame.columns), path.name
        if frame.empty:  # a table with no rows (one seed's spread) states nothing
            continue
        stated = F.stated_numeric(frame)
        assert set(stated) == set(NUMERIC_COLUMNS), path.name
        assert stated["draft matmuls"] in ("bf16", "float32"), path.name
        assert stated["target features"] in {
            f"{f} ({m} forward)" for f in ("store", "live") for m in ("bf16", "float32")
        }
        md = path.with_suffix(".md")
        if md.exists():
            text = md.read_text()
            assert all(v in text for v in stated.values()), md.name
        records = sorted((REPO_ROOT / "data" / "drafts" / protocol).glob("*.json"))
        for record in records:
            assert json.loads(record.read_text())["numeric"] == stated, (path.name, record.name)
            checked += 1
    assert checked > 0


def test_a_table_stating_two_numeric_settings_is_refused(tmp_path):
    long = written_long(written_blocks())
    csv, _ = F.save_tau_tables(long, "t", tmp_path, numeric={"draft matmuls": "bf16", "target features": "live"})
    mixed = F.read_tau_csv(csv)
    mixed.loc[mixed.index[0], "draft matmuls"] = "float32"
    with pytest.raises(ValueError, match=r"'draft matmuls' holds \['bf16', 'float32'\]"):
        F.tau_markdown(mixed)
    assert F.tau_markdown(F.read_tau_csv(csv)) == (tmp_path / "t.md").read_text()
    assert (tmp_path / "t.md").read_text().endswith("\nNumeric settings: draft matmuls: bf16; target features: live.\n")


# ---------------------------------------------------------------- what the tables refuse (issue 34)


@pytest.mark.parametrize("label", ["Misc", "mt", np.nan])
def test_a_question_outside_the_papers_columns_is_refused(label):
    """A question outside the paper's columns is refused: it would count in AVG but in no column of the
    table (and, unlabelled, in AVG's estimate but not its stratified resamples)."""
    results = frame({"A": {"MT": [1.0, 2.0, 3.0], "QA": [2.0, 2.0]}, "B": {"MT": [2.0, 2.0, 4.0], "QA": [1.5, 3.0]}})
    results.loc[results.question_id.isin([3, 4]), "column"] = label
    for call in TABLE_CALLS:
        with pytest.raises(ValueError, match=rf"{label!r}.*questions \[3, 4\]"):
            call(results, 30)


def test_rank_correlation_refuses_lengths_that_differ():
    """Lengths that differ are refused naming both counts, not with numpy's 'all the input array
    dimensions ... must match exactly'."""
    with pytest.raises(ValueError, match=r"3 x values.*4 y values"):
        T.rank_correlation([1, 2, 3], [1, 2, 3, 4])


@pytest.mark.parametrize("n", [0, 1, 2])
def test_rank_correlation_refuses_too_few_values(n):
    """Fewer than 3 values are refused: they give NaN with a numpy warning (0, 1 values) or a meaningless
    +-1 (2 values)."""
    with pytest.raises(ValueError, match=rf"{n} values.*at least 3"):
        T.rank_correlation(list(range(n)), list(range(n)))


@pytest.mark.parametrize(
    "change, reason",
    [
        (lambda rows: rows[1].update(low=rows[1]["high"], high=rows[1]["low"]), "is not inside its interval"),
        (lambda rows: rows[1].update(tau="45"), r"tau = '45', not a number in \[1, 31\]"),
        (lambda rows: rows[1].update(tau="0.2"), r"tau = '0.2'"),
        (lambda rows: rows[1].update(tau="inf"), r"tau = 'inf'"),
        (lambda rows: rows[1].update(tau="1.7x"), r"row 3: tau = '1.7x', not a number"),
        (lambda rows: rows[1].update(nodes="30.7"), r"nodes = '30.7', not an integer"),
        (lambda rows: rows[1].update(nodes=""), "nodes is empty"),
        (lambda rows: rows[1].update(temperature="-1"), "temperature = '-1'"),
        (lambda rows: rows[1].update(questions="-4"), "questions = '-4'"),
        (lambda rows: rows[1].update(best=""), "best = '', not True or False"),
        (lambda rows: rows[1].update(best="no"), "best = 'no'"),
        (lambda rows: rows[1].update(method=rows[1]["method"] + " "), "method = .*, not a name"),
        (lambda rows: rows.append(dict(rows[1], tau="1.45")), "is also row 3"),
        (lambda rows: rows[1].update(tau="1_5"), "tau = '1_5', not a number"),
        (lambda rows: rows[1].update(method="ELSI | m=1"), "method = .*, not a name"),
        (lambda rows: rows[3].update(questions="999"), "AVG counts 999 questions, its columns"),
        (lambda rows: rows[1].update(temperature="50"), r"temperature = '50', not a number in \[0, 2\]"),
        (lambda rows: rows[1].update(temperature="-0"), "a negative zero"),
        (lambda rows: rows[3].update(tau="9.0", low="", high=""), "AVG 9.0 is not its columns' mean"),
        (lambda rows: rows[1].update(column="Foo"), "column = 'Foo', not one of the paper's"),
        (lambda rows: rows[1].update(questions="0"), r"tau '1.5' over 0 questions"),
    ],
)
def test_an_accepted_token_csv_with_an_impossible_cell_is_refused_naming_the_row(tmp_path, change, reason):
    """Each impossible cell is refused, naming the row: otherwise swapped ends, tau above what a tree allows,
    an empty or 'no' best read as True, a truncated node count, a method with a trailing space as a second
    method are all formatted without a word."""
    import csv

    csv_path, _ = F.save_tau_tables(written_long(written_blocks()), "t", tmp_path)
    with open(csv_path) as handle:
        rows = list(csv.DictReader(handle))
    rows[1].update(tau="1.5", low="1.4", high="1.6", best="True")  # a cell with an interval
    change(rows)
    with open(csv_path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    with pytest.raises(ValueError, match=reason) as caught:
        F.read_tau_csv(csv_path)
    assert str(csv_path) in str(caught.value)


def test_a_best_mark_on_a_lower_tau_and_an_empty_file_are_refused(tmp_path):
    csv_path, _ = F.save_tau_tables(written_long(written_blocks()), "t", tmp_path)
    plain = pd.read_csv(csv_path)
    block = plain[(plain.column == "MT") & (plain.temperature == 0) & (plain.nodes == 30)]
    low = block.tau.idxmin()
    plain.loc[block.index, "best"] = plain.loc[block.index].index == low  # the mark moved to the lower tau
    plain.to_csv(csv_path, index=False)
    with pytest.raises(ValueError, match=rf"row {low + 2}: best = True but its tau .* below its column's highest"):
        F.read_tau_csv(csv_path)
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(ValueError, match="empty.csv: not an accepted-token CSV"):
        F.read_tau_csv(tmp_path / "empty.csv")


def test_an_avg_outside_its_columns_is_refused_where_no_counts_are_given(tmp_path):
    """Table 2 gives no question counts; an AVG outside its columns' range is no mean of them and is
    refused: EAGLE2's AVG set to 1.00 (its columns 1.22-2.32) would otherwise be printed as its AVG."""
    from elsi_lib.common.cachefiles import REPO_ROOT

    source = REPO_ROOT / "data" / "results" / "table2_accepted_tokens_smollm2-135m.csv"
    frame = pd.read_csv(source, dtype=str, keep_default_na=False)
    avg = (frame.method == "EAGLE2") & (frame.column == "AVG") & (frame.temperature == "0.0") & (frame.nodes == "60")
    assert avg.sum() == 1 and (frame.loc[avg, "questions"] == "").all()
    frame.loc[avg, ["tau", "low", "high", "best"]] = ["1.0", "", "", "False"]
    path = tmp_path / source.name
    frame.to_csv(path, index=False)
    with pytest.raises(ValueError, match=r"EAGLE2 at T = 0, 60 nodes: AVG 1.0 lies outside its columns' range"):
        F.read_tau_csv(path)


def test_a_csv_whose_lines_do_not_fit_its_header_is_refused_naming_the_line(tmp_path):
    """A field too many (a trailing comma) would shift every cell into the next column, and a header naming
    a column twice would read as two columns: refused, naming the line."""
    csv_path, _ = F.save_tau_tables(written_long(written_blocks()), "t", tmp_path)
    lines = csv_path.read_text().splitlines()
    csv_path.write_text("\n".join([lines[0], *(line + "," for line in lines[1:])]) + "\n")
    with pytest.raises(ValueError, match=r"row 2: \d+ fields, its header \d+"):
        F.read_tau_csv(csv_path)
    csv_path.write_text("\n".join([lines[0].replace("low", "tau", 1), *lines[1:]]) + "\n")
    with pytest.raises(ValueError, match="a column named twice"):
        F.read_tau_csv(csv_path)


def test_a_row_missing_from_a_block_is_refused_not_shown_as_no_questions(tmp_path):
    """Every method of a block has every column (a cell without questions is written as one): a row lost
    from the file would otherwise print as "n/a [no questions]" and move its column to the table's end."""
    from elsi_lib.common.cachefiles import REPO_ROOT

    source = REPO_ROOT / "data" / "results" / "table2_accepted_tokens_smollm2-135m.csv"
    lines = source.read_text().splitlines()
    path = tmp_path / source.name
    path.write_text("\n".join(line for line in lines if not line.startswith("EAGLE2,MT,0.0,30,")) + "\n")
    with pytest.raises(ValueError, match=r"EAGLE2 at T = 0, 30 nodes has no row for \['MT'\]"):
        F.read_tau_csv(path)


@pytest.mark.parametrize(
    "drop, reason",
    [
        (lambda line: line.startswith("EAGLE3,") and ",1.0,60," in line, r"T = 1, 60 nodes has no method \['EAGLE3'\]"),
        (lambda line: ",RAG,1.0,60," in line, r"T = 1, 60 nodes has no column \['RAG'\]"),
    ],
)
def test_a_block_without_a_method_or_column_the_others_have_is_refused(tmp_path, drop, reason):
    """A table is a whole grid: a block that lost every row of its baseline, or one column in every method
    (no method of the block then lacks a column another has), is refused, never shown as a smaller block."""
    from elsi_lib.common.cachefiles import REPO_ROOT

    source = REPO_ROOT / "data" / "results" / "table2_accepted_tokens_smollm2-135m.csv"
    lines = source.read_text().splitlines()
    path = tmp_path / source.name
    kept = [lines[0], *(line for line in lines[1:] if not drop(line))]
    assert len(kept) < len(lines)
    path.write_text("\n".join(kept) + "\n")
    with pytest.raises(ValueError, match=reason):
        F.read_tau_csv(path)
