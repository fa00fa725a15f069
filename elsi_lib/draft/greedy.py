"""The target's greedy token: the argmax of its float32 LM head (`float32_greedy`), which `greedy_next`
screens in bfloat16 and decides in float32 where an x86 CPU has bf16 matmul instructions: the same
tokens at about half the cost (`bench/bench_live_batch.py` checks both on a protocol's own batches).

For each position x (d,) and vocabulary row w_j (d,), the float32 head's logit r_j = fl32(x . w_j).
`ScreenedGreedy` first forms every logit in bfloat16, S = bf16(x) . bf16(w_j) (products summed in
float32, the result rounded to nearest bfloat16, as oneDNN's and PyTorch's x86 kernels do), keeps the
`k` largest (candidates), recomputes those k in float32 and takes their best. The winner is
*certified* when no other token's float32 logit can reach it, by a worst-case bound (u = 2^-8, bf16's
unit roundoff; g = d 2^-24 / (1 - d 2^-24), float32's summation bound for any order; A = |x| max_j |w_j|
>= sum_i |x_i w_ji| by Cauchy-Schwarz; F = d 2^-120 (1 + |x| + max_j |w_j|), what subnormals flushed to
zero can lose):

    r_j <= S_j + u |S_j| / (1 - u) + (2u + u^2 + g (2 + 2u + u^2)) A + F    (any j: the screen's error)
    |r_j - L_j| <= 2 g A + 2F                                              (a candidate's recomputed L_j)

so the best candidate L_1 is the head's argmax when L_1 - 2gA - 2F exceeds the first bound at the
(k+1)-th screened logit (every token outside the candidates screened no higher, and the bound grows
with S_j) and L_1 - L_2 > 4gA + 4F (no candidate ties it). A position that is not certified (a flat
distribution, a NaN, logits near float32's range) gets the float32 head's full row: the answer is the
head's argmax wherever the bound holds, with no tolerance and no sampling.
"""

from __future__ import annotations

import weakref

import torch
import torch.nn.functional as F

from ..common.hardware import bf16_matmul_is_fast

U_BF16 = 2.0**-8  # bfloat16's unit roundoff (8 significant bits)
U_F32 = 2.0**-24
TINY = 2.0**-120  # per product and sum: what flushing subnormals to zero can lose, with room
FLOAT32_MAX = float(torch.finfo(torch.float32).max)


@torch.no_grad()
def float32_greedy(final_norm, lm_head, chunk: int = 512):
    """The target's argmax next token at each position: final_norm (n, d) -> (n,) int64, in chunks."""
    return (
        torch.cat([lm_head(final_norm[i : i + chunk]).argmax(-1) for i in range(0, len(final_norm), chunk)])
        if len(final_norm)
        else torch.zeros(0, dtype=torch.long)
    )


def float32_matmul_is_ieee() -> bool:
    """False where torch is allowed to run float32 matmuls at a lower precision (then no bound holds)."""
    mkldnn = getattr(getattr(torch.backends, "mkldnn", None), "matmul", None)
    return torch.get_float32_matmul_precision() == "highest" and getattr(mkldnn, "fp32_precision", "none") in (
        "none",
        "ieee",
    )


_screens: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # lm_head -> (weight's version, screen)


@torch.no_grad()
def greedy_next(final_norm, lm_head):
    """`float32_greedy`'s tokens: final_norm (n, d) -> (n,) int64; screened in bfloat16 where the CPU has
    bf16 matmul instructions and the head is a bias-free float32 Linear. The bfloat16 copy is made once
    per head, again when its weights change in place; a change through `.data` bypasses the version
    counter this relies on: call `forget(lm_head)` after one."""
    weight = getattr(lm_head, "weight", None)
    if (
        not bf16_matmul_is_fast()
        or not float32_matmul_is_ieee()
        or not isinstance(lm_head, torch.nn.Linear)
        or lm_head.bias is not None
        or weight is None
        or weight.dtype != torch.float32
        or weight.device.type != "cpu"
        or final_norm.dtype != torch.float32
        or final_norm.dim() != 2
        or weight.shape[0] < 2
    ):
        return float32_greedy(final_norm, lm_head)
    version = (weight._version, weight.data_ptr())
    made = _screens.get(lm_head)
    if made is None or made[0] != version:
        made = _screens[lm_head] = (version, ScreenedGreedy(weight))
    return made[1](final_norm)


