"""The draft experiments' text: SpecBench's paper columns and the evaluation questions
(elsi_lib.draft.corpus) on the real SpecBench of the data folder, and the training prompts
(elsi_lib.inputs.prompts.training_prompts: round robin over sources, length bound, exclusions, disjointness)
on the real training mix and on small hand-written ShareGPT files."""

import json

import pytest

from elsi_lib.inputs.prompts import (
    TRAINING_MIX,
    OverlapError,
    check_disjoint,
    load_prompts,
    load_specbench,
    normalized_text,
    specbench_conversations,
    training_prompts,
)
from elsi_lib.draft.corpus import COLUMNS, column_of, eval_questions

MT_CATEGORIES = {"writing", "roleplay", "coding", "extraction", "stem", "humanities"}
MR_CATEGORIES = {"math", "reasoning", "math_reasoning"}


@pytest.fixture(scope="module")
def specbench():
    return load_specbench()


@pytest.fixture(scope="module")
def source_texts():
    """{source: set of normalized prompt texts} of the training mix."""
    return {source: {normalized_text(c) for c in load_prompts(source)} for source in TRAINING_MIX}


def texts(conversations):
    return [normalized_text(c) for c in conversations]


def sharegpt_file(path, prompts):
    """A ShareGPT JSON list with one human turn per prompt."""
    path.write_text(json.dumps([{"conversations": [{"from": "human", "value": p}]} for p in prompts]))
    return path


# ---------------------------------------------------------------- column_of


def test_every_specbench_category_has_a_column(specbench):
    categories = set(specbench["category"])
    assert categories == {c for cats in COLUMNS.values() for c in cats}  # none missing, none invented
    for category in categories:
        assert column_of(category) in COLUMNS
        assert category in COLUMNS[column_of(category)]


def test_column_of_hand_values():
    assert list(COLUMNS) == ["MT", "Trans", "Sum", "QA", "M/R", "RAG"]
    assert [
        column_of(c)
        for c in (
            "writing",
            "humanities",
            "math",
            "reasoning",
            "math_reasoning",
            "translation",
            "summarization",
            "qa",
            "rag",
        )
    ] == ["MT", "MT", "M/R", "M/R", "M/R", "Trans", "Sum", "QA", "RAG"]


@pytest.mark.parametrize("category", ["poetry", "", "MT", "Math", "math reasoning"])
def test_column_of_unknown_category_raises(category):
    with pytest.raises(ValueError, match="unknown SpecBench category"):
        column_of(category)


# ---------------------------------------------------------------- eval_questions


def test_eval_questions_per_column(specbench):
    picked = eval_questions(5, seed=0)
    assert list(picked.columns) == ["question_id", "category", "column", "conversation"]
    assert picked["column"].value_counts().to_dict() == {c: 5 for c in COLUMNS}  # every column holds >= 60
    assert (picked["column"] == picked["category"].map(column_of)).all()
    assert set(picked.loc[picked.column == "MT", "category"]) <= MT_CATEGORIES
    assert set(picked.loc[picked.column == "M/R", "category"]) <= MR_CATEGORIES
    assert picked["question_id"].is_monotonic_increasing and picked["question_id"].is_unique
    assert list(picked.index) == list(range(len(picked)))
    first_turns = dict(zip(specbench.question_id, specbench.turns.str[0]))
    categories = dict(zip(specbench.question_id, specbench.category))
    for row in picked.itertuples():
        assert row.conversation == [{"role": "user", "content": first_turns[row.question_id]}]  # first turn only
        assert row.category == categories[row.question_id]


def test_eval_questions_caps_at_the_column_size(specbench):
    picked = eval_questions(70, seed=0)  # MT holds 60 questions (6 categories x 10), the others more
    counts = picked["column"].value_counts().to_dict()
    assert counts == {"MT": 60, "Trans": 70, "Sum": 70, "QA": 70, "M/R": 70, "RAG": 70}
    assert set(picked.loc[picked.column == "MT", "category"]) == MT_CATEGORIES
    everything = eval_questions(10_000, seed=3)
    assert everything["question_id"].tolist() == sorted(specbench["question_id"])  # each question once
    assert everything["column"].value_counts().to_dict() == {
        "MT": 60,
        "Trans": 80,
        "Sum": 80,
        "QA": 80,
        "M/R": 100,
        "RAG": 80,
    }


