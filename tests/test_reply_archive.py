"""Replies archived in git (`generate_responses(archive=...)`, the SpecBench continuations of the draft
runs): written once, read on a machine whose cache is empty without generating again, and a corrupt
archive is detected and never used."""

from __future__ import annotations

import gzip
import json
import zlib

import pytest

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


def test_shipped_replies_are_read_and_never_written(tiny_model, tiny_tokenizer, tmp_path, monkeypatch, capsys):
    """A read-only folder of archives (the package's calibration replies): a cold cache reads them
    without generating; replies it does not hold are generated and never written into it; a torn
    archive there is said and generated over."""
    prompts, shipped = make_conversations(3), tmp_path / "shipped"
    first = generate_responses(tiny_model, tiny_tokenizer, prompts, archive=shipped, **SETTINGS)
    (archived,) = shipped.glob("*.json.gz")
    monkeypatch.setenv("ELSI_CACHE_DIR", str(tmp_path / "cold"))
    calls = counted(tiny_model, monkeypatch)
    assert generate_responses(tiny_model, tiny_tokenizer, prompts, shipped=shipped, **SETTINGS) == first
    assert calls == []
    generate_responses(tiny_model, tiny_tokenizer, make_conversations(2, seed=9), shipped=shipped, **SETTINGS)
    assert calls and list(shipped.glob("*.json.gz")) == [archived]  # generated, and nothing written there
    archived.write_bytes(archived.read_bytes()[:20])  # torn
    monkeypatch.setenv("ELSI_CACHE_DIR", str(tmp_path / "colder"))
    calls.clear()
    assert generate_responses(tiny_model, tiny_tokenizer, prompts, shipped=shipped, **SETTINGS) == first
    assert calls and "unreadable archive" in capsys.readouterr().err


def test_an_edited_generation_config_gets_new_replies_and_a_plain_one_keeps_the_old_keys(
    tiny_model, tiny_tokenizer, tmp_path, monkeypatch
):
    """`generate` reads the generation config's end-of-sequence ids and processors in greedy decoding too:
    a generation_config.json whose eos_token_id or repetition penalty was edited gets its own replies, never
    the cached ones; one that only mirrors the model's config adds nothing to the key (old archives hold)."""
    from elsi_lib.hidden.replies import generation_changes

    monkeypatch.setenv("ELSI_CACHE_DIR", str(tmp_path / "cache"))
    prompts = make_conversations(3)
    assert generation_changes(tiny_model) == {}
    first = generate_responses(tiny_model, tiny_tokenizer, prompts, **SETTINGS)
    calls = counted(tiny_model, monkeypatch)
    config = tiny_model.generation_config
    for name, value in (("eos_token_id", 5), ("repetition_penalty", 1.3), ("no_repeat_ngram_size", 2)):
        monkeypatch.setattr(config, name, value)
        calls.clear()
        generate_responses(tiny_model, tiny_tokenizer, prompts, **SETTINGS)
        assert calls, f"{name} {value}: the replies cached before it were used"
        assert name in generation_changes(tiny_model)
        monkeypatch.undo()
        calls = counted(tiny_model, monkeypatch)
        monkeypatch.setenv("ELSI_CACHE_DIR", str(tmp_path / "cache"))
    calls.clear()
    assert generate_responses(tiny_model, tiny_tokenizer, prompts, **SETTINGS) == first and calls == []


