import itertools

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from elsi_lib import elsi, elsi_c, exhaustive, lowest_entropy_layers, set_entropy, single_layer_entropies
from elsi_lib.selection.bounds import shannon_upper_bound
from elsi_lib.selection.scorer import SetScorer
from elsi_lib.selection.select import conditional_transition_scores

from conftest import random_layers


def brute_force(Z, m, normalize="none"):
    """Plain reference: every m-set scored by set_entropy, best entropy then smallest set."""
    sets = itertools.combinations(range(len(Z)), m)
    return max(sets, key=lambda s: (set_entropy(Z, s, normalize=normalize), tuple(-l for l in s)))


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 4), st.sampled_from(["none", "frobenius"]))
def test_wide_beam_equals_exhaustive(seed, m, normalize):
    Z = random_layers(n_layers=7, seed=seed)
    wide = elsi(Z, m, k_beam=35, k_expand=7, normalize=normalize)  # 35 = C(7, 3) covers every set
    best = exhaustive(Z, m, normalize=normalize)
    assert wide.layers == best.layers == brute_force(Z, m, normalize)
    assert wide.entropy == pytest.approx(best.entropy, rel=1e-12)


@pytest.mark.parametrize("method", [elsi, elsi_c])
@pytest.mark.parametrize("m", [1, 2, 3, 5])
def test_returns_valid_m_set(method, m):
    Z = random_layers(n_layers=12, seed=m)
    result = method(Z, m, k_beam=4)
    assert len(result.layers) == m == len(set(result.layers))
    assert all(0 <= l < 12 for l in result.layers)
    assert result.layers == tuple(sorted(result.layers))
    assert result.entropy == pytest.approx(set_entropy(Z, result.layers), rel=1e-12)
    assert result.entropy <= exhaustive(Z, m).entropy + 1e-12
    assert all(len(entries) <= 4 for entries in result.beams.values())


@pytest.mark.parametrize("method", [elsi, elsi_c])
@pytest.mark.parametrize("normalize", ["none", "frobenius"])
def test_fast_path_equals_naive_path(method, normalize):
    Z = random_layers(n_layers=10, rows=8, dim=24, seed=2)
    fast = method(Z, 3, normalize=normalize)
    naive = method(Z, 3, normalize=normalize, backend="naive")
    assert fast.layers == naive.layers
    for depth in fast.beams:
        assert [e.layers for e in fast.beams[depth]] == [e.layers for e in naive.beams[depth]]
        for a, b in zip(fast.beams[depth], naive.beams[depth]):
            assert a.entropy == pytest.approx(b.entropy, rel=1e-9)
    ex_fast, ex_naive = exhaustive(Z, 2, normalize=normalize), exhaustive(Z, 2, normalize=normalize, backend="naive")
    assert ex_fast.layers == ex_naive.layers and ex_fast.entropy == pytest.approx(ex_naive.entropy, rel=1e-9)


