"""Linear layers over a few rows, computed weight first: a decoding-speed lever for CPUs.

Speculative decoding's verification runs the target over a handful of new tokens (a chain of k + 1, a
small tree), and each draft step over a few rows. On some CPUs' BLAS, `torch.nn.functional.linear(x, W)`
(x @ W^T) with a few rows costs several times one row's time although it reads the same weights,
while the same product computed as W @ x^T stays near one row's time (bench/bench_linears.py measures
both, per shape and row count, on the machine at hand). `weight_first_linears` swaps every
`nn.Linear` of a model to that form for inputs of at most `max_rows` rows (more rows, a prefill: the
usual kernel) while the block runs. The result is the same product summed in another order (float32
rounding apart); whether it pays end to end is measured by bench/bench_cost.py --weight-first.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from torch import nn
from torch.nn import functional as F


def weight_first_linear(x, weight, bias=None, max_rows: int = 8):
    """x (..., in) -> (..., out), as F.linear(x, weight, bias); with at most `max_rows` rows computed
    as weight (out, in) @ x^T (in, rows)."""
    rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
    if rows == 0 or rows > max_rows or x.dtype != weight.dtype:
        return F.linear(x, weight, bias)
    flat = x.reshape(rows, x.shape[-1])  # (rows, in)
    out = torch.mm(weight, flat.t()).t()  # (out, rows) -> (rows, out), a transposed view
    out = out.contiguous() if bias is None else out.contiguous() + bias
    return out.reshape(*x.shape[:-1], weight.shape[0])  # (..., out)


@contextmanager
def weight_first_linears(model: nn.Module, max_rows: int = 8):
    """While the block runs, every `nn.Linear` of `model` computes inputs of at most `max_rows` rows
    weight first (`weight_first_linear`); each layer's own forward comes back afterwards, also when
    the block raises. max_rows 0: nothing changes."""
    if not isinstance(max_rows, int) or isinstance(max_rows, bool) or max_rows < 0:
        raise ValueError(f"max_rows must be an integer >= 0, got {max_rows!r}")
    swapped = []
    if max_rows:
        for module in model.modules():
            if type(module) is nn.Linear and "forward" not in vars(module):
                module.forward = lambda x, m=module: weight_first_linear(x, m.weight, m.bias, max_rows)
                swapped.append(module)
    try:
        yield model
    finally:
        for module in swapped:
            del module.forward
