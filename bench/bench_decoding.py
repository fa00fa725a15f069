"""Wall clock of speculative decoding on this CPU against plain greedy decoding, in one run
on the same SpecBench questions (one per paper column unless --questions says fewer), batch 1:

- plain: transformers `generate`, greedy, KV cache: tokens/s;
- the target's verification forward by number of tokens (root + tree nodes) over a cached prompt:
  what a bigger tree costs;
- speculative decoding (`elsi_lib.draft.decode`) with a trained draft at chains of 1-5 and trees of
  8-60 nodes: tau, draft and verification milliseconds per round, tokens/s and the ratio to plain.
  Every shape must reproduce plain greedy's tokens (checked, not assumed).

The draft is one of notebook 06's (`--method`, read from `make tables`' finished checkpoints; the
default had the highest tau at 60 nodes, T = 0, in the committed tables, tied with EAGLE3), or an
exported folder (`--draft`, e.g. build/engines/elsi-m3-speculators from `make test-engines`).

    .venv/bin/python bench/bench_decoding.py [--method ID | --draft FOLDER] [--questions 6] [--tokens 64]
    .venv/bin/python bench/bench_decoding.py --params notebooks/tables_strong.yaml --method eagle3 \
        --out bench_decoding_strong      # notebook 07's strong EAGLE3 draft

Results: bench/results/<--out>.json and .md (default bench_decoding) (machine, date, load, settings, plain rate,
verification costs, one row per shape).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from elsi_lib.study.paper import captures
from elsi_lib.draft import corpus
from elsi_lib.draft.decode import speculative_generate, target_forward
from elsi_lib.study.experiments.experiment import trained_drafts
from elsi_lib.study.experiments.experiment_settings import Experiment
from elsi_lib.study.experiments.layer_choices import draft_methods, run_methods
from elsi_lib.draft.export import load_draft
from record import write
from timing import sync
from elsi_lib.inputs.chat import tokenize_conversation
from elsi_lib.inputs.models import load_model

SHAPES = [
    ("chain", 1, 1, 1),
    ("chain", 2, 2, 1),
    ("chain", 3, 3, 1),
    ("chain", 4, 4, 1),
    ("chain", 5, 5, 1),
    ("tree", 8, 4, 4),
    ("tree", 16, 5, 5),
    ("tree", 30, 6, 10),
    ("tree", 60, 6, 10),
]  # (kind, nodes, depth, top_k)


def plain(model, prompts, tokens):
    """Greedy decoding of each prompt by transformers `generate` (KV cache): the new tokens and seconds."""
    device = next(model.parameters()).device
    outputs = []
    sync()
    start = time.perf_counter()
    for p in prompts:
        ids = torch.tensor([p], device=device)
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=tokens)
        outputs.append(out[0, len(p) :].tolist())
    return outputs, time.perf_counter() - start


def verification_ms(model, prompt, sizes, repeat):
    """Median milliseconds of one target forward over n new tokens (a chain mask) after the prompt."""
    out, device = {}, next(model.parameters()).device
    for n in sizes:
        times = []
        for _ in range(repeat):
            _, _, cache = target_forward(model, torch.tensor(prompt, device=device), (0,))
            ids = torch.randint(0, model.config.vocab_size, (n,), generator=torch.Generator().manual_seed(n))
            ids = ids.to(device)
            allowed = torch.cat(
                [torch.ones(n, len(prompt), dtype=torch.bool), torch.ones(n, n, dtype=torch.bool).tril()], 1
            ).to(device)
            positions = len(prompt) + torch.arange(n, device=device)
            sync()
            start = time.perf_counter()
            target_forward(model, ids, (0,), cache=cache, positions=positions, allowed=allowed)
            sync()
            times.append(1000 * (time.perf_counter() - start))
        out[n] = statistics.median(times)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--method", default="elsi-m3-no-template", help="a draft of notebook 06 (its method id)")
    parser.add_argument(
        "--params",
        help="a notebook parameter file whose run trained the draft (default: notebook "
        "06's paper scale; notebooks/tables_strong.yaml: notebook 07's strong drafts)",
    )
    parser.add_argument("--draft", help="an exported draft folder (instead of --method)")
    parser.add_argument("--questions", type=int, default=6)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--out",
        default="bench_decoding",
        help="results name under bench/results (bench_decoding_strong for notebook 07's drafts)",
    )
    args = parser.parse_args()
    load_before = [round(x, 2) for x in os.getloadavg()]
    torch.manual_seed(0)
    if args.params:  # exactly the methods that run trained (its checkpoint is keyed by all of them)
        exp, methods = run_methods(args.params)
    else:
        exp, methods = (
            Experiment(),
            draft_methods(captures.paper_stats(["smollm2-135m"], 200, seed=0)["smollm2-135m"]),
        )
    model, tokenizer = load_model(exp.model)
    if args.draft:
        draft, name = load_draft(args.draft, model), args.draft
    else:
        draft, name = trained_drafts(exp, methods, loaded=(model, tokenizer))[args.method], args.method
    source = draft.config.source  # a layer tuple, or FINAL_NORM (EAGLE2)
    questions = corpus.eval_questions(1, seed=0).head(args.questions)
    prompts = [tokenize_conversation(tokenizer, c, add_generation_prompt=True)[0] for c in questions.conversation]
    print(
        f"{exp.model}, draft {name} (elsi layers {source}), {len(prompts)} SpecBench questions, "
        f"up to {args.tokens} tokens each, batch 1, {torch.get_num_threads()} threads"
    )

    plain(model, prompts[:1], 4)  # warm-up
    reference, seconds = plain(model, prompts, args.tokens)
    plain_rate = sum(map(len, reference)) / seconds
    print(
        f"\nplain greedy (transformers generate, KV cache): {plain_rate:.1f} tok/s "
        f"({1000 * seconds / sum(map(len, reference)):.1f} ms/token)"
    )

    costs = verification_ms(model, prompts[0], (1, 2, 3, 4, 6, 8, 16, 31, 61), args.repeat)
    print(
        "\ntarget verification forward, ms by tokens (root + nodes):",
        ", ".join(f"{n}: {ms:.0f}" for n, ms in costs.items()),
        f"(ratio 2 / 1 tokens: {costs[2] / costs[1]:.2f}, 61 / 1: {costs[61] / costs[1]:.2f})",
    )

    # break-even tau: the tau at which this shape's measured time per round equals plain decoding's time for
    # tau tokens (ms per round / plain ms per token); the speed ratio is tau / break-even tau
    print(
        "\n| shape | nodes | depth | top-k | tau | draft ms/round | verify ms/round | break-even tau | tok/s | "
        "vs plain | lossless |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    for kind, nodes, depth, top_k in SHAPES:
        runs, start = [], time.perf_counter()
        for p in prompts:
            runs.append(
                speculative_generate(model, draft, p, max_new_tokens=args.tokens, nodes=nodes, depth=depth, top_k=top_k)
            )
        seconds = time.perf_counter() - start
        rounds = max(1, sum(len(r.accepted) for r in runs))
        tau = sum(a + 1 for r in runs for a in r.accepted) / rounds
        rate = sum(len(r.tokens) for r in runs) / seconds
        lossless = all(r.tokens == ref for r, ref in zip(runs, reference))
        break_even = (seconds / rounds) * plain_rate
        print(
            f"| {kind} | {nodes} | {depth} | {top_k} | {tau:.2f} | {1000 * sum(r.draft_s for r in runs) / rounds:.0f} | "
            f"{1000 * sum(r.verify_s for r in runs) / rounds:.0f} | {break_even:.2f} | {rate:.1f} | "
            f"{rate / plain_rate:.2f} | {lossless} |",
            flush=True,
        )
        rows.append(
            {
                "shape": kind,
                "nodes": nodes,
                "depth": depth,
                "top-k": top_k,
                "tau": round(tau, 2),
                "draft ms/round": round(1000 * sum(r.draft_s for r in runs) / rounds),
                "verify ms/round": round(1000 * sum(r.verify_s for r in runs) / rounds),
                "break-even tau": round(break_even, 2),
                "tok/s": round(rate, 1),
                "vs plain": round(rate / plain_rate, 2),
                "lossless": lossless,
            }
        )
    settings = {
        "draft": name,
        "params": args.params,
        "layers_elsi": source if isinstance(source, str) else list(source),
        "questions": len(prompts),
        "tokens": args.tokens,
        "repeat": args.repeat,
        "batch": 1,
        "threads": torch.get_num_threads(),
        "plain tok/s": round(plain_rate, 1),
        "verify ms by tokens": {str(n): round(ms) for n, ms in costs.items()},
    }
    write(args.out, settings, rows, load_before=load_before)


if __name__ == "__main__":
    main()
