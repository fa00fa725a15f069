"""Teacher-forced forwards of a causal LM: conversations -> per-layer hidden states and token entropies.

`tokenize_samples` renders and truncates the conversations (one rule: a conversation keeps its first
`max_length` tokens); `plan_batches` groups them by length; `hidden_batches` runs one forward per
batch with a hook on every decoder layer and yields each batch's hidden states (layer l = output of
decoder layer l, plus the state after the final norm) and next-token entropies (Eq. 9). Capture
reduces what it yields to layer statistics; draft training reads the same features.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import torch

from ..inputs.chat import tokenize_conversation, truncate


@dataclass
class Sample:
    index: int  # position in the caller's conversation list
    ids: list[int]
    is_template: list[bool]  # the chat template added this token

    def eligible(self, exclude) -> list[bool]:
        """Positions that may enter the statistics under `exclude` (see `CaptureSettings`)."""
        if exclude == "none":
            return [True] * len(self.ids)
        if exclude == "first":
            return [p > 0 for p in range(len(self.ids))]
        if exclude == "template":
            return [not t for t in self.is_template]
        return [not exclude(p, t, tpl) for p, (t, tpl) in enumerate(zip(self.ids, self.is_template))]


@dataclass
class HiddenBatch:
    """One forward's output, on the model's device."""

    samples: list[Sample]
    layers: list  # N tensors (b, T, d): output of each decoder layer, right-padded rows
    final_norm: torch.Tensor  # (b, T, d): the last layer after the final norm
    entropies: list  # per sample, (T_i,) float32 next-token entropies on the CPU


def check_conversations(conversations) -> None:
    """A non-empty list of conversations, each a non-empty list of {role, content} messages with
    string values; anything else is an error naming the conversation."""
    if isinstance(conversations, (str, dict)) or not conversations:
        raise ValueError("no conversations: pass a non-empty list of conversations (lists of {role, content} messages)")
    for i, conversation in enumerate(conversations):
        if (
            isinstance(conversation, (str, dict))
            or not conversation
            or not all(isinstance(m, dict) and "content" in m and "role" in m for m in conversation)
        ):
            raise ValueError(f"conversation {i} must be a non-empty list of {{role, content}} messages")
        for m in conversation:
            if not isinstance(m["role"], str) or not isinstance(m["content"], str):
                raise ValueError(
                    f"conversation {i}: role and content must be strings, got "
                    f"{type(m['role']).__name__} and {type(m['content']).__name__}"
                )


def tokenize_samples(tokenizer, conversations, max_length: int, on_long: str = "truncate") -> tuple[list[Sample], int]:
    """Samples of the rendered conversations and how many were truncated to `max_length`
    (`on_long="error"` raises instead)."""
    samples, truncated = [], 0
    for index, conversation in enumerate(conversations):
        ids, is_template = tokenize_conversation(tokenizer, conversation)
        if len(ids) > max_length:
            if on_long == "error":
                raise ValueError(
                    f"conversation {index} has {len(ids)} tokens > max_length={max_length} "
                    "(pass on_long='truncate' to cut it)"
                )
            truncated += 1
        samples.append(Sample(index, truncate(ids, max_length), truncate(list(is_template), max_length)))
    return samples, truncated


def plan_batches(lengths: list[int], batch_size: int, max_batch_tokens: int) -> list[list[int]]:
    """Group sample positions by length into batches of at most `batch_size` samples and
    `max_batch_tokens` padded tokens; deterministic for given lengths."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    batches: list[list[int]] = []
    current: list[int] = []
    for i in order:
        if current and (len(current) + 1 > batch_size or (len(current) + 1) * lengths[i] > max_batch_tokens):
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches


def pad_batch(samples: list[Sample], pad_id: int):
    """Right-padded (b, T) ids and attention mask."""

    width = max(len(s.ids) for s in samples)
    ids = torch.full((len(samples), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(samples), width), dtype=torch.long)
    for row, s in enumerate(samples):
        ids[row, : len(s.ids)] = torch.tensor(s.ids)
        mask[row, : len(s.ids)] = 1
    return ids, mask


def decoder_layers(model) -> torch.nn.ModuleList:
    """The decoder layers of a causal LM (`model.get_decoder().layers`, as Llama, Qwen, Mistral and
    Gemma name them), checked before any work: a ValueError naming the model where the layers are
    kept elsewhere (GPT-2's `h`, Falcon's), where there are none, where the model has no LM head (a
    base model), or where the decoder's output is projected to another width (OPT's
    `project_out`), none of which a capture, probe or draft here can read."""
    decoder = model.get_decoder()
    layers = getattr(decoder, "layers", None)
    if not isinstance(layers, torch.nn.ModuleList):
        raise ValueError(
            f"a {type(decoder).__name__}, whose decoder layers elsi cannot find (it reads model.get_decoder().layers, "
            "as Llama, Qwen, Mistral and Gemma models name them)"
        )
    if len(layers) == 0:
        raise ValueError(f"a {type(model).__name__} with no decoder layers: there is no hidden state to read")
    if model.get_output_embeddings() is None:
        raise ValueError(
            f"a {type(model).__name__} has no LM head (output embeddings), which the next-token entropies need: "
            "pass the ...ForCausalLM model, not its base model"
        )
    if isinstance(getattr(decoder, "project_out", None), torch.nn.Module):
        raise ValueError(
            f"a {type(decoder).__name__} whose output is projected out of the hidden size "
            f"({model.config.hidden_size}) before the LM head (project_out): elsi reads hidden states of one width"
        )
    return layers


