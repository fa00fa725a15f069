import json
import subprocess

import pytest

from elsi_lib import (
    DataFormatError,
    OverlapError,
    PROMPT_SETS,
    calibration_prompts,
    check_disjoint,
    load_prompts,
    load_specbench,
    sample,
    specbench_conversations,
)
from elsi_lib.inputs.readers import data_dir, parse_ultrachat_eval
from elsi_lib.inputs import fetch_data


@pytest.fixture(scope="module")
def shared():
    """The data folder (`data_dir`): the pinned copies inside the package, present in every clone and wheel."""
    return data_dir()


EXPECTED_COUNTS = {
    "arena-hard-v0.1": 500,
    "arena-hard-v2.0": 750,
    "oasst-lottery": 250,
    "oasst-trees": 100,
    "self-instruct-user": 252,
    "self-instruct-seed": 175,
    "ultrachat-eval": 305,
    "ifeval": 541,
    "gpteacher-code": 4535,
    "gpteacher-roleplay": 1923,
    "gsm8k-train": 7473,
}


@pytest.mark.parametrize("name", sorted(PROMPT_SETS))
def test_named_prompt_sets(name, shared):
    conversations = load_prompts(name)
    assert len(conversations) == EXPECTED_COUNTS[name]
    for conversation in conversations:
        assert conversation[-1]["role"] == "user"
        assert all(m["role"] in ("user", "assistant", "system") and isinstance(m["content"], str) for m in conversation)


def test_oasst_trees_are_multi_turn(shared):
    trees = load_prompts("oasst-trees")
    assert max(len(c) for c in trees) >= 3
    assert all(c[0]["role"] == "user" for c in trees)


def test_specbench_frame(shared):
    frame = load_specbench()
    assert len(frame) == 480 and list(frame.columns) == ["question_id", "category", "turns"]
    assert frame["category"].nunique() == 13
    assert (frame.groupby("category").size() == 80).sum() == 5  # translation, summarization, qa, math, rag
    assert frame[frame["category"] == "writing"]["turns"].map(len).eq(2).all()


def test_calibration_sample_is_seeded_distinct_and_disjoint_from_specbench(shared):
    first = calibration_prompts(200, seed=0)
    assert first == calibration_prompts(200, seed=0)
    assert first != calibration_prompts(200, seed=1)
    assert len({json.dumps(c) for c in first}) == 200
    check_disjoint(first, specbench_conversations(load_specbench()))


def test_overlap_is_detected(shared):
    with_vicuna = parse_ultrachat_eval(shared / "ultrachat" / "ultra_eval.json", drop_classes=())
    assert len(with_vicuna) == 385
    with pytest.raises(OverlapError, match="2 prompt"):
        check_disjoint(with_vicuna, specbench_conversations(load_specbench()))


def test_sample():
    assert sample(list(range(10)), 3, seed=4) == sample(list(range(10)), 3, seed=4)
    with pytest.raises(ValueError, match="cannot sample"):
        sample([1, 2], 3)