def test_beam_follows_algorithm_1():
    Z = random_layers(n_layers=9, seed=11)
    result = elsi(Z, 3, k_beam=3, k_expand=2)
    singles = single_layer_entropies(Z)
    assert [e.layers[0] for e in result.beams[1]] == list(np.argsort(-singles)[:3])
    for depth in (2, 3):
        expected = {}
        for member in result.beams[depth - 1]:
            others = [j for j in range(9) if j not in member.layers]
            scored = sorted(
                ((set_entropy(Z, member.layers + (j,)), tuple(sorted(member.layers + (j,)))) for j in others),
                key=lambda t: (-t[0], t[1]),
            )[:2]
            for entropy, layers in scored:
                expected.setdefault(layers, entropy)
        top = sorted(expected.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
        assert [e.layers for e in result.beams[depth]] == [layers for layers, _ in top]
        assert all(e.parent in [p.layers for p in result.beams[depth - 1]] for e in result.beams[depth])
    assert result.path()[-1] == result.layers and len(result.path()) == 3
    frame = result.frontier()
    assert frame["on_path"].sum() == 3 and set(frame["depth"]) == {1, 2, 3}


def test_elsi_c_pool_comes_from_conditional_transitions():
    Z = random_layers(n_layers=9, seed=5)
    result = elsi_c(Z, 2, k_beam=2, k_pool=3)
    from elsi_lib.selection.cka import centered_gram_products, conditional_cka_matrix

    P = centered_gram_products(Z)
    for entry in result.beams[2]:
        delta = conditional_transition_scores(conditional_cka_matrix(P, entry.parent))
        assert delta[0] == 0.0
        pool = [r for r in np.argsort(-delta, kind="stable") if r not in entry.parent][:3]
        assert set(entry.layers) - set(entry.parent) <= set(int(r) for r in pool)


def test_min_single_layer_rule():
    Z = random_layers(n_layers=10, seed=1)
    Z[1] = np.random.default_rng(0).normal(size=Z[1].shape)  # isotropic, no shared direction: the best
    free = elsi(Z, 1)
    assert free.layers == (1,)
    ruled = elsi(Z, 1, min_single_layer=5)
    assert ruled.layers[0] >= 5
    assert ruled.entropy == max(set_entropy(Z, (l,)) for l in range(5, 10))
    assert free.entropy >= ruled.entropy


def test_negative_control_is_the_lowest_entropy_layers():
    Z = random_layers(n_layers=9, seed=3)
    low = lowest_entropy_layers(Z, 3)
    assert set(low) == set(np.argsort(single_layer_entropies(Z))[:3])


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda Z: elsi(Z, 0), "m must be"),
        (lambda Z: elsi(Z, 9), "m must be"),
        (lambda Z: elsi_c(Z, 2, k_beam=0), "k_beam"),
        (lambda Z: elsi(Z, 2, k_expand=0), "k_expand"),
        (lambda Z: elsi_c(Z, 2, k_pool=0), "k_pool"),
        (lambda Z: exhaustive(Z, 9), "m must be"),
        (lambda Z: elsi(Z[0], 1), "shape"),
        (lambda Z: elsi(np.where(Z > 2, np.inf, Z), 2), "NaN or Inf"),
        (lambda Z: elsi(Z, 1, min_single_layer=8), "min_single_layer"),
        (lambda Z: elsi(Z, 2, backend="gpu"), "backend"),
    ],
)
def test_bad_input(Z, call, message):
    with pytest.raises(ValueError, match=message):
        call(Z)


@pytest.mark.parametrize("shared", [0.0, 1.0, 4.0])
@pytest.mark.parametrize("normalize", ["none", "frobenius"])
def test_bound_pruning_is_exact_and_skips_sets(shared, normalize):
    """The gram backend skips sets whose upper bound rules them out (Shannon only); the beams, the
    chosen sets and their entropies are the naive backend's, which scores every set. With and
    without a dominant shared direction (which the eigenvalue bracket exploits)."""
    Z = random_layers(n_layers=16, rows=8, dim=64, seed=5, shared=shared)
    runs = (
        lambda b: elsi(Z, 3, normalize=normalize, backend=b),
        lambda b: elsi_c(Z, 3, normalize=normalize, backend=b),
        lambda b: exhaustive(Z, 3, normalize=normalize, backend=b),
    )
    for run in runs:
        fast, naive = run("gram"), run("naive")
        assert fast.n_evaluated <= naive.n_evaluated
        for depth in naive.beams:
            assert [(e.layers, e.parent) for e in fast.beams[depth]] == [
                (e.layers, e.parent) for e in naive.beams[depth]
            ]
            assert [e.entropy for e in fast.beams[depth]] == pytest.approx(
                [e.entropy for e in naive.beams[depth]], rel=1e-9
            )
    assert exhaustive(Z, 3, normalize=normalize).n_evaluated < 100  # of C(16, 3) = 560
    renyi = elsi(Z, 3, alpha=2.0)  # no bound for alpha != 1: every candidate is scored
    assert renyi.n_evaluated == elsi(Z, 3, alpha=2.0, backend="naive").n_evaluated


def test_upper_bounds_lie_between_the_entropy_and_the_purity_bound():
    """Every set's bound is at least its entropy and at most the purity bound; with a dominant
    shared direction the eigenvalue bracket makes it strictly tighter."""
    Z = random_layers(n_layers=12, rows=8, dim=64, seed=2, shared=4.0)
    scorer = SetScorer(Z)
    sets = list(itertools.combinations(range(12), 2))
    bounds, exact = scorer.upper_bounds(sets), scorer.entropies(sets)
    grams = np.array([scorer.grams[list(s)].sum(axis=0) for s in sets])
    purity = (grams * grams).sum(axis=(1, 2)) / np.trace(grams, axis1=1, axis2=2) ** 2
    assert np.all(exact <= bounds)
    assert np.all(bounds <= shannon_upper_bound(purity, 8) * (1 + 2e-9))
    assert np.mean(bounds < shannon_upper_bound(purity, 8)) > 0.9


