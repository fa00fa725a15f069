import numpy as np
import pandas as pd
import pytest

from elsi_lib import (
    LayerStats,
    cka_matrix,
    eagle3_layers,
    eagle3_paper_layers,
    elsi,
    exhaustive,
    find_boundaries,
    set_entropy,
    transition_scores,
)
from elsi_lib.study.paper import layer_measures, layer_sets
from elsi_lib.selection.select import single_layer_entropies

from conftest import random_layers


def compartments(seed=0, sizes=(4, 5, 3), rows=16, dim=40, overlap=None):
    """Z whose layers come in blocks that share a basis: compartments with sharp borders. overlap[k]
    (0..1) mixes block k's basis into block k+1's, which softens that border."""
    rng = np.random.default_rng(seed)
    layers, base = [], None
    for k, size in enumerate(sizes):
        fresh = rng.normal(size=(rows, dim))
        mix = 0.0 if overlap is None or base is None else overlap[k - 1]
        base = fresh if base is None else np.sqrt(1 - mix**2) * fresh + mix * base
        layers += [base + 0.05 * rng.normal(size=(rows, dim)) for _ in range(size)]
    return np.stack(layers)  # (N, B, d)


def layer_stats(Z=None, sample_entropy=None, seed=0, **counts) -> LayerStats:
    """A LayerStats of random Z (or the given arrays), with the metadata and counts a capture writes."""
    rng = np.random.default_rng(seed)
    Z = random_layers(n_layers=6, rows=5, dim=8, seed=seed) if Z is None else Z
    sample_entropy = rng.uniform(size=(4, len(Z))) if sample_entropy is None else sample_entropy
    return LayerStats(
        Z=Z,
        final_norm=np.ones(Z.shape[1:]),
        sample_entropy=sample_entropy,
        sample_index=np.arange(len(sample_entropy)),
        abs_max=np.ones((len(Z), Z.shape[2])),
        abs_sum=np.ones((len(Z), Z.shape[2])),
        metadata={"rho": 0.3, "block": Z.shape[1]},
        counts={"blocks": 7, **counts},
    )


# ---------------------------------------------------------------- notebook 01


def test_capture_label_reads_the_metadata():
    stats = layer_stats()
    stats.metadata.update(rho=0.5, block=16)
    assert layer_measures.capture_label(stats) == "rho = 0.5, B = 16"


def test_entropy_wave_and_summary():
    entropies = np.array([[1.0, 0.2, 0.6], [3.0, 0.4, 0.8]])
    Z = random_layers(n_layers=3, rows=5, dim=8, seed=2)
    stats = layer_stats(Z, entropies)
    wave = layer_measures.entropy_wave(stats)
    assert wave.index.name == "layer" and list(wave.index) == [0, 1, 2]
    assert np.allclose(wave["mean S_1 over prompts"], [2.0, 0.3, 0.7])
    assert np.allclose(wave["std over prompts"], [np.sqrt(2), np.sqrt(0.02), np.sqrt(0.02)])
    assert np.allclose(wave["S_1 of Z (all prompts)"], [set_entropy(Z, [l]) for l in range(3)])
    summary = layer_measures.entropy_summary({"a": {"entropy": stats}})
    curve = stats.layer_entropy()
    row = summary.iloc[0]
    assert row["argmax layer"] == np.argmax(curve) and row["argmin layer"] == np.argmin(curve)
    assert row["range"] == pytest.approx(curve.max() - curve.min())
    assert row["top-row energy share, median"] == pytest.approx(np.median(stats.top_row_energy_share()))


