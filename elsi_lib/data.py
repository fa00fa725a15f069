"""Prompt sets and SpecBench, read from a data folder (never copied into the repository).

The folder is the `data_dir` argument, else $ELSI_DATA_DIR, else `../shared/data` next to the
repository (its README lists sources, licences and uses; `make data` fetches the same files).
Every file read from that folder is pinned (`fetch_data.SOURCES`) and checked against its git
blob id before it is parsed, once per process; files a user passes by path are not checked.
A conversation is a list of chat messages `{"role": "system"|"user"|"assistant", "content": str}`.
"""
from __future__ import annotations

import hashlib
import json
import numbers
import os
import random
import re
from pathlib import Path
from typing import Callable, Iterable, Iterator

from . import fetch_data
from .cachefiles import REPO_ROOT

Conversation = list[dict]


class DataFormatError(ValueError):
    """A malformed record; the message names the file and line."""


class OverlapError(ValueError):
    """Calibration and evaluation prompts share text."""


class DataIntegrityError(ValueError):
    """A pinned data file whose content is not the pinned one (altered or truncated)."""


def data_dir(path: str | os.PathLike | None = None) -> Path:
    """The folder holding the prompt sets: `path`, $ELSI_DATA_DIR or ../shared/data."""
    candidate = Path(path or os.environ.get("ELSI_DATA_DIR") or REPO_ROOT.parent / "shared" / "data")
    if not candidate.is_dir():
        raise FileNotFoundError(
            f"data folder {candidate} not found: pass data_dir=..., set ELSI_DATA_DIR, "
            "or run `make data` to fetch the prompt sets")
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
            "altered or truncated. Restore it with `make data` (`python -m elsi_lib.fetch_data FOLDER` "
            "fetches verified copies into FOLDER; point $ELSI_DATA_DIR at it)")
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
        raise DataFormatError(f"{path}:{lineno}: not valid UTF-8 (byte 0x{raw[err.start]:02x} at column "
                              f"{column}); save the file as UTF-8") from None


def _read_jsonl(path: Path) -> Iterator[tuple[int, object]]:
    with open(path, "rb") as handle:
        for lineno, raw in enumerate(handle, 1):
            line = _decoded(raw, path, lineno)
            if not line.strip():
                continue
            try:
                yield lineno, json.loads(line)
            except json.JSONDecodeError as err:
                raise DataFormatError(f"{path}:{lineno}: malformed JSON ({err.msg})") from None


def _read_records(path: Path) -> Iterator[tuple[int, object]]:
    """Records of a JSON list (numbered from 1) or of a JSONL file (numbered by line)."""
    with open(path, "rb") as handle:
        head = handle.read(1 << 12).lstrip()
    if head.startswith(b"["):
        try:
            records = json.loads(_decoded(path.read_bytes(), path, 1))
        except json.JSONDecodeError as err:
            raise DataFormatError(f"{path}:{err.lineno}: malformed JSON ({err.msg})") from None
        yield from enumerate(records, 1)
    else:
        yield from _read_jsonl(path)


def _field(record, name: str, path: Path, lineno: int, kind=str):
    if not isinstance(record, dict) or name not in record:
        raise DataFormatError(f"{path}:{lineno}: missing field {name!r}")
    value = record[name]
    if not isinstance(value, kind):
        raise DataFormatError(f"{path}:{lineno}: field {name!r} should be {kind.__name__}, "
                              f"got {type(value).__name__}")
    return value


def _user(text: str) -> Conversation:
    return [{"role": "user", "content": text}]


def _with_input(instruction: str, extra: str) -> str:
    return f"{instruction}\n\n{extra}" if extra and extra.strip() else instruction


# ---------------------------------------------------------------- one parser per format

SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "chatgpt": "assistant",
                  "assistant": "assistant", "bard": "assistant", "bing": "assistant", "system": "system"}


def parse_sharegpt(path: Path) -> list[Conversation]:
    """ShareGPT `{conversations: [{from, value}]}` records (JSON list or JSONL), the paper's format."""
    out = []
    for lineno, record in _read_records(path):
        turns = _field(record, "conversations", path, lineno, list)
        conversation = []
        for turn in turns:
            speaker = _field(turn, "from", path, lineno)
            if speaker.lower() not in SHAREGPT_ROLES:
                raise DataFormatError(f"{path}:{lineno}: unknown speaker {speaker!r}")
            conversation.append({"role": SHAREGPT_ROLES[speaker.lower()],
                                 "content": _field(turn, "value", path, lineno)})
        if any(m["role"] == "user" for m in conversation):
            out.append(conversation)
    return out


