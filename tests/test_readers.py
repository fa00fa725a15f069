"""Pinned data files are checked against their git blob ids (fetch_data.SOURCES) before they are
parsed, once per process per file; a user's own files are not pinned and not checked."""

import json
import os

import pytest

from elsi_lib import calibration_prompts, load_prompts, load_specbench
from elsi_lib.inputs import fetch_data, readers
from elsi_lib.inputs.readers import DataIntegrityError, data_dir

SPECBENCH = "spec_bench/question.jsonl"
ARENA = "arena-hard-auto/arena-hard-v0.1/question.jsonl"


@pytest.fixture
def hash_calls(monkeypatch):
    """A fresh verdict cache, and the files hashed for a blob id since the test began."""
    monkeypatch.setattr(readers, "_PINNED_VERDICTS", {})
    calls = []
    real = fetch_data.git_blob_sha1

    def counting(payload):
        calls.append(len(payload))
        return real(payload)

    monkeypatch.setattr(fetch_data, "git_blob_sha1", counting)
    return calls


@pytest.fixture
def copy_of_shared(tmp_path):
    """copy(relative, cut=None): a copy of a pinned file in a temporary data folder (its first
    `cut` bytes when given); the folder is returned."""
    shared = data_dir()
    folder = tmp_path / "data"

    def copy(relative, cut=None):
        target = folder / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        payload = (shared / relative).read_bytes()
        target.write_bytes(payload if cut is None else payload[:cut])
        return folder

    return copy


def _first_lines(payload: bytes, n: int) -> int:
    """The byte length of the first `n` lines: a truncation that still parses cleanly."""
    return len(b"".join(payload.splitlines(keepends=True)[:n]))


def test_truncated_specbench_is_refused(copy_of_shared, hash_calls, monkeypatch):
    whole = (data_dir() / SPECBENCH).read_bytes()
    folder = copy_of_shared(SPECBENCH, cut=_first_lines(whole, 100))  # 100 of 480 questions, valid JSONL
    with pytest.raises(DataIntegrityError, match=r"spec_bench/question\.jsonl.*altered or truncated") as err:
        load_specbench(data_dir_path=folder)
    assert "make data" in str(err.value)
    monkeypatch.setenv("ELSI_DATA_DIR", str(folder))  # the default folder, resolved from the environment
    with pytest.raises(DataIntegrityError, match="make data"):
        load_specbench()


def test_truncated_prompt_set_is_refused_by_every_loader(copy_of_shared, hash_calls):
    whole = (data_dir() / ARENA).read_bytes()
    folder = copy_of_shared(ARENA, cut=_first_lines(whole, 50))
    with pytest.raises(DataIntegrityError, match=r"arena-hard-v0\.1/question\.jsonl.*make data"):
        load_prompts("arena-hard-v0.1", folder)
    with pytest.raises(DataIntegrityError, match=r"arena-hard-v0\.1/question\.jsonl.*make data"):
        calibration_prompts(10, prompt_sets=["arena-hard-v0.1"], data_dir_path=folder)


def test_a_same_size_change_is_refused(copy_of_shared, hash_calls):
    folder = copy_of_shared(ARENA)
    path = folder / ARENA
    payload = bytearray(path.read_bytes())
    position = payload.index(b'"prompt":"') + len(b'"prompt":"')
    payload[position] = ord("X") if payload[position] != ord("X") else ord("Y")
    path.write_bytes(bytes(payload))
    with pytest.raises(DataIntegrityError, match="arena-hard-v0.1"):
        load_prompts("arena-hard-v0.1", folder)


def test_intact_copies_load_and_are_hashed_once_per_file(copy_of_shared, hash_calls):
    copy_of_shared(SPECBENCH)
    folder = copy_of_shared(ARENA)
    assert len(load_specbench(data_dir_path=folder)) == 480
    assert len(load_prompts("arena-hard-v0.1", folder)) == 500
    assert len(hash_calls) == 2
    for _ in range(3):
        load_specbench(data_dir_path=folder)
        load_prompts("arena-hard-v0.1", folder)
        calibration_prompts(5, prompt_sets=["arena-hard-v0.1"], data_dir_path=folder)
    assert len(hash_calls) == 2  # the verdict is cached per process, keyed by path, size and mtime
    path = folder / ARENA
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))  # touched: checked again
    load_prompts("arena-hard-v0.1", folder)
    assert len(hash_calls) == 3


def test_a_file_changed_after_its_check_is_refused(copy_of_shared, hash_calls):
    folder = copy_of_shared(ARENA)
    load_prompts("arena-hard-v0.1", folder)
    path = folder / ARENA
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:-1]))
    with pytest.raises(DataIntegrityError, match="altered or truncated"):
        load_prompts("arena-hard-v0.1", folder)


