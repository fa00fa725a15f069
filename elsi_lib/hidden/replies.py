"""The reply step: a model's own replies to prompts (greedy, or seeded samples at T > 0), batched and cached.

Capture then covers the tokens a draft will actually predict, and the draft experiments reuse the
replies as training data. Prompts follow capture's truncation rule (`chat.truncate`: the
first `max_length` tokens). The cache is one JSON file per (model, prompts, settings), written
atomically after every batch, so an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import gzip
import json
import sys
import zlib
from pathlib import Path

import torch
from transformers import GenerationConfig

from ..common.cachefiles import atomic_write_bytes, check_writable, keyed_path, sha256_text
from ..inputs.chat import tokenize_conversation, truncate
from .forward import check_conversations
from ..common.identity import conversations_hash, model_fingerprint, tokenizer_fingerprint, versions
from ..common.progress import progress_bar


def generate_responses(
    model,
    tokenizer,
    conversations: list[list[dict]],
    *,
    max_new_tokens: int = 128,
    max_length: int = 1024,
    batch_size: int = 8,
    cache: bool = True,
    progress: bool = True,
    temperature: float = 0.0,
    seed: int = 0,
    with_ids: bool = False,
    archive: Path | None = None,
    shipped: Path | None = None,
):
    """Replies of `model` to each conversation, rendered with the generation prompt and cut to its
    first `max_length` tokens: greedy at `temperature` 0, otherwise sampled from softmax(logits / T)
    with no top-k / top-p (`GumbelSampler`: each conversation's draws come from its own seed, so a
    reply does not depend on the batch it ran in). Each conversation must end with a user turn.
    Returns the reply texts, and with `with_ids` also the generated token ids (through the first
    end-of-sequence token). Cached, keyed by the model's weights, the tokenizer and its chat
    template, the library versions, the conversations and every setting. `archive`: a folder (in git)
    the finished cache file is copied to, gzipped under its keyed name, and read from when the cache
    lacks it, so that a new machine does not write the replies again (checked as the cache is).
    `shipped`: a read-only folder of such archives (the package's `calibration_replies`), read the same
    way and never written."""
    for name, value in (("max_new_tokens", max_new_tokens), ("max_length", max_length), ("batch_size", batch_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    check_conversations(conversations)
    answered = [i for i, c in enumerate(conversations) if c[-1]["role"] != "user"]
    if not temperature >= 0:
        raise ValueError(f"temperature must be >= 0, got {temperature!r}")
    if temperature > 0:
        _check_plain_sampling(model)
    if answered:
        raise ValueError(
            f"conversation(s) {answered[:10]} end with a {conversations[answered[0]][-1]['role']!r} "
            "turn, not a user turn: there is nothing to reply to (capture them as they are)"
        )
    key = {
        "model": model_fingerprint(model),
        "tokenizer": tokenizer_fingerprint(tokenizer),
        "library": versions(),
        "prompts": conversations_hash(conversations),
        "max_new_tokens": max_new_tokens,
        "max_length": max_length,
        "truncate": "keep_first",
        "batch_size": batch_size,
        **({"temperature": float(temperature), "seed": int(seed)} if temperature > 0 else {}),
        **({"ids": True} if with_ids else {}),
    }
    changes = generation_changes(model)
    if changes:  # a generation config that only mirrors the model's config adds nothing (nor changes old keys)
        key["generation"] = changes
    path = keyed_path("responses", key, suffix=".json")
    archived = Path(archive) / f"{path.name}.gz" if archive is not None and cache else None
    read_only = Path(shipped) / f"{path.name}.gz" if shipped is not None and cache else None
    if cache:
        check_writable(path.parent)
        for found in (archived, read_only):
            if found is not None and found.is_file() and not path.is_file():
                try:
                    atomic_write_bytes(path, gzip.decompress(found.read_bytes()))  # read_cache checks it
                except (OSError, EOFError, zlib.error) as err:  # a torn or flipped archive: written again, said so
                    print(f"{found}: unreadable archive ({err}): the replies are written again", file=sys.stderr)
    done = read_cache(path, key) if cache else []  # (index, text) or, with ids, (index, text, ids)
    done = _for_these(done, len(conversations), path.name)
    foreign = cache and not done
    if foreign:  # an archive of the same making under other library versions, said so
        done = _for_these(
            same_making(key, [Path(a) for a in (archive, shipped) if a is not None]), len(conversations), path.name
        )
    foreign = foreign and bool(done)
    prompts = [
        truncate(tokenize_conversation(tokenizer, c, add_generation_prompt=True)[0], max_length) for c in conversations
    ]
    order = sorted(range(len(prompts)), key=lambda i: (len(prompts[i]), i))  # similar lengths batch together
    replies: dict[int, str] = {entry[0]: entry[1] for entry in done}
    token_ids: dict[int, list[int]] = {entry[0]: entry[2] for entry in done if len(entry) == 3}
    eos = set(eos_ids(model))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    todo = [i for i in order if i not in replies]
    bar = progress_bar(
        total=len(prompts),
        initial=len(replies),
        desc="generating replies",
        unit="reply",
        disable=not progress or not todo,
    )
    for start in range(0, len(todo), batch_size):
        batch = todo[start : start + batch_size]
        out = _generate_batch(
            model,
            [prompts[i] for i in batch],
            pad,
            max_new_tokens,
            temperature,
            [seed * 1_000_003 + i for i in batch],
            tokenizer=tokenizer,
        )  # (b, new tokens)
        for row, i in enumerate(batch):
            replies[i] = tokenizer.decode(out[row], skip_special_tokens=True).strip()
            generated = out[row].tolist()
            ends = [j for j, t in enumerate(generated) if t in eos]
            token_ids[i] = generated[: ends[0] + 1] if ends else generated
        if cache:
            entries = [(i, replies[i], token_ids[i]) if with_ids else (i, replies[i]) for i in sorted(replies)]
            atomic_write_bytes(path, cache_payload(key, entries))
        bar.update(len(batch))
    bar.close()
    if archived is not None and (todo or not (archived.is_file() or foreign)):
        archived.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(archived, gzip.compress(path.read_bytes(), mtime=0))
    texts = [replies[i] for i in range(len(conversations))]
    return (texts, [token_ids[i] for i in range(len(conversations))]) if with_ids else texts


def _generate_batch(
    model, prompts: list[list[int]], pad: int, max_new_tokens: int, temperature: float, seeds: list[int], tokenizer=None
):
    """`generate` on one batch of prompt ids, left-padded so that every prompt ends where generation
    starts: greedy at temperature 0, else an exact seeded sample per row (`GumbelSampler`). Returns
    the generated ids (b, new tokens), padding included after an end-of-sequence token."""

    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = torch.tensor(prompt)
        mask[row, width - len(prompt) :] = 1
    sampler = [] if temperature == 0 else [GumbelSampler(temperature, seeds, width)]
    with torch.no_grad():  # greedy over Gumbel-perturbed logits is an exact sample from softmax(logits / T)
        out = model.generate(
            input_ids=ids.to(model.device),
            attention_mask=mask.to(model.device),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            num_return_sequences=1,  # one reply per prompt, whatever the generation config asks
            prompt_lookup_num_tokens=None,  # assisted decoding (one prompt a batch only) changes no greedy reply
            assistant_early_exit=None,
            pad_token_id=pad,
            logits_processor=sampler,
            tokenizer=tokenizer,  # what a generation config's stop strings or token healing need
        )
    return out[:, width:]


class GumbelSampler:
    """A `generate` logits processor for seeded sampling at temperature T: it returns
    logits / T + Gumbel noise, so greedy decoding picks an exact sample of softmax(logits / T)
    (the Gumbel-max trick). The noise of row r at generation step t comes from its own generator
    seeded by (seeds[r], t): a conversation's reply does not depend on its batch."""

    def __init__(self, temperature: float, seeds: list[int], prompt_width: int):
        self.temperature, self.seeds, self.width = temperature, seeds, prompt_width

    def __call__(self, input_ids, scores):

        step = input_ids.shape[1] - self.width
        noise = torch.stack(
            [
                torch.rand(
                    scores.shape[-1], dtype=torch.float64, generator=torch.Generator().manual_seed(s * 65_537 + step)
                )
                for s in self.seeds
            ]
        )  # (b, V) uniform
        gumbel = -torch.log(-torch.log(noise.clamp(1e-300, 1 - 1e-16)))
        return (scores.double() / self.temperature + gumbel.to(scores.device)).to(scores.dtype)


# What `generate` reads from a model's generation config in greedy decoding, beyond the model's config
# (which `model_fingerprint` covers): its logits processors and search. Sampling settings (temperature,
# top_p, top_k) are not read with do_sample=False.
PROCESSORS = (  # the logits processors (a sampled draw is then not from softmax(logits / T))
    "repetition_penalty",
    "no_repeat_ngram_size",
    "suppress_tokens",
    "begin_suppress_tokens",
    "bad_words_ids",
    "sequence_bias",
    "encoder_repetition_penalty",
    "encoder_no_repeat_ngram_size",
    "guidance_scale",
    "watermarking_config",
    "remove_invalid_values",
)
GREEDY_FIELDS = PROCESSORS + (
    "min_length",
    "min_new_tokens",
    "forced_bos_token_id",
    "forced_eos_token_id",
    "exponential_decay_length_penalty",
    "num_beams",
    "length_penalty",  # with num_beams > 1: beam scores by length
    "early_stopping",  # with num_beams > 1: when beam search ends
    "num_beam_groups",
    "diversity_penalty",
    "penalty_alpha",
    "dola_layers",
    "token_healing",
    "stop_strings",
    "max_time",
)
NEUTRAL = {  # values of GREEDY_FIELDS that change no reply (generate applies nothing with them)
    "repetition_penalty": 1.0,
    "encoder_repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "encoder_no_repeat_ngram_size": 0,
    "guidance_scale": 1.0,
    "remove_invalid_values": False,
    "min_length": 0,
    "min_new_tokens": 0,
    "num_beams": 1,
    "num_beam_groups": 1,
    "diversity_penalty": 0.0,
    "penalty_alpha": 0.0,
    "token_healing": False,
}


def generation_changes(model) -> dict:
    """{field: value} of the model's generation config that change a greedy reply: each of GREEDY_FIELDS
    set to other than `GenerationConfig`'s default, and end-of-sequence ids other than the model config's.
    Part of the replies' key where not empty: a hub model whose generation_config.json is edited (its
    eos_token_id, a repetition penalty) gets new replies, never the old ones."""
    config = getattr(model, "generation_config", None)
    if config is None:
        return {}
    default = GenerationConfig()
    changes = {
        name: _plain(getattr(config, name, None))
        for name in GREEDY_FIELDS
        if getattr(config, name, None) != getattr(default, name, None)
        and not (getattr(config, name, None) in ([], {}, ()) and getattr(default, name, None) is None)  # unset too
        and not (name in NEUTRAL and getattr(config, name, None) == NEUTRAL[name])
    }
    own = getattr(model.config, "eos_token_id", None)
    own = [int(e) for e in (own if isinstance(own, (list, tuple)) else [own])] if own is not None else []
    eos = eos_ids(model)
    if sorted(set(eos)) != sorted(set(own)):  # a set: generation stops at any of them, in any order
        changes["eos_token_id"] = sorted(set(eos))
    return changes


def _plain(value):
    """A generation-config value as the key's JSON holds it (a tuple-keyed sequence_bias by its repr)."""
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError):
        return repr(value)


