"""The reply step: a model's own greedy replies to prompts, batched and cached.

Capture then covers the tokens a draft will actually predict, and the draft experiments reuse the
replies as training data. Prompts follow capture's truncation rule (`formatting.truncate`: the
first `max_length` tokens). The cache is one JSON file per (model, prompts, settings), written
atomically after every batch, so an interrupted run resumes where it stopped.
"""
from __future__ import annotations

import json
from pathlib import Path

from .cachefiles import atomic_write_bytes, cache_dir, check_writable, sha256_text
from .data import conversations_hash
from .formatting import tokenize_conversation, truncate
from .forward import check_conversations
from .identity import model_fingerprint, tokenizer_fingerprint, versions
from .progress import progress_bar


def generate_responses(model, tokenizer, conversations: list[list[dict]], *, max_new_tokens: int = 128,
                       max_length: int = 1024, batch_size: int = 8, cache: bool = True,
                       progress: bool = True) -> list[str]:
    """Greedy replies (no sampling) of `model` to each conversation, rendered with the generation
    prompt and cut to its first `max_length` tokens. Each conversation must end with a user turn.
    Cached, keyed by the model's weights, the tokenizer and its chat template, the library
    versions, the conversations and every setting."""
    import torch

    for name, value in (("max_new_tokens", max_new_tokens), ("max_length", max_length), ("batch_size", batch_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    check_conversations(conversations)
    answered = [i for i, c in enumerate(conversations) if c[-1]["role"] != "user"]
    if answered:
        raise ValueError(f"conversation(s) {answered[:10]} end with a {conversations[answered[0]][-1]['role']!r} "
                         "turn, not a user turn: there is nothing to reply to (capture them as they are)")
    key = {"model": model_fingerprint(model), "tokenizer": tokenizer_fingerprint(tokenizer), "library": versions(),
           "prompts": conversations_hash(conversations), "max_new_tokens": max_new_tokens, "max_length": max_length,
           "truncate": "keep_first", "batch_size": batch_size}
    path = cache_dir() / "responses" / f"{sha256_text(json.dumps(key, sort_keys=True))[:24]}.json"
    if cache:
        check_writable(path.parent)
    done = _load(path, key) if cache else []
    prompts = [truncate(tokenize_conversation(tokenizer, c, add_generation_prompt=True)[0], max_length)
               for c in conversations]
    order = sorted(range(len(prompts)), key=lambda i: (len(prompts[i]), i))  # similar lengths batch together
    replies: dict[int, str] = dict(done)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    todo = [i for i in order if i not in replies]
    bar = progress_bar(total=len(prompts), initial=len(replies), desc="generating replies", unit="reply",
                       disable=not progress or not todo)
    for start in range(0, len(todo), batch_size):
        batch = todo[start:start + batch_size]
        width = max(len(prompts[i]) for i in batch)
        ids = torch.full((len(batch), width), pad, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, i in enumerate(batch):  # left padding: every prompt ends where generation starts
            ids[row, width - len(prompts[i]):] = torch.tensor(prompts[i])
            mask[row, width - len(prompts[i]):] = 1
        with torch.no_grad():
            out = model.generate(input_ids=ids.to(model.device), attention_mask=mask.to(model.device),
                                 max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=pad)
        for row, i in enumerate(batch):
            replies[i] = tokenizer.decode(out[row, width:], skip_special_tokens=True).strip()
        if cache:
            atomic_write_bytes(path, _payload(key, sorted(replies.items())))
        bar.update(len(batch))
    bar.close()
    return [replies[i] for i in range(len(conversations))]


def _payload(key: dict, replies: list) -> bytes:
    body = json.dumps({"key": key, "replies": replies}, sort_keys=True)
    return json.dumps({"sha256": sha256_text(body), "body": body}).encode()


def _load(path: Path, key: dict) -> list[tuple[int, str]]:
    """Replies cached for exactly `key`; a missing, unreadable, corrupt or stale file gives none
    (and says why, unless it is simply missing). The checksum covers every byte that is used."""
    if not path.is_file():
        return []
    try:
        wrapper = json.loads(path.read_text())
        if sha256_text(wrapper["body"]) != wrapper["sha256"]:
            raise ValueError("checksum mismatch")
        payload = json.loads(wrapper["body"])
        replies = [(int(i), str(text)) for i, text in payload["replies"]]
    except (OSError, ValueError, KeyError, TypeError) as err:
        print(f"regenerating replies: {path.name} is unreadable or corrupt ({err})")
        return []
    if payload.get("key") != json.loads(json.dumps(key)):
        return []
    return replies


def with_replies(conversations: list[list[dict]], replies: list[str]) -> list[list[dict]]:
    """Each conversation followed by its reply as an assistant turn."""
    if len(replies) != len(conversations):
        raise ValueError(f"{len(replies)} replies for {len(conversations)} conversations")
    return [list(c) + [{"role": "assistant", "content": r}] for c, r in zip(conversations, replies)]


def reply_conversations(model, tokenizer, conversations: list[list[dict]], **options) -> list[list[dict]]:
    """The conversations, each followed by `model`'s greedy reply (`generate_responses` options):
    the input `capture` takes when the statistics should cover the model's own replies."""
    return with_replies(conversations, generate_responses(model, tokenizer, conversations, **options))