def test_eval_questions_are_seeded():
    a, b = eval_questions(4, seed=0), eval_questions(4, seed=0)
    assert a.equals(b)
    other = eval_questions(4, seed=1)
    assert set(a["question_id"]) != set(other["question_id"])
    assert other["column"].value_counts().to_dict() == {c: 4 for c in COLUMNS}


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "3", None])
def test_eval_questions_bad_per_column_raises(bad):
    with pytest.raises(ValueError, match="per_column"):
        eval_questions(bad)


# ---------------------------------------------------------------- training_prompts on the training mix


def test_training_prompts_round_robin_over_sources(source_texts):
    chosen = texts(training_prompts(12, 0))
    assert len(chosen) == len(set(chosen)) == 12
    for i, text in enumerate(chosen):  # source i % 6 at position i: one from each, in order, twice
        assert text in source_texts[TRAINING_MIX[i % len(TRAINING_MIX)]], (i, text[:60])


def test_training_prompts_are_seeded():
    first = training_prompts(12, 0)
    assert training_prompts(12, 0) == first
    other = training_prompts(12, 1)
    assert not set(texts(first)) & set(texts(other))  # reshuffled: 12 of thousands, no overlap expected


def test_training_prompts_max_chars():
    default = training_prompts(12, 0)
    assert max(map(len, texts(default))) > 150  # so the bound below has something to remove
    short = training_prompts(12, 0, max_chars=150)
    assert len(short) == 12
    assert all(len(t) <= 150 for t in texts(short))


def test_training_prompts_exclude(source_texts):
    base = training_prompts(12, 0)
    seed_tasks = load_prompts("self-instruct-seed")
    chosen_seed_tasks = [c for c in base if normalized_text(c) in source_texts["self-instruct-seed"]]
    assert len(chosen_seed_tasks) == 2  # positions 1 and 7
    excluded = seed_tasks[:5] + chosen_seed_tasks
    out = training_prompts(12, 0, exclude=[excluded])
    banned = set(texts(excluded))
    assert not banned & set(texts(out))
    assert len(out) == 12
    assert texts(out)[1] in source_texts["self-instruct-seed"]  # still one from that source per round
    check_disjoint(out, excluded)


def test_training_prompts_disjoint_from_specbench(specbench):
    spec = specbench_conversations(specbench)
    check_disjoint(training_prompts(12, 0), spec)
    check_disjoint(training_prompts(12, 0, exclude=[spec]), spec)


def test_training_prompts_too_many_raises():
    distinct = {normalized_text(c) for c in load_prompts("self-instruct-seed")}
    everything = training_prompts(len(distinct), 0, ["self-instruct-seed"], max_chars=10**6)
    assert set(texts(everything)) == distinct
    with pytest.raises(ValueError, match="cannot draw"):
        training_prompts(len(distinct) + 1, 0, ["self-instruct-seed"], max_chars=10**6)
    with pytest.raises(ValueError, match="cannot draw"):
        training_prompts(12, 0, ["self-instruct-seed"], max_chars=20)  # almost nothing is this short


# ---------------------------------------------------------------- training_prompts on hand-written files


def test_training_prompts_round_robin_exact_with_uneven_sources(tmp_path):
    a = sharegpt_file(tmp_path / "a.json", ["alpha one", "alpha two"])
    b = sharegpt_file(tmp_path / "b.json", ["beta one", "beta two", "ALPHA   one", "beta three", "beta four"])
    out = texts(training_prompts(6, 0, [a, b]))
    # A B A B, then B alone; B's copy of "alpha one" (case, whitespace) is a duplicate and dropped
    assert [t.split()[0] for t in out] == ["alpha", "beta", "alpha", "beta", "beta", "beta"]
    assert sorted(out) == sorted(["alpha one", "alpha two", "beta one", "beta two", "beta three", "beta four"])
    with pytest.raises(ValueError, match="6 remain"):
        training_prompts(7, 0, [a, b])


