"""The draft pieces of notebook 06 (training, features, replay), measured in one run on the bundled SmolLM2's shape (randomly initialised
draft, m = 3, the target's frozen embedding):
- the draft's forward throughput, and the EAGLE-2 tree's own cost per round (precomputed
  log-probabilities, so only the tree logic is timed);
- training tokens/s per draft (training-time test, K = 3, forward + backward + AdamW step), with and
  without bf16 autocast (the ratio is the lever's worth);
- replay: seconds per question and milliseconds per round (all roots of a question at once, trees of
  30 and 60 nodes from one expansion);
- features: reading stored fp16 features for a batch against recomputing them with a target forward
  (the measurement behind storing them).
Prints best-of-`repeat` times; later changes compare against these lines.

    .venv/bin/python bench/bench_draft.py [--repeat 5] [--questions 4] [--nodes 60] [--draft-vocab 32000]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import torch

import elsi_lib
from elsi_lib.draft.model import Eagle3Draft
from elsi_lib.draft.config import FINAL_NORM
from elsi_lib.draft.tree import build_trees
from elsi_lib.draft import train as training
from elsi_lib.draft.replay import replay_sequence
from record import write

TRAIN_VOCAB = 8192  # the experiment's draft vocabulary (elsi_lib.study.experiments.experiment.Experiment)


def best_time(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def draft_forward_rate(repeat: int, batch: int = 4, length: int = 256) -> tuple[float, str]:
    model, _ = elsi_lib.load_model()
    n_layers = model.config.num_hidden_layers
    draft = Eagle3Draft.from_target(model, elsi_lib.eagle3_layers(n_layers), draft_vocab_size=32000, seed=0).eval()
    d = model.config.hidden_size
    ids = torch.randint(0, model.config.vocab_size, (batch, length), generator=torch.Generator().manual_seed(0))
    features = torch.randn(batch, length, 3 * d, generator=torch.Generator().manual_seed(1))  # (b, T, 3d)

    def forward():
        with torch.no_grad():
            draft(ids, features=features)

    forward()  # warm-up
    seconds = best_time(forward, repeat)
    return batch * length / seconds, f"batch {batch} x {length} tokens, d = {d}, draft vocab 32000"


def tree_round_ms(repeat: int, questions: int, nodes: int, depth: int, top_k: int, vocab: int) -> float:
    generator = torch.Generator().manual_seed(0)
    root = torch.log_softmax(torch.randn(questions, 1, vocab, generator=generator), dim=-1)  # (b, 1, V)
    later = torch.log_softmax(torch.randn(questions, top_k, vocab, generator=generator), dim=-1)  # (b, k, V)

    def step_fn(state, frontier):
        return (root if frontier is None else later), state

    return 1000 * best_time(lambda: build_trees(step_fn, None, nodes=nodes, depth=depth, top_k=top_k), repeat)


def _batch(model, b: int, length: int, reply_from: int, vocab: int, layers) -> dict:
    """A random batch as `train.collate` gives it, with features for the draft source `layers`."""
    g = torch.Generator().manual_seed(0)
    d, m = model.config.hidden_size, len(layers)
    return {
        "ids": torch.randint(0, vocab, (b, length), generator=g),
        "valid": torch.ones(b, length, dtype=torch.bool),
        "start": torch.full((b,), reply_from),
        "argmax": torch.randint(0, vocab, (b, length), generator=g),
        "features": {tuple(layers): torch.randn(b, length, m * d, generator=g)},
    }


def training_rates(repeat: int, b: int = 6, length: int = 680, reply_from: int = 300) -> dict[bool, float]:
    """Training tokens/s of one draft, {autocast_bf16: rate}, on a batch like the experiment's."""
    model, _ = elsi_lib.load_model()
    layers = elsi_lib.eagle3_layers(model.config.num_hidden_layers)
    batch = _batch(model, b, length, reply_from, TRAIN_VOCAB, layers)
    targets = torch.softmax(torch.randn(b, length, TRAIN_VOCAB, generator=torch.Generator().manual_seed(2)), -1)
    rates = {}
    for autocast in (True, False):
        draft = Eagle3Draft.from_target(model, layers, TRAIN_VOCAB, seed=0)
        optimiser = torch.optim.AdamW(draft.parameters(), lr=1e-4)

        def step():
            losses, _, _ = training.ttt_losses(draft, batch, targets, 3, autocast=autocast)
            optimiser.zero_grad()
            sum(losses).backward()
            optimiser.step()

        step()  # warm-up
        rates[autocast] = b * length / best_time(step, repeat)
    return rates


def replay_cost(repeat: int, prefix: int = 550, tokens: int = 128) -> tuple[float, int]:
    """Seconds per question (all its roots at once, 30- and 60-node trees from one expansion) and
    its number of roots, for a random draft (which accepts little: every root is expanded anyway)."""
    model, _ = elsi_lib.load_model()
    draft = Eagle3Draft.from_target(
        model, elsi_lib.eagle3_layers(model.config.num_hidden_layers), TRAIN_VOCAB, seed=0
    ).eval()
    g = torch.Generator().manual_seed(0)
    n = prefix + tokens
    ids = torch.randint(0, TRAIN_VOCAB, (n,), generator=g)
    sequence = {
        "ids": ids,
        "argmax": torch.cat([ids[1:], ids[:1]]),
        "start": prefix,
        "features": torch.randn(n, 3 * model.config.hidden_size, generator=g),
    }
    seconds = best_time(lambda: replay_sequence(draft, sequence, tree_nodes=(30, 60), max_tokens=tokens), repeat)
    return seconds, tokens - 1