def forget(lm_head) -> None:
    """Drop `lm_head`'s bfloat16 copy (after changing its weights through `.data`)."""
    _screens.pop(lm_head, None)


class ScreenedGreedy:
    """A bias-free LM head's `weight` (V, d) float32 answering `float32_greedy`'s question: x (n, d)
    float32 -> (n,) int64, the same tokens. Its bfloat16 copy is made once: the weights must not change."""

    def __init__(self, weight: torch.Tensor, k: int = 16, chunk: int = 512):
        if weight.dtype != torch.float32 or weight.dim() != 2 or weight.shape[0] < 2:
            raise ValueError(
                f"the screen decides against float32 (V >= 2, d) weights, not {weight.dtype} {tuple(weight.shape)}"
            )
        if k < 1 or chunk < 1:
            raise ValueError(f"k and chunk must be at least 1, not {k} and {chunk}")
        self.weight, self.chunk = weight.detach(), chunk
        self.k = min(k, weight.shape[0] - 1)
        self.weight_bf16 = self.weight.to(torch.bfloat16)  # (V, d), rounded once
        self.w_max = float(self.weight.double().norm(dim=1).max())
        d = weight.shape[1]
        self.d, self.g = d, d * U_F32 / (1 - d * U_F32)
        self.screen_slack = 2 * U_BF16 + U_BF16**2 + self.g * (2 + 2 * U_BF16 + U_BF16**2)
        self.fallbacks = 0  # positions decided by the full float32 row (for benchmarks)
        self.positions = 0

    @torch.no_grad()
    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.float32 or x.dim() != 2 or x.shape[1] != self.d:
            raise ValueError(f"x must be float32 (n, {self.d}), not {x.dtype} {tuple(x.shape)}")
        if not len(x):
            return torch.zeros(0, dtype=torch.long)
        return torch.cat([self._chunk(x[i : i + self.chunk]) for i in range(0, len(x), self.chunk)])

    def bounds(self, screened: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(what no float32 logit exceeds given its screened value: screened (n, m) -> (n, m) float64;
        how far a recomputed logit may lie from the head's: (n, 1) float64)."""
        x_norm = x.double().norm(dim=1, keepdim=True)  # (n, 1)
        a = x_norm * self.w_max
        flushed = self.d * TINY * (1 + self.w_max + x_norm)
        s = screened.double()
        return s + U_BF16 * s.abs() / (1 - U_BF16) + self.screen_slack * a + flushed, 2 * self.g * a + 2 * flushed

    def _chunk(self, x: torch.Tensor) -> torch.Tensor:
        screened = F.linear(x.to(torch.bfloat16), self.weight_bf16)  # (n, V) bfloat16
        top, candidates = screened.topk(self.k + 1, dim=-1)  # (n, k + 1), descending
        outside, recomputed_error = self.bounds(top[:, -1:], x)  # no token outside the k candidates screened higher
        candidates = candidates[:, : self.k]  # (n, k)
        logits = torch.einsum("nd,nkd->nk", x, self.weight[candidates])  # (n, k) float32
        best, order = logits.topk(min(2, self.k), dim=-1)  # (n, 2)
        first = best[:, :1].double()
        in_range = torch.isfinite(first) & (x.double().norm(dim=1, keepdim=True) * self.w_max * 1.01 < FLOAT32_MAX)
        certain = in_range & (first - recomputed_error > outside)
        if self.k > 1:
            certain &= first - best[:, 1:2].double() > 2 * recomputed_error
        tokens = candidates.gather(1, order[:, :1]).squeeze(1)  # (n,)
        unsure = (~certain.squeeze(1)).nonzero().squeeze(1)
        if len(unsure):
            tokens[unsure] = float32_greedy(x[unsure], lambda h: F.linear(h, self.weight))
        self.fallbacks += len(unsure)
        self.positions += len(x)
        return tokens
