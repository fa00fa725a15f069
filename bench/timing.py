"""Timing for the benchmarks: the median of repeated calls. Standalone (no elsi import)."""

from __future__ import annotations

import statistics
import time


def median_ms(fn, repeat: int) -> float:
    """Median wall time of `repeat` calls of `fn()`, in milliseconds."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(1000 * (time.perf_counter() - start))
    return statistics.median(times)
