"""Stored against live training features, measured in one run on SmolLM2-135M and real training
conversations (training prompts and the target's greedy replies): the choice behind the strong drafts' run.

Per token of training data, a store costs one target forward written to disk (`build_features`,
float16, every layer any strong method reads) and a read per batch; live features cost one target
forward per training batch (`live.LiveFeatures`), in float32 or under bfloat16 autocast. Beside
them: the lock-step training step of the strong run's seven drafts on the same batches, at 512 and
2,048 padded tokens per batch, which every choice pays alike. Prints tokens/s and the ratios; writes
bench/results/bench_live.{json,md}. Run it on a quiet machine.

    .venv/bin/python bench/bench_live.py [--conversations 24] [--repeat 2]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import torch

from elsi_lib.draft import corpus
from elsi_lib.study.experiments import experiment, run_data
from elsi_lib.draft.features import build_features
from elsi_lib.draft.live import LiveFeatures, read_positions
from elsi_lib.study.experiments.layer_choices import draft_methods, select_methods
from elsi_lib.draft.train import TrainSettings, batch_plan, collate, soft_targets, train_step
from elsi_lib.draft.vocabulary import draft_vocabulary
from elsi_lib.inputs.models import load_model
from elsi_lib.study.paper.captures import paper_stats
from record import write

STRONG = ["eagle2", "eagle3", "elsi-m1-rule", "elsi-m3", "elsi-c-m3", "elsi-m3-no-template", "lowest-entropy-m3"]


def timed(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--conversations", type=int, default=24)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    load_before = [round(x, 2) for x in os.getloadavg()]
    model, tokenizer = load_model("smollm2-135m")
    methods = select_methods(draft_methods(paper_stats(["smollm2-135m"], 200, progress=False)["smollm2-135m"]), STRONG)
    layers = run_data.feature_layers(methods, len(model.get_decoder().layers))
    # the first training prompts with the target's replies (the reply step; cached after the first run, untimed)
    convs = corpus.training_conversations(model, tokenizer, args.conversations, progress=False)
    live, live_bf16 = (
        LiveFeatures(model, tokenizer, convs, layers),
        LiveFeatures(model, tokenizer, convs, layers, bf16=True),
    )
    tokens = sum(live.length(i) for i in range(len(live)))
    sources = set(methods.source)
    rows, out = [], {}
    with tempfile.TemporaryDirectory() as folder:
        os.environ["ELSI_CACHE_DIR"] = folder
        start = time.perf_counter()
        store = build_features(model, tokenizer, convs, layers, progress=False)
        out["store: build (forward + write)"] = tokens / (time.perf_counter() - start)
        disk = sum(f.stat().st_size for f in store.folder.rglob("*.npy"))
        for batch_tokens in (512, 2048):
            plan = batch_plan([live.length(i) for i in range(len(live))], batch_tokens, 1.0, 0)
            out[f"store: read, batches of {batch_tokens}"] = tokens / timed(
                lambda: [collate(store, b, sources) for b in plan], args.repeat
            )
            out[f"live float32, batches of {batch_tokens}"] = tokens / timed(
                lambda: [collate(live, b, sources) for b in plan], args.repeat
            )
            out[f"live bf16 autocast, batches of {batch_tokens}"] = tokens / timed(
                lambda: [collate(live_bf16, b, sources) for b in plan], args.repeat
            )
        full, half = collate(live, list(range(4)), sources), collate(live_bf16, list(range(4)), sources)
        relative = max(
            float((full["features"][s] - half["features"][s]).norm() / full["features"][s].norm()) for s in sources
        )
        # where training reads the greedy token (LiveFeatures forms it there only): from each reply's start - 1
        read = read_positions(full["valid"], full["start"])
        argmax_agree = float((full["argmax"] == half["argmax"])[read].float().mean())
        counts = torch.bincount(torch.from_numpy(store.reply_tokens()), minlength=model.config.vocab_size)
        d2t, t2d = draft_vocabulary(counts, 8192)
        target_rows = model.get_output_embeddings().weight[t2d].detach().float()
        for batch_tokens in (512, 2048):
            drafts = {m: experiment.make_draft(model, s, d2t, t2d, 0) for m, s in zip(methods["id"], methods.source)}
            optimisers = {m: torch.optim.AdamW(d.parameters(), lr=1e-4) for m, d in drafts.items()}
            plan = batch_plan([live.length(i) for i in range(len(live))], batch_tokens, 1.0, 0)
            batches = [collate(store, b, sources) for b in plan]
            settings = TrainSettings(batch_tokens=batch_tokens)

            def train():
                for batch in batches:
                    train_step(
                        drafts, optimisers, batch, soft_targets(batch["final_norm"], target_rows), settings, 1e-4
                    )

            out[f"training {len(drafts)} drafts in lock-step, batches of {batch_tokens}"] = tokens / timed(train, 1)
    for name, rate in out.items():
        print(f"{name:<52}{rate:>9.0f} tok/s")
        rows.append({"measure": name, "value": round(rate), "unit": "tok/s", "detail": ""})
    extra = [
        ("disk per token (store, float16)", disk / tokens, "bytes", f"{len(layers)} layers + final norm"),
        ("bf16 forward: relative feature difference", relative, "", "largest over the sources, 4 conversations"),
        ("bf16 forward: target argmax agreement", argmax_agree, "", "share of the positions training reads"),
    ]
    for name, value, unit, detail in extra:
        print(f"{name:<52}{value:>9.4g} {unit}  {detail}")
        rows.append({"measure": name, "value": round(value, 4), "unit": unit, "detail": detail})
    live_cost = 1 / out["live float32, batches of 2048"] + 1 / out["training 7 drafts in lock-step, batches of 2048"]
    store_cost = (
        1 / out["store: build (forward + write)"]
        + 1 / out["store: read, batches of 2048"]
        + 1 / out["training 7 drafts in lock-step, batches of 2048"]
    )
    note = (
        f"{tokens} tokens of {len(convs)} conversations, layers {layers}. Per training token (batches of 2048, "
        f"seven drafts, one epoch): store {1000 * store_cost:.2f} ms, live {1000 * live_cost:.2f} ms "
        f"(store / live {store_cost / live_cost:.2f}x)"
    )
    print(note)
    write("bench_live", {**vars(args), "methods": STRONG, "layers": layers}, rows, load_before=load_before, notes=note)


if __name__ == "__main__":
    main()
