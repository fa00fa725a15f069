"""The task probe's data (`selection.probe`): one teacher-forced forward over calibration conversations
(prompt + reply), rows at the reply positions, reduced to the probe's Gram statistics and cached.

A row is a position t whose next token t+1 is a reply token (t + 1 < T): the output of every decoder
layer at t and the target's input embedding of token t+1 (what EAGLE-3's first draft step reads),
the target's state after its final norm at t+1 (what decides token t+2; the regression target) and
the target's greedy token there. Conversations, not rows, are split into training and held-out ones
(seeded), so no conversation is on both sides.
"""

from __future__ import annotations

import io
import json
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..common.cachefiles import check_writable, keyed_path, read_checked, write_checked
from ..common.identity import conversations_hash, model_fingerprint, tokenizer_fingerprint, versions
from ..common.progress import progress_bar
from ..inputs.chat import reply_starts
from ..selection.probe import ProbeChoice, ProbeStats, probe_choice, probe_stats_of, set_errors
from .forward import HiddenBatch, Sample, decoder_layers, hidden_batches, pad_id, plan_batches, tokenize_samples

FORMAT = 2  # 2: the forward's batching in the key; the statistics from rows spilled to disk, in chunks
RANK = 64  # principal components kept per block (at most the model's width)
BATCHING = (8, 4096)  # (samples, padded tokens) per forward: the capture's own (`capture.capture_variants`)
CHUNK = 1024  # rows per chunk read back from the spilled files


def _rows_of(model, batch: HiddenBatch, row: int, sample: Sample, start: int):
    """(x (n_i, N + 1, d), y (n_i, d)) float32 torch tensors on the CPU for one sample of a forward's
    batch: its reply rows t = start - 1 .. T - 2 (module docstring); None when it has none."""
    T, first = len(sample.ids), max(start - 1, 0)
    t = torch.arange(first, T - 1)  # positions whose next token is a reply token
    if not len(t):
        return None
    embedding = model.get_input_embeddings()
    ids = torch.tensor(sample.ids)
    layers = torch.stack([h[row, t].float().cpu() for h in batch.layers], 1)  # (n_i, N, d)
    following = embedding(ids[t + 1].to(embedding.weight.device)).float().cpu()[:, None]  # (n_i, 1, d)
    target = batch.final_norm[row, t + 1].float()  # (n_i, d), on the model's device
    return torch.cat([layers, following], 1), target


def _next_tokens(model, target) -> np.ndarray:
    """The target's own greedy token from its final-norm states (n, d): (n,) int64."""
    return model.get_output_embeddings()(target).argmax(-1).cpu().numpy()


@torch.no_grad()
def probe_rows(
    model, tokenizer, conversations, *, max_length: int = 1024, batching=BATCHING, progress: bool = True
) -> dict:
    """x (n, N + 1, d) float32 (block N the embedding of token t+1), y (n, d) float32, next (n,) int64
    and conversation (n,) int64 for every reply row of `conversations` (module docstring), in memory."""
    samples, _ = tokenize_samples(tokenizer, conversations, max_length)
    starts = reply_starts(tokenizer, conversations, max_length)
    parts: dict[str, list[np.ndarray]] = {"x": [], "y": [], "next": [], "conversation": []}
    plan = plan_batches([len(s.ids) for s in samples], *batching)
    for batch in hidden_batches(model, samples, plan, pad_id(tokenizer), entropies=False):
        for row, sample in enumerate(batch.samples):
            rows = _rows_of(model, batch, row, sample, starts[sample.index])
            if rows is None:
                continue
            parts["x"].append(rows[0].numpy())
            parts["y"].append(rows[1].cpu().numpy())
            parts["next"].append(_next_tokens(model, rows[1]))
            parts["conversation"].append(np.full(len(rows[0]), sample.index))
    if not parts["x"]:
        raise ValueError(
            "no conversation has a reply token to probe (conversations are cut at max_length tokens: a prompt "
            "that long leaves no reply)"
        )
    return {k: np.concatenate(v) for k, v in parts.items()}


