"""What identifies a cached result: the model's full weights and config, the tokenizer with its
chat template, and the library versions. Nothing here depends on where a model or the checkout
lives, so caches survive a move; everything that can change a result is in.

The weights hash reads every parameter and buffer once (well under a second for SmolLM2's 540 MB on this
CPU) and is remembered on the model until a tensor is replaced or changed in place (torch counts
in-place writes in each tensor's `_version`).
"""

from __future__ import annotations

import hashlib
import json

import tokenizers
import torch
import transformers

from .version import __version__

# config entries that say where a model was loaded from, not what it computes
PATH_KEYS = ("_name_or_path", "_model_name_or_path", "name_or_path", "_commit_hash")


def _tensors(model):
    yield from model.named_parameters()
    yield from model.named_buffers()


def _state(model) -> tuple:
    """Cheap to read, changes whenever a weight may have: identity, storage and write count."""
    return tuple(
        (name, t.data_ptr(), t._version, tuple(t.shape), str(t.dtype), str(t.device)) for name, t in _tensors(model)
    )


def weights_sha256(model) -> str:
    """sha256 over the name, shape, dtype and bytes of every parameter and buffer of `model`."""

    digest = hashlib.sha256()
    with torch.no_grad():
        for name, tensor in _tensors(model):
            digest.update(f"{name}|{tuple(tensor.shape)}|{tensor.dtype}|".encode())
            flat = tensor.detach().reshape(-1).contiguous().cpu()
            digest.update(flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b"")
    return digest.hexdigest()


def model_fingerprint(model) -> dict:
    """The model's class, a hash of its config (without the folder it was loaded from) and a hash
    of all its weights (`weights_sha256`, remembered on the model until a weight changes)."""
    settings = {k: v for k, v in model.config.to_dict().items() if k not in PATH_KEYS}
    config = json.dumps(settings, sort_keys=True, default=str)
    state = _state(model)
    cached = getattr(model, "_elsi_weights_sha256", None)
    if cached is None or cached[0] != state:
        cached = model._elsi_weights_sha256 = (state, weights_sha256(model))
    return {
        "architecture": type(model).__name__,
        "config_sha256": hashlib.sha256(config.encode()).hexdigest(),
        "weights_sha256": cached[1],
    }


def tokenizer_fingerprint(tokenizer) -> str:
    """sha256 of everything that decides how a conversation becomes token ids: the tokenizer's
    class, its full definition (vocabulary, merges, normalizer, pre- and post-processing), its
    special tokens and padding side, and the chat template."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    definition = backend.to_str() if backend is not None else json.dumps(sorted(tokenizer.get_vocab().items()))
    parts = {
        "class": type(tokenizer).__name__,
        "definition": definition,
        "special_tokens": {k: str(v) for k, v in tokenizer.special_tokens_map.items()},
        "added_tokens": sorted((str(k), int(v)) for k, v in tokenizer.get_added_vocab().items()),
        "padding_side": getattr(tokenizer, "padding_side", None),
        "chat_template": getattr(tokenizer, "chat_template", None),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def conversations_hash(conversations: list) -> str:
    """sha256 of the conversations' canonical JSON: what identifies a prompt set (or conversations with
    their replies) in a cache key."""
    payload = json.dumps(conversations, sort_keys=True, ensure_ascii=False).encode("utf-8")
    return hashlib.sha256(payload).hexdigest()


def versions() -> dict:
    """The versions of elsi and of the libraries that compute a result."""

    return {
        "elsi": __version__,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
    }
