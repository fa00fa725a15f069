"""Drafts written in the speculators, EAGLE and OpenVINO layouts (elsi_lib.draft.export) and read back:
identical logits for m = 1..4 on both target families (m = 3 for OpenVINO), layer ids in the engines'
convention (vLLM's l + 1, OpenVINO's l), every weight present, and refusals where a layout cannot express
the draft."""

import copy
import hashlib
import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from elsi_lib import random_model
from elsi_lib.draft.model import Eagle3Draft
from elsi_lib.draft.vocabulary import draft_vocabulary
from elsi_lib.common.cachefiles import sha256_file
from elsi_lib.draft import export as X
from elsi_lib.draft.config import FINAL_NORM

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def trained_like(target, layers, draft_vocab, seed=0):
    """A draft with perturbed weights (so that a wrong mapping shows) and a non-trivial vocabulary map."""
    draft = Eagle3Draft.from_target(target, layers, draft_vocab, seed=seed)
    if draft_vocab < target.config.vocab_size:
        counts = torch.arange(target.config.vocab_size).flip(0) % 7
        draft.set_vocabulary(*draft_vocabulary(counts, draft_vocab))
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.1)
    return draft.eval()


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def target(request):
    extra = {"num_key_value_heads": 2} if request.param == "qwen2" else {}
    model = random_model(request.param, n_layers=5, hidden_size=32, vocab_size=70, seed=0, **extra)
    model.config._name_or_path = "local/random-target"  # the verifier an export names by default
    return model


def rewrite(folder, name, text_or_bytes, *, update_record=True):
    """Replace one exported file; with `update_record`, also its checksum in elsi.json (a consistent
    but contradictory export, which only the cross-checks can catch)."""
    path = folder / name
    path.write_bytes(text_or_bytes if isinstance(text_or_bytes, bytes) else text_or_bytes.encode())
    if update_record:
        record = json.loads((folder / "elsi.json").read_text())
        record["files"][name] = sha256_file(path)
        (folder / "elsi.json").write_text(json.dumps(record))


