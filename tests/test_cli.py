"""The `elsi` command on a tiny random model saved as a local folder, with ShareGPT data files:
answers on stdout, exit status 2 for bad arguments and 1 for failures (one line, no traceback),
provenance and the cache (a second run prints the same answer), every engine format converted from
elsi's convention, and each engine's ids pointing at the very tensor elsi measured."""
import json

import numpy as np
import pytest
import torch

from conftest import make_conversations, replied_conversations
from elsi_lib import cli, random_model
from elsi_lib.conventions import ENGINE_FORMATS, engine_fragment

pytestmark = pytest.mark.usefixtures("one_torch_thread")
N_LAYERS = 8


@pytest.fixture(scope="module")
def folder(tmp_path_factory, tiny_tokenizer):
    path = tmp_path_factory.mktemp("model")
    model = random_model(n_layers=N_LAYERS, hidden_size=32, vocab_size=len(tiny_tokenizer), seed=0)
    model.save_pretrained(path)
    tiny_tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "convs.jsonl"
    records = [{"conversations": [{"from": "human" if m["role"] == "user" else "gpt", "value": m["content"]} for m in c]}
               for c in replied_conversations(24, seed=3, reply_words=(40, 80))]
    path.write_text("\n".join(json.dumps(r) for r in records))
    return path


def run(capsys, *argv):
    code = cli.main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def base(folder, data):
    return ["--model", folder, "--data", data, "--prompts", 24, "--block", 4, "--reply-model", "self"]


def test_select_text_json_and_cache(capsys, folder, data):
    code, text, _ = run(capsys, "select", *base(folder, data))
    assert code == 0 and "EAGLE3" in text and "exhaustive optimum" in text
    code, out, _ = run(capsys, "select", *base(folder, data), "--format", "json")
    result = json.loads(out)
    assert code == 0 and len(result["layers"]) == 3 and result["entropy"] <= result["exhaustive_optimum"]["entropy"] + 1e-9
    prov = result["provenance"]
    assert prov["rho"] == 0.3 and prov["block"] == 4 and prov["prompts"] == 24 and len(prov["weights_sha256"]) == 64
    assert len(prov["conversations_sha256"]) == 64 and prov["elsi_version"]
    assert result["vllm_layer_ids"] == [l + 1 for l in result["layers"]]
    again = run(capsys, "select", *base(folder, data), "--format", "json")
    assert again[0] == 0 and json.loads(again[1]) == result  # the same inputs: the same answer (cached capture)


@pytest.mark.parametrize("method", ["elsi-c", "exhaustive", "eagle3", "eagle2"])
def test_methods(capsys, folder, data, method):
    code, out, _ = run(capsys, "select", *base(folder, data), "--method", method, "--m", 2, "--format", "json")
    layers = json.loads(out)["layers"]
    expected = {"eagle3": [1, 3, 4], "eagle2": [N_LAYERS - 1]}  # EAGLE's inputs of (2, 4, 5) = outputs of (1, 3, 4)
    assert code == 0 and layers == expected.get(method, layers) and len(layers) == {"eagle3": 3, "eagle2": 1}.get(method, 2)


@pytest.mark.parametrize("fmt", ENGINE_FORMATS)
def test_engine_formats_round_trip(capsys, folder, data, fmt, tmp_path):
    out_file = tmp_path / "fragment.json"
    code, out, _ = run(capsys, "select", *base(folder, data), "--format", fmt, "--out", out_file)
    assert code == 0 and json.loads(out_file.read_text()) == json.loads(out)
    fragment = json.loads(out)
    layers = fragment["elsi_provenance"]["layers_elsi"]
    ids = (fragment["eagle_config"]["eagle_aux_hidden_state_layer_ids"] if fmt == "sglang" else
           fragment.get("aux_hidden_state_layer_ids") or fragment["eagle_aux_hidden_state_layer_ids"])
    shift = 1 if fmt in ("vllm", "speculators") else 0
    assert [i - shift for i in ids] == layers  # back to elsi's convention


