"""Trained drafts in the layouts the EAGLE-3 ecosystem loads, and back (issue 13).

Two layouts, one folder each (config.json + model.safetensors, plus elsi.json with elsi's own
provenance, which no engine reads):
- "speculators" (vLLM's and speculators' format): `speculators_model_type: "eagle3"`, no top-level
  `model_type` (vLLM recognises the format by its absence), `transformer_layer_config` (the draft's
  one-layer Llama config: vLLM and speculators build EAGLE-3 heads from Llama or Qwen3 layers only,
  and ours is the Llama layer for both target families), weights `layers.0.*`;
- "eagle" (SafeAILab/EAGLE's own, read by vLLM): `architectures: ["LlamaForCausalLMEagle3"]`,
  `eagle_config.eagle_aux_hidden_state_layer_ids`, weights `midlayer.*`.
Both: `fc`, `norm`, `lm_head` over the draft vocabulary, `d2t` (target id = draft id + d2t) and
`t2d` (omitted when the draft vocabulary is the whole target vocabulary: vLLM then has no map and
rejects one). The target's embedding is not written (the engines share the target's).

Layer ids: vLLM and speculators count the residual stream after k decoder layers (the input of
layer k, id 0 = the embeddings), elsi the output of layer l, so elsi's l is their l + 1
(`conventions.convert_layer_ids`). EAGLE2's feature, the last layer *after* the final norm, has no
engine id (their id N is before the norm): such a draft is refused. `norm_before_residual: false`
is written explicitly (vLLM's default for the speculators layout is true), and
`num_aux_hidden_states = m` (vLLM sizes `fc` from it, or assumes 3 ids).
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from ..conventions import convert_layer_ids
from ..identity import versions
from .model import Eagle3Draft

FORMATS = ("speculators", "eagle")
SPECULATORS_VERSION = "0.9.0"  # the release whose schema this layout follows


def _weights(draft: Eagle3Draft, prefix: str) -> dict[str, torch.Tensor]:
    state = {k: v.detach().contiguous() for k, v in draft.state_dict().items()}
    if draft.config.draft_vocab_size == draft.config.vocab_size:
        state.pop("d2t"), state.pop("t2d")
    return {k.replace("midlayer.", prefix, 1): v for k, v in state.items()}


def _layer_config(draft: Eagle3Draft) -> dict:
    """The draft's one-layer Llama config as engines read it."""
    block = draft.config.block_config().to_dict()
    block.update({"model_type": "llama", "architectures": ["LlamaForCausalLM"], "num_hidden_layers": 1,
                  "tie_word_embeddings": False, "num_aux_hidden_states": draft.config.m,
                  "rope_theta": draft.config.rope_theta})
    block.pop("transformers_version", None)
    return block


def engine_layer_ids(draft: Eagle3Draft, n_layers: int) -> list[int]:
    """The draft's layers in vLLM / speculators ids (input of that decoder layer)."""
    return list(convert_layer_ids(draft.config.layer_ids, "elsi", "vllm", n_layers))


def save_draft(draft: Eagle3Draft, folder, *, target, source, format: str = "speculators",
               verifier: str | None = None, speculative_tokens: int = 3) -> Path:
    """Write `draft` (reading `source`: its layer tuple in elsi's convention; "final" is refused) to
    `folder` in `format` ("speculators" or "eagle"). `target` (the transformers model the draft was
    trained on) gives the layer count and the verifier's architecture; `verifier` is the path or hub
    id engines load the target from (default: the target's `name_or_path`)."""
    from safetensors.torch import save_file

    if format not in FORMATS:
        raise ValueError(f"unknown format {format!r}; use one of {FORMATS}")
    if source == "final":
        raise ValueError("EAGLE2's feature (the last layer after the target's final norm) has no engine layer id: "
                         "vLLM's and speculators' last id is the residual before the norm; export a layer-set draft")
    if tuple(source) != tuple(draft.config.layer_ids):
        raise ValueError(f"source {tuple(source)} is not the draft's layer set {draft.config.layer_ids}")
    n_layers = target.config.num_hidden_layers
    ids = engine_layer_ids(draft, n_layers)
    verifier = verifier or target.config.name_or_path
    d = draft.config.hidden_size
    common = {"draft_vocab_size": draft.config.draft_vocab_size, "target_hidden_size": d,
              "norm_before_residual": False}
    if format == "speculators":
        config = {"speculators_model_type": "eagle3", "architectures": ["Eagle3Speculator"],
                  "speculators_version": SPECULATORS_VERSION, **common,
                  "norm_before_fc": False, "fc_norm": False, "norm_output": False,
                  "eagle_aux_hidden_state_layer_ids": ids, "transformer_layer_config": _layer_config(draft),
                  "speculators_config": {
                      "algorithm": "eagle3", "default_proposal_method": "greedy",
                      "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": speculative_tokens,
                                            "verifier_accept_k": 1, "accept_tolerance": 0.0}],
                      "verifier": {"name_or_path": str(verifier),
                                   "architectures": list(target.config.architectures or ["LlamaForCausalLM"])}}}
        prefix = "layers.0."
    else:
        config = {**_layer_config(draft), "architectures": ["LlamaForCausalLMEagle3"], **common,
                  "eagle_aux_hidden_state_layer_ids": ids,  # vLLM's V2 runner reads only this one
                  "eagle_config": {"eagle_aux_hidden_state_layer_ids": ids, "use_aux_hidden_state": True}}
        prefix = "midlayer."
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    save_file(_weights(draft, prefix), str(folder / "model.safetensors"), metadata={"format": "pt"})
    provenance = {"format": format, "layer_ids_elsi": list(draft.config.layer_ids), "engine_layer_ids": ids,
                  "target_layers": n_layers, "target_family": draft.config.family, "verifier": str(verifier),
                  "library": versions()}
    (folder / "elsi.json").write_text(json.dumps(provenance, indent=2, sort_keys=True) + "\n")
    return folder