def test_users_own_files_are_not_checked(tmp_path, hash_calls):
    sharegpt = tmp_path / "mine.json"
    sharegpt.write_text(json.dumps([{"conversations": [{"from": "human", "value": "hi"}]}]))
    assert len(load_prompts(sharegpt)) == 1
    assert len(calibration_prompts(1, prompt_sets=[sharegpt])) == 1
    # a file at a pinned relative path, passed by path, is the user's own (not a data-folder file)
    own = tmp_path / "mine" / SPECBENCH
    own.parent.mkdir(parents=True)
    own.write_text('{"question_id": 1, "category": "qa", "turns": ["hello?"]}\n')
    assert len(load_specbench(own)) == 1
    assert hash_calls == []


def test_every_pinned_file_of_the_packaged_folder_verifies(hash_calls):
    """The copies inside the package (data/prompts in a checkout) are the pinned files, each folder with
    its source's licence: nothing outside the repository is read by default."""
    folder = data_dir()
    assert folder == fetch_data.PACKAGED and (folder / "README.md").is_file()
    for source in fetch_data.SOURCES:
        readers.verify_pinned(folder, source.local)
    assert len(hash_calls) == len(fetch_data.SOURCES)


def test_missing_pinned_file_says_make_data(tmp_path, hash_calls):
    with pytest.raises(FileNotFoundError, match="make data"):
        load_specbench(data_dir_path=tmp_path)


def test_make_data_restores_the_folder_the_loaders_read(copy_of_shared, hash_calls, monkeypatch, capsys):
    shared = data_dir()
    folder = copy_of_shared(ARENA, cut=1000)
    monkeypatch.setenv("ELSI_DATA_DIR", str(folder))
    with pytest.raises(DataIntegrityError, match="make data"):
        load_prompts("arena-hard-v0.1")
    served = {fetch_data.raw_url(s): (shared / s.local).read_bytes() for s in fetch_data.SOURCES}
    real_fetch = fetch_data.fetch
    monkeypatch.setattr(fetch_data, "fetch", lambda dest: real_fetch(dest, download=served.__getitem__))
    assert fetch_data.main([]) == 0  # `make data` with $ELSI_DATA_DIR set fetches into that folder
    assert str(folder) in capsys.readouterr().out
    assert len(load_prompts("arena-hard-v0.1")) == 500


# ---------------------------------------------------------------- the shapes a user's file may take

RECORD = {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]}


def test_a_pretty_printed_json_object_is_read_as_one_record(tmp_path):
    """A .json file holding one record over several lines (json.dump(..., indent=2)) is read, not
    called malformed; so is a UTF-8 BOM before a JSON array or JSON Lines."""
    pretty = tmp_path / "one.json"
    pretty.write_text(json.dumps(RECORD, indent=2))
    assert load_prompts(pretty) == [[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]]
    bom_array = tmp_path / "bom.json"
    bom_array.write_bytes(b"\xef\xbb\xbf" + json.dumps([RECORD, RECORD], indent=2).encode())
    assert len(load_prompts(bom_array)) == 2
    bom_lines = tmp_path / "bom.jsonl"
    bom_lines.write_bytes(b"\xef\xbb\xbf" + (json.dumps(RECORD) + "\n").encode() * 3)
    assert len(load_prompts(bom_lines)) == 3


def test_a_file_of_another_shape_says_which_shapes_are_expected(tmp_path):
    """Records pretty-printed one after another (neither JSON Lines nor a JSON array): the message
    names the file and the two shapes it may take."""
    concatenated = tmp_path / "many.json"
    concatenated.write_text(json.dumps(RECORD, indent=2) + "\n" + json.dumps(RECORD, indent=2))
    with pytest.raises(
        readers.DataFormatError, match=r"many\.json:1: .*JSON Lines .*one JSON record per line.*JSON array"
    ):
        load_prompts(concatenated)
    n_lines = len(json.dumps(RECORD, indent=2).splitlines())  # the second document starts on the line after
    with pytest.raises(
        readers.DataFormatError, match=rf"one JSON document instead, it fails at .*many\.json:{n_lines + 1} "
    ):
        load_prompts(concatenated)
    later = tmp_path / "later.jsonl"  # a record pretty-printed after valid lines: malformed, with the shape
    later.write_text(json.dumps(RECORD) + "\n" + json.dumps(RECORD, indent=2))
    with pytest.raises(readers.DataFormatError, match=r"later\.jsonl:2: malformed JSON .*one JSON record per line"):
        load_prompts(later)