def test_sharegpt_files(tmp_path):
    path = tmp_path / "chats.json"
    path.write_text(
        json.dumps(
            [
                {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]},
                {"conversations": [{"from": "system", "value": "be brief"}, {"from": "user", "value": "2+2?"}]},
            ]
        )
    )
    conversations = load_prompts(path)
    assert conversations[0] == [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    assert conversations[1][0]["role"] == "system"
    jsonl = tmp_path / "chats.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in json.loads(path.read_text())))
    assert load_prompts(jsonl) == conversations


def test_malformed_line_names_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"conversations": []}\n\n{"conversations": [\n')
    with pytest.raises(DataFormatError, match=r"bad.jsonl:3: malformed JSON"):
        load_prompts(path)


def test_missing_field_names_file_line_and_field(tmp_path):
    path = tmp_path / "chats.jsonl"
    path.write_text('{"conversations": [{"from": "human", "value": "a"}]}\n{"turns": []}\n')
    with pytest.raises(DataFormatError, match=r"chats.jsonl:2: missing field 'conversations'"):
        load_prompts(path)
    path.write_text('{"conversations": [{"from": "alien", "value": "a"}]}\n')
    with pytest.raises(DataFormatError, match="unknown speaker"):
        load_prompts(path)
    bench = tmp_path / "question.jsonl"
    bench.write_text('{"question_id": 1, "category": "qa", "turns": "not a list"}\n')
    with pytest.raises(DataFormatError, match=r"question.jsonl:1: field 'turns'"):
        load_specbench(bench)


def test_bad_sources(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="unknown prompt set"):
        load_prompts("sharegpt-please")
    monkeypatch.setenv("ELSI_DATA_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match="make data"):
        load_prompts("gsm8k-train")
    with pytest.raises(FileNotFoundError, match="is missing"):
        load_prompts("gsm8k-train", tmp_path)


def test_blob_ids_match_git(tmp_path):
    path = tmp_path / "file.txt"
    path.write_bytes(b"some bytes\n\x00\xff")
    expected = subprocess.run(["git", "hash-object", str(path)], capture_output=True, text=True).stdout.strip()
    assert fetch_data.git_blob_sha1(path.read_bytes()) == expected
    assert fetch_data.check_file(path, expected) is None
    assert "expected" in fetch_data.check_file(path, "0" * 40)
    assert "missing" in fetch_data.check_file(tmp_path / "absent", expected)


def test_shared_data_matches_pinned_blobs(shared):
    assert fetch_data.check_data_dir(shared) == []


def _serve_from(folder):
    by_url = {fetch_data.raw_url(s): (folder / s.local).read_bytes() for s in fetch_data.SOURCES}
    return lambda url: by_url[url]


def test_fetch_writes_verified_files(tmp_path, shared):
    written = fetch_data.fetch(tmp_path, download=_serve_from(shared))
    assert len(written) == len(fetch_data.SOURCES) + 1  # + ifeval/LICENSE, copied
    assert fetch_data.check_data_dir(tmp_path) == []
    assert (tmp_path / "ifeval" / "LICENSE").read_bytes() == (shared / "ifeval" / "LICENSE").read_bytes()
    assert fetch_data.fetch(tmp_path, download=lambda url: pytest.fail("refetched")) == []


def test_fetch_refuses_a_tampered_download(tmp_path, shared):
    good = _serve_from(shared)
    with pytest.raises(ValueError, match="does not match the pinned"):
        fetch_data.fetch(tmp_path, download=lambda url: good(url) + b" ")
    assert not any(p.is_file() for p in tmp_path.rglob("*"))


# ---------------------------------------------------------------- files and arguments that are wrong


def test_non_utf8_file_names_file_and_line(tmp_path):
    good = json.dumps({"conversations": [{"from": "human", "value": "hi"}]}).encode()
    latin1 = '{"conversations": [{"from": "human", "value": "caf\u00e9"}]}'.encode("latin-1")
    jsonl = tmp_path / "chats.jsonl"
    jsonl.write_bytes(good + b"\n" + latin1 + b"\n")
    with pytest.raises(DataFormatError, match=r"chats\.jsonl:2: not valid UTF-8"):
        load_prompts(jsonl)
    big = tmp_path / "big.jsonl"  # the bad byte past the first 4 KiB read to sniff the format
    big.write_bytes((good + b"\n") * 200 + latin1 + b"\n")
    with pytest.raises(DataFormatError, match=r"big\.jsonl:201: not valid UTF-8"):
        load_prompts(big)
    as_list = tmp_path / "chats.json"
    as_list.write_bytes(b"[\n" + good + b",\n" + latin1 + b"\n]\n")
    with pytest.raises(DataFormatError, match=r"chats\.json:3: not valid UTF-8"):
        load_prompts(as_list)
    bench = tmp_path / "question.jsonl"
    bench.write_bytes('{"question_id": 1, "category": "qa", "turns": ["\u00bfqu\u00e9?"]}\n'.encode("latin-1"))
    with pytest.raises(DataFormatError, match=r"question\.jsonl:1: not valid UTF-8"):
        load_specbench(bench)


def test_check_disjoint_names_the_malformed_argument_and_conversation():
    good = [[{"role": "user", "content": "hello"}]]
    cases = [
        ([{"role": "user", "content": "a"}], good, r"calibration\[0\]"),  # one conversation, not a list of them
        (good, ["what is 2+2?"], r"evaluation\[0\]"),  # bare strings
        (good, good + [[{"content": "no role"}]], r"evaluation\[1\]"),
        (good + good + [[{"role": "user", "content": 3}]], good, r"calibration\[2\]"),
        (good, [[{"role": "user", "content": "ok"}, "not a message"]], r"evaluation\[0\]"),
        (None, good, "calibration"),
        (good, "hello", "evaluation"),
    ]
    for calibration, evaluation, where in cases:
        with pytest.raises(ValueError, match=where) as err:
            check_disjoint(calibration, evaluation)
        assert not isinstance(err.value, OverlapError)
    check_disjoint(good, [[{"role": "user", "content": "other"}]])  # well-formed: no error


def test_calibration_sources_as_one_string(shared):
    arena = {json.dumps(c) for c in load_prompts("arena-hard-v0.1")}
    chosen = calibration_prompts(5, prompt_sets="arena-hard-v0.1")
    assert len(chosen) == 5 and all(json.dumps(c) in arena for c in chosen)
    assert chosen == calibration_prompts(5, prompt_sets=["arena-hard-v0.1"])


def test_bad_calibration_sources_are_refused_before_loading(shared, monkeypatch):
    loaded = []
    real = load_prompts

    def recording(source, data_dir_path=None):
        loaded.append(source)
        return real(source, data_dir_path)

    monkeypatch.setattr("elsi_lib.inputs.prompts.load_prompts", recording)
    with pytest.raises(ValueError, match=r"unknown prompt set 'nope'"):
        calibration_prompts(5, prompt_sets=["arena-hard-v0.1", "nope"])
    with pytest.raises(TypeError, match="prompt_sets"):
        calibration_prompts(5, prompt_sets=3)
    with pytest.raises(TypeError, match="prompt_sets"):
        calibration_prompts(5, prompt_sets=["arena-hard-v0.1", 3])
    with pytest.raises(ValueError, match="no prompt sets"):
        calibration_prompts(5, prompt_sets=[])
    assert loaded == []


def test_calibration_count_and_seed_are_checked(shared, monkeypatch):
    monkeypatch.setattr("elsi_lib.inputs.prompts.load_prompts", lambda *a, **k: pytest.fail("loaded before the check"))
    for bad in (0, -1):
        with pytest.raises(ValueError, match="positive"):
            calibration_prompts(bad)
    for bad in (True, 2.0, 2.5, "5", None):
        with pytest.raises(TypeError, match="n must be"):
            calibration_prompts(bad)
    for bad in (None, 1.5, True):
        with pytest.raises(TypeError, match="seed"):
            calibration_prompts(5, seed=bad)
    monkeypatch.undo()
    import numpy as np

    assert len(calibration_prompts(np.int64(3), seed=np.int64(0), prompt_sets="oasst-lottery")) == 3
    with pytest.raises(ValueError, match=r"oasst-lottery.*only \d+ distinct conversations"):
        calibration_prompts(10_000, prompt_sets="oasst-lottery")


def test_sample_checks_its_arguments():
    with pytest.raises(ValueError, match="seed must be 0 or more, got -7"):  # random would draw seed 7's sample
        sample([1, 2, 3], 2, seed=-7)
    with pytest.raises(TypeError, match="n must be"):
        sample([1, 2, 3], True)
    with pytest.raises(TypeError, match="n must be"):
        sample([1, 2, 3], 2.0)
    with pytest.raises(TypeError, match="seed"):
        sample([1, 2, 3], 2, seed=None)


def test_specbench_question_ids_are_distinct_integers(tmp_path):
    """A duplicated or non-integer question id would count a question twice (or as another one):
    a DataFormatError naming the file, the line and the id. Files passed by path are not pinned."""

    def bench(*ids):
        path = tmp_path / "question.jsonl"
        path.write_text(
            "".join(
                json.dumps({"question_id": i, "category": "qa", "turns": [f"q{n}?"]}) + "\n" for n, i in enumerate(ids)
            )
        )
        return path

    frame = load_specbench(bench(3, 1, 2))
    assert frame["question_id"].tolist() == [3, 1, 2]
    with pytest.raises(DataFormatError, match=r"question\.jsonl:3: .*question_id 1 .*line 2"):
        load_specbench(bench(0, 1, 1))
    for bad, shown in ((True, "True"), (1.5, "1.5"), ("7", "'7'"), (None, "None"), (2.0, "2.0")):
        with pytest.raises(DataFormatError, match=rf"question\.jsonl:2: .*question_id.*{shown}"):
            load_specbench(bench(0, bad))