def _check_plain_sampling(model) -> None:
    """`generate` applies these generation-config processors in greedy mode too, before
    `GumbelSampler`: with any of them set, a draw is not from softmax(logits / T)."""
    changed = {k: v for k, v in generation_changes(model).items() if k in PROCESSORS}
    if changed:
        raise ValueError(
            f"the model's generation config sets {changed}: sampled replies would not follow "
            "softmax(logits / T); clear them on model.generation_config first"
        )


def eos_ids(model) -> list[int]:
    """The model's end-of-sequence ids (generation config first, as `generate` reads them)."""
    for config in (getattr(model, "generation_config", None), model.config):
        eos = getattr(config, "eos_token_id", None) if config is not None else None
        if eos is not None:
            return [int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos])]
    return []


def cache_payload(key: dict, replies: list) -> bytes:
    """The reply cache file: the key and the replies, behind a sha256 of both."""
    body = json.dumps({"key": key, "replies": replies}, sort_keys=True)
    return json.dumps({"sha256": sha256_text(body), "body": body}).encode()


def _checked(raw: bytes) -> tuple[dict, list[tuple]]:
    """(payload, replies) of a reply cache file's bytes, its checksum verified (ValueError when it fails)."""
    wrapper = json.loads(raw)
    if sha256_text(wrapper["body"]) != wrapper["sha256"]:
        raise ValueError("checksum mismatch")
    payload = json.loads(wrapper["body"])
    if not (
        isinstance(payload, dict) and isinstance(payload.get("key"), dict) and isinstance(payload.get("replies"), list)
    ):
        raise ValueError("its body is not a key (a mapping) and a list of replies")
    for e in payload["replies"]:
        ok = isinstance(e, list) and len(e) in (2, 3) and type(e[0]) is int and isinstance(e[1], str)
        if not (ok and (len(e) == 2 or (isinstance(e[2], list) and all(type(t) is int and t >= 0 for t in e[2])))):
            raise ValueError(f"reply {e!r} is not [index, text] or [index, text, token ids]")
    replies = [tuple(e[:2]) + ((e[2],) if len(e) == 3 else ()) for e in payload["replies"]]  # types checked above
    indices = [int(e[0]) for e in payload["replies"]]
    if len(set(indices)) != len(indices) or (indices and min(indices) < 0):
        raise ValueError("a reply's index is listed twice or is negative (each conversation has one reply)")
    return payload, replies