def test_training_prompts_drop_specbench_turns(tmp_path, specbench):
    spec = specbench_conversations(specbench)
    multi = specbench[specbench.turns.map(len) == 2].iloc[0]
    single = specbench[specbench.turns.map(len) == 1].iloc[0]
    clean = ["tell me a story about a lighthouse", "list three prime numbers", "what is a draft model"]
    path = sharegpt_file(tmp_path / "mixed.json", clean + [multi.turns[1], single.turns[0]])
    unfiltered = training_prompts(5, 0, [path])
    with pytest.raises(OverlapError):
        check_disjoint(unfiltered, spec)  # the check can fail on this file
    out = training_prompts(3, 0, [path], exclude=[spec])  # a second turn is excluded too
    assert sorted(texts(out)) == sorted(clean)
    check_disjoint(out, spec)
    with pytest.raises(ValueError, match="3 remain"):
        training_prompts(4, 0, [path], exclude=[spec])


def test_training_prompts_max_chars_bounds_the_whitespace_collapsed_text(tmp_path):
    spaced = "word" + "          word" * 25  # 354 characters, 129 after collapsing whitespace
    assert len(spaced) == 354 and len(normalized_text([{"role": "user", "content": spaced}])) == 129
    path = sharegpt_file(tmp_path / "spaced.json", [spaced, "short prompt"])
    assert len(training_prompts(2, 0, [path], max_chars=200)) == 2  # 129 collapsed characters are within 200
    with pytest.raises(ValueError, match="1 remain"):  # 129 > 100: only "short prompt" is left
        training_prompts(2, 0, [path], max_chars=100)


def test_the_reply_engine_is_part_of_a_drafts_training_key(monkeypatch):
    from elsi_lib.draft import corpus

    assert corpus.reply_identity("hf") == {"batch": corpus.REPLY_BATCH}  # transformers' replies: no engine
    monkeypatch.setattr(corpus, "vllm_version", lambda: "9.9")
    assert corpus.reply_identity("vllm") == {"engine": "vllm", "version": "9.9"}
    with pytest.raises(ValueError, match="engine"):
        corpus.training_conversations(None, None, 1, engine="sglang")


def test_training_prompts_name_their_prompt_set_and_replies_count_by_set(tiny_tokenizer):
    from elsi_lib.draft import corpus

    sets = corpus.training_prompt_sets(12)
    assert sets[:6] == list(TRAINING_MIX) and sets[6:] == list(TRAINING_MIX)  # round robin, none exhausted yet
    prompts = corpus.training_prompt_list(12)
    replied = [p + [{"role": "assistant", "content": "one two three"}] for p in prompts]
    counts = corpus.reply_tokens_by_set(tiny_tokenizer, replied, sets)
    per_reply = len(tiny_tokenizer("one two three", add_special_tokens=False)["input_ids"])
    assert counts == {**{s: 2 * per_reply for s in TRAINING_MIX}, "total": 12 * per_reply}


def test_a_category_gives_every_specbench_question_of_it_in_order():
    from elsi_lib.draft.corpus import category_questions

    coding = category_questions("coding")
    assert len(coding) == 10 and set(coding.category) == {"coding"} and set(coding.column) == {"MT"}
    assert coding.question_id.is_monotonic_increasing
    assert [c[0]["role"] for c in coding.conversation] == ["user"] * 10
    assert list(coding.columns) == list(eval_questions(1).columns)
    assert len(category_questions(["coding", "math"])) == 20


@pytest.mark.parametrize(
    "categories, said",
    [("code", r"category \['code'\]"), (["coding", "poetry"], r"category \['poetry'\]"), ([], "no category")],
)
def test_an_unknown_category_is_refused_naming_the_known_ones(categories, said):
    from elsi_lib.draft.corpus import category_questions

    with pytest.raises(ValueError, match=said + "; the categories are writing, roleplay, coding"):
        category_questions(categories)
