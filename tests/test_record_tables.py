"""The pooled criteria (`record_tables.pooled_criteria`): drafts-weighted rho over protocols, a
permutation test stratified by protocol, and one protocol of each pair of numeric twins."""

import numpy as np
import pandas as pd
import pytest

from elsi_lib.study.ledger.protocols import PROTOCOLS
from elsi_lib.study.ledger.record_tables import one_per_twins, pooled_criteria


def _protocol(name: str, n: int, *, rank_right: bool, seed: int = 0, error=None) -> pd.DataFrame:
    """n drafts of protocol `name` whose probe error ranks step 1 and tau perfectly (lower error, better
    draft) when `rank_right`, else in a seeded random order (or `error`'s); set entropy and agreement
    are noise."""
    rng = np.random.default_rng(seed)
    quality = np.arange(n, dtype=float)
    if error is None:
        error = -quality if rank_right else rng.permutation(quality)
    return pd.DataFrame(
        {
            "protocol": name,
            "id": [f"d{i}" for i in range(n)],
            "seed": 0,
            "layers": [f"{i} {i + 1} 29" for i in range(n)],
            "set entropy": rng.normal(size=n),
            "probe error": error,
            "probe agreement": rng.normal(size=n),
            "step 1": 0.2 + 0.01 * quality,
            "tau minus EAGLE3": 0.05 * quality - 0.1,
        }
    )


def _row(pooled: pd.DataFrame, criterion: str = "probe error", outcome: str = "tau minus EAGLE3") -> pd.Series:
    return pooled[(pooled.criterion == criterion) & (pooled.outcome == outcome)].iloc[0]


def test_the_protocols_twins_are_the_same_family_and_data_in_two_numeric_settings():
    assert PROTOCOLS["table3"].twins == PROTOCOLS["table3_f32"].twins
    assert PROTOCOLS["table2_strong"].twins == PROTOCOLS["table2_strong_f32"].twins
    assert PROTOCOLS["table3"].twins != PROTOCOLS["table2_strong"].twins


def test_of_two_twins_the_pooled_test_counts_the_one_with_more_drafts():
    """table3 and table3_f32 rank the same Qwen sets: pooling both would count each set twice."""
    table = pd.concat(
        [
            _protocol("table3", 4, rank_right=True),
            _protocol("table3_f32", 6, rank_right=True),
            _protocol("table2_strong", 3, rank_right=False, seed=1),
        ],
        ignore_index=True,
    )
    row = _row(pooled_criteria(table, n_perm=500))
    assert row.protocols == "table3_f32 table2_strong"
    assert row.drafts == 9
    kept = one_per_twins([g for _, g in table.groupby("protocol", sort=False)])
    assert [g.protocol.iloc[0] for g in kept] == ["table3_f32", "table2_strong"]


def test_twins_with_equal_drafts_keep_the_first_listed_and_other_protocols_stay():
    groups = [
        _protocol("table2_strong", 3, rank_right=True),
        _protocol("table2_strong_f32", 3, rank_right=True),
        _protocol("someone_elses", 3, rank_right=True),  # not in PROTOCOLS: its own group
    ]
    assert [g.protocol.iloc[0] for g in one_per_twins(groups)] == ["table2_strong", "someone_elses"]


def test_a_criterion_that_ranks_every_protocol_right_is_significant_and_noise_is_not():
    right = pd.concat(
        [_protocol("table3_f32", 8, rank_right=True), _protocol("table2_strong", 8, rank_right=True)],
        ignore_index=True,
    )
    row = _row(pooled_criteria(right, n_perm=2000))
    assert row["pooled rho"] == 1.0
    assert row["p (stratified permutation)"] < 0.01
    assert [float(q) < 0.01 for q in row["per protocol p"].split()] == [True, True]
    # error orders whose Spearman rho with the drafts' quality is +0.14 and +0.10 (signed, as probe error
    # counts with sign -1: -0.14 and -0.10)
    noise = pd.concat(
        [
            _protocol("table3_f32", 8, rank_right=False, error=np.array([1, 6, 3, 0, 7, 4, 5, 2], float)),
            _protocol("table2_strong", 8, rank_right=False, error=np.array([4, 0, 6, 2, 7, 1, 5, 3], float)),
        ],
        ignore_index=True,
    )
    row = _row(pooled_criteria(noise, n_perm=2000))
    assert row["pooled rho"] == pytest.approx(-(1 / 7 + 2 / 21) / 2)
    assert row["p (stratified permutation)"] > 0.3
    assert [float(q) > 0.3 for q in row["per protocol p"].split()] == [True, True]


