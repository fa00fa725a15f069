"""A model folder's weights files and what is wrong with them: which files transformers reads
(`weights_files`), whether a folder holds any (`check_weights_present`), and, after a failed load,
which file is cut short or corrupt (`raise_weights_problem`), so that the error names the file
rather than the loader's message about something else.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

from safetensors import safe_open


class ModelNotFoundError(LookupError):
    """Raised when a model name, file or package cannot be resolved; the message says what to do."""


class ModelFileError(ValueError):
    """A model file that cannot be read (truncated, corrupt, not the format its name says)."""


# the weights files transformers reads from a local folder, in its order of preference
WEIGHTS_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)


def check_weights_present(folder: Path) -> None:
    """A model folder holds one of WEIGHTS_FILES: say so now, not through the tokenizer's or the
    loader's message about something else."""
    if not any((folder / name).is_file() for name in WEIGHTS_FILES):
        ggufs = sorted(folder.glob("*.gguf"))
        hint = f"; to load a GGUF file, pass its path ({ggufs[0]})" if ggufs else ""
        raise ModelNotFoundError(
            f"no weights file in {folder} (expected {', '.join(WEIGHTS_FILES[:-1])} or {WEIGHTS_FILES[-1]}){hint}"
        )


def weights_files(folder: Path) -> list[Path]:
    """The weights files transformers reads from a local model folder: the first of WEIGHTS_FILES
    there, and the shards an index lists after it."""

    for name in WEIGHTS_FILES:
        path = folder / name
        if path.is_file() and name.endswith(".index.json"):
            try:
                shards = sorted(set(json.loads(path.read_text())["weight_map"].values()))
            except (ValueError, KeyError, TypeError, AttributeError):
                return [path]  # an unreadable index: `weights_problem` names it
            return [path] + [folder / shard for shard in shards]
        if path.is_file():
            return [path]
    return []


def weights_problem(path: Path) -> str | None:
    """What makes a weights file unreadable (a safetensors header or a torch zip archive cut short,
    an index that is not JSON with a weight_map), or None when it reads. Run only to explain a failed
    load."""

    if path.name.endswith(".index.json"):
        try:
            dict(json.loads(path.read_text())["weight_map"])
        except (ValueError, KeyError, TypeError) as err:
            return f"not a weights index: {type(err).__name__}: {err}"
        return None
    if path.suffix == ".safetensors":
        try:
            with safe_open(path, "pt"):
                return None
        except Exception as err:  # SafetensorError, OSError: a header cut short or not covering the file
            return f"{type(err).__name__}: {err}"
    if path.suffix == ".bin" and not zipfile.is_zipfile(path):
        return "not a zip archive, as torch.save writes"
    return None


def raise_weights_problem(folder: Path, err: Exception) -> None:
    """Raise ModelFileError naming the first weights file of `folder` that does not read, if any."""
    files = weights_files(folder)
    for path in files:
        if not path.is_file():
            raise ModelFileError(f"{path} is missing ({files[0].name} lists it); download it again") from err
        problem = weights_problem(path)
        if problem is not None:
            raise ModelFileError(
                f"{path} ({path.stat().st_size} bytes) is truncated or corrupt ({problem}); download it again"
            ) from err
