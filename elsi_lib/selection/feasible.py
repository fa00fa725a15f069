"""Which layer sets an engine or training recipe can feed a draft, as a restriction of the search
(`Restriction`: the layers a set may hold, those it must hold, the size the engine takes), so that a
user of that stack gets the best set it can use instead of none.

The rules are `conventions.engine_fragment`'s, which stays the authority (`feasible` asks it):
- vllm: every set (id N is the last layer's output).
- speculators: its recipe (`scripts/launch_vllm.py`, `scripts/train.py`) takes vLLM id N as the
  verifier's last hidden state, so a draft feature never holds the last layer N-1.
- sglang: SGLang never captures the last layer's output; llama.py's reading ("plus-one") takes any
  other set; deepseek_v2.py's ("first-id") cannot express layer 0; for a model file elsi has not
  read (Qwen2's among them), only sets whose smallest layer is 1 read the same in every file.
- specforge: SGLang's rules, and exactly three layers.
"""

from __future__ import annotations

from dataclasses import dataclass

from .engines import engine as engine_entry
from .conventions import (
    SGLANG_FIRST_ID,
    SGLANG_PLUS_ONE,
    check_n_layers,
    engine_fragment,
    sglang_reading,
)


@dataclass(frozen=True)
class Restriction:
    """The sets `engine` can use on an N-layer model: only `allowed` layers, every `required` one, and
    `m` layers when the engine fixes the size (None: any). `why`: one line per rule applied."""

    engine: str
    allowed: tuple[int, ...]
    required: tuple[int, ...]
    m: int | None
    why: tuple[str, ...]

    @property
    def restricts(self) -> bool:
        return bool(self.why)


def restriction(engine: str, n_layers: int, architecture: str | None = None) -> Restriction:
    """The restriction `engine` ("vllm", "speculators", "sglang", "specforge") puts on the sets of an
    `n_layers`-layer model of `architecture` (a config's `architectures[0]`, for SGLang's readings)."""
    declared = engine_entry(engine)  # an undeclared engine is refused, never given another's rules
    N = check_n_layers(n_layers)
    allowed, required, why = list(range(N)), [], []
    if declared.no_last_layer is not None:
        allowed.remove(N - 1)
        why.append(f"no last layer ({N - 1}): {declared.no_last_layer}")
    if declared.sglang_ids:
        reading = sglang_reading(architecture)
        if reading == SGLANG_FIRST_ID and 0 in allowed:
            allowed.remove(0)
            why.append(f"no layer 0: SGLang's deepseek_v2.py reading of {architecture} cannot express it")
        elif reading is None:
            if 0 in allowed:
                allowed.remove(0)
            required.append(1)
            why.append(
                f"smallest layer 1: elsi has not read the SGLang model file serving {architecture or 'it'}, "
                "and only a list starting at 1 reads the same in every file"
            )
        else:
            assert reading == SGLANG_PLUS_ONE
    m = declared.size
    if m is not None:
        why.append(declared.size_why or f"exactly {m} layers")
    return Restriction(engine, tuple(allowed), tuple(r for r in required if r in allowed), m, tuple(why))


def feasible(layers, n_layers: int, engine: str, architecture: str | None = None) -> str | None:
    """None when `engine` can feed a draft exactly `layers` (elsi's convention), else why not (the
    engine fragment's own refusal, or speculators' recipe's)."""
    try:
        fragment = engine_fragment(layers, n_layers, engine, architecture)
    except ValueError as err:
        return str(err)
    return fragment.get("recipe_unavailable")


def check_size(restriction: Restriction, m: int) -> None:
    """A set size the engine takes and the restriction allows, or a ValueError naming the constraint."""
    if restriction.m is not None and m != restriction.m:
        raise ValueError(
            f"{restriction.engine} takes exactly {restriction.m} layers ({restriction.why[-1]}), got m = {m}"
        )
    if not len(restriction.required) <= m <= len(restriction.allowed):
        raise ValueError(
            f"{restriction.engine} can use {len(restriction.allowed)} of the layers "
            f"({'; '.join(restriction.why)}): no set of {m}"
        )