def test_protocols_with_fewer_than_three_drafts_are_left_out():
    table = pd.concat(
        [_protocol("table3_f32", 5, rank_right=True), _protocol("table2_strong", 2, rank_right=False)],
        ignore_index=True,
    )
    row = _row(pooled_criteria(table, n_perm=200))
    assert row.protocols == "table3_f32"
    assert row.drafts == 5


def test_two_methods_that_chose_one_set_are_one_draft_and_a_reseed_is_another():
    from test_records import a_record

    from elsi_lib.study.ledger.record_tables import distinct_drafts

    elsi, elsi_c = a_record(method="elsi-m3"), a_record(method="elsi-c-m3")  # both layers (1, 22, 23)
    assert distinct_drafts([elsi, elsi_c]) == 1
    assert distinct_drafts([elsi, elsi_c, a_record(method="elsi-m3", seed=1)]) == 2
    other = {**a_record(method="probe-m3"), "layers": "19 21 23"}
    assert distinct_drafts([elsi, other]) == 2


def test_each_seed_is_compared_with_eagle3s_same_seed(tmp_path, monkeypatch):
    from test_records import a_record

    from elsi_lib.study.ledger import draft_records as R
    from elsi_lib.study.ledger.record_tables import findings

    monkeypatch.setenv("ELSI_DRAFT_RECORDS", str(tmp_path))
    own = {"eagle3": {"label": "EAGLE3", "layers": "1 11 20"}, "elsi-m3": {"label": "ELSI m=3"}}
    for method, seed, tau in [("eagle3", 0, 1.5), ("elsi-m3", 0, 1.6), ("eagle3", 1, 1.52), ("elsi-m3", 1, 1.53)]:
        R.write_record({**a_record("table3_f32", method, seed=seed, tau=tau), **own[method]}, tmp_path)
    found = findings("table3_f32", n_boot=200)
    at0 = found[found.temperature == 0].set_index("seed")
    assert at0["diff"].to_dict() == pytest.approx({0: 0.1, 1: 0.01})
    assert at0["reseed range"].to_numpy() == pytest.approx([0.07, 0.07])  # ELSI m=3's 1.6 against 1.53
    assert set(at0["interval"]) == {"the questions' only: one seed against EAGLE3's same seed"}
    assert set(found.drafts) == {4}
    assert set(found.family) == {"qwen2.5-coder-0.5b"} and set(found.prompts) == {936}  # what `elsi select` reads


def test_a_method_without_the_first_seed_is_refused_not_dropped_from_the_pooled_drafts(tmp_path, monkeypatch):
    """The pooled test compares each protocol's drafts at its first seed: a method recorded only at later
    seeds would vanish from it unsaid (while the evidence's comparisons still list it): refused, naming the
    method, the seeds it has and the seed it lacks."""
    from test_records import a_record

    from elsi_lib.study.ledger import draft_records as R
    from elsi_lib.study.ledger.record_tables import drafts

    monkeypatch.setenv("ELSI_DRAFT_RECORDS", str(tmp_path))
    own = {"eagle3": {"label": "EAGLE3", "layers": "1 11 20"}, "elsi-m3": {"label": "ELSI m=3"}}
    for method, seed, tau in [("eagle3", 0, 1.5), ("eagle3", 1, 1.52), ("elsi-m3", 1, 1.53), ("elsi-m3", 2, 1.55)]:
        R.write_record({**a_record("table3_f32", method, seed=seed, tau=tau), **own[method]}, tmp_path)
    with pytest.raises(ValueError, match=r"ELSI m=3 has drafts at seed\(s\) \[1, 2\] but none at seed 0"):
        drafts(("table3_f32",))
    R.write_record({**a_record("table3_f32", "elsi-m3", seed=0, tau=1.6), **own["elsi-m3"]}, tmp_path)
    assert len(drafts(("table3_f32",))) == 2  # EAGLE3's and ELSI's at seed 0


