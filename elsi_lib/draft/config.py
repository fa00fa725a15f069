"""What describes an EAGLE-3 draft (`DraftConfig`): its shape, the target it was built for (every one
of TARGET_FIELDS must match that target) and its feature source, a layer set in elsi's convention
(the output of decoder layer l, 0..N-1) or FINAL_NORM, EAGLE-2's normed last hidden state. A draft
carries its config into every checkpoint and export (`to_dict` / `from_dict`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import SupportsFloat, cast

from transformers import LlamaConfig

from ..common.checks import LayerSet, check_layers


FAMILIES = ("llama", "qwen2")


# A draft's feature source that is not a layer set: the target's last hidden state after its final
# norm (EAGLE-2's feature, and the input of the target's lm_head). It has no layer id: elsi's layer
# N-1 is the same state *before* the norm. The one definition, used by every module.
FINAL_NORM = "final_norm"


# What a draft must share with its target, field by field (`DraftConfig.check_target`).
TARGET_FIELDS = (
    "family",
    "num_hidden_layers",
    "hidden_size",
    "vocab_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "rms_norm_eps",
    "rope_parameters",
)


def check_source(source, num_hidden_layers: int):
    """A draft's feature source: FINAL_NORM, or a layer set in elsi's convention (output of decoder
    layer l, 0..N-1), returned sorted (features concatenate in ascending layer order)."""
    if isinstance(source, str):
        if source != FINAL_NORM:
            raise ValueError(
                f"a draft's source is a layer set or {FINAL_NORM!r} (the final-norm state), got {source!r}"
            )
        return source
    return check_layers(source, num_hidden_layers)


def _target_shape(config) -> dict:
    """The TARGET_FIELDS of a transformers Llama / Qwen2 config (rope settings as sorted items)."""
    heads = config.num_attention_heads
    rope = getattr(config, "rope_parameters", None)
    if rope is None:  # older transformers spelling
        rope = {"rope_type": "default", "rope_theta": config.rope_theta, **(config.rope_scaling or {})}
    return {
        "family": config.model_type,
        "num_hidden_layers": config.num_hidden_layers,
        "hidden_size": config.hidden_size,
        "vocab_size": config.vocab_size,
        "num_attention_heads": heads,
        "num_key_value_heads": getattr(config, "num_key_value_heads", None) or heads,
        "head_dim": getattr(config, "head_dim", None) or config.hidden_size // heads,
        "rms_norm_eps": config.rms_norm_eps,
        "rope_parameters": tuple(sorted(dict(rope).items())),
    }


@dataclass(frozen=True)
class DraftConfig:
    """Everything that describes an EAGLE-3 draft for one target: its shape, the target it reads
    (`num_hidden_layers` and the rest of TARGET_FIELDS) and its feature `source`: a layer set in
    elsi's convention (layer l is the output of decoder layer l, 0..N-1; features are concatenated
    in ascending layer order) or FINAL_NORM (EAGLE-2's normed last hidden state)."""

    family: str
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    hidden_act: str
    rms_norm_eps: float
    rope_parameters: tuple[tuple[str, object], ...]  # the target's rope settings as sorted items
    max_position_embeddings: int
    vocab_size: int
    draft_vocab_size: int
    num_hidden_layers: int  # the target's decoder layers N
    source: LayerSet | str

    def __post_init__(self):
        if self.family not in FAMILIES:
            raise ValueError(f"unsupported target family {self.family!r}; use one of {FAMILIES}")
        if not 1 <= self.draft_vocab_size <= self.vocab_size:
            raise ValueError(f"draft_vocab_size must be in 1..{self.vocab_size}, got {self.draft_vocab_size}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("num_attention_heads must be a multiple of num_key_value_heads")
        object.__setattr__(
            self, "rope_parameters", tuple(sorted((str(k), v) for k, v in dict(self.rope_parameters).items()))
        )
        object.__setattr__(self, "source", check_source(self.source, self.num_hidden_layers))

    @property
    def reads_final_norm(self) -> bool:
        """True for EAGLE-2's source, the target's final-norm state."""
        return self.source == FINAL_NORM

    @property
    def layer_ids(self) -> LayerSet:
        """The layers the draft reads (elsi convention); an error for a final-norm draft, which reads no layer."""
        source = self.source
        if isinstance(source, str):  # FINAL_NORM, the one string `check_source` lets through
            raise ValueError(
                "this draft reads the target's final-norm state (EAGLE-2's feature), which has no "
                "layer id (layer N-1 is the state before the norm)"
            )
        return source

    @property
    def m(self) -> int:
        """Number of target feature vectors the draft reads per token."""
        return 1 if self.reads_final_norm else len(self.source)

    @property
    def rope_theta(self) -> float:
        return float(cast(SupportsFloat, dict(self.rope_parameters)["rope_theta"]))

    def to_dict(self) -> dict:
        """JSON-ready fields (what a checkpoint or an export records)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["rope_parameters"] = [list(item) for item in self.rope_parameters]
        out["source"] = self.source if self.reads_final_norm else list(self.source)
        return out

    @classmethod
    def from_dict(cls, record: dict) -> DraftConfig:
        record = dict(record)
        missing = sorted({f.name for f in fields(cls)} - set(record))
        if missing:
            raise ValueError(f"a draft record without {missing}")
        record["rope_parameters"] = tuple(tuple(item) for item in record["rope_parameters"])
        record["source"] = record["source"] if isinstance(record["source"], str) else tuple(record["source"])
        return cls(**record)

    @classmethod
    def from_target(cls, target_config, source, draft_vocab_size: int) -> DraftConfig:
        """Draft config from a transformers Llama / Qwen2 config (or a model holding one); `source`
        a layer set (elsi convention) or FINAL_NORM."""
        config = getattr(target_config, "config", target_config)
        if config.model_type not in FAMILIES:
            raise ValueError(f"unsupported target family {config.model_type!r}; use one of {FAMILIES}")
        shape = _target_shape(config)
        return cls(
            **shape,
            intermediate_size=config.intermediate_size,
            hidden_act=config.hidden_act,
            max_position_embeddings=config.max_position_embeddings,
            draft_vocab_size=draft_vocab_size,
            source=check_source(source, shape["num_hidden_layers"]),
        )

    def check_target(self, target) -> None:
        """Refuse a target (a transformers model or its config) this draft was not built for: every
        one of TARGET_FIELDS must match, named in the error."""
        config = getattr(target, "config", target)
        if getattr(config, "model_type", None) not in FAMILIES:
            raise ValueError(f"the target's family {getattr(config, 'model_type', None)!r} is not one of {FAMILIES}")
        theirs = _target_shape(config)
        differ = [
            f"{name}: draft {getattr(self, name)!r}, target {theirs[name]!r}"
            for name in TARGET_FIELDS
            if _norm(getattr(self, name)) != _norm(theirs[name])
        ]
        if differ:
            raise ValueError("the draft does not fit this target (" + "; ".join(differ) + ")")

    def block_config(self) -> LlamaConfig:
        """A one-layer LlamaConfig for the transformers building blocks (and a vLLM draft config)."""
        return LlamaConfig(
            hidden_size=self.hidden_size,
            num_attention_heads=self.num_attention_heads,
            num_key_value_heads=self.num_key_value_heads,
            head_dim=self.head_dim,
            intermediate_size=self.intermediate_size,
            hidden_act=self.hidden_act,
            rms_norm_eps=self.rms_norm_eps,
            rope_parameters=dict(self.rope_parameters),
            max_position_embeddings=self.max_position_embeddings,
            vocab_size=self.vocab_size,
            num_hidden_layers=1,
            attention_bias=False,
            mlp_bias=False,
        )


def _norm(value):
    """Compare config values as JSON would hold them (tuples and lists alike, floats as floats)."""
    if isinstance(value, (tuple, list)):
        return [_norm(v) for v in value]
    return float(value) if isinstance(value, float) else value
