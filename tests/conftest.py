"""Shared fixtures: small random layer stacks, tiny random models, and the bundled real model
(loaded once per test session)."""

from __future__ import annotations

import os

import numpy as np
import pytest


def random_layers(n_layers=8, rows=6, dim=10, seed=0, shared=3.0) -> np.ndarray:
    """Z (N, B, d): Gaussian layers sharing one mean direction, with scales that vary by layer."""
    rng = np.random.default_rng(seed)
    direction = rng.normal(size=(1, 1, dim))
    scale = rng.uniform(0.5, 3.0, size=(n_layers, 1, 1))
    return scale * (shared * direction + rng.normal(size=(n_layers, rows, dim)))


@pytest.fixture
def Z():
    return random_layers()


@pytest.fixture(scope="session")
def bundled():
    """(model, tokenizer) of the bundled SmolLM2, converted on first use and cached."""
    from elsi_lib import load_model

    return load_model()


CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a tiny test model.<|im_end|>\n' }}{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

CORPUS = (
    "the quick brown fox jumps over the lazy dog while a model predicts the next token "
    "entropy layers blocks attention sink prompt reply question answer system user assistant "
    "what is two plus two tell me about speculative decoding drafts and hidden states"
).split()


def make_tiny_tokenizer(chat_template: bool = True):
    """A fast BPE tokenizer (~200 tokens) trained in-process, with a ChatML-style template."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=200,
        special_tokens=["<unk>", "<|im_start|>", "<|im_end|>", "<s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator([" ".join(CORPUS)] * 20, trainer)
    from tokenizers import decoders

    tok.decoder = decoders.ByteLevel()
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="<|im_end|>", pad_token="<|im_end|>"
    )
    if chat_template:
        wrapped.chat_template = CHAT_TEMPLATE
    return wrapped


def make_conversations(n: int, seed: int = 0, words=(20, 60)):
    rng = np.random.default_rng(seed)
    return [[{"role": "user", "content": " ".join(rng.choice(CORPUS, size=rng.integers(*words)))}] for _ in range(n)]


def replied_conversations(n: int, seed: int = 0, reply_words=(6, 12)):
    """Short prompts with hand-written assistant replies (no generation: fast)."""
    rng = np.random.default_rng(seed + 100)
    return [
        c + [{"role": "assistant", "content": " ".join(rng.choice(CORPUS, size=rng.integers(*reply_words)))}]
        for c in make_conversations(n, seed, words=(3, 8))
    ]


def write_sharegpt(path, conversations) -> None:
    """`conversations` as a ShareGPT-format JSONL file at `path` (what `--data` reads)."""
    import json

    role = {"user": "human", "assistant": "gpt", "system": "system"}
    path.write_text(
        "\n".join(
            json.dumps({"conversations": [{"from": role[m["role"]], "value": m["content"]} for m in c]})
            for c in conversations
        )
    )


def module_feature_store(model, tokenizer, tmp_path_factory, n_conversations: int, layers):
    """A FeatureStore of `n_conversations` replied conversations, cached in its own folder (the
    autouse cache fixture is per test; a module-scoped store outlives it)."""
    from elsi_lib.draft.features import build_features

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ELSI_CACHE_DIR", str(tmp_path_factory.mktemp("features")))
        return build_features(model, tokenizer, replied_conversations(n_conversations), layers, progress=False)


def peaked_draft(model, store, source, draft_vocab: int, seed: int = 0):
    """A randomly initialised draft on `source` with a non-trivial vocabulary map (d2t != 0, from the
    store's tokens) and seeded random norms and a scaled lm_head (peaked, as a trained draft's)."""
    import torch

    from elsi_lib.draft.model import Eagle3Draft
    from elsi_lib.draft.vocabulary import draft_vocabulary

    counts = torch.zeros(model.config.vocab_size)
    for i in range(len(store)):
        s = store.sequence(i)
        counts += torch.bincount(torch.cat([s["ids"], s["argmax"]]), minlength=len(counts))
    d2t, t2d = draft_vocabulary(counts, draft_vocab)
    assert (d2t != 0).any()
    draft = Eagle3Draft.from_target(model, source, draft_vocab, seed=seed)
    draft.set_vocabulary(d2t, t2d)
    perturb_norms(draft, seed)
    with torch.no_grad():
        draft.lm_head.weight.mul_(4)
    return draft.eval()


def perturb_norms(draft, seed: int) -> None:
    """The draft's norms seeded away from 1, so that every weight matters."""
    import torch

    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for norm in (
            draft.norm,
            draft.midlayer.input_layernorm,
            draft.midlayer.hidden_norm,
            draft.midlayer.post_attention_layernorm,
        ):
            norm.weight.copy_(1 + 0.5 * torch.randn(norm.weight.shape, generator=g))


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny matrices: one intra-op thread is many times faster on a busy 2-core machine; restored after.
    Modules opt in with `pytestmark = pytest.mark.usefixtures("one_torch_thread")`."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def tiny_tokenizer():
    return make_tiny_tokenizer()


@pytest.fixture(scope="session")
def tiny_model(tiny_tokenizer):
    from elsi_lib import random_model

    return random_model(n_layers=4, hidden_size=32, vocab_size=len(tiny_tokenizer), seed=0)


class Interrupt(Exception):
    pass


def interrupted_then_rerun(model, run, stop_at: int = 3, between=lambda: None):
    """Call `run()`, stopped by an exception at the `stop_at`-th forward of the model's first
    decoder layer; then `between()`; then `run()` to the end. Returns (its result, the number of
    forwards the second run made)."""
    forwards, armed = [], [True]

    def stop(module, args):
        forwards.append(1)
        if armed[0] and len(forwards) == stop_at:
            raise Interrupt

    handle = model.get_decoder().layers[0].register_forward_pre_hook(stop)
    try:
        with pytest.raises(Interrupt):
            run()
        between()
        forwards.clear()
        armed[0] = False
        result = run()
    finally:
        handle.remove()
    return result, len(forwards)


USER_CACHE_DIR = os.environ.get("ELSI_CACHE_DIR")  # where the bundled model's conversion lives


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    """Every test writes caches under its own temporary folder. (Session fixtures such as
    `bundled` are set up before this runs, so the converted model stays in the user's cache.)"""
    monkeypatch.setenv("ELSI_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ELSI_REPLY_ARCHIVE", str(tmp_path / "replies"))  # never the committed data/replies
    monkeypatch.setenv("ELSI_CONTINUATIONS", str(tmp_path / "continuations"))  # nor data/continuations
    drafts = tmp_path.parent / f"{tmp_path.name}-drafts"  # beside the test's folder, which stays as the test made it
    drafts.mkdir(exist_ok=True)
    monkeypatch.setenv(
        "ELSI_DRAFT_RECORDS", str(drafts)
    )  # nor data/drafts (an empty records folder, as a new protocol's)