def test_wave_findings():
    curve_Z = random_layers(n_layers=7, rows=5, dim=8, seed=5)
    shape = np.array([1.0, 0.5, 0.3, 0.2, 0.3, 0.6, 0.9])
    prompts = np.stack([shape, 2 * shape, shape + 0.1])  # every prompt follows the shape: corr 1
    paper = layer_stats(curve_Z, prompts)
    plain = layer_stats(random_layers(n_layers=7, rows=5, dim=8, seed=6))
    row = layer_measures.wave_findings({"m": {"entropy": paper, "entropy_no_template": plain}}).iloc[0]
    curve, flat = paper.layer_entropy(), plain.layer_entropy()
    assert row["argmax layer"] == np.argmax(curve) and row["S_1 last layer"] == pytest.approx(curve[-1])
    assert row["min S_1"] == pytest.approx(curve.min()) and row["argmin layer"] == np.argmin(curve)
    assert row["layers below 0.1 x max"] == layer_measures._runs(np.flatnonzero(curve < 0.1 * curve.max()))
    assert row["range S_1, template excluded"] == pytest.approx(flat.max() - flat.min())
    assert row["median corr. prompt vs mean"] == pytest.approx(1.0)


def test_runs_of_layers():
    assert layer_measures._runs([2, 3, 4, 7, 9, 10]) == "2-4, 7, 9-10"
    assert layer_measures._runs([]) == "none"


# ---------------------------------------------------------------- notebook 02


def test_pair_entropy_table_is_the_pair_set_entropy():
    Z = random_layers(n_layers=7, rows=6, dim=12, seed=3)
    seeds, table = layer_measures.pair_entropy_table(Z, seeds=3)
    single = single_layer_entropies(Z)
    assert list(seeds) == list(np.argsort(-single)[:3]) and table.shape == (3, 7)
    for row, i in enumerate(seeds):
        for j in range(7):
            expected = single[i] if i == j else set_entropy(Z, [i, j])
            assert table[row, j] == pytest.approx(expected, rel=1e-12)


def test_pair_gains_by_hand():
    # seed 2 alone: 1.0; companions 0, 1, 3 give 0.5, 2.0, 0.8 -> best 1 (+1.0), median -0.2, 2 lower
    # seed 0 alone: 0.4; companions give 0.3, 0.9, 0.1 -> best 2 (+0.5), median -0.1, 2 lower
    table = np.array([[0.5, 2.0, 1.0, 0.8], [0.4, 0.3, 0.9, 0.1]])
    gains = layer_measures.pair_gains({"m": (np.array([2, 0]), table)})
    assert list(gains["seed layer"]) == [2, 0] and list(gains["best companion"]) == [1, 2]
    assert np.allclose(gains["S_1 alone"], [1.0, 0.4]) and np.allclose(gains["S_1 with it"], [2.0, 0.9])
    assert np.allclose(gains["gain"], [1.0, 0.5]) and np.allclose(gains["median gain"], [-0.2, -0.1])
    assert list(gains["companions that lower S_1"]) == [2, 2]


def test_pair_gains_match_a_naive_loop():
    Z = random_layers(n_layers=6, rows=5, dim=8, seed=7)
    seeds, table = layer_measures.pair_entropy_table(Z, seeds=3)
    gains = layer_measures.pair_gains({"m": (seeds, table)})
    for row, i in zip(gains.to_dict("records"), seeds):
        pairs = {j: set_entropy(Z, [i, j]) for j in range(6) if j != i}
        alone = set_entropy(Z, [i])
        assert row["best companion"] == max(pairs, key=pairs.get)
        assert row["gain"] == pytest.approx(max(pairs.values()) - alone)
        assert row["median gain"] == pytest.approx(np.median([v - alone for v in pairs.values()]))
        assert row["companions that lower S_1"] == sum(v < alone for v in pairs.values())


def test_pair_findings():
    table = np.array([[0.5, 2.0, 1.0, 0.8], [0.4, 0.3, 0.9, 0.1]])  # as in test_pair_gains_by_hand
    gains = layer_measures.pair_gains({"m": (np.array([2, 0]), table)})
    row = layer_measures.pair_findings(gains, {"m": 4}).iloc[0]
    assert (row["top seed"], row["companions lowering it"], row["companions"]) == (2, 2, 3)
    assert row["median change, top seed"] == pytest.approx(-0.2)
    assert row["pairs that lose entropy"] == pytest.approx(4 / 6)
    assert (row["largest gain"], row["its seed"], row["its companion"]) == (pytest.approx(1.0), 2, 1)


