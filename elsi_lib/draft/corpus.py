"""The draft experiments' text: training conversations (prompts + the target's own greedy replies)
and SpecBench evaluation questions with the target's greedy continuations.

Both go through the notebooks' reply step (`replies.generate_responses`: batched, cached after
every batch, keyed by the model's weights and every setting), so they are generated once and shared
by every draft; training replies can instead be written by vLLM (`engine_replies`, the same greedy
replies about twice as fast here, `bench/bench_replies.py`). Training prompts are disjoint from every calibration prompt and
from SpecBench.
"""

from __future__ import annotations

from ..inputs.prompts import (
    CALIBRATION_MIX,
    load_prompts,
    load_specbench,
    specbench_conversations,
    training_prompts,
    training_prompts_with_sets,
)
from ..hidden.engine_replies import archived_vllm_version, engine_replies, replies_written
from ..hidden.engine_env import vllm_version
from ..hidden.replies import generate_responses, with_replies

# The paper's SpecBench columns; M/R merges MT-bench math and reasoning with GSM8K math_reasoning,
# MT is the rest of MT-bench (writing, roleplay, coding, extraction, stem, humanities).
COLUMNS = {
    "MT": ("writing", "roleplay", "coding", "extraction", "stem", "humanities"),
    "Trans": ("translation",),
    "Sum": ("summarization",),
    "QA": ("qa",),
    "M/R": ("math", "reasoning", "math_reasoning"),
    "RAG": ("rag",),
}
CATEGORIES = tuple(c for categories in COLUMNS.values() for c in categories)
ONE_PER_COLUMN = "SpecBench, one per column"  # the cost benchmarks' question set unless a category is named
REPLY_BATCH = 16


def column_of(category: str) -> str:
    """The paper's column of a SpecBench category."""
    for column, categories in COLUMNS.items():
        if category in categories:
            return column
    raise ValueError(f"unknown SpecBench category {category!r}")


def training_prompt_list(n_prompts: int, *, seed: int = 0) -> list[list[dict]]:
    """`n_prompts` training prompts (`prompts.training_prompts`), disjoint from the whole calibration
    mix and from SpecBench."""
    calibration = [c for prompt_set in CALIBRATION_MIX for c in load_prompts(prompt_set)]
    return training_prompts(n_prompts, seed, exclude=[calibration, specbench_conversations(load_specbench())])


def training_prompt_sets(n_prompts: int, *, seed: int = 0) -> list[str]:
    """The prompt set each of `training_prompt_list(n_prompts)` comes from, in the same order."""
    calibration = [c for prompt_set in CALIBRATION_MIX for c in load_prompts(prompt_set)]
    chosen = training_prompts_with_sets(
        n_prompts, seed, exclude=[calibration, specbench_conversations(load_specbench())]
    )
    return [prompt_set for _, prompt_set in chosen]


def reply_tokens_by_set(tokenizer, conversations: list[list[dict]], prompt_sets: list[str]) -> dict[str, int]:
    """Tokens of the replies (each conversation's last turn) per prompt set, and their total."""
    counts: dict[str, int] = {}
    for conversation, prompt_set in zip(conversations, prompt_sets, strict=True):
        n = len(tokenizer(conversation[-1]["content"], add_special_tokens=False)["input_ids"])
        counts[prompt_set] = counts.get(prompt_set, 0) + n
    return {**counts, "total": sum(counts.values())}


def training_conversations(
    model,
    tokenizer,
    n_prompts: int,
    *,
    seed: int = 0,
    max_new_tokens: int = 256,
    max_length: int = 1024,
    progress: bool = True,
    engine: str = "hf",
    chunk: int = 512,
) -> list[list[dict]]:
    """`training_prompt_list(n_prompts)`, each followed by the target's greedy reply of up to
    `max_new_tokens`, written by `engine`: "hf" (the reply step, transformers `generate` in batches of
    REPLY_BATCH) or "vllm" (`engine_replies`, in the engines' environment, `chunk` prompts per generate
    call, each chunk kept as it finishes; not part of the key)."""
    if engine not in ("hf", "vllm"):
        raise ValueError(f"engine must be 'hf' or 'vllm', got {engine!r}")
    prompts = training_prompt_list(n_prompts, seed=seed)
    if engine == "vllm":
        replies = engine_replies(
            model, tokenizer, prompts, max_new_tokens=max_new_tokens, max_length=max_length, chunk=chunk
        )[0]
    else:
        replies = generate_responses(
            model,
            tokenizer,
            prompts,
            max_new_tokens=max_new_tokens,
            max_length=max_length,
            batch_size=REPLY_BATCH,
            progress=progress,
        )
    return with_replies(prompts, replies)