def _for_these(done: list[tuple], n: int, name: str) -> list[tuple]:
    """`done` when each of its replies answers one of the `n` conversations, else none (said why)."""
    if any(not 0 <= entry[0] < n for entry in done):
        print(f"regenerating replies: {name} holds a reply to no conversation of the {n}")
        return []
    return done


def read_cache(path: Path, key: dict) -> list[tuple]:
    """Replies cached for exactly `key`; a missing, unreadable, corrupt or stale file gives none
    (and says why, unless it is simply missing). The checksum covers every byte that is used."""
    if not path.is_file():
        return []
    try:
        payload, replies = _checked(path.read_bytes())
    except (OSError, ValueError, KeyError, TypeError) as err:
        print(f"regenerating replies: {path.name} is unreadable or corrupt ({err})")
        return []
    if payload.get("key") != json.loads(json.dumps(key)):
        print(f"regenerating replies: {path.name} holds replies made for other inputs than its name says")
        return []
    return replies


def _without_library(key: dict) -> dict:
    return {k: v for k, v in json.loads(json.dumps(key)).items() if k != "library"}


def same_making(key: dict, folders: list[Path]) -> list[tuple]:
    """Replies archived in `folders` for `key` made under other library versions (a torch build with a
    local suffix, a newer transformers): found by what produced them (model, tokenizer, prompts,
    settings), checked by their own checksum, used, and said so on stderr; [] when none is there. An
    archive that cannot be read is skipped, naming it."""
    want = _without_library(key)
    for folder in folders:
        for found in sorted(folder.glob("*.json.gz")) if folder.is_dir() else []:
            try:
                payload, replies = _checked(gzip.decompress(found.read_bytes()))
            except (OSError, EOFError, zlib.error, ValueError, KeyError, TypeError) as err:
                print(f"{found}: unreadable archive ({err}): skipped", file=sys.stderr)
                continue
            if _without_library(payload["key"]) != want:
                continue
            print(
                f"replies from {found}: made under {payload['key'].get('library')}, this is {key.get('library')}; "
                "used (the same model, tokenizer, prompts and settings)",
                file=sys.stderr,
            )
            return replies
    return []


def with_replies(conversations: list[list[dict]], replies: list[str]) -> list[list[dict]]:
    """Each conversation, ending with a user turn, followed by its reply (text) as an assistant turn."""
    if isinstance(replies, (str, bytes)) or not all(isinstance(r, str) for r in replies):
        raise TypeError("replies must be a list of texts, one a conversation")
    if len(replies) != len(conversations):
        raise ValueError(f"{len(replies)} replies for {len(conversations)} conversations")
    ended = [i for i, c in enumerate(conversations) if not c or c[-1].get("role") != "user"]
    if ended:  # a reply to a reply would be a second assistant turn
        raise ValueError(f"conversation(s) {ended[:5]} do not end with a user turn: nothing to reply to")
    return [list(c) + [{"role": "assistant", "content": r}] for c, r in zip(conversations, replies)]


def reply_conversations(model, tokenizer, conversations: list[list[dict]], **options) -> list[list[dict]]:
    """The conversations, each followed by `model`'s greedy reply (`generate_responses` options):
    the input `capture` takes when the statistics should cover the model's own replies."""
    return with_replies(conversations, generate_responses(model, tokenizer, conversations, **options))