def test_upper_bounds_in_chunks_equal_one_pass(monkeypatch):
    from elsi_lib.selection import scorer

    Z = random_layers(n_layers=10, rows=8, dim=32, seed=4, shared=3.0)
    sets = list(itertools.combinations(range(10), 3))
    whole = SetScorer(Z).upper_bounds(sets)
    monkeypatch.setattr(scorer, "_CHUNK", 7)
    np.testing.assert_array_equal(SetScorer(Z).upper_bounds(sets), whole)
    assert exhaustive(Z, 3).layers == exhaustive(Z, 3, backend="naive").layers


# ---------------------------------------------------------------- argument types, checked before any work


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda Z: elsi(Z, True), "m must be"),
        (lambda Z: elsi(Z, 2.0), "m must be"),
        (lambda Z: exhaustive(Z, np.True_), "m must be"),
        (lambda Z: lowest_entropy_layers(Z, True), "m must be"),
        (lambda Z: elsi(Z, 2, k_beam=True), "k_beam"),
        (lambda Z: elsi(Z, 2, k_expand=True), "k_expand"),
        (lambda Z: elsi_c(Z, 2, k_pool=True), "k_pool"),
        (lambda Z: elsi_c(Z, 2, k_beam=2.5), "k_beam"),
        (lambda Z: exhaustive(Z, 2, keep=0), "keep"),
        (lambda Z: exhaustive(Z, 2, keep=-1), "keep"),
        (lambda Z: exhaustive(Z, 2, keep=2.5), "keep"),
        (lambda Z: exhaustive(Z, 2, keep=True), "keep"),
        (lambda Z: exhaustive(Z, 2, max_sets=0), "max_sets"),
        (lambda Z: elsi(Z, 1, min_single_layer=True), "min_single_layer"),
        (lambda Z: elsi(Z, 2, min_single_layer=2.5), "min_single_layer"),
        (lambda Z: elsi_c(Z, 2, min_single_layer=-1), "min_single_layer"),
        (lambda Z: elsi(Z, 2, min_single_layer=8), "min_single_layer"),
        (lambda Z: elsi(Z, 2, alpha=True), "alpha"),
    ],
)
def test_bad_argument_types_fail_before_any_work(Z, call, message, monkeypatch):
    from elsi_lib.selection import select

    def no_work(*args, **kwargs):
        raise AssertionError("work started before the arguments were checked")

    monkeypatch.setattr(select, "SetScorer", no_work)
    monkeypatch.setattr(select, "single_layer_entropies", no_work)
    with pytest.raises((ValueError, TypeError), match=message):
        call(Z)


def test_integer_like_arguments_still_work(Z):
    numpy_counts = elsi(Z, np.int64(2), k_beam=np.int32(3), k_expand=np.int64(2))
    assert numpy_counts.layers == elsi(Z, 2, k_beam=3, k_expand=2).layers
    assert exhaustive(Z, 2, keep=np.int64(3)).beams[2] == exhaustive(Z, 2, keep=3).beams[2]
    assert len(exhaustive(Z, 2, keep=100).beams[2]) == 28  # keep beyond C(8, 2): every set


@settings(max_examples=20, deadline=None)
@given(st.integers(-200, 200), st.floats(1.0, 9.9), st.integers(0, 50), st.sampled_from(["none", "frobenius"]))
def test_selection_is_scale_invariant(exponent, mantissa, seed, normalize):
    """The same sets, and their entropies to round-off, for Z at any scale from 1e-200 to 1e200."""
    Z = random_layers(n_layers=9, seed=seed)
    scaled = mantissa * 10.0**exponent * Z
    for run in (
        lambda Z: elsi(Z, 3, normalize=normalize),
        lambda Z: elsi_c(Z, 3, normalize=normalize),
        lambda Z: exhaustive(Z, 2, normalize=normalize, keep=36),
    ):
        at_one, at_scale = run(Z), run(scaled)
        for depth in at_one.beams:
            # sets whose entropies tie to round-off may swap places: order by (entropy to 1e-9, layers)
            def ordered(beam):
                return sorted(beam, key=lambda e: (-round(e.entropy, 9), e.layers))

            assert [e.layers for e in ordered(at_scale.beams[depth])] == [
                e.layers for e in ordered(at_one.beams[depth])
            ]
            np.testing.assert_allclose(
                [e.entropy for e in ordered(at_scale.beams[depth])],
                [e.entropy for e in ordered(at_one.beams[depth])],
                rtol=1e-12,
            )