def test_a_sharegpt_record_without_a_user_turn_is_left_out_with_a_warning(tmp_path):
    """A record with no user turn has nothing for a model to answer: it is left out, and the warning names
    the file and how many, so that a count that shrank is explained."""
    import json
    import warnings

    from elsi_lib.inputs.readers import parse_sharegpt

    path = tmp_path / "mixed.jsonl"
    records = [
        [{"from": "human", "value": "Hi"}],
        [{"from": "gpt", "value": "alone"}],
        [{"from": "system", "value": "s"}],
    ]
    path.write_text("\n".join(json.dumps({"conversations": r}) for r in records) + "\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert len(parse_sharegpt(path)) == 1
    assert any(
        "2 record(s) without a user turn left out" in str(w.message) and path.name in str(w.message) for w in caught
    )


def test_a_lone_surrogate_in_a_turn_is_refused_naming_the_line_and_field(tmp_path):
    """JSON's "\\ud800" reads as text no tokenizer can encode: refused when read, naming line and field,
    not later as a bare codec error naming nothing."""
    path = tmp_path / "broken.jsonl"
    good = {"conversations": [{"from": "human", "value": "hi"}]}
    path.write_text(json.dumps(good) + '\n{"conversations": [{"from": "human", "value": "smile \\ud800"}]}\n')
    with pytest.raises(readers.DataFormatError, match=r"broken\.jsonl:2: field 'value' holds '\\ud800' at character 6"):
        readers.parse_sharegpt(path)


def test_a_json_arrays_record_is_named_by_the_line_it_starts_on(tmp_path):
    """A pretty-printed JSON array whose third record lacks a field: the message names the line that record
    starts on (where an editor finds it), not its position in the array."""
    records = [RECORD, RECORD, {"conversations": [{"from": "human"}]}]
    path = tmp_path / "arr.json"
    path.write_text(json.dumps(records, indent=2))
    starts = [i for i, line in enumerate(path.read_text().splitlines(), 1) if line == "  {"]  # each record's
    start = starts[2]
    with pytest.raises(readers.DataFormatError, match=rf"arr\.json:{start}: missing field 'value'"):
        load_prompts(path)
    path.write_text("[" + ",".join(json.dumps(r) for r in records) + "]")  # one line: every record on line 1
    with pytest.raises(readers.DataFormatError, match=r"arr\.json:1: missing field 'value'"):
        load_prompts(path)


@pytest.mark.parametrize("shape", ["jsonl", "array", "object"])
def test_a_key_given_twice_in_a_record_is_refused(tmp_path, shape):
    """{"from": "human", "from": "gpt"}: json keeps the last, turning a user turn into a reply without a
    word; refused naming the file (and the line where one record a line)."""
    record = '{"conversations": [{"from": "human", "from": "gpt", "value": "hi"}]}'
    text = {"jsonl": record + "\n", "array": f"[{record}]", "object": record.replace(", ", ",\n")}[shape]
    path = tmp_path / f"dup.{'jsonl' if shape == 'jsonl' else 'json'}"
    path.write_text(text)
    with pytest.raises(readers.DataFormatError, match=r"dup\.jsonl?:(1: )?.*key 'from' appears twice"):
        load_prompts(path)


@pytest.mark.parametrize("shape", ["jsonl", "array", "object"])
def test_a_record_nested_past_what_json_reads_is_refused_naming_the_file(tmp_path, shape):
    """A value nested 100,000 deep raises Python's RecursionError in json: refused as a data error naming
    the file, never a crash without one."""
    deep = "[" * 100_000 + "]" * 100_000
    record = '{"conversations": [{"from": "human", "value": "hi", "x": ' + deep + "}]}"
    text = {"jsonl": record + "\n", "array": f"[{record}]", "object": record.replace(", ", ",\n")}[shape]
    path = tmp_path / f"deep.{'jsonl' if shape == 'jsonl' else 'json'}"
    path.write_text(text)
    with pytest.raises(readers.DataFormatError, match=r"deep\.jsonl?:(1: )?.*nested too deeply"):
        load_prompts(path)


def test_a_sharegpt_records_system_text_is_its_first_turn(tmp_path):
    """LLaMA-Factory's ShareGPT keeps the system prompt beside the turns: read as the first turn, not
    dropped; a system that is not text is refused naming the line."""
    import json

    from elsi_lib.inputs.readers import DataFormatError, parse_sharegpt

    path = tmp_path / "lf.jsonl"
    turns = [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello"}]
    path.write_text(json.dumps({"system": "Be brief.", "conversations": turns}) + "\n")
    assert parse_sharegpt(path)[0][0] == {"role": "system", "content": "Be brief."}
    path.write_text(json.dumps({"system": 3, "conversations": turns}) + "\n")
    with pytest.raises(DataFormatError, match=r"lf.jsonl:1: system is int, not text"):
        parse_sharegpt(path)
