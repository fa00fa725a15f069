"""The cost model of speculative decoding (`elsi_lib.draft.cost`) measured on this CPU for elsi's own
loop (`elsi_lib.draft.decode`), batch 1, on the same SpecBench questions (first turn), in one run:

1. costs, each timed alone (medians of --repeat, averaged over the questions): plain greedy decoding
   (transformers `generate`, KV cache; its decode step is its time less the target's prefills); the
   target's forward over 2..K+1 new tokens after each cached prompt (each size alone: GEMM shapes
   differ) and over each tree's nodes + 1; the
   draft's tree or chain, its update rows over the accepted tokens, and the rest of a round (the
   target's argmax walk down the tree, pruning its KV cache); each question's prefill (target and draft);
2. acceptance: the conditional per-step rates a_1..a_K of the longest chain's rounds (before the
   end-of-sequence and length cuts);
3. predicted, from 1 and 2 alone: each chain's tokens per round (1 + sum prod a_j, the long chain's
   rates truncated to k), its round's seconds, the generation's seconds and the speed-up over plain;
   trees take their own run's tau (their acceptance is not a chain's) and are predicted in time only;
4. measured: every shape's generation end to end (checked token-identical to plain greedy), its tau
   (before the cuts, as the rates) and rounds, and its speed-up; the prediction's error; the ceiling
   (perfect acceptance) and the break-even tau. The longest chain's tau is in sample (the rates are
   its own); its time, and every other chain's, is predicted from costs timed alone.

    .venv/bin/python bench/bench_cost.py --ledger table3_f32 --method elsi-m3 --out cost_elsi_qwen
    .venv/bin/python bench/bench_cost.py --params notebooks/tables_strong.yaml --method eagle3 --out cost_elsi_smollm2

Results: bench/results/<--out>.json and .md (machine, date, load, settings, costs, one row per shape).
Never run it beside another job: it times.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
from pathlib import Path
import statistics
import time

import torch

from bench_decoding import plain, verification_ms
from elsi_lib.draft import corpus, cost
from elsi_lib.draft.decode import accept_greedy, keep_cache, speculative_generate, target_forward
from elsi_lib.draft.export import load_draft, save_draft
from elsi_lib.draft.linears import weight_first_linears
from elsi_lib.draft.runner import draft_rows, resolved_autocast, root_step_fn
from elsi_lib.draft.tree import build_trees, check_tree_args
from elsi_lib.inputs.chat import tokenize_conversation
from elsi_lib.inputs.models import load_model, resolve_model_path
from elsi_lib.study.experiments.experiment import trained_drafts
from elsi_lib.study.experiments.layer_choices import run_methods
from elsi_lib.study.ledger.prepared import unit_draft
from elsi_lib.study.ledger.protocols import protocol
from record import read, write
from timing import median_ms, sync

WARM_UP_TOKENS = 8  # each shape's untimed warm-up before its end-to-end run
TREES = [(30, 6, 10), (60, 6, 10)]  # (nodes, depth, top_k): the paper's two trees


@torch.no_grad()
def draft_costs(model, draft, prompt, shapes, repeat: int, autocast: bool) -> dict:
    """Milliseconds after `prompt`, each timed alone: "trees" {(nodes, depth, top_k): the draft's tree},
    "rows" {n: the draft's update over n accepted rows} (1..max depth + 1), "other" {shape: the rest of a
    round: the target's argmax walk down the tree and pruning its KV cache}, "prefill" (target forward +
    draft rows) and "target prefill" (the target's alone, as plain decoding's)."""
    source, device = draft.config.source, next(model.parameters()).device
    ids = torch.tensor(prompt, device=device)
    first = int(target_forward(model, ids, source)[0][-1].argmax())
    target_prefill_ms = median_ms(lambda: target_forward(model, ids, source), repeat)

    def prefill():
        _, features, cache = target_forward(model, ids, source)
        next_ids = torch.cat([ids[1:], torch.tensor([first], device=device)])
        rows = draft_rows(draft, features, next_ids, 0, None, autocast=autocast)
        return features, cache, rows

    prefill_ms = median_ms(prefill, repeat)
    features, cache, (hidden, kv) = prefill()
    P = len(prompt)
    vocab = model.config.vocab_size
    out: dict = {"trees": {}, "rows": {}, "other": {}, "prefill": prefill_ms, "target prefill": target_prefill_ms}
    for nodes, depth, top_k in shapes:

        def tree():
            step_fn, state = root_step_fn(draft, hidden, kv, torch.tensor([P], device=device), autocast)
            return build_trees(step_fn, state, nodes=nodes, depth=depth, top_k=top_k, to_target=draft.to_target)

        out["trees"][(nodes, depth, top_k)] = median_ms(tree, repeat)
        drafted = tree()[0]
        logits = torch.randn(nodes + 1, vocab, generator=torch.Generator().manual_seed(nodes)).to(device)  # (n + 1, V)

        def rest():
            accept_greedy(logits, drafted)
            keep_cache(cache, torch.arange(P, device=device))  # the prompt's P entries: an index_select of every layer

        out["other"][(nodes, depth, top_k)] = median_ms(rest, repeat)
    for n in range(1, max(d for _, d, _ in shapes) + 2):
        tokens = torch.tensor(prompt[-n:], device=device)
        out["rows"][n] = median_ms(lambda: draft_rows(draft, features[-n:], tokens, P, kv, autocast=autocast), repeat)
    return out


def plain_and_forwards(model, prompts, sizes, args) -> tuple[list, float, dict]:
    """Plain greedy decoding of `prompts` (after a warm-up): its tokens and seconds; and the target's
    forward over n new tokens for each n in `sizes`, ms averaged over the prompts. Each size alone: GEMM
    shapes differ (3 tokens may cost more than 4), which a line would hide."""
    plain(model, prompts[:1], 4)  # warm-up
    tokens, seconds = plain(model, prompts, args.tokens)
    per_prompt = [verification_ms(model, p, sizes, args.repeat) for p in prompts]
    return tokens, seconds, {n: statistics.mean(v[n] for v in per_prompt) for n in sizes}


def mean_costs(per_prompt: list[dict]) -> dict:
    """The prompts' costs averaged, key by key."""
    out: dict = {}
    for name in ("trees", "rows", "other"):
        out[name] = {k: statistics.mean(c[name][k] for c in per_prompt) for k in per_prompt[0][name]}
    for name in ("prefill", "target prefill"):
        out[name] = statistics.mean(c[name] for c in per_prompt)
    return out


def predict(shape, tokens: float, costs: dict, verify: dict, *, plain_s: float, generated: int, prompts: int):
    """(round seconds, predicted speed-up, ceiling speed-up) of `shape` at `tokens` per round: a round is
    the draft's tree, the target's forward over nodes + 1 tokens, the draft's update over the accepted
    rows (`tokens`, rounded) and the rest; each question adds its prefill (`elsi_lib.draft.cost`)."""
    nodes, depth, _ = shape

    def round_s(t):
        update = costs["rows"][min(max(1, round(t)), max(costs["rows"]))]
        return cost.round_seconds(
            costs["trees"][shape] / 1000, verify[nodes + 1] / 1000, (update + costs["other"][shape]) / 1000
        )

    prefill = costs["prefill"] / 1000
    spent = cost.generation_seconds(generated, prompts, tokens, round_s(tokens), prefill)
    best = cost.generation_seconds(generated, prompts, depth + 1, round_s(depth + 1), prefill)
    return round_s(tokens), plain_s / spent, plain_s / best


# a row's columns in the order of the committed records (cost_elsi_*.json)
COLUMNS = (
    "shape",
    "k or nodes",
    "depth",
    "top-k",
    "tau measured",
    "tau predicted",
    "rounds measured",
    "rounds predicted",
    "round ms predicted",
    "round ms measured",
    "break-even tau",
    "speed-up measured",
    "speed-up predicted",
    "error",
    "ceiling",
    "lossless",
)


def predicted_columns(shape, tokens, measured, costs, verify, plain_s, plain_ms, generated, prompts) -> dict:
    """A row's predicted columns: round, break-even tau, speed-up, its error against `measured`, ceiling."""
    round_s, speed, ceiling = predict(
        shape, tokens, costs, verify, plain_s=plain_s, generated=generated, prompts=prompts
    )
    return {
        "round ms predicted": round(1000 * round_s, 1),
        "break-even tau": round(cost.break_even(round_s, plain_ms / 1000), 2),
        "speed-up predicted": round(speed, 3),
        "error": round(speed / measured - 1, 3),
        "ceiling": round(ceiling, 3),
    }


def reanalyse(name: str) -> None:
    """Recompute a record's predicted columns from its own measured costs (the record keeps its machine,
    date and measurements; a note says when and why): for a change of the model, never of a measurement."""
    record = read(name)
    s = {k: v for k, v in record["settings"].items() if not k.startswith("target forward ms used")}  # a fit, dropped
    shape_of = {tuple(map(int, key.split("x"))): key for key in s["draft ms by shape"]}
    costs = {
        "trees": {shape: s["draft ms by shape"][key] for shape, key in shape_of.items()},
        "other": {shape: s["rest of a round ms by shape"][key] for shape, key in shape_of.items()},
        "rows": {int(n): ms for n, ms in s["draft update ms by rows"].items()},
        "prefill": s["prefill ms"] / s["questions"],
    }
    verify = {int(n): ms for n, ms in s["target forward ms by tokens"].items()}
    rows = []
    for row in record["rows"]:
        shape = (row["k or nodes"], row["depth"], row["top-k"])
        rows.append(
            {
                **row,
                **predicted_columns(
                    shape,
                    row["tau predicted"],
                    row["speed-up measured"],
                    costs,
                    verify,
                    s["plain s"],
                    s["plain decode step ms"],
                    s["generated"],
                    s["questions"],
                ),
            }
        )
    note = (
        f"predicted columns recomputed {datetime.date.today()} from this record's measured costs "
        "(bench_cost.py --reanalyse): the target's forward by each size alone"
    )
    notes = "; ".join(dict.fromkeys(n for n in [*(record.get("notes") or "").split("; "), note] if n))
    write(name, s, rows, load_before=record["machine"]["load_1_5_15"], notes=notes, machine_info=record["machine"])
    for row in rows:
        print(row)


def measure(model, draft, prompts, shapes, args, autocast: bool, *, strict: bool = True):
    """The cost model's measurement of `draft` on `prompts` (module docstring, 1-4): returns the
    measured settings (costs, plain rate, per-step acceptance), one row per shape (COLUMNS), the
    costs and plain decoding's tokens. `strict`: a shape that is not token-identical to plain greedy
    decoding stops the run (else its row says lossless False: float kernels on an accelerator may
    break an argmax tie differently for a forward over more tokens)."""
    sizes = sorted({n + 1 for n, _, _ in shapes})
    # 1. costs, each alone
    reference, plain_seconds, verify = plain_and_forwards(model, prompts, sizes, args)
    generated = sum(map(len, reference))
    costs = mean_costs([draft_costs(model, draft, p, shapes, args.repeat, autocast) for p in prompts])
    # plain decoding's step: its time less the target's prefills (each yields a question's first token)
    plain_ms = (1000 * plain_seconds - len(prompts) * costs["target prefill"]) / (generated - len(prompts))
    if plain_ms <= 0:
        raise SystemExit(
            f"plain decoding's step came out at {plain_ms:.2f} ms (its {1000 * plain_seconds:.1f} ms less "
            f"{len(prompts)} prefills of {costs['target prefill']:.1f} ms timed alone): too few tokens for this "
            "machine's noise; raise --tokens, or run on a quiet machine"
        )
    print(
        f"plain: {generated / plain_seconds:.2f} tok/s, decode step {plain_ms:.1f} ms; prefill {costs['prefill']:.0f} ms"
    )
    print("target forward ms by new tokens:", ", ".join(f"{n}: {ms:.1f}" for n, ms in verify.items()))
    print("draft ms per round (chain or tree):", ", ".join(f"{s}: {ms:.1f}" for s, ms in costs["trees"].items()))
    print("draft update ms by rows:", ", ".join(f"{n}: {ms:.1f}" for n, ms in costs["rows"].items()))
    print("the rest of a round, ms:", ", ".join(f"{s}: {ms:.1f}" for s, ms in costs["other"].items()), flush=True)

    # 4. measured, end to end (2. and 3. need the longest chain's rounds first)
    measured, lossless = {}, {}
    for nodes, depth, top_k in shapes:
        # a few tokens of this shape first, untimed: its first rounds pay one-off costs (kernels chosen for
        # new shapes; on the H200 under bf16, before this warm-up, the first chain and the first tree took
        # about twice what their parts cost alone: cost_device_cuda_*bf16)
        tree_args = {"nodes": nodes, "depth": depth, "top_k": top_k, "autocast": autocast}
        speculative_generate(model, draft, prompts[0], max_new_tokens=WARM_UP_TOKENS, **tree_args)
        runs = []
        sync()
        start = time.perf_counter()
        for p in prompts:
            runs.append(speculative_generate(model, draft, p, max_new_tokens=args.tokens, **tree_args))
        seconds = time.perf_counter() - start
        lossless[(nodes, depth, top_k)] = all(r.tokens == ref for r, ref in zip(runs, reference))
        if strict and not lossless[(nodes, depth, top_k)]:
            raise SystemExit(f"shape {(nodes, depth, top_k)}: not token-identical to plain greedy decoding")
        measured[(nodes, depth, top_k)] = (runs, seconds)
        print(f"measured {(nodes, depth, top_k)}: {seconds:.1f} s", flush=True)

    longest = (args.chains, args.chains, 1)
    rates = cost.step_acceptance([a for r in measured[longest][0] for a in r.accepted_full], args.chains)
    print("per-step acceptance of the longest chain:", ", ".join(f"{a:.3f}" for a in rates))
    out_rows = []
    for shape in shapes:
        nodes, depth, top_k = shape
        runs, seconds = measured[shape]
        rounds = sum(len(r.accepted) for r in runs)
        # tau before the end-of-sequence and length cuts: the acceptance the rounds showed (the rates' own)
        tau = sum(a + 1 for r in runs for a in r.accepted_full) / rounds
        chain = top_k == 1 and nodes == depth
        tokens = cost.tokens_per_round(rates[:depth]) if chain else tau
        row = {
            "shape": "chain" if chain else "tree",
            "k or nodes": nodes,
            "depth": depth,
            "top-k": top_k,
            "tau measured": round(tau, 3),
            "tau predicted": round(tokens, 3),
            "rounds measured": rounds,
            "rounds predicted": round((generated - len(prompts)) / tokens, 1),
            "round ms measured": round(1000 * sum(r.draft_s + r.verify_s for r in runs) / rounds, 1),
            "speed-up measured": round(plain_seconds / seconds, 3),
            **predicted_columns(
                shape, tokens, plain_seconds / seconds, costs, verify, plain_seconds, plain_ms, generated, len(prompts)
            ),
            "lossless": lossless[shape],
        }
        assert set(row) == set(COLUMNS), sorted(set(row) ^ set(COLUMNS))
        row = {column: row[column] for column in COLUMNS}
        out_rows.append(row)
        print(row, flush=True)
    settings = {
        "generated": generated,
        "repeat": args.repeat,
        "batch": 1,
        "threads": torch.get_num_threads(),
        "plain s": round(plain_seconds, 3),
        "plain tok/s": round(generated / plain_seconds, 2),
        "plain decode step ms": round(plain_ms, 2),
        "prefill ms": round(len(prompts) * costs["prefill"], 1),
        "target forward ms by tokens": {str(n): round(ms, 2) for n, ms in verify.items()},
        "draft ms by shape": {"x".join(map(str, s)): round(ms, 2) for s, ms in costs["trees"].items()},
        "draft update ms by rows": {str(n): round(ms, 2) for n, ms in costs["rows"].items()},
        "rest of a round ms by shape": {"x".join(map(str, s)): round(ms, 2) for s, ms in costs["other"].items()},
        "per-step acceptance": [round(a, 4) for a in rates],
    }
    return settings, out_rows, costs, reference


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--ledger", help="a ledger protocol whose finished unit is the draft (make ledger-PROTOCOL; default table3_f32)"
    )
    source.add_argument("--params", help="a notebook parameter file whose finished run trained the draft")
    parser.add_argument("--method", default="elsi-m3", help="the draft's method id in that ledger or run")
    parser.add_argument("--seed", type=int, default=0, help="the ledger unit's seed")
    parser.add_argument("--draft", help="an exported draft folder instead (refused if exported for another target)")
    parser.add_argument("--chains", type=int, default=5, help="chains of k = 1..CHAINS draft tokens")
    parser.add_argument(
        "--questions", type=int, help="the first QUESTIONS of the set (default: all; refused beyond its size)"
    )
    parser.add_argument(
        "--category",
        help="SpecBench's questions of this category (e.g. coding: MT-bench's ten, a coding set no draft "
        "trained on) instead of one per column",
    )
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", help="results name under bench/results (default cost_elsi_<ledger or params stem>)")
    parser.add_argument(
        "--export",
        help="also export the draft (speculators layout) and the questions to this folder, for "
        "engines/cost_vllm.py (the same measurement in vLLM)",
    )
    parser.add_argument(
        "--export-only",
        action="store_true",
        help="with --export: export without measuring, elsi's tau per chain taken from the committed result "
        "--out names (refused unless it measured this draft on these questions)",
    )
    parser.add_argument(
        "--weight-first",
        type=int,
        default=0,
        metavar="ROWS",
        help="the target's and the draft's linears over at most ROWS rows computed weight first "
        "(elsi_lib.draft.linears; 0: off), plain decoding included",
    )
    parser.add_argument(
        "--reanalyse", metavar="NAME", help="recompute a record's predictions from its costs, then stop"
    )
    args = parser.parse_args()
    if args.reanalyse:
        return reanalyse(args.reanalyse)
    if not args.params:
        args.ledger = args.ledger or "table3_f32"
    for name in ("chains", "questions", "tokens", "repeat"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.export_only and not args.export:
        parser.error("--export-only needs --export FOLDER")
    if args.weight_first < 0:
        parser.error(f"--weight-first must be >= 0 rows, got {args.weight_first}")
    for k in range(1, args.chains + 1):
        check_tree_args(k, k, 1)
    if args.category is not None and args.category not in corpus.CATEGORIES:  # before any model loads
        parser.error(f"unknown SpecBench category {args.category!r}; the categories are {', '.join(corpus.CATEGORIES)}")
    questions = corpus.category_questions(args.category) if args.category else corpus.eval_questions(1, seed=0)
    question_set = f"SpecBench {args.category}" if args.category else corpus.ONE_PER_COLUMN
    if args.questions is not None and args.questions > len(questions):
        parser.error(f"--questions {args.questions}: {question_set} holds {len(questions)}")
    if args.questions is not None and args.questions < len(questions):
        print(f"the first {args.questions} of the {len(questions)} questions of {question_set}")
        questions = questions.head(args.questions)
    load_before = [round(x, 2) for x in os.getloadavg()]
    torch.manual_seed(0)
    if args.ledger:
        proto = protocol(args.ledger)
        family, origin = proto.family, f"ledger {args.ledger}"
        model, tokenizer = load_model(family)
        if not args.draft:
            _, _, draft = unit_draft(proto, args.method, args.seed, loaded=(model, tokenizer))
    else:
        exp, methods = run_methods(args.params)
        family, origin = exp.model, args.params
        model, tokenizer = load_model(family)
        if not args.draft:
            draft = trained_drafts(exp, methods, loaded=(model, tokenizer))[args.method]
    if args.draft:  # load_draft refuses a draft exported for another target
        draft, name = load_draft(args.draft, model), args.draft
    else:
        name = f"{args.method} seed {args.seed}" if args.ledger else args.method
    draft.config.check_target(model)
    args.out = args.out or f"cost_elsi_{args.ledger or Path(args.params).stem}" + (
        "_weight_first" if args.weight_first else ""
    ) + (f"_{args.category}" if args.category else "")
    autocast = resolved_autocast(None)
    shapes = [(k, k, 1) for k in range(1, args.chains + 1)] + TREES
    prompts = [tokenize_conversation(tokenizer, c, add_generation_prompt=True)[0] for c in questions.conversation]
    print(
        f"{family}, draft {name} (layers {draft.config.source}), {len(prompts)} questions ({question_set}), "
        f"up to {args.tokens} tokens, batch 1, {torch.get_num_threads()} threads, draft autocast {autocast}",
        flush=True,
    )

    if args.export_only:
        rows = committed_rows(args.out, family, name, question_set, len(prompts), args.tokens)
        return export(args.export, draft, model, family, name, prompts, args, rows, question_set)
    sizes = sorted({n + 1 for n, _, _ in shapes})
    usual = {}  # with --weight-first: plain decoding and the verification forwards first with F.linear, in this run
    if args.weight_first:
        usual["tokens"], usual["plain s"], usual["forward"] = plain_and_forwards(model, prompts, sizes, args)
    linears = contextlib.ExitStack()  # every timing below, plain decoding's too, under the same linears
    if args.weight_first:
        linears.enter_context(weight_first_linears(model, args.weight_first))
        linears.enter_context(weight_first_linears(draft, args.weight_first))

    # 1.-4., under those linears
    measured, out_rows, costs, reference = measure(model, draft, prompts, shapes, args, autocast)
    settings = {
        "engine": f"elsi, linears weight first up to {args.weight_first} rows" if args.weight_first else "elsi",
        "model": family,
        "draft": name,
        "from": origin,
        "layers": draft.config.source if isinstance(draft.config.source, str) else list(draft.config.source),
        "draft vocabulary": draft.config.draft_vocab_size,
        "draft autocast": autocast,
        "questions": len(prompts),
        "question set": question_set,
        "tokens": args.tokens,
        **measured,
    }
    if usual:  # the same costs with F.linear, measured first in this run (prefills take F.linear either way)
        n_usual = sum(map(len, usual["tokens"]))
        usual_ms = (1000 * usual["plain s"] - len(prompts) * costs["target prefill"]) / (n_usual - len(prompts))
        settings["with F.linear"] = {
            "plain tok/s": round(n_usual / usual["plain s"], 2),
            "plain decode step ms": round(usual_ms, 2),
            "target forward ms by tokens": {str(n): round(ms, 2) for n, ms in usual["forward"].items()},
            "plain decoding's tokens the same as weight first": usual["tokens"] == reference,
        }
    write(args.out, settings, out_rows, load_before=load_before)
    linears.close()
    if args.export:
        export(args.export, draft, model, family, name, prompts, args, out_rows, question_set)


def committed_rows(out: str, family: str, name: str, question_set: str, questions: int, tokens: int) -> list:
    """The rows of the committed result `out` (bench/results), refused unless it measured this draft of
    this family on these questions at this length: what --export-only takes elsi's tau from."""
    try:
        result = read(out)
    except FileNotFoundError:
        raise SystemExit(f"--export-only: no committed result {out!r} to take elsi's tau from; measure first") from None
    s = result["settings"]
    want = {"model": family, "draft": name, "question set": question_set, "questions": questions, "tokens": tokens}
    measured = {**s, "question set": s.get("question set", corpus.ONE_PER_COLUMN)}  # results before the field
    wrong = {key: measured.get(key) for key, value in want.items() if measured.get(key) != value}
    if wrong:
        raise SystemExit(f"--export-only: {out} measured {wrong}, not { ({k: want[k] for k in wrong}) }")
    return result["rows"]


def export(folder, draft, model, family, name, prompts, args, rows, question_set: str) -> None:
    """The draft in the speculators layout and plan.json (target, questions, chains, elsi's tau)."""
    folder = Path(folder)
    save_draft(draft, folder / "draft", target=model, format="speculators", verifier=resolve_model_path(family)[0])
    plan = {
        "family": family,
        "target": resolve_model_path(family)[0],
        "draft": str(folder / "draft"),
        "draft name": name,
        "prompts": [list(map(int, p)) for p in prompts],
        "question set": question_set,
        "max_tokens": args.tokens,
        "chains": args.chains,
        "tau elsi by k": {str(r["k or nodes"]): r["tau measured"] for r in rows if r["shape"] == "chain"},
    }
    (folder / "plan.json").write_text(json.dumps(plan) + "\n")
    print(f"exported to {folder}: run engines/cost_vllm.py {folder / 'plan.json'} in the engines' environment")


if __name__ == "__main__":
    main()
