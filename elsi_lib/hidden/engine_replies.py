"""The reply step through vLLM: the same greedy replies as `replies.generate_responses`, written by a
real engine with continuous batching (about twice as fast on this CPU, `bench/bench_replies.py`), for
draft training data.

elsi never imports vLLM: `engine_replies` renders and truncates the prompts itself (the reply step's
rule), writes them as token ids to a request file, and runs `hidden/engine_reply_script.py` in the engines'
environment (`make test-engines` builds `.venv-engines`; `$ELSI_ENGINES_PYTHON` names another
interpreter), which appends each finished reply to a partial file under the cache. An interrupted
run resumes from that file; when every reply is there, the replies go to the reply step's own cache
format and key, with the engine, its version and the dtype in the key instead of the batch size.

The engine's output is hours of work and a new machine starts with an empty cache, so it can be
archived where git keeps it (`archive_replies`: `data/replies/`, gzip, or `$ELSI_REPLY_ARCHIVE`);
a request finds its archive by the same key and resumes from it, after checking that the archive was
written for exactly this request (its header names the model, tokenizer, engine, settings and
request) and every record in it (`reply_records`: a checksum per record, no repeated, empty or
out-of-range records).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ..common.cachefiles import REPO_ROOT, atomic_write_bytes, check_writable, key_digest, keyed_path
from ..common.identity import model_fingerprint, tokenizer_fingerprint, versions
from ..inputs.chat import tokenize_conversation, truncate
from ..common.identity import conversations_hash
from .engine_env import engine_environment, engines_python, model_folder, vllm_version
from .forward import check_conversations
from .replies import cache_payload, eos_ids, read_cache
from .reply_records import (
    MAX_MODEL_LEN,
    ReplyRecordError,
    archive_bytes,
    archive_header,
    archive_versions,
    check_records,
    read_archive,
    record,
    request_digest,
    upgrade_records,
    vocab_size,
)

SCRIPT = Path(__file__).resolve().parent / "engine_reply_script.py"  # run in the engines' environment, never imported


def engine_key(model, tokenizer, conversations, *, max_new_tokens: int, max_length: int, version: str) -> dict:
    """The reply cache key of engine-written replies: the reply step's, with the engine in place of
    the batch size (continuous batching has none)."""
    dtype = str(next(model.parameters()).dtype).replace("torch.", "")
    return {
        "model": model_fingerprint(model),
        "tokenizer": tokenizer_fingerprint(tokenizer),
        "library": versions(),
        "prompts": conversations_hash(conversations),
        "max_new_tokens": max_new_tokens,
        "max_length": max_length,
        "truncate": "keep_first",
        "engine": {"name": "vllm", "version": version, "dtype": dtype},
    }


def archive_dir() -> Path:
    """Where archived engine output lives: $ELSI_REPLY_ARCHIVE, else `data/replies` in the repository
    (committed, so that a new machine resumes a request instead of writing its replies again)."""
    return Path(os.environ.get("ELSI_REPLY_ARCHIVE") or REPO_ROOT / "data" / "replies")


def _request(model, tokenizer, conversations, *, max_new_tokens: int, max_length: int, dtype: str) -> bytes:
    """The engine's request file: the model folder, dtype, lengths and the prompts as token ids,
    rendered and truncated by the reply step's rule."""
    prompts = [
        truncate(tokenize_conversation(tokenizer, c, add_generation_prompt=True)[0], max_length) for c in conversations
    ]
    request = {
        "model": str(model_folder(model)),
        "dtype": dtype,
        "max_new_tokens": max_new_tokens,
        "max_model_len": MAX_MODEL_LEN,
        "prompts": prompts,
    }
    return json.dumps(request, sort_keys=True).encode()


def _header(raw: bytes, version: str) -> dict:
    """The first line of the engine's output (hidden/engine_reply_script.py writes the same)."""
    return {"engine": "vllm", "version": version, "request": hashlib.sha256(raw).hexdigest()}


def archive_path(key: dict) -> Path:
    """Where the archive of the request with this cache key lives: named by the key less the library
    versions (a fresh machine may resolve another patch release of them; the engine, its version, the
    model and tokenizer fingerprints and the prompts stay in the name, and the header checks the rest)."""
    return archive_dir() / f"{key_digest({k: v for k, v in key.items() if k != 'library'})}.partial.jsonl.gz"