def parse_arena_hard(path: Path) -> list[Conversation]:
    return [_user(_field(r, "prompt", path, n)) for n, r in _read_records(path)]


def parse_oasst_lottery(path: Path) -> list[Conversation]:
    out = []
    for lineno, record in _read_jsonl(path):
        if not isinstance(record, str):
            raise DataFormatError(f"{path}:{lineno}: expected a JSON string")
        out.append(_user(record))
    return out


def parse_oasst_trees(path: Path, human_only: bool = False) -> list[Conversation]:
    """One multi-turn conversation per OASST tree: from the root, follow the best-ranked reply at
    each level, ending on the last user message (the target model writes the final reply)."""
    out = []
    for lineno, record in _read_jsonl(path):
        node = _field(record, "prompt", path, lineno, dict)
        conversation = []
        while node is not None:
            if human_only and node.get("synthetic"):
                break
            role = {"prompter": "user", "assistant": "assistant"}.get(_field(node, "role", path, lineno))
            if role is None:
                raise DataFormatError(f"{path}:{lineno}: unknown role {node['role']!r}")
            conversation.append({"role": role, "content": _field(node, "text", path, lineno)})
            replies = [r for r in node.get("replies", []) if not r.get("deleted")]
            node = min(replies, key=lambda r: r.get("rank", 0) if r.get("rank") is not None else 1e9,
                       default=None)
        while conversation and conversation[-1]["role"] != "user":
            conversation.pop()
        if conversation:
            out.append(conversation)
    return out


def parse_self_instruct(path: Path) -> list[Conversation]:
    """`instruction`, followed by the first instance's `input` when it has one."""
    out = []
    for lineno, record in _read_records(path):
        instances = _field(record, "instances", path, lineno, list)
        extra = instances[0].get("input", "") if instances and isinstance(instances[0], dict) else ""
        out.append(_user(_with_input(_field(record, "instruction", path, lineno), extra)))
    return out


def parse_ultrachat_eval(path: Path, drop_classes: Iterable[str] = ("Vicuna",)) -> list[Conversation]:
    """UltraChat eval questions; the "Vicuna" class overlaps SpecBench and is dropped by default."""
    drop = {c.strip() for c in drop_classes}
    return [_user(_field(r, "data", path, n)) for n, r in _read_records(path)
            if _field(r, "class", path, n).strip() not in drop]


def parse_instruction_input(path: Path) -> list[Conversation]:
    """GPTeacher `{instruction, input}` (the stored responses are ignored)."""
    return [_user(_with_input(_field(r, "instruction", path, n), r.get("input") or ""))
            for n, r in _read_records(path)]


def parse_question(path: Path) -> list[Conversation]:
    return [_user(_field(r, "question", path, n)) for n, r in _read_records(path)]


PROMPT_SETS: dict[str, tuple[str, Callable[[Path], list[Conversation]]]] = {
    "arena-hard-v0.1": ("arena-hard-auto/arena-hard-v0.1/question.jsonl", parse_arena_hard),
    "arena-hard-v2.0": ("arena-hard-auto/arena-hard-v2.0/question.jsonl", parse_arena_hard),
    "oasst-lottery": ("oasst/prompt_lottery_en_250_text.jsonl", parse_oasst_lottery),
    "oasst-trees": ("oasst/en_100_tree.jsonl", parse_oasst_trees),
    "self-instruct-user": ("self-instruct/user_oriented_instructions.jsonl", parse_self_instruct),
    "self-instruct-seed": ("self-instruct/seed_tasks.jsonl", parse_self_instruct),
    "ultrachat-eval": ("ultrachat/ultra_eval.json", parse_ultrachat_eval),
    "ifeval": ("ifeval/input_data.jsonl", parse_arena_hard),
    "gpteacher-code": ("gpteacher/codegen-instruct.json", parse_instruction_input),
    "gpteacher-roleplay": ("gpteacher/roleplay-simple-deduped-roleplay-instruct.json", parse_instruction_input),
    "gsm8k-train": ("gsm8k/train.jsonl", parse_question),
}
# The clean-licence calibration mix suggested by the data README (the paper used ShareGPT).
CALIBRATION_MIX = ("arena-hard-v0.1", "oasst-lottery", "oasst-trees", "self-instruct-user", "ultrachat-eval")
TRAINING_MIX = ("arena-hard-v2.0", "self-instruct-seed", "ifeval", "gpteacher-code", "gpteacher-roleplay",
                "gsm8k-train")