# ---------------------------------------------------------------- notebook 04: compartments


def test_compartments_use_one_detector_with_edges():
    Z = compartments(sizes=(1, 5, 4))  # the first layer alone: a boundary at the first score
    view = layer_measures.compartments(Z)
    assert np.allclose(view.cka, cka_matrix(Z)) and np.allclose(view.scores, transition_scores(cka_matrix(Z)))
    assert list(view.boundaries) == [0, 5]
    expected = find_boundaries(
        view.scores, relative_prominence=layer_measures.COMPARTMENT_PROMINENCE, include_edges=True
    )
    assert list(view.boundaries) == list(expected)


def test_boundary_table():
    Z = compartments()
    view = layer_measures.compartments(Z)
    row = layer_measures.boundary_table({("m", "entropy"): view}).iloc[0]
    n = len(Z)
    assert (row["model"], row["selection"], row["boundaries (after layer)"]) == ("m", "entropy", [3, 8])
    assert row["mean off-diagonal CKA"] == pytest.approx((view.cka.sum() - n) / (n * n - n))
    assert row["max delta"] == view.scores.max()
    assert row["delta contrast (max / median)"] == pytest.approx(view.scores.max() / np.median(view.scores))


def test_compartment_findings_put_both_selections_side_by_side():
    stats = {"m": {"all": layer_stats(compartments(seed=1)), "entropy": layer_stats(compartments(seed=2))}}
    views = {("m", sel): layer_measures.compartments(s.Z) for sel, s in stats["m"].items()}
    table = layer_measures.boundary_table(views)
    row = layer_measures.compartment_findings(stats, table).iloc[0]
    for sel in ("all", "entropy"):
        assert row[f"boundaries, {sel}"] == views["m", sel].boundaries.tolist()
        assert row[f"max delta, {sel}"] == views["m", sel].scores.max()
    curve = stats["m"]["entropy"].layer_entropy()
    assert row["largest S_1 step (after layer)"] == np.argmax(np.abs(np.diff(curve)))


# ---------------------------------------------------------------- notebook 03: regimes and variance


def test_regimes_follow_the_compartments():
    labels, how = layer_measures.regimes(compartments())
    assert list(labels) == ["early"] * 4 + ["middle"] * 5 + ["late"] * 3
    assert "after layers 3 and 8" in how
    edge, _ = layer_measures.regimes(compartments(sizes=(1, 5, 4)))  # a boundary at the edge counts too
    assert list(edge) == ["early"] + ["middle"] * 5 + ["late"] * 4


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_regimes_take_the_two_most_prominent_boundaries(seed):
    Z = compartments(seed=seed, sizes=(3, 3, 3, 3), overlap=(0, 0.7, 0))  # the middle border is soft
    assert list(layer_measures.compartments(Z).boundaries) == [2, 5, 8]
    labels, how = layer_measures.regimes(Z)
    assert list(labels) == ["early"] * 3 + ["middle"] * 6 + ["late"] * 3 and "after layers 2 and 8" in how


def test_regimes_fall_back_to_thirds_below_two_boundaries():
    Z = compartments(sizes=(5, 4))  # one border only
    assert list(layer_measures.compartments(Z).boundaries) == [4]
    labels, how = layer_measures.regimes(Z)
    assert list(labels) == ["early"] * 3 + ["middle"] * 3 + ["late"] * 3 and "thirds" in how and "[4]" in how


def test_variance_statistics():
    entropies = np.array([[1.0, 2.0, 0.5], [3.0, 2.0, 0.7], [2.0, 5.0, 0.6]])
    stats = layer_stats(np.ones((3, 2, 2)), entropies)
    assert np.allclose(layer_measures.cross_prompt_variance(stats), entropies.var(axis=0, ddof=1))
    labels = np.array(["early", "middle", "late"])
    reduction = layer_measures.variance_reduction(np.array([2.0, 4.0, 1.0]), np.array([1.0, 1.0, 1.5]), labels)
    assert reduction == pytest.approx({"early": 0.5, "middle": 0.75, "late": -0.5})