@pytest.mark.parametrize("fmt", ["speculators", "eagle"])
@pytest.mark.parametrize("layers", [(4,), (0, 3), (1, 2, 4), (0, 1, 2, 3)])
def test_round_trip_gives_identical_logits(target, fmt, layers, tmp_path):
    draft = trained_like(target, layers, 24)
    X.save_draft(draft, tmp_path, target=target, format=fmt, verifier="local/target")
    back = X.load_draft(tmp_path, target)
    ids = torch.randint(0, 70, (2, 9), generator=torch.Generator().manual_seed(0))
    features = torch.randn(2, 9, len(layers) * 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(draft(ids, features=features)[0], back(ids, features=features)[0])
    assert back.config == draft.config and back.config.layer_ids == layers
    assert torch.equal(back.d2t, draft.d2t) and torch.equal(back.t2d, draft.t2d)
    layout, config, ids_engine = X.read_layout(tmp_path)
    assert layout == fmt and ids_engine == [l + 1 for l in layers]
    names = set(load_file(str(tmp_path / "model.safetensors")))
    prefix = "layers.0." if fmt == "speculators" else "midlayer."
    assert (
        f"{prefix}self_attn.q_proj.weight" in names
        and {"fc.weight", "norm.weight", "lm_head.weight", "d2t", "t2d"} <= names
    )
    assert not any(n.startswith("embed") for n in names)
    layer_config = config["transformer_layer_config"] if fmt == "speculators" else config
    assert layer_config["num_aux_hidden_states"] == len(layers) and config["norm_before_residual"] is False
    if fmt == "speculators":
        assert "model_type" not in config and config["speculators_model_type"] == "eagle3"
        assert config["speculators_config"]["verifier"]["name_or_path"] == "local/target"
        assert layer_config["model_type"] == "llama"
    else:
        assert config["architectures"] == ["LlamaForCausalLMEagle3"]
        assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [l + 1 for l in layers]
        assert config["eagle_aux_hidden_state_layer_ids"] == [l + 1 for l in layers]  # vLLM's V2 runner
    assert config["target_hidden_size"] == 32 and config["draft_vocab_size"] == 24
    record = json.loads((tmp_path / "elsi.json").read_text())
    assert record["draft"]["source"] == list(layers) and record["engine_layer_ids"] == ids_engine
    assert sorted(record["files"]) == ["config.json", "model.safetensors"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "elsi.json", "model.safetensors"]


@pytest.mark.parametrize("draft_vocab", [24, 70])
def test_the_openvino_layout_round_trips_under_optimum_intels_names_with_elsis_ids(target, draft_vocab, tmp_path):
    """optimum-intel's LlamaEagle3ForCausalLM holds every module under `model.` and has buffers d2t / t2d
    and an embedding of its own; OpenVINO's id k is the output of decoder layer k (elsi's)."""
    layers = (1, 2, 4)
    draft = trained_like(target, layers, draft_vocab)
    X.save_draft(draft, tmp_path, target=target, format="openvino", verifier="local/target")
    back = X.load_draft(tmp_path, target)
    ids = torch.randint(0, 70, (2, 9), generator=torch.Generator().manual_seed(0))
    features = torch.randn(2, 9, 3 * 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(draft(ids, features=features)[0], back(ids, features=features)[0])
    assert torch.equal(back.d2t, draft.d2t) and torch.equal(back.t2d, draft.t2d)
    layout, config, ids_engine = X.read_layout(tmp_path)
    assert (layout, ids_engine, config["hidden_layers_list"]) == ("openvino", list(layers), list(layers))
    assert "eagle_aux_hidden_state_layer_ids" not in config and "eagle_config" not in config  # not vLLM's ids
    assert config["architectures"] == ["LlamaForCausalLMEagle3"] and config["model_type"] == "llama"
    weights = load_file(str(tmp_path / "model.safetensors"))
    assert all(n.startswith("model.") for n in weights)
    assert {"model.fc.weight", "model.midlayer.hidden_norm.weight", "model.d2t", "model.t2d"} <= set(weights)
    assert torch.equal(weights["model.embed_tokens.weight"], target.get_input_embeddings().weight)
    assert json.loads((tmp_path / "elsi.json").read_text())["engine_layer_ids"] == list(layers)
    tampered = {**weights, "model.embed_tokens.weight": weights["model.embed_tokens.weight"] + 1}
    save_file(tampered, str(tmp_path / "model.safetensors"))
    rewrite(tmp_path, "model.safetensors", (tmp_path / "model.safetensors").read_bytes())
    with pytest.raises(ValueError, match="not the target's embedding"):
        X.load_draft(tmp_path, target)


@pytest.mark.parametrize("layers", [(4,), (0, 3), (0, 1, 2, 3)])
def test_the_openvino_layout_takes_exactly_three_layers(target, layers, tmp_path):
    with pytest.raises(ValueError, match="exactly three layers"):
        X.save_draft(trained_like(target, layers, 24), tmp_path, target=target, format="openvino")
    assert not tmp_path.joinpath("config.json").exists()


def test_full_vocabulary_writes_no_maps(target, tmp_path):
    draft = trained_like(target, (1, 3), 70)
    X.save_draft(draft, tmp_path, target=target)
    assert not {"d2t", "t2d"} & set(load_file(str(tmp_path / "model.safetensors")))
    back = X.load_draft(tmp_path, target)
    features = torch.randn(1, 4, 64)
    with torch.no_grad():
        assert torch.equal(
            draft(torch.arange(4)[None], features=features)[0], back(torch.arange(4)[None], features=features)[0]
        )


def test_missing_or_unexpected_weights_are_an_error(target, tmp_path):
    draft = trained_like(target, (1, 3), 24)
    X.save_draft(draft, tmp_path, target=target)
    path = tmp_path / "model.safetensors"
    weights = load_file(str(path))
    save_file({k: v for k, v in weights.items() if k != "layers.0.mlp.up_proj.weight"}, str(path))
    rewrite(tmp_path, "model.safetensors", path.read_bytes())
    with pytest.raises(ValueError, match="missing weights.*up_proj"):
        X.load_draft(tmp_path, target)
    save_file({**weights, "embed_tokens.weight": torch.zeros(70, 32)}, str(path))
    rewrite(tmp_path, "model.safetensors", path.read_bytes())
    with pytest.raises(ValueError, match="unexpected weights.*embed_tokens"):
        X.load_draft(tmp_path, target)


def test_refusals(target, tmp_path):
    draft = trained_like(target, (4,), 24)
    for broken in (lambda d: d.fc.weight.data.__setitem__((0, 0), float("nan")), lambda d: d.to(torch.bfloat16)):
        bad = trained_like(target, (4,), 24)
        broken(bad)
        with pytest.raises(ValueError, match="fc.weight is not finite float32"):  # before anything is written
            X.save_draft(bad, tmp_path / "bad", target=target)
        assert not (tmp_path / "bad").exists()
    eagle2 = Eagle3Draft.from_target(target, FINAL_NORM, 24, seed=0)
    with pytest.raises(ValueError, match="no engine layer id"):
        X.save_draft(eagle2, tmp_path, target=target)
    with pytest.raises(ValueError, match="unknown format"):
        X.save_draft(draft, tmp_path, target=target, format="sglang")
    X.save_draft(draft, tmp_path, target=target)
    config = json.loads((tmp_path / "config.json").read_text())
    rewrite(tmp_path, "config.json", json.dumps({**config, "model_type": "llama"}))
    with pytest.raises(ValueError, match="top-level model_type"):
        X.load_draft(tmp_path, target)
    for change in ({"norm_before_residual": True}, {"fc_norm": True}, {"target_hidden_size": 64}):
        rewrite(tmp_path, "config.json", json.dumps({**config, **change}))
        with pytest.raises(ValueError, match=next(iter(change))):
            X.load_draft(tmp_path, target)
    rewrite(tmp_path, "config.json", json.dumps({k: v for k, v in config.items() if k != "norm_before_residual"}))
    with pytest.raises(ValueError, match="norm_before_residual"):  # the speculators layout's default is true
        X.load_draft(tmp_path, target)
    wider = random_model("llama", n_layers=5, hidden_size=48, vocab_size=70, seed=0)
    rewrite(tmp_path, "config.json", json.dumps(config))
    with pytest.raises(ValueError, match="hidden_size"):
        X.load_draft(tmp_path, wider)


# --- a draft describes itself; exports lose nothing ---------------------------------------------


def test_save_draft_takes_no_source_and_checks_the_target(target, tmp_path):
    """The layer set is the draft's own; a target of another shape (layers, width, vocabulary,
    family, norm epsilon, rope) is refused before anything is written."""
    draft = trained_like(target, (1, 3), 24)
    with pytest.raises(TypeError):
        X.save_draft(draft, tmp_path / "a", target=target, source=(1, 3))
    family = target.config.model_type
    others = {
        "num_hidden_layers": random_model(family, n_layers=6, hidden_size=32, vocab_size=70, seed=0),
        "vocab_size": random_model(family, n_layers=5, hidden_size=32, vocab_size=80, seed=0),
        "hidden_size": random_model(family, n_layers=5, hidden_size=48, vocab_size=70, seed=0),
        "family": random_model(
            "qwen2" if family == "llama" else "llama", n_layers=5, hidden_size=32, vocab_size=70, seed=0
        ),
    }
    for field, other in others.items():
        with pytest.raises(ValueError, match=field):
            X.save_draft(draft, tmp_path / field, target=other)
        assert not (tmp_path / field).exists()
    for field, value in (("rms_norm_eps", 1e-3), ("rope_theta", 1234.0)):
        other = copy.deepcopy(target)
        if field == "rope_theta":
            other.config.rope_parameters = {**other.config.rope_parameters, "rope_theta": value}
            field = "rope_parameters"
        else:
            setattr(other.config, field, value)
        with pytest.raises(ValueError, match=field):
            X.save_draft(draft, tmp_path / field, target=other)


@pytest.mark.parametrize("tokens", [0, -1, 1.5, True, "3", 10**6])
def test_save_draft_refuses_nonsensical_speculative_tokens(target, tmp_path, tokens):
    with pytest.raises(ValueError, match="speculative_tokens"):
        X.save_draft(trained_like(target, (1, 3), 24), tmp_path / "x", target=target, speculative_tokens=tokens)


@pytest.mark.parametrize("fmt", ["eagle", "openvino"])
def test_speculative_tokens_for_a_format_without_the_field_is_refused(target, tmp_path, fmt):
    """Only a speculators config carries the draft length: given for another format it would be dropped unsaid."""
    with pytest.raises(ValueError, match=f"speculators config only; the {fmt} format has no field"):
        X.save_draft(
            trained_like(target, (0, 2, 3), 24), tmp_path / "x", target=target, format=fmt, speculative_tokens=7
        )


def test_save_draft_never_overwrites_a_foreign_folder(target, tmp_path):
    """A model folder (or anything that is not an earlier elsi export) is refused and left as it was."""
    model_folder = tmp_path / "model"
    model_folder.mkdir()
    (model_folder / "config.json").write_text('{"model_type": "llama"}')
    (model_folder / "model.safetensors").write_bytes(b"target weights")
    with pytest.raises(FileExistsError, match="not an earlier elsi export"):
        X.save_draft(trained_like(target, (1, 3), 24), model_folder, target=target)
    assert (model_folder / "model.safetensors").read_bytes() == b"target weights"
    assert sorted(p.name for p in model_folder.iterdir()) == ["config.json", "model.safetensors"]
    (tmp_path / "file").write_text("x")
    with pytest.raises(FileExistsError):
        X.save_draft(trained_like(target, (1, 3), 24), tmp_path / "file", target=target)
    with pytest.raises(NotADirectoryError, match="file is a file, not a folder"):  # not "[Errno 17]" alone
        X.save_draft(trained_like(target, (1, 3), 24), tmp_path / "file" / "draft", target=target)
    assert (tmp_path / "file").read_text() == "x"


@pytest.mark.parametrize("fmt", X.FORMATS)
def test_a_file_the_export_did_not_write_is_never_deleted(target, fmt, tmp_path):
    """An export replaces only what an earlier export wrote: replacing any folder holding save_draft's
    elsi.json whole would delete what the user put beside the export (a tokenizer, a note), or a folder
    of theirs holding a copied elsi.json."""
    draft = trained_like(target, (1, 2, 4), 24)
    export = X.save_draft(draft, tmp_path / "export", target=target, format=fmt)
    (export / "tokenizer.json").write_text("{}")
    with pytest.raises(FileExistsError, match=r"\['tokenizer.json'\], which the earlier export there did not write"):
        X.save_draft(draft, export, target=target, format=fmt)
    assert (export / "tokenizer.json").read_text() == "{}"
    (export / "tokenizer.json").unlink()
    X.save_draft(draft, export, target=target, format=fmt)  # the export alone: replaced whole
    home = tmp_path / "home"
    home.mkdir()
    (home / "thesis.tex").write_text("years of work")
    (home / "elsi.json").write_text((export / "elsi.json").read_text())
    with pytest.raises(FileExistsError, match="thesis.tex"):
        X.save_draft(draft, home, target=target, format=fmt)
    assert (home / "thesis.tex").read_text() == "years of work"


def test_replacing_an_export_is_atomic_and_leaves_no_stale_file(target, tmp_path, monkeypatch):
    a, b = trained_like(target, (1, 3), 24, seed=0), trained_like(target, (0, 2, 4), 24, seed=5)
    folder = tmp_path / "draft"
    X.save_draft(a, folder, target=target)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}

    def crash(*args, **kwargs):  # the weights of B fail to write after B's config.json was written
        raise KeyboardInterrupt("interrupted")

    with monkeypatch.context() as patch:
        patch.setattr(X, "save_file", crash)
        with pytest.raises(KeyboardInterrupt):
            X.save_draft(b, folder, target=target)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before  # A's export, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["draft"]  # no temporary folder left behind
    assert X.load_draft(folder, target).config.layer_ids == (1, 3)
    (folder / "model.safetensors.index.json").write_text("{}")  # e.g. a stale index of a sharded save
    with pytest.raises(ValueError, match="model.safetensors.index.json"):
        X.load_draft(folder, target)
    with pytest.raises(FileExistsError, match="model.safetensors.index.json"):  # not the export's: never deleted
        X.save_draft(b, folder, target=target)
    (folder / "model.safetensors.index.json").unlink()
    X.save_draft(b, folder, target=target)
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "elsi.json", "model.safetensors"]
    assert X.load_draft(folder, target).config.layer_ids == (0, 2, 4)


