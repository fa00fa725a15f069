"""The task probe (elsi_lib.selection.probe): the Gram closed form against explicit ridge fits, the
reduction against no reduction, and selection against exhaustive search on planted cases."""

import itertools

import numpy as np
import pytest

from elsi_lib.selection import probe as P


def planted(n=600, n_heldout=300, N=6, d=8, signal=(1, 4), noise=0.1, seed=0):
    """Features x (n, N + 1, d) (block N the embedding) and targets y that are a linear map of the
    `signal` layers and the embedding, plus noise; layers are correlated through a shared factor."""
    rng = np.random.default_rng(seed)
    total = n + n_heldout
    shared = rng.normal(size=(total, d))
    x = rng.normal(size=(total, N + 1, d)) + 0.5 * shared[:, None, :]
    x *= rng.uniform(0.5, 20.0, size=(1, N + 1, 1))  # blocks at very different scales (as sinks make them)
    maps = rng.normal(size=(N + 1, d, d))
    y = sum(x[:, b] @ maps[b] for b in [*signal, N]) / 10 + noise * rng.normal(size=(total, d)) + 3.0
    return x[:n], y[:n], x[n:], y[n:]


def explicit_error(x, y, xh, yh, layers, ridge, rank):
    """The probe's score computed the long way: reduce with the fitted reduction, fit the ridge on the
    explicit matrix, predict the held-out tokens, relative squared error."""
    _, reduction = P.probe_stats(x, y, xh, yh, rank)
    N = x.shape[1] - 1
    pick = lambda z: z.reshape(len(z), N + 1, -1)[:, [*layers, N]].reshape(len(z), -1)  # noqa: E731
    Z, Zh = pick(reduction.apply(x)), pick(reduction.apply(xh))
    yc, yhc = y - reduction.y_mean, yh - reduction.y_mean
    W = np.linalg.solve(Z.T @ Z + ridge * len(Z) * np.eye(Z.shape[1]), Z.T @ yc)
    return np.sum((yhc - Zh @ W) ** 2) / np.sum(yhc**2), W, reduction


@pytest.mark.parametrize("rank", [3, 8])
def test_closed_form_equals_the_explicit_fit(rank):
    x, y, xh, yh = planted()
    stats, _ = P.probe_stats(x, y, xh, yh, rank)
    sets = [(0,), (1, 4), (2, 3, 5), (0, 1, 2, 3, 4, 5)]
    for ridge in (1e-4, 0.1):
        got = P.set_errors(stats, sets, ridge)
        want = [explicit_error(x, y, xh, yh, s, ridge, rank)[0] for s in sets]
        assert got == pytest.approx(want, rel=1e-9, abs=1e-12)
        W = P.fit_set(stats, (1, 4), ridge)
        assert W == pytest.approx(explicit_error(x, y, xh, yh, (1, 4), ridge, rank)[1], rel=1e-8, abs=1e-10)


def test_the_callers_features_are_left_as_they_were():
    x, y, xh, yh = planted()
    copies = [a.copy() for a in (x, y, xh, yh)]
    P.probe_stats(x, y, xh, yh, 4)
    assert all(np.array_equal(a, b) for a, b in zip((x, y, xh, yh), copies))


def test_without_reduction_the_probe_is_ridge_on_standardised_features():
    """rank = d keeps every component: an orthogonal rotation of each standardised block, which a ridge
    map does not see. The score is then ridge regression on the standardised raw features."""
    x, y, xh, yh = planted(d=5)
    stats, reduction = P.probe_stats(x, y, xh, yh, rank=5)
    assert reduction.kept_variance == pytest.approx(np.ones(7))
    layers, ridge = (1, 3), 0.01
    means, scales = x.mean(0), np.sqrt(((x - x.mean(0)) ** 2).mean(axis=(0, 2)))
    standard = lambda a: ((a - means) / scales[:, None])[:, [*layers, 6]].reshape(len(a), -1)  # noqa: E731
    X, Xh, ym = standard(x), standard(xh), y.mean(0)
    W = np.linalg.solve(X.T @ X + ridge * len(X) * np.eye(X.shape[1]), X.T @ (y - ym))
    want = np.sum((yh - ym - Xh @ W) ** 2) / np.sum((yh - ym) ** 2)
    assert P.set_errors(stats, [layers], ridge)[0] == pytest.approx(want, rel=1e-9)


