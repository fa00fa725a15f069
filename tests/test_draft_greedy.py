"""The bfloat16-screened greedy token: the float32 head's argmax, also where bfloat16 cannot tell."""

import gc

import pytest
import torch
import torch.nn.functional as F

from conftest import replied_conversations
from elsi_lib.draft import greedy
from elsi_lib.draft.greedy import ScreenedGreedy, float32_greedy, greedy_next
from elsi_lib.draft.live import LiveFeatures

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _head(vocab: int, d: int, seed: int = 0) -> torch.nn.Linear:
    head = torch.nn.Linear(d, vocab, bias=False)
    with torch.no_grad():
        head.weight.copy_(torch.randn(vocab, d, generator=torch.Generator().manual_seed(seed)) / d**0.5)
    return head


@pytest.mark.parametrize("scale", [0.01, 1.0, 30.0])
def test_the_same_tokens_as_the_float32_head(scale):
    """Small, middling and large logits (the bound scales with them): the head's argmax each time."""
    head = _head(700, 48)
    x = scale * torch.randn(1100, 48, generator=torch.Generator().manual_seed(1))
    screen = ScreenedGreedy(head.weight, k=8, chunk=256)
    assert torch.equal(screen(x), float32_greedy(x, head))
    assert screen.positions == 1100


def test_peaked_positions_are_decided_by_the_screen_not_the_fallback():
    head = _head(700, 48)
    rows = torch.randint(0, 700, (300,), generator=torch.Generator().manual_seed(2))
    x = 40 * head.weight.detach()[rows] + 0.1 * torch.randn(300, 48, generator=torch.Generator().manual_seed(3))
    screen = ScreenedGreedy(head.weight, k=8)
    assert torch.equal(screen(x), rows) and torch.equal(screen(x), float32_greedy(x, head))
    assert screen.fallbacks < 0.05 * screen.positions  # the screen, not the full row, decided


@pytest.mark.parametrize("gap, k, fallbacks", [(3e-3, 4, 0), (1e-4, 4, 2), (3e-3, 1, 2)])
def test_a_tie_bfloat16_cannot_resolve_is_decided_in_float32(gap, k, fallbacks):
    """Two rows that round to the same bfloat16 row and differ in float32 by `gap` in one coordinate:
    the screen sees a tie, the float32 head does not. A gap the bound can see is decided among the
    candidates in float32; a smaller one, or one candidate only (k = 1: the other tied row is outside),
    by the float32 head's full row. The head's answer either way, on both sides of the tie."""
    d = 32
    base = torch.randn(d, generator=torch.Generator().manual_seed(4))
    base[0] = 1.0
    weight = torch.randn(50, d, generator=torch.Generator().manual_seed(5)) * 0.01
    weight[7], weight[31] = base, base.clone()
    weight[31, 0] += gap
    head = _head(50, d)
    with torch.no_grad():
        head.weight.copy_(weight)
    assert torch.equal(weight[7].to(torch.bfloat16), weight[31].to(torch.bfloat16))
    x = torch.stack([5 * base, 5 * base])
    x[0, 0], x[1, 0] = 1.0, -1.0  # row 31 wins the first position, row 7 the second, in float32
    screen = ScreenedGreedy(head.weight, k=k)
    want = float32_greedy(x, head)
    assert want.tolist() == [31, 7]
    assert torch.equal(screen(x), want) and screen.fallbacks == fallbacks


def test_refuses_what_its_bound_does_not_cover():
    with pytest.raises(ValueError, match="float32"):
        ScreenedGreedy(_head(20, 8).weight.double())
    with pytest.raises(ValueError, match="V >= 2"):
        ScreenedGreedy(torch.zeros(1, 8))
    screen = ScreenedGreedy(_head(20, 8).weight)
    with pytest.raises(ValueError, match=r"float32 \(n, 8\)"):
        screen(torch.zeros(3, 9))
    with pytest.raises(ValueError, match="float32"):
        screen(torch.zeros(3, 8, dtype=torch.float64))
    assert screen(torch.zeros(0, 8)).shape == (0,)