def test_load_draft_verifies_checksums_config_and_target(target, tmp_path):
    draft = trained_like(target, (1, 3), 24)
    X.save_draft(draft, tmp_path, target=target)
    weights = (tmp_path / "model.safetensors").read_bytes()
    flipped = bytearray(weights)
    flipped[-5] ^= 0x01  # one bit of one weight
    rewrite(tmp_path, "model.safetensors", bytes(flipped), update_record=False)
    with pytest.raises(ValueError, match="model.safetensors: checksum mismatch"):
        X.load_draft(tmp_path, target)
    rewrite(tmp_path, "model.safetensors", weights, update_record=False)
    config = json.loads((tmp_path / "config.json").read_text())
    edited = {**config, "eagle_aux_hidden_state_layer_ids": [2, 3]}
    rewrite(tmp_path, "config.json", json.dumps(edited), update_record=False)
    with pytest.raises(ValueError, match="config.json: checksum mismatch"):
        X.load_draft(tmp_path, target)
    for change in (
        {"eagle_aux_hidden_state_layer_ids": [2, 3]},
        {"transformer_layer_config": {**config["transformer_layer_config"], "rms_norm_eps": 0.5}},
        {"transformer_layer_config": {**config["transformer_layer_config"], "rope_theta": 99.0}},
        {"transformer_layer_config": {**config["transformer_layer_config"], "hidden_act": "gelu"}},
    ):
        rewrite(tmp_path, "config.json", json.dumps({**config, **change}))  # consistent checksums, other content
        with pytest.raises(ValueError, match="config.json: .*elsi's record"):
            X.load_draft(tmp_path, target)
    rewrite(tmp_path, "config.json", json.dumps(config, indent=2, sort_keys=True) + "\n")
    same_shape = random_model(
        target.config.model_type,
        n_layers=5,
        hidden_size=32,
        vocab_size=70,
        seed=1,
        **({"num_key_value_heads": 2} if target.config.model_type == "qwen2" else {}),
    )
    with pytest.raises(ValueError, match="another model of the same shape"):
        X.load_draft(tmp_path, same_shape)
    assert X.load_draft(tmp_path, target).config == draft.config
    (tmp_path / "elsi.json").unlink()
    with pytest.raises(ValueError, match="elsi.json"):
        X.load_draft(tmp_path, target)