def _variance_stats():
    """Selections whose per-layer variances across prompts are (4, 2, 2, 1) x a factor."""

    def with_variance(scale):  # two prompts: variance = (difference)^2 / 2
        diff = np.sqrt(2 * scale * np.array([4.0, 2.0, 2.0, 1.0]))
        return layer_stats(random_layers(n_layers=4, rows=5, dim=8), np.stack([np.zeros(4), diff]), blocks=3)

    return {"m": {"all": with_variance(1.0), "entropy": with_variance(0.5), "random": with_variance(3.0)}}


def test_variance_reduction_table():
    stats = _variance_stats()
    labels = np.array(["early", "middle", "middle", "late"])
    table = layer_measures.variance_reduction_table(stats, {"m": (labels, "by hand")})
    assert list(table.selection) == ["entropy", "random", "all"] and set(table.regimes) == {"by hand"}
    entropy, random_, everything = (table.iloc[i] for i in range(3))
    for regime in ("early", "middle", "late"):
        assert entropy[f"{regime} reduction %"] == pytest.approx(50.0)
        assert random_[f"{regime} reduction %"] == pytest.approx(-200.0)
        assert np.isnan(everything[f"{regime} reduction %"])
    assert list(table.blocks) == [3, 3, 3]
    share = np.median(stats["m"]["random"].top_row_energy_share())
    assert random_["median top-row share"] == pytest.approx(share)


def test_variance_findings():
    stats = _variance_stats()
    labels = np.array(["early", "middle", "middle", "late"])
    findings = layer_measures.variance_findings(stats, {"m": (labels, "by hand")}).set_index("selection")
    assert list(findings.index) == ["entropy", "random"]
    assert findings.loc["entropy", "variance / all tokens' (whole depth)"] == pytest.approx(0.5)
    assert findings.loc["random", "variance / all tokens' (whole depth)"] == pytest.approx(3.0)
    assert findings.loc["entropy", "regimes where it is lower"] == "3 of 3"
    assert findings.loc["random", "regimes where it is lower"] == "0 of 3"


def test_variance_reduction_vs_paper():
    reductions = pd.DataFrame(
        [
            {
                "model": "m",
                "selection": "entropy",
                "early reduction %": 1.0,
                "middle reduction %": 2.0,
                "late reduction %": 3.0,
            },
            {
                "model": "m",
                "selection": "random",
                "early reduction %": -1.0,
                "middle reduction %": -2.0,
                "late reduction %": -3.0,
            },
        ]
    )
    table = layer_measures.variance_reduction_vs_paper(reductions)
    assert list(table.index) == ["paper: Qwen3-4B", "m"]
    assert list(table.loc["paper: Qwen3-4B"]) == [48.4, 45.8, 35.6] and list(table.loc["m"]) == [1.0, 2.0, 3.0]


# ---------------------------------------------------------------- notebook 05: Table 1


def test_selection_table_rows():
    Z = random_layers(n_layers=8, rows=6, dim=12, seed=4)
    table = layer_sets.selection_table(Z, set_sizes=(1, 2, 3))
    assert set(table.method) == set(layer_sets.TABLE1_METHODS)
    by = table.set_index(["method", "m"])
    assert by.loc[("EAGLE3", 3), "layers"] == (1, 3, 4) and by.loc[("EAGLE2", 1), "layers"] == (7,)
    assert by.loc[(layer_sets.EAGLE3_PAPER_READING, 3), "layers"] == (2, 4, 5)
    for m in (1, 2, 3):
        assert by.loc[("exhaustive", m), "entropy"] == pytest.approx(exhaustive(Z, m).entropy)
        assert by.loc[("ELSI", m), "entropy"] <= by.loc[("exhaustive", m), "entropy"] + 1e-12
    assert by.loc[("EAGLE3", 3), "entropy"] == pytest.approx(set_entropy(Z, (1, 3, 4)))
    assert by.loc[(layer_sets.EAGLE3_PAPER_READING, 3), "entropy"] == pytest.approx(set_entropy(Z, (2, 4, 5)))


