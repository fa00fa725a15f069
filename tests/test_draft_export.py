"""Drafts written in the speculators and EAGLE layouts (elsi_lib.draft.export) and read back: identical
logits for m = 1..4 on both target families, layer ids in the engines' convention (elsi's l is their
l + 1), every weight present, and refusals where a layout cannot express the draft."""
import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from elsi_lib import random_model
from elsi_lib.draft import Eagle3Draft, draft_vocabulary
from elsi_lib.draft import export as X

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
    return random_model(request.param, n_layers=5, hidden_size=32, vocab_size=70, seed=0, **extra)


@pytest.mark.parametrize("fmt", X.FORMATS)
@pytest.mark.parametrize("layers", [(4,), (0, 3), (1, 2, 4), (0, 1, 2, 3)])
def test_round_trip_gives_identical_logits(target, fmt, layers, tmp_path):
    draft = trained_like(target, layers, 24)
    X.save_draft(draft, tmp_path, target=target, source=layers, format=fmt, verifier="local/target")
    back = X.load_draft(tmp_path, target)
    ids = torch.randint(0, 70, (2, 9), generator=torch.Generator().manual_seed(0))
    features = torch.randn(2, 9, len(layers) * 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(draft(ids, features=features)[0], back(ids, features=features)[0])
    assert back.config.layer_ids == layers
    assert torch.equal(back.d2t, draft.d2t) and torch.equal(back.t2d, draft.t2d)
    layout, config, ids_engine = X.read_layout(tmp_path)
    assert layout == fmt and ids_engine == [l + 1 for l in layers]
    names = set(load_file(str(tmp_path / "model.safetensors")))
    prefix = "layers.0." if fmt == "speculators" else "midlayer."
    assert f"{prefix}self_attn.q_proj.weight" in names and {"fc.weight", "norm.weight", "lm_head.weight", "d2t", "t2d"} <= names
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
    provenance = json.loads((tmp_path / "elsi.json").read_text())
    assert provenance["layer_ids_elsi"] == list(layers) and provenance["engine_layer_ids"] == ids_engine


def test_full_vocabulary_writes_no_maps(target, tmp_path):
    draft = trained_like(target, (1, 3), 70)
    X.save_draft(draft, tmp_path, target=target, source=(1, 3))
    assert not {"d2t", "t2d"} & set(load_file(str(tmp_path / "model.safetensors")))
    back = X.load_draft(tmp_path, target)
    features = torch.randn(1, 4, 64)
    with torch.no_grad():
        assert torch.equal(draft(torch.arange(4)[None], features=features)[0], back(torch.arange(4)[None], features=features)[0])


def test_missing_or_unexpected_weights_are_an_error(target, tmp_path):
    draft = trained_like(target, (1, 3), 24)
    X.save_draft(draft, tmp_path, target=target, source=(1, 3))
    path = str(tmp_path / "model.safetensors")
    weights = load_file(path)
    save_file({k: v for k, v in weights.items() if k != "layers.0.mlp.up_proj.weight"}, path)
    with pytest.raises(ValueError, match="missing weights.*up_proj"):
        X.load_draft(tmp_path, target)
    save_file({**weights, "embed_tokens.weight": torch.zeros(70, 32)}, path)
    with pytest.raises(ValueError, match="unexpected weights.*embed_tokens"):
        X.load_draft(tmp_path, target)


def test_refusals(target, tmp_path):
    draft = trained_like(target, (4,), 24)
    with pytest.raises(ValueError, match="no engine layer id"):
        X.save_draft(draft, tmp_path, target=target, source="final")
    with pytest.raises(ValueError, match="not the draft's layer set"):
        X.save_draft(draft, tmp_path, target=target, source=(3,))
    with pytest.raises(ValueError, match="unknown format"):
        X.save_draft(draft, tmp_path, target=target, source=(4,), format="sglang")
    X.save_draft(draft, tmp_path, target=target, source=(4,))
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "model_type": "llama"}))
    with pytest.raises(ValueError, match="top-level model_type"):
        X.load_draft(tmp_path, target)
    for change in ({"norm_before_residual": True}, {"fc_norm": True}, {"target_hidden_size": 64}):
        (tmp_path / "config.json").write_text(json.dumps({**config, **change}))
        with pytest.raises(ValueError, match=next(iter(change))):
            X.load_draft(tmp_path, target)
    (tmp_path / "config.json").write_text(json.dumps({k: v for k, v in config.items() if k != "norm_before_residual"}))
    with pytest.raises(ValueError, match="norm_before_residual"):  # the speculators layout's default is true
        X.load_draft(tmp_path, target)
    wider = random_model("llama", n_layers=5, hidden_size=48, vocab_size=70, seed=0)
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="hidden_size"):
        X.load_draft(tmp_path, wider)
