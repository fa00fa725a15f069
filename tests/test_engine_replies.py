"""Replies through the engine (elsi_lib.hidden.engine_replies and hidden/engine_reply_script.py) without vLLM: the
real engine script runs in a subprocess against a stand-in `vllm` package that writes known ids, so
the protocol, the cache key, resumption after an interruption and the decoding are tested here; the
engine's own greedy tokens against Hugging Face's are checked by `make test-engines`."""

from __future__ import annotations

import fcntl
import gzip
import json
import subprocess
import sys
import textwrap

import pytest

from conftest import make_conversations
from elsi_lib.hidden import engine_env
from elsi_lib.hidden import engine_replies as E
from elsi_lib.hidden import reply_reuse
from elsi_lib.hidden.replies import eos_ids
from elsi_lib.inputs.chat import tokenize_conversation, truncate

FAKE_VLLM = """
import json, os
__version__ = "0.0-test"

class SamplingParams:
    def __init__(self, temperature, max_tokens):
        assert temperature == 0.0
        self.max_tokens = max_tokens

class _Out:
    def __init__(self, ids):
        self.outputs = [type("C", (), {"token_ids": ids})()]

class LLM:
    def __init__(self, model, dtype, max_model_len, seed, enforce_eager):
        assert os.path.isfile(os.path.join(model, "config.json"))
        self.calls = 0

    def generate(self, prompts, params, use_tqdm=False):
        self.calls += 1
        with open(os.environ["FAKE_LOG"], "a") as log:
            log.write(json.dumps([len(p["prompt_token_ids"]) for p in prompts]) + "\\n")
        if self.calls > int(os.environ.get("FAKE_FAIL_AFTER", "1000000")):
            raise RuntimeError("interrupted")
        eos = int(os.environ["FAKE_EOS"])
        return [_Out([(p["prompt_token_ids"][-1] + k) % 50 + 10 for k in range(3)] + [eos, 7]) for p in prompts]
"""


@pytest.fixture
def engine(tmp_path, monkeypatch, tiny_model):
    package = tmp_path / "fake" / "vllm"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(textwrap.dedent(FAKE_VLLM))
    folder = tmp_path / "model"
    tiny_model.save_pretrained(folder)
    monkeypatch.setattr(tiny_model.config, "_name_or_path", str(folder))
    monkeypatch.setenv("ELSI_ENGINES_PYTHON", sys.executable)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "fake"))
    monkeypatch.setenv("FAKE_LOG", str(tmp_path / "calls.log"))
    monkeypatch.setenv("FAKE_EOS", str(eos_ids(tiny_model)[0]))
    monkeypatch.setattr(E, "vllm_version", lambda python=None: "0.0-test")
    monkeypatch.setattr(reply_reuse, "vllm_version", lambda python=None: "0.0-test")
    return tmp_path / "calls.log"


def expected(tokenizer, model, conversations, max_length=1024):
    out = []
    for c in conversations:
        prompt = truncate(tokenize_conversation(tokenizer, c, add_generation_prompt=True)[0], max_length)
        ids = [(prompt[-1] + k) % 50 + 10 for k in range(3)] + [eos_ids(model)[0]]  # cut after the eos
        out.append(tokenizer.decode(ids, skip_special_tokens=True).strip())
    return out


def test_engine_replies_decode_cache_and_key(engine, tiny_model, tiny_tokenizer, monkeypatch):
    conversations = make_conversations(5)
    texts, ids, key = E.engine_replies(tiny_model, tiny_tokenizer, conversations, max_new_tokens=8, chunk=2)
    assert texts == expected(tiny_tokenizer, tiny_model, conversations)
    assert all(len(i) == 4 and i[-1] == eos_ids(tiny_model)[0] for i in ids)  # cut after the eos
    assert key["engine"] == {"name": "vllm", "version": "0.0-test", "dtype": "float32"} and "batch_size" not in key
    assert [len(json.loads(line)) for line in engine.read_text().splitlines()] == [2, 2, 1]  # chunks of 2
    with monkeypatch.context() as patch:  # the second call reads the cache: no engine
        patch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("the engine ran again"))
        again, again_ids, _ = E.engine_replies(tiny_model, tiny_tokenizer, conversations, max_new_tokens=8, chunk=2)
    assert again == texts and again_ids == ids
    other, _, other_key = E.engine_replies(tiny_model, tiny_tokenizer, conversations, max_new_tokens=9, chunk=2)
    assert other_key != key and other == texts  # another setting, another entry (the stand-in ignores it)


