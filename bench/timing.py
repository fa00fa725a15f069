"""Timing for the benchmarks: the median of repeated calls, waiting for an accelerator's queued work
(CUDA kernels run asynchronously) before each clock reading. Standalone (no elsi import)."""

from __future__ import annotations

import statistics
import time


def sync() -> None:
    """Wait for CUDA's queued kernels, where CUDA is in use (a no-op on a CPU-only run)."""
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def median_ms(fn, repeat: int) -> float:
    """Median wall time of `repeat` calls of `fn()`, in milliseconds."""
    times = []
    for _ in range(repeat):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        times.append(1000 * (time.perf_counter() - start))
    return statistics.median(times)
