import json
import math

import numpy as np
import pytest
import torch

from elsi_lib.common.cachefiles import cache_dir
from elsi_lib import (
    CacheError,
    CaptureSettings,
    LayerStats,
    capture,
    capture_variants,
    reply_conversations,
    select_positions,
    token_entropy,
)
from elsi_lib.inputs.chat import tokenize_conversation
from elsi_lib.hidden.forward import tokenize_samples
from elsi_lib.inputs.models import random_model

from conftest import interrupted_then_rerun, make_conversations, make_tiny_tokenizer

OPTS = dict(rho=0.5, block=4, progress=False)


def reference_capture(model, tokenizer, conversations, rho, block):
    """Plain reference: one sample at a time, no padding, transformers' own hidden states and
    full logits; the last layer's pre-norm output from a second pass with the norm removed."""
    decoder = model.get_decoder()
    sums, blocks = None, 0
    for conversation in conversations:
        ids = torch.tensor([tokenize_conversation(tokenizer, conversation)[0]])
        with torch.no_grad():
            out = model(ids, output_hidden_states=True)
            norm, decoder.norm = decoder.norm, torch.nn.Identity()
            try:
                last = decoder(ids).last_hidden_state[0]
            finally:
                decoder.norm = norm
        layers = [h[0] for h in out.hidden_states[1:-1]] + [last]  # outputs of layers 0..N-1
        p = torch.softmax(out.logits[0].double(), -1)
        entropy = -(p * torch.log(p)).sum(-1).numpy()
        keep = math.ceil(rho * len(entropy) - 1e-9)
        kept = np.sort(np.argsort(-entropy, kind="stable")[:keep])
        n_blocks = len(kept) // block
        if n_blocks == 0:
            continue
        stack = np.stack([h.double().numpy()[kept[: n_blocks * block]] for h in layers])  # (N, k, d)
        part = stack.reshape(len(layers), n_blocks, block, -1).sum(1)
        sums = part if sums is None else sums + part
        blocks += n_blocks
    return sums / blocks


def test_matches_plain_reference(tiny_model, tiny_tokenizer):
    conversations = make_conversations(6)
    expected = reference_capture(tiny_model, tiny_tokenizer, conversations, 0.5, 4)
    for batch_size in (1, 4):
        stats = capture(tiny_model, tiny_tokenizer, conversations, batch_size=batch_size, cache=False, **OPTS)
        assert stats.Z.shape == (4, 4, 32) and stats.Z.dtype == np.float64
        np.testing.assert_allclose(stats.Z, expected, rtol=1e-4, atol=1e-5)


def test_counts_and_per_sample_statistics(tiny_model, tiny_tokenizer):
    conversations = make_conversations(5, words=(5, 40))
    stats = capture(tiny_model, tiny_tokenizer, conversations, cache=False, **OPTS)
    c = stats.counts
    lengths = [len(tokenize_conversation(tiny_tokenizer, x)[0]) for x in conversations]
    assert c["samples"] == 5 and c["tokens_seen"] == c["tokens_eligible"] == sum(lengths)
    assert c["retained"] == sum(math.ceil(0.5 * n) for n in lengths)
    assert c["retained"] == 4 * c["blocks"] + c["dropped_remainder"]
    assert stats.sample_entropy.shape == (5 - c["samples_without_block"], 4)
    assert list(stats.sample_index) == sorted(stats.sample_index)
    assert np.all(np.isfinite(stats.sample_entropy)) and np.all(stats.sample_entropy >= 0)
    assert stats.final_norm.shape == (4, 32)


def test_rho_one_keeps_everything_and_random_control(tiny_model, tiny_tokenizer):
    conversations = make_conversations(4)
    everything = capture(tiny_model, tiny_tokenizer, conversations, cache=False, **{**OPTS, "rho": 1.0})
    assert everything.counts["retained"] == everything.counts["tokens_seen"]
    by_entropy = capture(tiny_model, tiny_tokenizer, conversations, cache=False, **OPTS)
    random_a = capture(tiny_model, tiny_tokenizer, conversations, select="random", cache=False, **OPTS)
    random_b = capture(tiny_model, tiny_tokenizer, conversations, select="random", cache=False, **OPTS)
    other_seed = capture(tiny_model, tiny_tokenizer, conversations, select="random", seed=1, cache=False, **OPTS)
    assert random_a.counts == by_entropy.counts  # same budget
    np.testing.assert_array_equal(random_a.Z, random_b.Z)  # seeded
    assert not np.allclose(random_a.Z, by_entropy.Z) and not np.allclose(random_a.Z, other_seed.Z)


