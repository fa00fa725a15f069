"""The named prompt sets, the calibration and training mixes sampled from them, and SpecBench.

Files are read by `readers` from the data folder; a conversation is a list of chat messages.
"""

from __future__ import annotations

import numbers
import os
import random
import re
from pathlib import Path
from typing import Callable, Iterable

import pandas as pd

from .readers import (
    Conversation,
    DataFormatError,
    data_dir,
    parse_arena_hard,
    parse_instruction_input,
    parse_oasst_lottery,
    parse_oasst_trees,
    parse_question,
    parse_self_instruct,
    parse_sharegpt,
    parse_ultrachat_eval,
    read_jsonl,
    record_field,
    verify_pinned,
)


class OverlapError(ValueError):
    """Calibration and evaluation prompts share text."""


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
TRAINING_MIX = (
    "arena-hard-v2.0",
    "self-instruct-seed",
    "ifeval",
    "gpteacher-code",
    "gpteacher-roleplay",
    "gsm8k-train",
)


def load_prompts(prompt_set: str | os.PathLike, data_dir_path: str | os.PathLike | None = None) -> list[Conversation]:
    """Conversations of a named prompt set (see PROMPT_SETS) or of a ShareGPT-format file."""
    if not isinstance(prompt_set, (str, os.PathLike)):
        raise TypeError(
            f"prompt_set must be a prompt-set name or a file path, got {type(prompt_set).__name__} {prompt_set!r}"
        )
    if isinstance(prompt_set, str) and prompt_set in PROMPT_SETS:
        relative, parser = PROMPT_SETS[prompt_set]
        return parser(verify_pinned(data_dir(data_dir_path), relative))
    path = Path(prompt_set)
    if path.is_file():
        return parse_sharegpt(path)
    raise ValueError(
        f"unknown prompt set {prompt_set!r}: pass one of {sorted(PROMPT_SETS)} "
        "or the path of a ShareGPT-format JSON/JSONL file"
    )


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
        raise TypeError(
            f"seed must be an integer (the sample is reproducible for a given seed), got {type(seed).__name__} {seed!r}"
        )
    if seed < 0:  # random.Random seeds by the absolute value: -7 would draw seed 7's sample
        raise ValueError(f"seed must be 0 or more, got {seed}")


def sample(items: list, n: int, seed: int = 0) -> list:
    """`n` items drawn without replacement, reproducibly for a given seed, in drawn order."""
    _check_count(n)
    _check_seed(seed)
    if n > len(items):
        raise ValueError(f"cannot sample {n} of {len(items)} items")
    return random.Random(int(seed)).sample(list(items), int(n))


def _checked_prompt_sets(prompt_sets) -> list:
    """`prompt_sets` as a list of prompt-set names and file paths, each checked before any is loaded;
    a single name or path is one set."""
    if isinstance(prompt_sets, (str, os.PathLike)):
        prompt_sets = [prompt_sets]
    try:
        prompt_sets = list(prompt_sets)
    except TypeError:
        raise TypeError(
            f"prompt_sets must be a prompt-set name, a file path or a list of them, "
            f"got {type(prompt_sets).__name__} {prompt_sets!r}"
        ) from None
    if not prompt_sets:
        raise ValueError(
            f"no prompt sets to draw calibration prompts from: pass names from "
            f"{sorted(PROMPT_SETS)} or ShareGPT-format file paths"
        )
    for prompt_set in prompt_sets:
        if not isinstance(prompt_set, (str, os.PathLike)):
            raise TypeError(
                f"prompt_sets must hold prompt-set names or file paths, got {type(prompt_set).__name__} {prompt_set!r}"
            )
        if not (isinstance(prompt_set, str) and prompt_set in PROMPT_SETS) and not Path(prompt_set).is_file():
            raise ValueError(
                f"unknown prompt set {prompt_set!r}: pass names from {sorted(PROMPT_SETS)} "
                "or paths of ShareGPT-format JSON/JSONL files"
            )
    return prompt_sets


def calibration_prompts(
    n: int = 200,
    seed: int = 0,
    prompt_sets: Iterable[str] = CALIBRATION_MIX,
    data_dir_path: str | os.PathLike | None = None,
) -> list[Conversation]:
    """A seeded sample of `n` distinct conversations from the calibration mix (default: the
    clean-licence mix of the data README; pass ShareGPT file paths to follow the paper). `prompt_sets`
    is a list of prompt-set names and file paths, or one of them."""
    _check_count(n)
    _check_seed(seed)
    prompt_sets = _checked_prompt_sets(prompt_sets)
    pool, seen = [], set()
    for prompt_set in prompt_sets:
        for conversation in load_prompts(prompt_set, data_dir_path):
            text = normalized_text(conversation)
            if text and text not in seen:
                seen.add(text)
                pool.append(conversation)
    if n > len(pool):
        raise ValueError(
            f"cannot draw {n} calibration prompts: the prompt sets "
            f"{[str(s) for s in prompt_sets]} hold only {len(pool)} distinct conversations"
        )
    return sample(pool, n, seed)


def training_prompts(
    n: int,
    seed: int = 0,
    prompt_sets: Iterable[str] = TRAINING_MIX,
    *,
    exclude: Iterable[list[Conversation]] = (),
    max_chars: int = 2000,
    data_dir_path: str | os.PathLike | None = None,
) -> list[Conversation]:
    """`n` distinct single-turn prompts for distilling drafts: each prompt set shuffled (seeded), then
    taken in turn (round robin), so that no prompt set dominates (gsm8k-train alone holds 7473).
    Prompts whose whitespace-collapsed text (`normalized_text`) is longer than `max_chars` are
    dropped (truncating them would cut off the generation prompt), and so is every prompt whose user text appears in a conversation list of `exclude`
    (calibration prompts, SpecBench); `check_disjoint` then confirms it."""
    return [
        conversation
        for conversation, _ in training_prompts_with_sets(
            n, seed, prompt_sets, exclude=exclude, max_chars=max_chars, data_dir_path=data_dir_path
        )
    ]