def test_an_interrupted_engine_run_resumes(engine, tiny_model, tiny_tokenizer, monkeypatch):
    conversations = make_conversations(5)
    monkeypatch.setenv("FAKE_FAIL_AFTER", "1")
    with pytest.raises(subprocess.CalledProcessError):
        E.engine_replies(tiny_model, tiny_tokenizer, conversations, max_new_tokens=8, chunk=2)
    monkeypatch.delenv("FAKE_FAIL_AFTER")
    texts, _, _ = E.engine_replies(tiny_model, tiny_tokenizer, conversations, max_new_tokens=8, chunk=2)
    assert texts == expected(tiny_tokenizer, tiny_model, conversations)
    calls = [len(json.loads(line)) for line in engine.read_text().splitlines()]
    assert calls == [2, 2, 2, 1]  # the first run's finished chunk was kept: 2 + 3 prompts generated


def _script():
    sys.path.insert(0, str(E.SCRIPT.parent))
    try:
        import engine_reply_script as script
    finally:
        sys.path.pop(0)
    return script


def test_a_torn_last_line_is_dropped_and_regenerated(tmp_path, capsys):
    script = _script()
    header = {"engine": "vllm", "version": "x", "request": "r"}
    path = tmp_path / "out.jsonl"
    good = json.dumps(script.record("d", 0, [1]))
    path.write_bytes((json.dumps(header) + "\n" + good + "\n" + '{"i": 1, "id').encode())
    assert script.done_indices(path, header, "d", 3) == {0}
    assert path.read_text().endswith(good + "\n")  # the torn tail is cut, and the engine says so
    assert "cut a torn last line" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="another request"):
        script.done_indices(path, {**header, "request": "other"}, "d", 3)


def test_the_engine_refuses_records_it_cannot_trust_and_repairs_a_repeated_header(tmp_path, capsys):
    """hidden/engine_reply_script.py reads its own output before it resumes: a repeated header line (what an
    interrupted first chunk left before) is dropped, saying so; a duplicate, out-of-range, empty or
    altered record stops it naming the line (rather than the first bad line silently cutting everything
    after it)."""
    script = _script()
    header = {"engine": "vllm", "version": "x", "request": "r"}
    path = tmp_path / "out.jsonl"
    rows = [header, header, script.record("d", 0, [5, 6]), script.record("d", 1, [7])]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert script.done_indices(path, header, "d", 2) == {0, 1}
    assert "dropped a repeated header at line 2" in capsys.readouterr().err
    assert [json.loads(line) for line in path.read_text().splitlines()] == [header] + rows[2:]
    bad = {
        "a duplicate": script.record("d", 0, [5, 6]),
        "outside": script.record("d", 2, [1]),
        "empty": script.record("d", 1, []),
        "checksum": {**script.record("d", 1, [7]), "ids": [8]},
    }
    for problem, row in bad.items():
        path.write_text("".join(json.dumps(r) + "\n" for r in [header, script.record("d", 0, [5, 6]), row]))
        with pytest.raises(SystemExit, match="line 3") as err:
            script.done_indices(path, header, "d", 2)
        assert problem.split()[-1] in str(err.value) or problem == "a duplicate" and "second record" in str(err.value)