def test_the_planted_layers_win_and_the_ranking_is_exhaustive():
    x, y, xh, yh = planted(signal=(1, 4))
    stats, _ = P.probe_stats(x, y, xh, yh, rank=8)
    sets, errors = P.probe_ranking(stats, 2, 1e-3)
    assert sets[0] == (1, 4) and len(sets) == 15 and (np.diff(errors) >= 0).all()
    every = list(itertools.combinations(range(6), 2))
    assert dict(zip(sets, errors)) == pytest.approx(dict(zip(every, P.set_errors(stats, every, 1e-3))))
    assert P.probe_beam(stats, 2, 1e-3, k_beam=3)[0] == (1, 4)
    best3, _ = P.probe_ranking(stats, 3, 1e-3)
    assert set(best3[0]) >= {1, 4}
    with pytest.raises(ValueError, match="exceed limit"):
        P.probe_ranking(stats, 3, 1e-3, limit=10)


def test_beam_equals_exhaustive_on_random_cases():
    for seed in range(3):
        x, y, xh, yh = planted(N=7, signal=(seed, 5), seed=seed)
        stats, _ = P.probe_stats(x, y, xh, yh, rank=4)
        for m in (1, 2, 3):
            best, error = P.probe_beam(stats, m, 1e-2, k_beam=35)  # a beam as wide as every set: exact
            sets, errors = P.probe_ranking(stats, m, 1e-2)
            assert best == sets[0] and error == pytest.approx(errors[0])


def test_ridge_is_chosen_by_held_out_error():
    x, y, xh, yh = planted(n=60, n_heldout=300, d=8, noise=1.0)  # few tokens: a small ridge overfits
    stats, _ = P.probe_stats(x, y, xh, yh, rank=8)
    best, means = P.choose_ridge(stats, [(1, 4), (0, 2)], grid=(1e-8, 1e-2, 1e3))
    assert best == min(means, key=means.get) and means[1e-8] > means[best] and means[1e3] > means[best]
    with pytest.raises(ValueError, match="ridge must be positive"):
        P.set_errors(stats, [(1,)], 0.0)


def test_agreement_is_the_share_of_matching_next_tokens():
    x, y, xh, yh = planted()
    _, W, reduction = explicit_error(x, y, xh, yh, (1, 4), 1e-3, 8)
    lm_head = np.random.default_rng(5).normal(size=(50, 8))
    target_next = np.argmax(yh @ lm_head.T, axis=1)
    stats, _ = P.probe_stats(x, y, xh, yh, 8, heldout_next=target_next)
    share = P.agreement(stats, (1, 4), 1e-3, lm_head)
    N = x.shape[1] - 1
    Zh = reduction.apply(xh).reshape(len(xh), N + 1, -1)[:, [1, 4, N]].reshape(len(xh), -1)
    assert share == pytest.approx(
        np.mean(np.argmax((Zh @ W + reduction.y_mean) @ lm_head.T, 1) == target_next), abs=1 / len(xh)
    )  # float32 held-out features: a near-tie may flip
    assert share > 0.5  # the planted layers predict well
    assert P.agreement(stats, (1, 4), 1e-3, lm_head, chunk=7) == share  # chunks of rows count the same
    assert P.agreement(stats, (0,), 1e-3, lm_head) < share
    with pytest.raises(ValueError, match="no next tokens"):
        P.agreement(P.probe_stats(x, y, xh, yh, 8)[0], (1, 4), 1e-3, lm_head)


def test_bad_input_is_refused():
    x, y, xh, yh = planted()
    with pytest.raises(ValueError, match="rank must be in 1..8"):
        P.probe_stats(x, y, xh, yh, rank=9)
    x[:, 2] = 1.0
    with pytest.raises(ValueError, match="block 2 is constant"):
        P.probe_stats(x, y, xh, yh, rank=4)


