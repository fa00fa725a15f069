"""Cheap levers on the cost model, each measured alone in elsi's loop on this CPU, batch 1, after
`bench/bench_cost.py` (whose record gives the rest: the acceptance, the other costs):

- threads: torch's threads 1 against every core: plain decoding ms/token, the target's forward over
  1..K+1 new tokens and the draft's chains, all at that thread count;
- the draft's vocabulary: drafts of the same layer set with a smaller or larger head (random weights:
  a step's cost does not depend on them): their chains of k = 1..K and their update rows.

For each lever the best chain's predicted speed-up (`elsi_lib.draft.cost`), every other cost and the
per-step acceptance as bench_cost measured them. The acceptance is the measured draft's: another
vocabulary's line holds it (a smaller one may accept less, a larger one more), and says so.

    .venv/bin/python bench/bench_cost_levers.py [--result cost_elsi_table3_f32] [--vocab 4096 8192 16384 32768]

Results: bench/results/cost_levers_<the record's name less cost_elsi_>.json and .md. Never run it beside another job: it times.
"""

from __future__ import annotations

import argparse
import os

import torch

from bench_cost import draft_costs, mean_costs, predict
from bench_decoding import plain, verification_ms
from elsi_lib.draft import corpus, cost
from elsi_lib.draft.model import Eagle3Draft
from elsi_lib.draft.runner import resolved_autocast
from elsi_lib.inputs.chat import tokenize_conversation
from elsi_lib.inputs.models import load_model
from record import read, write


def best_chain(measured: dict, costs: dict, forward: dict, plain_s: float) -> tuple[int, float]:
    """(k, predicted speed-up) of the best chain with these costs (bench_cost's `predict`) and the
    record's per-step acceptance."""
    s = measured["settings"]
    rates = s["per-step acceptance"]
    best = (0, 0.0)
    for k in range(1, len(rates) + 1):
        tokens = cost.tokens_per_round(rates[:k])
        _, speed, _ = predict(
            (k, k, 1), tokens, costs, forward, plain_s=plain_s, generated=s["generated"], prompts=s["questions"]
        )
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
    if isinstance(s["layers"], str):
        parser.error(f"{args.result}: the draft reads {s['layers']} (EAGLE2): its levers are not measured here")
    load_before = [round(x, 2) for x in os.getloadavg()]
    model, tokenizer = load_model(s["model"])
    if any(not 2 <= v <= model.config.vocab_size for v in args.vocab):
        parser.error(f"--vocab: each draft vocabulary in 2..{model.config.vocab_size} (the target's), got {args.vocab}")
    K = len(s["per-step acceptance"])
    shapes = [(k, k, 1) for k in range(1, K + 1)]
    questions = corpus.eval_questions(1, seed=0).head(s["questions"])
    prompts = [tokenize_conversation(tokenizer, c, add_generation_prompt=True)[0] for c in questions.conversation]
    autocast = resolved_autocast(None)
    layers = tuple(s["layers"])
    cores = torch.get_num_threads()

    def costs(vocab: int) -> dict:
        draft = Eagle3Draft.from_target(model, layers, vocab, seed=0).eval()
        return mean_costs([draft_costs(model, draft, p, shapes, args.repeat, autocast) for p in prompts])

    def row(lever: str, plain_s: float, plain_ms, forward: dict, c: dict, acceptance: str) -> dict:
        k, speed = best_chain(measured, c, forward, plain_s)
        out = {
            "lever": lever,
            "plain ms/token": plain_ms,
            "forward ms 1 / K+1 tokens": f"{forward[1]:.1f} / {forward[K + 1]:.1f}",
            "draft chain ms k=1 / K": f"{c['trees'][(1, 1, 1)]:.1f} / {c['trees'][(K, K, 1)]:.1f}",
            "prefill ms": round(c["prefill"], 1),
            "best k": k,
            "speed-up predicted": round(speed, 3),
            "acceptance": acceptance,
        }
        print(out, flush=True)
        return out

    out = []
    base_vocab = s["draft vocabulary"]
    for threads in sorted({1, cores}):
        torch.set_num_threads(threads)
        plain(model, prompts[:1], 4)
        reference, plain_s = plain(model, prompts, s["tokens"])
        forward = verification_ms(model, prompts[0], range(1, K + 2), args.repeat)
        ms = round(1000 * plain_s / sum(map(len, reference)), 1)
        out.append(row(f"threads {threads}", plain_s, ms, forward, costs(base_vocab), "measured"))
        if threads == cores:
            base_plain_s, base_forward = plain_s, forward
    torch.set_num_threads(cores)
    for vocab in args.vocab:
        acceptance = "measured" if vocab == base_vocab else "held at the measured draft's"
        out.append(row(f"draft vocabulary {vocab}", base_plain_s, "", base_forward, costs(vocab), acceptance))
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
