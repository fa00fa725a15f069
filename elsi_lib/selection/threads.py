"""The thread pool the selection code splits work over, and a BLAS limiter.

Set entropies are many small B x B products and eigensolves; numpy releases the GIL in them, so a
few Python threads share the work. BLAS's own threads must be held at one meanwhile: OpenBLAS
threads keep spinning after each call and steal the cores the pool's threads run on.
"""

from __future__ import annotations

import functools
import os
from concurrent.futures import ThreadPoolExecutor

from threadpoolctl import ThreadpoolController

WORKERS = min(4, os.cpu_count() or 1)
MIN_PARALLEL = 24  # sets per worker below which threads cost more than they save


@functools.cache
def pool() -> tuple[ThreadPoolExecutor, ThreadpoolController]:
    return ThreadPoolExecutor(WORKERS, thread_name_prefix="elsi"), ThreadpoolController()


def one_blas_thread(fn):
    """Run a selection with BLAS held at one thread: its products are small, and OpenBLAS's own
    threads keep spinning after each call, stealing the cores `parallel_map` splits work over."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with pool()[1].limit(limits=1, user_api="blas"):
            return fn(*args, **kwargs)

    return wrapper


def parallel_map(fn, parts: list) -> list:
    """fn over parts on a few threads (numpy's BLAS and eigensolver release the GIL). Each call is
    small, so BLAS's own threads are held at one meanwhile: they would only compete."""
    if len(parts) < 2 or WORKERS < 2:
        return [fn(p) for p in parts]
    executor, controller = pool()
    with controller.limit(limits=1, user_api="blas"):
        return list(executor.map(fn, parts))
