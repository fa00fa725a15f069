"""Engine fragments read back by each engine's own rule: for every engine, the ids
`engine_fragment` emits, converted back the way that engine's source converts them (each rule below
is a test-local copy of the source's logic, quoted), name exactly the elsi layers (output of decoder
layer l); a set no id list can express is refused, and only such a set.

Sources read (see `conventions.engine_fragment`): SGLang python/sglang/srt/models/llama.py
(commits 00239548, bf7a0e23) and PR #25454 (f5049709b323, deepseek_v2.py); SpecForge main a6b6b023
(pins sglang==0.5.14); speculators v0.7.0 and main c05b95b3 (scripts/launch_vllm.py,
src/speculators/train/data.py); vLLM's EagleModelMixin."""

import argparse
import itertools

import numpy as np
import pytest

from elsi_lib.selection import conventions
from elsi_lib.selection.conventions import (
    ENGINE_FORMATS,
    convert_layer_ids,
    eagle2_layers,
    eagle3_layers,
    eagle3_paper_layers,
    engine_fragment,
)

DEEPSEEK = ("DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM")  # deepseek_v2.py's classes
ARCHITECTURES = (None, "LlamaForCausalLM", "DeepseekV3ForCausalLM", "Qwen2ForCausalLM")
SMOLLM2_N = 30
SMOLLM2_ELSI, EAGLE3 = (9, 10, 29), (1, 14, 26)  # SmolLM2's ELSI m = 3; EAGLE-3's set in elsi's convention


# ------------------------------------------------------------ each engine's rule, after its source


def sglang_layers_to_capture(ids, architecture):
    """`set_eagle3_layers_to_capture(layer_ids)` of the SGLang model file serving `architecture`.

    llama.py, LlamaForCausalLM (and every SGLang version read):
        # we plus 1 here because in sglang, for the ith layer, it takes the output
        # of the (i-1)th layer as aux hidden state
        self.model.layers_to_capture = [val + 1 for val in layer_ids]
    deepseek_v2.py since PR #25454 ("Disambiguate by the first id and only apply `+1` when it's 1"):
        if layer_ids and layer_ids[0] == 1: [val + 1 for val in layer_ids] else: list(layer_ids)"""
    if architecture in DEEPSEEK:
        return [val + 1 for val in ids] if ids and ids[0] == 1 else list(ids)
    return [val + 1 for val in ids]


def sglang_captured(ids, n_layers, architecture):
    """The elsi layers SGLang captures for `ids`, in capture order (None: the embeddings).

    LlamaModel.forward:
        for i in range(self.start_layer, self.end_layer):
            if i in self.layers_to_capture:
                aux_hidden_states.append(hidden_states + residual)
            ... hidden_states, residual = layer(...)
    i.e. the input of layer i (the output of layer i - 1), for i < N only."""
    layers_to_capture = sglang_layers_to_capture(ids, architecture)
    return tuple(i - 1 if i else None for i in range(0, n_layers) if i in layers_to_capture)


def sglang_reads_for_every_file(ids, n_layers):
    """With no architecture the list must name the same layers in both model files."""
    readings = {sglang_captured(ids, n_layers, arch) for arch in ("LlamaForCausalLM", DEEPSEEK[0])}
    return readings.pop() if len(readings) == 1 else "ambiguous"


def sglang_reads(ids, n_layers, architecture):
    if architecture is None or architecture not in ("LlamaForCausalLM", *DEEPSEEK):
        return sglang_reads_for_every_file(ids, n_layers)
    return sglang_captured(ids, n_layers, architecture)


def vllm_captured(ids, n_layers):
    """vLLM's EagleModelMixin: aux id 0 before the first layer (the embeddings), then after each
    decoder layer `self._maybe_add_hidden_state(aux_hidden_states, idx + 1, hidden_states, residual)`:
    id k is the output of layer k - 1, k = N the last layer's (before the final norm)."""
    return tuple(k - 1 if k else None for k in range(0, n_layers + 1) if k in ids)


def openvino_captured(ids, n_layers):
    """OpenVINO GenAI's eagle3_model_transforms.cpp: for each id k, the first residual Add after an MLP
    whose node name contains "layers.<k>/" (`find_decoder_layer_hidden_state_outputs`), in the order
    asked; node names are "model.layers.<i>/...", so k matches layer k's own residual (the "/" keeps
    "layers.1/" from matching layer 11): the output of decoder layer k."""
    names = [f"__module.model.layers.{i}/aten::add/Add_1" for i in range(n_layers)]
    captured = []
    for k in ids:
        matches = [i for i, name in enumerate(names) if f"layers.{k}/" in name]
        captured.append(matches[0] if matches else "not found")
    return tuple(captured)


