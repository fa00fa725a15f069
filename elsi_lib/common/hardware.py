"""What the CPU can do fast. bfloat16 autocast (`TrainSettings.autocast_bf16`, live bf16 features) pays on
a CPU with bf16 matmul instructions (AVX-512 BF16 or AMX); without them PyTorch falls back to a reference
kernel: on an AVX2-only AMD EPYC of this project's machines a (512 x 896) @ (896 x 4096) matmul took
9.2 s under bf16 autocast against 53 ms in float32, about 170 times slower (2026-12-03), and a draft's
matmuls forward and backward 31 to 110 times slower (bench/bench_bf16.py). So the drafts'
training, replay and the decoding loop default to bf16 only where the CPU is known to have those
instructions (`bf16_autocast_default`; the value in effect is part of every checkpoint and replay key
and of the numeric settings every result records); a CPU whose flags cannot be read (no
/proc/cpuinfo, another architecture's format) gets float32 and a warning saying why; an explicit bf16
setting on a CPU without them warns."""

from __future__ import annotations

import functools
import platform
import warnings
from pathlib import Path

BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")  # x86's AVX-512 BF16 and AMX; Arm's BF16 ("Features")
X86_BF16_FLAGS = BF16_FLAGS[:2]  # round-to-nearest bf16 dot products summed in float32


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str] | None:
    """The CPU's feature flags (Linux: x86's `flags`, Arm's `Features`), None where /proc/cpuinfo cannot say."""
    try:
        for line in cpuinfo.read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return set(line.split(":", 1)[1].split())
    except (OSError, UnicodeDecodeError):
        return None
    return None


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's model name (Linux: /proc/cpuinfo), else what the platform module says."""

    try:
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except (OSError, UnicodeDecodeError):
        pass
    return platform.processor() or platform.machine()


def bf16_matmul_is_slow(flags: set[str] | None = None) -> bool:
    """True when the CPU is known to lack bf16 matmul instructions (False when it cannot be told)."""
    flags = cpu_flags() if flags is None else flags
    return flags is not None and not any(f in flags for f in BF16_FLAGS)


@functools.cache
def bf16_matmul_is_fast() -> bool:
    """True where this x86 CPU is known to have bf16 matmul instructions (False where it cannot be told,
    and on Arm, whose bf16 dot products may round otherwise): where `draft.greedy` screens in bf16."""
    flags = cpu_flags()
    return flags is not None and any(f in flags for f in X86_BF16_FLAGS)


def bf16_autocast_default() -> bool:
    """The default of `TrainSettings.autocast_bf16` and of replay's and the decoding loop's autocast:
    on where this CPU is known to have bf16 matmul instructions; float32 where it is known to lack
    them, and where its flags cannot be read (with a warning: bf16 may be 31-110 times slower there)."""
    flags = cpu_flags()
    if flags is None:
        warnings.warn(
            "cannot read this CPU's flags (/proc/cpuinfo): bf16 autocast defaults to off (float32), "
            "which is never the slow choice; pass autocast_bf16=True if the CPU has bf16 matmul "
            "instructions",
            RuntimeWarning,
            stacklevel=3,
        )
        return False
    return not bf16_matmul_is_slow(flags)


# The numeric settings every draft result states (`study.experiments.experiment_settings.numeric_settings`):
# how the drafts' matmuls ran, and the target's forward that gave their training features.
NUMERIC_COLUMNS = ("draft matmuls", "target features")


def numeric_label(bf16: bool) -> str:
    """How a result's matmuls ran: "bf16" (autocast, float32 master weights) or "float32"."""
    return "bf16" if bf16 else "float32"


def warn_if_bf16_is_slow(device_type: str, what: str, flags: set[str] | None = None) -> bool:
    """Warn (once per call site) that `what` runs bf16 autocast on a CPU without bf16 matmul
    instructions; returns whether it warned."""
    if device_type != "cpu" or not bf16_matmul_is_slow(flags):
        return False
    warnings.warn(
        f"{what} runs under bfloat16 autocast on a CPU without bf16 matmul instructions (no "
        f"{' or '.join(BF16_FLAGS)}): PyTorch's fallback ran a draft's matmuls 31 to 110 times slower than float32 on such a CPU. "
        "Turn it off for this machine (TrainSettings(autocast_bf16=False), live_bf16=False); the cache "
        "keys record the choice.",
        RuntimeWarning,
        stacklevel=3,
    )
    return True
