"""Replies one archived engine request holds, given to another request for the same prompts: when the
two share the model, tokenizer, engine (its version and dtype) and settings (max_new_tokens,
max_length), a prompt rendered to the same token ids asks the engine the same greedy question, so its
archived reply is that request's reply too and is not written again. The first 1,000 prompts of the
strong protocol's 15,306 are Table 3's 1,000, whose Qwen replies are archived.

Both archives are read with their own checks (`reply_records.read_archive`: the header names exactly
its request, a checksum per record); the receiving archive is rewritten atomically, its own replies
kept, and a reply it holds that differs from the one given is an error, never overwritten.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..common.cachefiles import atomic_write_bytes
from .engine_env import engines_python, vllm_version
from .engine_replies import request_for
from .reply_records import ReplyRecordError, archive_bytes, read_archive


def reuse_archived(
    model,
    tokenizer,
    conversations: list[list[dict]],
    source: list[list[dict]],
    *,
    max_new_tokens: int,
    max_length: int,
) -> tuple[Path, int]:
    """Give the request for `conversations` the replies the archive of the request for `source` holds
    for prompts both render to the same token ids (same model, tokenizer, engine and settings):
    (the receiving archive, how many replies it gained). Runs no engine; writes nothing when none is
    gained. ReplyRecordError when either archive fails its checks or the two disagree on a prompt."""
    version = vllm_version(engines_python())  # asked once: both requests name the same engine
    mine, theirs = (
        request_for(model, tokenizer, asked, max_new_tokens=max_new_tokens, max_length=max_length, version=version)
        for asked in (conversations, source)
    )
    given = read_archive(theirs.archive, theirs.header)  # {their index: ids}
    their_prompts = json.loads(theirs.raw)["prompts"]
    where: dict[tuple, int] = {}
    for i, prompt in enumerate(json.loads(mine.raw)["prompts"]):
        where.setdefault(tuple(prompt), i)  # a prompt asked twice: its first index
    held = read_archive(mine.archive, mine.header)
    gained = {}
    for j, ids in given.items():
        if tuple(their_prompts[j]) not in where:
            continue
        i = where[tuple(their_prompts[j])]
        if i in held:
            if held[i] != ids:
                raise ReplyRecordError(
                    f"{mine.archive}: prompt {i} holds another reply than {theirs.archive}'s prompt {j}, "
                    "though both asked the same engine the same question"
                )
            continue
        gained[i] = ids
    if gained:
        atomic_write_bytes(mine.archive, archive_bytes(mine.header, {**held, **gained}))
    return mine.archive, len(gained)