def test_an_interrupted_first_chunk_resumes(engine, tiny_model, tiny_tokenizer, monkeypatch):
    """An interrupt during the engine's first chunk leaves its output with a header and no reply; the
    next run resumes it (a second header would make every later call fail: KeyError 'ids')."""
    conversations = make_conversations(3)
    monkeypatch.setenv("FAKE_FAIL_AFTER", "0")
    with pytest.raises(subprocess.CalledProcessError):
        E.engine_replies(tiny_model, tiny_tokenizer, conversations, max_new_tokens=8, chunk=2)
    partial = next(engine.parent.rglob("*.partial.jsonl"))
    assert len(partial.read_text().splitlines()) == 1  # the header alone
    monkeypatch.delenv("FAKE_FAIL_AFTER")
    texts, _, _ = E.engine_replies(tiny_model, tiny_tokenizer, conversations, max_new_tokens=8, chunk=2)
    assert texts == expected(tiny_tokenizer, tiny_model, conversations)


def test_a_chunk_below_one_is_refused(engine, tiny_model, tiny_tokenizer, tmp_path):
    """The command line refuses `hidden/engine_reply_script.py --chunk -1`: it would exit 0 having written
    nothing."""
    request = tmp_path / "request.json"
    request.write_text(
        json.dumps({"model": "m", "dtype": "float32", "max_new_tokens": 4, "max_model_len": 64, "prompts": [[1, 2]]})
    )
    run = subprocess.run(
        [sys.executable, str(E.SCRIPT), str(request), str(tmp_path / "out.jsonl"), "--chunk", "-1"],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 2 and "--chunk" in run.stderr and "positive" in run.stderr
    assert not (tmp_path / "out.jsonl").exists()
    with pytest.raises(ValueError, match="chunk"):
        E.engine_replies(tiny_model, tiny_tokenizer, make_conversations(2), chunk=0)


def test_bad_arguments_are_refused_before_the_engine(engine, tiny_model, tiny_tokenizer, monkeypatch):
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("the engine ran"))
    conversations = make_conversations(2)
    with pytest.raises(ValueError, match="max_new_tokens"):
        E.engine_replies(tiny_model, tiny_tokenizer, conversations, max_new_tokens=0)
    with pytest.raises(ValueError, match="positions"):
        E.engine_replies(tiny_model, tiny_tokenizer, conversations, max_new_tokens=1500, max_length=1024)
    with pytest.raises(ValueError, match="user turn"):
        E.engine_replies(tiny_model, tiny_tokenizer, [conversations[0] + [{"role": "assistant", "content": "x"}]])
    monkeypatch.setattr(tiny_model.config, "_name_or_path", "not-a-folder")
    with pytest.raises(ValueError, match="model folder"):
        E.engine_replies(tiny_model, tiny_tokenizer, conversations)


def test_replies_written_so_far_are_read_without_an_engine(engine, tiny_model, tiny_tokenizer, monkeypatch):
    """`replies_written` reads the first replies of a request the engine has not finished (the
    partial file, a torn last line skipped), refuses more than are there, and reads the cache once
    the request is complete; it never starts the engine."""
    conversations = make_conversations(5)
    monkeypatch.setenv("FAKE_FAIL_AFTER", "1")
    with pytest.raises(subprocess.CalledProcessError):  # one chunk of 2 written, then interrupted
        E.engine_replies(tiny_model, tiny_tokenizer, conversations, max_new_tokens=8, chunk=2)
    monkeypatch.delenv("FAKE_FAIL_AFTER")
    want = expected(tiny_tokenizer, tiny_model, conversations)
    with monkeypatch.context() as patch:
        patch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("the engine ran"))
        assert E.replies_written(tiny_model, tiny_tokenizer, conversations, 2, max_new_tokens=8) == want[:2]
        partial = next(engine.parent.rglob("*.partial.jsonl"))  # under the test's own cache folder
        with open(partial, "a") as f:
            f.write('{"i": 2, "ids": [1')  # an engine in the middle of a line
        assert E.replies_written(tiny_model, tiny_tokenizer, conversations, 2, max_new_tokens=8) == want[:2]
        with pytest.raises(RuntimeError, match="2 of the first 3 replies are written"):
            E.replies_written(tiny_model, tiny_tokenizer, conversations, 3, max_new_tokens=8)
        with pytest.raises(RuntimeError, match="no replies of this request"):
            E.replies_written(tiny_model, tiny_tokenizer, conversations, 1, max_new_tokens=9)
    partial.write_text(partial.read_text()[: partial.read_text().rindex("\n") + 1])  # the engine cuts its torn tail too
    E.engine_replies(tiny_model, tiny_tokenizer, conversations, max_new_tokens=8, chunk=2)
    assert not partial.exists()
    assert E.replies_written(tiny_model, tiny_tokenizer, conversations, 4, max_new_tokens=8) == want[:4]


