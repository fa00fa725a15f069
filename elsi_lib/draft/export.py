"""Trained drafts in the layouts the EAGLE-3 ecosystem loads, and back.

Three layouts, one folder each (config.json + model.safetensors, plus elsi.json with elsi's own
provenance, which no engine reads):
- "speculators" (vLLM's and speculators' format): `speculators_model_type: "eagle3"`, no top-level
  `model_type` (vLLM recognises the format by its absence), `transformer_layer_config` (the draft's
  one-layer Llama config: vLLM and speculators build EAGLE-3 heads from Llama or Qwen3 layers only,
  and ours is the Llama layer for both target families), weights `layers.0.*`;
- "eagle" (SafeAILab/EAGLE's own, read by vLLM): `architectures: ["LlamaForCausalLMEagle3"]`,
  `eagle_config.eagle_aux_hidden_state_layer_ids`, weights `midlayer.*`.
- "openvino" (OpenVINO GenAI's EAGLE-3 pipeline, through optimum-intel's export, which builds
  `LlamaEagle3ForCausalLM` for the architecture `LlamaForCausalLMEagle3`: optimum-intel 2.2.0
  `exporters/openvino/model_patcher.py`): the "eagle" config without vLLM's ids, `hidden_layers_list`
  instead (OpenVINO's id k is the output of decoder layer k, elsi's own: openvino.genai
  `speculative_decoding/eagle3_model_transforms.cpp`, `find_decoder_layer_hidden_state_outputs` matches
  the MLP's residual Add in `layers.<k>/`), weights under that class's `model.` prefix, `d2t` and `t2d`
  always (its buffers are zeros otherwise: a full vocabulary's d2t is zeros anyway), and the target's
  embedding as `model.embed_tokens.weight` (the class has one; OpenVINO replaces it with the target's
  at load, `share_vocabulary`). Exactly three layers: optimum-intel sizes `fc` as 3 x hidden and
  OpenVINO asserts three ids. `engines/check_openvino.py` converts it to IR and writes the ids into
  the IR's rt_info, where the pipeline reads them.
The first two: `fc`, `norm`, `lm_head` over the draft vocabulary, `d2t` (target id = draft id + d2t) and
`t2d` (omitted when the draft vocabulary is the whole target vocabulary: vLLM then has no map and
rejects one). The target's embedding is not written (the engines share the target's).

Layer ids: vLLM and speculators count the residual stream after k decoder layers (the input of
layer k, id 0 = the embeddings), elsi the output of layer l, so elsi's l is their l + 1
(`conventions.convert_layer_ids`). EAGLE2's feature, the last layer *after* the final norm, has no
engine id (their id N is before the norm): such a draft is refused. `norm_before_residual: false`
is written explicitly (vLLM's default for the speculators layout is true), and
`num_aux_hidden_states = m` (vLLM sizes `fc` from it, or assumes 3 ids).

Nothing is lost: `save_draft` checks the target against the draft before writing, writes the whole
export into a fresh folder beside the destination and swaps it in with one atomic rename (so an
interrupted save leaves the earlier export as it was, and no file of an earlier save survives), and
refuses a destination that holds anything but an earlier elsi export. `elsi.json` records the draft's
full config, the numeric settings it was trained with (`Eagle3Draft.numeric`), the target's weight
hash and the sha256 of every other file; `load_draft` verifies all
of them and cross-checks `config.json` (the file engines build the draft from) against that record.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from ..common.cachefiles import check_parents, replace_folder, sha256_file
from ..common.checks import is_integer, unique_keys
from ..common.hardware import NUMERIC_COLUMNS
from ..selection.conventions import convert_layer_ids
from ..common.identity import model_fingerprint, versions
from .model import Eagle3Draft
from .config import DraftConfig

FORMATS = ("speculators", "eagle", "openvino")
ENGINE_OF = {"speculators": "speculators", "eagle": "vllm", "openvino": "openvino"}  # whose layer ids each writes
OPENVINO_PREFIX = "model."  # optimum-intel's LlamaEagle3ForCausalLM holds every module under .model
SPECULATORS_VERSION = "0.9.0"  # the release whose schema this layout follows
RECORD = "elsi.json"  # elsi's own record of an export (no engine reads it)
EXPORT_FORMAT = 2  # the record's layout; 1 (before checksums) is not read
MAX_SPECULATIVE_TOKENS = 32
EXPORT_FILES = ("config.json", "model.safetensors")  # what an export holds besides its record
FIRST_EXPORT = ("config.json", "model.safetensors", RECORD)  # what an export of format 1 held


class ExportError(ValueError):
    """An export folder that is not what `save_draft` wrote: a missing, altered or extra file, or a
    config that contradicts elsi's record. The message names the file."""