def test_an_export_of_the_first_format_is_replaced_not_refused(target, tmp_path):
    folder = tmp_path / "old"
    folder.mkdir()
    (folder / "config.json").write_text(
        json.dumps({"speculators_model_type": "eagle3", "eagle_aux_hidden_state_layer_ids": [2, 4]})
    )
    (folder / "elsi.json").write_text(json.dumps({"format": "speculators", "layer_ids_elsi": [1, 3]}))
    with pytest.raises(ValueError, match="elsi.json: not an elsi export of format 2"):
        X.load_draft(folder, target)
    X.save_draft(trained_like(target, (1, 3), 24), folder, target=target)
    assert X.load_draft(folder, target).config.layer_ids == (1, 3)


def test_a_model_folder_with_a_first_format_record_is_never_replaced(target, tmp_path):
    """Format 1 kept no checksums: a folder whose config is a model's, not a draft's, is refused whatever
    its elsi.json says, and the model's weights stay."""
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}))
    (folder / "model.safetensors").write_bytes(b"the target's weights")
    (folder / "elsi.json").write_text(json.dumps({"layer_ids_elsi": [1]}))
    with pytest.raises(FileExistsError, match="not an earlier elsi export"):
        X.save_draft(trained_like(target, (1, 3), 24), folder, target=target)
    assert (folder / "model.safetensors").read_bytes() == b"the target's weights"


