"""No silent wrong answers from caches, checkpoints and inputs: each fault gives the right answer
or a clear error."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch

from elsi_lib import CacheError, LayerStats, reply_conversations
from elsi_lib import capture
from elsi_lib.study.paper import layer_measures
from elsi_lib.common.cachefiles import cache_dir

from conftest import interrupted_then_rerun, make_conversations

OPTS = dict(rho=0.5, block=4, progress=False)


class Forwards:
    """Counts the forwards of a model's first decoder layer."""

    def __init__(self, model):
        self.calls = []
        self.handle = model.get_decoder().layers[0].register_forward_pre_hook(lambda *a: self.calls.append(1))

    def __enter__(self):
        return self.calls

    def __exit__(self, *exc):
        self.handle.remove()


# ---------------------------------------------------------------- 1. cache identity


def test_a_changed_chat_template_is_a_new_cache_entry(tiny_model, tiny_tokenizer):
    conversations = make_conversations(4)
    first = capture(tiny_model, tiny_tokenizer, conversations, **OPTS)
    other = copy.deepcopy(tiny_tokenizer)
    other.chat_template = tiny_tokenizer.chat_template.replace("You are a tiny test model.", "Be brief.")
    with Forwards(tiny_model) as calls:
        changed = capture(tiny_model, other, conversations, **OPTS)
    assert calls and changed.counts["tokens_seen"] != first.counts["tokens_seen"]


def test_a_weight_changed_anywhere_is_a_new_cache_entry(tiny_tokenizer):
    from elsi_lib import random_model

    model = random_model(n_layers=2, hidden_size=32, vocab_size=len(tiny_tokenizer), seed=0)
    conversations = make_conversations(4)
    first = capture(model, tiny_tokenizer, conversations, **OPTS)
    weight = model.get_decoder().layers[1].mlp.down_proj.weight  # 32 x 128: a strided sample skips index 1
    with torch.no_grad():
        weight.view(-1)[1] += 0.5  # in place: the remembered fingerprint must notice
    with Forwards(model) as calls:
        changed = capture(model, tiny_tokenizer, conversations, **OPTS)
    assert calls and not np.array_equal(changed.Z, first.Z)


def test_fingerprint_covers_every_weight_and_no_path(tiny_model, tmp_path):
    from elsi_lib.common.identity import model_fingerprint, weights_sha256

    before = model_fingerprint(tiny_model)
    assert before == model_fingerprint(tiny_model) and before["weights_sha256"] == weights_sha256(tiny_model)
    twin = copy.deepcopy(tiny_model)
    twin.config._name_or_path = str(tmp_path / "somewhere")
    assert model_fingerprint(twin) == before  # where it was loaded from does not matter
    twin.config.rms_norm_eps *= 2  # a config change after the weights hash was remembered
    assert model_fingerprint(twin)["config_sha256"] != before["config_sha256"]
    twin.config.rms_norm_eps /= 2
    with torch.no_grad():
        twin.lm_head.weight[-1, -1] += 1.0
    assert model_fingerprint(twin)["weights_sha256"] != before["weights_sha256"]


def test_reply_cache_covers_the_library_versions(tiny_model, tiny_tokenizer, monkeypatch):
    from elsi_lib.common import identity
    from elsi_lib.hidden import replies

    prompts = make_conversations(2)
    reply_conversations(tiny_model, tiny_tokenizer, prompts, max_new_tokens=3, progress=False)
    real = identity.versions()
    monkeypatch.setattr(replies, "versions", lambda: {**real, "transformers": "0.0.1"})
    calls = []
    original = tiny_model.generate
    monkeypatch.setattr(tiny_model, "generate", lambda *a, **k: calls.append(1) or original(*a, **k))
    reply_conversations(tiny_model, tiny_tokenizer, prompts, max_new_tokens=3, progress=False)
    assert calls  # another transformers, another cache entry


# ---------------------------------------------------------------- 2. checksums over every byte used


def test_a_bit_flipped_in_the_header_of_cached_statistics_is_detected(tmp_path):
    rng = np.random.default_rng(0)
    stats = LayerStats(
        Z=rng.normal(size=(3, 2, 4)),
        final_norm=rng.normal(size=(2, 4)),
        sample_entropy=rng.random((5, 3)),
        sample_index=np.arange(5),
        abs_max=np.ones((3, 4)),
        abs_sum=np.ones((3, 4)),
        counts={"samples": 5, "blocks": 7},
        metadata={"rho": 0.3},
    )
    path = stats.save(tmp_path / "stats.safetensors")
    data = path.read_bytes()
    assert data.count(b'\\"blocks\\": 7') == 1
    path.write_bytes(data.replace(b'\\"blocks\\": 7', b'\\"blocks\\": 6'))  # same length: still parses
    with pytest.raises(CacheError, match="checksum"):
        LayerStats.load(path)


