"""The target's linear layers over a few rows, two ways, on this CPU (batch 1, float32):

- `F.linear(x, W)` (x @ W^T), what transformers runs;
- weight first, W @ x^T (`elsi_lib.draft.linears.weight_first_linear`, every row count).

For each distinct weight shape of the model's linears and each row count: median milliseconds both
ways and their ratio, and, summed over every linear of the model (each shape times how often it
occurs), a forward's linear time by rows against one row's: what verifying k + 1 tokens costs in the
linears alone. Rows 1 is a decode step; 2-6 a chain's verification; 31 and 61 the trees'.

    .venv/bin/python bench/bench_linears.py [--model qwen2.5-coder-0.5b] [--rows 1 2 3 4 6 8 16 31 61]

Results: bench/results/bench_linears_<model>.json and .md. Never run it beside another job: it times.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections import Counter

import torch
from torch import nn
from torch.nn import functional as F

from elsi_lib.common.hardware import cpu_flags
from elsi_lib.draft.linears import weight_first_linear
from elsi_lib.inputs.models import load_model
from record import write

ROWS = [1, 2, 3, 4, 6, 8, 16, 31, 61]


def median_ms(fn, repeat: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(1000 * (time.perf_counter() - start))
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b", help="a bundled family (elsi_lib.inputs.models)")
    parser.add_argument("--rows", type=int, nargs="+", default=ROWS)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    if 1 not in args.rows or any(r < 1 for r in args.rows):
        parser.error(f"--rows: counts >= 1, including 1 (the reference), got {args.rows}")
    rows = sorted(set(args.rows))
    load_before = [round(x, 2) for x in os.getloadavg()]
    model, _ = load_model(args.model)
    linears = [m for m in model.modules() if type(m) is nn.Linear]
    if not linears or any(m.weight.dtype != torch.float32 for m in linears):
        raise SystemExit(f"{args.model}: this benchmark times float32 nn.Linear layers")
    shapes = Counter(tuple(m.weight.shape) for m in linears)
    weights = {shape: next(m.weight for m in linears if tuple(m.weight.shape) == shape) for shape in shapes}
    generator = torch.Generator().manual_seed(0)
    per_shape, out = {}, []
    with torch.no_grad():
        for shape, weight in weights.items():
            for n in rows:
                x = torch.randn(n, shape[1], generator=generator)
                usual = median_ms(lambda: F.linear(x, weight), args.repeat)
                first = median_ms(lambda: weight_first_linear(x, weight, max_rows=n), args.repeat)
                per_shape[(shape, n)] = (usual, first)
                out.append(
                    {
                        "weight (out x in)": f"{shape[0]} x {shape[1]}",
                        "layers": shapes[shape],
                        "rows": n,
                        "F.linear ms": round(usual, 3),
                        "weight first ms": round(first, 3),
                        "weight first / F.linear": round(first / usual, 2),
                        "F.linear / its one row": "",
                        "weight first / F.linear's one row": "",
                    }
                )
                print(out[-1], flush=True)
    for n in rows:  # the model's linears summed: one forward's linear time by rows
        usual = sum(per_shape[(s, n)][0] * c for s, c in shapes.items())
        first = sum(per_shape[(s, n)][1] * c for s, c in shapes.items())
        one = sum(per_shape[(s, 1)][0] * c for s, c in shapes.items())
        out.append(
            {
                "weight (out x in)": "all linears",
                "layers": sum(shapes.values()),
                "rows": n,
                "F.linear ms": round(usual, 2),
                "weight first ms": round(first, 2),
                "weight first / F.linear": round(first / usual, 2),
                "F.linear / its one row": round(usual / one, 2),
                "weight first / F.linear's one row": round(first / one, 2),
            }
        )
        print(out[-1], flush=True)
    flags = cpu_flags() or set()
    settings = {
        "model": args.model,
        "dtype": "float32",
        "rows": rows,
        "repeat": args.repeat,
        "threads": torch.get_num_threads(),
        "cpu flags": sorted(f for f in flags if f in {"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}),
        "blas": "mkl" if torch.backends.mkl.is_available() else "other",
    }
    write(f"bench_linears_{args.model}", settings, out, load_before=load_before)


if __name__ == "__main__":
    main()