def test_exclude_modes(tiny_model, tiny_tokenizer):
    conversations = make_conversations(4)
    per_sample = [tokenize_conversation(tiny_tokenizer, c) for c in conversations]
    first = capture(tiny_model, tiny_tokenizer, conversations, exclude="first", cache=False, **OPTS)
    assert first.counts["tokens_eligible"] == first.counts["tokens_seen"] - 4
    template = capture(tiny_model, tiny_tokenizer, conversations, exclude="template", cache=False, **OPTS)
    content = sum(sum(not t for t in tpl) for _, tpl in per_sample)
    assert template.counts["tokens_eligible"] == content
    assert 0 < content < template.counts["tokens_seen"]
    im_start = tiny_tokenizer.convert_tokens_to_ids("<|im_start|>")
    predicate = capture(
        tiny_model,
        tiny_tokenizer,
        conversations,
        cache=False,
        exclude=lambda position, token, is_template: token == im_start,
        **OPTS,
    )
    assert predicate.counts["tokens_eligible"] == sum(len(ids) - ids.count(im_start) for ids, _ in per_sample)


def test_template_mask_marks_only_template_tokens(tiny_tokenizer):
    conversation = [{"role": "user", "content": "what is two plus two"}]
    ids, is_template = tokenize_conversation(tiny_tokenizer, conversation)
    content = tiny_tokenizer.decode([i for i, t in zip(ids, is_template) if not t])
    template = tiny_tokenizer.decode([i for i, t in zip(ids, is_template) if t])
    assert content == "what is two plus two"
    assert "system" in template and "<|im_start|>" in template
    plain = make_tiny_tokenizer(chat_template=False)
    ids, is_template = tokenize_conversation(plain, conversation)
    assert plain.decode([i for i, t in zip(ids, is_template) if not t]) == "what is two plus two"


@pytest.mark.parametrize(
    "conversation, trim, content",
    [
        (  # a reply that also occurs in the template's text before it
            [{"role": "user", "content": "what is two plus two"}, {"role": "assistant", "content": "a"}],
            False,
            "what is two plus twoa",
        ),
        (  # a user turn that reads as a role marker
            [{"role": "user", "content": "system"}, {"role": "assistant", "content": "the answer"}],
            False,
            "systemthe answer",
        ),
        (  # a template that trims each message (Llama-3's, Gemma's) and a turn ending in a newline
            [{"role": "user", "content": " what is two plus two\n"}, {"role": "assistant", "content": "four"}],
            True,
            "what is two plus twofour",
        ),
    ],
    ids=["reply in the template", "user turn 'system'", "trimmed turn"],
)
def test_template_mask_finds_each_message_where_the_template_put_it(conversation, trim, content):
    """Each message is located by the template's own rendering, not by the first place its text occurs:
    a role marker is never content, a message's own text never template (exclude="template" reads it)."""
    from conftest import CHAT_TEMPLATE

    tokenizer = make_tiny_tokenizer()
    if trim:
        tokenizer.chat_template = CHAT_TEMPLATE.replace("message['content']", "(message['content'] | trim)")
        assert tokenizer.chat_template != CHAT_TEMPLATE
    ids, is_template = tokenize_conversation(tokenizer, conversation)
    assert tokenizer.decode([i for i, t in zip(ids, is_template) if not t]) == content
    assert CaptureSettings(exclude="template").key()["template_mask"] == 2  # older captures are not read
    assert "template_mask" not in CaptureSettings().key()  # the others keep their cache


def test_a_model_in_training_mode_is_refused_not_captured_with_dropout(tiny_tokenizer):
    model = random_model(n_layers=2, hidden_size=32, vocab_size=len(tiny_tokenizer), attention_dropout=0.5).train()
    with pytest.raises(ValueError, match=r"LlamaForCausalLM is in training mode .*model.eval\(\)"):
        capture(model, tiny_tokenizer, make_conversations(2), **OPTS)