def test_a_protocol_without_an_eagle3_draft_is_named_in_the_pooled_tests_left_out(tmp_path, monkeypatch):
    """A protocol whose records hold no EAGLE3 draft has no tau minus EAGLE3's: it cannot join the pooled
    test, and says so in "left out" instead of vanishing from it."""
    from test_records import a_record

    from elsi_lib.study.ledger import draft_records as R
    from elsi_lib.study.ledger.record_tables import drafts

    monkeypatch.setenv("ELSI_DRAFT_RECORDS", str(tmp_path))
    R.write_record({**a_record("table3_f32", "elsi-m3", seed=0, tau=1.6), "label": "ELSI m=3"}, tmp_path)
    table = drafts(("table3_f32",))
    assert table.empty and table.attrs["left out"] == ["table3_f32 (1 draft, no EAGLE3 draft: no tau minus EAGLE3's)"]
    few = _protocol("table2_strong", 3, rank_right=True)
    few.attrs["left out"] = table.attrs["left out"]
    assert (pooled_criteria(few, n_perm=100)["left out"] == table.attrs["left out"][0]).all()


def test_the_first_seed_is_asked_of_each_point_on_its_own():
    """A method at the first seed of one point is no excuse for its missing first seed at another."""
    from elsi_lib.study.experiments.criteria_vs_drafts import _first_seed

    rows = pd.DataFrame(
        [
            {"protocol": p, "prompts": 936, "id": f"{m}-{p}-{s}", "seed": s, "method": m, "temperature": 0.0}
            | {"nodes": 60, "question_id": q, "tau": 1.5}
            for p, m, s in [("a", "EAGLE3", 0), ("a", "probe", 0), ("b", "EAGLE3", 0), ("b", "probe", 1)]
            for q in (1, 2)
        ]
    )
    with pytest.raises(ValueError, match=r"b at 936 prompts: probe has drafts at seed\(s\) \[1\] but none at seed 0"):
        _first_seed(rows, 0.0, 60)
    assert len(_first_seed(rows[rows.protocol == "a"], 0.0, 60)) == 4


def test_a_constant_criterion_is_left_out_of_the_observed_rho_and_the_null_alike():
    """A protocol whose criterion never varies has no ranking to test: with it left out of both sides,
    the pooled p-value is the one the other protocols give alone (it is about 60 times too small
    when the constant protocol's zeros stay in the null)."""
    right = _protocol("table3_f32", 6, rank_right=True)
    flat = _protocol("table2_strong", 8, rank_right=False, error=np.full(8, 0.5))
    alone = _row(pooled_criteria(right, n_perm=720))
    both = _row(pooled_criteria(pd.concat([right, flat], ignore_index=True), n_perm=720))
    assert both["left out"] == "table2_strong (constant)" and both.drafts == 6
    assert both["p (stratified permutation)"] == alone["p (stratified permutation)"]
    assert both["pooled rho"] == pytest.approx(1.0)


def test_small_nulls_are_enumerated_exactly():
    """6 drafts ranked perfectly: 2 of the 720 orders reach |rho| = 1, so p = 2/720 exactly."""
    row = _row(pooled_criteria(_protocol("table3_f32", 6, rank_right=True), n_perm=720))
    assert row["p exact"] == "yes" and row["p (stratified permutation)"] == pytest.approx(2 / 720)
    sampled = _row(pooled_criteria(_protocol("table3_f32", 6, rank_right=True), n_perm=500))
    assert sampled["p exact"] == "no" and sampled["p (stratified permutation)"] >= 1 / 501


