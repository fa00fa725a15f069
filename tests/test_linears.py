"""elsi_lib.draft.linears: the weight-first product equals F.linear (float32 rounding apart) for every
row count and input rank, falls back to F.linear beyond max_rows, and the swap is undone on exit."""

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from elsi_lib.draft.linears import weight_first_linear, weight_first_linears


@pytest.mark.parametrize("shape", [(1, 16), (3, 16), (2, 3, 16), (1, 1, 16), (0, 16)])
@pytest.mark.parametrize("bias", [True, False])
def test_the_product_is_f_linear(shape, bias):
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(24, 16, generator=g)
    b = torch.randn(24, generator=g) if bias else None
    x = torch.randn(*shape, generator=g)
    got = weight_first_linear(x, weight, b, max_rows=8)
    assert got.shape == (*shape[:-1], 24) and got.is_contiguous()
    torch.testing.assert_close(got, F.linear(x, weight, b), rtol=1e-5, atol=1e-5)


def test_more_rows_than_max_take_the_usual_kernel(monkeypatch):
    calls = []
    monkeypatch.setattr(torch, "mm", lambda *a: calls.append(a) or torch.matmul(*a))
    weight, x = torch.randn(4, 3), torch.randn(5, 3)
    weight_first_linear(x, weight, max_rows=4)
    assert calls == []
    weight_first_linear(x, weight, max_rows=5)
    assert len(calls) == 1


def test_the_swap_covers_every_linear_and_is_undone():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Sequential(nn.Linear(8, 4, bias=False)))
    x = torch.randn(2, 8)
    before = model(x)
    with weight_first_linears(model, max_rows=4):
        assert all("forward" in vars(m) for m in model.modules() if isinstance(m, nn.Linear))
        torch.testing.assert_close(model(x), before, rtol=1e-5, atol=1e-5)
    assert not any("forward" in vars(m) for m in model.modules())
    with pytest.raises(RuntimeError, match="inside"):
        with weight_first_linears(model):
            raise RuntimeError("inside")
    assert not any("forward" in vars(m) for m in model.modules())
    with weight_first_linears(model, max_rows=0):
        assert not any("forward" in vars(m) for m in model.modules())


@pytest.mark.parametrize("bad", [-1, 2.5, True, "8"])
def test_bad_max_rows(bad):
    with pytest.raises(ValueError, match="max_rows"):
        with weight_first_linears(nn.Linear(2, 2), max_rows=bad):
            pass


def test_one_dimensional_and_strided_inputs():
    g = torch.Generator().manual_seed(1)
    weight, bias = torch.randn(12, 8, generator=g), torch.randn(12, generator=g)
    x = torch.randn(8, generator=g)
    torch.testing.assert_close(weight_first_linear(x, weight, bias), F.linear(x, weight, bias), rtol=1e-5, atol=1e-5)
    strided = torch.randn(8, 3, generator=g).t()  # (3, 8), not contiguous
    torch.testing.assert_close(
        weight_first_linear(strided, weight, bias), F.linear(strided, weight, bias), rtol=1e-5, atol=1e-5
    )


def test_autocast_is_left_to_f_linear():
    layer = nn.Linear(8, 6)
    x = torch.randn(2, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = layer(x)
        with weight_first_linears(layer):
            got = layer(x)
    assert got.dtype == expected.dtype == torch.bfloat16
    torch.testing.assert_close(got, expected)


def test_keyword_input_own_forwards_and_copies():
    import copy

    torch.manual_seed(0)
    own = nn.Linear(4, 4)
    own.forward = lambda input: input * 0  # an instance forward of its own: left alone
    model = nn.Sequential(nn.Linear(4, 4), own)
    x = torch.randn(2, 4)
    with weight_first_linears(model):
        torch.testing.assert_close(model[0](input=x), F.linear(x, model[0].weight, model[0].bias))
        twin = copy.deepcopy(model)
        twin[0].weight.data.zero_()
        twin[0].bias.data.zero_()
        assert torch.equal(twin[0](x), torch.zeros(2, 4))  # the copy computes with its own weights
        assert not torch.equal(model[0](x), torch.zeros(2, 4))
    assert "forward" not in vars(model[0]) and "forward" in vars(own)
    assert torch.equal(own(x), torch.zeros(2, 4))
