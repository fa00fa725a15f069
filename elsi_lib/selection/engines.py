"""Each engine or training recipe that feeds a draft hidden layers, declared once: the id convention
its code reads, the versions whose layer-id code elsi has read (`conventions` cites the files), why it
cannot take the last layer, whether it reads ids through SGLang's model files, the set size it fixes,
and the method whose set it uses when no layers are given. The parser, the id conversion, the
feasibility rules (`feasible.restriction`) and the decision's default set read ENGINES; an engine not
declared here is refused (`engine`), never given another's rules.

Adding an engine: one `Engine` in ENGINES plus its id conversion in `conventions.engine_fragment`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Engine:
    """An engine or training recipe that feeds a draft hidden layers: its name (also its --format),
    the id convention its code reads ("input" or "output", `conventions.ENGINE_CONVENTIONS`), the
    versions whose layer-id code elsi has read, why it cannot take the last layer (None: it can),
    whether it reads ids through SGLang's model files, the set size it fixes (None: any), and the
    method whose set it uses when no layers are given."""

    name: str
    convention: str
    versions: tuple[str, ...]
    no_last_layer: str | None
    sglang_ids: bool
    size: int | None
    default: str
    size_why: str | None = None  # the rule that fixes `size`, as the restriction states it


ENGINES: dict[str, Engine] = {
    e.name: e
    for e in (
        Engine("vllm", "input", ("0.32.0",), None, False, None, "eagle3"),
        Engine(
            "speculators",
            "input",
            ("0.7.0", "0.9.0"),
            "speculators' recipe takes it as the verifier's last hidden state, not a draft feature",
            False,
            None,
            "eagle3",
        ),  # fmt: skip
        Engine(
            "sglang", "output", ("0.5.14",), "SGLang captures the input of layers 0..N-1 only", True, None, "eagle3"
        ),
        Engine(
            "specforge",
            "output",
            ("a6b6b023",),
            "SGLang captures the input of layers 0..N-1 only",
            True,
            3,
            "eagle3",
            "exactly three layers: SpecForge's aux_hidden_state_layer_ids",
        ),
        # OpenVINO GenAI (openvino.genai src/cpp/src/speculative_decoding/eagle3_model_transforms.cpp): id k is
        # the residual Add after the MLP in `layers.<k>/`, the output of decoder layer k (elsi's own); with no
        # hidden_layers_list it takes {2, N/2, N-3} in that convention, one layer deeper than EAGLE-3's rule
        Engine(
            "openvino",
            "output",
            ("2026.4.1",),
            None,
            False,
            3,
            "eagle3-outputs",
            "exactly three layers: OpenVINO GenAI's hidden_layers_list",
        ),
    )
}


def engine(name: str) -> Engine:
    """The engine `name`; ValueError naming the declared ones otherwise (never another engine's rules)."""
    if name not in ENGINES:
        raise ValueError(f"unknown engine {name!r}; use one of {tuple(ENGINES)}")
    return ENGINES[name]