def speculators_recipe(fragment, n_layers):
    """speculators' recipe on the fragment's flags: (the draft's features, the verifier's last state),
    or None when the trainer's ids are not the features the launch saved.

    scripts/launch_vllm.py:
        parser.add_argument("--target-layer-ids", type=int, nargs="+", ...)
        if args.include_last_layer and num_hidden_layers not in target_layer_ids:
            target_layer_ids.append(num_hidden_layers)
        ... "hf_config": {"eagle_aux_hidden_state_layer_ids": target_layer_ids}   (vLLM captures them)
    src/speculators/train/data.py:
        "hidden_states": loaded_hs["hidden_states"][:, :-1]  ...  "verifier_last_hidden_states": [:, -1]
    train.py's --target-layer-ids: "pass the same ids here, excluding the final layer launch_vllm.py
    appends" (train/config/schema.py); they become the draft's eagle_aux_hidden_state_layer_ids."""
    launch = argparse.ArgumentParser()
    launch.add_argument("--target-layer-ids", type=int, nargs="+")
    launch.add_argument("--include-last-layer", action=argparse.BooleanOptionalAction, default=True)
    args = launch.parse_args(fragment["launch_args"])
    target_layer_ids = args.target_layer_ids
    if args.include_last_layer and n_layers not in target_layer_ids:
        target_layer_ids.append(n_layers)
    saved = vllm_captured(target_layer_ids, n_layers)  # one state per captured id, in layer order
    train = argparse.ArgumentParser()
    train.add_argument("--target-layer-ids", type=int, nargs="+")
    trained_on = train.parse_args(fragment["train_args"]).target_layer_ids
    if vllm_captured(trained_on, n_layers) != saved[:-1]:  # the trainer's ids must be the saved features
        return None
    if trained_on != fragment["eagle_aux_hidden_state_layer_ids"]:  # and the served draft's
        return None
    return saved[:-1], saved[-1]


def expressible(layers, n_layers, reads):
    """Whether any ascending id list (each id l or l + 1) is read as exactly `layers`."""
    return any(reads(list(ids)) == tuple(layers) for ids in itertools.product(*[(l, l + 1) for l in layers]))


def fragment_or_refusal(layers, n_layers, engine, architecture=None):
    try:
        if architecture is None:  # the call without the architecture argument
            return engine_fragment(layers, n_layers, engine)
        return engine_fragment(layers, n_layers, engine, architecture=architecture)
    except ValueError as err:
        return str(err)


# ------------------------------------------------------------------------------------ the tests


@pytest.mark.parametrize("architecture", ARCHITECTURES)
@pytest.mark.parametrize("engine", ["sglang", "specforge"])
def test_sglang_reads_every_emitted_list_as_the_set(engine, architecture):
    """Every set of 1 to 3 layers of a 9-layer model: emitted ids read back as the set, or refused
    exactly when no list is read as it (the last layer; layer 0 by first id; ambiguity without the
    model file)."""
    n = 9
    for m in (1, 2, 3):
        for layers in itertools.combinations(range(n), m):
            got = fragment_or_refusal(layers, n, engine, architecture)
            can = expressible(layers, n, lambda ids: sglang_reads(ids, n, architecture))
            if engine == "specforge" and m != 3:
                assert isinstance(got, str) and "exactly three" in got
                continue
            assert isinstance(got, dict) == can, (layers, architecture, got)
            if isinstance(got, dict):
                ids = got["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
                assert sglang_reads(ids, n, architecture) == layers
                if engine == "specforge":
                    assert got["aux_hidden_state_layer_ids"] == ids and len(set(ids)) == 3 and min(ids) >= 0


@pytest.mark.parametrize("engine", ["vllm", "speculators"])
def test_vllm_and_speculators_ids_read_back(engine):
    n = 9
    for m in (1, 2, 3, 4):
        for layers in itertools.combinations(range(n), m):
            fragment = engine_fragment(layers, n, engine)
            ids = fragment["eagle_aux_hidden_state_layer_ids"]
            assert vllm_captured(ids, n) == layers
            assert fragment.get("num_aux_hidden_states", 3) == m
            if engine == "vllm":
                continue
            if n - 1 in layers:  # the recipe takes id N as the verifier's state: no flags to give
                assert "launch_args" not in fragment and "last layer" in fragment["recipe_unavailable"]
                assert not expressible(
                    layers,
                    n,
                    lambda ids: (
                        speculators_recipe(
                            {
                                "launch_args": ["--target-layer-ids", *map(str, ids)],
                                "train_args": ["--target-layer-ids", *map(str, ids)],
                                "eagle_aux_hidden_state_layer_ids": ids,
                            },
                            n,
                        )
                        or (None,)
                    )[0],
                )
            else:
                assert speculators_recipe(fragment, n) is not None
                features, verifier_last = speculators_recipe(fragment, n)
                assert features == layers and verifier_last == n - 1


def test_smollm2_sets():
    """SmolLM2 (30 layers): ELSI m = 3 (9, 10, 29) and EAGLE3 (1, 14, 26), per engine."""
    n = SMOLLM2_N
    assert engine_fragment(SMOLLM2_ELSI, n, "vllm") == {"eagle_aux_hidden_state_layer_ids": [10, 11, 30]}
    elsi = engine_fragment(SMOLLM2_ELSI, n, "speculators")
    assert elsi["eagle_aux_hidden_state_layer_ids"] == [10, 11, 30] and "launch_args" not in elsi
    for engine in ("sglang", "specforge"):
        for arch in ARCHITECTURES:
            refusal = fragment_or_refusal(SMOLLM2_ELSI, n, engine, arch)
            assert isinstance(refusal, str) and "last decoder layer (29)" in refusal
    assert engine_fragment(EAGLE3, n, "vllm") == {"eagle_aux_hidden_state_layer_ids": [2, 15, 27]}
    eagle3 = engine_fragment(EAGLE3, n, "speculators")
    assert eagle3["launch_args"] == ["--target-layer-ids", "2", "15", "27", "30"]
    assert eagle3["train_args"] == ["--target-layer-ids", "2", "15", "27"]
    for arch in ARCHITECTURES:  # smallest layer 1: every SGLang reading adds the +1
        assert engine_fragment(EAGLE3, n, "sglang", architecture=arch) == {
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 14, 26]}
        }
        assert engine_fragment(EAGLE3, n, "specforge", architecture=arch)["aux_hidden_state_layer_ids"] == [1, 14, 26]