def test_cache_is_reused_and_corruption_is_detected(tiny_model, tiny_tokenizer, monkeypatch, capsys):
    conversations = make_conversations(4)
    first = capture(tiny_model, tiny_tokenizer, conversations, **OPTS)
    files = list(cache_dir().glob("stats/*.safetensors"))
    assert len(files) == 1
    calls = []
    handle = tiny_model.get_decoder().layers[0].register_forward_pre_hook(lambda *a: calls.append(1))
    try:
        again = capture(tiny_model, tiny_tokenizer, conversations, **OPTS)
        assert calls == [] and np.array_equal(again.Z, first.Z)  # from the cache, no forward
        data = bytearray(files[0].read_bytes())
        data[-20] ^= 0xFF  # flip bits inside the arrays
        files[0].write_bytes(bytes(data))
        rebuilt = capture(tiny_model, tiny_tokenizer, conversations, **OPTS)
        assert calls and "checksum mismatch" in capsys.readouterr().out
        assert np.array_equal(rebuilt.Z, first.Z)
        files[0].write_bytes(files[0].read_bytes()[:100])  # truncated
        calls.clear()
        capture(tiny_model, tiny_tokenizer, conversations, **OPTS)
        assert calls and "unreadable" in capsys.readouterr().out
    finally:
        handle.remove()
    changed = capture(tiny_model, tiny_tokenizer, conversations, **{**OPTS, "rho": 0.6})
    assert not np.array_equal(changed.Z, first.Z)  # other settings, other cache entry


def test_interrupted_capture_resumes_with_identical_results(tiny_model, tiny_tokenizer, capsys):
    conversations = make_conversations(10)
    opts = dict(OPTS, batch_size=2, checkpoint_every=1)
    uninterrupted = capture(tiny_model, tiny_tokenizer, conversations, cache=False, **opts)
    resumed, forwards = interrupted_then_rerun(
        tiny_model, lambda: capture(tiny_model, tiny_tokenizer, conversations, **opts)
    )
    assert "resuming from a checkpoint: batch 2 of 5" in capsys.readouterr().out
    assert forwards == 3  # batches 3-5 only
    np.testing.assert_array_equal(resumed.Z, uninterrupted.Z)
    np.testing.assert_array_equal(resumed.sample_entropy, uninterrupted.sample_entropy)
    assert resumed.counts == uninterrupted.counts
    assert list(cache_dir().glob("stats/*.partial.*")) == []


def test_hooks_are_removed_even_on_error(tiny_model, tiny_tokenizer):
    layers = tiny_model.get_decoder().layers
    before = [len(layer._forward_hooks) for layer in layers]
    with pytest.raises(ValueError):
        capture(tiny_model, tiny_tokenizer, make_conversations(2, words=(1, 2)), cache=False, **{**OPTS, "block": 512})
    assert [len(layer._forward_hooks) for layer in layers] == before


def test_non_finite_hidden_state_names_layer_and_sample(tiny_model, tiny_tokenizer):
    def poison(module, args, output):
        output = output.clone()
        output[1] = float("nan")
        return output

    handle = tiny_model.get_decoder().layers[2].register_forward_hook(poison)
    try:
        with pytest.raises(FloatingPointError, match=r"layer 2 for sample \d"):
            capture(tiny_model, tiny_tokenizer, make_conversations(3), batch_size=3, cache=False, **OPTS)
    finally:
        handle.remove()


