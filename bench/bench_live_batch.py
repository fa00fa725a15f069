"""Where one live training batch of a protocol spends its time, and what the three exact savings of
`live.LiveFeatures` buy (the greedy token only where training reads it; under bf16, the decoder's
linear weights rounded to bfloat16 once instead of at every forward, and the greedy token screened in
bfloat16 and decided in float32, `greedy.ScreenedGreedy`), measured in one run.

On the protocol's own training conversations (the first `--batches` batches of its batch plan) and
one EAGLE3-set draft, each batch is timed in parts: the target's forward under autocast casting the
float32 weights, the same forward with the weights rounded once (its states compared bit for bit),
the float32 LM head's greedy token over every position and over the read positions only, the
screened greedy token over the read positions (its tokens compared with the float32 head's, and the
share of positions it hands to the full row), the soft targets, and one training step of the draft.
`--verify N` compares the screened and the float32 head's tokens on N more batches, untimed. Prints
milliseconds per batch, the batch before and after (`LiveFeatures.collate` as it was and as it is),
and what a unit's training of the protocol's batch count takes either way; writes
bench/results/bench_live_batch_<protocol>.{json,md}. Run it on a quiet machine: a background job
halves every number.

    .venv/bin/python bench/bench_live_batch.py [--protocol qwen_strong] [--batches 8] [--repeat 2] [--verify 0]
"""

from __future__ import annotations

import argparse
import os
import time

import torch

from elsi_lib.common.hardware import bf16_matmul_is_fast
from elsi_lib.draft.greedy import ScreenedGreedy, float32_greedy
from elsi_lib.draft.live import LiveFeatures, read_positions
from elsi_lib.draft.train import batch_plan, soft_targets, train_step
from elsi_lib.draft.vocabulary import draft_vocabulary
from elsi_lib.hidden.forward import hidden_batches
from elsi_lib.inputs.models import load_model
from elsi_lib.selection.conventions import eagle3_layers
from elsi_lib.study.experiments import experiment, run_data
from elsi_lib.study.ledger.protocols import PROTOCOLS, protocol
from record import write


