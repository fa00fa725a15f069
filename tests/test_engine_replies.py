"""Replies through the engine (elsi_lib.hidden.engine_replies and engines/replies.py) without vLLM: the
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
from elsi_lib.hidden import engine_replies as E
from elsi_lib.hidden.replies import eos_ids
from elsi_lib.inputs.chat import tokenize_conversation, truncate

FAKE_VLLM = '''
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
'''


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


def test_a_torn_last_line_is_dropped_and_regenerated(tmp_path):
    sys.path.insert(0, str(E.SCRIPT.parent))
    try:
        import replies as script
    finally:
        sys.path.pop(0)
    header = {"engine": "vllm", "version": "x", "request": "r"}
    path = tmp_path / "out.jsonl"
    path.write_bytes((json.dumps(header) + "\n" + json.dumps({"i": 0, "ids": [1]}) + "\n" + '{"i": 1, "id').encode())
    assert script.done_indices(path, header) == {0}
    assert path.read_text().endswith('"ids": [1]}\n')  # the torn tail is cut
    with pytest.raises(SystemExit, match="another request"):
        script.done_indices(path, {**header, "request": "other"})


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
    partial.write_text(partial.read_text()[:partial.read_text().rindex("\n") + 1])  # the engine cuts its torn tail too
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
    assert E.replies_written(tiny_model, tiny_tokenizer, conversations, 2, max_new_tokens=8) == \
        expected(tiny_tokenizer, tiny_model, conversations)[:2]  # read from the archive alone
    engine.write_text("")
    texts, ids, _ = E.engine_replies(tiny_model, tiny_tokenizer, conversations, max_new_tokens=8, chunk=2)
    assert texts == expected(tiny_tokenizer, tiny_model, conversations)
    assert [len(json.loads(line)) for line in engine.read_text().splitlines()] == [2, 1]  # the 3 not archived
    archived, count = E.archive_replies(tiny_model, tiny_tokenizer, conversations, max_new_tokens=8)
    assert count == 5  # from the cache: the two replies archived before are the same bytes by either route
    assert gzip.decompress(archived.read_bytes()).decode().splitlines()[:3] == partial_route
    monkeypatch.setenv("ELSI_CACHE_DIR", str(tmp_path / "third-machine"))
    with monkeypatch.context() as patch:  # another patch release of the libraries: the archive is still found
        patch.setattr(E, "versions", lambda: {"elsi": "0.1.0", "torch": "2.13.1", "transformers": "x", "tokenizers": "y"})
        patch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("the engine ran"))
        again, again_ids, _ = E.engine_replies(tiny_model, tiny_tokenizer, conversations, max_new_tokens=8, chunk=2)
    assert again == texts and again_ids == ids


def test_a_foreign_or_corrupt_archive_is_ignored(engine, tiny_model, tiny_tokenizer, monkeypatch, tmp_path, capsys):
    """An archive written for other prompts (its header's request sha256 differs) or a corrupt one
    (a bad trailer, a byte flipped inside the stream) is never used: the engine writes every reply."""
    conversations = make_conversations(4)
    E.engine_replies(tiny_model, tiny_tokenizer, conversations, max_new_tokens=8, chunk=2)
    archived, _ = E.archive_replies(tiny_model, tiny_tokenizer, conversations, max_new_tokens=8)
    lines = gzip.decompress(archived.read_bytes()).decode().splitlines()
    header = json.loads(lines[0])
    forged = [json.dumps({**header, "request without the model path": "0" * 64})] + lines[1:]
    good = archived.read_bytes()
    flipped = good[:len(good) // 2] + bytes([good[len(good) // 2] ^ 0xFF]) + good[len(good) // 2 + 1:]
    for n, payload in enumerate((gzip.compress(("\n".join(forged) + "\n").encode()), good[:-9] + b"garbage!!", flipped)):
        archived.write_bytes(payload)
        monkeypatch.setenv("ELSI_CACHE_DIR", str(tmp_path / f"machine-{n}"))
        engine.write_text("")
        texts, _, _ = E.engine_replies(tiny_model, tiny_tokenizer, conversations, max_new_tokens=8, chunk=2)
        assert texts == expected(tiny_tokenizer, tiny_model, conversations)
        assert [len(json.loads(line)) for line in engine.read_text().splitlines()] == [2, 2]  # all written again
        assert "ignoring the archived replies" in capsys.readouterr().out


def test_the_engine_computes_on_every_core_of_a_small_machine(monkeypatch, tmp_path):
    """vLLM reserves a core for its front end by default: on 2 cores that halves the engine. On at
    most 4 cores the engine gets them all, unless the user chose the cores; on more, vLLM decides."""
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    monkeypatch.delenv("VLLM_CPU_NUM_OF_RESERVED_CPU", raising=False)
    monkeypatch.setattr(E.os, "sched_getaffinity", lambda pid: {0, 1})
    env = E.engine_environment(tmp_path / "bin" / "python")
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "0,1" and env["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "0"
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "4"
    monkeypatch.setattr(E.os, "sched_getaffinity", lambda pid: set(range(16)))
    assert "VLLM_CPU_OMP_THREADS_BIND" not in E.engine_environment(tmp_path / "bin" / "python")
    monkeypatch.setattr(E.os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "auto")
    env = E.engine_environment(tmp_path / "bin" / "python")
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