def test_archived_replies_resume_a_request_on_a_new_machine(engine, tiny_model, tiny_tokenizer, monkeypatch, tmp_path):
    """An interrupted request archived (`archive_replies`) and then its cache lost (a new machine):
    the rerun resumes from the archive and generates only what it lacks; once the archive is
    complete, the replies come from it without the engine. The archive is deterministic."""
    conversations = make_conversations(5)
    monkeypatch.setenv("FAKE_FAIL_AFTER", "1")
    with pytest.raises(subprocess.CalledProcessError):  # one chunk of 2 written, then interrupted
        E.engine_replies(tiny_model, tiny_tokenizer, conversations, max_new_tokens=8, chunk=2)
    monkeypatch.delenv("FAKE_FAIL_AFTER")
    archived, count = E.archive_replies(tiny_model, tiny_tokenizer, conversations, max_new_tokens=8)
    assert count == 2 and archived.parent == tmp_path / "replies" and archived.name.endswith(".partial.jsonl.gz")
    first_bytes = archived.read_bytes()
    partial_route = gzip.decompress(first_bytes).decode().splitlines()
    assert all(len(json.loads(line)["ids"]) == 4 for line in partial_route[1:])  # cut after the eos, as cached
    assert E.archive_replies(tiny_model, tiny_tokenizer, conversations, max_new_tokens=8)[0].read_bytes() == first_bytes
    monkeypatch.setenv("ELSI_CACHE_DIR", str(tmp_path / "new-machine"))
    moved = tmp_path / "new-machine-model"  # the model folder lives elsewhere on the new machine
    tiny_model.save_pretrained(moved)
    monkeypatch.setattr(tiny_model.config, "_name_or_path", str(moved))
    assert (
        E.replies_written(tiny_model, tiny_tokenizer, conversations, 2, max_new_tokens=8)
        == expected(tiny_tokenizer, tiny_model, conversations)[:2]
    )  # read from the archive alone
    engine.write_text("")
    texts, ids, _ = E.engine_replies(tiny_model, tiny_tokenizer, conversations, max_new_tokens=8, chunk=2)
    assert texts == expected(tiny_tokenizer, tiny_model, conversations)
    assert [len(json.loads(line)) for line in engine.read_text().splitlines()] == [2, 1]  # the 3 not archived
    archived, count = E.archive_replies(tiny_model, tiny_tokenizer, conversations, max_new_tokens=8)
    assert count == 5  # from the cache: the two replies archived before are the same bytes by either route
    assert gzip.decompress(archived.read_bytes()).decode().splitlines()[:3] == partial_route
    monkeypatch.setenv("ELSI_CACHE_DIR", str(tmp_path / "third-machine"))
    with monkeypatch.context() as patch:  # another patch release of the libraries: the archive is still found
        patch.setattr(
            E, "versions", lambda: {"elsi": "0.1.0", "torch": "2.13.1", "transformers": "x", "tokenizers": "y"}
        )
        patch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("the engine ran"))
        again, again_ids, _ = E.engine_replies(tiny_model, tiny_tokenizer, conversations, max_new_tokens=8, chunk=2)
    assert again == texts and again_ids == ids