def feature_costs(repeat: int, n_conversations: int = 8) -> tuple[float, float, int]:
    """Tokens/s of reading a stored batch of features (6 layers, fp16 memory-mapped) against the
    target forward that recomputes them."""
    from elsi_lib.inputs.prompts import calibration_prompts
    from elsi_lib.draft.features import build_features
    from elsi_lib.hidden.forward import hidden_batches, pad_id, plan_batches, tokenize_samples

    model, tokenizer = elsi_lib.load_model()
    conversations = [
        c + [{"role": "assistant", "content": c[0]["content"][:400]}]
        for c in calibration_prompts(n_conversations, seed=1)
    ]
    layers = [1, 9, 10, 14, 26, 29]
    with tempfile.TemporaryDirectory() as folder:
        os.environ["ELSI_CACHE_DIR"] = folder
        store = build_features(model, tokenizer, conversations, layers, progress=False)
        tokens = sum(store.length(i) for i in range(len(store)))
        read = best_time(lambda: training.collate(store, list(range(len(store))), {tuple(layers), FINAL_NORM}), repeat)
        samples, _ = tokenize_samples(tokenizer, conversations, 1024)
        batches = plan_batches([len(s.ids) for s in samples], 64, 8192)
        forward = best_time(
            lambda: list(hidden_batches(model, samples, batches, pad_id(tokenizer), entropies=False)), repeat
        )
    return tokens / read, tokens / forward, tokens


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--questions", type=int, default=4)
    parser.add_argument("--nodes", type=int, default=60)
    parser.add_argument("--depth", type=int, default=6)
    parser.add_argument("--top-k", type=int, default=10)
    parser.add_argument("--draft-vocab", type=int, default=32000)
    args = parser.parse_args()
    load_before = [round(x, 2) for x in os.getloadavg()]
    rate, shape = draft_forward_rate(args.repeat)
    print(f"{'EAGLE-3 draft forward (SmolLM2 shape, m = 3)':<48}{rate:>9.0f} tok/s   ({shape})")
    ms = tree_round_ms(args.repeat, args.questions, args.nodes, args.depth, args.top_k, args.draft_vocab)
    print(
        f"{'EAGLE-2 tree logic per round':<48}{ms:>9.1f} ms      ({args.questions} questions, {args.nodes} nodes, "
        f"depth {args.depth}, top_k {args.top_k}, V_draft {args.draft_vocab}; draft forwards not included)"
    )
    rates = training_rates(max(1, args.repeat // 2))
    print(
        f"{'training, bf16 autocast (K = 3, 6 x 680 tokens)':<48}{rates[True]:>9.0f} tok/s   per draft, V_draft {TRAIN_VOCAB}"
    )
    print(f"{'training, float32':<48}{rates[False]:>9.0f} tok/s   bf16 / fp32 = {rates[True] / rates[False]:.2f}x")
    seconds, roots = replay_cost(max(1, args.repeat // 2))
    print(
        f"{'replay, one question (30 + 60 nodes)':<48}{seconds:>9.2f} s       ({roots} roots, "
        f"{1000 * seconds / roots:.1f} ms per root, depth 6, top_k 10, V_draft {TRAIN_VOCAB})"
    )
    read, forward, tokens = feature_costs(args.repeat)
    print(f"{'features: read stored (fp16, 6 layers + final)':<48}{read:>9.0f} tok/s")
    print(
        f"{'features: recompute (target forward)':<48}{forward:>9.0f} tok/s   read / recompute = "
        f"{read / forward:.1f}x ({tokens} tokens)"
    )
    rows = [
        {
            "measure": "draft forward (SmolLM2 shape, m = 3)",
            "value": round(rate),
            "unit": "tok/s",
            "detail": str(shape),
        },
        {
            "measure": "EAGLE-2 tree logic per round",
            "value": round(ms, 1),
            "unit": "ms",
            "detail": f"{args.questions} questions, {args.nodes} nodes, depth {args.depth}, top_k {args.top_k}, "
            f"V_draft {args.draft_vocab}",
        },
        {"measure": "training, bf16 autocast", "value": round(rates[True]), "unit": "tok/s per draft", "detail": ""},
        {"measure": "training, float32", "value": round(rates[False]), "unit": "tok/s per draft", "detail": ""},
        {
            "measure": "replay, one question (30 + 60 nodes)",
            "value": round(seconds, 2),
            "unit": "s",
            "detail": f"{roots} roots",
        },
        {"measure": "features: read stored", "value": round(read), "unit": "tok/s", "detail": ""},
        {"measure": "features: recompute", "value": round(forward), "unit": "tok/s", "detail": f"{tokens} tokens"},
    ]
    write("bench_draft", vars(args), rows, load_before=load_before)


if __name__ == "__main__":
    main()