def test_a_draft_listed_twice_is_refused():
    table = _protocol("table3_f32", 5, rank_right=True)
    with pytest.raises(ValueError, match="listed twice"):
        pooled_criteria(pd.concat([table, table.iloc[:1]], ignore_index=True), n_perm=100)


@pytest.mark.parametrize("written", ["1  2 29", "29 1 2", "1,2,29"])
def test_one_set_under_another_id_however_written_is_one_draft(written):
    """A draft copied under another id (its layers written another way) is one draft, refused as such:
    counted twice, it moves p from 0.047 to 0.013."""
    table = _protocol("table3_f32", 6, rank_right=True)
    copy = table.iloc[[1]].assign(id="copy", layers=written)
    with pytest.raises(ValueError, match=r"draft d1 of table3_f32 and \['copy'\] are one draft \(layers \[1, 2, 29\]"):
        pooled_criteria(pd.concat([table, copy], ignore_index=True), n_perm=100)


@pytest.mark.parametrize(
    "change, reason",
    [
        (lambda t: t.drop(columns="layers"), r"lacks the column\(s\) \['layers'\]"),
        (lambda t: t.assign(protocol=[None] + list(t.protocol[1:])), "row 0 has no protocol"),
        (lambda t: t.assign(**{"probe error": ["n/a"] + list(t["probe error"][1:])}), "row 0, probe error = 'n/a'"),
        (lambda t: t.assign(**{"tau minus EAGLE3": [np.inf] + list(t["tau minus EAGLE3"][1:])}), "is not finite"),
        (
            lambda t: pd.concat([t, t.iloc[[1]].assign(seed=1, **{"probe error": 9.0})], ignore_index=True),
            r"table3_f32's drafts of layers \[1, 2, 29\] give probe error \[-1.0, 9.0\]",
        ),
    ],
)
def test_a_drafts_table_that_cannot_be_pooled_is_refused_naming_the_row(change, reason):
    with pytest.raises(ValueError, match=reason):
        pooled_criteria(change(_protocol("table3_f32", 6, rank_right=True)), n_perm=100)


def test_a_twin_left_out_is_named():
    table = pd.concat(
        [_protocol("table3_f32", 6, rank_right=True), _protocol("table3", 4, rank_right=True)], ignore_index=True
    )
    row = _row(pooled_criteria(table, n_perm=720))
    assert (
        row["protocols"] == "table3_f32" and "table3 (its numeric twin table3_f32 has more drafts)" in row["left out"]
    )


@pytest.mark.parametrize("seed", range(12))
def test_every_p_the_test_gives_is_one_the_evidence_reader_accepts(seed):
    """The reader's bounds on a permutation p (`evidence_checks._check_p`: no smaller than one draw,
    between the Paley-Zygmund and Chebyshev bounds its rho and null variance give) hold for whatever
    the study computes, exact or sampled, with ties and weak or strong rankings alike."""
    from elsi_lib.draft.pooled_checks import check_pooled

    rng = np.random.default_rng(seed)
    names = ["table3_f32", "table2_strong"][: 1 + seed % 2]
    parts = []
    for i, name in enumerate(names):
        n = int(rng.integers(3, 9))
        error = np.round(rng.normal(size=n) - (seed % 3) * np.arange(n), 1)  # ties, weak to strong rankings
        parts.append(_protocol(name, n, rank_right=False, seed=seed + i, error=error))
    table = pd.concat(parts, ignore_index=True)
    records = {f"{name}/r{i}.json": "0" * 64 for name in names for i in range(10)}
    for n_perm in (100, 5000):
        for row in pooled_criteria(table, n_perm=n_perm, seed=seed).round(6).to_dict("records"):
            check_pooled(f"seed {seed}", row, records)