def _archive(engine, model, tokenizer, conversations):
    E.engine_replies(model, tokenizer, conversations, max_new_tokens=8, chunk=2)
    archived, _ = E.archive_replies(model, tokenizer, conversations, max_new_tokens=8)
    lines = gzip.decompress(archived.read_bytes()).decode().splitlines()
    return archived, json.loads(lines[0]), [json.loads(line) for line in lines[1:]]


def _tampered(archived, header, rows):
    archived.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in [header] + rows).encode()))


def test_an_archive_header_names_what_produced_the_replies(engine, tiny_model, tiny_tokenizer):
    conversations = make_conversations(3)
    _, header, rows = _archive(engine, tiny_model, tiny_tokenizer, conversations)
    key = E.engine_key(tiny_model, tiny_tokenizer, conversations, max_new_tokens=8, max_length=1024, version="0.0-test")
    assert (
        header["model"]["weights_sha256"] == key["model"]["weights_sha256"] and header["tokenizer"] == key["tokenizer"]
    )
    assert header["engine"] == {"name": "vllm", "version": "0.0-test", "dtype": "float32"}
    assert header["generation"] == {
        "greedy": True,
        "max_new_tokens": 8,
        "max_length": 1024,
        "truncate": "keep_first",
        "max_model_len": E.MAX_MODEL_LEN,
    }
    assert header["prompts"] == key["prompts"] and header["n_prompts"] == 3 and len(header["request"]) == 64
    assert all(set(r) == {"i", "ids", "sum"} for r in rows)