@pytest.mark.parametrize(
    "n_layers, drafts_read, paper_reading", [(30, (1, 14, 26), (2, 15, 27)), (24, (1, 11, 20), (2, 12, 21))]
)
def test_table1_eagle3_is_the_set_drafts_read_and_the_papers_reading_is_its_own_row(
    n_layers, drafts_read, paper_reading
):
    """One EAGLE3 set everywhere: Table 1's "EAGLE3" row is `eagle3_layers` (the set notebook 06, the
    `elsi` command and the engines use: EAGLE's [2, N//2, N-3] as inputs of layers, in elsi's output
    ids), and the paper's reading of the rule as outputs is a different row under a different name."""
    Z = random_layers(n_layers=n_layers, rows=4, dim=6, seed=1)
    table = layer_sets.selection_table(Z, set_sizes=(1,))
    eagle3 = table[table.method == "EAGLE3"]
    paper = table[table.method == layer_sets.EAGLE3_PAPER_READING]
    assert len(eagle3) == len(paper) == 1 and eagle3.index[0] != paper.index[0]
    assert layer_sets.EAGLE3_PAPER_READING != "EAGLE3" and {"EAGLE3", layer_sets.EAGLE3_PAPER_READING} <= set(
        layer_sets.TABLE1_METHODS
    )
    assert eagle3.layers.iloc[0] == eagle3_layers(n_layers) == drafts_read
    assert paper.layers.iloc[0] == eagle3_paper_layers(n_layers) == paper_reading
    assert eagle3.m.iloc[0] == paper.m.iloc[0] == 3
    assert eagle3.entropy.iloc[0] == pytest.approx(set_entropy(Z, drafts_read))
    assert paper.entropy.iloc[0] == pytest.approx(set_entropy(Z, paper_reading))


@pytest.mark.parametrize("seed", [4, 5, 6])
def test_single_layer_rule_takes_the_best_layer_from_the_middle_on(seed):
    Z = random_layers(n_layers=9, rows=6, dim=12, seed=seed)
    table = layer_sets.selection_table(Z, set_sizes=(1, 2))
    single = single_layer_entropies(Z)
    rule = table[table.method == layer_sets.SINGLE_LAYER_RULE]
    assert len(rule) == 1 and rule.m.iloc[0] == 1
    expected = 4 + int(np.argmax(single[4:]))  # N // 2 = 4
    assert rule.layers.iloc[0] == (expected,) and rule.entropy.iloc[0] == pytest.approx(single[expected])
    unrestricted = table[(table.method == "ELSI") & (table.m == 1)]
    assert unrestricted.layers.iloc[0] == (int(np.argmax(single)),)
    assert table.index[table.method == layer_sets.SINGLE_LAYER_RULE][0] == unrestricted.index[0] + 1  # right below


def test_table1_over_models_and_settings():
    stats = {
        name: {
            "entropy": layer_stats(random_layers(n_layers=8, rows=5, dim=8, seed=s)),
            "entropy_no_template": layer_stats(random_layers(n_layers=8, rows=5, dim=8, seed=s + 10)),
        }
        for name, s in (("b", 1), ("a", 2))
    }
    table = layer_sets.table1(stats, set_sizes=(1, 2, 3))
    assert list(table.columns) == ["model", "setting", "method", "m", "layers", "entropy"]
    assert list(dict.fromkeys(table.model)) == ["b", "a"]
    assert list(dict.fromkeys(table.setting)) == list(layer_sets.TABLE1_SETTINGS)
    frob = table[
        (table.model == "a") & (table.setting == "frobenius") & (table.method == "exhaustive") & (table.m == 2)
    ]
    assert frob.entropy.iloc[0] == pytest.approx(exhaustive(stats["a"]["entropy"].Z, 2, normalize="frobenius").entropy)
    plain = table[(table.model == "b") & (table.setting == "no_template") & (table.method == "ELSI") & (table.m == 3)]
    assert plain.layers.iloc[0] == elsi(stats["b"]["entropy_no_template"].Z, 3).layers