def test_refusals_and_exit_codes(capsys, folder, data):
    code, _, err = run(capsys, "select", *base(folder, data), "--m", 2, "--format", "specforge")
    assert code == 2 and "exactly three" in err and "Traceback" not in err
    code, _, err = run(capsys, "select", *base(folder, data), "--rho", 1.5)
    assert code == 2 and "--rho" in err
    code, _, err = run(capsys, "select", *base(folder, data), "--m", N_LAYERS + 1)
    assert code == 2 and "exceeds" in err
    code, _, err = run(capsys, "select", "--model", folder, "--data", "no-such-file.json")
    assert code == 2 and "no-such-file.json" in err
    code, _, err = run(capsys, "select", "--model", folder / "missing", "--data", data, "--reply-model", "self")
    assert code in (1, 2) and err.startswith("elsi: ") and "Traceback" not in err
    with pytest.raises(SystemExit) as exit_info:  # argparse: unknown option
        cli.main(["select", "--model", str(folder), "--frobnicate"])
    assert exit_info.value.code == 2


def test_help_has_examples(capsys):
    for command in ("select", "capture", "report"):
        with pytest.raises(SystemExit) as exit_info:
            cli.main([command, "--help"])
        assert exit_info.value.code == 0 and "example:" in capsys.readouterr().out


def test_capture_report_and_stability(capsys, folder, data, tmp_path):
    code, out, _ = run(capsys, "capture", *base(folder, data))
    assert code == 0 and "Z (8, 4," in out
    code, out, _ = run(capsys, "report", *base(folder, data), "--figures", tmp_path)
    rows = [l for l in out.splitlines() if l.strip() and l.split()[0].isdigit()]
    assert code == 0 and len(rows) == N_LAYERS and list(tmp_path.glob("profile_*.png"))
    assert all(0 < float(r.split()[2]) <= 1 for r in rows)  # top-row energy shares
    code, out, _ = run(capsys, "select", *base(folder, data), "--stability", 5, "--format", "json")
    stability = json.loads(out)["stability"]
    assert code == 0 and stability["resamples"] == 5
    assert abs(sum(c["share"] for c in stability["choices"]) - 1) < 1e-9
    assert 0 <= stability["share_choosing_this_set"] <= 1


@pytest.mark.parametrize("fmt", ENGINE_FORMATS)
def test_engine_ids_point_at_the_tensor_elsi_measured(fmt, tiny_model, tiny_tokenizer):
    """Capture each engine's meaning with hooks: vLLM / speculators id k is the input of decoder layer k
    (a forward pre-hook), SGLang / SpecForge id k the output of layer k (a forward hook); elsi's layer l
    is the output of layer l. The tensors an engine's ids name equal those of elsi's layers."""
    layers = (0, 2, 3)  # 3 is the last layer: vLLM's id 4 = N
    n = len(tiny_model.get_decoder().layers)
    fragment = engine_fragment(layers, n, fmt)
    ids = (fragment["eagle_config"]["eagle_aux_hidden_state_layer_ids"] if fmt == "sglang" else
           fragment.get("aux_hidden_state_layer_ids") or fragment["eagle_aux_hidden_state_layer_ids"])
    inputs, outputs, handles = {}, {}, []
    for i, layer in enumerate(tiny_model.get_decoder().layers):
        handles.append(layer.register_forward_pre_hook(
            lambda mod, args, kwargs, i=i: inputs.__setitem__(i, (args[0] if args else kwargs["hidden_states"]).clone()),
            with_kwargs=True))
        handles.append(layer.register_forward_hook(
            lambda mod, args, out, i=i: outputs.__setitem__(i, (out[0] if isinstance(out, tuple) else out).clone())))
    handles.append(tiny_model.get_decoder().norm.register_forward_pre_hook(  # vLLM's id N: the residual stream
        lambda mod, args: inputs.__setitem__(n, args[0].clone())))          # after the last layer, before the norm
    ids_tensor = torch.tensor([tiny_tokenizer("alpha beta gamma delta")["input_ids"]])
    with torch.no_grad():
        tiny_model(ids_tensor)
    for h in handles:
        h.remove()
    engine = [inputs[k] for k in ids] if fmt in ("vllm", "speculators") else [outputs[k] for k in ids]
    for mine, theirs in zip([outputs[l] for l in layers], engine):
        assert torch.equal(mine, theirs)