@pytest.mark.parametrize(
    "tamper, message",
    [
        ("edit", "fails its checksum"),
        ("swap", "fails its checksum"),
        ("duplicate", "a second record of prompt 0"),
        ("outside", "outside the request's 4 prompts"),
        ("empty", "is empty"),
        ("vocabulary", "outside the vocabulary"),
        ("model", "header differs in model"),
        ("format1", "format 1"),
        ("list header", "line 1: not a reply archive's header"),
        ("nothing", "an empty archive"),
        ("flip", "not a readable gzip archive"),
    ],
)
def test_an_archive_that_cannot_be_trusted_is_refused(
    engine, tiny_model, tiny_tokenizer, monkeypatch, tmp_path, tamper, message
):
    """Each way an archive can be wrong inside a valid gzip stream, which gzip's CRC alone lets
    through (an edited id, two records' replies swapped, a repeated or out-of-range index, an empty
    reply, a token outside the vocabulary, another model's archive renamed) or an old-format or
    corrupt file: refused naming the archive, before the engine runs."""
    conversations = make_conversations(4)
    archived, header, rows = _archive(engine, tiny_model, tiny_tokenizer, conversations)
    vocab = header["vocab_size"]
    if tamper == "edit":
        rows[1]["ids"][0] = (rows[1]["ids"][0] + 1) % vocab
    elif tamper == "swap":
        rows[0]["i"], rows[1]["i"] = 1, 0  # each prompt given the other's record
    elif tamper == "duplicate":
        rows.append({**rows[0], "ids": rows[1]["ids"], "sum": E.record(header["request"], 0, rows[1]["ids"])["sum"]})
    elif tamper == "outside":
        rows.append(E.record(header["request"], 4, [11]))
    elif tamper in ("empty", "vocabulary"):
        rows[2] = E.record(header["request"], 2, [] if tamper == "empty" else [vocab])
    elif tamper == "model":
        header = {**header, "model": {**header["model"], "weights_sha256": "0" * 64}}
    elif tamper == "format1":
        header = {"engine": "vllm", "version": "0.0-test", "request without the model path": header["request"]}
    if tamper == "nothing":  # an empty gzip stream: not a format-1 archive to upgrade
        archived.write_bytes(gzip.compress(b"", mtime=0))
    elif tamper == "list header":
        _tampered(archived, [header], rows)
    elif tamper == "flip":
        good = archived.read_bytes()
        archived.write_bytes(good[: len(good) // 2] + bytes([good[len(good) // 2] ^ 0xFF]) + good[len(good) // 2 + 1 :])
    else:
        _tampered(archived, header, rows)
    monkeypatch.setenv("ELSI_CACHE_DIR", str(tmp_path / "new-machine"))
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("the engine ran"))
    for call in (
        lambda: E.engine_replies(tiny_model, tiny_tokenizer, conversations, max_new_tokens=8, chunk=2),
        lambda: E.replies_written(tiny_model, tiny_tokenizer, conversations, 1, max_new_tokens=8),
        lambda: E.archive_replies(tiny_model, tiny_tokenizer, conversations, max_new_tokens=8),
    ):
        with pytest.raises(E.ReplyRecordError, match=message) as err:
            call()
        assert str(archived) in str(err.value)


def test_a_partial_record_outside_the_request_is_refused(engine, tiny_model, tiny_tokenizer, monkeypatch):
    """A record in the engine's output naming a prompt outside the request is refused: counted as present,
    it would keep a missing reply from ever being generated, and "rerun to resume" would fail the same way
    every time."""
    conversations = make_conversations(3)
    monkeypatch.setenv("FAKE_FAIL_AFTER", "1")
    with pytest.raises(subprocess.CalledProcessError):
        E.engine_replies(tiny_model, tiny_tokenizer, conversations, max_new_tokens=8, chunk=2)
    partial = next(engine.parent.rglob("*.partial.jsonl"))
    req = E.request_for(tiny_model, tiny_tokenizer, conversations, max_new_tokens=8, max_length=1024)
    with open(partial, "a") as f:
        f.write(json.dumps(E.record(req.header["request"], 7, [11, 12])) + "\n")
    with pytest.raises(E.ReplyRecordError, match="prompt index 7 is outside the request's 3 prompts"):
        E.replies_written(tiny_model, tiny_tokenizer, conversations, 1, max_new_tokens=8)


def test_a_format1_archive_is_upgraded_with_the_same_replies(engine, tiny_model, tiny_tokenizer):
    conversations = make_conversations(3)
    archived, header, rows = _archive(engine, tiny_model, tiny_tokenizer, conversations)
    old = {"engine": "vllm", "version": "0.0-test", "request without the model path": header["request"]}
    archived.write_bytes(
        gzip.compress(
            "".join(json.dumps(r) + "\n" for r in [old] + [{"i": r["i"], "ids": r["ids"]} for r in rows]).encode()
        )
    )
    path, count = E.upgrade_archive(tiny_model, tiny_tokenizer, conversations, max_new_tokens=8)
    assert count == 3 and path == archived
    lines = gzip.decompress(archived.read_bytes()).decode().splitlines()
    assert json.loads(lines[0]) == header and [json.loads(line) for line in lines[1:]] == rows
    assert E.upgrade_archive(tiny_model, tiny_tokenizer, conversations, max_new_tokens=8) == (archived, 3)


def test_the_engine_computes_on_every_core_of_a_small_machine(monkeypatch, tmp_path):
    """vLLM reserves a core for its front end by default: on 2 cores that halves the engine. On at
    most 4 cores the engine gets them all, unless the user chose the cores; on more, vLLM decides."""
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    monkeypatch.delenv("VLLM_CPU_NUM_OF_RESERVED_CPU", raising=False)
    monkeypatch.setattr(E.os, "sched_getaffinity", lambda pid: {0, 1})
    env = engine_env.engine_environment(tmp_path / "bin" / "python")
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "0,1" and env["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "0"
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "4"
    monkeypatch.setattr(E.os, "sched_getaffinity", lambda pid: set(range(16)))
    assert "VLLM_CPU_OMP_THREADS_BIND" not in engine_env.engine_environment(tmp_path / "bin" / "python")
    monkeypatch.setattr(E.os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "auto")
    env = engine_env.engine_environment(tmp_path / "bin" / "python")
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "auto" and "VLLM_CPU_NUM_OF_RESERVED_CPU" not in env


def test_one_engine_per_request_and_a_torn_header_is_rewritten(engine, tiny_model, tiny_tokenizer, monkeypatch):
    """While one engine_replies run holds a request's lock, a second refuses at once (merging the
    archive would swap the file the first engine appends to). An engine output whose header line was
    torn is discarded and written again."""
    conversations = make_conversations(3)
    key = E.engine_key(tiny_model, tiny_tokenizer, conversations, max_new_tokens=8, max_length=1024, version="0.0-test")
    path = E.keyed_path("responses", key, suffix=".json")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(RuntimeError, match="another engine_replies run"):
            E.engine_replies(tiny_model, tiny_tokenizer, conversations, max_new_tokens=8, chunk=2)
    path.with_suffix(".partial.jsonl").write_text('{"engine": "vl')  # a header torn mid-write
    texts, _, _ = E.engine_replies(tiny_model, tiny_tokenizer, conversations, max_new_tokens=8, chunk=2)
    assert texts == expected(tiny_tokenizer, tiny_model, conversations)


def test_a_complete_archive_is_read_on_a_machine_without_the_engines_environment(
    engine, tiny_model, tiny_tokenizer, monkeypatch, tmp_path, capsys
):
    """A new machine has no .venv-engines: a complete archive of the request still gives its replies
    (its header names the vLLM version of the key), and nothing runs; an incomplete one gives the
    engines' error, naming what to build."""
    conversations = make_conversations(4)
    texts, ids, _ = E.engine_replies(tiny_model, tiny_tokenizer, conversations, max_new_tokens=8, chunk=2)
    E.archive_replies(tiny_model, tiny_tokenizer, conversations, max_new_tokens=8)
    monkeypatch.setenv("ELSI_CACHE_DIR", str(tmp_path / "new-machine"))

    def absent(python=None):
        raise FileNotFoundError("no vLLM in the engines' environment: run `make test-engines`")

    monkeypatch.setattr(E, "vllm_version", absent)
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("the engine ran"))
    again, again_ids, key = E.engine_replies(tiny_model, tiny_tokenizer, conversations, max_new_tokens=8, chunk=2)
    assert (again, again_ids) == (texts, ids) and key["engine"]["version"] == "0.0-test"
    assert "read from" in capsys.readouterr().err
    with pytest.raises(FileNotFoundError, match="make test-engines"):  # a request the archive does not hold
        E.engine_replies(tiny_model, tiny_tokenizer, make_conversations(5), max_new_tokens=8, chunk=2)


def test_an_archives_first_replies_are_read_without_the_engines_environment(
    engine, tiny_model, tiny_tokenizer, monkeypatch, tmp_path
):
    """A ledger trains on the first n_train replies of a longer request (`replies_written`): on a new
    machine without .venv-engines an archive holding those first replies is enough (the version comes
    from its header); asking for more than it holds gives the engines' error, naming what to build."""
    conversations = make_conversations(5)
    monkeypatch.setenv("FAKE_FAIL_AFTER", "1")
    with pytest.raises(subprocess.CalledProcessError):  # one chunk of 2 written, then interrupted
        E.engine_replies(tiny_model, tiny_tokenizer, conversations, max_new_tokens=8, chunk=2)
    monkeypatch.delenv("FAKE_FAIL_AFTER")
    assert E.archive_replies(tiny_model, tiny_tokenizer, conversations, max_new_tokens=8)[1] == 2
    monkeypatch.setenv("ELSI_CACHE_DIR", str(tmp_path / "new-machine"))

    def absent(python=None):
        raise FileNotFoundError("no vLLM in the engines' environment: run `make test-engines`")

    monkeypatch.setattr(E, "vllm_version", absent)
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("the engine ran"))
    want = expected(tiny_tokenizer, tiny_model, conversations)
    assert E.replies_written(tiny_model, tiny_tokenizer, conversations, 2, max_new_tokens=8) == want[:2]
    with pytest.raises(FileNotFoundError, match="make test-engines"):
        E.replies_written(tiny_model, tiny_tokenizer, conversations, 3, max_new_tokens=8)


