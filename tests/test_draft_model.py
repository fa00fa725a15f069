"""EAGLE-3 draft model (elsi_lib.draft.model) on tiny random Llama / Qwen2 targets."""

import pytest
import torch

from elsi_lib import random_model
from elsi_lib.draft.vocabulary import NOT_IN_DRAFT, draft_vocabulary, init_lm_head_from_target, to_draft, to_target
from elsi_lib.draft.model import Eagle3Draft
from elsi_lib.draft.config import DraftConfig

N_LAYERS, D, VOCAB, DRAFT_VOCAB = 6, 64, 256, 40
LAYER_SETS = {1: (4,), 2: (1, 4), 3: (1, 3, 5), 4: (0, 2, 3, 5)}


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def target(request):
    # Qwen2 with grouped-query attention (4 heads, 2 kv heads) to exercise repeat_kv.
    overrides = {"num_key_value_heads": 2} if request.param == "qwen2" else {}
    return random_model(request.param, n_layers=N_LAYERS, hidden_size=D, vocab_size=VOCAB, **overrides)


def make_draft(target, m=3, seed=0):
    return Eagle3Draft.from_target(target, LAYER_SETS[m], DRAFT_VOCAB, seed=seed).eval()


def inputs(b=2, T=7, m=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (b, T), generator=g), torch.randn(b, T, m * D, generator=g)


