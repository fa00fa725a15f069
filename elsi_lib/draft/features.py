"""Target features for draft training and replay, stored once and shared by every draft.

One teacher-forced target forward (`forward.hidden_batches`, the capture forward) per batch of
conversations (prompt + the target's own reply) writes, per token:

    ids     (n,)        int32   the token
    hidden  (n, L, d)   float16 outputs of the requested decoder layers (elsi convention), ascending
    final   (n, d)      float16 the last layer after the target's final norm (EAGLE-2's feature, and
                                the input of the target's lm_head: soft labels are formed from it)
    argmax  (n,)        int32   the target's greedy next token at each position

Sequences are concatenated; `offsets` (S + 1,) delimit them and `starts` (S,) give the index of each
sequence's first reply token (the prompt rendered with its generation prompt is a prefix).
Storage is sharded (SHARD sequences each) so an interrupted build resumes at the last finished
shard; each shard is a folder of .npy files with a manifest (sizes, sha256) keyed by everything that
produced it: the target's weights and tokenizer fingerprints, the conversations, the layers,
max_length and the library versions. Arrays are read memory-mapped; a shard whose files change on
disk while its store is open is refused at the next read.
"""

from __future__ import annotations

import os
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..common.cachefiles import (
    building,
    check_folder_slot,
    check_writable,
    keyed_path,
    replace_folder,
    verify_manifest,
    write_manifest,
)
from ..common.identity import conversations_hash
from ..inputs.chat import reply_starts
from ..hidden.forward import decoder_layers, hidden_batches, pad_id, plan_batches, tokenize_samples
from ..common.identity import model_fingerprint, tokenizer_fingerprint, versions
from ..common.progress import progress_bar
from .config import FINAL_NORM
from .greedy import greedy_next

FORMAT = 1
SHARD = 64  # sequences per shard
ARRAYS = ("ids", "hidden", "final", "argmax", "offsets", "starts")  # "final": the final-norm state


@dataclass
class FeatureStore:
    """Read side: memory-mapped shards. `sequence(i)` gives one sequence's arrays as tensors. With
    `stamps` (`open_features`), every read first checks that its shard's files are those verified."""

    folder: Path
    layers: tuple[int, ...]
    shards: list[dict]  # per shard: name -> np.ndarray (memory-mapped)
    max_length: int | None = None  # where the sequences were cut (None: not known)
    stamps: list[dict] | None = None  # per shard: name -> `file_stamp` of its file when it was verified

    def __post_init__(self):
        counts = [len(s["starts"]) for s in self.shards]
        self._where = [(k, j) for k, c in enumerate(counts) for j in range(c)]

    def _shard(self, k: int) -> dict:
        """Shard k's arrays; RuntimeError naming the shard when a file of it changed on disk since it
        was verified (the mapped bytes are then no longer the checked ones, or no longer the file's)."""
        if self.stamps is not None:
            changed = changed_files(self.folder / shard_name(k), self.stamps[k])
            if changed:
                raise RuntimeError(
                    f"feature shard {self.folder / shard_name(k)} changed on disk while the store was "
                    f"open ({', '.join(changed)}); open the store again (build_features)"
                )
        return self.shards[k]

    def __len__(self) -> int:
        return len(self._where)

    def length(self, i: int) -> int:
        k, j = self._where[i]
        offsets = self._shard(k)["offsets"]
        return int(offsets[j + 1] - offsets[j])

    def start(self, i: int) -> int:
        """Index of sequence i's first reply token."""
        k, j = self._where[i]
        return int(self._shard(k)["starts"][j])

    def ids(self, i: int) -> np.ndarray:
        """Token ids (T,) of sequence i."""
        k, j = self._where[i]
        shard = self._shard(k)
        offsets = shard["offsets"]
        return np.asarray(shard["ids"][int(offsets[j]) : int(offsets[j + 1])], dtype=np.int64)

    def reply_tokens(self) -> np.ndarray:
        """Every sequence's reply tokens, concatenated."""
        return np.concatenate([self.ids(i)[self.start(i) :] for i in range(len(self))] or [np.zeros(0, np.int64)])

    def sequence(self, i: int, layer_ids=None, *, features: bool = True) -> dict:
        """ids (T,), start, final_norm (T, d) float32, argmax (T,) and (unless `features` is False)
        features (T, m*d) float32 of `layer_ids` (see `features`)."""
        k, j = self._where[i]
        shard = self._shard(k)
        a, b = int(shard["offsets"][j]), int(shard["offsets"][j + 1])
        out = {
            "ids": torch.from_numpy(shard["ids"][a:b].astype(np.int64)),
            "start": int(shard["starts"][j]),
            "final_norm": torch.from_numpy(shard["final"][a:b].astype(np.float32)),
            "argmax": torch.from_numpy(shard["argmax"][a:b].astype(np.int64)),
        }
        if features:
            out["features"] = out["final_norm"] if is_final_norm(layer_ids) else self.features(i, layer_ids)
        return out

    def features(self, i: int, layer_ids=None) -> torch.Tensor:
        """Sequence i's features (T, m*d) float32 of `layer_ids` (None: all stored layers; FINAL_NORM:
        the normed last hidden), concatenated in the order given (a draft passes its sorted source)."""
        k, j = self._where[i]
        shard = self._shard(k)
        a, b = int(shard["offsets"][j]), int(shard["offsets"][j + 1])
        if is_final_norm(layer_ids):
            return torch.from_numpy(shard["final"][a:b].astype(np.float32))
        wanted = list(layer_ids) if layer_ids is not None else list(self.layers)
        absent = [l for l in wanted if l not in self.layers]
        if absent:
            raise ValueError(f"layers {absent} are not in this feature store (it holds {self.layers})")
        columns = [self.layers.index(l) for l in wanted]
        block = shard["hidden"][a:b][:, columns]  # (T, m, d)
        return torch.from_numpy(block.astype(np.float32).reshape(b - a, -1))  # (T, m*d)