def test_a_drafts_key_names_the_archives_version_without_the_engines_environment(
    engine, tiny_model, tiny_tokenizer, monkeypatch, tmp_path
):
    """data_key records who wrote the replies before reading any: without .venv-engines it takes the one
    version the archives name, refuses archives that disagree and names what to build without any."""
    from elsi_lib.draft import corpus

    conversations = make_conversations(3)
    E.engine_replies(tiny_model, tiny_tokenizer, conversations, max_new_tokens=8, chunk=2)
    archive, _ = E.archive_replies(tiny_model, tiny_tokenizer, conversations, max_new_tokens=8)

    def absent(python=None):
        raise FileNotFoundError("no vLLM in the engines' environment: run `make test-engines`")

    monkeypatch.setattr(corpus, "vllm_version", absent)
    monkeypatch.setattr(E, "vllm_version", absent)
    assert corpus.reply_identity("vllm") == {"engine": "vllm", "version": "0.0-test"}
    other = archive.with_name("0" * 24 + ".partial.jsonl.gz")
    with gzip.open(other, "wt") as handle:
        handle.write(json.dumps({"engine": {"name": "vllm", "version": "9.9"}}) + "\n")
    with pytest.raises(ValueError, match=r"\['0.0-test', '9.9'\]"):
        corpus.reply_identity("vllm")
    for path in (archive, other):
        path.unlink()
    with pytest.raises(FileNotFoundError, match="make test-engines"):
        corpus.reply_identity("vllm")


