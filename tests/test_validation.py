"""Rank correlations of selection criteria with trained drafts (elsi_lib.study.experiments.criteria_vs_drafts): Spearman
against scipy, the sign convention of each criterion, intervals that hold their estimate, and the
refusals."""

import numpy as np
import pandas as pd
import pytest
from scipy.stats import spearmanr

from elsi_lib.study.experiments import rank_stats
from elsi_lib.study.experiments import criteria_vs_drafts as V
from elsi_lib.selection import probe as P


def drafts_rows(taus, entropies, steps, *, questions=30, protocol="p", prompts=100, noise=0.05, seed=0):
    """Per-question rows of len(taus) drafts: draft i's tau on each question is taus[i] plus seeded noise."""
    rng = np.random.default_rng(seed)
    rows = []
    for i, (tau, h, s) in enumerate(zip(taus, entropies, steps)):
        for q in range(questions):
            rows.append(
                {
                    "protocol": protocol,
                    "prompts": prompts,
                    "id": f"m{i}",
                    "method": "EAGLE3" if i == 0 else f"M{i}",
                    "seed": 0,
                    "layers": V.layers_text((i, i + 1)),
                    "set entropy": h,
                    "step 1": s,
                    "temperature": 0.0,
                    "nodes": 60,
                    "question_id": q,
                    "column": "MT" if q % 2 else "QA",
                    "tau": tau + noise * rng.standard_normal(),
                }
            )
    return pd.DataFrame(rows)


TAU = "tau minus EAGLE3"


def correlations(rows, scores=None, n_boot=200, temperature=0.0):
    drafts = V.draft_table(rows, temperature=temperature, nodes=60)
    drafts = drafts if scores is None else drafts.merge(scores, on="layers", how="left")
    return V.rank_correlations(drafts, rows, temperature=temperature, nodes=60, n_boot=n_boot)


def test_spearman_rows_matches_scipy_with_ties():
    rng = np.random.default_rng(1)
    x = rng.integers(0, 4, size=(20, 9)).astype(float)  # many ties
    y = rng.normal(size=(20, 9))
    got = rank_stats.spearman_rows(x, y)
    for row, value in zip(range(20), got):
        expected = spearmanr(x[row], y[row]).statistic
        assert (np.isnan(value) and np.isnan(expected)) or value == pytest.approx(expected)
    assert np.isnan(rank_stats.spearman_rows(np.ones((1, 5)), y[:1, :5])[0])


def test_signs_intervals_and_a_criterion_that_predicts_nothing():
    taus = [1.2, 1.4, 1.6, 1.8, 2.0, 2.2]
    rows = drafts_rows(taus, entropies=[0.9, 0.1, 0.5, 0.3, 0.7, 0.2], steps=[0.1, 0.2, 0.3, 0.4, 0.5, 0.6])
    scores = pd.DataFrame(
        {"layers": [V.layers_text((i, i + 1)) for i in range(6)], "probe error": [0.9, 0.8, 0.7, 0.6, 0.5, 0.4]}
    )  # lower error, better draft
    table = correlations(rows, scores, 300).set_index(["criterion", "outcome"])
    assert table.loc[("probe error", "tau minus EAGLE3"), "rho"] == pytest.approx(
        1.0
    )  # signed: a perfect predictor is +1
    assert table.loc[("probe error", "step 1"), "rho"] == pytest.approx(1.0)
    entropy = spearmanr([0.9, 0.1, 0.5, 0.3, 0.7, 0.2], taus).statistic
    assert table.loc[("set entropy", "tau minus EAGLE3"), "rho"] == pytest.approx(entropy)
    assert (table.drafts == 6).all() and (table["distinct sets"] == 6).all()
    assert table.loc[("probe error", TAU), "p (permutation)"] < 0.01  # 2 of 720 orders are this extreme
    assert table.loc[("set entropy", TAU), "p (permutation)"] > 0.2
    for _, row in table.iterrows():
        assert row["low (sets)"] <= row.rho + 1e-12 <= row["high (sets)"] + 2e-12
    assert (
        table.loc[("set entropy", "tau minus EAGLE3"), "low (sets)"]
        < 0
        < table.loc[("set entropy", "tau minus EAGLE3"), "high (sets)"]
    )
    # questions resampled with the sets: noisy per-question tau widens the interval, never for step accuracy
    # (every tau raised by 8, which moves no difference from EAGLE3, so that the noise keeps it >= 1)
    noisy = drafts_rows(
        [t + 8 for t in taus], [0.9, 0.1, 0.5, 0.3, 0.7, 0.2], [0.1, 0.2, 0.3, 0.4, 0.5, 0.6], noise=2.0
    )
    assert noisy.tau.min() >= 1
    wide = correlations(noisy, scores, 300).set_index(["criterion", "outcome"])
    assert (
        wide.loc[("probe error", "tau minus EAGLE3"), "low (questions and sets)"]
        < table.loc[("probe error", "tau minus EAGLE3"), "low (questions and sets)"]
    )
    assert np.isnan(table.loc[("probe error", "step 1"), "low (questions and sets)"])