def _weights(draft: Eagle3Draft, format: str) -> dict[str, torch.Tensor]:
    """The draft's state dict under `format`'s names (see the module's docstring)."""
    state = {k: v.detach().contiguous() for k, v in draft.state_dict().items()}
    if format == "openvino":
        state["embed_tokens.weight"] = draft.embed_weight.detach().contiguous()
        return {OPENVINO_PREFIX + k: v for k, v in state.items()}
    if draft.config.draft_vocab_size == draft.config.vocab_size:
        state.pop("d2t"), state.pop("t2d")
    prefix = "layers.0." if format == "speculators" else "midlayer."
    return {k.replace("midlayer.", prefix, 1): v for k, v in state.items()}


def _elsi_names(weights: dict, format: str) -> dict:
    """`_weights`' names back to the draft's own (the target's embedding dropped: the draft shares it)."""
    if format == "openvino":
        return {
            k.removeprefix(OPENVINO_PREFIX): v
            for k, v in weights.items()
            if k != OPENVINO_PREFIX + "embed_tokens.weight"
        }
    prefix = "layers.0." if format == "speculators" else "midlayer."
    return {k.replace(prefix, "midlayer.", 1): v for k, v in weights.items()}


def _layer_config(draft: Eagle3Draft) -> dict:
    """The draft's one-layer Llama config as engines read it."""
    block = draft.config.block_config().to_dict()
    block.update(
        {
            "model_type": "llama",
            "architectures": ["LlamaForCausalLM"],
            "num_hidden_layers": 1,
            "tie_word_embeddings": False,
            "num_aux_hidden_states": draft.config.m,
            "rope_theta": draft.config.rope_theta,
        }
    )
    block.pop("transformers_version", None)
    return block


def engine_layer_ids(draft: Eagle3Draft, engine: str = "vllm") -> list[int]:
    """The draft's layers in `engine`'s ids (vLLM / speculators: input of that decoder layer;
    OpenVINO: output, elsi's own)."""
    return list(convert_layer_ids(draft.config.layer_ids, "elsi", engine, draft.config.num_hidden_layers))


def _engine_config(draft: Eagle3Draft, format: str, target, verifier: str, speculative_tokens: int) -> dict:
    ids = engine_layer_ids(draft, ENGINE_OF[format])
    common = {
        "draft_vocab_size": draft.config.draft_vocab_size,
        "target_hidden_size": draft.config.hidden_size,
        "norm_before_residual": False,
    }
    if format == "openvino":
        return {
            **_layer_config(draft),
            "architectures": ["LlamaForCausalLMEagle3"],
            **common,
            "hidden_layers_list": ids,
        }
    if format == "eagle":
        return {
            **_layer_config(draft),
            "architectures": ["LlamaForCausalLMEagle3"],
            **common,
            "eagle_aux_hidden_state_layer_ids": ids,  # vLLM's V2 runner reads only this one
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": ids, "use_aux_hidden_state": True},
        }
    return {
        "speculators_model_type": "eagle3",
        "architectures": ["Eagle3Speculator"],
        "speculators_version": SPECULATORS_VERSION,
        **common,
        "norm_before_fc": False,
        "fc_norm": False,
        "norm_output": False,
        "eagle_aux_hidden_state_layer_ids": ids,
        "transformer_layer_config": _layer_config(draft),
        "speculators_config": {
            "algorithm": "eagle3",
            "default_proposal_method": "greedy",
            "proposal_methods": [
                {
                    "proposal_type": "greedy",
                    "speculative_tokens": speculative_tokens,
                    "verifier_accept_k": 1,
                    "accept_tolerance": 0.0,
                }
            ],
            "verifier": {
                "name_or_path": str(verifier),
                "architectures": list(target.config.architectures or ["LlamaForCausalLM"]),
            },
        },
    }


