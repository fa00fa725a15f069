"""EAGLE-3 draft model (Li et al., "EAGLE-3: Scaling up Inference Acceleration of Large Language
Models via Training-Time Test", arXiv 2503.01840), conditioned on any layer set of the target.

Architecture, as SafeAILab/EAGLE `eagle/traineagle3/cnets.py` and vLLM
`vllm/model_executor/models/llama_eagle3.py` build it (our own code, same parameter names so that a
state dict is a vLLM EAGLE-3 checkpoint):

    g   = fc(cat(h_l for l in layer_ids))            step 1: target features (b, T, m*d) -> (b, T, d)
    x   = cat(input_layernorm(embed(token)), hidden_norm(g))               (b, T, 2d)
    g'  = g + o_proj(attn(q/k/v_proj(x)))                                  residual is g, un-normed
    g'' = g' + mlp(post_attention_layernorm(g'))                           the fed-back hidden state
    logits = lm_head(norm(g''))                                            over the draft vocabulary

At draft step k >= 2 the draft's own g'' replaces the fc output (fc is applied only once).
Alignment (EAGLE-3 training and vLLM's proposer): position t pairs the target features of token t
with the embedding of token t+1 and predicts token t+2; step k runs at rotary position t + k - 1.

The target's embedding is shared and frozen: it is held by reference, never registered, so it is
in neither `parameters()` nor `state_dict()` (vLLM then takes the target's embedding).
The transformer blocks (RMSNorm, rotary embedding, gated MLP) are the transformers Llama classes,
which Qwen2 also uses unchanged; q/k/v carry no bias in either family, as in vLLM's EAGLE-3 layer.
"""

from __future__ import annotations


import torch
import torch.nn.functional as F
from torch import nn
from transformers.models.llama.modeling_llama import LlamaMLP, LlamaRMSNorm, LlamaRotaryEmbedding, apply_rotary_pos_emb

from .config import DraftConfig
from .vocabulary import to_draft, to_target