def best_of(fn, repeat: int) -> tuple[float, object]:
    """(the fastest of `repeat` calls in seconds, the last call's result)."""
    best, out = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--protocol", default="qwen_strong", choices=sorted(PROTOCOLS))
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--verify", type=int, default=0, help="more batches whose greedy tokens are compared")
    args = parser.parse_args()
    if args.batches < 1 or args.repeat < 1 or args.verify < 0:
        parser.error("--batches and --repeat must be at least 1, --verify at least 0")
    load_before = [round(x, 2) for x in os.getloadavg()]
    proto = protocol(args.protocol)
    exp = proto.experiment()
    if exp.features != "live":
        parser.error(f"{args.protocol} trains on stored features, not live ones: nothing to time here")
    model, tokenizer = load_model(exp.model)
    convs = run_data.training_conversations(exp, model, tokenizer, progress=False)[: exp.n_train - exp.n_heldout]
    layers = eagle3_layers(len(model.get_decoder().layers))
    live = LiveFeatures(model, tokenizer, convs, layers, max_length=exp.max_length, bf16=exp.live_bf16)
    plan = batch_plan(
        [live.length(i) for i in range(len(live))], exp.train.batch_tokens, exp.train.epochs, exp.train.seed
    )
    counts = torch.bincount(torch.from_numpy(live.reply_tokens()), minlength=model.config.vocab_size)
    d2t, t2d = draft_vocabulary(counts, exp.draft_vocab)
    target_rows = model.get_output_embeddings().weight[t2d].detach().float()
    draft = experiment.make_draft(model, layers, d2t, t2d, 0)
    optimisers = {"eagle3": torch.optim.AdamW([p for p in draft.parameters() if p.requires_grad], lr=1e-5)}
    lm_head, device = model.get_output_embeddings(), next(model.parameters()).device
    parts = {
        name: 0.0
        for name in (
            "forward, autocast casts the weights",
            "forward, weights rounded once",
            "head, every position",
            "head, read positions",
            "head, read positions, screened",
            "soft targets",
            "draft step",
        )
    }
    identical, tokens = True, 0
    screen = ScreenedGreedy(lm_head.weight)
    screened = bf16_matmul_is_fast()  # where greedy.greedy_next screens
    live.collate(plan[0], {layers})  # untimed: the weights' rounding and the kernels' first calls
    for indices in plan[: args.batches]:
        samples = [live.samples[i] for i in indices]

        def forward():
            with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=exp.live_bf16):
                return next(hidden_batches(model, samples, [list(range(len(samples)))], live._pad, entropies=False))

        def forward_rounded():
            with live._weights_for_autocast():
                return forward()

        seconds, plain = best_of(forward, args.repeat)
        parts["forward, autocast casts the weights"] += seconds
        seconds, rounded = best_of(forward_rounded, args.repeat)
        parts["forward, weights rounded once"] += seconds
        identical &= torch.equal(plain.final_norm, rounded.final_norm) and all(
            torch.equal(a, b) for a, b in zip(plain.layers, rounded.layers)
        )
        batch = live.collate(indices, {layers})
        valid = batch["valid"]
        read = read_positions(valid, batch["start"])  # (b, T)
        final = plain.final_norm.float()
        with torch.no_grad():
            seconds, every = best_of(lambda: float32_greedy(final[valid.to(device)], lm_head), args.repeat)
            parts["head, every position"] += seconds
            seconds, only = best_of(lambda: float32_greedy(final[read.to(device)], lm_head), args.repeat)
            parts["head, read positions"] += seconds
            identical &= torch.equal(every[read[valid]], only)
            seconds, decided = best_of(lambda: screen(final[read.to(device)]), args.repeat)
            parts["head, read positions, screened"] += seconds
            identical &= torch.equal(decided, only)
            seconds, targets = best_of(lambda: soft_targets(batch["final_norm"], target_rows), args.repeat)
        parts["soft targets"] += seconds
        seconds, _ = best_of(lambda: train_step({"eagle3": draft}, optimisers, batch, targets, exp.train, 1e-5), 1)
        parts["draft step"] += seconds
        tokens += int(valid.sum())
    checked = screen.positions // args.repeat  # each timed call counted its positions
    for indices in plan[args.batches : args.batches + args.verify]:  # untimed: the tokens only
        samples = [live.samples[i] for i in indices]
        with torch.no_grad(), live._weights_for_autocast():
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=exp.live_bf16):
                states = next(hidden_batches(model, samples, [list(range(len(samples)))], live._pad, entropies=False))
            valid = torch.zeros(len(samples), max(len(s.ids) for s in samples), dtype=torch.bool)
            for r, sample in enumerate(samples):
                valid[r, : len(sample.ids)] = True
            read = read_positions(valid, torch.tensor([live.start(i) for i in indices]))
            final = states.final_norm.float()[read.to(device)]
            identical &= torch.equal(screen(final), float32_greedy(final, lm_head))
            checked += len(final)
    per_batch = {name: 1000 * total / args.batches for name, total in parts.items()}
    shared = per_batch["soft targets"] + per_batch["draft step"]
    before = per_batch["forward, autocast casts the weights"] + per_batch["head, every position"] + shared
    rounded = "forward, weights rounded once" if exp.live_bf16 else "forward, autocast casts the weights"
    head = "head, read positions, screened" if screened else "head, read positions"
    after = per_batch[rounded] + per_batch[head] + shared
    unscreened = per_batch[rounded] + per_batch["head, read positions"] + shared  # without the screen
    rows = [{"measure": name, "value": round(ms, 1), "unit": "ms per batch"} for name, ms in per_batch.items()]
    rows += [
        {
            "measure": "screened positions the float32 row decided",
            "value": round(100 * screen.fallbacks / max(screen.positions, 1), 2),
            "unit": "%",
        },
        {"measure": "batch as it was", "value": round(before, 1), "unit": "ms per batch"},
        {"measure": "batch with the float32 head", "value": round(unscreened, 1), "unit": "ms per batch"},
        {"measure": "batch as it is", "value": round(after, 1), "unit": "ms per batch"},
        {"measure": "with the float32 head / as it is", "value": round(unscreened / after, 3), "unit": "x"},
        {"measure": "as it was / as it is", "value": round(before / after, 3), "unit": "x"},
        {
            "measure": f"a unit's training ({len(plan)} batches), as it was",
            "value": round(len(plan) * before / 60000, 1),
            "unit": "min",
        },
        {
            "measure": f"a unit's training ({len(plan)} batches), with the float32 head",
            "value": round(len(plan) * unscreened / 60000, 1),
            "unit": "min",
        },
        {
            "measure": f"a unit's training ({len(plan)} batches), as it is",
            "value": round(len(plan) * after / 60000, 1),
            "unit": "min",
        },
    ]
    for row in rows:
        print(f"{row['measure']:<52}{row['value']:>10} {row['unit']}")
    note = (
        f"{args.protocol} ({exp.model}, live bf16 {exp.live_bf16}, draft autocast {exp.train.autocast_bf16}): "
        f"the first {args.batches} of {len(plan)} batches ({tokens} tokens), EAGLE3's layers {list(layers)}, "
        f"one draft, best of {args.repeat}; the rounded forward, the read-only head and the screened head "
        f"{'match' if identical else 'DO NOT match'} the plain ones bit for bit (the screened tokens over "
        f"{checked} read positions of {args.batches + args.verify} batches); 'as it is' "
        f"{'screens' if screened else 'does not screen (no bf16 matmul instructions)'}"
    )
    print(note)
    write(f"bench_live_batch_{args.protocol}", vars(args), rows, load_before=load_before, notes=note)
    if not identical:
        raise SystemExit("the savings changed a value: see the note")


if __name__ == "__main__":
    main()