@dataclass(frozen=True)
class Request:
    """One engine request, everything its files are checked against: the cache key, the request's
    bytes, its cache path and the archive header (model, tokenizer, engine, settings, prompts)."""

    key: dict
    raw: bytes
    path: Path
    archive: Path
    header: dict  # the archive's first line

    @property
    def n_prompts(self) -> int:
        return self.header["n_prompts"]

    @property
    def engine_header(self) -> dict:
        return _header(self.raw, self.key["engine"]["version"])

    @property
    def partial(self) -> Path:
        return self.path.with_suffix(".partial.jsonl")


def request_for(
    model, tokenizer, conversations, *, max_new_tokens: int, max_length: int, version: str | None = None
) -> Request:
    version = version or vllm_version(engines_python())
    key = engine_key(
        model, tokenizer, conversations, max_new_tokens=max_new_tokens, max_length=max_length, version=version
    )
    raw = _request(
        model,
        tokenizer,
        conversations,
        max_new_tokens=max_new_tokens,
        max_length=max_length,
        dtype=key["engine"]["dtype"],
    )
    header = archive_header(key, request_digest(raw), len(conversations), vocab_size(model))
    return Request(key, raw, keyed_path("responses", key, suffix=".json"), archive_path(key), header)


def _archived_ids(req: Request) -> dict[int, list[int]]:
    """{prompt index: generated ids} of the request's archive (none if there is none); an archive
    written for anything else, or a record that fails its checks, raises ReplyRecordError."""
    return read_archive(req.archive, req.header)


def _present_ids(req: Request) -> dict[int, list[int]]:
    """The replies of the engine's output if it was written for this request (else none: a torn or
    foreign header, which the engine itself would discard or refuse, too)."""
    try:
        if json.loads(req.partial.read_text().split("\n", 1)[0] or "null") != req.engine_header:
            return {}
    except (FileNotFoundError, ValueError):
        return {}
    return written_ids(req)


def _through_eos(ids: list[int], eos: set) -> list[int]:
    ends = [j for j, t in enumerate(ids) if t in eos]
    return ids[: ends[0] + 1] if ends else ids


def _missing(req: Request, found: dict, first: int | None = None) -> list[int]:
    """The prompt indices below `first` (None: all of the request's) without a reply in `found`."""
    return [i for i in range(req.n_prompts if first is None else first) if i not in found]


def _merge_archive(req: Request) -> None:
    """Put the archived replies of this request into its engine output, beside those already there
    (under the request's lock, before the engine starts: never while it appends)."""
    found, present = _archived_ids(req), _present_ids(req)
    if set(found) <= set(present):
        return
    merged, digest = {**found, **present}, req.header["request"]
    rows = [req.engine_header] + [record(digest, i, merged[i]) for i in sorted(merged)]
    atomic_write_bytes(req.partial, "".join(json.dumps(row) + "\n" for row in rows).encode())


def archive_replies(
    model, tokenizer, conversations: list[list[dict]], *, max_new_tokens: int = 128, max_length: int = 1024
) -> tuple[Path, int]:
    """Archive what the engine has written for this request so far (finished or not; while it runs
    too: its output is only read) under `archive_dir()`, gzip, atomically: (the archive, how many
    replies it holds). Each reply is kept through its first end-of-sequence token, as the cache holds
    it, so the archive's bytes do not depend on whether the request had finished. Nothing is written
    while the request has no reply. Runs no engine."""
    req = request_for(model, tokenizer, conversations, max_new_tokens=max_new_tokens, max_length=max_length)
    written = {**_archived_ids(req), **_present_ids(req)}
    cached = read_cache(req.path, req.key)  # after the partial: a request that finished meanwhile is complete here
    if len(cached) == len(conversations):
        written = {int(e[0]): e[2] for e in cached}
    if not written:  # a request the engine has not started here: no archive (an empty one would be committed)
        return req.archive, 0
    eos = set(eos_ids(model))
    req.archive.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(
        req.archive, archive_bytes(req.header, {i: _through_eos(ids, eos) for i, ids in written.items()})
    )
    return req.archive, len(written)