def test_sglang_first_id_both_ways():
    """A set not starting at layer 1: output ids for llama.py, input ids for deepseek_v2.py, refused
    without the model file; a set holding layer 0 cannot be written for the first-id reading (id 1
    would be read as layer 1, id 0 as the embeddings)."""
    n = SMOLLM2_N
    ids = lambda layers, arch: engine_fragment(layers, n, "sglang", architecture=arch)["eagle_config"][
        "eagle_aux_hidden_state_layer_ids"
    ]
    assert ids((9, 10, 20), "LlamaForCausalLM") == [9, 10, 20]
    assert ids((9, 10, 20), "DeepseekV3ForCausalLM") == [10, 11, 21]
    assert sglang_captured([9, 10, 20], n, "DeepseekV3ForCausalLM") == (8, 9, 19)  # Llama's ids read here: other layers
    assert ids((0, 5, 9), "LlamaForCausalLM") == [0, 5, 9]
    with pytest.raises(ValueError, match="layer 0"):
        engine_fragment((0, 5, 9), n, "sglang", architecture="DeepseekV2ForCausalLM")
    for arch in (None, "Qwen2ForCausalLM"):
        with pytest.raises(ValueError, match="architecture"):
            engine_fragment((9, 10, 20), n, "sglang", architecture=arch)
    assert sglang_captured([1, 14, 26], n, "LlamaForCausalLM") == sglang_captured([1, 14, 26], n, DEEPSEEK[0])


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown engine"):
        engine_fragment((1, 2, 3), 30, "tgi")
    with pytest.raises(TypeError, match="architecture"):
        engine_fragment((1, 2, 3), 30, "sglang", architecture=3)
    with pytest.raises(ValueError, match="out of range"):
        engine_fragment((1, 2, 30), 30, "vllm")
    assert conventions.engine_reading("sglang", "LlamaForCausalLM").startswith("SGLang llama.py")
    assert set(ENGINE_FORMATS) == {"vllm", "speculators", "sglang", "specforge", "openvino"}


# ---------------------------------------------------------------- fixed sets and id conversion


def test_baselines():
    assert eagle2_layers(30) == (29,)
    assert eagle3_layers(30) == (1, 14, 26)  # EAGLE's [2, N//2, N-3] as inputs of layers, in elsi's ids
    assert eagle3_layers(36) == (1, 17, 32)
    assert eagle3_paper_layers(30) == (2, 15, 27)  # the paper's Table 1 reading: outputs
    assert convert_layer_ids(eagle3_layers(30), "elsi", "vllm", 30) == (2, 15, 27)
    with pytest.raises(ValueError, match="needs 7 or more layers"):
        eagle3_layers(4)


