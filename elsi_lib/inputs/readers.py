"""Readers of the prompt-set files in a data folder.

The folder is the `data_dir` argument, else $ELSI_DATA_DIR, else the pinned copies that ship inside
the package, `elsi_lib/inputs/prompt_sets` (`data/prompts` in a checkout; its README lists sources,
licences and uses; `make data` verifies them and refetches any that fail).
Every file read from that folder is pinned (`fetch_data.SOURCES`) and checked against its git
blob id before it is parsed, once per process; files a user passes by path are not checked.
A conversation is a list of chat messages `{"role": "system"|"user"|"assistant", "content": str}`.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Iterable, Iterator

from ..common.checks import unique_keys
from . import fetch_data

Conversation = list[dict]


class DataFormatError(ValueError):
    """A malformed record; the message names the file and line."""


class DataIntegrityError(ValueError):
    """A pinned data file whose content is not the pinned one (altered or truncated)."""


def data_dir(path: str | os.PathLike | None = None) -> Path:
    """The folder holding the prompt sets: `path`, $ELSI_DATA_DIR or the package's own copies."""
    candidate = Path(path or os.environ.get("ELSI_DATA_DIR") or fetch_data.PACKAGED)
    if not candidate.is_dir():
        raise FileNotFoundError(
            f"data folder {candidate} not found: pass data_dir=..., set ELSI_DATA_DIR, "
            "or run `make data` to fetch the prompt sets"
        )
    return candidate


# ---------------------------------------------------------------- pinned files, verified once

PINNED: dict[str, fetch_data.SourceFile] = {source.local: source for source in fetch_data.SOURCES}
# (resolved path, size, mtime_ns, inode) -> the file's git blob id, so each file is hashed once
# per process unless it changes.
_PINNED_VERDICTS: dict[tuple, str] = {}


def verify_pinned(folder: str | os.PathLike, relative: str) -> Path:
    """`folder / relative`, after checking it against its pinned git blob id (`make data` pins
    every file of the data folder). Raises FileNotFoundError when it is missing and
    DataIntegrityError when its content differs (truncated, edited, another version)."""
    source = PINNED[relative]
    path = Path(folder) / relative
    try:
        stat = path.stat()
    except FileNotFoundError:
        raise FileNotFoundError(f"{path} is missing; run `make data` to fetch the pinned data files") from None
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns, stat.st_ino)
    actual = _PINNED_VERDICTS.get(key)
    if actual is None:
        actual = _PINNED_VERDICTS[key] = fetch_data.git_blob_sha1(path.read_bytes())
    if actual != source.blob:
        raise DataIntegrityError(
            f"{path} is not the pinned copy of {relative} ({source.repo}@{source.commit[:12]}:{source.path}, "
            f"git blob {source.blob[:12]}); this file ({stat.st_size} bytes) has blob {actual[:12]}: it was "
            "altered or truncated. Restore it with `make data` (`python -m elsi_lib.inputs.fetch_data FOLDER` "
            "fetches verified copies into FOLDER; point $ELSI_DATA_DIR at it)"
        )
    return path


# ---------------------------------------------------------------- readers with located errors


