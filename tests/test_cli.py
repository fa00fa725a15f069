"""The `elsi` command on a tiny random model saved as a local folder, with ShareGPT data files:
answers on stdout, exit status 2 for bad arguments and 1 for failures (one line, no traceback),
provenance and the cache (a second run prints the same answer), every engine format converted from
elsi's convention, and each engine's ids pointing at the very tensor elsi measured."""

import json
import os

import pytest
import torch

from conftest import replied_conversations
from elsi_lib import cli, cli_args, random_model
from elsi_lib.draft import evidence as ev
from elsi_lib.selection.conventions import ENGINE_FORMATS, engine_fragment
from test_conventions import openvino_captured, sglang_captured, speculators_recipe, vllm_captured

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
    records = [
        {"conversations": [{"from": "human" if m["role"] == "user" else "gpt", "value": m["content"]} for m in c]}
        for c in replied_conversations(24, seed=3, reply_words=(40, 80))
    ]
    path.write_text("\n".join(json.dumps(r) for r in records))
    return path


OVERRIDABLE = ("--model", "--prompts", "--block", "--reply-model", "--method")  # base's single-valued options


def overridden(argv: list) -> list:
    """`argv` with an option of OVERRIDABLE given again keeping its last value: the tests add to `base`
    what they change (the command itself refuses an option given twice)."""
    last = {a: i for i, a in enumerate(argv) if a in OVERRIDABLE}
    out, skip = [], False
    for i, a in enumerate(argv):
        if skip:
            skip = False
            continue
        if a in OVERRIDABLE and last[a] != i:
            skip = True
            continue
        out.append(a)
    return out


def run(capsys, *argv):
    code = cli.main(overridden([str(a) for a in argv]))
    out = capsys.readouterr()
    return code, out.out, out.err


def base(folder, data):
    return ["--model", folder, "--data", data, "--prompts", 24, "--block", 4, "--reply-model", "self"]


def select_base(folder, data):
    """`base` with ELSI asked for by name: these tests read ELSI's answer (the default is the probe's)."""
    return [*base(folder, data), "--method", "elsi"]


def test_select_text_json_and_cache(capsys, folder, data):
    code, text, _ = run(capsys, "select", *select_base(folder, data))
    assert code == 0 and "EAGLE3" in text and "exhaustive optimum" in text
    code, out, _ = run(capsys, "select", *select_base(folder, data), "--format", "json")
    result = json.loads(out)
    assert (
        code == 0 and len(result["layers"]) == 3 and result["entropy"] <= result["exhaustive_optimum"]["entropy"] + 1e-9
    )
    prov = result["provenance"]
    assert prov["rho"] == 0.3 and prov["block"] == 4 and prov["prompts"] == 24 and len(prov["weights_sha256"]) == 64
    assert len(prov["conversations_sha256"]) == 64 and prov["elsi_version"]
    # the engine's ids are the decision's set's (the criterion's, or the default it keeps), as --format vllm writes
    assert result["recommended_layers"] == result["decision"]["recommended_layers"]
    assert result["vllm_layer_ids"] == [l + 1 for l in result["recommended_layers"]]
    code, fragment, err = run(capsys, "select", *select_base(folder, data), "--format", "vllm", "--stability", 20)
    assert json.loads(fragment)["elsi_provenance"]["layers_fragment"] == result["recommended_layers"]
    assert "share_choosing_this_set" in json.loads(fragment)["elsi_provenance"]["stability"]  # the bootstrap it ran
    assert result["recommended_layers"] != result["layers"]  # no family's evidence: the default kept, ...
    assert f"the config carries the decision's set {tuple(result['recommended_layers'])}" in err  # ... and said
    again = run(capsys, "select", *select_base(folder, data), "--format", "json")
    assert again[0] == 0 and json.loads(again[1]) == result  # the same inputs: the same answer (cached capture)


@pytest.mark.parametrize("method", ["elsi-c", "exhaustive", "eagle3", "eagle2"])
def test_methods(capsys, folder, data, method):
    m = [] if method in ("eagle3", "eagle2") else ["--m", 2]  # a fixed method's set is fixed by the layer count
    code, out, _ = run(capsys, "select", *select_base(folder, data), "--method", method, *m, "--format", "json")
    layers = json.loads(out)["layers"]
    expected = {"eagle3": [1, 3, 4], "eagle2": [N_LAYERS - 1]}  # EAGLE's inputs of (2, 4, 5) = outputs of (1, 3, 4)
    assert (
        code == 0
        and layers == expected.get(method, layers)
        and len(layers) == {"eagle3": 3, "eagle2": 1}.get(method, 2)
    )


