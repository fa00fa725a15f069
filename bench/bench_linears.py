"""The target's linear layers over a few rows, two ways, on this CPU (batch 1, float32):

- `F.linear(x, W)` (x @ W^T), what transformers runs;
- weight first, W @ x^T (`elsi_lib.draft.linears.weight_first_linear`, every row count).

For each kind of the model's linears (weight shape, with or without a bias) and each row count: median milliseconds both
ways and their ratio, and, summed over every linear of the model (each kind times how often it
occurs), a forward's linear time by rows against one row's: what verifying k + 1 tokens costs in the
linears alone. Rows 1 is a decode step; 2-6 a chain's verification; 31 and 61 the trees'.

    .venv/bin/python bench/bench_linears.py [--model qwen2.5-coder-0.5b] [--rows 1 2 3 4 6 8 16 31 61]

Results: bench/results/bench_linears_<model>.json and .md. Never run it beside another job: it times.
"""

from __future__ import annotations

import argparse
import os
from collections import Counter

import torch
from torch import nn
from torch.nn import functional as F

from elsi_lib.common.hardware import cpu_flags
from elsi_lib.draft.linears import weight_first_linear
from elsi_lib.inputs.models import load_model
from record import write
from timing import median_ms

ROWS = [1, 2, 3, 4, 6, 8, 16, 31, 61]


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
    # a layer's kind: its weight's shape and whether it has a bias (Qwen2's q, k, v projections do)
    kinds = Counter((tuple(m.weight.shape), m.bias is not None) for m in linears)
    layer_of = {kind: next(m for m in linears if (tuple(m.weight.shape), m.bias is not None) == kind) for kind in kinds}
    generator = torch.Generator().manual_seed(0)
    per_kind, shape_rows = {}, []
    with torch.no_grad():
        for kind, layer in layer_of.items():
            weight, bias = layer.weight, layer.bias
            for n in rows:
                x = torch.randn(n, weight.shape[1], generator=generator)
                F.linear(x, weight, bias)  # warm-up
                usual = median_ms(lambda: F.linear(x, weight, bias), args.repeat)
                weight_first_linear(x, weight, bias, max_rows=n)  # warm-up
                first = median_ms(lambda: weight_first_linear(x, weight, bias, max_rows=n), args.repeat)
                per_kind[(kind, n)] = (usual, first)
                shape_rows.append(
                    {
                        "weight (out x in)": f"{kind[0][0]} x {kind[0][1]}{' + bias' if kind[1] else ''}",
                        "layers": kinds[kind],
                        "rows": n,
                        "F.linear ms": round(usual, 3),
                        "weight first ms": round(first, 3),
                        "weight first / F.linear": round(first / usual, 2),
                    }
                )
                print(shape_rows[-1], flush=True)
    out = []  # the model's linears summed first (one forward's linear time by rows), then each kind
    one = sum(per_kind[(k, 1)][0] * c for k, c in kinds.items())
    for n in rows:
        usual = sum(per_kind[(k, n)][0] * c for k, c in kinds.items())
        first = sum(per_kind[(k, n)][1] * c for k, c in kinds.items())
        out.append(
            {
                "weight (out x in)": "all linears",
                "layers": sum(kinds.values()),
                "rows": n,
                "F.linear ms": round(usual, 2),
                "weight first ms": round(first, 2),
                "weight first / F.linear": round(first / usual, 2),
                "F.linear / its one row": round(usual / one, 2),
                "weight first / F.linear's one row": round(first / one, 2),
            }
        )
        print(out[-1], flush=True)
    out += shape_rows
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