def test_convert_layer_ids():
    assert convert_layer_ids((1, 14, 26), "elsi", "vllm", 30) == (2, 15, 27)
    assert convert_layer_ids((2, 15, 27), "eagle", "output", 30) == (1, 14, 26)
    for engine in ("sglang", "specforge"):  # read by SGLang's model files: engine_fragment, with the architecture
        with pytest.raises(ValueError, match=f"{engine}'s layer ids are not a convention alone.*engine_fragment"):
            convert_layer_ids((29, 3), "output", engine, 30)
    assert convert_layer_ids((30,), "input", "output", 30) == (29,)
    with pytest.raises(ValueError, match="out of range"):
        convert_layer_ids((0,), "vllm", "elsi", 30)  # input of layer 0 is the embeddings
    with pytest.raises(ValueError, match="out of range"):
        convert_layer_ids((30,), "elsi", "vllm", 30)
    with pytest.raises(ValueError, match="unknown convention"):
        convert_layer_ids((1,), "hf", "elsi", 30)


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda: convert_layer_ids((True,), "output", "vllm", 30), TypeError, "layer ids must be integers"),
        (lambda: convert_layer_ids(("1",), "output", "vllm", 30), TypeError, "layer ids must be integers"),
        (lambda: convert_layer_ids((1.0,), "output", "vllm", 30), TypeError, "layer ids must be integers"),
        (lambda: convert_layer_ids("12", "output", "vllm", 30), TypeError, "layers must be"),
        (lambda: convert_layer_ids(3, "output", "vllm", 30), TypeError, "layers must be"),
        (lambda: convert_layer_ids((1,), "output", "vllm", 30.0), TypeError, "n_layers"),
        (lambda: convert_layer_ids((1,), "output", "vllm", "30"), TypeError, "n_layers"),
        (lambda: convert_layer_ids((1,), "output", "vllm", True), TypeError, "n_layers"),
        (lambda: convert_layer_ids((1,), "output", "vllm", 0), ValueError, "n_layers"),
        (lambda: convert_layer_ids((), "output", "vllm", 30), ValueError, "empty"),
        (lambda: convert_layer_ids((1,), 1, "vllm", 30), ValueError, "unknown convention"),
        (lambda: eagle3_layers(30.0), TypeError, "n_layers"),
        (lambda: eagle2_layers("30"), TypeError, "n_layers"),
        (lambda: eagle2_layers(0), ValueError, "n_layers"),
    ],
)
def test_convert_layer_ids_rejects_bad_types(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_convert_layer_ids_accepts_numpy_integers():
    assert convert_layer_ids(np.array([1, 14, 26]), "elsi", "vllm", np.int64(30)) == (2, 15, 27)
    assert eagle3_layers(np.int64(30)) == (1, 14, 26)


@pytest.mark.parametrize("layers", [(1, 11, 21), (0, 14, 29), (2, 15, 27)])
def test_openvino_reads_exactly_the_fragments_layers(layers):
    fragment = conventions.engine_fragment(layers, 30, "openvino")
    assert fragment == {"hidden_layers_list": list(layers)}
    assert openvino_captured(fragment["hidden_layers_list"], 30) == layers


def test_openvino_takes_three_layers_and_defaults_one_layer_deeper_than_eagle3():
    with pytest.raises(ValueError, match="exactly three layers"):
        conventions.engine_fragment((1, 14), 30, "openvino")
    from elsi_lib.selection.methods import default_of

    # with no hidden_layers_list OpenVINO takes {2, N/2, N-3} as outputs of those layers
    assert default_of("openvino", 30).layers == (2, 15, 27) == openvino_captured([2, 30 // 2, 30 - 3], 30)
    assert default_of("vllm", 30).layers == (1, 14, 26)  # EAGLE-3's rule read as inputs
    assert (
        "outputs" in default_of("openvino", 30).rule and default_of("vllm", 30).rule == "EAGLE-3's rule [2, N//2, N-3]"
    )


def test_eagle3s_rule_needs_seven_layers_for_three_distinct_ones():
    """At 6 layers N//2 = N-3 = 3: the rule would name one layer twice ((2, 3, 3); inputs (1, 2, 2))."""
    from elsi_lib.selection.conventions import eagle3_layers, eagle3_paper_layers

    for rule in (eagle3_layers, eagle3_paper_layers):
        with pytest.raises(ValueError, match=r"needs 7 or more layers for three distinct ones; this model has 6"):
            rule(6)
    assert eagle3_paper_layers(7) == (2, 3, 4) and eagle3_layers(7) == (1, 2, 3)
