"""Training EAGLE-3 drafts with training-time test, several drafts in lock-step.

EAGLE-3 (arXiv 2503.01840, Sec. 3.2 "training-time test"): step 1 reads the target's features; at
steps k = 2..K the draft's own (pre-norm) hidden output replaces them, so training sees what a tree
round sees. Row t pairs the features of token t with the embedding of token t+1; at step k row t
reads token t+k, runs at rotary position t+k-1, predicts token t+k+1, and its query sees the step-1
keys of rows <= t (causal) plus the keys of steps 2..k at row t itself (EAGLE-3's `cache_hidden`).
The loss at step k is the cross-entropy against the target's next-token distribution at position
t+k restricted to the draft vocabulary (soft labels, EAGLE-3's `target_p`), on reply tokens whose
target argmax lies in the draft vocabulary, weighted 0.8**(k-1) (EAGLE-3's `ploss_weight`).

Every draft sees the same batches in the same order with its own AdamW; one stored target feature
read feeds them all, so only the layer set differs. Checkpoints (`checkpoints`: all drafts, optimisers
and the batch counter) are written atomically every `checkpoint_seconds` and at the end; a rerun
with the same configuration resumes from the last one.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field

import torch

from ..common.cachefiles import check_writable
from ..common.hardware import bf16_autocast_default, warn_if_bf16_is_slow
from ..hidden.forward import plan_batches
from ..common.progress import progress_bar
from .runner import draft_autocast, draft_device
from .vocabulary import NOT_IN_DRAFT
from .features import check_reply_tokens
from .checkpoints import checkpoint_key, checkpoint_path, resume, save_checkpoint, snapshot_key
from .model import Eagle3Draft, draft_record


@dataclass(frozen=True)
class TrainSettings:
    """How every draft of one lock-step group is trained."""

    ttt_steps: int = 3  # K: unrolled draft steps (EAGLE-3 uses 7; >= 3 here)
    epochs: float = 1.0
    batch_tokens: int = 512  # padded tokens per batch (sequences are never split); smaller: more steps per epoch
    lr: float = 1e-3  # peak learning rate
    warmup: int = 20  # batches of linear warm-up, then cosine decay to 10% of lr
    weight_decay: float = 0.0
    grad_clip: float = 0.5
    step_decay: float = 0.8  # loss weight of step k is step_decay**(k-1)
    # draft matmuls in bfloat16 (fp32 master weights); by default only on a CPU with bf16 matmul instructions
    # (`common.hardware`: elsewhere 31-110 times slower); the cache keys record the value in effect
    autocast_bf16: bool = field(default_factory=bf16_autocast_default)
    seed: int = 0  # batch order and draft initialisation
    checkpoint_seconds: float = 240.0  # a checkpoint at least this often (and at the end)
    feature_noise: float = 0.0  # std of Gaussian noise added to the step-1 features in training (0: none)

    def __post_init__(self):
        if self.ttt_steps < 1 or self.epochs <= 0 or self.batch_tokens < 1 or self.lr <= 0 or self.feature_noise < 0:
            raise ValueError(f"invalid training settings {self}")


def batch_plan(lengths: list[int], batch_tokens: int, epochs: float, seed: int) -> list[list[int]]:
    """Batches of sequence indices: per epoch, sequences sorted by length are cut into batches of at
    most `batch_tokens` padded tokens, and the batches are shuffled (seeded). A fractional last
    epoch takes the first part of its shuffled batches."""
    batches = plan_batches(lengths, len(lengths), batch_tokens)  # length order: the last is the longest
    plan, rng = [], random.Random(seed)
    for epoch in range(math.ceil(epochs)):
        shuffled = rng.sample(batches, len(batches))
        share = min(1.0, epochs - epoch)
        plan.extend(shuffled[: max(1, round(share * len(shuffled)))])
    return plan


def collate(store, indices, sources) -> dict:
    """Right-padded batch tensors: ids (b, T), valid (b, T), start (b,), final_norm (b, T, d),
    argmax (b, T) and, per source (a layer tuple or FINAL_NORM), features (b, T, m*d). A source of
    features that builds its own batches (`live.LiveFeatures`, one target forward) is asked for it."""
    if hasattr(store, "collate"):
        return store.collate(indices, sources)
    first = [store.sequence(i, features=False) for i in indices]
    T = max(len(s["ids"]) for s in first)
    b = len(indices)
    out: dict = {
        "ids": torch.zeros(b, T, dtype=torch.long),
        "valid": torch.zeros(b, T, dtype=torch.bool),
        "argmax": torch.zeros(b, T, dtype=torch.long),
        "start": torch.tensor([s["start"] for s in first]),
        "final_norm": torch.zeros(b, T, first[0]["final_norm"].shape[-1]),
    }
    for row, s in enumerate(first):
        n = len(s["ids"])
        out["ids"][row, :n], out["valid"][row, :n] = s["ids"], True
        out["argmax"][row, :n], out["final_norm"][row, :n] = s["argmax"], s["final_norm"]
    out["features"] = {}
    for src in sources:
        items = [store.features(i, src) for i in indices]
        feats = torch.zeros(b, T, items[0].shape[-1])
        for row, item in enumerate(items):
            feats[row, : len(item)] = item
        out["features"][src] = feats
    return out


def to_device(batch: dict, device) -> dict:
    """`collate`'s batch with every tensor on `device` (the drafts')."""
    return {
        k: {s: f.to(device) for s, f in v.items()} if isinstance(v, dict) else v.to(device) for k, v in batch.items()
    }


def soft_targets(final_norm, target_rows):
    """The target's next-token distribution restricted to the draft vocabulary and renormalised
    (EAGLE-3's `target_p`): final_norm (b, T, d), the target's last state after its final norm, target_rows (V_draft, d)
    the target lm_head's rows of the draft vocabulary -> (b, T, V_draft) float32."""
    return torch.softmax(final_norm @ target_rows.T, dim=-1)


def query_rows(valid, start, K: int):
    """Rows that steps 2..K must run: from the first row any step scores (start - K - 1) to the end
    of each sequence, left-aligned. Returns rows (b, Tq) long (padded by repeating the last row)
    and their validity (b, Tq). Prompt rows before them only serve as step-1 keys."""
    n = valid.sum(1)  # (b,)
    first = (start - K - 1).clamp(min=0).minimum(n - 1).clamp(min=0)  # (b,)
    width = int((n - first).max())
    rows = first[:, None] + torch.arange(width, device=valid.device)[None, :]  # (b, Tq)
    ok = rows < n[:, None]
    return torch.minimum(rows, (n - 1).clamp(min=0)[:, None]), ok


def ttt_masks(valid, K: int, rows=None):
    """Attention masks of training-time test. Step 1: (b, 1, T, T), causal over real keys. Step k >= 2
    for the query rows `rows` (b, Tq) (default every row): (b, 1, Tq, T + (k-1)*Tq) over the step-1
    keys (causal: key j <= the row) followed by the keys of steps 2..k at the same row only."""
    (b, T), device = valid.shape, valid.device
    causal = torch.ones(T, T, dtype=torch.bool, device=device).tril() & valid[:, None, None, :]  # (b, 1, T, T)
    causal = causal | torch.eye(T, dtype=torch.bool, device=device)  # a padded row sees itself: finite
    rows = torch.arange(T, device=device).expand(b, T) if rows is None else rows
    Tq = rows.shape[1]
    seen = (torch.arange(T, device=device)[None, None, :] <= rows[:, :, None]) & valid[:, None, :]  # (b, Tq, T)
    seen = seen[:, None]  # (b, 1, Tq, T)
    eye = torch.eye(Tq, dtype=torch.bool, device=device).expand(b, 1, Tq, Tq)
    return [causal] + [torch.cat([seen] + [eye] * (k - 1), dim=-1) for k in range(2, K + 1)]


def ttt_unroll(draft: Eagle3Draft, batch: dict, K: int, *, autocast: bool):
    """Training-time test of one draft on one batch: yields, for k = 1..K, (k, logits (n, V_draft)
    float32 at the scored rows, chosen (batch rows, rows), s (T,) the target position each row
    matches, label (n,) the target's greedy token as a draft id or NOT_IN_DRAFT). Scored rows are
    those whose predicted token (index s+1) is a reply token inside the sequence. Step 1 runs every
    row (its keys serve all later steps); steps 2..K only the rows `query_rows` keeps. The features
    are the batch's of the draft's own source (`draft.config.source`)."""
    source = draft.config.source
    ids, valid, start = batch["ids"], batch["valid"], batch["start"]
    b, T = ids.shape
    n = valid.sum(1, keepdim=True)  # (b, 1)
    rows, row_ok = query_rows(valid, start, K)  # (b, Tq)
    masks = ttt_masks(valid, K, rows)
    in_draft = draft.to_draft(batch["argmax"])  # (b, T) draft id of the target's greedy token, or -1
    past, hidden = None, None
    for k in range(1, K + 1):
        with draft_autocast(draft, autocast):
            if k == 1:  # every row, token t+1 at row t
                shift = torch.cat([ids[:, 1:], ids.new_zeros(b, 1)], dim=1)  # (b, T)
                _, full, past = draft.step(
                    shift,
                    features=batch["features"][source],
                    positions=torch.arange(T, device=ids.device),
                    allowed=masks[0],
                    logits=False,
                )
                hidden = full.gather(1, rows[..., None].expand(-1, -1, full.shape[-1]))  # (b, Tq, d)
            else:  # the query rows only, token t+k at row t, position t+k-1
                assert past is not None  # step 1 (k == 1) set it
                tokens = ids.gather(1, (rows + k).clamp(max=T - 1))  # (b, Tq)
                _, hidden, kv = draft.step(
                    tokens, hidden, positions=rows + (k - 1), allowed=masks[k - 1], past=past, logits=False
                )
                past = (torch.cat([past[0], kv[0]], 2), torch.cat([past[1], kv[1]], 2))
        target = rows + k  # (b, Tq) target position whose distribution row t must match (predicts t+k+1)
        scored = row_ok & (target + 1 < n) & (target + 1 >= start[:, None])  # (b, Tq)
        where = scored.nonzero(as_tuple=True)
        chosen = (where[0], rows[where])  # (batch rows, sequence rows)
        label = in_draft[chosen[0], chosen[1] + k]  # (n,)
        with draft_autocast(draft, autocast):
            logits = draft.lm_head(draft.norm(hidden[where]))  # (n, V_draft): the scored rows only
        yield k, logits.float(), chosen, torch.arange(T, device=ids.device) + k, label


def ttt_losses(draft: Eagle3Draft, batch: dict, targets, K: int, *, autocast: bool):
    """Per-step soft cross-entropy (rows whose target argmax is in the draft vocabulary) and
    accuracy of one draft on one batch. Returns (losses [K] tensors, correct [K], counts [K])."""
    losses, correct, counts = [], [], []
    for k, logits, chosen, s, label in ttt_unroll(draft, batch, K, autocast=autocast):
        keep = label != NOT_IN_DRAFT
        logp = torch.log_softmax(logits[keep], dim=-1)  # (n', V_draft)
        p = targets[chosen[0][keep], s[chosen[1][keep]]]  # (n', V_draft)
        losses.append(-(p * logp).sum(-1).mean() if len(p) else logits.sum() * 0)
        correct.append(int((logp.argmax(-1) == label[keep]).sum()))
        counts.append(len(p))
    return losses, correct, counts


def _lr(step: int, total: int, settings: TrainSettings) -> float:
    if step < settings.warmup:
        return settings.lr * (step + 1) / settings.warmup
    progress = (step - settings.warmup) / max(1, total - settings.warmup)
    return settings.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def with_noise(features: dict, std: float, seed: int, batch_index: int) -> dict:
    """{source: features + N(0, std^2)}, drawn from a generator seeded by (seed, batch index): the same
    noise whether training ran through or resumed."""
    if not std:
        return features
    g = torch.Generator().manual_seed(seed * 1_000_003 + batch_index)
    return {src: f + std * torch.randn(f.shape, generator=g).to(f.device) for src, f in features.items()}


def train_drafts(
    drafts: dict,
    store,
    target_rows,
    settings: TrainSettings = TrainSettings(),
    *,
    key: dict,
    name: str = "drafts",
    progress: bool = True,
    max_batches: int | None = None,
    time_budget_s: float | None = None,
    snapshots: tuple[int, ...] = (),
) -> dict:
    """Train `drafts` ({method: Eagle3Draft}, each reading its own `config.source`) in lock-step on
    `store`. `target_rows` (V_draft, d): the target lm_head's rows of the (shared) draft vocabulary.
    `key` describes everything that produced the drafts' starting point and data (the caller's part
    of the checkpoint key; `checkpoint_key` adds the rest). A checkpoint whose checksum or key does
    not hold is discarded, with a message, and training starts over. Stops early after
    `max_batches` batches or `time_budget_s` seconds (a checkpoint is written, a rerun continues).
    `snapshots`: batch counts after which the drafts are also kept as they are then, in checkpoints
    of their own (`snapshot_path`, read with `finished_drafts`): a learning curve from one run.
    Returns {"done": batches trained, "total": batches planned, "log": per batch, per method loss and
    per-step accuracy, "path": the checkpoint, "seconds": training time over every run that trained
    them (interrupted runs count up to their last checkpoint)}."""
    check_reply_tokens(store)  # ValueError before any work when there is nothing to train on
    vocabularies = {(tuple(d.d2t.tolist()), d.config.draft_vocab_size) for d in drafts.values()}
    if len(vocabularies) > 1:
        raise ValueError("drafts trained in lock-step share one draft vocabulary (the soft labels use it)")
    devices = {draft_device(d) for d in drafts.values()}
    if len(devices) > 1:
        raise ValueError(f"drafts trained in lock-step live on one device, got {sorted(map(str, devices))}")
    device = devices.pop()
    if settings.autocast_bf16:
        warn_if_bf16_is_slow(device.type, "draft training")
    target_rows = target_rows.to(device)
    full_key = checkpoint_key({m: d.config.source for m, d in drafts.items()}, settings, key, device.type)
    path = checkpoint_path(name, full_key)
    check_writable(path.parent)
    plan = batch_plan(
        [store.length(i) for i in range(len(store))], settings.batch_tokens, settings.epochs, settings.seed
    )
    optimisers = {
        m: torch.optim.AdamW(
            [p for p in d.parameters() if p.requires_grad],
            lr=settings.lr,
            weight_decay=settings.weight_decay,
            betas=(0.9, 0.95),
        )
        for m, d in drafts.items()
    }
    done, log, seconds_before = resume(path, full_key, drafts, optimisers)
    resumed_at = done
    torch.manual_seed(settings.seed)
    bar = progress_bar(
        total=len(plan),
        initial=done,
        desc=f"training {len(drafts)} drafts",
        unit="batch",
        disable=not progress or done >= len(plan),
    )
    started, stop_at = time.monotonic(), len(plan) if max_batches is None else min(len(plan), done + max_batches)
    tokens, t0 = 0, time.monotonic()
    last_save = t0

    def save():
        save_checkpoint(
            path,
            {
                "key": full_key,
                "done": done,
                "total": len(plan),
                "log": log,
                "seconds": seconds_before + time.monotonic() - started,
                "drafts": {m: draft_record(d) for m, d in drafts.items()},
                "optimisers": {m: o.state_dict() for m, o in optimisers.items()},
            },
        )

    for d in drafts.values():
        d.train()
    while done < stop_at:
        batch = to_device(collate(store, plan[done], set(d.config.source for d in drafts.values())), device)
        batch["features"] = with_noise(batch["features"], settings.feature_noise, settings.seed, done)
        targets = soft_targets(batch["final_norm"], target_rows)  # (b, T, V_draft), shared
        log.append(
            {"batch": done, **train_step(drafts, optimisers, batch, targets, settings, _lr(done, len(plan), settings))}
        )
        done += 1
        if done in snapshots:
            at = snapshot_key(full_key, done)
            save_checkpoint(
                checkpoint_path(f"{name}-at{done}", at),
                {
                    "key": at,
                    "done": done,
                    "total": done,
                    "log": list(log),
                    "drafts": {m: draft_record(d) for m, d in drafts.items()},
                },
            )
        tokens += int(batch["valid"].sum())
        mean_loss = sum(log[-1][m]["loss"] for m in drafts) / len(drafts)
        bar.set_postfix(loss=f"{mean_loss:.3f}", tok_s=f"{tokens / max(1e-9, time.monotonic() - t0):.0f}")
        bar.update(1)
        over_budget = time_budget_s is not None and time.monotonic() - started > time_budget_s
        if done == stop_at or over_budget or time.monotonic() - last_save > settings.checkpoint_seconds:
            save()
            last_save = time.monotonic()
        if over_budget:
            break
    bar.close()
    for d in drafts.values():
        d.eval()
    return {
        "done": done,
        "total": len(plan),
        "log": log,
        "path": path,
        "seconds": seconds_before + (time.monotonic() - started if done > resumed_at else 0.0),
    }


def train_step(drafts: dict, optimisers: dict, batch: dict, targets, settings: TrainSettings, lr: float) -> dict:
    """One optimiser step of every draft on the same batch: {method: {"loss", "acc" per step}}."""
    entry = {}
    for m, draft in drafts.items():
        for group in optimisers[m].param_groups:
            group["lr"] = lr
        losses, correct, counts = ttt_losses(draft, batch, targets, settings.ttt_steps, autocast=settings.autocast_bf16)
        loss = sum(settings.step_decay**k * l for k, l in enumerate(losses))
        optimisers[m].zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(draft.parameters(), settings.grad_clip)
        optimisers[m].step()
        entry[m] = {"loss": loss.item(), "acc": [c / max(1, n) for c, n in zip(correct, counts)]}
    return entry


@torch.no_grad()
def step_accuracy(draft: Eagle3Draft, store, K: int, *, batch_tokens: int = 4096, autocast: bool) -> list[float]:
    """Held-out step-1..K accuracy: the share of reply positions where the draft's argmax (its own
    hidden fed back, ground-truth tokens, as in training) equals the target's greedy token; a target
    token outside the draft vocabulary counts as a miss."""
    hits, totals = [0] * K, [0] * K
    for indices in batch_plan([store.length(i) for i in range(len(store))], batch_tokens, 1.0, 0):
        batch = to_device(collate(store, indices, {draft.config.source}), draft_device(draft))
        for k, logits, _, _, label in ttt_unroll(draft, batch, K, autocast=autocast):
            hits[k - 1] += int((logits.argmax(-1) == label).sum())
            totals[k - 1] += len(label)
    return [h / max(1, t) for h, t in zip(hits, totals)]
