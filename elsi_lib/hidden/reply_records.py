"""The records of engine-written replies: the engine's output (JSON lines in the cache, written by
`hidden/engine_reply_script.py`) and its archive (the same records, gzip, committed under `data/replies/`).

Each record is `{"i": prompt index, "ids": [generated token ids], "sum": checksum}`; the checksum
(`record_sum`) binds the ids to their prompt index and to the request (the sha256 of the request
less the model folder's path), so an edited id, two swapped records or a record of another request
fails it even inside a valid gzip stream. A record set is refused, naming the file and the line,
when a record fails its checksum, repeats a prompt index, names a prompt outside the request, is
empty or holds a token id outside the vocabulary.

An archive's first line (`archive_header`) names everything that produced its replies: the model
(its weights hash), the tokenizer, the engine and its version, the generation settings, the prompts
and the request. An archive whose header differs from the request's is refused, naming the fields.
Archives written before the header and the checksums (format 1) are read only by `upgrade_archive`.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import zlib
from pathlib import Path

FORMAT = "elsi reply archive 2"
MAX_MODEL_LEN = 2048  # prompt (at most max_length) + reply (at most max_new_tokens) must fit


class ReplyRecordError(ValueError):
    """A reply file or record that cannot be trusted; the message names the file and the line."""


def request_digest(raw: bytes) -> str:
    """sha256 of an engine request without the model folder's path (which differs between machines;
    the model's identity is in the archive header)."""
    request = json.loads(raw)
    request.pop("model", None)
    return hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()


def record_sum(digest: str, i: int | None, ids: list[int]) -> str:
    """A record's checksum: the first 16 hex digits of sha256 over the request digest, the prompt
    index and the ids (hidden/engine_reply_script.py computes the same). `i` is None only for a format-1 record
    without an index (`upgrade_records`), which `check_records` then refuses."""
    return hashlib.sha256(f"{digest}|{i}|{','.join(map(str, ids))}".encode()).hexdigest()[:16]


def record(digest: str, i: int, ids: list[int]) -> dict:
    return {"i": i, "ids": ids, "sum": record_sum(digest, i, ids)}


def vocab_size(model) -> int:
    """How many token ids the model can emit: the rows of its output layer."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    return int(head.weight.shape[0]) if head is not None else int(model.config.vocab_size)


def archive_header(key: dict, digest: str, n_prompts: int, n_vocab: int) -> dict:
    """The first line of an archive: the reply cache key less the library versions (an archive
    outlives a patch release), the request's digest, its size and the vocabulary size."""
    return {
        "format": FORMAT,
        "engine": key["engine"],
        "model": key["model"],
        "tokenizer": key["tokenizer"],
        "generation": {
            "greedy": True,
            "max_new_tokens": key["max_new_tokens"],
            "max_length": key["max_length"],
            "truncate": key["truncate"],
            "max_model_len": MAX_MODEL_LEN,
        },
        "prompts": key["prompts"],
        "request": digest,
        "n_prompts": n_prompts,
        "vocab_size": n_vocab,
    }


def check_records(rows, *, source, digest: str, n_prompts: int, n_vocab: int) -> dict[int, list[int]]:
    """{prompt index: ids} of `rows` ((line number, parsed record) pairs), each checked; the first
    record that cannot be trusted raises ReplyRecordError naming `source` and its line."""
    found: dict[int, list[int]] = {}
    for line, entry in rows:
        where = f"{source}, line {line}"
        if not isinstance(entry, dict) or set(entry) != {"i", "ids", "sum"}:
            fields = sorted(entry) if isinstance(entry, dict) else type(entry).__name__
            raise ReplyRecordError(f"{where}: a reply record has the fields i, ids and sum; got {fields}")
        i, ids = entry["i"], entry["ids"]
        if type(i) is not int or not 0 <= i < n_prompts:
            raise ReplyRecordError(f"{where}: prompt index {i!r} is outside the request's {n_prompts} prompts")
        if i in found:
            raise ReplyRecordError(f"{where}: a second record of prompt {i}")
        if not isinstance(ids, list) or not ids:
            raise ReplyRecordError(f"{where}: the reply to prompt {i} is empty")
        bad = [t for t in ids if type(t) is not int or not 0 <= t < n_vocab]
        if bad:
            raise ReplyRecordError(
                f"{where}: the reply to prompt {i} holds token ids outside the vocabulary (0..{n_vocab - 1}): {bad[:3]}"
            )
        if entry["sum"] != record_sum(digest, i, ids):
            raise ReplyRecordError(
                f"{where}: the record of prompt {i} fails its checksum (its ids or index were "
                "changed, or it belongs to another request)"
            )
        found[i] = ids
    return found