def test_every_generation_field_greedy_decoding_applies_is_in_the_key_and_a_neutral_value_is_not(
    tiny_model, tiny_tokenizer, tmp_path, monkeypatch
):
    """guidance and a watermark change greedy replies (generate applies both with do_sample=False): in the
    key, as beam search's length penalty and early stopping are; a repetition penalty of 1.0, one beam, and
    end-of-sequence ids given in another order or twice change nothing: not in it (no replies written again
    for them). A config asking for several sequences a prompt still gets one reply each, in its order, and one
    asking for prompt lookup (assisted decoding, one prompt a batch) gets the greedy replies."""
    from transformers.generation import WatermarkingConfig

    from elsi_lib.hidden.replies import generation_changes

    config = tiny_model.generation_config
    changing = (("guidance_scale", 3.0), ("watermarking_config", WatermarkingConfig(bias=10.0)))
    for name, value in (*changing, ("length_penalty", 2.0), ("early_stopping", True)):  # beam search's too
        monkeypatch.setattr(config, name, value)
        assert name in generation_changes(tiny_model)
        monkeypatch.undo()
    own = tiny_model.config.eos_token_id
    monkeypatch.setenv("ELSI_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(config, "stop_strings", ["zz"])  # generate needs the tokenizer for them: given
    assert len(generate_responses(tiny_model, tiny_tokenizer, make_conversations(2), **SETTINGS)) == 2
    assert generation_changes(tiny_model) == {"stop_strings": ["zz"]}
    monkeypatch.undo()
    monkeypatch.setattr(config, "num_beams", 2)  # beam search may return several sequences a prompt
    monkeypatch.setenv("ELSI_CACHE_DIR", str(tmp_path / "cache2"))
    beams = generate_responses(tiny_model, tiny_tokenizer, make_conversations(3), **SETTINGS)
    monkeypatch.setattr(config, "num_return_sequences", 2)
    monkeypatch.setenv("ELSI_CACHE_DIR", str(tmp_path / "cache3"))
    assert generate_responses(tiny_model, tiny_tokenizer, make_conversations(3), **SETTINGS) == beams
    monkeypatch.undo()
    greedy = generate_responses(tiny_model, tiny_tokenizer, make_conversations(3), **SETTINGS, cache=False)
    monkeypatch.setattr(config, "prompt_lookup_num_tokens", 3)  # assisted decoding takes one prompt a batch
    assert generate_responses(tiny_model, tiny_tokenizer, make_conversations(3), **SETTINGS, cache=False) == greedy
    monkeypatch.undo()
    for name, value in (
        ("repetition_penalty", 1.0),
        ("num_beams", 1),
        ("no_repeat_ngram_size", 0),
        ("eos_token_id", [own, own]),
    ):
        monkeypatch.setattr(config, name, value)
        assert generation_changes(tiny_model) == {}, name
        monkeypatch.undo()


def test_the_bundled_models_calibration_replies_ship_with_the_package(bundled, monkeypatch):
    """`elsi select --model smollm2-135m` on a cold cache reads its 200 calibration replies from the
    package (`make calibration-replies` after a change of model, library or settings makes this fail)."""
    from elsi_lib.hidden import replies
    from elsi_lib.hidden.calibration import calibration_conversations

    def refuse(*args, **kwargs):
        raise AssertionError("the shipped calibration replies were not used: run `make calibration-replies`")

    monkeypatch.setattr(replies, "_generate_batch", refuse)
    conversations = calibration_conversations(200, loaded=bundled, progress=False)
    assert len(conversations) == 200 and all(c[-1]["role"] == "assistant" for c in conversations)


def test_an_archive_made_under_other_library_versions_is_found_and_said(
    tiny_model, tiny_tokenizer, tmp_path, monkeypatch, capsys
):
    """Archives are found by what produced them: one written under another torch build (a local version
    suffix) is used without generating, and the command says so."""
    from elsi_lib.hidden import replies

    prompts, archive = make_conversations(3), tmp_path / "archive"
    first = generate_responses(tiny_model, tiny_tokenizer, prompts, archive=archive, **SETTINGS)
    real = replies.versions
    monkeypatch.setattr(replies, "versions", lambda: {**real(), "torch": real()["torch"] + ".local1"})
    monkeypatch.setenv("ELSI_CACHE_DIR", str(tmp_path / "other-build"))
    calls = counted(tiny_model, monkeypatch)
    assert generate_responses(tiny_model, tiny_tokenizer, prompts, archive=archive, **SETTINGS) == first
    assert calls == [] and "made under" in capsys.readouterr().err


def test_a_flipped_bit_in_an_archive_is_named_and_written_again(
    tiny_model, tiny_tokenizer, tmp_path, monkeypatch, capsys
):
    prompts, archive = make_conversations(3), tmp_path / "archive"
    first = generate_responses(tiny_model, tiny_tokenizer, prompts, archive=archive, **SETTINGS)
    (archived,) = archive.glob("*.json.gz")
    good = archived.read_bytes()
    for at in range(12, len(good) - 8, max(1, (len(good) - 20) // 12)):
        flipped = bytearray(good)
        flipped[at] ^= 0x10
        archived.write_bytes(bytes(flipped))
        monkeypatch.setenv("ELSI_CACHE_DIR", str(tmp_path / f"cold-{at}"))
        assert generate_responses(tiny_model, tiny_tokenizer, prompts, archive=archive, **SETTINGS) == first
        captured = capsys.readouterr()
        try:
            harmless = gzip.decompress(bytes(flipped)) == gzip.decompress(good)  # a flip in the stream's padding
        except (OSError, EOFError, zlib.error):
            harmless = False
        assert harmless or archived.name in captured.err + captured.out, at  # named, never a bare gzip error


def _resealed(archived, change) -> None:
    """Rewrite an archive's body with `change` applied to its replies, its checksum made to match."""
    from elsi_lib.common.cachefiles import sha256_text

    wrapper = json.loads(gzip.decompress(archived.read_bytes()))
    body = json.loads(wrapper["body"])
    body["replies"] = change(body["replies"])
    wrapper["body"] = json.dumps(body)
    wrapper["sha256"] = sha256_text(wrapper["body"])
    archived.write_bytes(gzip.compress(json.dumps(wrapper).encode()))


def test_replies_listed_twice_or_to_no_conversation_are_never_used(
    tiny_model, tiny_tokenizer, tmp_path, monkeypatch, capsys
):
    """Behind a valid checksum, a reply listed twice (which one is conversation 0's?) or under an index no
    conversation has (shifted by one, negative) is not used: the replies are made again, said why."""
    prompts, archive = make_conversations(3), tmp_path / "archive"
    first = generate_responses(tiny_model, tiny_tokenizer, prompts, archive=archive, **SETTINGS)
    (archived,) = archive.glob("*.json.gz")
    for n, change in enumerate(
        (
            lambda r: r + [[0, "INJECTED"]],
            lambda r: [[e[0] + 1, *e[1:]] for e in r],
            lambda r: [[-1, *r[0][1:]], *r[1:]],
        )
    ):
        _resealed(archived, change)
        monkeypatch.setenv("ELSI_CACHE_DIR", str(tmp_path / f"machine-{n}"))
        calls = counted(tiny_model, monkeypatch)
        assert generate_responses(tiny_model, tiny_tokenizer, prompts, archive=archive, **SETTINGS) == first
        out = capsys.readouterr().out
        assert calls and "regenerating replies" in out, out


def test_an_archive_whose_body_is_not_a_key_and_replies_is_skipped_naming_it(tmp_path, capsys):
    """Behind a valid checksum, a body without its key, a key that is no mapping, or a reply whose index is
    true or 0.9: the archive is skipped, named, never read as replies to other prompts (nor a KeyError)."""
    from elsi_lib.common.cachefiles import sha256_text
    from elsi_lib.hidden.replies import same_making

    folder = tmp_path / "archive"
    folder.mkdir()
    for n, body in enumerate(
        (
            {"replies": [[0, "x"]]},
            {"key": [1], "replies": [[0, "x"]]},
            {"key": {"model": "m"}, "replies": [[True, "x"]]},
            {"key": {"model": "m"}, "replies": [[0.9, "x"]]},
        )
    ):
        text = json.dumps(body)
        (folder / f"a{n}.json.gz").write_bytes(
            gzip.compress(json.dumps({"sha256": sha256_text(text), "body": text}).encode())
        )
    assert same_making({"model": "m", "library": {}}, [folder]) == []
    err = capsys.readouterr().err
    assert all(f"a{n}.json.gz: unreadable archive" in err for n in range(4)), err


def test_with_replies_takes_one_text_for_each_conversation_awaiting_one():
    """A string is no list of replies (it would be read one reply a character), None is no text, and a
    conversation that already ends with a reply would get a second assistant turn: each refused."""
    from elsi_lib.hidden.replies import with_replies

    asked = [[{"role": "user", "content": "hi"}], [{"role": "user", "content": "yo"}]]
    assert with_replies(asked, ["a", "b"])[1][-1] == {"role": "assistant", "content": "b"}
    with pytest.raises(TypeError, match="list of texts"):
        with_replies(asked, "ab")
    with pytest.raises(TypeError, match="list of texts"):
        with_replies(asked, ["a", None])
    with pytest.raises(ValueError, match=r"conversation\(s\) \[1\] do not end with a user turn"):
        with_replies([asked[0], [*asked[1], {"role": "assistant", "content": "x"}]], ["a", "b"])
