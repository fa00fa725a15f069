"""Linear layers over a few rows, computed weight first: a decoding-speed lever for CPUs.

Speculative decoding's verification runs the target over a handful of new tokens (a chain of k + 1, a
small tree), and each draft step over a few rows. On some CPUs' BLAS, `torch.nn.functional.linear(x, W)`
(x @ W^T) with a few rows costs several times one row's time although it reads the same weights, and
the same product computed as W @ x^T costs less (bench/bench_linears.py measures both, per weight shape
and row count, on the machine at hand). `weight_first_linears` swaps the `nn.Linear` layers of a model
to that form for inputs of at most `max_rows` rows while the block runs; more rows (a prefill, a tree
of 30 or 60 nodes at the default 8) keep the usual kernel. The result is the same product summed in
another order (float32 rounding apart); whether it pays end to end is measured by
bench/bench_cost.py --weight-first, never assumed.
"""

from __future__ import annotations

import types
from contextlib import contextmanager
from functools import partial

import torch
from torch import nn
from torch.nn import functional as F


def weight_first_linear(x, weight, bias=None, max_rows: int = 8):
    """x (..., in) -> (..., out), as F.linear(x, weight, bias); with at most `max_rows` rows computed
    as weight (out, in) @ x^T (in, rows). Under autocast, or with x and weight of two dtypes, F.linear
    itself (its casts are autocast's)."""
    rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
    if rows == 0 or rows > max_rows or x.dtype != weight.dtype or torch.is_autocast_enabled(x.device.type):
        return F.linear(x, weight, bias)
    flat = x.reshape(rows, x.shape[-1])  # (rows, in)
    out = torch.mm(weight, flat.t()).t().contiguous()  # (out, rows) -> (rows, out)
    if bias is not None:
        out += bias
    return out.reshape(*x.shape[:-1], weight.shape[0])  # (..., out)


def _weight_first_forward(self, input, max_rows: int = 8):
    return weight_first_linear(input, self.weight, self.bias, max_rows)


@contextmanager
def weight_first_linears(model: nn.Module, max_rows: int = 8):
    """While the block runs, every module of `model` whose type is exactly `nn.Linear` (subclasses keep
    their own forward) computes inputs of at most `max_rows` rows weight first (`weight_first_linear`);
    a layer that already has an instance forward of its own is left alone. Each swapped layer's forward
    comes back afterwards, also when the block raises. max_rows 0: nothing changes."""
    if not isinstance(max_rows, int) or isinstance(max_rows, bool) or max_rows < 0:
        raise ValueError(f"max_rows must be an integer >= 0, got {max_rows!r}")
    swapped = {}
    if max_rows:
        for module in model.modules():
            if type(module) is nn.Linear and "forward" not in vars(module):
                # a bound method: a deep copy made inside the block rebinds it to the copy's weights
                module.forward = types.MethodType(partial(_weight_first_forward, max_rows=max_rows), module)  # type: ignore[method-assign]
                swapped[module] = module.forward
    try:
        yield model
    finally:
        for module, forward in swapped.items():
            if vars(module).get("forward") is forward:  # not another forward installed meanwhile
                del module.forward