def pad_id(tokenizer) -> int:
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)


@contextmanager
def layer_outputs(model) -> Iterator[list]:
    """Collect the output of every decoder layer during a forward; hooks removed in `finally`."""
    layers = decoder_layers(model)
    captured: list = [None] * len(layers)

    def hook_for(i):
        def hook(module, args, output):
            captured[i] = (output[0] if isinstance(output, tuple) else output).detach()

        return hook

    handles = [layer.register_forward_hook(hook_for(i)) for i, layer in enumerate(layers)]
    try:
        yield captured
    finally:
        for handle in handles:
            handle.remove()


def token_entropy(
    final_hidden, lm_head, softcap: float | None = None, chunk_elements: int = 1 << 25, cache_elements: int = 1 << 18
):
    """H_t = -sum_v p_t(v) log p_t(v) of the next-token distribution (Eq. 9), (T, d) -> (T,).

    Logits are formed `chunk_elements // vocab` positions at a time, so a large vocabulary never
    materializes a (T x V) tensor; the float64 entropy then runs over `cache_elements // vocab` rows at
    a time, which stay in the CPU's cache (each row's entropy is the same whatever the rows beside it).
    """

    vocab = lm_head.weight.shape[0]
    step, rows = max(1, chunk_elements // vocab), max(1, cache_elements // vocab)
    out = []
    for start in range(0, final_hidden.shape[0], step):
        chunk = lm_head(final_hidden[start : start + step])  # (c, V), the model's dtype
        for first in range(0, chunk.shape[0], rows):
            # float64 from the logits on: a random or flat model's positions differ in entropy by 1e-9,
            # far below float32's error (~2e-6), and the top-rho selection must not depend on the CPU's kernels
            logits = chunk[first : first + rows].double()  # (r, V)
            if softcap:
                logits = softcap * torch.tanh(logits / softcap)
            logp = torch.log_softmax(logits, dim=-1)
            out.append(-(logp.exp() * logp).sum(dim=-1))  # (r,)
    return torch.cat(out) if out else final_hidden.new_zeros(0, dtype=torch.float64)


def check_finite(hidden, layer: str, samples: list[Sample]) -> None:
    """NaN or Inf in a sample's real positions is an error naming the layer and the sample."""

    if torch.isfinite(hidden).all():  # padding rows included: finite too in the normal case
        return
    for row, s in enumerate(samples):
        if not torch.isfinite(hidden[row, : len(s.ids)]).all():
            raise FloatingPointError(
                f"NaN or Inf in the hidden state of {layer} for sample {s.index} "
                "(fp16 overflow? load the model in bfloat16 or float32)"
            )


def hidden_batches(
    model, samples: list[Sample], batches: list[list[int]], pad: int, *, entropies: bool = True
) -> Iterator[HiddenBatch]:
    """One teacher-forced forward per batch (lists of positions in `samples`), hooks on every
    decoder layer; yields each batch's hidden states and, with `entropies`, one LM-head pass over
    its real positions (Eq. 9). Non-finite states are an error naming the layer and the sample."""

    if model.training:  # dropout would make every state a random draw, and the cache would keep one
        raise ValueError(f"the {type(model).__name__} is in training mode (dropout active): call model.eval() first")
    decoder, lm_head = model.get_decoder(), model.get_output_embeddings()
    softcap = getattr(model.config, "final_logit_softcapping", None)
    device = next(model.parameters()).device
    with torch.no_grad(), layer_outputs(model) as captured:
        for positions in batches:
            batch = [samples[i] for i in positions]
            ids, mask = pad_batch(batch, pad)
            final_norm = decoder(
                input_ids=ids.to(device), attention_mask=mask.to(device), use_cache=False
            ).last_hidden_state
            for layer, hidden in enumerate(captured):
                check_finite(hidden, f"layer {layer}", batch)
            check_finite(final_norm, "the final norm", batch)
            per_sample = []
            if entropies:  # row-major over the real positions: row 0's tokens first
                per_sample = token_entropy(final_norm[mask.bool().to(device)], lm_head, softcap).cpu()
                per_sample = list(per_sample.split([len(s.ids) for s in batch]))
                for sample, values in zip(batch, per_sample):
                    if not torch.isfinite(values).all():
                        raise FloatingPointError(
                            f"NaN or Inf in the next-token entropies of sample {sample.index} "
                            "(the LM head's logits are not finite)"
                        )
            yield HiddenBatch(batch, list(captured), final_norm, per_sample)