def test_replies_are_a_step_of_their_own_cached_and_truncated_as_capture_truncates(
    tiny_model, tiny_tokenizer, monkeypatch
):
    prompts = make_conversations(3) + make_conversations(1, seed=1, words=(80, 90))  # the last one is long
    replied = reply_conversations(tiny_model, tiny_tokenizer, prompts, max_new_tokens=6, max_length=64, progress=False)
    assert [c[:-1] for c in replied] == prompts and all(c[-1]["role"] == "assistant" for c in replied)
    with_replies_stats = capture(tiny_model, tiny_tokenizer, replied[:3], **OPTS)
    without = capture(tiny_model, tiny_tokenizer, prompts[:3], **OPTS)
    assert with_replies_stats.counts["tokens_seen"] > without.counts["tokens_seen"]

    seen = []  # what generation saw: each row's prompt without its left padding

    def record(input_ids, attention_mask, max_new_tokens, **kwargs):
        seen.extend(row[mask.bool()].tolist() for row, mask in zip(input_ids, attention_mask))
        return torch.cat([input_ids, torch.zeros(len(input_ids), max_new_tokens, dtype=torch.long)], dim=1)

    monkeypatch.setattr(tiny_model, "generate", record)
    assert (
        reply_conversations(tiny_model, tiny_tokenizer, prompts, max_new_tokens=6, max_length=64, progress=False)
        == replied
    )  # from the cache: nothing generated
    assert seen == []
    reply_conversations(
        tiny_model, tiny_tokenizer, prompts, max_new_tokens=6, max_length=64, cache=False, progress=False
    )
    samples, truncated = tokenize_samples(tiny_tokenizer, replied, 64)
    assert max(map(len, seen)) == 64 and truncated >= 1
    assert samples[3].ids in seen  # one rule: both keep the first max_length tokens of the long prompt


def test_capture_takes_conversations_as_given(tiny_model, tiny_tokenizer):
    with pytest.raises(TypeError, match="reply_conversations"):
        capture(tiny_model, tiny_tokenizer, make_conversations(2), responses="generate")


def test_capture_settings_are_checked_when_built():
    assert CaptureSettings() == CaptureSettings(
        rho=0.3,
        block=32,
        max_length=1024,
        exclude="none",
        select="entropy",
        keep_samples=False,
        on_long="truncate",
        seed=0,
    )
    with pytest.raises(ValueError, match="rho"):
        CaptureSettings(rho=0)
    with pytest.raises(ValueError, match="unknown capture setting"):
        CaptureSettings().replace(rhoo=0.2)
    assert CaptureSettings().replace(block=16).key()["block"] == 16
    assert "keep_samples" not in CaptureSettings().key() and CaptureSettings(keep_samples=True).key()["keep_samples"]


def test_cached_statistics_are_reused_from_another_checkout_folder(tiny_model, tiny_tokenizer, tmp_path):
    from elsi_lib import load_model

    conversations = make_conversations(4)
    for folder in ("checkout-a/model", "elsewhere/b/model"):
        tiny_model.save_pretrained(tmp_path / folder)
        tiny_tokenizer.save_pretrained(tmp_path / folder)
    model_a, tokenizer_a = load_model(tmp_path / "checkout-a/model")
    first = capture(model_a, tokenizer_a, conversations, **OPTS)
    model_b, tokenizer_b = load_model(tmp_path / "elsewhere/b/model")
    calls = []
    handle = model_b.get_decoder().layers[0].register_forward_pre_hook(lambda *a: calls.append(1))
    try:
        again = capture(model_b, tokenizer_b, conversations, **OPTS)
    finally:
        handle.remove()
    assert calls == [] and np.array_equal(again.Z, first.Z)  # the same cache entry: no forward
    assert "checkout-a" not in json.dumps(first.metadata) and str(tmp_path) not in json.dumps(first.metadata)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(rho=0.0), ValueError, "rho"),
        (dict(rho=1.5), ValueError, "rho"),
        (dict(block=1), ValueError, "block"),
        (dict(exclude="sinks"), ValueError, "exclude"),
        (dict(select="top"), ValueError, "select"),
        (dict(max_length=1), ValueError, "max_length"),
        (dict(rhoo=0.3), ValueError, "unknown capture setting"),
        (dict(on_long="skip"), ValueError, "on_long"),
    ],
)
def test_bad_arguments(tiny_model, tiny_tokenizer, kwargs, error, message):
    with pytest.raises(error, match=message):
        capture(tiny_model, tiny_tokenizer, make_conversations(2), **{**OPTS, **kwargs})


def test_empty_and_malformed_prompts(tiny_model, tiny_tokenizer):
    with pytest.raises(ValueError, match="no conversations"):
        capture(tiny_model, tiny_tokenizer, [], **OPTS)
    with pytest.raises(ValueError, match="conversation 1"):
        capture(tiny_model, tiny_tokenizer, [make_conversations(1)[0], []], **OPTS)