def test_side_by_side_pivot():
    stats = {
        "m": {
            "entropy": layer_stats(random_layers(n_layers=8, rows=5, dim=8, seed=3)),
            "entropy_no_template": layer_stats(random_layers(n_layers=8, rows=5, dim=8, seed=4)),
        }
    }
    table = layer_sets.table1(stats, set_sizes=(1, 2, 3))
    wide = layer_sets.side_by_side(table)
    assert list(wide.columns) == ["model", "method", "m", "paper", "no_template", "frobenius"]
    assert len(wide) == len(table) // 3
    assert list(wide[wide.m == 1].method) == [
        "EAGLE2",
        "ELSI",
        layer_sets.SINGLE_LAYER_RULE,
        "ELSI-C",
        "exhaustive",
        "lowest-entropy control",
    ]
    assert list(wide[wide.m == 3].method) == [
        "EAGLE3",
        layer_sets.EAGLE3_PAPER_READING,
        "ELSI",
        "ELSI-C",
        "exhaustive",
        "lowest-entropy control",
    ]
    assert wide.method.notna().all()
    assert list(wide.m) == sorted(wide.m)
    row = table[(table.setting == "frobenius") & (table.method == "ELSI") & (table.m == 2)].iloc[0]
    cell = wide[(wide.method == "ELSI") & (wide.m == 2)].frobenius.iloc[0]
    assert cell == f"{list(row.layers)} {row.entropy:.3f}"


def test_table1_findings():
    stats = {
        "m": {
            "entropy": layer_stats(random_layers(n_layers=8, rows=5, dim=8, seed=3)),
            "entropy_no_template": layer_stats(random_layers(n_layers=8, rows=5, dim=8, seed=4)),
        }
    }
    table = layer_sets.table1(stats, set_sizes=(1, 2, 3))
    findings = layer_sets.table1_findings(table)
    assert [tuple(r) for r in findings[["model", "setting"]].to_numpy()] == [
        ("m", s) for s in layer_sets.TABLE1_SETTINGS
    ]
    row = findings.iloc[2]  # frobenius
    Z = stats["m"]["entropy"].Z
    chosen = elsi(Z, 3, normalize="frobenius")
    assert row["ELSI set, m=3"] == chosen.layers and row["ELSI, m=3"] == pytest.approx(chosen.entropy)
    eagle3 = set_entropy(Z, (1, 3, 4), normalize="frobenius")  # the set drafts read, not the paper's reading
    assert row["EAGLE3"] == pytest.approx(eagle3) and row["ELSI / EAGLE3"] == pytest.approx(chosen.entropy / eagle3)
    assert row["EAGLE3 set"] == (1, 3, 4) and row["paper's reading, set"] == (2, 4, 5)
    assert row[layer_sets.EAGLE3_PAPER_READING] == pytest.approx(set_entropy(Z, (2, 4, 5), normalize="frobenius"))
    single = single_layer_entropies(Z)
    assert row["ELSI layer, m=1"] == np.argmax(single) and row["EAGLE2"] == pytest.approx(single[-1])
    assert row["from N//2, layer"] == 4 + np.argmax(single[4:]) and row["from N//2"] == pytest.approx(single[4:].max())