class Eagle3Attention(nn.Module):
    """Causal multi-head (grouped-query) attention whose q/k/v read the 2d-wide EAGLE-3 input."""

    def __init__(self, config: DraftConfig):
        super().__init__()
        d, heads, kv_heads, head_dim = (
            config.hidden_size,
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
        )
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.q_proj = nn.Linear(2 * d, heads * head_dim, bias=False)
        self.k_proj = nn.Linear(2 * d, kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(2 * d, kv_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(heads * head_dim, d, bias=False)

    def forward(self, x, cos, sin, allowed, past=None):
        """x (b, T, 2d), cos/sin (b, T, hd); past: None or (keys, values) (b, KV, S, hd) of earlier
        forwards (already rotated); allowed (b, 1, T, S + T) bool over [past ; this forward's] keys.
        Returns (b, T, d) and this forward's (keys, values) (b, KV, T, hd), rotated."""
        b, T, _ = x.shape
        q = self.q_proj(x).view(b, T, self.heads, self.head_dim).transpose(1, 2)  # (b, H, T, hd)
        k = self.k_proj(x).view(b, T, self.kv_heads, self.head_dim).transpose(1, 2)  # (b, KV, T, hd)
        v = self.v_proj(x).view(b, T, self.kv_heads, self.head_dim).transpose(1, 2)  # (b, KV, T, hd)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        keys, values = (k, v) if past is None else (torch.cat([past[0], k], 2), torch.cat([past[1], v], 2))
        out = F.scaled_dot_product_attention(
            q, keys, values, attn_mask=allowed, enable_gqa=self.heads != self.kv_heads
        )  # (b, H, T, hd)
        return self.o_proj(out.transpose(1, 2).reshape(b, T, -1)), (k, v)  # (b, T, d)


class Eagle3DecoderLayer(nn.Module):
    """EAGLE-3's `midlayer`: one decoder layer over [input_layernorm(embedding); hidden_norm(g)].

    hidden_norm is applied to the attention input only; the residual stream starts from the
    un-normed g (EAGLE's cnets.py and vLLM's default `norm_before_residual=False`)."""

    def __init__(self, config: DraftConfig):
        super().__init__()
        block = config.block_config()
        self.hidden_norm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.input_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.self_attn = Eagle3Attention(config)
        self.post_attention_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.mlp = LlamaMLP(block)

    def forward(self, embeds, hidden, cos, sin, allowed, past=None):
        """embeds, hidden (b, T, d) -> (next hidden (b, T, d) before the final norm, this forward's
        rotated (keys, values)); `past` and `allowed` as in `Eagle3Attention.forward`."""
        x = torch.cat([self.input_layernorm(embeds), self.hidden_norm(hidden)], dim=-1)  # (b, T, 2d)
        attended, kv = self.self_attn(x, cos, sin, allowed, past)
        hidden = hidden + attended
        return hidden + self.mlp(self.post_attention_layernorm(hidden)), kv


class Eagle3Draft(nn.Module):
    """EAGLE-3 draft: `fc`, one `midlayer`, `norm`, `lm_head` over the draft vocabulary, and the
    `d2t` / `t2d` vocabulary maps (target id = draft id + d2t[draft id]; t2d marks draft tokens).

    `embed_tokens` is the target's input embedding (an nn.Embedding or its (V, d) weight); it is
    used detached and never registered. `seed` makes the initial weights reproducible without
    touching the global RNG."""

    d2t: torch.Tensor  # the vocabulary maps, buffers registered in __init__ (declared for the type checker)
    t2d: torch.Tensor

    def __init__(self, config: DraftConfig, embed_tokens, *, seed: int | None = None):
        super().__init__()
        weight = embed_tokens.weight if isinstance(embed_tokens, nn.Embedding) else embed_tokens
        if tuple(weight.shape) != (config.vocab_size, config.hidden_size):
            raise ValueError(
                f"embedding weight {tuple(weight.shape)} does not match "
                f"(vocab_size, hidden_size) = {(config.vocab_size, config.hidden_size)}"
            )
        self.config = config
        # how it was trained (`train.numeric_settings`: draft matmuls, target features); None: not by elsi's training
        self.numeric: dict | None = None
        self._shared = (weight,)  # a tuple is not registered: not a parameter, not in the state dict
        # seed=None draws from (and advances) the global RNG, like any nn.Module.
        with torch.random.fork_rng(devices=[], enabled=seed is not None):
            if seed is not None:
                torch.manual_seed(seed)
            d = config.hidden_size
            self.fc = nn.Linear(config.m * d, d, bias=False)
            self.midlayer = Eagle3DecoderLayer(config)
            self.norm = LlamaRMSNorm(d, eps=config.rms_norm_eps)
            self.lm_head = nn.Linear(d, config.draft_vocab_size, bias=False)
        self.rotary_emb = LlamaRotaryEmbedding(config.block_config())  # non-persistent buffers only
        # Until `set_vocabulary`: the first draft_vocab_size target ids.
        self.register_buffer("d2t", torch.zeros(config.draft_vocab_size, dtype=torch.long))
        self.register_buffer("t2d", torch.arange(config.vocab_size) < config.draft_vocab_size)

    @classmethod
    def from_target(cls, target, source, draft_vocab_size: int, *, seed: int | None = None) -> Eagle3Draft:
        """A draft sharing `target`'s input embedding (a transformers causal LM), reading `source`
        (a layer set in elsi's convention, or FINAL_NORM)."""
        config = DraftConfig.from_target(target.config, source, draft_vocab_size)
        return cls(config, target.get_input_embeddings(), seed=seed)

    @property
    def embed_weight(self) -> torch.Tensor:
        """The target's (V, d) embedding weight, shared."""
        return self._shared[0]

    def embed(self, input_ids):
        """input_ids (b, T) -> (b, T, d); no gradient reaches the target's embedding."""
        return F.embedding(input_ids, self.embed_weight.detach()).to(self.fc.weight.dtype)

    def project(self, features):
        """Step 1: target features (b, T, m*d), layers in ascending order -> g (b, T, d)."""
        if features.shape[-1] != self.fc.in_features:
            raise ValueError(f"features have width {features.shape[-1]}, expected m*d = {self.fc.in_features}")
        return self.fc(features)

    def forward(self, input_ids, hidden=None, *, features=None, positions=None, attention_mask=None):
        """One draft step over a sequence.

        input_ids (b, T): the token after each feature position; exactly one of `features`
        (b, T, m*d) (step 1, projected by fc) or `hidden` (b, T, d) (the draft's own previous output,
        later steps). positions (b, T) or (T,), default 0..T-1 (EAGLE-3 advances them by one per
        step). attention_mask: (b, T) with 1 for real tokens, or a full (b, 1, T, T) bool mask
        (True = may attend), e.g. for trees; causal masking is applied to the (b, T) form only.
        Returns (logits (b, T, V_draft), hidden (b, T, d) before the final norm, to feed back).
        """
        b, T = input_ids.shape
        allowed = self._allowed(attention_mask, b, T, input_ids.device)  # (b, 1, T, T)
        logits, hidden, _ = self.step(input_ids, hidden, features=features, positions=positions, allowed=allowed)
        return logits, hidden

    def step(self, input_ids, hidden=None, *, features=None, positions=None, allowed, past=None, logits=True):
        """One draft forward with explicit attention: `allowed` (b, 1, T, S + T) bool over the
        keys of `past` ((keys, values) (b, KV, S, hd), earlier forwards, e.g. the prefix and the
        tree nodes drafted so far, or the earlier steps of training-time test) followed by this
        forward's own. Returns (logits (b, T, V_draft) or None when `logits` is False, hidden
        (b, T, d) before the final norm, this forward's (keys, values) (b, KV, T, hd))."""
        if (hidden is None) == (features is None):
            raise ValueError("pass exactly one of hidden (b, T, d) and features (b, T, m*d)")
        hidden = self.project(features) if features is not None else hidden  # (b, T, d)
        if hidden.shape[-1] != self.config.hidden_size:
            raise ValueError(f"hidden has width {hidden.shape[-1]}, expected d = {self.config.hidden_size}")
        b, T = input_ids.shape
        if positions is None:
            positions = torch.arange(T, device=input_ids.device)
        positions = positions.expand(b, T)  # (b, T)
        cos, sin = self.rotary_emb(hidden, positions)  # (b, T, hd) each
        hidden, kv = self.midlayer(self.embed(input_ids), hidden, cos, sin, allowed, past)  # (b, T, d)
        return (self.lm_head(self.norm(hidden)) if logits else None), hidden, kv  # (b, T, V_draft)

    @staticmethod
    def _allowed(attention_mask, b, T, device):
        """(b, 1, T, T) bool: causal, keys restricted to real tokens; every query sees itself, so a
        padded row stays finite."""
        if attention_mask is not None and attention_mask.dim() == 4:
            return attention_mask.bool()
        allowed = torch.ones(T, T, dtype=torch.bool, device=device).tril()  # (T, T)
        if attention_mask is not None:
            allowed = allowed & attention_mask.bool()[:, None, None, :]  # (b, 1, T, T)
            allowed = allowed | torch.eye(T, dtype=torch.bool, device=device)
        return allowed.expand(b, 1, T, T)

    def set_vocabulary(self, d2t, t2d) -> None:
        """Install maps from `draft_vocabulary` (checked for consistency)."""
        d2t, t2d = torch.as_tensor(d2t, dtype=torch.long), torch.as_tensor(t2d, dtype=torch.bool)
        if d2t.shape != self.d2t.shape or t2d.shape != self.t2d.shape:
            raise ValueError(
                f"maps of shapes {tuple(d2t.shape)}, {tuple(t2d.shape)}; expected "
                f"{tuple(self.d2t.shape)}, {tuple(self.t2d.shape)}"
            )
        chosen = to_target(torch.arange(len(d2t)), d2t)
        if not (t2d.sum() == len(d2t) and t2d[chosen].all() and (chosen.diff() > 0).all()):
            raise ValueError("d2t and t2d do not describe the same ascending set of target ids")
        self.d2t.copy_(d2t)
        self.t2d.copy_(t2d)

    def to_target(self, draft_ids):
        return to_target(draft_ids, self.d2t)

    def to_draft(self, target_ids):
        return to_draft(target_ids, self.t2d)


def draft_record(draft: Eagle3Draft) -> dict:
    """What a checkpoint holds of one draft: its config (the source included) and its state dict
    (the vocabulary maps `d2t` / `t2d` included), enough to rebuild it on its target."""
    return {"config": draft.config.to_dict(), "weights": {k: v.detach().clone() for k, v in draft.state_dict().items()}}


def draft_from_record(record: dict, target) -> Eagle3Draft:
    """The draft `draft_record` described, on `target`'s embedding (checked against the draft first)."""
    config = DraftConfig.from_dict(record["config"])
    config.check_target(target)
    draft = Eagle3Draft(config, target.get_input_embeddings(), seed=0)
    draft.load_state_dict(record["weights"])
    draft.set_vocabulary(draft.d2t.clone(), draft.t2d.clone())  # checked for consistency
    return draft.eval()
