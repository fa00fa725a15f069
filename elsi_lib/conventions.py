"""The engines' fixed layer sets (EAGLE-2, EAGLE-3: the paper's baselines) and layer-id conventions.

The paper, and every set `select` returns, number a layer by the output of decoder layer l
(0..N-1). EAGLE's code, vLLM and speculators number the same feature by the input of the next
layer; `convert_layer_ids` translates between them.
"""
from __future__ import annotations

from .entropy import LayerSet, check_layers


def eagle2_layers(n_layers: int) -> LayerSet:
    """EAGLE-2 conditions on the last layer only: (N-1,)."""
    return (n_layers - 1,)


def eagle3_layers(n_layers: int) -> LayerSet:
    """EAGLE-3's fixed rule as the paper writes it, (2, N//2, N-3), in the paper's convention
    (output of decoder layer l). EAGLE's reference code captures the *inputs* of those layers,
    i.e. the outputs of (1, N//2-1, N-4): `convert_layer_ids(eagle3_layers(n), "input", "output", n)`."""
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
        key = ENGINE_CONVENTIONS.get(name, name)
        if key not in CONVENTIONS:
            raise ValueError(f"unknown convention {name!r}; use one of "
                             f"{sorted(CONVENTIONS) + sorted(ENGINE_CONVENTIONS)}")
        return CONVENTIONS[key]

    shift = offset(source)
    lowest = shift
    ids = list(layers)
    for layer in ids:
        if not lowest <= layer < n_layers + lowest:
            raise ValueError(f"layer id {layer} is out of range for {n_layers} layers in the {source!r} "
                             f"convention ({lowest}..{n_layers - 1 + lowest})")
    as_output = check_layers([l - shift for l in ids], n_layers)
    return tuple(l + offset(target) for l in as_output)