def _check_destination(folder: Path) -> None:
    """Refuse to replace anything but an earlier elsi export (or an empty folder): a folder whose record
    is elsi's and which holds exactly the files that record lists (an export replaced whole never takes
    a file of the user's with it: a tokenizer or a note added beside an export is refused, named)."""
    check_parents(folder)
    if not folder.exists():
        return
    if folder.is_symlink() or not folder.is_dir():
        raise FileExistsError(f"{folder} is a {'link' if folder.is_symlink() else 'file'}, not an export folder")
    entries = sorted(p.name for p in folder.iterdir())
    if not entries:
        return
    changed: list = []
    try:
        record = json.loads((folder / RECORD).read_text())
        if record.get("written_by") == "elsi save_draft" and isinstance(record.get("files"), dict):
            written = {RECORD, *record["files"]}  # format 2 lists every file it wrote, with its checksum
            changed = sorted(
                name
                for name, digest in record["files"].items()
                if name in entries and (not (folder / name).is_file() or sha256_file(folder / name) != digest)
            )
        elif isinstance(record, dict) and "layer_ids_elsi" in record:
            read_layout(folder)  # format 1 had no checksums: its config must at least be a draft's (not a model's)
            written = set(FIRST_EXPORT)  # format 1 wrote these three
        else:
            written = set()
    except (OSError, ValueError, AttributeError):
        written, changed = set(), []
    if changed:
        raise FileExistsError(
            f"{folder} holds {changed}, which differ from what the earlier export there wrote: "
            "save_draft replaces only its own exports, unaltered (choose another folder, or move them)"
        )
    foreign = sorted(set(entries) - written)
    if not written or foreign:
        shown = foreign or entries
        raise FileExistsError(
            f"{folder} holds {shown[:5]}{' ...' if len(shown) > 5 else ''}"
            + (", which the earlier export there did not write" if written else " and is not an earlier elsi export")
            + ": save_draft replaces only its own exports whole (choose another folder, or move those files)"
        )


def _verifier(verifier, target) -> str:
    """The path or hub id engines load the target from: `verifier`, else the target's name_or_path;
    never empty (an engine would have no target to verify with)."""
    if verifier is None:
        verifier = getattr(target.config, "name_or_path", "") or ""
        if not str(verifier).strip():
            raise ValueError(
                "the target names no folder or hub id (its config's name_or_path is empty): pass "
                "verifier=, the path or hub id engines load the target from"
            )
    if (
        not isinstance(verifier, (str, os.PathLike))
        or not str(verifier).strip()
        or str(verifier) != str(verifier).strip()
    ):
        raise ValueError(
            f"verifier must be the path or hub id engines load the target from (no surrounding spaces), got {verifier!r}"
        )
    local = Path(verifier)  # a folder here: its absolute path, or engines started elsewhere read it as another
    return str(local.resolve()) if not local.is_absolute() and local.exists() else str(verifier)


