"""The target model's own greedy replies to calibration prompts, batched and cached.

Statistics then cover the tokens a draft will actually predict, and later issues reuse the
replies as draft training data. The cache is one JSON file per (model, prompts, settings), written
atomically after every batch, so an interrupted run resumes where it stopped.
"""
from __future__ import annotations

import json
from pathlib import Path

from .cachefiles import atomic_write_bytes, cache_dir, sha256_text
from .data import conversations_hash
from .formatting import model_fingerprint, tokenize_conversation


def generate_responses(model, tokenizer, conversations: list[list[dict]], *, max_new_tokens: int = 128,
                       max_prompt_tokens: int = 1024, batch_size: int = 8, cache: bool = True,
                       progress: bool = True, fingerprint: dict | None = None) -> list[str]:
    """Greedy replies (no sampling) of `model` to each conversation's last user turn."""
    import torch
    from tqdm.auto import tqdm

    if max_new_tokens < 1:
        raise ValueError("max_new_tokens must be >= 1")
    key = {"fingerprint": fingerprint or model_fingerprint(model), "prompts": conversations_hash(conversations),
           "max_new_tokens": max_new_tokens, "max_prompt_tokens": max_prompt_tokens, "batch_size": batch_size}
    path = cache_dir() / "responses" / f"{sha256_text(json.dumps(key, sort_keys=True))[:24]}.json"
    done = _load(path, key) if cache else []
    prompts = [tokenize_conversation(tokenizer, c, add_generation_prompt=True)[0][-max_prompt_tokens:]
               for c in conversations]
    order = sorted(range(len(prompts)), key=lambda i: (len(prompts[i]), i))  # similar lengths batch together
    replies: dict[int, str] = dict(done)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    bar = tqdm(total=len(prompts), initial=len(replies), desc="generating replies", disable=not progress)
    todo = [i for i in order if i not in replies]
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
            atomic_write_bytes(path, json.dumps({"key": key, "replies": sorted(replies.items())}).encode())
        bar.update(len(batch))
    bar.close()
    return [replies[i] for i in range(len(conversations))]


def _load(path: Path, key: dict) -> list[tuple[int, str]]:
    """Replies cached for exactly `key`; a missing, unreadable or stale file gives none."""
    try:
        payload = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return []
    if payload.get("key") != json.loads(json.dumps(key)):
        return []
    return [(int(i), str(text)) for i, text in payload.get("replies", [])]


def with_replies(conversations: list[list[dict]], replies: list[str]) -> list[list[dict]]:
    """Each conversation followed by its reply as an assistant turn."""
    return [list(c) + [{"role": "assistant", "content": r}] for c, r in zip(conversations, replies)]
