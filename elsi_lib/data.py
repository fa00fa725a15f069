"""Prompt sets and SpecBench, read from a data folder (never copied into the repository).

The folder is the `data_dir` argument, else $ELSI_DATA_DIR, else `../shared/data` next to the
repository (its README lists sources, licences and uses; `make data` fetches the same files).
A conversation is a list of chat messages `{"role": "system"|"user"|"assistant", "content": str}`.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import re
from pathlib import Path
from typing import Callable, Iterable, Iterator

from .cachefiles import REPO_ROOT

Conversation = list[dict]


class DataFormatError(ValueError):
    """A malformed record; the message names the file and line."""


class OverlapError(ValueError):
    """Calibration and evaluation prompts share text."""


def data_dir(path: str | os.PathLike | None = None) -> Path:
    """The folder holding the prompt sets: `path`, $ELSI_DATA_DIR or ../shared/data."""
    candidate = Path(path or os.environ.get("ELSI_DATA_DIR") or REPO_ROOT.parent / "shared" / "data")
    if not candidate.is_dir():
        raise FileNotFoundError(
            f"data folder {candidate} not found: pass data_dir=..., set ELSI_DATA_DIR, "
            "or run `make data` to fetch the prompt sets")
    return candidate


# ---------------------------------------------------------------- readers with located errors

def _read_jsonl(path: Path) -> Iterator[tuple[int, object]]:
    with open(path, encoding="utf-8") as handle:
        for lineno, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                yield lineno, json.loads(line)
            except json.JSONDecodeError as err:
                raise DataFormatError(f"{path}:{lineno}: malformed JSON ({err.msg})") from None


def _read_records(path: Path) -> Iterator[tuple[int, object]]:
    """Records of a JSON list (numbered from 1) or of a JSONL file (numbered by line)."""
    with open(path, encoding="utf-8") as handle:
        head = handle.read(1 << 12).lstrip()
    if head.startswith("["):
        try:
            records = json.loads(path.read_text(encoding="utf-8"))
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
    if isinstance(source, str) and source in PROMPT_SETS:
        relative, parser = PROMPT_SETS[source]
        path = data_dir(data_dir_path) / relative
        if not path.is_file():
            raise FileNotFoundError(f"prompt set {source!r}: {path} is missing; run `make data`")
        return parser(path)
    path = Path(source)
    if path.is_file():
        return parse_sharegpt(path)
    raise ValueError(f"unknown prompt set {source!r}: pass one of {sorted(PROMPT_SETS)} "
                     "or the path of a ShareGPT-format JSON/JSONL file")


def normalized_text(conversation: Conversation) -> str:
    """User turns joined, lower-cased, whitespace collapsed: the text used for overlap checks."""
    users = " ".join(m["content"] for m in conversation if m["role"] == "user")
    return re.sub(r"\s+", " ", users).strip().lower()


def sample(items: list, n: int, seed: int = 0) -> list:
    """`n` items drawn without replacement, reproducibly for a given seed, in drawn order."""
    if not 0 < n <= len(items):
        raise ValueError(f"cannot sample {n} of {len(items)} items")
    return random.Random(seed).sample(list(items), n)


def calibration_prompts(n: int = 200, seed: int = 0, sources: Iterable[str] = CALIBRATION_MIX,
                        data_dir_path: str | os.PathLike | None = None) -> list[Conversation]:
    """A seeded sample of `n` distinct conversations from the calibration mix (default: the
    clean-licence mix of the data README; pass ShareGPT file paths to follow the paper)."""
    pool, seen = [], set()
    for source in sources:
        for conversation in load_prompts(source, data_dir_path):
            text = normalized_text(conversation)
            if text and text not in seen:
                seen.add(text)
                pool.append(conversation)
    return sample(pool, n, seed)


def load_specbench(path: str | os.PathLike | None = None, data_dir_path: str | os.PathLike | None = None):
    """SpecBench questions as a DataFrame with columns question_id, category, turns."""
    import pandas as pd

    path = Path(path) if path else data_dir(data_dir_path) / "spec_bench" / "question.jsonl"
    rows = []
    for lineno, record in _read_jsonl(path):
        turns = _field(record, "turns", path, lineno, list)
        if not turns or not all(isinstance(t, str) for t in turns):
            raise DataFormatError(f"{path}:{lineno}: field 'turns' should be a non-empty list of strings")
        rows.append({"question_id": _field(record, "question_id", path, lineno, int),
                     "category": _field(record, "category", path, lineno), "turns": turns})
    return pd.DataFrame(rows, columns=["question_id", "category", "turns"])


def specbench_conversations(frame) -> list[Conversation]:
    """Each SpecBench question's turns as user messages (for overlap checks)."""
    return [[{"role": "user", "content": t} for t in turns] for turns in frame["turns"]]


def check_disjoint(calibration: list[Conversation], evaluation: list[Conversation]) -> None:
    """Raise OverlapError when any user turn of `calibration` equals one of `evaluation`
    (after collapsing whitespace and case)."""
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
