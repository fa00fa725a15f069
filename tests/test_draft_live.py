"""Live training features (elsi_lib.draft.live): the same batches as a feature store, from one target
forward per batch, and drafts trained on them that match drafts trained on the store."""

import contextlib

import pytest
import torch

from conftest import module_feature_store, replied_conversations
from elsi_lib.draft.live import LiveFeatures
from elsi_lib.draft.model import Eagle3Draft
from elsi_lib.draft.config import FINAL_NORM
from elsi_lib.draft.train import TrainSettings, collate, step_accuracy, train_drafts
from elsi_lib.draft.vocabulary import draft_vocabulary

LAYERS = (0, 2, 3)
N = 8

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def store(tiny_model, tiny_tokenizer, tmp_path_factory):
    return module_feature_store(tiny_model, tiny_tokenizer, tmp_path_factory, N, LAYERS)


@pytest.fixture(scope="module")
def live(tiny_model, tiny_tokenizer):
    return LiveFeatures(tiny_model, tiny_tokenizer, replied_conversations(N), LAYERS)


def test_answers_what_a_store_answers(store, live):
    assert len(live) == len(store) and live.layers == store.layers
    for i in range(N):
        assert live.length(i) == store.length(i) and live.start(i) == store.start(i)
        assert (live.ids(i) == store.ids(i)).all()
    assert (live.reply_tokens() == store.reply_tokens()).all()


@pytest.mark.parametrize("indices", [[0], [3, 1, 6], list(range(N))])
def test_a_batch_equals_the_stores(store, live, indices):
    sources = {(0, 3), (2,), FINAL_NORM}
    want, got = collate(store, indices, sources), collate(live, indices, sources)
    for name in ("ids", "valid", "start"):
        assert torch.equal(want[name], got[name]), name
    # the target's greedy token where training reads it (from the position before the reply on), 0 before
    read = got["valid"] & (torch.arange(got["valid"].shape[1])[None] >= (got["start"][:, None] - 1))
    assert torch.equal(got["argmax"][read], want["argmax"][read]) and read.sum() < got["valid"].sum()
    assert (got["argmax"][~read] == 0).all()
    # float16 values of one forward against another padding: equal up to float16's last bit
    torch.testing.assert_close(got["final_norm"], want["final_norm"], atol=2e-3, rtol=2e-3)
    for src in sources:
        assert got["features"][src].shape == want["features"][src].shape
        torch.testing.assert_close(got["features"][src], want["features"][src], atol=2e-3, rtol=2e-3)
    assert (got["features"][(0, 3)][~got["valid"]] == 0).all()  # padding is zero, as collate pads


def test_refuses_layers_it_was_not_built_for(tiny_model, tiny_tokenizer, live):
    with pytest.raises(ValueError, match=r"layers \[1\] are not among"):
        live.collate([0], {(1, 2)})
    with pytest.raises(ValueError, match="non-empty subset of 0..3"):
        LiveFeatures(tiny_model, tiny_tokenizer, replied_conversations(2), (0, 4))


def _drafts(model, store):
    counts = torch.bincount(torch.from_numpy(store.reply_tokens()), minlength=model.config.vocab_size)
    d2t, t2d = draft_vocabulary(counts, 64)
    drafts = {}
    for name, source in (("a", (0, 3)), ("b", FINAL_NORM)):
        drafts[name] = Eagle3Draft.from_target(model, source, 64, seed=0)
        drafts[name].set_vocabulary(d2t, t2d)
    return drafts, model.get_output_embeddings().weight[t2d].detach().float()