def load_prompts(source: str | os.PathLike, data_dir_path: str | os.PathLike | None = None) -> list[Conversation]:
    """Conversations of a named prompt set (see PROMPT_SETS) or of a ShareGPT-format file."""
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"source must be a prompt-set name or a file path, got {type(source).__name__} {source!r}")
    if isinstance(source, str) and source in PROMPT_SETS:
        relative, parser = PROMPT_SETS[source]
        return parser(verify_pinned(data_dir(data_dir_path), relative))
    path = Path(source)
    if path.is_file():
        return parse_sharegpt(path)
    raise ValueError(f"unknown prompt set {source!r}: pass one of {sorted(PROMPT_SETS)} "
                     "or the path of a ShareGPT-format JSON/JSONL file")


def normalized_text(conversation: Conversation) -> str:
    """User turns joined, lower-cased, whitespace collapsed: the text used for overlap checks."""
    users = " ".join(m["content"] for m in conversation if m["role"] == "user")
    return re.sub(r"\s+", " ", users).strip().lower()


def _check_count(n, what: str = "n") -> None:
    """A count must be a positive integer (a bool is not one)."""
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        raise TypeError(f"{what} must be a positive integer, got {type(n).__name__} {n!r}")
    if n <= 0:
        raise ValueError(f"{what} must be a positive integer, got {n}")


def _check_seed(seed) -> None:
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"seed must be an integer (the sample is reproducible for a given seed), "
                        f"got {type(seed).__name__} {seed!r}")


def sample(items: list, n: int, seed: int = 0) -> list:
    """`n` items drawn without replacement, reproducibly for a given seed, in drawn order."""
    _check_count(n)
    _check_seed(seed)
    if n > len(items):
        raise ValueError(f"cannot sample {n} of {len(items)} items")
    return random.Random(int(seed)).sample(list(items), int(n))


def _checked_sources(sources) -> list:
    """`sources` as a list of prompt-set names and file paths, each checked before any is loaded;
    a single name or path is one source."""
    if isinstance(sources, (str, os.PathLike)):
        sources = [sources]
    try:
        sources = list(sources)
    except TypeError:
        raise TypeError(f"sources must be a prompt-set name, a file path or a list of them, "
                        f"got {type(sources).__name__} {sources!r}") from None
    if not sources:
        raise ValueError(f"no sources to draw calibration prompts from: pass names from "
                         f"{sorted(PROMPT_SETS)} or ShareGPT-format file paths")
    for source in sources:
        if not isinstance(source, (str, os.PathLike)):
            raise TypeError(f"sources must hold prompt-set names or file paths, got {type(source).__name__} "
                            f"{source!r}")
        if not (isinstance(source, str) and source in PROMPT_SETS) and not Path(source).is_file():
            raise ValueError(f"unknown prompt set {source!r}: pass names from {sorted(PROMPT_SETS)} "
                             "or paths of ShareGPT-format JSON/JSONL files")
    return sources


def calibration_prompts(n: int = 200, seed: int = 0, sources: Iterable[str] = CALIBRATION_MIX,
                        data_dir_path: str | os.PathLike | None = None) -> list[Conversation]:
    """A seeded sample of `n` distinct conversations from the calibration mix (default: the
    clean-licence mix of the data README; pass ShareGPT file paths to follow the paper). `sources`
    is a list of prompt-set names and file paths, or one of them."""
    _check_count(n)
    _check_seed(seed)
    sources = _checked_sources(sources)
    pool, seen = [], set()
    for source in sources:
        for conversation in load_prompts(source, data_dir_path):
            text = normalized_text(conversation)
            if text and text not in seen:
                seen.add(text)
                pool.append(conversation)
    if n > len(pool):
        raise ValueError(f"cannot draw {n} calibration prompts: the sources "
                         f"{[str(s) for s in sources]} hold only {len(pool)} distinct conversations")
    return sample(pool, n, seed)


def training_prompts(n: int, seed: int = 0, sources: Iterable[str] = TRAINING_MIX, *,
                     exclude: Iterable[list[Conversation]] = (), max_chars: int = 2000,
                     data_dir_path: str | os.PathLike | None = None) -> list[Conversation]:
    """`n` distinct single-turn prompts for distilling drafts: each source shuffled (seeded), then
    taken in turn (round robin), so that no source dominates (gsm8k-train alone holds 7473).
    Prompts whose whitespace-collapsed text (`normalized_text`) is longer than `max_chars` are
    dropped (truncating them would cut off the generation prompt), and so is every prompt whose user text appears in a conversation list of `exclude`
    (calibration prompts, SpecBench); `check_disjoint` then confirms it."""
    _check_count(n)
    _check_seed(seed)
    sources = _checked_sources(sources)
    excluded = [c for group in exclude for c in _checked_conversations(group, "exclude")]
    banned = {normalized_text([m]) for c in excluded for m in c if m["role"] == "user"}
    queues, seen = [], set()
    for index, source in enumerate(sources):
        queue = []
        for conversation in load_prompts(source, data_dir_path):
            text = normalized_text(conversation)
            if text and text not in seen and text not in banned and len(text) <= max_chars:
                seen.add(text)
                queue.append(conversation)
        queues.append(random.Random(int(seed) * 1000 + index).sample(queue, len(queue)))
    pool = [q[i] for i in range(max(map(len, queues), default=0)) for q in queues if i < len(q)]
    if n > len(pool):
        raise ValueError(f"cannot draw {n} training prompts: {len(pool)} remain in {[str(s) for s in sources]}")
    chosen = pool[:n]
    check_disjoint(chosen, excluded)
    return chosen