def upgrade_archive(
    model,
    tokenizer,
    conversations: list[list[dict]],
    *,
    max_new_tokens: int = 128,
    max_length: int = 1024,
    version: str | None = None,
) -> tuple[Path, int]:
    """Rewrite this request's format-1 archive (written before archives named the model and checked
    each record) in today's format, once: the same replies, each checked, under a header naming
    what produced them. (the archive, how many replies); an archive already upgraded is left alone.
    `version`: the vLLM version that wrote it (default: the one in the engines' environment)."""
    req = request_for(
        model, tokenizer, conversations, max_new_tokens=max_new_tokens, max_length=max_length, version=version
    )
    if not req.archive.is_file():
        raise FileNotFoundError(f"no archive of this request at {req.archive}")
    try:
        return req.archive, len(read_archive(req.archive, req.header))
    except ReplyRecordError as err:
        if "format 1" not in str(err):
            raise
    replies = upgrade_records(req.archive, req.header)
    atomic_write_bytes(req.archive, archive_bytes(req.header, replies))
    return req.archive, len(replies)


def engine_replies(
    model,
    tokenizer,
    conversations: list[list[dict]],
    *,
    max_new_tokens: int = 128,
    max_length: int = 1024,
    chunk: int = 512,
    env: dict | None = None,
):
    """Greedy replies of `model` to each conversation, written by vLLM. Returns (texts, generated ids
    through the first end-of-sequence token, the cache key). The texts are decoded here as the reply
    step decodes its own (special tokens skipped, stripped)."""
    for name, value in (("max_new_tokens", max_new_tokens), ("max_length", max_length), ("chunk", chunk)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if max_length + max_new_tokens > MAX_MODEL_LEN:
        raise ValueError(f"max_length + max_new_tokens must fit the engine's {MAX_MODEL_LEN} positions")
    check_conversations(conversations)
    if any(c[-1]["role"] != "user" for c in conversations):
        raise ValueError("every conversation must end with a user turn: there is nothing to reply to otherwise")
    python = engines_python()
    version = _version(model, tokenizer, conversations, max_new_tokens, max_length)
    req = request_for(
        model, tokenizer, conversations, max_new_tokens=max_new_tokens, max_length=max_length, version=version
    )
    check_writable(req.path.parent)
    cached = read_cache(req.path, req.key)
    if len(cached) == len(conversations):
        return [entry[1] for entry in cached], [entry[2] for entry in cached], req.key
    request_path = req.path.with_suffix(".request.json")
    if not request_path.is_file() or request_path.read_bytes() != req.raw:
        atomic_write_bytes(request_path, req.raw)
        req.partial.unlink(missing_ok=True)  # written for another request
    with open(req.path.with_suffix(".lock"), "w") as lock:
        try:  # one engine per request: a second would lose what the first appends once the archive is merged
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RuntimeError(
                f"another engine_replies run is writing this request ({req.partial}); wait for it, "
                "or read what it has written with replies_written"
            ) from None
        _merge_archive(req)
        if _missing(req, _present_ids(req)):
            subprocess.run(
                [str(python), str(SCRIPT), str(request_path), str(req.partial), "--chunk", str(chunk)],
                check=True,
                env={**engine_environment(python), **(env or {})},
            )
        entries = _decoded(model, tokenizer, read_partial(req))
        atomic_write_bytes(req.path, cache_payload(req.key, entries))
        request_path.unlink(missing_ok=True)
        req.partial.unlink(missing_ok=True)
    return [e[1] for e in entries], [e[2] for e in entries], req.key


def archived_vllm_version() -> str:
    """The vLLM version that wrote the replies, on a machine without the engines' environment: the one
    version every archive's header names (a draft's key records it before any reply is read). Raises
    the engines' FileNotFoundError when there is no archive, ValueError when archives disagree."""
    found = set(archive_versions(archive_dir()).values())
    if not found:
        return vllm_version(engines_python())  # raises, naming what to build
    if len(found) > 1:
        raise ValueError(
            f"the reply archives in {archive_dir()} were written by vLLM {sorted(found)}: without the engines' "
            "environment the training key cannot say which one wrote a request (make .venv-engines)"
        )
    return found.pop()


def _version(model, tokenizer, conversations, max_new_tokens: int, max_length: int, first: int | None = None) -> str:
    """vLLM's version in the engines' environment; without one, that of an archive of this request holding
    every reply, or the first `first` (a new machine continues from the archive in git without writing any
    reply again); the engines' error when no archive holds them."""
    try:
        return vllm_version(engines_python())
    except FileNotFoundError as error:
        no_engine = error  # raised, naming what to build, unless an archive holds the replies
    for path, version in archive_versions(archive_dir()).items():
        req = request_for(
            model, tokenizer, conversations, max_new_tokens=max_new_tokens, max_length=max_length, version=version
        )
        if req.archive == path and not _missing(req, _archived_ids(req), first):
            print(f"no engines' environment: the replies are read from {path.name} (vLLM {version})", file=sys.stderr)
            return version
    raise no_engine


def _decoded(model, tokenizer, ids: list[list[int]]) -> list[tuple]:
    """(index, text, ids through the first end-of-sequence token) per reply, decoded as the reply
    step decodes its own (special tokens skipped, stripped)."""
    eos = set(eos_ids(model))
    entries = []
    for i, generated in enumerate(ids):
        generated = _through_eos(generated, eos)
        entries.append((i, tokenizer.decode(generated, skip_special_tokens=True).strip(), generated))
    return entries


def replies_written(
    model, tokenizer, conversations: list[list[dict]], first: int, *, max_new_tokens: int = 128, max_length: int = 1024
) -> list[str]:
    """The replies to `conversations[:first]` of an `engine_replies` request (the same conversations
    and settings) that the engine has already written, finished or still running: for work on a
    prefix of the data while the rest is written. Runs no engine, and needs none where an archive holds
    the first replies (a new machine without the engines' environment); RuntimeError when fewer than
    `first` replies are there."""
    version = _version(model, tokenizer, conversations, max_new_tokens, max_length, first)
    req = request_for(
        model, tokenizer, conversations, max_new_tokens=max_new_tokens, max_length=max_length, version=version
    )
    cached = read_cache(req.path, req.key)
    if len(cached) == len(conversations):
        return [entry[1] for entry in cached[:first]]
    written = {**_archived_ids(req), **_present_ids(req)}  # read only
    if not written:
        raise RuntimeError(f"no replies of this request are written yet ({req.partial.name}); run engine_replies")
    if any(i not in written for i in range(first)):
        raise RuntimeError(
            f"{req.partial.name}: {sum(i in written for i in range(first))} of the first {first} "
            "replies are written; wait for the engine or ask for fewer"
        )
    return [text for _, text, _ in _decoded(model, tokenizer, [written[i] for i in range(first)])]


def written_ids(req: Request) -> dict[int, list[int]]:
    """{prompt index: generated ids} of the engine's output (after its header line), each record
    checked (`reply_records.check_records`). A torn last line, as a running or interrupted engine
    leaves, is skipped, and so is a repeated header line (an engine before 0.1.2 wrote one when its
    first chunk was interrupted; the engine drops it when it next runs)."""
    lines = req.partial.read_bytes().split(b"\n")[1:]
    if lines:
        lines.pop()  # the text after the last newline: empty, or a line the engine is writing
    rows = []
    for n, line in enumerate(lines, 2):
        try:
            entry = json.loads(line)
        except ValueError:
            raise ReplyRecordError(
                f"{req.partial}, line {n}: not a JSON record; remove the file to write its replies anew"
            ) from None
        if entry != req.engine_header:
            rows.append((n, entry))
    return check_records(
        rows,
        source=req.partial,
        digest=req.header["request"],
        n_prompts=req.n_prompts,
        n_vocab=req.header["vocab_size"],
    )


def read_partial(req: Request) -> list[list[int]]:
    """The generated ids of every prompt of the request from the engine's output; every one must be there."""
    found = written_ids(req)
    missing = _missing(req, found)
    if missing:
        raise RuntimeError(
            f"{req.partial}: the engine wrote no reply for {len(missing)} prompts (first "
            f"{missing[:5]}); rerun to resume"
        )
    return [found[i] for i in range(req.n_prompts)]