def test_the_bound_holds_for_every_token_under_heavy_cancellation():
    """Rows close to one shared direction and positions that cancel along it: products large, logits
    small. No float32 logit exceeds the bound at its screened value, nor lies further from its
    recomputed value than the stated error."""
    generator = torch.Generator().manual_seed(8)
    d = 256
    weight = 3.0 + 0.01 * torch.randn(400, d, generator=generator)
    x = torch.randn(50, d, generator=generator) * 40
    x -= x.mean(dim=1, keepdim=True)  # cancels the shared direction
    screen = ScreenedGreedy(weight, k=8)
    screened = F.linear(x.to(torch.bfloat16), weight.to(torch.bfloat16))
    upper, error = screen.bounds(screened, x)
    logits = F.linear(x, weight).double()  # the head's r_j
    assert (logits <= upper).all()
    recomputed = torch.einsum("nd,vd->nv", x, weight).double()
    assert ((logits - recomputed).abs() <= error).all()
    assert (upper - logits).min() < 2 * (upper - logits).median()  # not vacuous: some logits come close


def test_logits_beyond_float32s_range_fall_back():
    """Both leading logits overflow to inf in float32 (the head picks the first); the screen's own
    arithmetic cannot be trusted there."""
    x = torch.tensor([[2.0**100 * 1.00390613]])
    weight = torch.tensor([[2.0**27 * 1.99223], [2.0**27 * 1.999], [0.0]])
    screen = ScreenedGreedy(weight, k=1)
    assert torch.equal(screen(x), float32_greedy(x, lambda h: F.linear(h, weight))) and screen.fallbacks == 1


def test_the_cache_lets_a_head_go_and_forgets_on_request(monkeypatch):
    monkeypatch.setattr(greedy, "bf16_matmul_is_fast", lambda: True)
    head = _head(300, 24)
    x = 20 * torch.randn(8, 24, generator=torch.Generator().manual_seed(9))
    greedy_next(x, head)
    before = len(greedy._screens)
    del head
    gc.collect()
    assert len(greedy._screens) == before - 1
    head = _head(300, 24)
    greedy_next(x, head)
    head.weight.data.mul_(-1)  # through .data: the version counter does not see it
    greedy.forget(head)
    assert torch.equal(greedy_next(x, head), float32_greedy(x, head))


def test_a_nan_position_gets_the_float32_rows_answer():
    head = _head(40, 16)
    x = torch.randn(4, 16, generator=torch.Generator().manual_seed(6))
    x[2, 3] = float("nan")
    screen = ScreenedGreedy(head.weight, k=4)
    assert torch.equal(screen(x), float32_greedy(x, head)) and screen.fallbacks >= 1


def test_greedy_next_screens_where_bf16_is_fast_and_notices_changed_weights(monkeypatch):
    head = _head(300, 24)
    x = 20 * torch.randn(64, 24, generator=torch.Generator().manual_seed(7))
    monkeypatch.setattr(greedy, "bf16_matmul_is_fast", lambda: False)
    assert torch.equal(greedy_next(x, head), float32_greedy(x, head)) and head not in greedy._screens
    monkeypatch.setattr(greedy, "bf16_matmul_is_fast", lambda: True)
    assert torch.equal(greedy_next(x, head), float32_greedy(x, head))
    screen = greedy._screens[head][1]
    assert screen.positions == 64
    with torch.no_grad():
        head.weight.mul_(-1)  # in place: the bfloat16 copy is stale
    assert torch.equal(greedy_next(x, head), float32_greedy(x, head)) and greedy._screens[head][1] is not screen
    assert torch.equal(greedy_next(x.double(), head.double()), float32_greedy(x.double(), head.double()))


def test_live_bf16_batches_give_the_float32_heads_greedy_token(tiny_model, tiny_tokenizer, monkeypatch):
    """Where the CPU has bf16 matmul instructions (forced here), a live batch's greedy token goes through
    the screen and equals the float32 head's argmax on the same states."""
    monkeypatch.setattr(greedy, "bf16_matmul_is_fast", lambda: True)
    bf16 = LiveFeatures(tiny_model, tiny_tokenizer, replied_conversations(6), (0, 3), bf16=True)
    batch = bf16.collate([0, 1, 2], {(0, 3)})
    assert greedy._screens[tiny_model.get_output_embeddings()][1].positions > 0
    monkeypatch.setattr(greedy, "bf16_matmul_is_fast", lambda: False)
    assert torch.equal(bf16.collate([0, 1, 2], {(0, 3)})["argmax"], batch["argmax"])