def test_drafts_trained_live_match_drafts_trained_on_the_store(tiny_model, store, live):
    settings = TrainSettings(batch_tokens=256, warmup=1, autocast_bf16=False)
    trained = {}
    for name, features in (("store", store), ("live", live)):
        drafts, rows = _drafts(tiny_model, store)
        out = train_drafts(drafts, features, rows, settings, key={"features": name}, progress=False)
        assert out["done"] == out["total"] > 1
        trained[name] = drafts
    for m in ("a", "b"):
        for (k, p), q in zip(trained["store"][m].state_dict().items(), trained["live"][m].state_dict().values()):
            torch.testing.assert_close(p, q, atol=1e-3, rtol=1e-3, msg=f"{m}: {k}")
        acc_store = step_accuracy(trained["store"][m], store, 2, autocast=False)
        acc_live = step_accuracy(trained["live"][m], store, 2, autocast=False)
        assert acc_store == pytest.approx(acc_live, abs=0.02)


def test_a_bf16_forward_is_close_but_not_the_same(tiny_model, tiny_tokenizer, live):
    bf16 = LiveFeatures(tiny_model, tiny_tokenizer, replied_conversations(N), LAYERS, bf16=True)
    full, half = live.collate([0, 1], {(0, 3)}), bf16.collate([0, 1], {(0, 3)})
    assert torch.equal(full["ids"], half["ids"]) and half["features"][(0, 3)].dtype == torch.float32
    difference = (full["features"][(0, 3)] - half["features"][(0, 3)]).abs().max()
    assert 0 < difference < 0.1 * full["features"][(0, 3)].abs().max()


def test_bf16_weights_rounded_once_give_autocasts_forward_bit_for_bit(tiny_model, tiny_tokenizer):
    """The decoder's linears in bfloat16 for the forward, then back: the same features as autocast
    casting the float32 weights itself, and the model's parameters untouched after (also on an error)."""
    bf16 = LiveFeatures(tiny_model, tiny_tokenizer, replied_conversations(N), LAYERS, bf16=True)
    before = {name: (p, p.detach().clone()) for name, p in tiny_model.named_parameters()}
    linear = next(m for m in tiny_model.get_decoder().modules() if isinstance(m, torch.nn.Linear))
    seen = []
    watch = linear.register_forward_pre_hook(lambda m, args: seen.append(m.weight.dtype))
    got = bf16.collate([0, 2], {(0, 3), FINAL_NORM})
    bf16._weights_for_autocast = contextlib.nullcontext  # autocast alone: each forward casts the weights
    want = bf16.collate([0, 2], {(0, 3), FINAL_NORM})
    watch.remove()
    assert seen == [torch.bfloat16, torch.float32]  # rounded once by us, then cast by autocast
    for src in ((0, 3), FINAL_NORM):
        assert torch.equal(got["features"][src], want["features"][src]), src
    assert torch.equal(got["argmax"], want["argmax"])
    del bf16._weights_for_autocast
    failing = tiny_model.get_decoder().layers[1].register_forward_hook(lambda *a: 1 / 0)
    try:
        with pytest.raises(ZeroDivisionError):
            bf16.collate([0], {(0, 3)})
    finally:
        failing.remove()
    for name, p in tiny_model.named_parameters():
        assert p is before[name][0] and p.dtype == torch.float32 and torch.equal(p, before[name][1]), name


def test_live_training_without_reply_tokens_is_refused_before_any_forward(tiny_model, tiny_tokenizer, store):
    """Every reply past max_length: no live batch holds a reply token; training is refused before
    the first target forward, saying how many reply tokens there are and why."""
    cut = LiveFeatures(tiny_model, tiny_tokenizer, replied_conversations(3), LAYERS, max_length=10)
    drafts, rows = _drafts(tiny_model, store)
    forwards = []
    handle = tiny_model.get_decoder().layers[0].register_forward_pre_hook(lambda *a: forwards.append(1))
    try:
        with pytest.raises(ValueError, match=r"3 sequences hold 0 reply tokens.*past max_length=10"):
            train_drafts(drafts, cut, rows, TrainSettings(autocast_bf16=False), key={"features": "cut"}, progress=False)
    finally:
        handle.remove()
    assert forwards == []
