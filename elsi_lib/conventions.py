"""The engines' fixed layer sets (EAGLE-2, EAGLE-3: the paper's baselines) and layer-id conventions.

The paper, and every set `select` returns, number a layer by the output of decoder layer l
(0..N-1). EAGLE's code, vLLM and speculators number the same feature by the input of the next
layer; `convert_layer_ids` translates between them.
"""
from __future__ import annotations

from collections.abc import Iterable

from .checks import LayerSet, check_layers, is_integer


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
    """EAGLE-3's fixed rule as the paper writes it, (2, N//2, N-3), in the paper's convention
    (output of decoder layer l). EAGLE's reference code captures the *inputs* of those layers,
    i.e. the outputs of (1, N//2-1, N-4): `convert_layer_ids(eagle3_layers(n), "input", "output", n)`."""
    n_layers = check_n_layers(n_layers)
    if n_layers < 6:
        raise ValueError(f"the EAGLE-3 rule needs at least 6 layers, got {n_layers}")
    return (2, n_layers // 2, n_layers - 3)


# "output": id l is the output of decoder layer l (0..N-1): the paper, elsi, SGLang/SpecForge.
# "input":  id l is the input of decoder layer l (1..N; input of l = output of l-1): EAGLE's code,
#           vLLM and speculators. Input id 0 would be the embeddings, which no set here contains.
CONVENTIONS = {"output": 0, "input": 1}
ENGINE_CONVENTIONS = {"elsi": "output", "paper": "output", "sglang": "output", "specforge": "output",
                      "eagle": "input", "vllm": "input", "speculators": "input"}


def convert_layer_ids(layers, source: str, target: str, n_layers: int) -> LayerSet:
    """Convert a layer set between id conventions (see CONVENTIONS; engine names are accepted).

    e.g. convert_layer_ids((1, 14, 26), "elsi", "vllm", 30) == (2, 15, 27).
    """
    def offset(name):
        key = ENGINE_CONVENTIONS.get(name, name) if isinstance(name, str) else None
        if key not in CONVENTIONS:
            raise ValueError(f"unknown convention {name!r}; use one of "
                             f"{sorted(CONVENTIONS) + sorted(ENGINE_CONVENTIONS)}")
        return CONVENTIONS[key]

    n_layers = check_n_layers(n_layers)
    if isinstance(layers, (str, bytes)) or not isinstance(layers, Iterable):
        raise TypeError(f"layers must be an iterable of integer layer ids, got {layers!r}")
    ids = list(layers)
    for layer in ids:
        if not is_integer(layer):
            raise TypeError(f"layer ids must be integers, got {layer!r}")
    shift, target_shift = offset(source), offset(target)
    for layer in ids:
        if not shift <= layer < n_layers + shift:
            raise ValueError(f"layer id {layer} is out of range for {n_layers} layers in the {source!r} "
                             f"convention ({shift}..{n_layers - 1 + shift})")
    as_output = check_layers([l - shift for l in ids], n_layers)
    return tuple(l + target_shift for l in as_output)


ENGINE_FORMATS = ("vllm", "speculators", "sglang", "specforge")


def engine_fragment(layers, n_layers: int, engine: str) -> dict:
    """The JSON fragment `engine` reads for an elsi layer set (output convention), converted:
    - vllm / speculators: `eagle_aux_hidden_state_layer_ids`, input-of-layer ids (elsi's l + 1);
      for m != 3 also `num_aux_hidden_states` (vLLM sizes the draft's fc from it, or assumes 3);
    - sglang: `eagle_config.eagle_aux_hidden_state_layer_ids`, output-of-layer ids;
    - specforge: `aux_hidden_state_layer_ids`, output-of-layer ids, exactly three distinct.
    A set a format cannot express is refused with the reason."""
    if engine not in ENGINE_FORMATS:
        raise ValueError(f"unknown engine format {engine!r}; use one of {ENGINE_FORMATS}")
    n_layers = check_n_layers(n_layers)
    ids = list(convert_layer_ids(layers, "elsi", engine, n_layers))
    if engine in ("vllm", "speculators"):
        return {"eagle_aux_hidden_state_layer_ids": ids, **({"num_aux_hidden_states": len(ids)} if len(ids) != 3 else {})}
    if engine == "sglang":
        return {"eagle_config": {"eagle_aux_hidden_state_layer_ids": ids}}
    if len(ids) != 3:
        raise ValueError(f"SpecForge's aux_hidden_state_layer_ids takes exactly three layers; this set has {len(ids)} "
                         f"({tuple(layers)}): select with --m 3, or use the vllm / speculators / sglang format")
    return {"aux_hidden_state_layer_ids": ids}
