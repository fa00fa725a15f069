"""Cheap levers on the cost model, each measured alone in elsi's loop on this CPU, batch 1, after
`bench/bench_cost.py` (whose record gives the rest: the acceptance, the other costs):

- threads: torch's threads 1 against every core: plain decoding ms/token, the target's forward over
  1..K+1 new tokens and the draft's chains, all at that thread count;
- the draft's vocabulary: drafts of the same layer set with a smaller or larger head (random weights:
  a step's cost does not depend on them): their chains of k = 1..K and their update rows.

For each lever the best chain's predicted speed-up (`elsi_lib.draft.cost`), every other cost and the
per-step acceptance as bench_cost measured them. The acceptance is the measured draft's: a smaller
vocabulary may accept less, so its line is an upper bound, and says so.

    .venv/bin/python bench/bench_cost_levers.py [--result cost_elsi_table3_f32] [--vocab 4096 8192 16384 32768]

Results: bench/results/cost_levers_<family>.json and .md. Never run it beside another job: it times.
"""

from __future__ import annotations

import argparse
import os

import torch

from bench_cost import draft_costs
from bench_decoding import plain, verification_ms
from elsi_lib.draft import corpus, cost
from elsi_lib.draft.model import Eagle3Draft
from elsi_lib.draft.runner import resolved_autocast
from elsi_lib.inputs.chat import tokenize_conversation
from elsi_lib.inputs.models import load_model
from record import read, write


def best_chain(measured: dict, *, plain_s: float, forward: dict, chains: dict, rows: dict) -> tuple[int, float]:
    """(k, predicted speed-up) of the best chain with these costs (ms) and the record's acceptance."""
    s = measured["settings"]
    rates, questions, generated = s["per-step acceptance"], s["questions"], s["generated"]
    prefill = s["prefill ms"] / 1000 / questions
    best = (0, 0.0)
    for k in range(1, len(rates) + 1):
        tokens = cost.tokens_per_round(rates[:k])
        update = rows[min(max(1, round(tokens)), max(rows))]
        round_s = cost.round_seconds(chains[k] / 1000, forward[k + 1] / 1000, update / 1000)
        speed = plain_s / cost.generation_seconds(generated, questions, tokens, round_s, prefill)
        best = max(best, (k, speed), key=lambda b: b[1])
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--result", default="cost_elsi_table3_f32", help="bench_cost's record to start from")
    parser.add_argument("--vocab", type=int, nargs="+", default=[4096, 8192, 16384, 32768])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    try:
        measured = read(args.result)
    except FileNotFoundError:
        parser.error(f"no bench/results/{args.result}.json: run bench/bench_cost.py first")
    s = measured["settings"]
    if any(v < 2 for v in args.vocab):
        parser.error(f"--vocab: a draft vocabulary needs at least 2 tokens, got {args.vocab}")
    load_before = [round(x, 2) for x in os.getloadavg()]
    model, tokenizer = load_model(s["model"])
    K = len(s["per-step acceptance"])
    shapes = [(k, k, 1) for k in range(1, K + 1)]
    questions = corpus.eval_questions(1, seed=0).head(s["questions"])
    prompts = [tokenize_conversation(tokenizer, c, add_generation_prompt=True)[0] for c in questions.conversation]
    autocast = resolved_autocast(None)
    layers = tuple(s["layers"])
    cores = torch.get_num_threads()

    def costs(vocab: int):
        draft = Eagle3Draft.from_target(model, layers, min(vocab, model.config.vocab_size), seed=0).eval()
        chains, rows, _ = draft_costs(model, draft, prompts[0], shapes, args.repeat, autocast)
        return {k: chains[(k, k, 1)] for k in range(1, K + 1)}, rows

    out = []
    base_vocab = s["draft vocabulary"]
    for threads in sorted({1, cores}):
        torch.set_num_threads(threads)
        plain(model, prompts[:1], 4)
        reference, plain_s = plain(model, prompts, s["tokens"])
        forward = verification_ms(model, prompts[0], range(1, K + 2), args.repeat)
        chains, rows = costs(base_vocab)
        k, speed = best_chain(measured, plain_s=plain_s, forward=forward, chains=chains, rows=rows)
        out.append(
            {
                "lever": f"threads {threads}",
                "plain ms/token": round(1000 * plain_s / sum(map(len, reference)), 1),
                "forward ms 1 / K+1 tokens": f"{forward[1]:.1f} / {forward[K + 1]:.1f}",
                "draft chain ms k=1 / K": f"{chains[1]:.1f} / {chains[K]:.1f}",
                "best k": k,
                "speed-up predicted": round(speed, 3),
                "acceptance": "measured",
            }
        )
        print(out[-1], flush=True)
        if threads == cores:
            base = {"plain_s": plain_s, "forward": forward}
    torch.set_num_threads(cores)
    for vocab in args.vocab:
        chains, rows = costs(vocab)
        k, speed = best_chain(measured, chains=chains, rows=rows, **base)
        out.append(
            {
                "lever": f"draft vocabulary {vocab}",
                "plain ms/token": "",
                "forward ms 1 / K+1 tokens": "",
                "draft chain ms k=1 / K": f"{chains[1]:.1f} / {chains[K]:.1f}",
                "best k": k,
                "speed-up predicted": round(speed, 3),
                "acceptance": "measured" if vocab == base_vocab else "held at the measured draft's (an upper bound)",
            }
        )
        print(out[-1], flush=True)
    settings = {
        "from": args.result,
        "model": s["model"],
        "layers": list(layers),
        "draft vocabulary": base_vocab,
        "repeat": args.repeat,
        "cores": cores,
    }
    write(f"cost_levers_{args.result.removeprefix('cost_elsi_')}", settings, out, load_before=load_before)


if __name__ == "__main__":
    main()
