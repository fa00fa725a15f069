import numpy as np
import pytest

from elsi_lib import LayerStats, elsi, exhaustive, set_entropy, study
from elsi_lib.select import single_layer_entropies

from conftest import random_layers


def compartments(seed=0, sizes=(4, 5, 3), rows=16, dim=40):
    """Z whose layers come in blocks that share a basis: three compartments with sharp borders."""
    rng = np.random.default_rng(seed)
    layers = []
    for size in sizes:
        base = rng.normal(size=(rows, dim))
        layers += [base + 0.05 * rng.normal(size=(rows, dim)) for _ in range(size)]
    return np.stack(layers)  # (N, B, d)


def test_pair_entropy_table_is_the_pair_set_entropy():
    Z = random_layers(n_layers=7, rows=6, dim=12, seed=3)
    seeds, table = study.pair_entropy_table(Z, seeds=3)
    single = single_layer_entropies(Z)
    assert list(seeds) == list(np.argsort(-single)[:3]) and table.shape == (3, 7)
    for row, i in enumerate(seeds):
        for j in range(7):
            expected = single[i] if i == j else set_entropy(Z, [i, j])
            assert table[row, j] == pytest.approx(expected, rel=1e-12)


def test_regimes_follow_cka_boundaries_or_fall_back_to_thirds():
    labels, how = study.regimes(compartments())
    assert list(labels) == ["early"] * 4 + ["middle"] * 5 + ["late"] * 3
    assert "after layers 3 and 8" in how
    flat, how = study.regimes(compartments(sizes=(9,)))  # one compartment: no peak
    assert list(flat) == ["early"] * 3 + ["middle"] * 3 + ["late"] * 3 and "thirds" in how


def test_variance_statistics():
    entropies = np.array([[1.0, 2.0, 0.5], [3.0, 2.0, 0.7], [2.0, 5.0, 0.6]])
    stats = LayerStats(Z=np.ones((3, 2, 2)), final_norm=np.ones((2, 2)), sample_entropy=entropies,
                       sample_index=np.arange(3), abs_max=np.ones((3, 2)), abs_sum=np.ones((3, 2)))
    assert np.allclose(study.cross_prompt_variance(stats), entropies.var(axis=0, ddof=1))
    labels = np.array(["early", "middle", "late"])
    reduction = study.variance_reduction(np.array([2.0, 4.0, 1.0]), np.array([1.0, 1.0, 1.5]), labels)
    assert reduction == pytest.approx({"early": 0.5, "middle": 0.75, "late": -0.5})


def test_selection_table_rows():
    Z = random_layers(n_layers=8, rows=6, dim=12, seed=4)
    table = study.selection_table(Z, sizes=(1, 2, 3))
    assert set(table.method) == {"EAGLE2", "EAGLE3", "ELSI", "ELSI-C", "exhaustive", "lowest-entropy control"}
    by = table.set_index(["method", "m"])
    assert by.loc[("EAGLE3", 3), "layers"] == (2, 4, 5) and by.loc[("EAGLE2", 1), "layers"] == (7,)
    for m in (1, 2, 3):
        assert by.loc[("exhaustive", m), "entropy"] == pytest.approx(exhaustive(Z, m).entropy)
        assert by.loc[("ELSI", m), "entropy"] <= by.loc[("exhaustive", m), "entropy"] + 1e-12
    assert by.loc[("EAGLE3", 3), "entropy"] == pytest.approx(set_entropy(Z, (2, 4, 5)))


def test_bootstrap_counts_choices_reproducibly():
    rng = np.random.default_rng(0)
    sums = rng.normal(size=(12, 6, 4, 8)).astype(np.float32)  # 12 samples, N=6, B=4, d=8
    blocks = rng.integers(1, 4, size=12)
    stats = LayerStats(Z=sums.astype(np.float64).sum(0) / blocks.sum(), final_norm=np.ones((4, 8)),
                       sample_entropy=np.ones((12, 6)), sample_index=np.arange(12), abs_max=np.ones((6, 8)),
                       abs_sum=np.ones((6, 8)), sample_sums=sums, sample_blocks=blocks)
    first = study.bootstrap_choices(stats, 2, n_boot=13, seed=1, progress=False)
    again = study.bootstrap_choices(stats, 2, n_boot=13, seed=1, progress=False)
    assert first.equals(again) and first["count"].sum() == 13
    assert first.share.sum() == pytest.approx(1.0) and all(len(l) == 2 for l in first.layers)
    weights = np.random.default_rng(1).multinomial(12, np.full(12, 1 / 12), size=13)
    expected = [elsi(stats.resampled_Z(w), 2).layers for w in weights]
    assert dict(zip(first.layers, first["count"])) == {s: expected.count(s) for s in set(expected)}
