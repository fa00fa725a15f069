"""Does bfloat16 autocast pay on this CPU? The drafts' training (`TrainSettings.autocast_bf16`, on by
default) and the live target forward (`live_bf16`) assume a CPU with bf16 matmul instructions
(AVX-512 BF16 or AMX), where bench_live measured the bf16 forward 1.9x faster than float32. Without
them PyTorch falls back to a slow kernel (`elsi_lib.common.hardware` warns). This bench times, in one
run, the matmuls that dominate a draft step (a batch of 256 positions through a d x 4d MLP layer and
the d x 8,192 draft vocabulary head, d = 576 for SmolLM2 and 896 for Qwen2.5-Coder-0.5B), forward and
backward, in float32 and under bf16 autocast, and records the CPU's bf16 flags.

Prints and writes bench/results/bench_bf16.{json,md}.

    .venv/bin/python bench/bench_bf16.py [--repeat 1]
"""

from __future__ import annotations

import argparse
import os
import time

import torch

from elsi_lib.common.hardware import BF16_FLAGS, cpu_flags
from record import write

POSITIONS, VOCAB = 256, 8192


def step_seconds(d: int, out: int, bf16: bool, repeat: int) -> float:
    """Median seconds of one forward and backward of (POSITIONS, d) @ (d, out)."""
    torch.manual_seed(0)
    x = torch.randn(POSITIONS, d)
    w = torch.randn(d, out, requires_grad=True)
    times = []
    for _ in range(repeat + 1):  # the first is a warm-up
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            y = x @ w  # (POSITIONS, out)
        y.float().square().mean().backward()
        times.append(time.perf_counter() - start)
        w.grad = None
    return sorted(times[1:])[len(times[1:]) // 2]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    load = [round(x, 2) for x in os.getloadavg()]
    flags = cpu_flags() or set()
    rows = []
    for d, name in ((576, "SmolLM2"), (896, "Qwen2.5-Coder-0.5B")):
        for out, what in ((4 * d, "MLP layer"), (VOCAB, "vocabulary head")):
            f32, b16 = (step_seconds(d, out, bf16, args.repeat) for bf16 in (False, True))
            rows.append(
                {
                    "shape": f"{name} {what}: ({POSITIONS} x {d}) @ ({d} x {out})",
                    "float32 ms": round(1e3 * f32, 1),
                    "bf16 autocast ms": round(1e3 * b16, 1),
                    "bf16 / float32": round(b16 / f32, 1),
                }
            )
            print(rows[-1])
    present = [f for f in BF16_FLAGS if f in flags]
    write(
        "bench_bf16",
        {
            "positions": POSITIONS,
            "repeat": args.repeat,
            "bf16 flags present": present,
            "torch cpu capability": torch.backends.cpu.get_cpu_capability(),
        },
        rows,
        load_before=load,
        notes="forward and backward, median of the repeats after a warm-up; bf16 / float32 above 1 means bf16 is slower",
    )


if __name__ == "__main__":
    main()