def test_only_the_first_seed_and_one_row_per_point():
    rows = drafts_rows([1.2, 1.4, 1.6], [0.1, 0.2, 0.3], [0.1, 0.2, 0.3])
    reseed = rows[rows.id == "m0"].assign(seed=1, tau=9.0)  # a second seed of m0 must not count
    later = drafts_rows([1.6, 1.4, 1.2], [0.1, 0.2, 0.3], [0.3, 0.2, 0.1], prompts=300)
    table = correlations(pd.concat([rows, reseed, later]))
    by_point = table[table.outcome == TAU].set_index("prompts").rho
    assert by_point[100] == pytest.approx(1.0) and by_point[300] == pytest.approx(-1.0)
    with pytest.raises(ValueError, match="at least 3"):
        correlations(rows[rows.id != "m2"])
    with pytest.raises(ValueError, match="no rows at temperature"):
        correlations(rows, temperature=1.0)
    with pytest.raises(ValueError, match="one row per draft"):
        V.rank_correlations(rows, temperature=0.0, nodes=60, n_boot=200)  # per-question rows, not drafts
    with pytest.raises(ValueError, match="no EAGLE3 draft"):
        correlations(rows[rows.id != "m0"])


def test_question_rows_join_layers_entropy_and_accuracy():
    results = pd.DataFrame(
        [
            {
                "id": i,
                "method": m,
                "seed": 0,
                "temperature": 0.0,
                "nodes": 60,
                "question_id": q,
                "column": "MT",
                "tau": 1.5,
                "category": "x",
                "rounds": 3,
                "accepted": [1],
            }
            for i, m in [("eagle2", "EAGLE2"), ("eagle3", "EAGLE3")]
            for q in range(2)
        ]
    )
    accuracy = pd.DataFrame(
        [{"method": "EAGLE2", "seed": 0, "step 1": 0.3}, {"method": "EAGLE3", "seed": 0, "step 1": 0.4}]
    )
    methods = pd.DataFrame(
        [{"id": "eagle2", "layers": (29,), "entropy": 0.6}, {"id": "eagle3", "layers": (1, 14, 26), "entropy": 0.05}]
    )
    rows = V.question_rows(results, accuracy, methods, protocol="small", prompts=1000)
    first = rows.drop_duplicates("id").set_index("id")
    assert first.loc["eagle3", "layers"] == "1 14 26" and first.loc["eagle2", "step 1"] == 0.3
    assert (
        first.loc["eagle3", "set entropy"] == 0.05 and (rows.prompts == 1000).all() and (rows.protocol == "small").all()
    )
    with pytest.raises(ValueError, match="not in `methods`"):
        V.question_rows(results, accuracy, methods[methods.id == "eagle3"], protocol="small", prompts=1)
    with pytest.raises(ValueError, match="no held-out step accuracy"):
        V.question_rows(results, accuracy[accuracy.method == "EAGLE3"], methods, protocol="small", prompts=1)
    with pytest.raises(ValueError, match="pass prompts="):
        V.question_rows(results, accuracy, methods, protocol="small")