def test_long_prompts_truncate_or_refuse(tiny_model, tiny_tokenizer):
    conversations = make_conversations(3, words=(80, 90))
    stats = capture(tiny_model, tiny_tokenizer, conversations, max_length=64, cache=False, **OPTS)
    assert stats.counts["truncated_samples"] == 3 and stats.counts["tokens_seen"] == 3 * 64
    with pytest.raises(ValueError, match="conversation 0 has .* tokens > max_length=64"):
        capture(tiny_model, tiny_tokenizer, conversations, max_length=64, on_long="error", cache=False, **OPTS)


def test_no_full_block_is_an_error_before_the_forward(tiny_model, tiny_tokenizer, monkeypatch):
    """The count of kept positions is known from the tokens alone: no forward is run for nothing."""
    import elsi_lib.hidden.capture as capture_module

    def no_forward(*args, **kwargs):
        raise AssertionError("the forward ran")

    monkeypatch.setattr(capture_module, "hidden_batches", no_forward)
    long = {**OPTS, "block": 4096, "max_length": 4096}
    with pytest.raises(ValueError, match=r"no full block of 4096.*the best sample keeps \d+ \(rho 0.5 of its"):
        capture(tiny_model, tiny_tokenizer, make_conversations(2), cache=False, **long)
    with pytest.raises(ValueError, match=r"^variant 'few': no full block.*rho 0.0001"):  # names the variant
        capture_variants(
            tiny_model,
            tiny_tokenizer,
            make_conversations(2),
            {"all": {"rho": 1.0}, "few": {"rho": 1e-4}},
            cache=False,
            **OPTS,
        )
    cut = {**OPTS, "block": 48, "max_length": 48, "rho": 1.0, "exclude": "first"}  # cut to 48 tokens, 47 kept
    with pytest.raises(
        ValueError, match=r"keeps 47 \(rho 1 of its 47 eligible tokens; it was cut to max_length=48 tokens"
    ):
        capture(tiny_model, tiny_tokenizer, make_conversations(2, words=(80, 90)), cache=False, **cut)


def test_a_block_longer_than_max_length_is_refused_in_the_settings():
    with pytest.raises(ValueError, match="block 64 exceeds max_length 32"):
        CaptureSettings(block=64, max_length=32)


def test_a_model_whose_layers_elsi_cannot_read_is_named_before_the_capture(tiny_tokenizer):
    from transformers import GPT2Config, GPT2LMHeadModel

    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=len(tiny_tokenizer)))
    with pytest.raises(ValueError, match="a GPT2Model, whose decoder layers elsi cannot find"):
        capture(gpt2, tiny_tokenizer, make_conversations(2), cache=False, **OPTS)


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda v: random_model(n_layers=0, hidden_size=32, vocab_size=v), "a LlamaForCausalLM with no decoder layers"),
        (lambda v: random_model(n_layers=2, hidden_size=32, vocab_size=v).model, "a LlamaModel has no LM head"),
        (
            lambda v: random_model(
                "opt",
                n_layers=2,
                hidden_size=32,
                vocab_size=v,
                ffn_dim=64,
                word_embed_proj_dim=16,
                max_position_embeddings=512,
            ),
            r"an? OPTDecoder whose output is projected out of the hidden size \(32\)",
        ),
    ],
    ids=["no layers", "base model", "opt project_out"],
)
def test_models_capture_cannot_read_are_refused_before_any_work(tiny_tokenizer, monkeypatch, build, message):
    import elsi_lib.hidden.capture as capture_module

    monkeypatch.setattr(capture_module, "tokenize_samples", lambda *a, **k: pytest.fail("tokenized"))
    with pytest.raises(ValueError, match=message):
        capture(build(len(tiny_tokenizer)), tiny_tokenizer, make_conversations(2), cache=False, **OPTS)