def read_layout(folder) -> tuple[str, dict, list[int]]:
    """(format, config, engine layer ids) of an exported draft folder."""
    config = json.loads((Path(folder) / "config.json").read_text())
    if config.get("speculators_model_type") == "eagle3":
        if "model_type" in config:
            raise ValueError("a speculators config must not have a top-level model_type (vLLM would not "
                             "recognise the layout)")
        return "speculators", config, list(config["eagle_aux_hidden_state_layer_ids"])
    if any("Eagle3" in a for a in config.get("architectures", [])):
        return "eagle", config, list(config["eagle_config"]["eagle_aux_hidden_state_layer_ids"])
    raise ValueError(f"{folder}: neither a speculators eagle3 nor an EAGLE-3 config")


def load_draft(folder, target) -> Eagle3Draft:
    """Read a folder `save_draft` wrote (either layout) back into an `Eagle3Draft` on `target`'s
    embedding. Every weight must be present and none unexpected (engines load a checkpoint with
    missing weights silently, so this is where it is caught)."""
    from safetensors.torch import load_file

    folder = Path(folder)
    format, config, ids = read_layout(folder)
    layer = config["transformer_layer_config"] if format == "speculators" else config
    n_layers = target.config.num_hidden_layers
    layer_ids = convert_layer_ids(ids, "vllm", "elsi", n_layers)
    draft = Eagle3Draft.from_target(target, layer_ids, int(config["draft_vocab_size"]))
    for name in ("hidden_size", "num_attention_heads", "num_key_value_heads", "intermediate_size", "vocab_size"):
        mine = getattr(draft.config, name)
        if int(layer[name]) != mine:
            raise ValueError(f"{folder}: {name} = {layer[name]} does not match the target's draft shape ({mine})")
    if int(config.get("target_hidden_size") or draft.config.hidden_size) != draft.config.hidden_size:
        raise ValueError(f"{folder}: target_hidden_size = {config['target_hidden_size']}, the target's is "
                         f"{draft.config.hidden_size}")
    variants = {"norm_before_residual": config.get("norm_before_residual", format == "speculators"),
                **{name: config.get(name, False) for name in ("norm_before_fc", "fc_norm", "norm_output")}}
    if any(variants.values()):
        raise ValueError(f"{folder}: {variants}: elsi's draft has none of these variants (a missing "
                         "norm_before_residual means true in the speculators layout)")
    if int(layer.get("num_aux_hidden_states", len(ids))) != len(ids):
        raise ValueError(f"{folder}: num_aux_hidden_states = {layer['num_aux_hidden_states']} but {len(ids)} layer ids")
    prefix = "layers.0." if format == "speculators" else "midlayer."
    weights = {k.replace(prefix, "midlayer.", 1): v for k, v in load_file(str(folder / "model.safetensors")).items()}
    expected = set(_weights(draft, "midlayer."))
    missing, unexpected = sorted(expected - set(weights)), sorted(set(weights) - expected)
    if missing or unexpected:
        raise ValueError(f"{folder}: missing weights {missing}, unexpected weights {unexpected}")
    draft.load_state_dict(weights, strict=False)  # d2t / t2d keep their defaults when the vocabulary is full
    if "d2t" in weights:
        draft.set_vocabulary(weights["d2t"], weights["t2d"])  # checked for consistency
    return draft.eval()