def test_a_corrupt_checkpoint_is_discarded_never_resumed(tiny_model, tiny_tokenizer, capsys):
    conversations = make_conversations(10)
    opts = dict(OPTS, batch_size=2, checkpoint_every=1)
    uninterrupted = capture(tiny_model, tiny_tokenizer, conversations, cache=False, **opts)

    def corrupt_the_checkpoint():
        [partial] = cache_dir().glob("stats/*.partial.safetensors")
        data = bytearray(partial.read_bytes())
        data[-8] ^= 0x10  # one bit of the last array's bytes
        partial.write_bytes(bytes(data))

    again, forwards = interrupted_then_rerun(
        tiny_model, lambda: capture(tiny_model, tiny_tokenizer, conversations, **opts), between=corrupt_the_checkpoint
    )
    out = capsys.readouterr().out
    assert "discarding the checkpoint" in out and "checksum" in out and "resuming" not in out
    assert forwards == 5  # every batch again
    np.testing.assert_array_equal(again.Z, uninterrupted.Z)
    assert again.counts == uninterrupted.counts


def test_a_corrupt_reply_cache_is_regenerated(tiny_model, tiny_tokenizer, capsys):
    prompts = make_conversations(2)
    replied = reply_conversations(tiny_model, tiny_tokenizer, prompts, max_new_tokens=4, progress=False)
    [path] = cache_dir().glob("responses/*.json")
    wrapper = json.loads(path.read_text())
    body = json.loads(wrapper["body"])
    body["replies"][0][1] = "a reply nobody wrote"
    wrapper["body"] = json.dumps(body, sort_keys=True)
    path.write_text(json.dumps(wrapper))
    again = reply_conversations(tiny_model, tiny_tokenizer, prompts, max_new_tokens=4, progress=False)
    assert again == replied and "checksum mismatch" in capsys.readouterr().out


# ---------------------------------------------------------------- 4. non-finite token entropies


def test_nan_token_entropies_name_the_sample(tiny_model, tiny_tokenizer):
    def poison(module, args, output):
        output = output.clone()
        output[3] = float("nan")  # one position's logits
        return output

    handle = tiny_model.lm_head.register_forward_hook(poison)
    try:
        with pytest.raises(FloatingPointError, match=r"entropies of sample \d"):
            capture(tiny_model, tiny_tokenizer, make_conversations(3), cache=False, **OPTS)
    finally:
        handle.remove()


# ---------------------------------------------------------------- unclear failures: inputs, cache folder


@pytest.mark.parametrize(
    "conversation, message",
    [
        ([{"role": "user", "content": 42}], "role and content must be strings"),
        ([{"role": "user", "content": None}], "role and content must be strings"),
        ("just a string", "conversation 0 must be"),
    ],
)
def test_malformed_conversations_are_named(tiny_model, tiny_tokenizer, conversation, message):
    with pytest.raises(ValueError, match=message):
        capture(tiny_model, tiny_tokenizer, [conversation], **OPTS)


def test_replies_refuse_answered_conversations_and_bad_batch_sizes(tiny_model, tiny_tokenizer):
    answered = [make_conversations(1)[0] + [{"role": "assistant", "content": "done"}]]
    with pytest.raises(ValueError, match="nothing to reply to"):
        reply_conversations(tiny_model, tiny_tokenizer, answered, max_new_tokens=2, progress=False)
    for batch_size in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="batch_size"):
            reply_conversations(
                tiny_model, tiny_tokenizer, make_conversations(2), batch_size=batch_size, progress=False
            )


def test_an_unwritable_cache_fails_before_the_work(tiny_model, tiny_tokenizer, tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("ELSI_CACHE_DIR", str(blocker / "cache"))
    with Forwards(tiny_model) as calls, pytest.raises(PermissionError, match="ELSI_CACHE_DIR"):
        capture(tiny_model, tiny_tokenizer, make_conversations(4), **OPTS)
    assert calls == []
    assert capture(tiny_model, tiny_tokenizer, make_conversations(4), cache=False, **OPTS).counts["samples"] == 4


def test_a_bootstrap_over_few_prompts_says_so():
    sums = np.random.default_rng(0).normal(size=(1, 4, 3, 5)).astype(np.float32)  # one prompt
    stats = LayerStats(
        Z=sums[0].astype(np.float64),
        final_norm=np.ones((3, 5)),
        sample_entropy=np.ones((1, 4)),
        sample_index=np.arange(1),
        abs_max=np.ones((4, 5)),
        abs_sum=np.ones((4, 5)),
        sample_sums=sums,
        sample_blocks=np.array([1]),
    )
    with pytest.warns(UserWarning, match="rests on 1 prompt"):
        table = layer_measures.bootstrap_choices(stats, 2, n_boot=5, progress=False)
    assert table["share"].tolist() == [1.0]