def test_token_entropy_chunks_and_selection():
    torch.manual_seed(0)
    head = torch.nn.Linear(8, 50, bias=False)
    hidden = torch.randn(37, 8)
    p = torch.softmax(head(hidden).double(), -1)
    expected = -(p * p.log()).sum(-1)
    for chunk in (50, 500, 1 << 24):  # one position, ten, all at once
        torch.testing.assert_close(
            token_entropy(hidden, head, chunk_elements=chunk).double(), expected, rtol=1e-5, atol=1e-6
        )
    whole = token_entropy(hidden, head, cache_elements=1 << 24)  # the float64 pass over all rows at once
    for rows in (1, 3, 10):  # ... and over a few rows at a time (the cache's share): the same bits
        assert torch.equal(token_entropy(hidden, head, cache_elements=50 * rows), whole)
    entropy = torch.tensor([0.1, 0.9, 0.5, 0.9, 0.2])
    eligible = torch.tensor([True, True, True, False, True])
    assert select_positions(entropy, eligible, 0.5).tolist() == [1, 2]
    assert select_positions(entropy, eligible, 1.0).tolist() == [0, 1, 2, 4]
    g = lambda: torch.Generator().manual_seed(3)
    assert (
        select_positions(entropy, eligible, 0.5, "random", g()).tolist()
        == select_positions(entropy, eligible, 0.5, "random", g()).tolist()
    )


def test_layerstats_round_trip_and_faults(tmp_path):
    rng = np.random.default_rng(0)
    Z = rng.normal(size=(3, 4, 5))
    Z[1, 0] *= 100  # one dominant row in layer 1
    stats = LayerStats(
        Z=Z,
        final_norm=rng.normal(size=(4, 5)),
        sample_entropy=rng.random((2, 3)),
        sample_index=np.array([0, 2]),
        abs_max=np.ones((3, 5)),
        abs_sum=np.ones((3, 5)) * 10,
        counts={"retained": 10},
        metadata={"rho": 0.3},
    )
    stats.abs_max[2, 4] = 500.0
    path = stats.save(tmp_path / "s.safetensors")
    loaded = LayerStats.load(path, expect_metadata={"rho": 0.3})
    np.testing.assert_array_equal(loaded.Z, Z)
    assert loaded.counts == {"retained": 10}
    share = loaded.top_row_energy_share()
    assert share[1] > 0.99 and share[0] < 0.9
    assert loaded.massive_dimensions(factor=100) == [[], [], [4]]
    with pytest.raises(CacheError, match="stale"):
        LayerStats.load(path, expect_metadata={"rho": 0.5})
    path.write_bytes(path.read_bytes()[:-7])
    with pytest.raises(CacheError):
        LayerStats.load(path)


@pytest.mark.slow
def test_bundled_model_capture(bundled):
    model, tokenizer = bundled
    from elsi_lib import calibration_prompts

    stats = capture(model, tokenizer, calibration_prompts(4, seed=0), rho=0.3, block=8, cache=False, progress=False)
    assert stats.Z.shape == (30, 8, 576) and np.all(np.isfinite(stats.Z))
    assert stats.counts["blocks"] >= 4


def test_bf16_qwen3_shaped_model_loaded_with_device_map(tiny_tokenizer, tmp_path):
    from elsi_lib import load_model, random_model

    small = random_model(
        "qwen3",
        n_layers=6,
        hidden_size=64,
        n_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        vocab_size=len(tiny_tokenizer),
    )
    small.save_pretrained(tmp_path)
    tiny_tokenizer.save_pretrained(tmp_path)
    model, tokenizer = load_model(tmp_path, dtype="bfloat16", device_map="cpu")
    assert next(model.parameters()).dtype == torch.bfloat16
    stats = capture(model, tokenizer, make_conversations(4), cache=False, **OPTS)
    assert stats.Z.shape == (6, 4, 64) and stats.Z.dtype == np.float64 and np.all(np.isfinite(stats.Z))
    assert stats.metadata["dtype"] == "torch.bfloat16"


VARIANTS = {
    "all": {"rho": 1.0},
    "entropy": {},
    "random": {"select": "random"},
    "no_template": {"exclude": "template", "keep_samples": True},
}