def _decoded(raw: bytes, path: Path, lineno: int) -> str:
    """`raw` (starting at line `lineno`) as UTF-8; a DataFormatError naming the file, line and
    byte when it is not."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        lineno += raw.count(b"\n", 0, err.start)
        column = err.start - raw.rfind(b"\n", 0, err.start)  # 1-based
        raise DataFormatError(
            f"{path}:{lineno}: not valid UTF-8 (byte 0x{raw[err.start]:02x} at column {column}); save the file as UTF-8"
        ) from None


BOM = "\ufeff"  # a UTF-8 byte-order mark some editors write first: not part of the JSON
SHAPES = "expected JSON Lines (one JSON record per line) or a JSON array of records ([{...}, {...}])"


TOO_DEEP = "a value nested too deeply to read (no conversation record nests more than a few levels)"


def read_jsonl(path: Path) -> Iterator[tuple[int, object]]:
    """(line number, record) of each non-blank line of a JSON Lines file."""
    with open(path, "rb") as handle:
        for lineno, raw in enumerate(handle, 1):
            line = _decoded(raw, path, lineno)
            if lineno == 1:
                line = line.removeprefix(BOM)
            if not line.strip():
                continue
            try:
                record = json.loads(line, object_pairs_hook=unique_keys)
            except json.JSONDecodeError as err:
                raise DataFormatError(f"{path}:{lineno}: malformed JSON ({err.msg}); {SHAPES}") from None
            except ValueError as err:  # a key twice: json would keep the last without a word
                raise DataFormatError(f"{path}:{lineno}: {err}") from None
            except RecursionError:
                raise DataFormatError(f"{path}:{lineno}: {TOO_DEEP}") from None
            yield lineno, record


def _one_document(path: Path):
    """The whole file parsed as one JSON value, or the JSONDecodeError saying where it is not one."""
    try:
        return json.loads(_decoded(path.read_bytes(), path, 1).removeprefix(BOM), object_pairs_hook=unique_keys)
    except json.JSONDecodeError as err:
        return err
    except ValueError as err:  # a key twice
        raise DataFormatError(f"{path}: {err}") from None
    except RecursionError:
        raise DataFormatError(f"{path}: {TOO_DEEP}") from None


def _array_records(text: str) -> Iterator[tuple[int, object]]:
    """(line where it starts, record) of each element of a JSON array already known to parse."""
    decoder, at, counted, line = json.JSONDecoder(object_pairs_hook=unique_keys), text.index("[") + 1, 0, 1
    while True:
        while text[at] in " \t\r\n,":
            at += 1
        if text[at] == "]":
            return
        line, counted = line + text.count("\n", counted, at), at
        record, at = decoder.raw_decode(text, at)
        yield line, record


def _read_records(path: Path) -> Iterator[tuple[int, object]]:
    """Records of a JSON array (numbered by the line each starts on), of a JSONL file (numbered by line), or the one
    record of a JSON object spread over several lines (numbered 1, as `json.dump(..., indent=2)`
    writes it)."""
    with open(path, "rb") as handle:
        head = handle.read(1 << 12).decode("utf-8", errors="replace").removeprefix(BOM).lstrip()
    if head.startswith("["):
        text = _decoded(path.read_bytes(), path, 1).removeprefix(BOM)
        try:
            json.loads(text, object_pairs_hook=unique_keys)
        except json.JSONDecodeError as err:
            raise DataFormatError(f"{path}:{err.lineno}: malformed JSON ({err.msg})") from None
        except ValueError as err:  # a key twice
            raise DataFormatError(f"{path}: {err}") from None
        except RecursionError:
            raise DataFormatError(f"{path}: {TOO_DEEP}") from None
        yield from _array_records(text)  # numbered by the line each record starts on
        return
    lines = read_jsonl(path)
    try:
        first = next(lines, None)
    except DataFormatError as line_error:
        document = _one_document(path) if head.startswith("{") else None
        if isinstance(document, json.JSONDecodeError):  # neither JSON Lines nor one object: say both
            raise DataFormatError(
                f"{line_error}; read as one JSON document instead, it fails at {path}:{document.lineno} "
                f"({document.msg})"
            ) from None
        if not isinstance(document, dict):
            raise
        yield 1, document
        return
    if first is not None:
        yield first
        yield from lines


def record_field(record, name: str, path: Path, lineno: int, kind=str):
    if not isinstance(record, dict) or name not in record:
        raise DataFormatError(f"{path}:{lineno}: missing field {name!r}")
    value = record[name]
    if not isinstance(value, kind):
        raise DataFormatError(f"{path}:{lineno}: field {name!r} should be {kind.__name__}, got {type(value).__name__}")
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as err:  # a lone surrogate ("\ud800"): JSON allows it, no tokenizer takes it
            raise DataFormatError(
                f"{path}:{lineno}: field {name!r} holds {value[err.start : err.end]!r} at character {err.start}, "
                "half of a surrogate pair: not text a model can read"
            ) from None
    return value


def _user(text: str) -> Conversation:
    return [{"role": "user", "content": text}]


def _with_input(instruction: str, extra: str) -> str:
    return f"{instruction}\n\n{extra}" if extra and extra.strip() else instruction


# ---------------------------------------------------------------- one parser per format

SHAREGPT_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "chatgpt": "assistant",
    "assistant": "assistant",
    "bard": "assistant",
    "bing": "assistant",
    "system": "system",
}


def parse_sharegpt(path: Path) -> list[Conversation]:
    """ShareGPT `{conversations: [{from, value}]}` records (JSON list or JSONL), the paper's format, a record's
    `system` text (LLaMA-Factory's layout) its first turn; a record without a user turn is left out, with a
    warning naming the file and how many."""
    out, dropped = [], 0
    for lineno, record in _read_records(path):
        turns = record_field(record, "conversations", path, lineno, list)
        system = record.get("system") if isinstance(record, dict) else None  # LLaMA-Factory's record-level prompt
        if system is not None and not isinstance(system, str):
            raise DataFormatError(f"{path}:{lineno}: system is {type(system).__name__}, not text")
        conversation = [{"role": "system", "content": system}] if system and system.strip() else []
        for turn in turns:
            speaker = record_field(turn, "from", path, lineno)
            if speaker.lower() not in SHAREGPT_ROLES:
                raise DataFormatError(f"{path}:{lineno}: unknown speaker {speaker!r}")
            conversation.append(
                {"role": SHAREGPT_ROLES[speaker.lower()], "content": record_field(turn, "value", path, lineno)}
            )
        if any(m["role"] == "user" for m in conversation):
            out.append(conversation)
        else:
            dropped += 1
    if dropped:
        warnings.warn(f"{path}: {dropped} record(s) without a user turn left out (nothing for a model to answer)")
    return out


def parse_arena_hard(path: Path) -> list[Conversation]:
    return [_user(record_field(r, "prompt", path, n)) for n, r in _read_records(path)]


def parse_oasst_lottery(path: Path) -> list[Conversation]:
    out = []
    for lineno, record in read_jsonl(path):
        if not isinstance(record, str):
            raise DataFormatError(f"{path}:{lineno}: expected a JSON string")
        out.append(_user(record))
    return out


def parse_oasst_trees(path: Path, human_only: bool = False) -> list[Conversation]:
    """One multi-turn conversation per OASST tree: from the root, follow the best-ranked reply at
    each level, ending on the last user message (the target model writes the final reply)."""
    out = []
    for lineno, record in read_jsonl(path):
        node = record_field(record, "prompt", path, lineno, dict)
        conversation = []
        while node is not None:
            if human_only and node.get("synthetic"):
                break
            role = {"prompter": "user", "assistant": "assistant"}.get(record_field(node, "role", path, lineno))
            if role is None:
                raise DataFormatError(f"{path}:{lineno}: unknown role {node['role']!r}")
            conversation.append({"role": role, "content": record_field(node, "text", path, lineno)})
            replies = [r for r in node.get("replies", []) if not r.get("deleted")]
            node = min(replies, key=lambda r: r.get("rank", 0) if r.get("rank") is not None else 1e9, default=None)
        while conversation and conversation[-1]["role"] != "user":
            conversation.pop()
        if conversation:
            out.append(conversation)
    return out


def parse_self_instruct(path: Path) -> list[Conversation]:
    """`instruction`, followed by the first instance's `input` when it has one."""
    out = []
    for lineno, record in _read_records(path):
        instances = record_field(record, "instances", path, lineno, list)
        extra = instances[0].get("input", "") if instances and isinstance(instances[0], dict) else ""
        out.append(_user(_with_input(record_field(record, "instruction", path, lineno), extra)))
    return out


def parse_ultrachat_eval(path: Path, drop_classes: Iterable[str] = ("Vicuna",)) -> list[Conversation]:
    """UltraChat eval questions; the "Vicuna" class overlaps SpecBench and is dropped by default."""
    drop = {c.strip() for c in drop_classes}
    return [
        _user(record_field(r, "data", path, n))
        for n, r in _read_records(path)
        if record_field(r, "class", path, n).strip() not in drop
    ]


def parse_instruction_input(path: Path) -> list[Conversation]:
    """GPTeacher `{instruction, input}` (the stored responses are ignored)."""
    return [
        _user(
            _with_input(
                record_field(r, "instruction", path, n),  # refuses a record that is not an object
                (r.get("input") if isinstance(r, dict) else None) or "",
            )
        )
        for n, r in _read_records(path)
    ]


def parse_question(path: Path) -> list[Conversation]:
    return [_user(record_field(r, "question", path, n)) for n, r in _read_records(path)]
