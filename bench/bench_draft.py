"""Draft pieces of issue 12, measured in one run: the EAGLE-3 draft's forward throughput on the
bundled SmolLM2's shape (randomly initialised draft, m = 3, the target's frozen embedding) and the
EAGLE-2 tree's own cost per round (precomputed log-probabilities, so only the tree logic is timed).
Prints best-of-`repeat` times; later changes compare against these lines.

    .venv/bin/python bench/bench_draft.py [--repeat 5] [--questions 4] [--nodes 60] [--draft-vocab 32000]
"""
from __future__ import annotations

import argparse
import time

import torch

import elsi_lib
from elsi_lib.draft import Eagle3Draft, build_trees


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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--questions", type=int, default=4)
    parser.add_argument("--nodes", type=int, default=60)
    parser.add_argument("--depth", type=int, default=6)
    parser.add_argument("--top-k", type=int, default=10)
    parser.add_argument("--draft-vocab", type=int, default=32000)
    args = parser.parse_args()
    rate, shape = draft_forward_rate(args.repeat)
    print(f"{'EAGLE-3 draft forward (SmolLM2 shape, m = 3)':<48}{rate:>9.0f} tok/s   ({shape})")
    ms = tree_round_ms(args.repeat, args.questions, args.nodes, args.depth, args.top_k, args.draft_vocab)
    print(f"{'EAGLE-2 tree logic per round':<48}{ms:>9.1f} ms      ({args.questions} questions, {args.nodes} nodes, "
          f"depth {args.depth}, top_k {args.top_k}, V_draft {args.draft_vocab}; draft forwards not included)")


if __name__ == "__main__":
    main()