def test_variants_equal_separate_captures_from_one_pass(tiny_model, tiny_tokenizer):
    conversations = make_conversations(5)
    common = dict(block=4, progress=False)
    calls = []
    handle = tiny_model.get_decoder().layers[0].register_forward_pre_hook(lambda *a: calls.append(1))
    try:
        together = capture_variants(tiny_model, tiny_tokenizer, conversations, VARIANTS, **common)
        forwards = len(calls)
        again = capture_variants(tiny_model, tiny_tokenizer, conversations, VARIANTS, **common)
        assert len(calls) == forwards  # every variant came from its cache
        single = capture(tiny_model, tiny_tokenizer, conversations, rho=0.3, select="random", **common)
        assert len(calls) == forwards  # a variant is cached exactly as capture caches it
    finally:
        handle.remove()
    assert np.array_equal(single.Z, together["random"].Z) and np.array_equal(again["all"].Z, together["all"].Z)
    for name, options in VARIANTS.items():
        alone = capture(tiny_model, tiny_tokenizer, conversations, cache=False, **{"rho": 0.3, **options, **common})
        assert np.allclose(alone.Z, together[name].Z, rtol=1e-12, atol=1e-12), name
        assert alone.counts == together[name].counts
    assert together["all"].counts["retained"] == together["all"].counts["tokens_eligible"]
    assert together["no_template"].counts["tokens_eligible"] < together["entropy"].counts["tokens_eligible"]


def test_kept_sample_sums_rebuild_Z_and_survive_the_cache(tiny_model, tiny_tokenizer):
    conversations = make_conversations(6)
    stats = capture(tiny_model, tiny_tokenizer, conversations, keep_samples=True, **OPTS)
    S = len(stats.sample_index)
    assert stats.sample_sums.shape == (S, *stats.Z.shape) and stats.sample_blocks.sum() == stats.counts["blocks"]
    assert np.allclose(stats.resampled_Z(np.ones(S)), stats.Z, rtol=1e-5, atol=1e-6)
    weights = np.zeros(S)
    weights[0] = 2
    first = stats.sample_sums[0].astype(np.float64) / stats.sample_blocks[0]
    assert np.allclose(stats.resampled_Z(weights), first)
    both = stats.resampled_Z(np.stack([np.ones(S), weights]))  # (R, N, B, d)
    assert (
        both.shape == (2, *stats.Z.shape)
        and np.allclose(both[1], first)
        and np.allclose(both[0], stats.Z, rtol=1e-5, atol=1e-6)
    )
    loaded = capture(tiny_model, tiny_tokenizer, conversations, keep_samples=True, **OPTS)  # from the cache
    assert np.array_equal(loaded.sample_sums, stats.sample_sums)
    plain = capture(tiny_model, tiny_tokenizer, conversations, **OPTS)
    assert plain.sample_sums is None
    with pytest.raises(ValueError, match="keep_samples=True"):
        plain.resampled_Z(np.ones(S))
    with pytest.raises(ValueError, match="non-negative"):
        stats.resampled_Z(-np.ones(S))


def test_bad_variants_are_refused(tiny_model, tiny_tokenizer):
    conversations = make_conversations(2)
    with pytest.raises(ValueError, match="no variants"):
        capture_variants(tiny_model, tiny_tokenizer, conversations, {})
    with pytest.raises(ValueError, match="unknown option"):
        capture_variants(tiny_model, tiny_tokenizer, conversations, {"x": {"rhoo": 0.2}})
    with pytest.raises(ValueError, match="variant 'x': rho"):
        capture_variants(tiny_model, tiny_tokenizer, conversations, {"x": {"rho": 2}})


@pytest.mark.parametrize(
    "rho, how, entropy, reason",
    [
        (0.0, "entropy", [0.1, 0.2], r"rho must be a share of the positions in \(0, 1\], got 0.0"),
        (1.5, "entropy", [0.1, 0.2], "got 1.5"),
        (-1, "entropy", [0.1, 0.2], "got -1"),
        (True, "entropy", [0.1, 0.2], "got True"),
        (0.5, "bogus", [0.1, 0.2], "how must be 'entropy' or 'random', got 'bogus'"),
        (0.5, "entropy", [[0.1, 0.2]], r"one value per position, of one length: shapes \(1, 2\) and \(2,\)"),
    ],
)
def test_position_selection_refuses_what_it_cannot_mean(rho, how, entropy, reason):
    """A share of 0, above 1 or below 0 kept nothing or everything without a word, and an unknown `how`
    fell back to entropy; a 2-D entropy or numpy input failed deep in torch."""
    with pytest.raises(ValueError, match=reason):
        select_positions(torch.tensor(entropy), torch.tensor([True, True]), rho, how)
    assert select_positions(np.array([0.1, 0.9]), np.array([True, True]), np.float32(0.5)).tolist() == [1]