def training_prompts_with_sets(
    n: int,
    seed: int = 0,
    prompt_sets: Iterable[str] = TRAINING_MIX,
    *,
    exclude: Iterable[list[Conversation]] = (),
    max_chars: int = 2000,
    data_dir_path: str | os.PathLike | None = None,
) -> list[tuple[Conversation, str]]:
    """`training_prompts`, each with the name of the prompt set it came from."""
    _check_count(n)
    _check_seed(seed)
    prompt_sets = _checked_prompt_sets(prompt_sets)
    excluded = [c for group in exclude for c in _checked_conversations(group, "exclude")]
    banned = {normalized_text([m]) for c in excluded for m in c if m["role"] == "user"}
    queues, seen = [], set()
    for index, prompt_set in enumerate(prompt_sets):
        queue = []
        for conversation in load_prompts(prompt_set, data_dir_path):
            text = normalized_text(conversation)
            if text and text not in seen and text not in banned and len(text) <= max_chars:
                seen.add(text)
                queue.append((conversation, str(prompt_set)))
        queues.append(random.Random(int(seed) * 1000 + index).sample(queue, len(queue)))
    pool = [q[i] for i in range(max(map(len, queues), default=0)) for q in queues if i < len(q)]
    if n > len(pool):
        raise ValueError(f"cannot draw {n} training prompts: {len(pool)} remain in {[str(s) for s in prompt_sets]}")
    chosen = pool[:n]
    check_disjoint([conversation for conversation, _ in chosen], excluded)
    return chosen


def load_specbench(path: str | os.PathLike | None = None, data_dir_path: str | os.PathLike | None = None):
    """SpecBench questions as a DataFrame with columns question_id, category, turns. Each
    question_id must be a JSON integer (not true, 1.5 or "7") and appear once: the tables count
    questions by id, so a repeated or ill-typed id would count a question twice."""

    path = Path(path) if path else verify_pinned(data_dir(data_dir_path), "spec_bench/question.jsonl")
    rows: list[dict] = []
    first_line: dict[int, int] = {}  # question_id -> the line it is first on
    for lineno, record in read_jsonl(path):
        turns = record_field(record, "turns", path, lineno, list)
        if not turns or not all(isinstance(t, str) for t in turns):
            raise DataFormatError(f"{path}:{lineno}: field 'turns' should be a non-empty list of strings")
        qid = record_field(record, "question_id", path, lineno, object)
        if isinstance(qid, bool) or not isinstance(qid, int):
            raise DataFormatError(
                f"{path}:{lineno}: question_id {qid!r} should be a JSON integer, got {type(qid).__name__}"
            )
        if qid in first_line:
            raise DataFormatError(
                f"{path}:{lineno}: question_id {qid} is repeated (first on line "
                f"{first_line[qid]}): each question must appear once"
            )
        first_line[qid] = lineno
        rows.append({"question_id": qid, "category": record_field(record, "category", path, lineno), "turns": turns})
    return pd.DataFrame(rows, columns=["question_id", "category", "turns"])


def specbench_conversations(frame) -> list[Conversation]:
    """Each SpecBench question's turns as user messages (for overlap checks)."""
    return [[{"role": "user", "content": t} for t in turns] for turns in frame["turns"]]


def _checked_conversations(conversations, argument: str) -> list[Conversation]:
    """`conversations` as a list, each a list of {role, content} messages with string values;
    a ValueError naming `argument` and the conversation when one is not."""
    hint = (
        "a conversation is a list of {'role': ..., 'content': str} messages; "
        "for a SpecBench frame pass specbench_conversations(frame)"
    )
    if isinstance(conversations, (str, bytes, dict)) or not hasattr(conversations, "__iter__"):
        raise ValueError(f"{argument} should be a list of conversations, got {type(conversations).__name__} ({hint})")
    conversations = list(conversations)
    for i, conversation in enumerate(conversations):
        if not isinstance(conversation, (list, tuple)):
            raise ValueError(f"{argument}[{i}] is a {type(conversation).__name__}, not a conversation ({hint})")
        for j, message in enumerate(conversation):
            if not (
                isinstance(message, dict)
                and isinstance(message.get("role"), str)
                and isinstance(message.get("content"), str)
            ):
                raise ValueError(
                    f"{argument}[{i}][{j}] is not a message with string 'role' and 'content': "
                    f"{str(message)[:80]!r} ({hint})"
                )
    return conversations


def check_disjoint(calibration: list[Conversation], evaluation: list[Conversation]) -> None:
    """Raise OverlapError when any user turn of `calibration` equals one of `evaluation`
    (after collapsing whitespace and case); ValueError when either is not a list of conversations."""
    calibration = _checked_conversations(calibration, "calibration")
    evaluation = _checked_conversations(evaluation, "evaluation")

    def turns(conversations):
        return {
            re.sub(r"\s+", " ", m["content"]).strip().lower() for c in conversations for m in c if m["role"] == "user"
        }

    shared = turns(calibration) & turns(evaluation)
    if shared:
        examples = "; ".join(sorted(s[:60] for s in shared)[:3])
        raise OverlapError(f"{len(shared)} prompt(s) appear in both sets, e.g. {examples}")