def save_draft(
    draft: Eagle3Draft,
    folder,
    *,
    target,
    format: str = "speculators",
    verifier: str | None = None,
    speculative_tokens: int | None = None,
) -> Path:
    """Write `draft` to `folder` in `format` ("speculators", "eagle" or "openvino"). `target` (the transformers
    model the draft was trained on) must fit the draft (`DraftConfig.check_target`) and gives the
    verifier's architecture and weight hash; `verifier` is the path or hub id engines load the target
    from (default: the target's `name_or_path`). A final-norm (EAGLE-2) draft has no engine layer id
    and is refused. `folder` must be new, empty or an earlier elsi export, which is replaced whole."""

    if format not in FORMATS:
        raise ValueError(f"unknown format {format!r}; use one of {FORMATS}")
    if draft.config.reads_final_norm:
        raise ValueError(
            "EAGLE2's feature (the last layer after the target's final norm) has no engine layer id: "
            "vLLM's and speculators' last id is the residual before the norm; export a layer-set draft"
        )
    if format == "openvino" and draft.config.m != 3:
        raise ValueError(
            f"OpenVINO GenAI's EAGLE-3 pipeline takes exactly three layers (its hidden_layers_list; optimum-intel "
            f"sizes the draft's fc as 3 x hidden), this draft reads {draft.config.m}: {draft.config.layer_ids}"
        )
    if speculative_tokens is not None and format != "speculators":  # an engine takes it at launch there
        raise ValueError(
            f"speculative_tokens goes into a speculators config only; the {format} format has no field for it"
        )
    speculative_tokens = 3 if speculative_tokens is None else speculative_tokens
    if not is_integer(speculative_tokens) or not 1 <= speculative_tokens <= MAX_SPECULATIVE_TOKENS:
        raise ValueError(
            f"speculative_tokens must be an integer in 1..{MAX_SPECULATIVE_TOKENS}, got {speculative_tokens!r}"
        )
    speculative_tokens = int(speculative_tokens)  # numpy's integers too: the config is JSON
    draft.config.check_target(target)
    if not torch.equal(draft._shared[0].detach().cpu(), target.get_input_embeddings().weight.detach().cpu()):
        raise ValueError(  # of the same shapes, another model: the export would name it as the draft's verifier
            "the draft reads another model's token embedding than `target`'s: save it with the target it was "
            "trained on (its verifier and weights' sha256 go into the export)"
        )
    if draft.numeric is not None:
        _check_numeric(draft.numeric, "the draft")
    for name, w in draft.state_dict().items():  # engines would load a diverged draft without a word
        if w.is_floating_point() and (w.dtype != torch.float32 or not w.isfinite().all()):
            raise ValueError(
                f"the draft's {name} is not finite float32 ({w.dtype}): elsi exports finite float32 weights"
            )
    folder = Path(folder)
    _check_destination(folder)
    verifier = _verifier(verifier, target)
    config = _engine_config(draft, format, target, verifier, speculative_tokens)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}.", suffix=".tmp"))
    try:
        (tmp / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        save_file(_weights(draft, format), str(tmp / "model.safetensors"), metadata={"format": "pt"})
        record = {
            "written_by": "elsi save_draft",
            "export_format": EXPORT_FORMAT,
            "format": format,
            "draft": draft.config.to_dict(),
            "engine_layer_ids": config.get("hidden_layers_list", config.get("eagle_aux_hidden_state_layer_ids")),
            "verifier": str(verifier),
            "target_weights_sha256": model_fingerprint(target)["weights_sha256"],
            "target_dtype": str(next(target.parameters()).dtype),
            "library": versions(),
            "numeric": draft.numeric or {"training": "not recorded (not trained by elsi's train_drafts)"},
            "files": {name: sha256_file(tmp / name) for name in EXPORT_FILES},
        }
        (tmp / RECORD).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
        for path in tmp.iterdir():
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())
        replace_folder(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return folder


def read_layout(folder) -> tuple[str, dict, list[int]]:
    """(format, config, engine layer ids) of an exported draft folder."""
    path = Path(folder) / "config.json"
    try:
        config = json.loads(path.read_text(), object_pairs_hook=unique_keys)
    except (OSError, ValueError, RecursionError) as err:
        raise ExportError(f"{path}: unreadable ({err})") from err
    try:
        form, config, ids = _layout(path, config)
    except (KeyError, TypeError, AttributeError) as err:
        raise ExportError(f"{path}: malformed ({type(err).__name__}: {err})") from None
    if not ids or not all(is_integer(i) and i >= 0 for i in ids) or len(set(ids)) != len(ids):
        raise ExportError(f"{path}: its layer ids {ids!r} must be distinct non-negative integers")
    return form, config, ids


def _layout(path: Path, config: dict) -> tuple[str, dict, list[int]]:
    if not isinstance(config, dict):
        raise ExportError(f"{path}: not a config (a JSON object)")
    if config.get("speculators_model_type") == "eagle3":
        if "model_type" in config:
            raise ExportError(
                f"{path}: a speculators config must not have a top-level model_type (vLLM would "
                "not recognise the layout)"
            )
        return "speculators", config, list(config["eagle_aux_hidden_state_layer_ids"])
    architectures = config.get("architectures", [])
    if not (isinstance(architectures, list) and all(isinstance(a, str) for a in architectures)):
        raise ExportError(f"{path}: field 'architectures' is {architectures!r}, not a list of class names")
    if any("Eagle3" in a for a in architectures):
        if "hidden_layers_list" in config:
            if "eagle_config" in config or "eagle_aux_hidden_state_layer_ids" in config:
                raise ExportError(
                    f"{path}: holds both OpenVINO's hidden_layers_list and vLLM's layer ids: one engine's "
                    "layout each (each engine would read other ids)"
                )
            return "openvino", config, list(config["hidden_layers_list"])
        ids = list(config["eagle_config"]["eagle_aux_hidden_state_layer_ids"])
        if (
            config.get("eagle_aux_hidden_state_layer_ids", ids) != ids
            or config["eagle_config"].get("use_aux_hidden_state", True) is not True
        ):
            raise ExportError(
                f"{path}: eagle_aux_hidden_state_layer_ids {config.get('eagle_aux_hidden_state_layer_ids')} (vLLM's V2 "
                f"runner reads these) and eagle_config's {ids} (use_aux_hidden_state "
                f"{config['eagle_config'].get('use_aux_hidden_state')}) must be one set, used"
            )
        return "eagle", config, ids
    raise ExportError(f"{path}: neither a speculators eagle3 nor an EAGLE-3 config")


def _read_record(folder: Path) -> dict:
    """elsi's record of the export, after every listed file's checksum and the absence of any
    other file are verified."""
    path = folder / RECORD
    try:
        record = json.loads(path.read_text(), object_pairs_hook=unique_keys)
    except (OSError, ValueError, RecursionError) as err:
        raise ExportError(f"{path}: missing or unreadable ({err}); this is not an elsi export") from err
    if not isinstance(record, dict) or record.get("export_format") != EXPORT_FORMAT:
        raise ExportError(f"{path}: not an elsi export of format {EXPORT_FORMAT} (export the draft again)")
    listed = record.get("files", {})
    if not isinstance(listed, dict) or sorted(listed) != sorted(EXPORT_FILES):
        raise ExportError(f"{path}: its 'files' must list exactly {list(EXPORT_FILES)} with checksums, got {listed!r}")
    extra = sorted(p.name for p in folder.iterdir() if p.name not in listed and p.name != RECORD)
    if extra:
        raise ExportError(f"{folder}: files {extra} are not part of the export (an engine could read them)")
    for name, digest in listed.items():
        if not (folder / name).is_file():
            raise ExportError(f"{folder / name}: missing")
        if sha256_file(folder / name) != digest:
            raise ExportError(f"{folder / name}: checksum mismatch (altered or corrupt since it was exported)")
    return record


def _cross_check(path: Path, format: str, config: dict, ids: list[int], draft_config: DraftConfig) -> None:
    """config.json against elsi's record: every field an engine builds the draft from."""
    layer = config.get("transformer_layer_config", {}) if format == "speculators" else config
    expected = {
        "engine layer ids": (
            ids,
            list(convert_layer_ids(draft_config.layer_ids, "elsi", ENGINE_OF[format], draft_config.num_hidden_layers)),
        ),
        "draft_vocab_size": (config.get("draft_vocab_size"), draft_config.draft_vocab_size),
        "target_hidden_size": (config.get("target_hidden_size"), draft_config.hidden_size),
        "num_aux_hidden_states": (layer.get("num_aux_hidden_states"), draft_config.m),
        "rope_theta": (layer.get("rope_theta"), draft_config.rope_theta),
    }
    block = draft_config.block_config().to_dict()
    for name in (
        "hidden_size",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "intermediate_size",
        "hidden_act",
        "rms_norm_eps",
        "vocab_size",
        "rope_parameters",
    ):
        expected[name] = (layer.get(name), block[name])
    differ = [
        f"{name} = {mine!r}, elsi's record {theirs!r}"
        for name, (mine, theirs) in expected.items()
        if json.loads(json.dumps(mine)) != json.loads(json.dumps(theirs))
    ]
    variants = {
        "norm_before_residual": config.get("norm_before_residual", format == "speculators"),
        **{name: config.get(name, False) for name in ("norm_before_fc", "fc_norm", "norm_output")},
    }
    if any(variants.values()):
        differ.append(
            f"{variants}: elsi's draft has none of these variants (a missing norm_before_residual "
            "means true in the speculators layout)"
        )
    for name in ("attention_bias", "mlp_bias", "tie_word_embeddings"):  # elsi's draft has neither bias nor tying
        if layer.get(name, False) is not False:
            differ.append(f"{name} = {layer.get(name)!r}, elsi's draft has none")
    if format == "speculators":
        proposal = config.get("speculators_config", {})
        methods = proposal.get("proposal_methods") or [{}]
        tokens = methods[0].get("speculative_tokens")
        if proposal.get("algorithm") != "eagle3":
            differ.append(f"speculators_config.algorithm = {proposal.get('algorithm')!r}, not 'eagle3'")
        if not (is_integer(tokens) and 1 <= tokens <= MAX_SPECULATIVE_TOKENS):
            differ.append(f"speculative_tokens = {tokens!r}, not in 1..{MAX_SPECULATIVE_TOKENS}")
        verifier = proposal.get("verifier", {}).get("name_or_path")
        if not (isinstance(verifier, str) and verifier.strip()):
            differ.append(f"the verifier's name_or_path = {verifier!r}: engines would have no target")
    if differ:
        raise ExportError(f"{path}: " + "; ".join(differ))


def _differences(mine, theirs, where: str = "") -> list[str]:
    """The key paths at which two JSON values differ ("a.b[0].c = found, expected")."""
    if isinstance(mine, dict) and isinstance(theirs, dict):
        return [
            d
            for key in sorted(set(mine) | set(theirs))
            for d in _differences(mine.get(key, "<absent>"), theirs.get(key, "<absent>"), f"{where}.{key}".lstrip("."))
        ]
    if isinstance(mine, list) and isinstance(theirs, list) and len(mine) == len(theirs):
        return [d for i, (a, b) in enumerate(zip(mine, theirs)) for d in _differences(a, b, f"{where}[{i}]")]
    return [] if mine == theirs else [f"{where} = {mine!r}, elsi writes {theirs!r}"]


def _check_whole_config(folder: Path, config: dict, draft: Eagle3Draft, format: str, target, record) -> None:
    """config.json is exactly what `save_draft` writes for this draft (every field an engine reads:
    layer count, positions, architecture, proposal settings, the ids under every name an engine
    looks for), the speculative tokens aside (a user's choice within range, checked above)."""
    tokens = 3
    if format == "speculators":
        tokens = config["speculators_config"]["proposal_methods"][0]["speculative_tokens"]
    expected = json.loads(json.dumps(_engine_config(draft, format, target, record.get("verifier"), tokens)))
    differ = _differences(config, expected)
    if differ:
        made = (record.get("library") or {}).get("transformers")
        note = "" if made in (None, versions()["transformers"]) else f" (exported under transformers {made})"
        raise ExportError(
            f"{folder / 'config.json'}: not the config elsi writes for this draft{note}: " + "; ".join(differ[:6])
        )


def _check_numeric(numeric, where) -> None:
    """A draft's numeric settings as `numeric_settings` gives them: its matmuls ('bf16' or 'float32') and
    its target features ('store' or 'live', with that forward's precision); ExportError naming `where`."""
    if not (
        isinstance(numeric, dict)
        and tuple(numeric) == NUMERIC_COLUMNS
        and numeric["draft matmuls"] in ("bf16", "float32")
        and isinstance(numeric["target features"], str)
        and re.fullmatch(r"(store|live) \((bf16|float32) forward\)", numeric["target features"])
    ):
        raise ExportError(
            f"{where}: numeric = {numeric!r}, not a draft's settings ({', '.join(NUMERIC_COLUMNS)}: 'bf16' or "
            "'float32', and 'store' or 'live' with its forward's precision, e.g. 'store (float32 forward)')"
        )


def _check_verifier(folder: Path, verifier: dict, record: dict, target) -> None:
    """The speculators layout's verifier (what vLLM and speculators build the target from) is the one
    elsi's record names and of `target`'s architecture."""
    have = list(target.config.architectures or ["LlamaForCausalLM"])
    if verifier.get("architectures") != have:
        raise ExportError(
            f"{folder / 'config.json'}: the verifier's architectures {verifier.get('architectures')!r}, "
            f"the target's {have}: engines would build another target than the draft was trained on"
        )
    if verifier.get("name_or_path") != record.get("verifier"):
        raise ExportError(
            f"{folder / 'config.json'}: the verifier's name_or_path {verifier.get('name_or_path')!r}, "
            f"elsi's record {record.get('verifier')!r}"
        )


def load_draft(folder, target) -> Eagle3Draft:
    """Read a folder `save_draft` wrote (any layout) back into an `Eagle3Draft` on `target`'s
    embedding, after checking every file's checksum (and that no other file is there), config.json
    against elsi's record, the draft against `target` and `target`'s weights against the ones the
    draft was exported with. Every weight must be present and none unexpected (engines load a
    checkpoint with missing weights silently, so this is where it is caught)."""

    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: no such export folder")
    record = _read_record(folder)
    format, config, ids = read_layout(folder)
    if format != record["format"]:
        raise ExportError(f"{folder / 'config.json'}: a {format} layout, elsi's record says {record['format']}")
    try:
        draft_config = DraftConfig.from_dict(record["draft"])
    except (KeyError, TypeError, ValueError) as err:
        raise ExportError(f"{folder / RECORD}: its draft config is unusable ({err})") from None
    try:
        _cross_check(folder / "config.json", format, config, ids, draft_config)
    except (AttributeError, TypeError, KeyError, IndexError) as err:  # a block that is null, a list for a mapping
        raise ExportError(f"{folder / 'config.json'}: malformed ({type(err).__name__}: {err})") from None
    if record.get("engine_layer_ids") != ids:
        raise ExportError(
            f"{folder / RECORD}: engine_layer_ids {record.get('engine_layer_ids')} but config.json says {ids}"
        )
    try:
        draft_config.check_target(target)
    except ValueError as err:
        raise ExportError(f"{folder}: {err}") from None
    if format == "speculators":
        _check_verifier(folder, config["speculators_config"].get("verifier", {}), record, target)
    draft = Eagle3Draft(draft_config, target.get_input_embeddings(), seed=0)  # its weights read below
    _check_whole_config(folder, config, draft, format, target, record)
    if model_fingerprint(target)["weights_sha256"] != record.get("target_weights_sha256"):
        raise ExportError(
            f"{folder / RECORD}: the target's weights differ from those the draft was exported "
            f"against ({record.get('target_dtype', 'dtype not recorded')}; this target: {next(target.parameters()).dtype}): "
            "another model of the same shape"
        )
    try:
        written = load_file(str(folder / "model.safetensors"))
    except Exception as err:  # noqa: BLE001 (safetensors' own error types: a header or a file it cannot read)
        raise ExportError(f"{folder / 'model.safetensors'}: unreadable ({type(err).__name__}: {err})") from None
    if format == "openvino":
        embed = written.get(OPENVINO_PREFIX + "embed_tokens.weight")
        if embed is None or not torch.equal(embed, draft.embed_weight):
            raise ExportError(
                f"{folder / 'model.safetensors'}: model.embed_tokens.weight is not the target's embedding"
            )
    for name, tensor in written.items():
        if name.endswith(("d2t",)) and tensor.dtype != torch.int64:
            raise ExportError(f"{folder / 'model.safetensors'}: {name} is {tensor.dtype}, not int64 (a token offset)")
        if name.endswith("t2d") and tensor.dtype != torch.bool:
            raise ExportError(f"{folder / 'model.safetensors'}: {name} is {tensor.dtype}, not bool")
        if tensor.is_floating_point() and (tensor.dtype != torch.float32 or not torch.isfinite(tensor).all()):
            raise ExportError(
                f"{folder / 'model.safetensors'}: {name} is {tensor.dtype}"
                + ("" if tensor.dtype != torch.float32 else " with non-finite values")
                + ": elsi exports finite float32 weights"
            )
    weights = _elsi_names(written, format)
    expected = set(_elsi_names(_weights(draft, format), format))
    missing, unexpected = sorted(expected - set(weights)), sorted(set(weights) - expected)
    if missing or unexpected:
        raise ExportError(f"{folder / 'model.safetensors'}: missing weights {missing}, unexpected weights {unexpected}")
    expected_shapes = {k: v.shape for k, v in draft.state_dict().items()}
    wrong = [
        f"{k} {tuple(v.shape)} (expected {tuple(expected_shapes[k])})"
        for k, v in weights.items()
        if v.shape != expected_shapes[k]
    ]
    if wrong:
        raise ExportError(f"{folder / 'model.safetensors'}: weights of the wrong shape: {', '.join(wrong)}")
    draft.load_state_dict(weights, strict=False)  # d2t / t2d keep their defaults when the vocabulary is full
    if "d2t" in weights:
        try:
            draft.set_vocabulary(weights["d2t"], weights["t2d"])  # checked for consistency
        except ValueError as err:
            raise ExportError(f"{folder / 'model.safetensors'}: d2t / t2d: {err}") from None
    numeric = record.get("numeric")
    untrained = isinstance(numeric, dict) and set(numeric) == {"training"}
    if not untrained:
        _check_numeric(numeric, folder / RECORD)
    draft.numeric = None if untrained else numeric
    return draft.eval()