def test_probe_choice_finds_the_planted_set_exhaustively_or_by_beam():
    x, y, xh, yh = planted(N=8, signal=(2, 6))
    stats, _ = P.probe_stats(x, y, xh, yh, rank=8)
    exact = P.probe_choice(stats, 2)
    assert exact.layers == (2, 6) and exact.search == "exhaustive" and exact.ridge in exact.ridge_errors
    assert exact.error == pytest.approx(P.set_errors(stats, [(2, 6)], exact.ridge)[0])
    beam = P.probe_choice(stats, 2, exhaustive_limit=10)
    assert beam.search == "beam" and beam.layers == (2, 6)
    with pytest.raises(ValueError, match="m must be in 1..8"):
        P.probe_choice(stats, 9)


@pytest.mark.parametrize(
    "array, block, message",
    [
        ("heldout_x", 3, r"held-out features .*1 in layer 3\b"),
        ("x", 6, r"training features .*1 in the embedding of the next token"),
        ("y", None, r"training targets .*1 value"),
        ("heldout_y", None, r"held-out targets .*1 value"),
    ],
)
def test_non_finite_features_are_refused_naming_where_they_are(array, block, message):
    """One NaN (or inf) anywhere is refused at the start, naming where it is: in the Gram statistics
    every set holding its layer would score NaN and sort last, and another set win with no warning."""
    x, y, xh, yh = planted()
    arrays = {"x": x, "y": y, "heldout_x": xh, "heldout_y": yh}
    target = arrays[array]
    if block is None:
        target[5, 2] = np.inf
    else:
        target[5, block, 2] = np.nan
    with pytest.raises(ValueError, match=message):
        P.probe_stats(arrays["x"], arrays["y"], arrays["heldout_x"], arrays["heldout_y"], rank=4)


def test_non_finite_set_errors_are_never_sorted():
    """Statistics that hold a NaN (read from elsewhere, or a degenerate held-out side) give a
    non-finite error for some sets: ranking, beam and choice refuse, naming a set, never rank it last."""
    import dataclasses

    x, y, xh, yh = planted(signal=(1, 4))
    stats, _ = P.probe_stats(x, y, xh, yh, rank=4)
    gram = stats.heldout_gram.copy()
    gram[stats.columns((1,))[0], stats.columns((1,))[0]] = np.nan  # every set holding layer 1
    broken = dataclasses.replace(stats, heldout_gram=gram)
    with pytest.raises(FloatingPointError, match=r"not finite .*\(1, "):
        P.set_errors(broken, [(0, 2), (1, 4)], 1e-3)
    for call in (
        lambda: P.probe_ranking(broken, 2, 1e-3),
        lambda: P.probe_beam(broken, 2, 1e-3),
        lambda: P.probe_choice(broken, 2),
        lambda: P.choose_ridge(broken, [(1, 4)]),
    ):
        with pytest.raises(FloatingPointError, match="not finite"):
            call()


def test_statistics_from_chunks_equal_those_of_the_arrays():
    """`probe_stats_of` reads rows in passes over chunks (spilled rows never all in memory): any chunking
    gives the statistics of the whole arrays."""
    x, y, xh, yh = planted()
    whole, reduction = P.probe_stats(x, y, xh, yh, rank=4)
    chunked, again = P.probe_stats_of(P.array_chunks(x, y, chunk=7), P.array_chunks(xh, yh, chunk=50), rank=4)
    for name in ("gram", "cross", "heldout_gram", "heldout_cross", "kept_variance", "heldout_z", "y_mean"):
        assert getattr(chunked, name) == pytest.approx(getattr(whole, name), rel=1e-9, abs=1e-9), name
    assert (chunked.n_train, chunked.n_heldout) == (len(x), len(xh))
    assert again.components == pytest.approx(reduction.components, abs=1e-9)
    xh[3, 2, 1] = np.nan
    with pytest.raises(ValueError, match="held-out features .*1 in layer 2"):
        P.probe_stats_of(P.array_chunks(x, y, chunk=7), P.array_chunks(xh, yh, chunk=50), rank=4)
