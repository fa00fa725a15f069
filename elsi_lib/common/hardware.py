"""What the CPU can do fast. bfloat16 autocast (`TrainSettings.autocast_bf16`, live bf16 features) pays on
a CPU with bf16 matmul instructions (AVX-512 BF16 or AMX); without them PyTorch falls back to a reference
kernel: on an AVX2-only AMD EPYC of this project's machines a (512 x 896) @ (896 x 4096) matmul took
9.2 s under bf16 autocast against 53 ms in float32, about 170 times slower (2026-12-03), and a draft's
matmuls forward and backward 31 to 110 times slower (bench/bench_bf16.py). So the drafts'
training defaults to bf16 only where the CPU has those instructions (`bf16_autocast_default`; the value
in effect is part of every checkpoint key), and an explicit bf16 setting on such a CPU warns."""
from __future__ import annotations

import warnings
from pathlib import Path

BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str] | None:
    """The CPU's feature flags (Linux), None where /proc/cpuinfo cannot say."""
    try:
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        return None
    return None


def bf16_matmul_is_slow(flags: set[str] | None = None) -> bool:
    """True when the CPU is known to lack bf16 matmul instructions (False when it cannot be told)."""
    flags = cpu_flags() if flags is None else flags
    return flags is not None and not any(f in flags for f in BF16_FLAGS)


def bf16_autocast_default() -> bool:
    """The default of `TrainSettings.autocast_bf16`: on, unless this CPU is known to lack bf16 matmul
    instructions (the drafts then train in float32, and their cache keys say so)."""
    return not bf16_matmul_is_slow()


def warn_if_bf16_is_slow(device_type: str, what: str, flags: set[str] | None = None) -> bool:
    """Warn (once per call site) that `what` runs bf16 autocast on a CPU without bf16 matmul
    instructions; returns whether it warned."""
    if device_type != "cpu" or not bf16_matmul_is_slow(flags):
        return False
    warnings.warn(f"{what} runs under bfloat16 autocast on a CPU without bf16 matmul instructions (no "
                  f"{' or '.join(BF16_FLAGS)}): PyTorch's fallback ran a draft's matmuls 31 to 110 times slower than float32 on such a CPU. "
                  "Turn it off for this machine (TrainSettings(autocast_bf16=False), live_bf16=False); the cache "
                  "keys record the choice.", RuntimeWarning, stacklevel=3)
    return True