def test_config_from_target(target):
    config = DraftConfig.from_target(target.config, (5, 1, 3), DRAFT_VOCAB)
    assert config.layer_ids == (1, 3, 5) and config.m == 3  # sorted: features concatenate in ascending order
    assert (config.hidden_size, config.head_dim, config.vocab_size) == (D, D // 4, VOCAB)
    assert config.num_key_value_heads == target.config.num_key_value_heads
    assert config.rope_theta == target.config.rope_parameters["rope_theta"]
    assert config.family == target.config.model_type
    with pytest.raises(ValueError, match="out of range"):
        DraftConfig.from_target(target.config, (N_LAYERS,), DRAFT_VOCAB)
    with pytest.raises(ValueError, match="draft_vocab_size"):
        DraftConfig.from_target(target.config, (1,), VOCAB + 1)


def test_unsupported_family_is_an_error():
    gpt2 = random_model("gpt2", n_layers=2, hidden_size=D, vocab_size=VOCAB)
    with pytest.raises(ValueError, match="unsupported target family 'gpt2'"):
        DraftConfig.from_target(gpt2.config, (1,), DRAFT_VOCAB)


@pytest.mark.parametrize("m", [1, 2, 3, 4])
def test_forward_shapes_and_feedback_step(target, m):
    draft = make_draft(target, m)
    ids, features = inputs(m=m)
    with torch.no_grad():
        logits, hidden = draft(ids, features=features)
        assert logits.shape == (2, 7, DRAFT_VOCAB) and hidden.shape == (2, 7, D)
        # Step 2: the draft's own hidden state replaces the fc output, positions advance by one.
        logits2, hidden2 = draft(ids, hidden, positions=torch.arange(1, 8))
        assert logits2.shape == (2, 7, DRAFT_VOCAB) and hidden2.shape == (2, 7, D)
        # features= is fc followed by the same step as hidden=.
        torch.testing.assert_close(draft(ids, draft.project(features))[0], logits)
    assert torch.isfinite(logits).all() and torch.isfinite(logits2).all()


def test_inputs_are_checked(target):
    draft = make_draft(target, 3)
    ids, features = inputs(m=3)
    with pytest.raises(ValueError, match="exactly one"):
        draft(ids, features[..., :D], features=features)
    with pytest.raises(ValueError, match="m\\*d"):
        draft(ids, features=features[..., : 2 * D])
    with pytest.raises(ValueError, match="expected d"):
        draft(ids, features)


def test_attention_matches_transformers_llama_attention(target):
    """Reference: transformers' eager LlamaAttention with 2d-wide q/k/v swapped in (the way
    speculators' `LlamaDecoderEagle3FirstLayer` builds it), on the same weights and rotary tables."""
    from transformers.models.llama.modeling_llama import LlamaAttention

    draft = make_draft(target)
    block = draft.config.block_config()
    block._attn_implementation = "eager"
    reference = LlamaAttention(block, layer_idx=0)
    for name in "qkvo":
        setattr(reference, f"{name}_proj", getattr(draft.midlayer.self_attn, f"{name}_proj"))
    x = torch.randn(2, 7, 2 * D, generator=torch.Generator().manual_seed(3))
    cos, sin = draft.rotary_emb(x, torch.arange(7).expand(2, 7))
    additive = torch.full((7, 7), float("-inf")).triu(1).expand(2, 1, 7, 7)
    causal = torch.ones(7, 7, dtype=torch.bool).tril().expand(2, 1, 7, 7)
    with torch.no_grad():
        torch.testing.assert_close(
            draft.midlayer.self_attn(x, cos, sin, causal)[0], reference(x, (cos, sin), additive)[0]
        )


def test_vocabulary_maps_round_trip():
    counts = torch.tensor([5, 0, 9, 9, 1, 7, 3, 7, 0, 2])
    d2t, t2d = draft_vocabulary(counts, 4)
    chosen = torch.tensor([2, 3, 5, 7])  # counts 9, 9, 7, 7; id 0 (count 5) would be next
    assert d2t.dtype == torch.long and t2d.dtype == torch.bool
    assert torch.equal(t2d.nonzero().squeeze(1), chosen)  # t2d marks exactly the chosen ids
    draft_ids = torch.arange(4)
    assert torch.equal(to_target(draft_ids, d2t), chosen)
    assert torch.equal(to_draft(to_target(draft_ids, d2t), t2d), draft_ids)  # draft -> target -> draft
    outside = to_draft(torch.tensor([[0, 2], [9, 7]]), t2d)
    assert torch.equal(outside, torch.tensor([[NOT_IN_DRAFT, 0], [NOT_IN_DRAFT, 3]]))
    # Ties go to the lower id, deterministically: size 3 keeps 5 (count 7) over 7 (count 7).
    assert torch.equal(draft_vocabulary(counts, 3)[1].nonzero().squeeze(1), torch.tensor([2, 3, 5]))


def test_d2t_as_vllm_reads_it():
    """vLLM `Eagle3LlamaForCausalLM.compute_logits`: targets = arange(draft_vocab) + d2t, then
    logits_new[:, targets] = logits over a -inf row of the target vocabulary."""
    counts = torch.randint(0, 50, (VOCAB,), generator=torch.Generator().manual_seed(1))
    d2t, t2d = draft_vocabulary(counts, DRAFT_VOCAB)
    assert torch.equal(torch.arange(DRAFT_VOCAB) + d2t, t2d.nonzero().squeeze(1))
    assert counts[t2d].min() >= counts[~t2d].max()  # the most frequent tokens
    logits = torch.randn(3, DRAFT_VOCAB)
    full = logits.new_full((3, VOCAB), float("-inf"))
    full[:, torch.arange(DRAFT_VOCAB) + d2t] = logits
    assert torch.equal(full.argmax(-1), to_target(logits.argmax(-1), d2t))


def test_set_vocabulary_checks_consistency(target):
    draft = make_draft(target)
    d2t, t2d = draft_vocabulary(torch.arange(VOCAB), DRAFT_VOCAB)  # the last DRAFT_VOCAB ids
    draft.set_vocabulary(d2t, t2d)
    assert torch.equal(draft.to_target(torch.tensor([0])), torch.tensor([VOCAB - DRAFT_VOCAB]))
    with pytest.raises(ValueError, match="same ascending set"):
        draft.set_vocabulary(d2t, torch.roll(t2d, 1))


def test_embedding_is_shared_frozen_and_not_owned(target):
    draft = make_draft(target).train()
    embedding = target.get_input_embeddings().weight
    assert draft.embed_weight.data_ptr() == embedding.data_ptr()  # same storage
    assert not any("embed" in name for name in draft.state_dict())
    assert all(p.data_ptr() != embedding.data_ptr() for p in draft.parameters())
    embedding.grad = None
    ids, features = inputs()
    logits, hidden = draft(ids, features=features)
    logits2, _ = draft(ids, hidden)
    (logits.sum() + logits2.sum()).backward()
    assert embedding.grad is None  # frozen: nothing flows back into the target
    assert all(p.grad is not None for p in draft.parameters())
    assert embedding.requires_grad == target.get_input_embeddings().weight.requires_grad  # target untouched


def test_causal(target):
    draft = make_draft(target)
    ids, features = inputs(T=9)
    later_ids, later_features = ids.clone(), features.clone()
    later_ids[:, 6] = (ids[:, 6] + 1) % VOCAB
    later_features[:, 6:] += 1.0
    with torch.no_grad():
        (a, ha), (b, hb) = draft(ids, features=features), draft(later_ids, features=later_features)
    torch.testing.assert_close(a[:, :6], b[:, :6])
    torch.testing.assert_close(ha[:, :6], hb[:, :6])
    assert not torch.allclose(a[:, 6], b[:, 6])


def test_padding_mask_leaves_real_tokens_finite_and_unchanged(target):
    draft = make_draft(target)
    ids, features = inputs(T=6)
    mask = torch.ones(2, 6, dtype=torch.long)
    mask[1, 4:] = 0  # right padding: causal attention already ignores it for earlier tokens
    with torch.no_grad():
        plain, masked = draft(ids, features=features)[0], draft(ids, features=features, attention_mask=mask)[0]
    assert torch.isfinite(masked).all()
    torch.testing.assert_close(masked[1, :4], plain[1, :4])
    torch.testing.assert_close(masked[0], plain[0])


def test_same_seed_same_initial_weights(target):
    state = torch.random.get_rng_state()
    a, b, c = make_draft(target, seed=3), make_draft(target, seed=3), make_draft(target, seed=4)
    assert torch.equal(torch.random.get_rng_state(), state)  # the global RNG is left alone
    for name, tensor in a.state_dict().items():
        assert torch.equal(tensor, b.state_dict()[name]), name
    assert not torch.equal(a.fc.weight, c.fc.weight)


def test_state_dict_is_the_vllm_eagle3_layout(target):
    """Names and shapes as vLLM's `llama_eagle3.py` loads them (`midlayer.` -> `layers.0.`, `model.`
    prefix except lm_head, `d2t` -> draft_id_to_target_id, `t2d` skipped), the same names as EAGLE's
    `eagle/traineagle3/cnets.py` (`fc`, `midlayer`, `norm`, `lm_head`, `d2t`, `t2d`); m = 3."""
    draft = make_draft(target, 3)
    heads, kv_heads, hd, inter = 4, target.config.num_key_value_heads, D // 4, target.config.intermediate_size
    expected = {
        "fc.weight": (D, 3 * D),  # no bias
        "midlayer.hidden_norm.weight": (D,),
        "midlayer.input_layernorm.weight": (D,),
        "midlayer.self_attn.q_proj.weight": (heads * hd, 2 * D),  # q/k/v read [embedding; hidden]: 2d wide
        "midlayer.self_attn.k_proj.weight": (kv_heads * hd, 2 * D),
        "midlayer.self_attn.v_proj.weight": (kv_heads * hd, 2 * D),
        "midlayer.self_attn.o_proj.weight": (D, heads * hd),
        "midlayer.post_attention_layernorm.weight": (D,),
        "midlayer.mlp.gate_proj.weight": (inter, D),
        "midlayer.mlp.up_proj.weight": (inter, D),
        "midlayer.mlp.down_proj.weight": (D, inter),
        "norm.weight": (D,),
        "lm_head.weight": (DRAFT_VOCAB, D),
        "d2t": (DRAFT_VOCAB,),
        "t2d": (VOCAB,),
    }
    state = draft.state_dict()
    assert {name: tuple(t.shape) for name, t in state.items()} == expected
    assert state["d2t"].dtype == torch.int64 and state["t2d"].dtype == torch.bool
    assert {name for name, _ in draft.named_parameters()} == set(expected) - {"d2t", "t2d"}


def test_init_lm_head_from_target(target):
    draft = make_draft(target)
    counts = torch.randint(0, 100, (VOCAB,), generator=torch.Generator().manual_seed(2))
    draft.set_vocabulary(*draft_vocabulary(counts, DRAFT_VOCAB))
    init_lm_head_from_target(draft, target.get_output_embeddings())
    chosen = draft.t2d.nonzero().squeeze(1)
    assert torch.equal(draft.lm_head.weight, target.get_output_embeddings().weight[chosen])
    assert draft.lm_head.weight.data_ptr() != target.get_output_embeddings().weight.data_ptr()  # a copy
    with pytest.raises(ValueError, match="lm_head weight"):
        init_lm_head_from_target(draft, torch.zeros(VOCAB, D + 1))