@pytest.mark.parametrize("fmt", ENGINE_FORMATS)
def test_engine_formats_round_trip(capsys, folder, data, fmt, tmp_path):
    """Each format's ids, read back by the engine's own rule (tests/test_conventions.py), are the
    decision's set (the selected one, or the engine's default kept); an engine's format restricts the
    search to the sets it can feed a draft (otherwise a set holding the last layer is refused by SGLang /
    SpecForge and the user gets no set at all), and the answer says what the restriction cost."""
    out_file = tmp_path / "fragment.json"
    free = json.loads(run(capsys, "select", *select_base(folder, data), "--format", "json")[1])
    code, out, err = run(capsys, "select", *select_base(folder, data), "--format", fmt, "--out", out_file)
    assert code == 0 and json.loads(out_file.read_text()) == json.loads(out), err
    fragment = json.loads(out)
    layers = fragment["elsi_provenance"]["layers_elsi"]
    assert fragment["elsi_provenance"]["architecture"] == "LlamaForCausalLM"
    info = fragment["elsi_provenance"]["restriction"]
    assert info["unrestricted"]["layers"] == free["layers"] and info["restricted"]["layers"] == layers
    assert info["restricted"]["score"] <= info["unrestricted"]["score"] + 1e-12  # set entropy: higher is better
    if fmt in ("speculators", "sglang", "specforge"):
        assert N_LAYERS - 1 not in layers and info["rules"]
    elif fmt == "openvino":  # three layers, the last one allowed: the free choice of m = 3 stands
        assert layers == free["layers"] and info["rules"] == [
            "exactly three layers: OpenVINO GenAI's hidden_layers_list"
        ]
    else:
        assert layers == free["layers"] and not info["rules"]
    # the fragment carries the decision's set: the criterion's where it is predicted to beat the default
    decision = fragment["elsi_provenance"]["decision"]
    layers = fragment["elsi_provenance"]["layers_fragment"]
    assert layers == (decision["best_set"] if decision["verdict"] == "change" else decision["default_set"])
    if fmt in ("vllm", "speculators"):
        assert list(vllm_captured(fragment["eagle_aux_hidden_state_layer_ids"], N_LAYERS)) == layers
    elif fmt == "openvino":
        assert list(openvino_captured(fragment["hidden_layers_list"], N_LAYERS)) == layers
    else:
        ids = fragment["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
        assert list(sglang_captured(ids, N_LAYERS, "LlamaForCausalLM")) == layers
    if fmt == "speculators":
        features, verifier_last = speculators_recipe(fragment, N_LAYERS)
        assert list(features) == layers and verifier_last == N_LAYERS - 1
        launch, train = fragment["recipe_commands"]
        ids = " ".join(str(l + 1) for l in layers)
        assert launch.endswith(f"--target-layer-ids {ids} {N_LAYERS}") and train.endswith(f"--target-layer-ids {ids}")


def test_an_engine_restriction_in_text_and_the_evidence(capsys, folder, data):
    """--engine restricts a text answer too and says what it cost; every answer ends with the project's
    evidence for the criterion (none for this random model: said plainly), and the decision: the engine's
    default set, kept or changed, and why (this 8-layer model is a family the ledger does not hold: the
    pooled fit's prediction, said so)."""
    code, text, _ = run(capsys, "select", *select_base(folder, data), "--engine", "speculators")
    assert code == 0 and "restricted to the sets speculators can feed a draft: no last layer (7)" in text
    assert "unrestricted" in text and "evidence: none of this model's own" in text
    assert "decision: " in text and "the pooled fit" in text
    code, out, _ = run(capsys, "select", *select_base(folder, data), "--format", "json", "--engine", "sglang")
    result = json.loads(out)
    assert code == 0 and N_LAYERS - 1 not in result["layers"] and result["restriction"]["engine"] == "sglang"
    assert N_LAYERS - 1 not in result["exhaustive_optimum"]["layers"]  # the optimum among the engine's sets too
    decision = result["decision"]
    assert (
        decision["default_set"] == [1, 3, 4] and decision["best_set"] == result["layers"]
    )  # EAGLE-3's rule on 8 layers
    assert decision["model"] == "pooled" and decision["pooled_because"]
    assert decision["verdict"] in ("change", "keep the default") and decision["reason"]
    for cell in decision["predicted_tau_difference"].values():
        assert cell["low"] <= cell["diff"] <= cell["high"]
    assert decision["recommended_layers"] == (decision["best_set"] if decision["verdict"] == "change" else [1, 3, 4])


def test_an_unusable_evidence_file_leaves_the_answer_with_one_line(capsys, folder, data, tmp_path, monkeypatch):
    """An evidence file that is missing or altered: the set still comes, with one line saying why, and
    no verdict pretending otherwise."""

    altered = json.loads(ev.EVIDENCE_PATH.read_text())
    altered["default_method"] = "elsi"
    (tmp_path / "altered.json").write_text(json.dumps(altered))
    for path, why in ((tmp_path / "missing.json", "no evidence file"), (tmp_path / "altered.json", "checksum")):
        monkeypatch.setattr(ev, "EVIDENCE_PATH", path)
        code, out, _ = run(capsys, "select", *select_base(folder, data), "--format", "json")
        result = json.loads(out)
        assert code == 0 and result["layers"] and result["evidence"][0].startswith("evidence: unavailable: ")
        assert why in result["evidence"][0] and result["decision"]["verdict"] == "no verdict"


def test_engine_refusals_come_before_the_capture(capsys, folder, data, no_capture):
    cases = [
        (["--engine", "speculators", "--method", "eagle2"], "cannot feed a draft --method eagle2's set (7,)"),
        (["--engine", "specforge", "--m", 2], "exactly three"),
        (["--format", "openvino", "--m", 2], "select with --m 3"),
        (["--format", "openvino", "--method", "eagle2"], "with --method eagle2, whose set has 1 layer"),
        (["--format", "sglang", "--engine", "vllm"], "--engine vllm with --format sglang"),
        (["--engine", "sglang", "--engine-version", "0.3.0"], "--engine-version 0.3.0: elsi has read"),
        (["--engine-version", "0.32.0"], "--engine-version needs --engine"),
    ]
    for extra, message in cases:
        code, out, err = run(capsys, "select", *select_base(folder, data), *extra)
        assert code == 2 and message in err and not out and "Traceback" not in err, (extra, err)


def test_text_format_names_every_engine(capsys, folder, data):
    code, text, _ = run(capsys, "select", *select_base(folder, data), "--method", "eagle3")
    assert code == 0 and "speculators' recipe: scripts/launch_vllm.py MODEL --target-layer-ids 2 4 5 8" in text
    assert "scripts/train.py ... --target-layer-ids 2 4 5" in text
    assert "SGLang eagle_aux_hidden_state_layer_ids (LlamaForCausalLM): [1, 3, 4]" in text


def test_refusals_and_exit_codes(capsys, folder, data):
    code, _, err = run(capsys, "select", *select_base(folder, data), "--m", 2, "--format", "specforge")
    assert code == 2 and "exactly three" in err and "Traceback" not in err
    code, _, err = run(capsys, "select", *select_base(folder, data), "--rho", 1.5)
    assert code == 2 and "--rho" in err
    code, _, err = run(capsys, "select", *select_base(folder, data), "--m", N_LAYERS + 1)
    assert code == 2 and "exceeds" in err
    code, _, err = run(capsys, "select", "--model", folder, "--data", "no-such-file.json")
    assert code == 2 and "no-such-file.json" in err
    code, _, err = run(capsys, "select", "--model", folder / "missing", "--data", data, "--reply-model", "self")
    assert code in (1, 2) and err.startswith("elsi: ") and "Traceback" not in err
    with pytest.raises(SystemExit) as exit_info:  # argparse: unknown option
        cli.main(["select", "--model", str(folder), "--frobnicate"])
    assert exit_info.value.code == 2


@pytest.fixture
def no_capture(monkeypatch):
    """The command must refuse before it writes a reply or captures anything."""
    import elsi_lib.hidden.replies

    def reached(*args, **kwargs):
        raise AssertionError("the command started its work before refusing")

    for module, name in (
        (cli, "capture_variants"),  # the capture, as the command calls it
        (elsi_lib.hidden.replies, "reply_conversations"),
    ):
        monkeypatch.setattr(module, name, reached)


def test_checks_run_before_the_capture(capsys, folder, data, tmp_path, no_capture):
    """Every check the arguments, the data files and the model's config allow runs before any work,
    and names the argument: the answer (stdout) stays empty and the exit status is 2."""
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    cases = [
        (["--m", 2, "--format", "specforge"], "exactly three"),
        (["--m", N_LAYERS + 1], f"--m {N_LAYERS + 1} exceeds the model's {N_LAYERS} layers"),
        (
            ["--method", "eagle3", "--stability", 3],
            "--stability needs a method scored from the capture (elsi, elsi-c, exhaustive)",
        ),
        (["--method", "eagle2", "--format", "sglang"], "last decoder layer"),  # (7,): out of SGLang's reach
        (["--method", "eagle2", "--format", "specforge"], "exactly three"),
        (["--prompts", 25], "--prompts 25: --data"),  # the file holds 24: refused, not clamped
        (["--out", tmp_path / "missing" / "set.json"], "does not exist"),
        (["--out", tmp_path], "is a folder"),
        (["--out", a_file / "set.json"], "is not a folder"),
        (["--out", folder / "answer.json"], "lies inside --model"),  # else written into the model's folder
        (["--out", ev.EVIDENCE_PATH], "lies inside elsi's package"),  # else the evidence file is overwritten
        (["--block", 1], "--block must be from 2 to 4096, got 1"),  # one row: every set's entropy is 0
        (["--block", 10**12], "--block must be from 2 to 4096"),  # else a Gram torch cannot allocate
    ]
    for extra, message in cases:
        code, out, err = run(capsys, "select", *select_base(folder, data), *extra)
        assert code == 2 and message in err and not out and "Traceback" not in err, (extra, err)
    assert "holds only 24 conversations" in run(capsys, "select", *select_base(folder, data), "--prompts", 25)[2]
    linked = tmp_path / "linked.json"
    os.link(folder / "config.json", linked)  # a hard link to the model's own config, outside its folder
    defaults = [
        (["--prompts", 1], "--prompts 1 with --method probe (the default): the probe is fitted on some"),
        (["--model", " "], "--model ' ' is empty: give a bundled model's name"),
        (["--out", linked], f"is {folder / 'config.json'}, a file of --model"),
        (["--data", a_file], "--data " + str(a_file) + ": the file is empty"),
    ]
    for extra, message in defaults:  # the default method, the probe, where no --method is given
        code, out, err = run(capsys, "select", *base(folder, data), *extra)
        assert code == 2 and message in err and not out and "Traceback" not in err, (extra, err)
    assert linked.read_text() == (folder / "config.json").read_text()


def test_stability_needs_prompts_to_resample_and_a_sane_number_of_resamples(capsys, folder, data, no_capture):
    """--stability over one prompt, --stability 1 and 10**12 are each refused before any work, and the
    help states the bounds: otherwise one prompt reports "chosen in 100% of 20 resamples", 1 a share from
    one resample, and 10**12 ends in a MemoryError after the capture."""
    cases = [
        (["--prompts", 1, "--stability", 20], "--stability needs at least 2 prompts to resample, got --prompts 1"),
        (["--stability", 1], "--stability 1: at least 20 resamples"),
        (["--stability", 19], "--stability 19: at least 20 resamples"),
        (["--stability", 10**12], f"--stability {10**12}: at most 10000 resamples"),
    ]
    for extra, message in cases:
        code, out, err = run(capsys, "select", *select_base(folder, data), *extra)
        assert code == 2 and message in err and not out and "Traceback" not in err, (extra, err)
    with pytest.raises(SystemExit):
        cli.main(["select", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "at least 20" in help_text and "at most 10000" in help_text
    assert "--prompts 2" in help_text


def test_stability_refuses_a_capture_with_fewer_than_two_prompts_with_a_block(capsys, folder, data, monkeypatch):
    """Prompts too short to fill a block add nothing to resample: the bootstrap is refused, naming them."""
    from elsi_lib.selection import stability

    real = cli._stats

    def one_prompt_with_a_block(args, job, **kwargs):
        stats, described = real(args, job, **kwargs)
        blocks = stats.sample_blocks.copy()
        blocks[1:] = 0
        return stats.__class__(**{**stats.__dict__, "sample_blocks": blocks}), described

    monkeypatch.setattr(cli, "_stats", one_prompt_with_a_block)
    monkeypatch.setattr(stability, "bootstrap_choices", lambda *a, **k: pytest.fail("resampled one prompt"))
    code, out, err = run(capsys, "select", *select_base(folder, data), "--stability", 20)
    assert code == 2 and "1 of the 24 prompts" in err and "--block" in err and not out


def test_explicit_options_a_method_ignores_are_refused(capsys, folder, data, no_capture):
    """An explicit --m with a fixed method (its set is fixed by the layer count), or --k-beam / --k-expand
    with a method that has no beam, is refused, naming it: the method would otherwise ignore it silently."""
    cases = [
        (["--method", "eagle3", "--m", 2], "--m 2: --method eagle3's set is fixed by the layer count (3 layers)"),
        (["--method", "eagle2", "--m", 3], "--m 3: --method eagle2's set is fixed by the layer count (1 layer)"),
        (["--method", "exhaustive", "--k-beam", 4], "--k-beam 4 does not apply to --method exhaustive"),
        (["--method", "eagle3", "--k-expand", 5], "--k-expand 5 does not apply to --method eagle3"),
        (["--method", "probe", "--k-expand", 2], "--k-expand 2 does not apply to --method probe"),
    ]
    for extra, message in cases:
        code, out, err = run(capsys, "select", *select_base(folder, data), *extra)
        assert code == 2 and message in err and not out and "Traceback" not in err, (extra, err)
    args = cli_args.build_parser().parse_args(["select", "--model", "x"])
    assert (args.m, args.k_beam, args.k_expand) == (None, None, None)  # the default is told from an explicit value
    cli_args._check(args)
    assert (args.m, args.k_beam, args.k_expand) == (3, 10, 5)


def test_a_fixed_methods_own_size_may_be_given(capsys, folder, data):
    plain = run(capsys, "select", *select_base(folder, data), "--method", "eagle3", "--format", "json")
    code, out, _ = run(capsys, "select", *select_base(folder, data), "--method", "eagle3", "--m", 3, "--format", "json")
    assert code == plain[0] == 0 and json.loads(out) == json.loads(plain[1])


def test_the_same_data_file_twice_is_refused(capsys, folder, data, tmp_path, no_capture):
    """The same --data file twice (however spelt) is refused, naming it: its conversations would count twice."""
    link = tmp_path / "link.jsonl"
    link.symlink_to(data)
    hard = tmp_path / "hard.jsonl"
    os.link(data, hard)  # a hard link: another path to the same file, whose conversations must not count twice
    code, out, err = run(capsys, "select", *select_base(folder, data), "--out", hard)
    assert code == 2 and "would overwrite its own input" in err and not out, err  # --out naming a --data file
    for again in (data, data.parent / "." / data.name, link, hard):
        code, out, err = run(capsys, "select", *select_base(folder, data)[:4], again, *base(folder, data)[4:])
        assert code == 2 and f"--data {data}" in err and "same file" in err and not out, (again, err)
    code, out, err = run(
        capsys, "select", "--model", folder, "--data", "gsm8k-train", "gsm8k-train", "--prompts", 2, "--method", "elsi"
    )
    assert code == 2 and "--data gsm8k-train is given twice" in err


def test_an_unwritable_figures_folder_is_refused_before_the_capture(
    capsys, folder, data, tmp_path, no_capture, monkeypatch
):
    """--figures is checked for more than being a file: a folder that cannot be made or one that cannot
    be written is refused first, naming the folder, rather than failing after the capture."""
    import os

    a_file = tmp_path / "a-file"
    a_file.write_text("")
    read_only = tmp_path / "read-only"
    read_only.mkdir()
    real_access = os.access
    monkeypatch.setattr(
        os,
        "access",
        lambda path, mode, **kw: False if str(path).startswith(str(read_only)) else real_access(path, mode, **kw),
    )
    cases = [
        (a_file / "figures", "is not a folder"),
        (read_only, "cannot be written"),
        (read_only / "new" / "figures", "cannot be written"),
    ]
    for figures, message in cases:
        code, out, err = run(capsys, "report", *base(folder, data), "--figures", figures)
        assert code == 2 and f"--figures {str(figures)!r}" in err and message in err and not out, (figures, err)


def test_a_model_folder_without_weights_is_named_before_the_capture(capsys, folder, data, tmp_path, no_capture):
    config_only = tmp_path / "config-only"
    config_only.mkdir()
    (config_only / "config.json").write_text((folder / "config.json").read_text())
    code, out, err = run(capsys, "select", "--model", config_only, *select_base(folder, data)[2:])
    assert code in (1, 2) and f"no weights file in {config_only}" in err and not out and "Traceback" not in err


def test_data_without_a_usable_conversation(capsys, folder, tmp_path, no_capture):
    replies_only = tmp_path / "replies-only.jsonl"
    replies_only.write_text(json.dumps({"conversations": [{"from": "gpt", "value": "hello"}]}) + "\n")
    ends_with_system = tmp_path / "system-last.json"
    ends_with_system.write_text(
        json.dumps(
            [
                {
                    "conversations": [
                        {"from": "human", "value": "hi"},
                        {"from": "gpt", "value": "hello"},
                        {"from": "system", "value": "be brief"},
                    ]
                }
            ]
        )
    )
    for path, message in ((replies_only, "no usable conversation"), (ends_with_system, "ends with a system turn")):
        code, out, err = run(
            capsys,
            "select",
            "--model",
            folder,
            "--data",
            path,
            "--prompts",
            1,
            "--reply-model",
            "self",
            "--method",
            "elsi",
        )
        assert code == 2 and str(path) in err and message in err and not out and "Traceback" not in err


def test_notices_go_to_stderr(capsys, folder, data):
    """A cache rebuilt on the way (a corrupt statistics file) is said on stderr: stdout stays the JSON."""
    import os
    from pathlib import Path

    code, out, _ = run(capsys, "select", *select_base(folder, data), "--format", "json")
    first = json.loads(out)
    stats = list((Path(os.environ["ELSI_CACHE_DIR"]) / "stats").glob("*.safetensors"))
    assert code == 0 and stats
    for path in stats:
        path.write_bytes(b"not a safetensors file")
    code, out, err = run(capsys, "select", *select_base(folder, data), "--format", "json")
    assert code == 0 and json.loads(out) == first and "recomputing" in err and "recomputing" not in out


def test_help_has_examples(capsys):
    for command in ("select", "capture", "report"):
        with pytest.raises(SystemExit) as exit_info:
            cli.main([command, "--help"])
        assert exit_info.value.code == 0 and "example:" in capsys.readouterr().out


def test_probe_selects_by_the_cached_probe(capsys, folder, data, monkeypatch):
    """--method probe: a set and its held-out error in the JSON and the text, the probe's statistics from
    the capture's own forward (no second one); later runs (any m) read the probe's cache; --stability is
    refused for it (selection itself: tests/test_probe.py)."""
    from elsi_lib.hidden import forward, probe_capture

    forwards = []
    original = forward.hidden_batches

    def counted(*args, **kwargs):
        forwards.append(kwargs.get("entropies", True))
        return original(*args, **kwargs)

    with monkeypatch.context() as patch:
        for module in ("elsi_lib.hidden.capture", "elsi_lib.hidden.probe_capture"):
            patch.setattr(f"{module}.hidden_batches", counted)
        patch.setattr(probe_capture, "_forward", lambda *a, **k: pytest.fail("the probe ran a forward of its own"))
        code, out, _ = run(
            capsys, "select", *select_base(folder, data), "--method", "probe", "--m", 2, "--format", "json"
        )
    assert forwards == [True]  # one forward: the capture's, with its entropies
    result = json.loads(out)
    assert code == 0 and result["method"] == "probe" and len(result["layers"]) == 2
    assert 0 < result["probe"]["heldout_relative_error"] and result["probe"]["search"] == "exhaustive"
    with monkeypatch.context() as patch:
        patch.setattr(probe_capture, "_forward", lambda *a, **k: pytest.fail("the probe was recomputed"))
        patch.setattr(probe_capture, "probe_choice", lambda *a, **k: pytest.fail("the choice was recomputed"))
        code, text, _ = run(capsys, "select", *select_base(folder, data), "--method", "probe", "--m", 2)
        assert code == 0 and "probe: held-out relative error" in text
        assert f"{result['probe']['heldout_relative_error']:.4f}" in text  # the cached choice
    with monkeypatch.context() as patch:
        patch.setattr(probe_capture, "_forward", lambda *a, **k: pytest.fail("the probe was recomputed"))
        code, out, _ = run(
            capsys, "select", *select_base(folder, data), "--method", "probe", "--m", 3, "--format", "json"
        )
        assert code == 0 and len(json.loads(out)["layers"]) == 3  # another m: the same cached statistics
    code, _, err = run(capsys, "select", *select_base(folder, data), "--method", "probe", "--stability", 3)
    assert code == 2 and "--method probe" in err


def test_capture_report_and_stability(capsys, folder, data, tmp_path):
    code, out, _ = run(capsys, "capture", *base(folder, data))
    assert code == 0 and "Z (8, 4," in out
    code, out, _ = run(capsys, "report", *base(folder, data), "--figures", tmp_path)
    rows = [l for l in out.splitlines() if l.strip() and l.split()[0].isdigit()]
    assert code == 0 and len(rows) == N_LAYERS and list(tmp_path.glob("profile_*.png"))
    assert all(0 < float(r.split()[2]) <= 1 for r in rows)  # top-row energy shares
    code, out, _ = run(capsys, "select", *select_base(folder, data), "--stability", 20, "--format", "json")
    stability = json.loads(out)["stability"]
    assert code == 0 and stability["resamples"] == 20
    assert abs(sum(c["share"] for c in stability["choices"]) - 1) < 1e-9
    assert 0 <= stability["share_choosing_this_set"] <= 1


ENGINE_CASES = [
    ("vllm", None, (0, 2, 3)),
    ("speculators", None, (0, 2, 3)),
    ("sglang", "LlamaForCausalLM", (0, 1, 2)),
    ("specforge", "LlamaForCausalLM", (0, 1, 2)),
    ("sglang", "DeepseekV3ForCausalLM", (2,)),
    ("sglang", "DeepseekV3ForCausalLM", (1, 2)),
]


@pytest.mark.parametrize("fmt, architecture, layers", ENGINE_CASES)
def test_engine_ids_point_at_the_tensor_elsi_measured(fmt, architecture, layers, tiny_model, tiny_tokenizer):
    """Capture each engine's meaning with hooks: vLLM / speculators id k is the input of decoder layer k
    (a forward pre-hook; k = N the residual stream before the final norm); SGLang / SpecForge move id k
    to `layers_to_capture` (k + 1 in llama.py; by the first id in deepseek_v2.py, run here on the same
    decoder loop) and capture the input of each such layer (a pre-hook). elsi's layer l is the output of
    layer l (a forward hook). The tensors an engine's ids name equal those of elsi's layers."""
    from test_conventions import sglang_layers_to_capture

    n = len(tiny_model.get_decoder().layers)
    fragment = engine_fragment(layers, n, fmt, architecture=architecture)
    inputs, outputs, handles = {}, {}, []
    for i, layer in enumerate(tiny_model.get_decoder().layers):
        handles.append(
            layer.register_forward_pre_hook(
                lambda mod, args, kwargs, i=i: inputs.__setitem__(
                    i, (args[0] if args else kwargs["hidden_states"]).clone()
                ),
                with_kwargs=True,
            )
        )
        handles.append(
            layer.register_forward_hook(
                lambda mod, args, out, i=i: outputs.__setitem__(i, (out[0] if isinstance(out, tuple) else out).clone())
            )
        )
    handles.append(
        tiny_model.get_decoder().norm.register_forward_pre_hook(  # vLLM's id N: the residual stream
            lambda mod, args: inputs.__setitem__(n, args[0].clone())
        )
    )  # after the last layer, before the norm
    ids_tensor = torch.tensor([tiny_tokenizer("alpha beta gamma delta")["input_ids"]])
    with torch.no_grad():
        tiny_model(ids_tensor)
    for h in handles:
        h.remove()
    if fmt in ("vllm", "speculators"):
        engine = [inputs[k] for k in fragment["eagle_aux_hidden_state_layer_ids"]]
    else:
        ids = fragment["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
        captured = [i for i in range(n) if i in sglang_layers_to_capture(ids, architecture)]  # i < N only
        engine = [inputs[i] for i in captured]
    assert len(engine) == len(layers)
    for mine, theirs in zip([outputs[l] for l in layers], engine):
        assert torch.equal(mine, theirs)


@pytest.mark.parametrize("fmt", ["sglang", "specforge"])
def test_sglang_refuses_the_last_layer(fmt, tiny_model):
    """SGLang's loop captures before layer i < N: the last layer's output (vLLM's id N) is out of its reach."""
    n = len(tiny_model.get_decoder().layers)
    with pytest.raises(ValueError, match="last decoder layer"):
        engine_fragment((0, 2, n - 1), n, fmt, architecture="LlamaForCausalLM")


def test_the_default_is_the_probes_set_with_elsis_beside_it(capsys, folder, data):
    """The probe's error predicted the drafts out of sample (notebook 10, `evidence.default_for`): a
    plain `elsi select` answers with the probe's set and shows ELSI's (the paper's method), chosen under
    the same restriction, as `--method elsi` would."""
    code, text, _ = run(capsys, "select", *base(folder, data), "--format", "json")
    result = json.loads(text)
    assert code == 0 and result["method"] == "probe" and "probe" in result
    elsi = json.loads(run(capsys, "select", *select_base(folder, data), "--format", "json")[1])
    assert result["elsi"] == {"layers": elsi["layers"], "entropy": elsi["entropy"]}
    code, text, _ = run(capsys, "select", *base(folder, data))
    assert code == 0 and "probe m=3" in text and "elsi m=3 (the paper's)" in text


def test_a_repeated_data_option_reads_every_file(capsys, folder, data, tmp_path):
    """--data A --data B reads both, as --data A B does: reading B alone would drop A's conversations and
    leave A out of the provenance."""
    other = tmp_path / "more.jsonl"  # other conversations (the same ones would count once)
    other.write_text(data.read_text().replace('"value": "', '"value": "More: '))
    args = ["select", "--model", folder, "--prompts", 40, "--block", 4, "--reply-model", "self", "--method", "elsi"]
    code, out, err = run(capsys, *args, "--data", data, "--data", other, "--format", "json")
    assert code == 0, err
    assert json.loads(out)["provenance"]["data"] == [str(data), str(other)]
    code, out, _ = run(capsys, *args, "--data", data, other, "--format", "json")
    assert code == 0 and json.loads(out)["provenance"]["data"] == [str(data), str(other)]


def test_an_option_given_twice_is_refused(capsys, folder, data):
    """An option given twice is refused: the command would otherwise use the last value without a word."""
    with pytest.raises(SystemExit) as exit_:
        cli.main([str(a) for a in ["select", *select_base(folder, data), "--model", "smollm2-135m"]])
    assert exit_.value.code == 2 and "--model given twice" in capsys.readouterr().err


def test_out_never_names_the_model_file_and_figures_never_go_into_the_package(capsys, tmp_path):
    """The answer written over the .gguf it was computed from, or figures written among the package's
    data: refused before any work, naming the option."""
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    code, out, err = run(capsys, "select", "--model", model, "--out", model)
    assert code == 2 and "--out" in err and "is --model" in err and model.read_bytes() == b"GGUF"
    code, out, err = run(capsys, "select", "--model", "smollm2-135m", "--out", "")
    assert code == 2 and "--out is empty" in err
    code, out, err = run(capsys, "report", "--model", "smollm2-135m", "--figures", ev.EVIDENCE_PATH.parent)
    assert code == 2 and "lies inside elsi's package" in err


def test_a_negative_seed_and_figures_inside_the_model_folder_are_refused_first(capsys, folder):
    """--seed -1 samples the prompts but fails the bootstrap after the capture; figures saved into the
    --model folder mix with the model's files: both refused before any work, naming the option."""
    code, out, err = run(capsys, "select", "--model", folder, "--seed", -1)
    assert code == 2 and "--seed must be 0 or more" in err
    code, out, err = run(capsys, "report", "--model", folder, "--figures", folder / "figs")
    assert code == 2 and "--figures" in err and "the --model folder" in err


def test_data_with_an_empty_user_turn_is_refused_and_repeats_count_once(capsys, folder, tmp_path, no_capture):
    """An empty user turn gives the reply model nothing to answer, an empty assistant turn the capture no
    reply to read (whitespace or zero-width characters alike): refused before any work, naming the
    conversation by its number and its first words. A conversation given twice in one file would weigh twice in the capture: counted once,
    said so."""
    empty = tmp_path / "empty.jsonl"
    turns = [{"from": "human", "value": "Hello"}, {"from": "gpt", "value": "Hi"}]
    empty.write_text(
        "\n".join(json.dumps({"conversations": t}) for t in (turns, [{"from": "human", "value": "  "}])) + "\n"
    )
    code, out, err = run(capsys, "select", "--model", folder, "--data", empty, "--prompts", 1, "--method", "elsi")
    assert code == 2 and "conversation 2 (the one starting '') has an empty user turn" in err
    for blank_turns, what in (
        ([{"from": "human", "value": "\u200b"}], "empty user turn"),  # a zero-width space is nothing to answer
        ([{"from": "human", "value": "Name a colour"}, {"from": "gpt", "value": ""}], "empty assistant turn"),
    ):
        empty.write_text("\n".join(json.dumps({"conversations": t}) for t in (turns, blank_turns)) + "\n")
        code, out, err = run(capsys, "select", "--model", folder, "--data", empty, "--prompts", 1, "--method", "elsi")
        assert code == 2 and what in err and not out, err
    assert "(the one starting 'Name a colour')" in err  # numbered after dropped records: named by its words too
    repeated = tmp_path / "repeated.jsonl"
    repeated.write_text("\n".join(json.dumps({"conversations": turns}) for _ in range(3)) + "\n")
    code, out, err = run(capsys, "select", "--model", folder, "--data", repeated, "--prompts", 2, "--method", "elsi")
    assert code == 2 and "2 repeated conversation(s) counted once" in err and "holds only 1" in err


def test_the_bootstrap_chooses_among_the_sets_the_engine_allows(monkeypatch):
    """--stability with --engine: each resample chooses among the engine's sets, as the answer did (without
    the restriction every resample picked a set the engine cannot feed, and the answer read as never chosen)."""
    import argparse

    import numpy as np

    from elsi_lib import cli_select
    from elsi_lib.selection import stability as resampling
    from elsi_lib.selection.feasible import Restriction

    seen = {}

    def fake_bootstrap(stats, m, *, n_boot, seed, method):
        rng = np.random.default_rng(0)
        Z = rng.normal(size=(8, 6, 5))  # layers 0 and 7 full rank; the engine's 1..6 nearly rank one
        Z[1:7] = rng.normal(size=(6, 6, 1)) * rng.normal(size=(6, 1, 5)) + 0.01 * rng.normal(size=(6, 6, 5))
        from elsi_lib import elsi

        assert {0, 7} & set(elsi(Z, m).layers)  # unrestricted, the choice is a set the engine cannot feed
        seen["chosen"] = method(Z, m).layers
        import pandas as pd

        return pd.DataFrame({"layers": [tuple(seen["chosen"])], "share": [1.0]})

    monkeypatch.setattr(resampling, "bootstrap_choices", fake_bootstrap)
    args = argparse.Namespace(method="elsi", m=3, k_beam=4, k_expand=3, stability=20, seed=0, block=4)
    stats = argparse.Namespace(sample_blocks=np.ones(5))
    allowed = Restriction("sglang", (1, 2, 3, 4, 5, 6), (), None, ("test",))
    out = cli_select.stability(args, stats, (1, 2, 3), 5, allowed)
    assert set(seen["chosen"]) <= set(allowed.allowed) and out["choices"][0]["layers"] == list(seen["chosen"])


def test_conversations_cut_at_max_length_are_said_so(capsys, folder, data, tmp_path):
    """A conversation longer than the capture's max_length is cut there, its reply past the cut unread: the
    command says how many were cut (stderr, and the JSON's provenance), never silently."""
    long = tmp_path / "long.jsonl"
    records = [json.loads(line) for line in data.read_text().splitlines()]
    records[0]["conversations"][0]["value"] = " ".join(["word"] * 3000)  # far past 1024 tokens
    long.write_text("\n".join(json.dumps(r) for r in records))
    code, out, err = run(capsys, "select", *select_base(folder, long), "--format", "json")
    assert code == 0 and "1 of 24 conversations are longer than 1024 tokens" in err
    assert json.loads(out)["provenance"]["cut_at_max_length"] == 1


def test_empty_generated_replies_are_refused_or_said(capsys, folder, data, tmp_path, monkeypatch):
    """A reply model that writes nothing leaves the capture only prompts and the template: every reply empty
    is refused (as empty replies given in --data are), some empty is said, never captured silently."""
    prompts = tmp_path / "prompts.jsonl"
    records = [json.loads(line) for line in data.read_text().splitlines()]
    prompts.write_text("\n".join(json.dumps({"conversations": r["conversations"][:1]}) for r in records))

    def replying(text_of):
        def reply(model, tokenizer, conversations, **kwargs):
            return [[*c, {"role": "assistant", "content": text_of(i)}] for i, c in enumerate(conversations)]

        return reply

    monkeypatch.setattr(cli.replies, "reply_conversations", replying(lambda i: ""))
    code, out, err = run(capsys, "select", *select_base(folder, prompts))
    assert code == 2 and "wrote an empty reply to every one of the 24 prompts" in err and not out
    monkeypatch.setattr(cli.replies, "reply_conversations", replying(lambda i: "" if i < 3 else "a reply of words"))
    code, out, err = run(capsys, "select", *select_base(folder, prompts))
    assert code == 0 and "3 of 24 replies are empty" in err


def test_a_set_size_the_ledger_never_drafted_answers_with_the_criterions_set(capsys, folder, data):
    """--m 4: the decision cannot predict a 4-layer set (no verdict), so the answer and every engine id it
    prints are the criterion's 4 layers, never the 3-layer default's."""
    code, out, _ = run(capsys, "select", *select_base(folder, data), "--m", 4, "--format", "json")
    result = json.loads(out)
    assert code == 0 and result["decision"]["verdict"] == "no verdict" and "4-layer set" in result["decision"]["reason"]
    assert result["recommended_layers"] == result["layers"] and len(result["vllm_layer_ids"]) == 4


def _with_template(folder, path, template: str):
    """A copy of the model `folder` at `path` whose tokenizer's chat template is `template`."""
    path.mkdir(exist_ok=True)
    for f in folder.iterdir():
        (path / f.name).write_bytes(f.read_bytes())
    config = json.loads((path / "tokenizer_config.json").read_text())
    (path / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": template}))
    (path / "chat_template.jinja").unlink(missing_ok=True)
    return path


def test_a_template_that_refuses_a_conversation_or_hides_the_replies_is_named_before_the_capture(
    capsys, folder, data, tmp_path, monkeypatch
):
    """A chat template that raises on a conversation (roles that must alternate) is named with the
    conversation, and one whose generation prompt is not where the reply follows (a thinking block opened
    there alone) is refused for the probe, the default, with the method that works: before any reply is
    generated or any capture made."""
    from conftest import CHAT_TEMPLATE

    monkeypatch.setenv("ELSI_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(cli, "capture_variants", lambda *a, **k: pytest.fail("captured before the checks"))
    monkeypatch.setattr(cli.replies, "reply_conversations", lambda *a, **k: pytest.fail("replied before the checks"))
    strict = _with_template(
        folder,
        tmp_path / "strict",
        "{% for m in messages %}{% if not loop.first and m['role'] == messages[loop.index0 - 1]['role'] %}"
        "{{ raise_exception('Conversation roles must alternate user/assistant') }}{% endif %}{% endfor %}"
        + CHAT_TEMPLATE,
    )
    lone = tmp_path / "lone.jsonl"
    turns = [("human", "a question asked twice"), ("human", "asked again"), ("gpt", "an answer")]
    lone.write_text(json.dumps({"conversations": [{"from": f, "value": v} for f, v in turns]}) + "\n")
    code, _, err = run(capsys, "select", *base(strict, lone), "--prompts", 1, "--method", "elsi")
    assert code == 2 and "chat template refuses the conversation starting 'a question asked twice'" in err
    assert "Conversation roles must alternate" in err
    opened = CHAT_TEMPLATE.replace("'<|im_start|>assistant\n'", "'<|im_start|>assistant\n<think>\n'")
    assert opened != CHAT_TEMPLATE
    thinking = _with_template(folder, tmp_path / "thinking", opened)
    code, _, err = run(capsys, "select", *[a for a in base(thinking, data) if a != "--method"])
    assert code == 2 and "--method probe (the default)" in err and "use --method elsi" in err
    _with_template(  # a template that takes no assistant turn: the replies could not be captured
        folder,
        thinking,
        "{% for m in messages %}{% if m['role'] == 'assistant' %}{{ raise_exception('no assistant turns') }}"
        "{% endif %}{% endfor %}" + CHAT_TEMPLATE,
    )
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"conversations": [{"from": "human", "value": "only a question"}]}) + "\n")
    code, _, err = run(capsys, "select", *base(thinking, prompts), "--prompts", 1, "--method", "elsi")
    assert code == 2 and "refuses the conversation starting 'only a question'" in err and "no assistant turns" in err


def test_a_template_that_refuses_only_the_real_replies_is_named_with_the_conversation(
    capsys, folder, data, tmp_path, monkeypatch
):
    """The pre-check renders a stub reply ("Hi."); a template that refuses longer assistant turns fails
    on the real ones inside the capture: the same one line, naming the model and the conversation,
    exit 2, not a bare TemplateError."""
    from conftest import CHAT_TEMPLATE

    monkeypatch.setenv("ELSI_CACHE_DIR", str(tmp_path / "cache"))
    picky = _with_template(
        folder,
        tmp_path / "picky",
        "{% for m in messages %}{% if m['role'] == 'assistant' and m['content'] | length > 12 %}"
        "{{ raise_exception('assistant turns longer than 12 characters are not supported') }}{% endif %}{% endfor %}"
        + CHAT_TEMPLATE,
    )
    questions = tmp_path / "questions.jsonl"  # no replies: the tiny model's own are generated, then refused
    first = "a question for the tiny model, without its reply"
    questions.write_text(
        "\n".join(json.dumps({"conversations": [{"from": "human", "value": f"{first} {i}"}]}) for i in range(4))
    )
    code, _, err = run(capsys, "select", *base(picky, questions), "--prompts", 4, "--method", "elsi")
    assert code == 2 and f"elsi: error: --model {picky}: the chat template refuses the conversation starting" in err
    assert repr(" ".join(first.split())[:40]) in err and "longer than 12 characters" in err


def test_provenance_names_the_search_settings_only_where_a_search_ran(capsys, folder, data):
    """A fixed method's set is its rule's: --k-beam and --k-expand, which it never read, are not in its
    provenance; ELSI's are."""
    code, out, _ = run(capsys, "select", *base(folder, data), "--method", "eagle3", "--format", "json")
    assert code == 0 and not {"k_beam", "k_expand"} & set(json.loads(out)["provenance"])
    assert json.loads(out)["provenance"]["reply_model"].startswith("none")  # every conversation carried its reply
    code, out, _ = run(capsys, "select", *select_base(folder, data), "--format", "json")
    assert code == 0 and {"k_beam", "k_expand"} <= set(json.loads(out)["provenance"])


def test_a_model_whose_decoder_layers_elsi_cannot_find_is_named(capsys, data, tiny_tokenizer, tmp_path):
    """GPT-2 keeps its blocks in `h`: one line naming the model and what elsi reads, exit 2, not an
    AttributeError about an internal class."""
    from transformers import GPT2Config, GPT2LMHeadModel

    folder = tmp_path / "gpt2"
    GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=len(tiny_tokenizer))).save_pretrained(folder)
    tiny_tokenizer.save_pretrained(folder)
    code, _, err = run(capsys, "select", *select_base(folder, data))
    assert code == 2 and "a GPT2Model, whose decoder layers elsi cannot find" in err


def test_a_data_file_named_as_a_bundled_prompt_set_is_refused_as_ambiguous(capsys, folder, tmp_path, monkeypatch):
    """--data ifeval with a file ./ifeval of the user's: the bundled set is not read in its place unsaid."""
    from elsi_lib.inputs.prompts import PROMPT_SETS

    name = sorted(PROMPT_SETS)[0]
    monkeypatch.chdir(tmp_path)
    (tmp_path / name).write_text('{"conversations": [{"from": "human", "value": "mine"}]}\n')
    code, _, err = run(capsys, "select", "--model", folder, "--data", name, "--prompts", 1, "--method", "elsi")
    assert code == 2 and "names both a bundled prompt set and the file" in err and f"pass ./{name}" in err