def test_probe_scores_are_the_probes_errors_per_distinct_set():
    rng = np.random.default_rng(0)
    x, xh = rng.normal(size=(200, 4, 6)), rng.normal(size=(80, 4, 6))
    y, yh = x[:, 1] @ rng.normal(size=(6, 6)), xh[:, 1] @ rng.normal(size=(6, 6))
    stats, _ = P.probe_stats(x, y, xh, yh, 4)
    scores = V.probe_scores(["0 1", (0, 1), "2"], stats, 0.1)
    assert list(scores.layers) == ["0 1", "2"]
    assert scores["probe error"].tolist() == pytest.approx(P.set_errors(stats, [(0, 1), (2,)], 0.1).tolist())


def test_fig10_draws_every_point_with_its_rho(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from elsi_lib.study.experiments import draft_plots
    from elsi_lib.study.paper import plots

    rows = pd.concat(
        [
            drafts_rows([1.2, 1.4, 1.6], [0.3, 0.2, 0.1], [0.1, 0.2, 0.3]),
            drafts_rows([1.3, 1.5, 1.9], [0.3, 0.2, 0.1], [0.2, 0.3, 0.4], protocol="q", prompts=50),
        ]
    )
    scores = pd.DataFrame({"layers": [V.layers_text((i, i + 1)) for i in range(3)], "probe error": [0.9, 0.5, 0.4]})
    drafts = V.draft_table(rows, temperature=0.0, nodes=60).merge(scores, on="layers")
    fig = draft_plots.criteria_vs_drafts(drafts, correlations(rows, scores), "criteria")
    assert len(fig.axes) == 4 and all(ax.get_xlabel() and ax.get_ylabel() for ax in fig.axes)
    legend = [t.get_text() for t in fig.axes[2].get_legend().get_texts()]  # probe error against step 1
    assert legend == ["p, 100 prompts: rho +1.00 [+1.00, +1.00]", "q, 50 prompts: rho +1.00 [+1.00, +1.00]"]
    assert plots.save_table(drafts, "d", tmp_path, markdown=False) == [tmp_path / "d.csv"]
    assert not (tmp_path / "d.md").exists()
    plt.close("all")


def test_drafts_from_the_committed_small_protocol_tables():
    from pathlib import Path

    results = Path(__file__).resolve().parents[1] / "data" / "results"
    read = lambda name: pd.read_csv(results / f"table2_{name}_smollm2-135m.csv")  # noqa: E731
    drafts = V.drafts_from_tables(
        read("step_accuracy"), read("paired"), read("beam_overlap"), protocol="table2", prompts=936
    )
    at = drafts[(drafts.temperature == 0) & (drafts.nodes == 60)].set_index("method")
    assert len(at) == 11 and at.loc["EAGLE3", TAU] == 0.0 and at.loc["EAGLE3", "layers"] == "1 14 26"
    assert at.loc["EAGLE3", "step 1"] == pytest.approx(0.331614) and at.loc["EAGLE2", "layers"] == "29"
    assert "EAGLE3, lm_head not from target" not in at.index  # the lever's draft is no layer set
    assert set(drafts.groupby(["temperature", "nodes"]).size()) == {11}
    table = V.rank_correlations(drafts, temperature=0.0, nodes=60, n_boot=200)
    assert table["low (questions and sets)"].isna().all()  # no per-question rows: the interval over sets only
    assert table["low (sets)"].notna().all()


def test_paired_from_the_finished_drafts_of_each_protocol_against_each_baseline():
    """M2's draft against EAGLE3 and against M1: the last point only, the first seed only, each difference
    the mean of its per-question differences, and a protocol without the method left out."""
    early = drafts_rows([1.0, 1.0, 5.0], [0.1, 0.2, 0.3], [0.1, 0.2, 0.3], prompts=100)  # must not count
    rows = drafts_rows([1.2, 1.4, 1.6], [0.1, 0.2, 0.3], [0.1, 0.2, 0.3], prompts=300, seed=1)
    reseed = rows[rows.id == "m2"].assign(seed=1, tau=9.0)  # a second seed of M2 must not count
    other = drafts_rows([1.2, 1.4], [0.1, 0.2], [0.1, 0.2], protocol="q")  # no M2: left out
    table = V.paired_from(pd.concat([early, rows, reseed, other]), "M2", ("EAGLE3", "M1"), nodes=60, n_boot=200)
    assert list(table.protocol) == ["p", "p"] and list(table.baseline) == ["EAGLE3", "M1"]
    assert set(table.prompts) == {300} and set(table.questions) == {30}
    by = rows.set_index(["question_id", "method"]).tau.unstack()
    for baseline, row in table.set_index("baseline").iterrows():
        assert row["diff"] == pytest.approx((by["M2"] - by[baseline]).mean())
        assert row["low"] <= row["diff"] <= row["high"] and row["low"] > 0
    assert V.paired_from(other, "M2", ("EAGLE3",), nodes=60).empty


# ---------------------------------------------------------------- what the criteria statistics refuse (issue 34)


def zero_sum_rows():
    """Four drafts whose per-question tau differs from EAGLE3's by +-0.25 (exactly, in binary) and
    averages to exactly EAGLE3's: every draft's paired difference is 0, so its rho is NaN, while
    resampled questions move the differences."""
    rows = drafts_rows([1.5] * 4, [0.1, 0.2, 0.3, 0.4], [0.1, 0.2, 0.3, 0.4], questions=8, noise=0.0)
    signs = {"m1": [1, -1] * 4, "m2": [1, 1, -1, -1] * 2, "m3": [1] * 4 + [-1] * 4}
    for draft, sign in signs.items():
        rows.loc[rows.id == draft, "tau"] = 1.5 + 0.25 * np.array(sign)
    return rows


def test_a_nan_rho_gets_no_interval():
    """A NaN rho gets a NaN interval: the resampled questions make the differences vary, so the
    bootstrap draws finite rhos the estimate never has, and would put a finite interval beside it."""
    table = correlations(zero_sum_rows(), n_boot=300).set_index(["criterion", "outcome"])
    row = table.loc[("set entropy", TAU)]
    assert np.isnan(row.rho)
    for end in ("low (sets)", "high (sets)", "low (questions and sets)", "high (questions and sets)"):
        assert np.isnan(row[end]), end
    assert np.isfinite(table.loc[("set entropy", "step 1"), "low (sets)"])  # a finite rho keeps its interval


@pytest.mark.parametrize("n_boot", [1, 2, 99, 0, 200.0, True])
def test_too_few_or_non_integer_resamples_are_refused(n_boot):
    """Too few or non-integer resamples are refused: n_boot = 1 would give an 'interval' of one or two draws."""
    rows = drafts_rows([1.2, 1.4, 1.6], [0.1, 0.2, 0.3], [0.1, 0.2, 0.3])
    drafts = V.draft_table(rows, temperature=0.0, nodes=60)
    with pytest.raises(ValueError, match="n_boot"):
        V.rank_correlations(drafts, rows, temperature=0.0, nodes=60, n_boot=n_boot)


@pytest.mark.parametrize("n_perm", [0, -1, 10.5])
def test_a_permutation_count_that_is_no_positive_integer_is_refused(n_perm):
    rows = drafts_rows([1.2, 1.4, 1.6], [0.1, 0.2, 0.3], [0.1, 0.2, 0.3])
    drafts = V.draft_table(rows, temperature=0.0, nodes=60)
    with pytest.raises(ValueError, match="n_perm"):
        V.rank_correlations(drafts, rows, temperature=0.0, nodes=60, n_boot=200, n_perm=n_perm)


def test_a_draft_listed_twice_is_refused():
    """A draft listed twice is refused: it would count as two drafts (S = 4 of 3, its set weighed double)."""
    rows = drafts_rows([1.2, 1.4, 1.6], [0.1, 0.2, 0.3], [0.1, 0.2, 0.3])
    drafts = V.draft_table(rows, temperature=0.0, nodes=60)
    again = pd.concat([drafts, drafts.iloc[[1]]], ignore_index=True)
    with pytest.raises(ValueError, match=r"'m1'.*2 times"):
        V.rank_correlations(again, rows, temperature=0.0, nodes=60, n_boot=200)
    with pytest.raises(ValueError, match=r"'m1'.*2 times"):
        V.rank_correlations(again, temperature=0.0, nodes=60, n_boot=200)  # without the per-question rows too
    reseeded = pd.concat([drafts, drafts.iloc[[1]].assign(seed=1)], ignore_index=True)
    with pytest.raises(ValueError, match=r"'m1'.*2 times"):
        V.rank_correlations(reseeded, temperature=0.0, nodes=60, n_boot=200)
    renamed = pd.concat([drafts, drafts.iloc[[1]].assign(id="m1 again")], ignore_index=True)
    with pytest.raises(ValueError, match=r"'M1'.*seed 0.*\['m1', 'm1 again'\]"):
        V.rank_correlations(renamed, temperature=0.0, nodes=60, n_boot=200)
    relabelled = rows.copy()
    relabelled.loc[relabelled.id == "m2", "method"] = "M1"  # two drafts under one method and seed
    with pytest.raises(ValueError, match=r"'M1'.*seed 0.*\['m1', 'm2'\]"):
        V.draft_table(relabelled, temperature=0.0, nodes=60)


def test_a_duplicated_question_row_is_refused():
    """A (draft, question) row given twice is refused: it would count twice in AVG tau but once in the
    paired difference (the pivot keeps the first)."""
    rows = drafts_rows([1.2, 1.4, 1.6], [0.1, 0.2, 0.3], [0.1, 0.2, 0.3])
    twice = pd.concat([rows, rows[(rows.id == "m2") & (rows.question_id == 7)]], ignore_index=True)
    with pytest.raises(ValueError, match=r"'m2'.*question 7"):
        V.draft_table(twice, temperature=0.0, nodes=60)
    drafts = V.draft_table(rows, temperature=0.0, nodes=60)
    with pytest.raises(ValueError, match=r"'m2'.*question 7"):
        V.rank_correlations(drafts, twice, temperature=0.0, nodes=60, n_boot=200)
    # the same question at another temperature, tree size or seed is no duplicate
    V.draft_table(
        pd.concat([rows, rows.assign(temperature=1.0), rows.assign(nodes=30), rows.assign(seed=1)]),
        temperature=0.0,
        nodes=60,
    )


@pytest.mark.parametrize("bad", [0.5, 0.0, -1.0, np.inf])
def test_a_tau_below_one_or_infinite_is_refused_naming_the_row(bad):
    """A tau below 1 (impossible: at least one token per target forward) or infinite is refused, naming the
    row, rather than entering the means."""
    rows = drafts_rows([1.2, 1.4, 1.6], [0.1, 0.2, 0.3], [0.1, 0.2, 0.3])
    rows.loc[(rows.id == "m1") & (rows.question_id == 4), "tau"] = bad
    with pytest.raises(ValueError, match=r"'m1'.*question 4"):
        V.draft_table(rows, temperature=0.0, nodes=60)
    rows.loc[(rows.id == "m1") & (rows.question_id == 4), "tau"] = 1.0  # no draft token accepted: valid
    V.draft_table(rows, temperature=0.0, nodes=60)
    rows.loc[(rows.id == "m1") & (rows.question_id == 4), "tau"] = np.nan  # no round: left out, not refused
    assert V.draft_table(rows, temperature=0.0, nodes=60).set_index("id").loc["m1", "questions"] == 29


@pytest.mark.parametrize("name", ["step_accuracy", "paired", "beam_overlap"])
def test_a_committed_table_listing_a_draft_twice_is_refused(name):
    """A committed table listing a draft twice is refused: `drafts_from_tables` would keep the first
    step-accuracy row, the last paired row and the first beam-overlap row of it, without a word."""
    from pathlib import Path

    results = Path(__file__).resolve().parents[1] / "data" / "results"
    tables = {
        n: pd.read_csv(results / f"table2_{n}_smollm2-135m.csv") for n in ("step_accuracy", "paired", "beam_overlap")
    }
    row = tables[name][tables[name].method == "EAGLE2"].iloc[[0]]
    tables[name] = pd.concat([tables[name], row], ignore_index=True)
    with pytest.raises(ValueError, match=r"method 'EAGLE2'.*2 times"):
        V.drafts_from_tables(
            tables["step_accuracy"], tables["paired"], tables["beam_overlap"], protocol="table2", prompts=936
        )