def test_a_request_with_no_reply_written_is_not_archived(engine, tiny_model, tiny_tokenizer, tmp_path):
    """`make replies-archive` over a request the engine never started here writes no (empty) archive."""
    path, count = E.archive_replies(tiny_model, tiny_tokenizer, make_conversations(3), max_new_tokens=8)
    assert count == 0 and not path.exists() and not list(tmp_path.rglob("*.jsonl.gz"))


def test_a_request_is_given_the_replies_another_archive_holds_for_its_prompts(engine, tiny_model, tiny_tokenizer):
    """The strong protocol's first prompts are Table 3's: the replies Table 3's request archived are given
    to the larger request at the indices of the same prompts, and its engine writes only the rest."""
    from elsi_lib.hidden.reply_records import ReplyRecordError, archive_bytes
    from elsi_lib.hidden.reply_reuse import reuse_archived

    big = make_conversations(5)
    small = make_conversations(5)[1:4]  # big's prompts 1-3, at indices 0-2
    settings = {"max_new_tokens": 8, "max_length": 1024}
    assert reuse_archived(tiny_model, tiny_tokenizer, big, small, **settings)[1] == 0  # no archive: nothing given
    E.engine_replies(tiny_model, tiny_tokenizer, small, max_new_tokens=8, chunk=2)
    E.archive_replies(tiny_model, tiny_tokenizer, small, max_new_tokens=8)
    path, gained = reuse_archived(tiny_model, tiny_tokenizer, big, small, **settings)
    assert gained == 3 and path == E.request_for(tiny_model, tiny_tokenizer, big, **settings).archive
    assert reuse_archived(tiny_model, tiny_tokenizer, big, small, **settings)[1] == 0  # given once
    engine.write_text("")  # the engine's log of prompts per generate call
    texts, _, _ = E.engine_replies(tiny_model, tiny_tokenizer, big, max_new_tokens=8, chunk=2)
    assert texts == expected(tiny_tokenizer, tiny_model, big)
    assert sum(len(json.loads(line)) for line in engine.read_text().splitlines()) == 2  # prompts 0 and 4 only
    mine = E.request_for(tiny_model, tiny_tokenizer, big, **settings)
    mine.archive.write_bytes(archive_bytes(mine.header, {1: [11, 12]}))  # prompt 1 answered otherwise
    with pytest.raises(ReplyRecordError, match="prompt 1 holds another reply"):
        reuse_archived(tiny_model, tiny_tokenizer, big, small, **settings)