def is_final_norm(source) -> bool:
    """Whether a draft's source is FINAL_NORM (True) or a layer set (False); any other string is an error."""
    if isinstance(source, str) and source != FINAL_NORM:
        raise ValueError(f"features are a layer set or {FINAL_NORM!r}, got {source!r}")
    return isinstance(source, str)


def _key(model, tokenizer, conversations, layers, max_length) -> dict:
    return {
        "format": FORMAT,
        "model": model_fingerprint(model),
        "tokenizer": tokenizer_fingerprint(tokenizer),
        "library": versions(),
        "conversations": conversations_hash(conversations),
        "layers": list(layers),
        "max_length": max_length,
        "shard": SHARD,
    }


def reply_token_count(store) -> int:
    """The reply tokens of every sequence of `store` (a FeatureStore or `live.LiveFeatures`): those at
    or after its reply's start, what training scores."""
    return sum(max(0, store.length(i) - store.start(i)) for i in range(len(store)))


def check_reply_tokens(store) -> None:
    """ValueError when `store` (stored or live features) holds no reply token: training on it would
    score nothing, its loss be 0.0 at every batch and no weight change (`train.train_drafts` asks)."""
    if reply_token_count(store):
        return
    if not len(store):
        raise ValueError("no reply token to train on: the training data holds no sequence")
    limit = getattr(store, "max_length", None)
    raise ValueError(
        f"no reply token to train on: the {len(store)} sequences hold 0 reply tokens, as every reply "
        f"lies past max_length{f'={limit}' if limit else ''} (each sequence is cut there, inside its "
        "prompt); raise max_length or use shorter prompts"
    )


def shard_name(k: int) -> str:
    """The folder of shard k under a store's root."""
    return f"shard_{k:05d}"


def file_stamp(path: Path) -> tuple:
    """What identifies a file's present content without reading it: device, inode, size, mtime, ctime."""
    st = os.stat(path)
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def shard_stamps(folder: Path) -> dict | None:
    """{array name: `file_stamp`} of a shard folder's files; None while one of them is missing."""
    try:
        return {name: file_stamp(folder / f"{name}.npy") for name in ARRAYS}
    except OSError:
        return None


def changed_files(folder: Path, stamps: dict) -> list[str]:
    """The files of a shard whose stamp differs from `stamps` (or that are gone)."""
    changed = []
    for name, stamp in stamps.items():
        try:
            same = file_stamp(folder / f"{name}.npy") == stamp
        except OSError:
            same = False
        if not same:
            changed.append(f"{name}.npy")
    return changed


def checked_layers(model, layers) -> tuple[int, ...]:
    """`layers` sorted and unique; ValueError unless a non-empty subset of the model's decoder layers."""
    layers = tuple(sorted(set(int(l) for l in layers)))
    n_layers = len(decoder_layers(model))
    if not layers or layers[0] < 0 or layers[-1] >= n_layers:
        raise ValueError(f"layers must be a non-empty subset of 0..{n_layers - 1}, got {layers}")
    return layers


