"""Replies archived in git (`generate_responses(archive=...)`, the SpecBench continuations of the draft
runs): written once, read on a machine whose cache is empty without generating again, and a corrupt
archive is detected and never used."""

from __future__ import annotations

import gzip
import json

from conftest import make_conversations
from elsi_lib.hidden.replies import generate_responses

SETTINGS = dict(max_new_tokens=6, max_length=64, progress=False)


def counted(model, monkeypatch):
    calls, original = [], model.generate

    def generate(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(model, "generate", generate)
    return calls


def test_an_archive_replaces_generation_on_a_new_machine(tiny_model, tiny_tokenizer, tmp_path, monkeypatch):
    prompts, archive = make_conversations(3), tmp_path / "archive"
    calls = counted(tiny_model, monkeypatch)
    first = generate_responses(tiny_model, tiny_tokenizer, prompts, archive=archive, **SETTINGS)
    (archived,) = archive.glob("*.json.gz")
    assert calls and gzip.decompress(archived.read_bytes())
    monkeypatch.setenv("ELSI_CACHE_DIR", str(tmp_path / "new-machine"))  # an empty cache
    calls.clear()
    assert generate_responses(tiny_model, tiny_tokenizer, prompts, archive=archive, **SETTINGS) == first
    assert calls == []  # read from the archive: nothing generated
    sampled = generate_responses(
        tiny_model, tiny_tokenizer, prompts, archive=archive, temperature=1.0, seed=3, with_ids=True, **SETTINGS
    )
    assert len(list(archive.glob("*.json.gz"))) == 2 and len(sampled[1]) == 3  # its own keyed file


def test_a_corrupt_archive_is_never_used(tiny_model, tiny_tokenizer, tmp_path, monkeypatch, capsys):
    prompts, archive = make_conversations(3), tmp_path / "archive"
    first = generate_responses(tiny_model, tiny_tokenizer, prompts, archive=archive, **SETTINGS)
    (archived,) = archive.glob("*.json.gz")
    good = archived.read_bytes()
    wrapper = json.loads(gzip.decompress(good))
    assert '"replies": [[0, "' in wrapper["body"]
    wrapper["body"] = wrapper["body"].replace('"replies": [[0, "', '"replies": [[0, "zzz', 1)  # an edited reply
    archived.write_bytes(gzip.compress(json.dumps(wrapper).encode()))
    monkeypatch.setenv("ELSI_CACHE_DIR", str(tmp_path / "new-machine"))
    calls = counted(tiny_model, monkeypatch)
    assert generate_responses(tiny_model, tiny_tokenizer, prompts, archive=archive, **SETTINGS) == first
    assert calls and "corrupt" in capsys.readouterr().out  # regenerated, and said why
    assert gzip.decompress(archived.read_bytes()) == gzip.decompress(good)  # the archive is whole again
