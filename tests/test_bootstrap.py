"""The bootstrap behind `elsi select --stability` (elsi_lib.selection.stability.bootstrap_choices): a number
of resamples that is not a positive integer is refused before anything is drawn (otherwise 10**12 would
end in a MemoryError, 0 in an empty table, -1 in numpy's "negative dimensions")."""

import numpy as np
import pytest

from elsi_lib.hidden.layerstats import LayerStats
from elsi_lib.selection import stability


def _stats(n_samples=24, seed=0):
    rng = np.random.default_rng(seed)
    sums = rng.normal(size=(n_samples, 5, 3, 4)).astype(np.float32)  # S samples, N=5, B=3, d=4
    blocks = rng.integers(1, 4, size=n_samples)
    return LayerStats(
        Z=sums.astype(np.float64).sum(0) / blocks.sum(),
        final_norm=np.ones((3, 4)),
        sample_entropy=np.ones((n_samples, 5)),
        sample_index=np.arange(n_samples),
        abs_max=np.ones((5, 4)),
        abs_sum=np.ones((5, 4)),
        sample_sums=sums,
        sample_blocks=blocks,
    )


@pytest.mark.parametrize("n_boot", [0, -1, 2.5, True, "20", 10**12])
def test_a_bad_number_of_resamples_is_refused_before_drawing(n_boot, monkeypatch):
    stats = _stats()
    monkeypatch.setattr(np.random, "default_rng", lambda *a: pytest.fail("resamples were drawn"))
    with pytest.raises(ValueError, match=rf"n_boot must be an integer from 1 to {stability.MAX_BOOTSTRAP_RESAMPLES}"):
        stability.bootstrap_choices(stats, 2, n_boot=n_boot, progress=False)


def test_the_edges_of_the_range_resample():
    assert stability.bootstrap_choices(_stats(), 2, n_boot=1, progress=False)["count"].sum() == 1
    assert stability.MAX_BOOTSTRAP_RESAMPLES >= 10_000  # what `elsi select --stability` allows
