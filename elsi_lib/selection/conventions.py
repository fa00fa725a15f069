"""The engines' fixed layer sets (EAGLE-2, EAGLE-3: the paper's baselines) and layer-id conventions.

The paper, and every set `select` returns, number a layer by the output of decoder layer l
(0..N-1). EAGLE's code, vLLM and speculators number the same feature by the input of the next
layer; `convert_layer_ids` translates between them.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..common.checks import LayerSet, check_layers, is_integer
from .engines import ENGINES


def check_n_layers(n_layers) -> int:
    """n_layers as an int >= 1: a bool, float or string is a TypeError."""
    if not is_integer(n_layers):
        raise TypeError(f"n_layers must be an integer (the number of decoder layers), got {n_layers!r}")
    if n_layers < 1:
        raise ValueError(f"n_layers must be at least 1, got {n_layers}")
    return int(n_layers)


def eagle2_layers(n_layers: int) -> LayerSet:
    """EAGLE-2 conditions on the last layer only: (N-1,)."""
    return (check_n_layers(n_layers) - 1,)


def eagle3_layers(n_layers: int) -> LayerSet:
    """EAGLE-3's fixed set in elsi's convention (output of decoder layer l): the one every table,
    notebook, draft and engine fragment calls "EAGLE3". EAGLE's reference code (and vLLM,
    speculators) writes the rule as [2, N//2, N-3] and captures the *inputs* of those layers, i.e.
    the outputs of (1, N//2 - 1, N - 4): (1, 14, 26) on 30 layers. The paper's Table 1 reads the
    rule as outputs instead: `eagle3_paper_layers`."""
    n_layers = check_n_layers(n_layers)
    return convert_layer_ids(eagle3_paper_layers(n_layers), "input", "output", n_layers)


EAGLE3_MIN_LAYERS = 7  # the fewest layers EAGLE-3's rule names three distinct ones of


def eagle3_paper_layers(n_layers: int) -> LayerSet:
    """EAGLE-3's rule as the paper's Table 1 reads it, (2, N//2, N-3) as outputs of decoder layers
    (elsi's convention): one layer deeper than the set EAGLE-3 drafts read (`eagle3_layers`).
    Shown only as its own row, "EAGLE3, paper's reading"."""
    n_layers = check_n_layers(n_layers)
    if n_layers < EAGLE3_MIN_LAYERS:  # at 6, N//2 = N-3 = 3: the rule names one layer twice
        raise ValueError(
            f"EAGLE-3's rule [2, N//2, N-3] needs {EAGLE3_MIN_LAYERS} or more layers for three distinct ones; "
            f"this model has {n_layers}"
        )
    return (2, n_layers // 2, n_layers - 3)


# "output": id l is the output of decoder layer l (0..N-1): the paper, elsi, SGLang/SpecForge, OpenVINO GenAI.
# "input":  id l is the input of decoder layer l (1..N; input of l = output of l-1): EAGLE's code,
#           vLLM and speculators. Input id 0 would be the embeddings, which no set here contains.
CONVENTIONS = {"output": 0, "input": 1}
ENGINE_CONVENTIONS = {
    "elsi": "output",
    "paper": "output",
    "eagle": "input",
    **{name: e.convention for name, e in ENGINES.items()},  # each engine's, declared once (`engines`)
}


def convert_layer_ids(layers, from_convention: str, to_convention: str, n_layers: int) -> LayerSet:
    """Convert a layer set between id conventions (see CONVENTIONS; engine names are accepted).

    e.g. convert_layer_ids((1, 14, 26), "elsi", "vllm", 30) == (2, 15, 27).
    """

    def offset(name):
        key = ENGINE_CONVENTIONS.get(name, name) if isinstance(name, str) else None
        if key not in CONVENTIONS:
            raise ValueError(
                f"unknown convention {name!r}; use one of {sorted(CONVENTIONS) + sorted(ENGINE_CONVENTIONS)}"
            )
        return CONVENTIONS[key]

    n_layers = check_n_layers(n_layers)
    if isinstance(layers, (str, bytes)) or not isinstance(layers, Iterable):
        raise TypeError(f"layers must be an iterable of integer layer ids, got {layers!r}")
    ids = list(layers)
    for layer in ids:
        if not is_integer(layer):
            raise TypeError(f"layer ids must be integers, got {layer!r}")
    from_shift, to_shift = offset(from_convention), offset(to_convention)
    for name in (from_convention, to_convention):  # ids that are not a convention alone: their own rules
        engine = ENGINES.get(name)
        if engine is not None and engine.sglang_ids:
            raise ValueError(
                f"{name}'s layer ids are not a convention alone: SGLang reads them by the model file it serves "
                "(a DeepSeek model's by the first id) and never reaches the last layer's; use "
                f"engine_fragment(layers, n_layers, {name!r}, architecture), which applies its rules or says why not"
            )
    for layer in ids:
        if not from_shift <= layer < n_layers + from_shift:
            raise ValueError(
                f"layer id {layer} is out of range for {n_layers} layers in the {from_convention!r} "
                f"convention ({from_shift}..{n_layers - 1 + from_shift})"
            )
    as_output = check_layers([l - from_shift for l in ids], n_layers)
    return tuple(l + to_shift for l in as_output)


ENGINE_FORMATS = tuple(ENGINES)  # the engines declared in `engines`

# How SGLang reads an explicit `eagle_config.eagle_aux_hidden_state_layer_ids` (from the draft's
# config; the model runner hands it to the target's `set_eagle3_layers_to_capture`). Every reading
# feeds one capture loop, `for i in range(self.start_layer, self.end_layer): if i in
# self.layers_to_capture: aux_hidden_states.append(hidden_states + residual)` *before* layer i runs
# (LlamaModel.forward, python/sglang/srt/models/llama.py): a captured i is the input of layer i, the
# output of layer i - 1, and i = N (the output of the last layer) is never reached.
# - "plus-one": `self.model.layers_to_capture = [val + 1 for val in layer_ids]`, "because in sglang,
#   for the ith layer, it takes the output of the (i-1)th layer" (LlamaForCausalLM.
#   set_eagle3_layers_to_capture, llama.py; the same at commits 00239548 and bf7a0e23, and untouched
#   by PR #25454): id l is the output of layer l, elsi's own convention.
# - "first-id": PR #25454 ("drop +1 offset on aux layer ids when first id != 1", merged 2026-05-18 as
#   f5049709b323; it changed python/sglang/srt/models/deepseek_v2.py only) adds the +1 "only when it's
#   1" (`layer_ids[0] == 1`) and otherwise takes the ids as inputs of layers.
SGLANG_PLUS_ONE, SGLANG_FIRST_ID = "plus-one", "first-id"
SGLANG_READINGS = {  # config.architectures[0] -> the reading of the SGLang model file that serves it
    "LlamaForCausalLM": SGLANG_PLUS_ONE,
    "Phi3ForCausalLM": SGLANG_PLUS_ONE,  # llama.py's EntryClass
    "InternLM3ForCausalLM": SGLANG_PLUS_ONE,
    "DeepseekV2ForCausalLM": SGLANG_FIRST_ID,
    "DeepseekV3ForCausalLM": SGLANG_FIRST_ID,  # deepseek_v2.py
}
SPECULATORS_RECIPE = ("scripts/launch_vllm.py", "scripts/train.py")


def sglang_reading(architecture: str | None) -> str | None:
    """The reading ("plus-one" or "first-id") of the SGLang model file that serves `architecture`
    (a config's `architectures[0]`), or None when elsi has not read that file."""
    if architecture is not None and not isinstance(architecture, str):
        raise TypeError(
            f"architecture must be a model class name such as 'LlamaForCausalLM' or None, got {architecture!r}"
        )
    return None if architecture is None else SGLANG_READINGS.get(architecture)


def _sglang_ids(layers: tuple, n_layers: int, architecture: str | None, engine: str) -> list[int]:
    """The id list SGLang reads as exactly `layers` (elsi's convention, sorted), or a ValueError."""
    if layers[-1] == n_layers - 1:
        raise ValueError(
            f"{engine} cannot feed the draft the output of the last decoder layer ({n_layers - 1}) of this "
            f"{n_layers}-layer model: SGLang captures `hidden_states + residual` before layer i for i < "
            f"{n_layers} only (LlamaModel.forward), so that layer's id is never reached and the draft would "
            f"get {len(layers) - 1} of its {len(layers)} features; choose a set without layer {n_layers - 1}, "
            "or serve with vLLM, whose id N is that output (--format vllm)"
        )
    reading = sglang_reading(architecture)
    if reading == SGLANG_PLUS_ONE or layers[0] == 1:  # every reading adds the +1 to a list starting at 1
        return list(layers)
    if reading == SGLANG_FIRST_ID:
        if layers[0] == 0:
            raise ValueError(
                f"{engine} cannot express a set holding layer 0 on {architecture}: SGLang's deepseek_v2.py "
                "(since PR #25454) reads a list by its first id, adding +1 only when it is 1; the output of "
                "layer 0 is id 0 with the +1 (a list starting at 0, read without it: the embeddings) or id 1 "
                "without it (a list starting at 1, read with it: the output of layer 1)"
            )
        return [l + 1 for l in layers]  # first id >= 3, so read as inputs of layers
    where = f"the SGLang model file serving {architecture}" if architecture else "the target's SGLang model file"
    raise ValueError(
        f"{engine} cannot express {layers} without knowing {where}: SGLang's llama.py adds +1 to every id "
        "(id l = output of layer l) while its deepseek_v2.py (PR #25454, 2026-05) does so only when the first "
        f"id is 1 (else id l = input of layer l), so a list starting at {layers[0]} names different layers "
        "in the two; only sets whose smallest layer is 1 read the same. Pass the target's architecture "
        f"(one of {sorted(SGLANG_READINGS)}; `elsi select` passes the model's own)"
    )


def engine_fragment(layers, n_layers: int, engine: str, architecture: str | None = None) -> dict:
    """The JSON fragment `engine` reads for an elsi layer set (output convention), converted so
    that the engine's own code names exactly these layers; a set it cannot express is refused
    with the reason (ValueError).

    - vllm: `eagle_aux_hidden_state_layer_ids`, input-of-layer ids (elsi's l + 1; N is the output
      of the last layer); for m != 3 also `num_aux_hidden_states` (vLLM sizes the draft's fc
      from it, or assumes 3).
    - speculators: the same config entries, plus its recipe's flags (vllm-project/speculators,
      read at v0.7.0 and main c05b95b3, 2026-08-20; the mirror has no v0.9.0 tag).
      `scripts/launch_vllm.py MODEL --target-layer-ids ...` puts the ids verbatim into vLLM's
      `eagle_aux_hidden_state_layer_ids` and appends N ("the last layer (num_hidden_layers) ... for
      verifier hidden states extraction", --include-last-layer, default on); the trainer splits
      the saved states into `hidden_states[:, :-1]` (the draft's features) and `[:, -1]`
      (`verifier_last_hidden_states`), so `scripts/train.py --target-layer-ids` takes the ids
      without N. `launch_args` (N written out) and `train_args` are those flags; a set holding
      the last layer N-1 (vLLM id N) cannot go through the recipe (N is taken as the verifier's
      state, not a feature): then `recipe_unavailable` says so instead.
    - sglang: `eagle_config.eagle_aux_hidden_state_layer_ids`, as SGLang's model file for
      `architecture` reads them (see SGLANG_READINGS): for llama.py's models ("plus-one", every
      version read: commits 00239548 and bf7a0e23, and PR #25454 left the file alone)
      output-of-layer ids; for deepseek_v2.py's ("first-id", SGLang since PR #25454) output ids
      when the smallest layer is 1, else input ids (l + 1; an SGLang build older than that PR
      reads these one layer deeper), a set holding layer 0 refused. A list starting at 1 reads
      the same in every version and file; with no or an unknown architecture only such sets are
      expressible. SGLang never captures the output of the last layer N-1: a set holding it is
      refused.
    - specforge: `aux_hidden_state_layer_ids` (its run config's `model.aux_hidden_state_layer_ids`)
      and the draft config's `eagle_config.eagle_aux_hidden_state_layer_ids`, exactly three
      distinct layers (SpecForge's planning.py); SpecForge (main a6b6b023, 2026-08-08) pins
      sglang==0.5.14 and captures through SGLang's `set_eagle3_layers_to_capture` (offline:
      OfflineSGLangCaptureBackend; online: its spec-capture patch to SGLang's model runner), so
      the ids are SGLang's, as above.
    - openvino: `hidden_layers_list`, output-of-layer ids (elsi's own; openvino.genai
      `eagle3_model_transforms.cpp` matches the MLP's residual Add in the node `layers.<k>/`), exactly
      three (it asserts three). The pipeline reads them from the draft IR's rt_info or the draft's
      properties; with none it takes {2, N/2, N-3} as outputs, one layer deeper than EAGLE-3's rule.
    """
    if engine not in ENGINES:  # the declared engines (`engines`), read when called
        raise ValueError(f"unknown engine format {engine!r}; use one of {tuple(ENGINES)}")
    n_layers = check_n_layers(n_layers)
    layers = convert_layer_ids(layers, "elsi", "elsi", n_layers)  # checked, sorted, distinct
    if engine in ("vllm", "speculators"):
        ids = list(convert_layer_ids(layers, "elsi", engine, n_layers))
        fragment = {
            "eagle_aux_hidden_state_layer_ids": ids,
            **({"num_aux_hidden_states": len(ids)} if len(ids) != 3 else {}),
        }
        if engine == "vllm":
            return fragment
        if n_layers in ids:
            fragment["recipe_unavailable"] = (
                f"speculators' recipe cannot train on the last layer ({n_layers - 1}, vLLM id {n_layers}): "
                f"{SPECULATORS_RECIPE[0]} captures it as the verifier's last hidden state and the trainer "
                "splits it off the draft's features; choose a set without it, or train the draft otherwise"
            )
            return fragment
        return {
            **fragment,
            "launch_args": ["--target-layer-ids", *map(str, ids + [n_layers])],
            "train_args": ["--target-layer-ids", *map(str, ids)],
        }
    if engine == "openvino":
        if len(layers) != 3:
            raise ValueError(
                f"OpenVINO GenAI's hidden_layers_list takes exactly three layers; this set has {len(layers)} "
                f"({layers}): select with --m 3"
            )
        return {"hidden_layers_list": list(convert_layer_ids(layers, "elsi", engine, n_layers))}
    if engine not in ("sglang", "specforge"):  # declared in `engines`, but no conversion written here yet
        raise ValueError(f"engine {engine!r} is declared but has no id conversion in conventions.engine_fragment")
    if engine == "specforge" and len(layers) != 3:
        raise ValueError(
            f"SpecForge's aux_hidden_state_layer_ids takes exactly three layers; this set has "
            f"{len(layers)} ({layers}): select with --m 3, or use the vllm / speculators / sglang format"
        )
    ids = _sglang_ids(layers, n_layers, architecture, engine)
    if engine == "sglang":
        return {"eagle_config": {"eagle_aux_hidden_state_layer_ids": ids}}
    return {"aux_hidden_state_layer_ids": ids, "eagle_config": {"eagle_aux_hidden_state_layer_ids": ids}}


def engine_reading(engine: str, architecture: str | None = None) -> str:
    """One line: which engine code (and versions) `engine_fragment`'s ids are written for."""
    if engine in ("vllm", "speculators"):
        text = "vLLM: id k = input of decoder layer k (k = N: the last layer's output, before the final norm)"
        return text + (
            "; speculators' launch_vllm.py appends N, train.py takes the ids without it"
            if engine == "speculators"
            else ""
        )
    if engine == "openvino":
        return (
            "OpenVINO GenAI (eagle3_model_transforms.cpp): id k = output of decoder layer k, the MLP's residual Add "
            "in layers.<k>/"
        )
    reading = sglang_reading(architecture)
    text = {
        SGLANG_PLUS_ONE: "SGLang llama.py (every version read): layers_to_capture = [id + 1], id l = output of layer l",
        SGLANG_FIRST_ID: "SGLang deepseek_v2.py since PR #25454: +1 only when the first id is 1, else "
        "id l = input of layer l",
        None: "any SGLang model file: the smallest layer is 1, which every reading takes as output ids",
    }[reading]
    return ("SpecForge (pins sglang==0.5.14) captures through " + text) if engine == "specforge" else text