def test_optimum_gaps():
    table = pd.DataFrame(
        [
            {"model": "m", "setting": "paper", "method": "exhaustive", "m": 2, "layers": (1, 4), "entropy": 1.0},
            {"model": "m", "setting": "paper", "method": "ELSI", "m": 2, "layers": (1, 4), "entropy": 1.0},
            {"model": "m", "setting": "paper", "method": "ELSI-C", "m": 2, "layers": (0, 4), "entropy": 0.75},
            {"model": "m", "setting": "paper", "method": "EAGLE3", "m": 3, "layers": (0, 1, 2), "entropy": 0.1},
        ]
    )
    gaps = layer_sets.optimum_gaps(table).set_index("method")
    assert list(gaps.index) == ["ELSI", "ELSI-C"]
    assert gaps.loc["ELSI", "optimal"] and gaps.loc["ELSI", "gap"] == 0
    assert not gaps.loc["ELSI-C", "optimal"] and gaps.loc["ELSI-C", "gap"] == pytest.approx(0.25)
    assert gaps.loc["ELSI-C", "optimum"] == (1, 4)


def test_path_start_is_where_the_chosen_path_begins():
    for seed in range(4):
        selection = elsi(random_layers(n_layers=9, rows=6, dim=12, seed=seed), 3, k_beam=4, k_expand=2)
        layer, rank = layer_sets.path_start(selection)
        assert (layer,) == selection.path()[0] and selection.beams[1][rank].layers == (layer,)


def _bootstrap_stats(seed=0):
    rng = np.random.default_rng(seed)
    sums = rng.normal(size=(12, 6, 4, 8)).astype(np.float32)  # 12 samples, N=6, B=4, d=8
    blocks = rng.integers(1, 4, size=12)
    return LayerStats(
        Z=sums.astype(np.float64).sum(0) / blocks.sum(),
        final_norm=np.ones((4, 8)),
        sample_entropy=np.ones((12, 6)),
        sample_index=np.arange(12),
        abs_max=np.ones((6, 8)),
        abs_sum=np.ones((6, 8)),
        sample_sums=sums,
        sample_blocks=blocks,
    )


def test_bootstrap_counts_choices_reproducibly():
    stats = _bootstrap_stats()
    first = layer_measures.bootstrap_choices(stats, 2, n_boot=13, seed=1, progress=False)
    again = layer_measures.bootstrap_choices(stats, 2, n_boot=13, seed=1, progress=False)
    assert first.equals(again) and first["count"].sum() == 13
    assert first.share.sum() == pytest.approx(1.0) and all(len(l) == 2 for l in first.layers)
    weights = np.random.default_rng(1).multinomial(12, np.full(12, 1 / 12), size=13)
    expected = [elsi(stats.resampled_Z(w), 2).layers for w in weights]
    assert dict(zip(first.layers, first["count"])) == {s: expected.count(s) for s in set(expected)}


def test_bootstrap_table_marks_the_full_choice():
    stats = {"a": {"entropy": _bootstrap_stats(0)}, "b": {"entropy": _bootstrap_stats(1)}}
    table = layer_sets.bootstrap_table(stats, 2, n_boot=11, seed=2, progress=False)
    assert list(table.columns) == ["model", "layers", "count", "share", "chosen on all prompts"]
    for name, by_selection in stats.items():
        rows = table[table.model == name]
        choices = layer_measures.bootstrap_choices(by_selection["entropy"], 2, n_boot=11, seed=2, progress=False)
        assert list(rows.layers) == list(choices.layers) and list(rows["count"]) == list(choices["count"])
        full = elsi(by_selection["entropy"].Z, 2).layers
        assert list(rows["chosen on all prompts"]) == [l == full for l in rows.layers]


def test_wave_findings_give_the_peak_wherever_it_is():
    """Notebook 01's claims compare the trough and the template-excluded range with the peak of S_1,
    which need not be the first layer's."""
    Z = random_layers(n_layers=6, rows=5, dim=8, seed=8)
    Z[0] = np.outer(np.ones(5), Z[0, 0])  # one direction: S_1 = 0 at the first layer
    paper = layer_stats(Z)
    row = layer_measures.wave_findings({"m": {"entropy": paper, "entropy_no_template": layer_stats(seed=9)}}).iloc[0]
    curve = paper.layer_entropy()
    assert row["argmax layer"] != 0 and row["S_1 first layer"] < row["max S_1"]
    assert row["max S_1"] == pytest.approx(curve.max()) and row["max S_1"] == curve[row["argmax layer"]]