def test_an_empty_verifier_is_refused(target, tmp_path, monkeypatch):
    """An export whose verifier is empty is refused: engines would have no target to verify with."""
    draft = trained_like(target, (1, 3), 24)
    for verifier in ("", "   "):
        with pytest.raises(ValueError, match="verifier must be the path or hub id"):
            X.save_draft(draft, tmp_path / "a", target=target, verifier=verifier)
    monkeypatch.setattr(target.config, "_name_or_path", "")
    with pytest.raises(ValueError, match="names no folder or hub id"):
        X.save_draft(draft, tmp_path / "b", target=target)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_a_relative_verifier_folder_is_recorded_by_its_absolute_path(target, tmp_path, monkeypatch):
    """Engines started from another folder would read "tiny" as a hub id or another folder; a hub id that
    is no folder here stays as given. A numpy integer is a speculative_tokens like any other."""
    import numpy as np

    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny").mkdir()
    draft = trained_like(target, (1, 3), 24)
    X.save_draft(draft, tmp_path / "a", target=target, verifier="tiny", speculative_tokens=np.int64(4))
    config = json.loads((tmp_path / "a" / "config.json").read_text())["speculators_config"]
    assert config["verifier"]["name_or_path"] == str(tmp_path / "tiny")
    assert config["proposal_methods"][0]["speculative_tokens"] == 4
    X.save_draft(draft, tmp_path / "b", target=target, verifier="org/target")
    assert (
        json.loads((tmp_path / "b" / "config.json").read_text())["speculators_config"]["verifier"]["name_or_path"]
        == "org/target"
    )


