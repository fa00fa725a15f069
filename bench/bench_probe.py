"""What the task probe's selection costs without the model (`elsi_lib.selection.probe`): every set
scored in closed form from the cached Gram blocks. Two targets:

- SmolLM2-135M (30 layers, d = 576): its real probe statistics (the 200 calibration conversations,
  64 components per block; cached by `elsi select --method probe` or notebook 07), all 4,060 triples
  scored and timed, and the beam search (k_beam 10) beside it;
- a 36-layer model of width 2,560 (Qwen3-4B's shape, the paper's Table 2 target): synthetic
  statistics of that shape (the cost does not depend on the values), a sample of its 7,140 triples
  timed and the whole extrapolated, and the beam search timed.

Prints and writes bench/results/bench_probe.{json,md}: seconds per set and for the whole search,
with the load average before the run (the numbers are wall-clock on a shared 2-core machine).

    .venv/bin/python bench/bench_probe.py [--sample 300]
"""

from __future__ import annotations

import argparse
import itertools
import os
import time

import numpy as np

from elsi_lib.study.paper import captures
from elsi_lib.selection import probe as P
from record import write


def synthetic(n_layers: int, d: int, rank: int, n: int = 3000, seed: int = 0) -> P.ProbeStats:
    """Probe statistics of the given shape from random reduced features (well-conditioned Grams)."""
    rng = np.random.default_rng(seed)
    K = (n_layers + 1) * rank
    z, zh = rng.standard_normal((n, K)), rng.standard_normal((n // 3, K))
    w = rng.standard_normal((K, d)) / np.sqrt(K)
    y, yh = z @ w + rng.standard_normal((n, d)), zh @ w + rng.standard_normal((n // 3, d))
    return P.ProbeStats(
        gram=z.T @ z,
        cross=z.T @ y,
        heldout_gram=zh.T @ zh,
        heldout_cross=zh.T @ yh,
        heldout_yy=float(np.sum(yh**2)),
        n_train=n,
        n_heldout=n // 3,
        rank=rank,
        kept_variance=np.ones(n_layers + 1),
        heldout_z=zh.astype(np.float32),
        heldout_next=np.full(n // 3, -1),
        y_mean=np.zeros(d),
    )


def timed(stats: P.ProbeStats, sets, ridge: float) -> float:
    start = time.perf_counter()
    P.set_errors(stats, sets, ridge)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sample", type=int, default=300, help="triples timed on the 36-layer shape")
    args = parser.parse_args()
    load_before = [round(x, 2) for x in os.getloadavg()]
    rows = []
    smol = captures.probe_statistics("smollm2-135m", 200, rank=64, progress=False)
    triples = list(itertools.combinations(range(smol.n_layers), 3))
    seconds = timed(smol, triples, 0.1)
    start = time.perf_counter()
    P.probe_beam(smol, 3, 0.1)
    beam = time.perf_counter() - start
    rows.append(
        {
            "target": "smollm2-135m (its statistics)",
            "layers": smol.n_layers,
            "width": smol.cross.shape[1],
            "triples": len(triples),
            "triples timed": len(triples),
            "ms per triple": round(1e3 * seconds / len(triples), 2),
            "all triples (s)": round(seconds, 1),
            "beam k=10 (s)": round(beam, 1),
        }
    )
    print(rows[-1], flush=True)
    big = synthetic(36, 2560, 64)
    triples = list(itertools.combinations(range(36), 3))
    sample = [triples[i] for i in np.random.default_rng(0).choice(len(triples), args.sample, replace=False)]
    seconds = timed(big, sample, 0.1)
    start = time.perf_counter()
    P.probe_beam(big, 3, 0.1)
    beam = time.perf_counter() - start
    rows.append(
        {
            "target": "36 layers, width 2,560 (synthetic)",
            "layers": 36,
            "width": 2560,
            "triples": len(triples),
            "triples timed": len(sample),
            "ms per triple": round(1e3 * seconds / len(sample), 2),
            "all triples (s)": round(seconds / len(sample) * len(triples), 1),
            "beam k=10 (s)": round(beam, 1),
        }
    )
    print(rows[-1], flush=True)
    write(
        "bench_probe",
        {"rank": 64, "ridge": 0.1, "sample": args.sample},
        rows,
        load_before=load_before,
        notes="all triples (s) of the 36-layer shape: the timed sample's seconds per triple times 7,140.",
    )


if __name__ == "__main__":
    main()
