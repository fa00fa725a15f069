"""Comparisons at the seed level (elsi_lib.study.ledger.seed_stats): the interval holds what a reseed moves,
and says so when it cannot."""

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from elsi_lib.study.ledger.seed_stats import difference, level, seed_variance


def _rows(shifts: dict, n_questions: int = 40, seed: int = 0) -> pd.DataFrame:
    """Per-question tau: method -> {seed: shift}; every draft sees the same questions."""
    rng = np.random.default_rng(seed)
    base = 2 + rng.normal(0, 0.3, n_questions)
    noise = {}
    out = []
    for method, seeds in shifts.items():
        for s, shift in seeds.items():
            noise[(method, s)] = rng.normal(0, 0.02, n_questions)
            for q in range(n_questions):
                out.append(
                    {
                        "method": method,
                        "seed": s,
                        "temperature": 0.0,
                        "nodes": 60,
                        "question_id": q,
                        "tau": base[q] + shift + noise[(method, s)][q],
                    }
                )
    return pd.DataFrame(out)


def test_single_seed_drafts_are_labelled_and_get_the_questions_interval():
    rows = _rows({"EAGLE3": {0: 0.0}, "A": {0: 0.1}})
    d = difference(rows, "A", temperature=0.0)
    assert d["seed level"] == "no" and d["seeds"] == 1 and d["baseline seeds"] == 1
    paired = rows[rows.method == "A"].tau.to_numpy() - rows[rows.method == "EAGLE3"].tau.to_numpy()
    half = stats.t.ppf(0.975, len(paired) - 1) * paired.std(ddof=1) / np.sqrt(len(paired))
    assert d["diff"] == pytest.approx(paired.mean()) and d["high"] - d["diff"] == pytest.approx(half)


def test_seed_variance_widens_the_interval():
    """The same seed-0 drafts; reseeds that move AVG tau by 0.1 widen the interval well past the
    questions' alone."""
    calm = _rows({"EAGLE3": {0: 0.0, 1: 0.0}, "A": {0: 0.05}})
    moved = _rows({"EAGLE3": {0: 0.0, 1: 0.1}, "A": {0: 0.05}})
    s2, df = seed_variance(moved, temperature=0.0, nodes=60)
    assert df == 1 and s2 == pytest.approx(0.005, rel=0.2)
    narrow, wide = difference(calm, "A", temperature=0.0), difference(moved, "A", temperature=0.0)
    assert narrow["seed level"] == wide["seed level"] == "yes"
    assert (wide["high"] - wide["low"]) > 5 * (narrow["high"] - narrow["low"])
    one = level(moved, "EAGLE3", temperature=0.0, nodes=60)
    assert one["seeds"] == 2 and one["low"] < one["AVG"] < one["high"]


def test_a_question_listed_twice_is_refused():
    rows = _rows({"EAGLE3": {0: 0.0}, "A": {0: 0.1}})
    with pytest.raises(ValueError, match="twice"):
        difference(pd.concat([rows, rows.iloc[:1]]), "A", temperature=0.0)
    with pytest.raises(ValueError, match="no rows"):
        difference(rows, "B", temperature=0.0)


def test_the_committed_paper_tables_are_the_records(monkeypatch):
    """data/results/<protocol>_records_<family>.csv is what the committed records give now (`make
    evidence` after a record lands): the paper's layout, EAGLE3 first, both temperatures and trees,
    each row's seeds, AVG inside its interval."""
    from elsi_lib.common.cachefiles import REPO_ROOT
    from elsi_lib.common.results import result_path
    from elsi_lib.study.ledger.paper_tables import COLUMNS, TABLES, paper_table

    monkeypatch.setenv("ELSI_DRAFT_RECORDS", str(REPO_ROOT / "data" / "drafts"))
    for name in TABLES:
        table = paper_table(name)
        committed = pd.read_csv(result_path(name, "records", table.family.iloc[0], REPO_ROOT / "data" / "results"))
        assert list(committed.columns) == list(table.columns)
        pd.testing.assert_frame_equal(
            committed[list(COLUMNS) + ["AVG", "low", "high"]], table[list(COLUMNS) + ["AVG", "low", "high"]], rtol=1e-5
        )
        assert set(committed.temperature) == {0.0, 1.0} and set(committed.nodes) == {30, 60}
        assert (committed.groupby(["temperature", "nodes"]).method.first() == "EAGLE3").all()
        assert ((committed["AVG low"] <= committed.AVG) & (committed.AVG <= committed["AVG high"])).all()


def test_a_seed_without_a_tau_is_no_seed():
    """A seed whose every question lacks a tau at this temperature and tree says nothing of its method:
    the difference counts the seeds that measured something, and weighs the seed variance by them."""
    rows = _rows({"EAGLE3": {0: 0.0, 1: 0.01}, "A": {0: 0.1, 1: 0.12}})
    alone = rows[~((rows.method == "A") & (rows.seed == 1))]
    blank = rows.copy()
    blank.loc[(blank.method == "A") & (blank.seed == 1), "tau"] = np.nan
    got, want = difference(blank, "A", temperature=0.0), difference(alone, "A", temperature=0.0)
    assert got["seeds"] == 1 and got["diff"] == pytest.approx(want["diff"])
    assert (got["low"], got["high"]) == pytest.approx((want["low"], want["high"]))


def test_paper_tables_name_a_results_folder_that_is_missing_or_a_file(tmp_path, monkeypatch):
    """Every table is made first; a results folder that is not there (or is a file) is then named, not a
    pandas traceback that calls a file a non-existent directory."""
    from elsi_lib.common.cachefiles import REPO_ROOT
    from elsi_lib.study.ledger import paper_tables

    monkeypatch.setenv("ELSI_DRAFT_RECORDS", str(REPO_ROOT / "data" / "drafts"))
    (tmp_path / "a-file").write_text("")
    for where, said in ((tmp_path / "a-file", "is a file, not a folder"), (tmp_path / "none", "does not exist")):
        monkeypatch.setenv("ELSI_RESULTS", str(where))
        with pytest.raises(SystemExit, match=f"results folder {where} {said}"):
            paper_tables.main(["table2_strong"])