def test_the_export_records_the_numeric_settings(target, tmp_path):
    """elsi.json says how the draft was trained (draft matmuls and target features), and load_draft
    gives it back; a draft elsi did not train says so instead of guessing."""
    draft = trained_like(target, (1, 3), 24)
    X.save_draft(draft, tmp_path / "a", target=target, verifier="local/target")
    record = json.loads((tmp_path / "a" / "elsi.json").read_text())
    assert "not recorded" in record["numeric"]["training"] and X.load_draft(tmp_path / "a", target).numeric is None
    draft.numeric = {"draft matmuls": "float32", "target features": "live (bf16 forward)"}
    X.save_draft(draft, tmp_path / "b", target=target, verifier="local/target")
    assert json.loads((tmp_path / "b" / "elsi.json").read_text())["numeric"] == draft.numeric
    assert X.load_draft(tmp_path / "b", target).numeric == draft.numeric
    record = json.loads((tmp_path / "b" / "elsi.json").read_text())
    record["numeric"] = {"draft matmuls": "fp8", "nonsense": 1}  # a draft's settings that no run has
    (tmp_path / "b" / "elsi.json").write_text(json.dumps(record))
    with pytest.raises(X.ExportError, match=r"elsi.json: numeric = .*'fp8'.*not a draft's settings"):
        X.load_draft(tmp_path / "b", target)
    draft.numeric = {"draft matmuls": "bf16", "target features": "bf16"}
    with pytest.raises(X.ExportError, match="the draft: numeric"):
        X.save_draft(draft, tmp_path / "c", target=target, verifier="local/target")


def test_a_resealed_export_that_contradicts_itself_is_refused_naming_the_file(target, tmp_path):
    """Behind valid checksums (rewrite updates elsi.json): the ids vLLM's V2 runner reads apart from
    eagle_config's, the aux states switched off, a record whose engine ids differ, an openvino config
    without its ids, a truncated weights file: each refused, naming the file."""
    draft = trained_like(target, (1, 2, 4), 24)
    eagle = X.save_draft(draft, tmp_path / "eagle", target=target, format="eagle")
    config = json.loads((eagle / "config.json").read_text())
    for change, reason in (
        ({"eagle_aux_hidden_state_layer_ids": [1, 2, 3]}, "must be one set"),
        ({"eagle_config": {**config["eagle_config"], "use_aux_hidden_state": False}}, "must be one set, used"),
    ):
        rewrite(eagle, "config.json", json.dumps({**config, **change}))
        with pytest.raises(X.ExportError, match=reason) as err:
            X.load_draft(eagle, target)
        assert "config.json" in str(err.value)
    rewrite(eagle, "config.json", json.dumps(config))
    record = json.loads((eagle / "elsi.json").read_text())
    (eagle / "elsi.json").write_text(json.dumps({**record, "engine_layer_ids": [9, 9, 9]}))
    with pytest.raises(X.ExportError, match=r"elsi.json: engine_layer_ids \[9, 9, 9\]"):
        X.load_draft(eagle, target)
    ov = X.save_draft(draft, tmp_path / "openvino", target=target, format="openvino")
    ov_config = json.loads((ov / "config.json").read_text())
    rewrite(ov, "config.json", json.dumps({k: v for k, v in ov_config.items() if k != "hidden_layers_list"}))
    with pytest.raises(X.ExportError, match="config.json: malformed"):
        X.load_draft(ov, target)
    rewrite(ov, "config.json", json.dumps(ov_config))
    rewrite(ov, "model.safetensors", (ov / "model.safetensors").read_bytes()[:100])
    with pytest.raises(X.ExportError, match="model.safetensors: unreadable"):
        X.load_draft(ov, target)