def training_conversations_written(
    model, tokenizer, n_prompts: int, first: int, *, seed: int = 0, max_new_tokens: int = 256, max_length: int = 1024
) -> list[list[dict]]:
    """The first `first` of `training_conversations(..., n_prompts, engine="vllm")` from the replies
    vLLM has written so far (finished or still running; `engine_replies.replies_written`): probes on
    a prefix of the data while the rest is written. Runs no engine."""
    prompts = training_prompt_list(n_prompts, seed=seed)
    replies = replies_written(model, tokenizer, prompts, first, max_new_tokens=max_new_tokens, max_length=max_length)
    return with_replies(prompts[:first], replies)


def reply_identity(engine: str) -> dict:
    """What a draft's training key records about who wrote its training replies."""
    if engine == "vllm":
        try:
            version = vllm_version()
        except FileNotFoundError:  # a new machine without the engines: the archives' version
            version = archived_vllm_version()
        return {"engine": "vllm", "version": version}
    return {"batch": REPLY_BATCH}


def eval_questions(per_column: int, *, seed: int = 0):
    """SpecBench questions for replay: up to `per_column` of each paper column (seeded sample from the
    column's categories; MT-bench's categories hold 10 questions each), first turn only. A DataFrame
    with question_id, category, column and the one-turn `conversation`, ordered by question_id."""
    if isinstance(per_column, bool) or not isinstance(per_column, int) or per_column < 1:
        raise ValueError(f"per_column must be a positive integer, got {per_column!r}")
    frame = load_specbench()
    frame["column"] = frame["category"].map(column_of)
    rows = [
        i
        for _, group in frame.groupby("column", sort=False)
        for i in group.sample(min(per_column, len(group)), random_state=seed).index
    ]
    chosen = frame.loc[rows].sort_values("question_id").reset_index(drop=True)
    chosen["conversation"] = [[{"role": "user", "content": turns[0]}] for turns in chosen["turns"]]
    return chosen.drop(columns="turns")


def category_questions(categories):
    """Every SpecBench question of `categories` (a name or several; ("coding",): MT-bench's ten coding
    questions, a coding set disjoint from every training prompt), first turn only, ordered by
    question_id: the frame `eval_questions` returns. ValueError naming the known categories."""
    wanted = [categories] if isinstance(categories, str) else list(categories)
    unknown = [c for c in wanted if c not in CATEGORIES]
    if not wanted or unknown:
        said = f"unknown SpecBench categor{'ies' if len(unknown) > 1 else 'y'} {unknown}" if unknown else "no category"
        raise ValueError(f"{said}; the categories are {', '.join(CATEGORIES)}")
    frame = load_specbench()
    chosen = frame[frame.category.isin(wanted)].sort_values("question_id").reset_index(drop=True)
    chosen["column"] = chosen["category"].map(column_of)
    chosen["conversation"] = [[{"role": "user", "content": turns[0]}] for turns in chosen["turns"]]
    return chosen.drop(columns="turns")


def eval_conversations(
    model,
    tokenizer,
    questions,
    *,
    max_new_tokens: int = 256,
    max_length: int = 1024,
    progress: bool = True,
    temperature: float = 0.0,
    seed: int = 0,
    archive=None,
):
    """Each question followed by the target's continuation (the tokens replay must match): greedy at
    `temperature` 0; otherwise a seeded sample at that temperature, returned with the sampled token
    ids as (conversations, ids) (the rendered reply is re-tokenised; replay stops where the two
    part). `archive`: the folder the continuations are archived in (`replies.generate_responses`)."""
    conversations = list(questions["conversation"])
    out = generate_responses(
        model,
        tokenizer,
        conversations,
        max_new_tokens=max_new_tokens,
        max_length=max_length,
        batch_size=REPLY_BATCH,
        progress=progress,
        temperature=temperature,
        seed=seed,
        with_ids=temperature > 0,
        archive=archive,
    )
    if temperature == 0:
        return with_replies(conversations, out)
    replies, ids = out
    return with_replies(conversations, replies), ids