def build_features(
    model,
    tokenizer,
    conversations,
    layers,
    *,
    max_length: int = 1024,
    batch_tokens: int = 8192,
    progress: bool = True,
    desc: str = "target features",
) -> FeatureStore:
    """Stored target features of `conversations` at `layers` (elsi convention), built shard by
    shard and reused when every shard's manifest matches (a corrupt or stale shard is rebuilt)."""
    layers = checked_layers(model, layers)
    key = _key(model, tokenizer, conversations, layers, max_length)
    root = keyed_path("features", key)
    check_writable(root)
    with building(root):  # another process building the same store: wait for it, then read
        starts = reply_starts(tokenizer, conversations, max_length)
        n_shards = -(-len(conversations) // SHARD)
        todo = [k for k in range(n_shards) if verify_manifest(root / shard_name(k), {**key, "index": k}) is not None]
        for k in todo:  # before any forward
            check_folder_slot(root / shard_name(k))
        bar = progress_bar(
            total=len(conversations),
            initial=(n_shards - len(todo)) * SHARD if todo else len(conversations),
            desc=desc,
            unit="conv",
            disable=not progress or not todo,
        )
        for k in todo:
            part = conversations[k * SHARD : (k + 1) * SHARD]
            _write_shard(
                model,
                tokenizer,
                part,
                k,
                starts[k * SHARD : (k + 1) * SHARD],
                layers,
                root,
                key,
                bar,
                max_length=max_length,
                batch_tokens=batch_tokens,
            )
        bar.close()
    return open_features(root, key, layers, n_shards)


def _write_shard(
    model, tokenizer, part, k: int, starts, layers, root: Path, key: dict, bar, *, max_length, batch_tokens
):
    """Shard k of a store: the target's forward over `part` (its conversations; `starts` their first
    reply tokens), written under a temporary name with its manifest and renamed into place."""
    lm_head = model.get_output_embeddings()
    samples, _ = tokenize_samples(tokenizer, part, max_length)
    batches = plan_batches([len(s.ids) for s in samples], 64, batch_tokens)
    rows: dict[int, dict] = {}
    for batch in hidden_batches(model, samples, batches, pad_id(tokenizer), entropies=False):
        for row, sample in enumerate(batch.samples):
            T = len(sample.ids)
            final_norm = batch.final_norm[row, :T]  # (T, d)
            rows[sample.index] = {
                "ids": np.asarray(sample.ids, dtype=np.int32),
                "hidden": torch.stack([batch.layers[l][row, :T] for l in layers], 1).to(torch.float16).numpy(),
                "final": final_norm.to(torch.float16).numpy(),
                "argmax": greedy_next(final_norm, lm_head).numpy().astype(np.int32),
            }
        bar.update(len(batch.samples))
    order = [rows[i] for i in range(len(part))]
    for r, sample_index in zip(order, range(k * SHARD, k * SHARD + len(part))):
        if not (np.isfinite(r["hidden"]).all() and np.isfinite(r["final"]).all()):
            raise FloatingPointError(
                f"conversation {sample_index}: a hidden state exceeds float16's range "
                "(|h| > 65504); these features cannot be stored in float16"
            )
    lengths = [len(r["ids"]) for r in order]
    arrays = {name: np.concatenate([r[name] for r in order]) for name in ("ids", "hidden", "final", "argmax")}
    arrays["offsets"] = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    arrays["starts"] = np.asarray(starts, dtype=np.int64)
    tmp = fresh_folder(root / f".{shard_name(k)}.tmp")
    for name, array in arrays.items():
        np.save(tmp / f"{name}.npy", array)
    write_manifest(tmp, {**key, "index": k})
    replace_folder(tmp, root / shard_name(k))


def fresh_folder(tmp: Path) -> Path:
    """`tmp` created empty; one an interrupted build left there is removed first, with a warning."""
    if tmp.exists() or tmp.is_symlink():
        warnings.warn(f"removed {tmp}, an unfinished shard left by an interrupted build; writing it again")
        if tmp.is_dir() and not tmp.is_symlink():
            shutil.rmtree(tmp)
        else:
            tmp.unlink()
    tmp.mkdir(parents=True)
    return tmp


def open_features(root: Path, key: dict, layers, n_shards: int) -> FeatureStore:
    """Memory-map finished shards, each verified against its manifest (sizes and sha256), and keep
    their files' stamps: a read after a shard changed on disk is refused (`FeatureStore`)."""
    shards, stamps = [], []
    for k in range(n_shards):
        folder = root / shard_name(k)
        before = shard_stamps(folder)  # before the check: a change during it is caught below
        problem = verify_manifest(folder, {**key, "index": k})
        if problem:
            raise RuntimeError(f"feature shard {folder} is not usable ({problem}); rerun build_features")
        stamp = before or shard_stamps(folder)
        if stamp is None:  # a file gone again since the check: no stamp to hold the reads to
            raise RuntimeError(f"feature shard {folder} is not usable (a file of it is missing); rerun build_features")
        stamps.append(stamp)
        shards.append({name: np.load(folder / f"{name}.npy", mmap_mode="r") for name in ARRAYS})
    store = FeatureStore(root, tuple(layers), shards, key.get("max_length"), stamps)
    for k in range(n_shards):
        store._shard(k)  # unchanged between the check and the mapping
    return store
