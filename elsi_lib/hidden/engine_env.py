"""The engines' environment, apart from elsi's own (elsi never imports vLLM): which interpreter runs the
engine (`.venv-engines`, or `$ELSI_ENGINES_PYTHON`), the vLLM version it holds (read from its package
metadata), the environment variables the engine runs under, and the model folder it loads.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..common.cachefiles import REPO_ROOT


def engines_python() -> Path:
    return Path(os.environ.get("ELSI_ENGINES_PYTHON") or REPO_ROOT / ".venv-engines" / "bin" / "python")


def vllm_version(python: Path | None = None) -> str:
    """vLLM's version in the engines' environment, read from its package metadata (no import)."""
    python = python or engines_python()
    prefix = python.absolute().parent.parent if python.exists() else None  # the venv (not the interpreter it links)
    for info in sorted(prefix.glob("lib/python*/site-packages/vllm*.dist-info/METADATA")) if prefix else []:
        for line in info.read_text().splitlines():
            if line.startswith("Version:"):
                return line.split(":", 1)[1].strip()
    raise FileNotFoundError(
        f"no vLLM in the engines' environment ({python}): run `make test-engines` "
        "(it builds .venv-engines) or set ELSI_ENGINES_PYTHON"
    )


def engine_environment(python: Path) -> dict:
    """The environment the engine runs in: this one, with vLLM's CPU KV cache at 4 GiB unless set (its
    default takes 15) and the OpenMP runtime pip installed preloaded, as `make test-engines` runs it.
    On a machine of at most 4 cores the engine computes on all of them: vLLM reserves one for its
    front end by default, which on 2 cores leaves one (bench/bench_vllm_threads.py: the same tokens,
    faster on both)."""
    env = dict(os.environ)
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "4")
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    if len(cores) <= 4 and "VLLM_CPU_OMP_THREADS_BIND" not in env:  # the thread layout is in no key: the
        env["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(map(str, cores))  # same tokens (bench_vllm_threads)
        env.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
    iomp = python.absolute().parent.parent / "lib" / "libiomp5.so"
    if iomp.is_file() and "LD_PRELOAD" not in env:
        env["LD_PRELOAD"] = str(iomp)
    return env


def model_folder(model) -> Path:
    """The Hugging Face folder the model was loaded from: what the engine loads."""
    folder = Path(getattr(model.config, "_name_or_path", "") or "")
    if not (folder / "config.json").is_file():
        raise ValueError(f"the engine loads a model folder; this model was not loaded from one ({folder!s})")
    return folder