@pytest.mark.parametrize(
    "fmt, change, reason",
    [
        ("eagle", lambda c, w: c.update(attention_bias=True), "attention_bias = True"),
        ("openvino", lambda c, w: c.update(tie_word_embeddings=True), "tie_word_embeddings = True"),
        (
            "speculators",
            lambda c, w: c["speculators_config"]["proposal_methods"][0].update(speculative_tokens=500),
            "speculative_tokens = 500",
        ),
        ("speculators", lambda c, w: c["speculators_config"].update(algorithm="eagle"), "algorithm = 'eagle'"),
        ("speculators", lambda c, w: c["speculators_config"]["verifier"].update(name_or_path=""), "no target"),
        (
            "speculators",
            lambda c, w: c["speculators_config"]["verifier"].update(architectures=["Qwen2ForCausalLM"]),
            r"verifier's architectures \['Qwen2ForCausalLM'\], the target's",
        ),
        (
            "speculators",
            lambda c, w: c["speculators_config"]["verifier"].update(name_or_path="another/model"),
            "name_or_path 'another/model', elsi's record 'local/random-target'",
        ),
        # fields an engine builds from, beyond the named checks above
        (
            "speculators",
            lambda c, w: c["transformer_layer_config"].update(num_hidden_layers=2),
            "transformer_layer_config.num_hidden_layers = 2, elsi writes 1",
        ),
        ("eagle", lambda c, w: c.update(num_hidden_layers=2), "num_hidden_layers = 2, elsi writes 1"),
        ("eagle", lambda c, w: c.update(max_position_embeddings=1), "max_position_embeddings = 1, elsi writes"),
        (
            "speculators",
            lambda c, w: c["transformer_layer_config"].update(architectures=["Qwen3ForCausalLM"], model_type="qwen3"),
            "transformer_layer_config.architectures\\[0\\] = 'Qwen3ForCausalLM'",
        ),
        (
            "speculators",
            lambda c, w: c["speculators_config"]["proposal_methods"][0].update(accept_tolerance=5.0),
            r"proposal_methods\[0\].accept_tolerance = 5.0, elsi writes 0.0",
        ),
        (
            "speculators",
            lambda c, w: c["speculators_config"]["proposal_methods"][0].update(verifier_accept_k=7),
            "verifier_accept_k = 7, elsi writes 1",
        ),
        (
            "eagle",
            lambda c, w: c.pop("eagle_aux_hidden_state_layer_ids"),
            "eagle_aux_hidden_state_layer_ids = '<absent>'",
        ),
        (
            "openvino",
            lambda c, w: c.update(eagle_aux_hidden_state_layer_ids=[0, 0, 0]),
            r"holds both OpenVINO's hidden_layers_list and vLLM's layer ids",  # which of the two an engine reads
        ),
        ("eagle", lambda c, w: c.update(torch_dtype="float16"), "torch_dtype = 'float16'"),
        ("speculators", lambda c, w: c.update(speculators_config=None), "config.json: malformed"),
        ("speculators", lambda c, w: c.update(transformer_layer_config=None), "config.json: malformed"),
        ("eagle", lambda c, w: w.update({"fc.weight": w["fc.weight"] * float("nan")}), "non-finite values"),
        ("eagle", lambda c, w: w.update({"fc.weight": w["fc.weight"].half()}), "torch.float16"),
        ("eagle", lambda c, w: w.update({"d2t": w["d2t"].float()}), "not int64"),
        ("eagle", lambda c, w: w.update({"fc.weight": w["fc.weight"][:, :8]}), "weights of the wrong shape"),
        (
            "eagle",
            lambda c, w: w["d2t"].__setitem__(0, w["d2t"][0] + 1),
            "model.safetensors: d2t / t2d: d2t and t2d do not",
        ),
        ("speculators", lambda c, w: w["d2t"].__setitem__(0, w["d2t"][0] + 1), "model.safetensors: d2t / t2d"),
    ],
)
def test_a_resealed_export_that_builds_another_model_is_refused(target, tmp_path, fmt, change, reason):
    """Config fields that change what an engine builds, and weights that are not elsi's (NaN, fp16, a float
    offset table, a wrong shape), are refused even behind a re-signed elsi.json: otherwise such an export
    loads (or raises torch's error) and builds another model."""
    folder = X.save_draft(trained_like(target, (1, 2, 4), 24), tmp_path / "d", target=target, format=fmt)
    config = json.loads((folder / "config.json").read_text())
    weights = load_file(str(folder / "model.safetensors"))
    change(config, weights)
    rewrite(folder, "config.json", json.dumps(config))
    save_file({k: v.contiguous() for k, v in weights.items()}, str(folder / "model.safetensors"))
    rewrite(folder, "model.safetensors", (folder / "model.safetensors").read_bytes())
    with pytest.raises(X.ExportError, match=reason):
        X.load_draft(folder, target)


def test_an_export_record_listing_a_path_outside_its_folder_is_refused(target, tmp_path):
    folder = X.save_draft(trained_like(target, (1, 2, 4), 24), tmp_path / "d", target=target)
    record = json.loads((folder / "elsi.json").read_text())
    (folder / "elsi.json").write_text(json.dumps({**record, "files": {**record["files"], "../outside.txt": "0"}}))
    with pytest.raises(X.ExportError, match="its 'files' must list exactly"):
        X.load_draft(folder, target)


def test_a_folder_whose_record_lists_files_it_did_not_write_is_never_replaced(target, tmp_path):
    """A record that says elsi wrote a user's file (forged, or written over by the user's own work) gives
    no leave to delete it: each listed file must still be what the export wrote, by its checksum."""
    folder = tmp_path / "thesis"
    folder.mkdir()
    (folder / "thesis.tex").write_text("mine")
    record = {"written_by": "elsi save_draft", "files": {"thesis.tex": "0" * 64}}
    (folder / "elsi.json").write_text(json.dumps(record))
    with pytest.raises(FileExistsError, match=r"holds \['thesis.tex'\], which differ from what the earlier export"):
        X.save_draft(trained_like(target, (1, 3), 24), folder, target=target)
    assert (folder / "thesis.tex").read_text() == "mine"