class ProbeRows:
    """The probe's rows of `conversations`, taken from a forward's batches as they come (`add`: the
    capture's own forward, or `_forward`'s) and spilled to files in `folder`, one pair (x, y) per side
    (training and held-out conversations), so that memory holds the statistics, never the rows. The
    statistics (`stats`) are those of every row only when every batch of the plan `batching` gives came
    through in order (`complete`): a resumed or sharded forward is not enough."""

    def __init__(self, model, tokenizer, conversations, folder: Path, *, max_length, heldout_share, seed, batching):
        self.model = model
        self.samples, _ = tokenize_samples(tokenizer, conversations, max_length)
        self.starts = reply_starts(tokenizer, conversations, max_length)
        self.plan = plan_batches([len(s.ids) for s in self.samples], *batching)
        self.held = set(heldout_conversations(len(conversations), heldout_share, seed).tolist())
        self.width = (len(decoder_layers(model)) + 1, model.config.hidden_size)  # (N + 1, d)
        self.paths = {(side, a): folder / f"{side}.{a}.f32" for side in ("train", "heldout") for a in "xy"}
        self.files = {key: open(path, "wb") for key, path in self.paths.items()}
        self.heldout_next: list[np.ndarray] = []
        self.seen: list[list[int]] = []

    @torch.no_grad()
    def add(self, batch: HiddenBatch) -> None:
        """Write the reply rows of one forward's batch to their side's files."""
        self.seen.append([s.index for s in batch.samples])
        for row, sample in enumerate(batch.samples):
            rows = _rows_of(self.model, batch, row, sample, self.starts[sample.index])
            if rows is None:
                continue
            side = "heldout" if sample.index in self.held else "train"
            self.files[side, "x"].write(rows[0].numpy().tobytes())
            self.files[side, "y"].write(rows[1].cpu().numpy().tobytes())
            if side == "heldout":
                self.heldout_next.append(_next_tokens(self.model, rows[1]))

    @property
    def complete(self) -> bool:
        return self.seen == self.plan

    def stats(self, rank: int) -> ProbeStats:
        """The probe's statistics from the spilled rows (`selection.probe.probe_stats_of`)."""
        for file in self.files.values():
            file.close()
        if not self.paths["train", "y"].stat().st_size or not self.paths["heldout", "y"].stat().st_size:
            raise ValueError(
                "no conversation has a reply token to probe on both sides of the split (conversations are cut at "
                "max_length tokens: a prompt that long leaves no reply; give shorter prompts or more of them)"
            )
        next_tokens = np.concatenate(self.heldout_next)
        return probe_stats_of(self._source("train"), self._source("heldout"), rank, next_tokens)[0]

    def _source(self, side: str):
        (blocks, d), x_path, y_path = self.width, self.paths[side, "x"], self.paths[side, "y"]

        def chunks():
            with open(x_path, "rb") as fx, open(y_path, "rb") as fy:
                while True:
                    x = np.fromfile(fx, np.float32, count=CHUNK * blocks * d)  # (c * (N + 1) * d,)
                    if not x.size:
                        return
                    y = np.fromfile(fy, np.float32, count=x.size // blocks)
                    yield x.reshape(-1, blocks, d), y.reshape(-1, d)

        return chunks


def heldout_conversations(n: int, share: float, seed: int) -> np.ndarray:
    """Indices of the held-out conversations: a seeded `share` of n, at least one, never all."""
    if not 0 < share < 1 or n < 2:
        raise ValueError(f"need 0 < heldout_share < 1 and at least 2 conversations, got {share} and {n}")
    count = min(n - 1, max(1, round(share * n)))
    return np.sort(np.random.default_rng(seed).permutation(n)[:count])


def cached_probe_choice(
    model, tokenizer, conversations, m: int, *, k_beam: int = 10, allowed=None, required=(), **probe
) -> ProbeChoice:
    """`selection.probe.probe_choice` of `cached_probe(..., **probe)` for m layers (restricted to
    `allowed` / `required` layers when given), itself cached (a JSON beside the statistics: scoring
    every set takes minutes on 2 cores, reading it a moment)."""
    stats, key = cached_probe(model, tokenizer, conversations, with_key=True, **probe)
    restricted = (
        {}
        if allowed is None and not required
        else {"allowed": sorted(allowed or range(stats.n_layers)), "required": sorted(required)}
    )
    choice_key = {**key, "m": m, "k_beam": k_beam, "choice_format": 1, **restricted}
    path = keyed_path("probe", choice_key, suffix=".json")
    if path.is_file():
        try:
            entry = json.loads(read_checked(path))
            if entry["key"] == choice_key:
                c = entry["choice"]
                return ProbeChoice(
                    tuple(c["layers"]),
                    c["error"],
                    c["ridge"],
                    c["search"],
                    {float(r): e for r, e in c["ridge_errors"].items()},
                )
        except (ValueError, KeyError, TypeError):
            pass  # corrupt or foreign: chosen again below
    choice = probe_choice(stats, m, k_beam=k_beam, allowed=allowed, required=required)
    entry = {
        "key": choice_key,
        "choice": {
            "layers": list(choice.layers),
            "error": choice.error,
            "ridge": choice.ridge,
            "search": choice.search,
            "ridge_errors": choice.ridge_errors,
        },
    }
    write_checked(path, json.dumps(entry).encode())
    return choice


def probe_key(
    model, tokenizer, conversations, *, rank=None, heldout_share=0.25, seed=0, max_length=1024, batching=BATCHING
) -> dict:
    """What the probe's statistics depend on: the model, the conversations and every setting (the
    forward's batching too: padding changes the last bits of the states)."""
    return {
        "format": FORMAT,
        "model": model_fingerprint(model),
        "tokenizer": tokenizer_fingerprint(tokenizer),
        "library": versions(),
        "conversations": conversations_hash(conversations),
        "rank": rank or min(RANK, model.config.hidden_size),
        "heldout_share": heldout_share,
        "seed": seed,
        "max_length": max_length,
        "batching": list(batching),
    }


def _read_cached(path: Path, key: dict) -> ProbeStats | None:
    """The cached statistics at `path` when they are intact and of exactly `key`, else None."""
    if not path.is_file():
        return None
    try:
        with np.load(io.BytesIO(read_checked(path))) as data:
            return _stats(data) if json.loads(str(data["key"])) == key else None
    except (ValueError, KeyError, OSError):
        return None  # corrupt, truncated or of another layout: rebuilt by the caller


def _write_cached(path: Path, key: dict, stats: ProbeStats) -> None:
    buffer = io.BytesIO()
    arrays: dict[str, Any] = {name: np.asarray(getattr(stats, name)) for name in FIELDS}  # (Any: savez's **kwds)
    np.savez(buffer, key=json.dumps(key), **arrays)
    write_checked(path, buffer.getvalue())


@contextmanager
def _spilled_rows(model, tokenizer, conversations, key: dict) -> Iterator[ProbeRows]:
    """A `ProbeRows` for `key`'s settings spilling into a temporary folder beside the cache (on its
    disk, not in memory), removed afterwards."""
    folder = keyed_path("probe", key).parent
    with tempfile.TemporaryDirectory(prefix="rows-", dir=folder) as tmp:
        settings = {name: key[name] for name in ("max_length", "heldout_share", "seed")}
        yield ProbeRows(model, tokenizer, conversations, Path(tmp), batching=key["batching"], **settings)


@contextmanager
def probe_alongside(model, tokenizer, conversations, **probe) -> Iterator[Callable[[HiddenBatch], None] | None]:
    """The probe's statistics (`cached_probe(..., **probe)`) from another forward over the same
    conversations: yields a consumer of that forward's batches (`capture.capture_variants`'s
    `on_batch`), or None when the statistics are cached already. When the forward fed it every batch of
    the probe's plan, the statistics are computed and cached on leaving, and a later `cached_probe`
    reads them without a forward of its own; otherwise nothing is cached (`cached_probe` runs its own)."""
    key = probe_key(model, tokenizer, conversations, **probe)
    path = keyed_path("probe", key, suffix=".npz")
    check_writable(path.parent)
    if _read_cached(path, key) is not None:
        yield None
        return
    with _spilled_rows(model, tokenizer, conversations, key) as rows:
        yield rows.add
        if rows.complete:
            _write_cached(path, key, rows.stats(key["rank"]))


def cached_probe(
    model,
    tokenizer,
    conversations,
    *,
    rank: int | None = None,
    heldout_share: float = 0.25,
    seed: int = 0,
    max_length: int = 1024,
    batching=BATCHING,
    progress: bool = True,
    with_key: bool = False,
):
    """The probe's statistics of `conversations` on `model` (`selection.probe.probe_stats`, `rank`
    components per block, default RANK or the model's width if smaller), from the cache when one of
    this exact configuration is there and intact (a corrupt or foreign file is rebuilt), else from a
    forward of its own (`batching`: samples and padded tokens per batch) and cached. With `with_key`:
    (stats, its cache key)."""
    settings = {"rank": rank, "heldout_share": heldout_share, "seed": seed, "max_length": max_length}
    key = probe_key(model, tokenizer, conversations, batching=batching, **settings)
    path = keyed_path("probe", key, suffix=".npz")
    check_writable(path.parent)
    stats = _read_cached(path, key)
    if stats is None:
        with _spilled_rows(model, tokenizer, conversations, key) as rows:
            _forward(model, tokenizer, rows, progress)
            stats = rows.stats(key["rank"])
        _write_cached(path, key, stats)
    return (stats, key) if with_key else stats


@torch.no_grad()
def _forward(model, tokenizer, rows: ProbeRows, progress: bool) -> None:
    """The probe's own teacher-forced forward over the conversations, every batch into `rows`."""
    bar = progress_bar(total=len(rows.samples), desc="probe forward", unit="conv", disable=not progress)
    for batch in hidden_batches(model, rows.samples, rows.plan, pad_id(tokenizer), entropies=False):
        rows.add(batch)
        bar.update(len(batch.samples))
    bar.close()


FIELDS = (
    "gram",
    "cross",
    "heldout_gram",
    "heldout_cross",
    "heldout_yy",
    "n_train",
    "n_heldout",
    "rank",
    "kept_variance",
    "heldout_z",
    "heldout_next",
    "y_mean",
)


def _stats(data) -> ProbeStats:
    scalars = {"heldout_yy": float, "n_train": int, "n_heldout": int, "rank": int}
    return ProbeStats(**{name: scalars[name](data[name]) if name in scalars else data[name] for name in FIELDS})


def cached_probe_error(model, tokenizer, conversations, layers, ridge: float, **probe) -> float:
    """The probe's held-out relative error of one set `layers` at `ridge` (as `probe_choice` scores
    every set), from the cached statistics (`cached_probe`)."""
    stats = cached_probe(model, tokenizer, conversations, **probe)
    return float(set_errors(stats, [tuple(int(l) for l in layers)], ridge)[0])
