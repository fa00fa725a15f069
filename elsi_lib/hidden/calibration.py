"""Calibration conversations and their capture, the data `elsi select` and every paper notebook start
from: the calibration prompts, each followed by a reply model's greedy reply (cached), and one
forward of a model over them giving every position selection's LayerStats (cached).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..inputs.models import DEFAULT_MODEL, load_model
from ..inputs.prompts import calibration_prompts
from .capture import capture_variants
from .layerstats import LayerStats
from .replies import reply_conversations
from .settings import CaptureSettings

# Position selections at the same rho: all tokens (no filtering), the paper's entropy filter, a
# random control of the same size, and the entropy filter with chat-template positions (where the
# attention sinks sit) excluded.
SELECTIONS: dict[str, dict[str, Any]] = {
    "all": {"rho": 1.0},
    "entropy": {"keep_samples": True},
    "random": {"select": "random"},
    "entropy_no_template": {"exclude": "template"},
}
REPLY_BATCH = 16  # replies per generate call: on 2 CPU cores that halves the time of batches of 8
# The bundled models' replies to the calibration prompts, shipped in the package (read-only: a cold
# `elsi select` on a bundled model skips writing them; any other model, version or setting writes its
# own). `make calibration-replies` writes them (`ship_replies`).
SHIPPED_REPLIES = Path(__file__).resolve().parent / "calibration_replies"


def calibration_conversations(
    n_prompts: int,
    *,
    seed: int = 0,
    reply_model: str = DEFAULT_MODEL,
    max_new_tokens: int = 128,
    max_length: int = CaptureSettings.max_length,
    progress: bool = True,
    loaded: tuple | None = None,
) -> list[list[dict]]:
    """`n_prompts` calibration prompts, each followed by `reply_model`'s greedy reply (cached).
    `loaded`: the reply model's (model, tokenizer) when the caller already holds them."""
    model, tokenizer = loaded or load_model(reply_model)
    return reply_conversations(
        model,
        tokenizer,
        calibration_prompts(n_prompts, seed=seed),
        max_new_tokens=max_new_tokens,
        max_length=max_length,
        batch_size=REPLY_BATCH,
        progress=progress,
        shipped=SHIPPED_REPLIES,
    )


def ship_replies(models=(DEFAULT_MODEL,), n_prompts: int = 200) -> None:
    """Write the bundled `models`' replies to the default calibration sample into SHIPPED_REPLIES (from
    the cache when it holds them), as `elsi select` asks for them."""
    for name in models:
        model, tokenizer = load_model(name)
        reply_conversations(
            model,
            tokenizer,
            calibration_prompts(n_prompts, seed=0),
            max_new_tokens=128,
            max_length=CaptureSettings.max_length,
            batch_size=REPLY_BATCH,
            archive=SHIPPED_REPLIES,
        )


def capture_selections(
    model_name,
    conversations,
    settings: CaptureSettings | None = None,
    *,
    selections: dict | None = None,
    progress: bool = True,
    loaded: tuple | None = None,
    on_batch=None,
) -> dict[str, LayerStats]:
    """{selection name: LayerStats} for one model, every selection from one forward pass (cached).
    Each selection overrides `settings` (default: the paper's) in the fields it names.
    `loaded`: the model's (model, tokenizer) when the caller already holds them; `on_batch`: another
    consumer of the same forward (`capture.capture_variants`)."""
    model, tokenizer = loaded or load_model(model_name)
    chosen = SELECTIONS if selections is None else selections
    return capture_variants(model, tokenizer, conversations, chosen, settings, progress=progress, on_batch=on_batch)