def test_an_export_lists_exactly_its_two_files_and_its_verifier_has_no_stray_spaces(target, tmp_path):
    folder = X.save_draft(trained_like(target, (1, 3), 24), tmp_path / "d", target=target)
    index = folder / "model.safetensors.index.json"
    index.write_text("{}")
    record = json.loads((folder / "elsi.json").read_text())
    record["files"]["model.safetensors.index.json"] = hashlib.sha256(b"{}").hexdigest()
    (folder / "elsi.json").write_text(json.dumps(record))
    with pytest.raises(X.ExportError, match="must list exactly"):
        X.load_draft(folder, target)
    with pytest.raises(ValueError, match="no surrounding spaces"):
        X.save_draft(trained_like(target, (1, 3), 24), tmp_path / "e", target=target, verifier=" org/model\n")


@pytest.mark.parametrize("name", [".", "sub/..", ""])
def test_an_export_folder_must_have_a_name_of_its_own(target, tmp_path, monkeypatch, name):
    """'.' or a path ending in '..' would replace the folder the user stands in, or its parent: refused
    before anything is written."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    with pytest.raises(ValueError, match="name the folder to write"):
        X.save_draft(trained_like(target, (1, 3), 24), name, target=target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sub"]


def test_an_export_loaded_onto_a_target_it_does_not_fit_is_refused_naming_the_folder(target, tmp_path):
    """A target of other shapes (more layers here) than the export's: an ExportError naming the folder."""
    folder = X.save_draft(trained_like(target, (1, 2), 24), tmp_path / "d", target=target)
    config = target.config
    deeper = random_model(
        config.model_type, n_layers=config.num_hidden_layers + 2, hidden_size=config.hidden_size,
        vocab_size=config.vocab_size, seed=0, num_key_value_heads=config.num_key_value_heads,
    )  # fmt: skip
    with pytest.raises(X.ExportError, match=f"{folder}: the draft does not fit this target"):
        X.load_draft(folder, deeper)


def test_a_draft_saved_with_another_target_of_its_shapes_is_refused(target, tmp_path):
    """The export names its verifier and that model's weights: a draft trained on one target, saved with
    another of the same shapes, would be certified for the wrong model (and refused on its own)."""
    draft = trained_like(target, (1, 2, 4), 24)
    config = target.config
    other = random_model(
        config.model_type, n_layers=config.num_hidden_layers, hidden_size=config.hidden_size,
        vocab_size=config.vocab_size, seed=1, num_key_value_heads=config.num_key_value_heads,
    )  # fmt: skip
    with pytest.raises(ValueError, match="reads another model's token embedding than `target`'s"):
        X.save_draft(draft, tmp_path / "d", target=other)
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize(
    "config",
    [
        {"speculators_model_type": "eagle3", "eagle_aux_hidden_state_layer_ids": [2, "4", 6]},
        {"speculators_model_type": "eagle3", "eagle_aux_hidden_state_layer_ids": [2, -5, 6]},
        {"speculators_model_type": "eagle3", "eagle_aux_hidden_state_layer_ids": [True, 4]},
        {"speculators_model_type": "eagle3", "eagle_aux_hidden_state_layer_ids": []},
        {"architectures": ["LlamaForCausalLMEagle3"], "eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 2, 2]}},
        {"architectures": ["LlamaForCausalLMEagle3"], "hidden_layers_list": [2.0, 15, 27]},
        {"architectures": "LlamaForCausalLMEagle3", "hidden_layers_list": [2, 15, 27]},
        {"architectures": None, "hidden_layers_list": [2, 15, 27]},
        {
            "architectures": ["LlamaForCausalLMEagle3"],
            "hidden_layers_list": [1, 2, 4],
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 3, 5]},
        },
    ],
)
def test_a_config_whose_layer_ids_are_no_layers_is_refused(tmp_path, config):
    """The ids an engine reads from an exported config: text, negative, true/false, repeated or missing ids
    are no layer set, so read_layout refuses them naming the file (it had returned them as found)."""
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(
        X.ExportError,
        match=r"config\.json: (its layer ids .* distinct non-negative integers|field 'architectures'|holds both)",
    ):
        X.read_layout(tmp_path)