def load_specbench(path: str | os.PathLike | None = None, data_dir_path: str | os.PathLike | None = None):
    """SpecBench questions as a DataFrame with columns question_id, category, turns. Each
    question_id must be a JSON integer (not true, 1.5 or "7") and appear once: the tables count
    questions by id, so a repeated or ill-typed id would count a question twice."""
    import pandas as pd

    path = Path(path) if path else verify_pinned(data_dir(data_dir_path), "spec_bench/question.jsonl")
    rows, first_line = [], {}
    for lineno, record in _read_jsonl(path):
        turns = _field(record, "turns", path, lineno, list)
        if not turns or not all(isinstance(t, str) for t in turns):
            raise DataFormatError(f"{path}:{lineno}: field 'turns' should be a non-empty list of strings")
        qid = _field(record, "question_id", path, lineno, object)
        if isinstance(qid, bool) or not isinstance(qid, int):
            raise DataFormatError(f"{path}:{lineno}: question_id {qid!r} should be a JSON integer, "
                                  f"got {type(qid).__name__}")
        if qid in first_line:
            raise DataFormatError(f"{path}:{lineno}: question_id {qid} is repeated (first on line "
                                  f"{first_line[qid]}): each question must appear once")
        first_line[qid] = lineno
        rows.append({"question_id": qid, "category": _field(record, "category", path, lineno), "turns": turns})
    return pd.DataFrame(rows, columns=["question_id", "category", "turns"])


def specbench_conversations(frame) -> list[Conversation]:
    """Each SpecBench question's turns as user messages (for overlap checks)."""
    return [[{"role": "user", "content": t} for t in turns] for turns in frame["turns"]]


def _checked_conversations(conversations, argument: str) -> list[Conversation]:
    """`conversations` as a list, each a list of {role, content} messages with string values;
    a ValueError naming `argument` and the conversation when one is not."""
    hint = ("a conversation is a list of {'role': ..., 'content': str} messages; "
            "for a SpecBench frame pass specbench_conversations(frame)")
    if isinstance(conversations, (str, bytes, dict)) or not hasattr(conversations, "__iter__"):
        raise ValueError(f"{argument} should be a list of conversations, got {type(conversations).__name__} "
                         f"({hint})")
    conversations = list(conversations)
    for i, conversation in enumerate(conversations):
        if not isinstance(conversation, (list, tuple)):
            raise ValueError(f"{argument}[{i}] is a {type(conversation).__name__}, not a conversation ({hint})")
        for j, message in enumerate(conversation):
            if not (isinstance(message, dict) and isinstance(message.get("role"), str)
                    and isinstance(message.get("content"), str)):
                raise ValueError(f"{argument}[{i}][{j}] is not a message with string 'role' and 'content': "
                                 f"{str(message)[:80]!r} ({hint})")
    return conversations


def check_disjoint(calibration: list[Conversation], evaluation: list[Conversation]) -> None:
    """Raise OverlapError when any user turn of `calibration` equals one of `evaluation`
    (after collapsing whitespace and case); ValueError when either is not a list of conversations."""
    calibration = _checked_conversations(calibration, "calibration")
    evaluation = _checked_conversations(evaluation, "evaluation")

    def turns(conversations):
        return {re.sub(r"\s+", " ", m["content"]).strip().lower()
                for c in conversations for m in c if m["role"] == "user"}
    shared = turns(calibration) & turns(evaluation)
    if shared:
        examples = "; ".join(sorted(s[:60] for s in shared)[:3])
        raise OverlapError(f"{len(shared)} prompt(s) appear in both sets, e.g. {examples}")


def conversations_hash(conversations: list[Conversation]) -> str:
    """sha256 of the conversations' canonical JSON: a cache key for a prompt set."""
    payload = json.dumps(conversations, sort_keys=True, ensure_ascii=False).encode("utf-8")
    return hashlib.sha256(payload).hexdigest()
