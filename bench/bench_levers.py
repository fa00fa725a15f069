"""Training levers that apply to every method alike, each measured briefly on a subset before the
strong drafts' run: EAGLE3's draft on SmolLM2-135M trained on the first training prompts' vLLM
replies (those `make replies-strong` has written), scored by held-out step-1..K accuracy on the
next ones (float32 features), one lever changed at a time from the base settings:

    base (seeds 0 and 1: what a reseed alone moves), batches of 512 tokens, peak lr 3e-3, noise on the
    features (std 0.05, as speculators trains), 5 training-time-test steps, a draft vocabulary of
    16,384, and a bfloat16-autocast target forward for the training features (live).

Accuracy, not speed: it does not depend on the load (the training tokens/s printed beside it do).
Every draft is checkpointed under its settings, so an interrupted run resumes. Writes
bench/results/bench_levers.{json,md}.

    .venv/bin/python bench/bench_levers.py [--train 1000] [--heldout 100]
"""

from __future__ import annotations

import argparse
import os
from dataclasses import replace

import torch

from elsi_lib.draft import corpus
from elsi_lib.study.experiments import experiment
from elsi_lib.draft.features import build_features
from elsi_lib.draft.live import LiveFeatures
from elsi_lib.draft.train import TrainSettings, step_accuracy, train_drafts
from elsi_lib.draft.vocabulary import draft_vocabulary
from elsi_lib.inputs.models import load_model
from elsi_lib.selection.conventions import eagle3_layers
from record import write

N_PROMPTS = 15306  # the strong run's request (engines/training_replies.py)
BASE = TrainSettings(batch_tokens=2048, warmup=20, lr=1e-3)
LEVERS = {  # name: (settings, draft vocabulary, bf16 target forward); the ones the strong run's settings hang on first
    "base": (BASE, 8192, False),
    "bf16 target forward (live)": (BASE, 8192, True),
    "feature noise std 0.05": (replace(BASE, feature_noise=0.05), 8192, False),
    "base, seed 1": (replace(BASE, seed=1), 8192, False),
    "peak lr 3e-3": (replace(BASE, lr=3e-3), 8192, False),
    "batches of 512 tokens": (replace(BASE, batch_tokens=512), 8192, False),
    "draft vocabulary 16,384": (BASE, 16384, False),
    "5 training-time-test steps": (replace(BASE, ttt_steps=5), 8192, False),
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--train", type=int, default=1000)
    parser.add_argument("--heldout", type=int, default=100)
    args = parser.parse_args()
    load_before = [round(x, 2) for x in os.getloadavg()]
    model, tokenizer = load_model("smollm2-135m")
    convs = corpus.training_conversations_written(model, tokenizer, N_PROMPTS, args.train + args.heldout)
    train_convs, heldout_convs = convs[: args.train], convs[args.train :]
    layers = eagle3_layers(len(model.get_decoder().layers))
    store = build_features(model, tokenizer, train_convs, layers, desc="features (train)")
    heldout = build_features(model, tokenizer, heldout_convs, layers, desc="features (held-out)")
    counts = torch.bincount(torch.from_numpy(store.reply_tokens()), minlength=model.config.vocab_size)
    rows = []
    for name, (settings, vocab, bf16) in LEVERS.items():
        d2t, t2d = draft_vocabulary(counts, vocab)
        draft = experiment.make_draft(model, layers, d2t, t2d, settings.seed)
        features = LiveFeatures(model, tokenizer, train_convs, layers, bf16=True) if bf16 else store
        out = train_drafts(
            {"eagle3": draft},
            features,
            model.get_output_embeddings().weight[t2d].detach().float(),
            settings,
            key={"levers": {"prompts": N_PROMPTS, "train": args.train, "vocab": vocab, "bf16_forward": bf16}},
            name="lever",
        )
        seconds = out["seconds"]  # training time summed over every run that trained it (resumes included)
        accuracy = step_accuracy(draft, heldout, 3, autocast=settings.autocast_bf16)
        tokens = sum(features.length(i) for i in range(len(features)))
        row = {
            "lever": name,
            **{f"step {k + 1}": round(a, 4) for k, a in enumerate(accuracy)},
            "batches": out["total"],
            "train tok/s": round(tokens / seconds) if seconds > 5 else "",
        }
        print(row, flush=True)
        rows.append(row)
    base = rows[0]["step 1"]
    for row in rows:
        row["step 1 minus base"] = round(row["step 1"] - base, 4)
    write(
        "bench_levers",
        {**vars(args), "base": BASE.__dict__, "layers": list(layers)},
        rows,
        load_before=load_before,
        notes=f"EAGLE3's draft, {args.train} training prompts' replies, {args.heldout} held-out; the seed-1 row is "
        "what a reseed alone moves. tok/s: beside whatever else ran (see the load), not a speed measure.",
    )


if __name__ == "__main__":
    main()
