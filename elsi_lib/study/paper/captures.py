"""The calibration step of every paper notebook: prompts -> replies -> one capture per model, for
every model a notebook runs (the steps themselves are the core's, `hidden.calibration`).

Calibration follows the paper's setup: fixed conversations (prompt + reply) shared by every target
model, as the paper shares ShareGPT. Here the replies are written once by `reply_model` (the small
default model, greedy), because generating them with each target would dominate the run time.
"""

from __future__ import annotations

from ...hidden.calibration import calibration_conversations, capture_selections
from ...hidden.layerstats import LayerStats
from ...hidden.probe_capture import cached_probe, cached_probe_choice
from ...hidden.settings import CaptureSettings
from ...inputs.models import DEFAULT_MODEL, load_model


def model_names(models, model=None) -> list[str]:
    """The models a notebook runs: `models` (a list, or a comma-separated string as papermill's
    -p passes it), with `model` first if it is not among them. Anything else is refused."""
    hint = "pass a list, e.g. papermill -y 'MODELS: [smollm2-135m, qwen2.5-coder-0.5b]' or -p MODELS smollm2-135m,qwen2.5-coder-0.5b"
    if isinstance(models, str):
        if any(c in models for c in "[]{}\"'"):
            raise ValueError(f"MODELS={models!r} is a string, not a list of model names: {hint}")
        models = [m.strip() for m in models.split(",")]
    if not isinstance(models, (list, tuple)) or not all(isinstance(m, str) and m.strip() for m in models):
        raise ValueError(f"MODELS must be a list of model names, got {models!r}: {hint}")
    names = [m.strip() for m in models]
    if not names:
        raise ValueError(f"MODELS is empty: {hint}")
    if model is not None and model not in names:
        names = [model, *names]
    return list(dict.fromkeys(names))


def paper_stats(
    models,
    n_prompts: int,
    *,
    capture: dict | None = None,
    seed: int = 0,
    reply_model: str = DEFAULT_MODEL,
    max_new_tokens: int = 128,
    progress: bool = True,
) -> dict[str, dict[str, LayerStats]]:
    """Every paper notebook's data: {model: {selection: LayerStats}} for the `SELECTIONS`.

    `n_prompts` calibration conversations (seeded by `seed`) with `reply_model`'s replies of up to
    `max_new_tokens` tokens, captured by each model under the paper's settings, changed by
    `capture` (e.g. {"rho": 0.5, "block": 16}). Everything is cached: later notebooks reuse it.
    Each model is loaded once (the reply model, when it is also a target, serves both steps).
    """
    names = model_names(models)
    settings = CaptureSettings().replace(**(capture or {}))
    replier = load_model(reply_model)
    conversations = calibration_conversations(
        n_prompts,
        seed=seed,
        reply_model=reply_model,
        max_new_tokens=max_new_tokens,
        max_length=settings.max_length,
        progress=progress,
        loaded=replier,
    )
    return {
        name: capture_selections(
            name, conversations, settings, progress=progress, loaded=replier if name == reply_model else None
        )
        for name in names
    }


def describe(stats: dict[str, dict[str, LayerStats]]) -> str:
    """One line per model: Z's shape, conversations, tokens and blocks of the paper's selection."""
    lines = []
    for name, by_selection in stats.items():
        paper = by_selection["entropy"]
        counts, block = paper.counts, paper.Z.shape[1]
        lines.append(
            f"{name}: Z {paper.Z.shape}, {counts['samples']} conversations, {counts['tokens_seen']} "
            f"tokens, {counts['blocks']} blocks of {block} ({counts['samples_without_block']} "
            "conversations too short for a block)"
        )
    return "\n".join(lines)


# The probe's settings in every study run; its forward's batching (samples, padded tokens) is the one the
# ledger's probe sets were chosen under: padding moves the states' last bits, and a protocol's later seeds
# must train the set its first ones did.
PROBE_BATCHING = (64, 8192)
STUDY_PROBE = {"max_length": CaptureSettings.max_length, "batching": PROBE_BATCHING}


def probe_choices(
    model_name: str,
    n_prompts: int,
    set_sizes=(3,),
    *,
    seed: int = 0,
    reply_model: str = DEFAULT_MODEL,
    rank: int | None = None,
    progress: bool = True,
    loaded: tuple | None = None,
) -> dict:
    """{m: `selection.probe.ProbeChoice`}: the task probe's sets for one model on the same calibration
    conversations as `paper_stats` (statistics and choices cached, `hidden.probe_capture`); `rank`
    components per block (default `probe_capture.RANK`)."""

    model, tokenizer, conversations = _probe_inputs(model_name, n_prompts, seed, reply_model, progress, loaded)
    return {
        m: cached_probe_choice(model, tokenizer, conversations, m, rank=rank, progress=progress, **STUDY_PROBE)
        for m in set_sizes
    }


def probe_statistics(
    model_name: str,
    n_prompts: int,
    *,
    seed: int = 0,
    reply_model: str = DEFAULT_MODEL,
    rank: int | None = None,
    progress: bool = True,
    loaded: tuple | None = None,
):
    """The task probe's statistics (`selection.probe.ProbeStats`, cached) of one model on the calibration
    conversations `probe_choices` chooses from: what scores any set without the model."""

    model, tokenizer, conversations = _probe_inputs(model_name, n_prompts, seed, reply_model, progress, loaded)
    return cached_probe(model, tokenizer, conversations, rank=rank, progress=progress, **STUDY_PROBE)


def _probe_inputs(model_name, n_prompts, seed, reply_model, progress, loaded):
    """The probed model, its tokenizer and the calibration conversations (the reply model's own load
    reused when it is the probed model)."""
    model, tokenizer = loaded or load_model(model_name)
    conversations = calibration_conversations(
        n_prompts,
        seed=seed,
        reply_model=reply_model,
        progress=progress,
        loaded=(model, tokenizer) if model_name == reply_model else None,
    )
    return model, tokenizer, conversations