def _lines(path: Path) -> list[str]:
    try:
        return gzip.decompress(path.read_bytes()).decode().splitlines()
    except (OSError, EOFError, zlib.error, UnicodeDecodeError) as err:
        raise ReplyRecordError(f"{path}: not a readable gzip archive ({err})") from None


def _parsed(path: Path, lines: list[str], first: int = 2):
    for n, text in enumerate(lines, first):
        try:
            yield n, json.loads(text)
        except ValueError:
            raise ReplyRecordError(f"{path}, line {n}: not a JSON record") from None


def read_archive(path: Path, header: dict) -> dict[int, list[int]]:
    """{prompt index: ids} of the archive at `path` (none if there is none), which must have been
    written for exactly `header`; anything else raises ReplyRecordError naming the file."""
    if not path.is_file():
        return {}
    lines = _lines(path)
    if not lines:
        raise ReplyRecordError(
            f"{path}: an empty archive (no header, no replies): move it away to write the replies anew"
        )
    found = next(_parsed(path, lines[:1], 1), (1, None))[1]
    if isinstance(found, dict) and set(found) == {"engine", "version", "request without the model path"}:
        raise ReplyRecordError(
            f"{path}: an archive of format 1 (no header naming the model, no checksums); "
            "upgrade it once with `engines/training_replies.py --upgrade-archive`"
        )
    if not isinstance(found, dict) or found.get("format") != FORMAT:
        shown = found.get("format") if isinstance(found, dict) else type(found).__name__
        raise ReplyRecordError(
            f"{path}, line 1: not a reply archive's header (format {shown!r}; this elsi reads format {FORMAT})"
        )
    differ = sorted(k for k in set(found) | set(header) if found.get(k) != header.get(k))
    if differ:
        raise ReplyRecordError(
            f"{path}: written for another request (its header differs in {', '.join(differ)}); "
            "move it away to write these replies anew"
        )
    return check_records(
        _parsed(path, lines[1:]),
        source=path,
        digest=header["request"],
        n_prompts=header["n_prompts"],
        n_vocab=header["vocab_size"],
    )


def archive_bytes(header: dict, replies: dict[int, list[int]]) -> bytes:
    """An archive's bytes: the header, then one checked record per reply in prompt order
    (deterministic: gzip without a timestamp)."""
    rows = [header] + [record(header["request"], i, replies[i]) for i in sorted(replies)]
    return gzip.compress("".join(json.dumps(r) + "\n" for r in rows).encode(), mtime=0)


def upgrade_records(path: Path, header: dict) -> dict[int, list[int]]:
    """The replies of a format-1 archive (header `{"engine", "version", "request without the model
    path"}`, records without checksums) written for this request, each checked as a record is."""
    lines = _lines(path)
    old = json.loads(lines[0])
    want = {
        "engine": header["engine"]["name"],
        "version": header["engine"]["version"],
        "request without the model path": header["request"],
    }
    if old != want:
        raise ReplyRecordError(f"{path}: not a format-1 archive of this request (header {old}, expected {want})")
    rows = [
        (n, {**entry, "sum": record_sum(header["request"], entry.get("i"), entry.get("ids", []))})
        if isinstance(entry, dict)
        else (n, entry)
        for n, entry in _parsed(path, lines[1:])
    ]
    return check_records(
        rows, source=path, digest=header["request"], n_prompts=header["n_prompts"], n_vocab=header["vocab_size"]
    )


def archive_versions(folder: Path) -> dict[Path, str]:
    """{archive: the vLLM version its header names} of every reply archive in `folder` (files without
    a readable header are left out: a request's own check names them)."""
    out = {}
    for path in sorted(Path(folder).glob("*.partial.jsonl.gz")):
        try:
            with gzip.open(path, "rt") as handle:
                out[path] = str(json.loads(handle.readline())["engine"]["version"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return out
