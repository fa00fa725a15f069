"""The cost model of speculative decoding (`elsi_lib.draft.cost`, bench_cost.py's measurement) on an
accelerator, with a tiny random target and draft: nothing to download, nothing trained, so it runs on
a bare machine with a CUDA build of torch. One run measures the draft in float32 and under bf16
autocast on that device (the target stays float32 both times), each with bench_cost's steps 1-4:
costs timed alone, the longest chain's per-step acceptance, the prediction, and every shape end to end.

A random draft is rarely accepted (tau near 1), so the speed-ups sit below 1: what the run checks is
the model's time terms on the device (does a round cost what its parts cost alone?), how a forward's
time grows with its tokens there, and what bf16 autocast buys a draft step. Nothing depends on it.

    python bench/bench_cost_device.py                     # cuda, both autocast settings
    .venv/bin/python bench/bench_cost_device.py --device cpu --layers 8 --hidden 64 --vocab 512 --repeat 2

Results: bench/results/<--out>_<float32|bf16>.json and .md (default cost_device_<device type>).
Never run it beside another job: it times.
"""

from __future__ import annotations

import argparse
import os
import types

import torch

from bench_cost import TREES, measure
from elsi_lib.draft.model import Eagle3Draft
from elsi_lib.draft.tree import check_tree_args
from elsi_lib.inputs.models import random_model
from elsi_lib.selection.conventions import eagle3_layers
from record import write


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="a torch device (default cuda)")
    parser.add_argument("--layers", type=int, default=12, help="the random target's decoder layers")
    parser.add_argument("--hidden", type=int, default=512, help="the random target's hidden size")
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=8192, help="the target's and the draft's vocabulary")
    parser.add_argument("--prompts", type=int, default=4, help="random prompts (the questions)")
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--tokens", type=int, default=64, help="new tokens per prompt")
    parser.add_argument("--chains", type=int, default=5, help="chains of k = 1..CHAINS draft tokens")
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--autocast", choices=("both", "on", "off"), default="both", help="the draft's bf16 autocast")
    parser.add_argument("--out", help="results name under bench/results (default cost_device_<device type>)")
    args = parser.parse_args()
    for name in ("layers", "hidden", "heads", "vocab", "prompts", "prompt_tokens", "tokens", "chains", "repeat"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.layers < 8:
        parser.error(f"--layers must be >= 8 (EAGLE3's rule, 2, N//2, N-3, repeats a layer below), got {args.layers}")
    if args.hidden % args.heads:
        parser.error(f"--hidden ({args.hidden}) must be a multiple of --heads ({args.heads})")
    for k in range(1, args.chains + 1):
        check_tree_args(k, k, 1)
    try:
        device = torch.device(args.device)
    except RuntimeError as error:
        parser.error(f"--device {args.device!r}: {error}")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"--device {args.device}: this torch ({torch.__version__}) sees no CUDA device")
    load_before = [round(x, 2) for x in os.getloadavg()]

    model = random_model(
        n_layers=args.layers, hidden_size=args.hidden, n_heads=args.heads, vocab_size=args.vocab, seed=0
    ).to(device)
    layers = eagle3_layers(args.layers)
    draft = Eagle3Draft.from_target(model, layers, args.vocab, seed=0).to(device).eval()
    draft.config.check_target(model)
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, args.vocab, (args.prompt_tokens,), generator=g).tolist() for _ in range(args.prompts)]
    shapes = [(k, k, 1) for k in range(1, args.chains + 1)] + TREES
    name = args.out or f"cost_device_{device.type}"
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(
        f"{where}, torch {torch.__version__}: random target {args.layers} layers x {args.hidden}, vocabulary "
        f"{args.vocab}; random draft on layers {list(layers)}; {len(prompts)} prompts of {args.prompt_tokens} tokens, "
        f"{args.tokens} new",
        flush=True,
    )
    modes = {"both": (False, True), "on": (True,), "off": (False,)}[args.autocast]
    measure_args = types.SimpleNamespace(tokens=args.tokens, repeat=args.repeat, chains=args.chains)
    for autocast in modes:
        print(f"-- draft autocast {'bf16' if autocast else 'off (float32)'}", flush=True)
        with torch.no_grad():
            measured, rows, _, _ = measure(model, draft, prompts, shapes, measure_args, autocast, strict=False)
        settings = {
            "engine": "elsi",
            "device": where,
            "torch": torch.__version__,
            "model": f"random llama, {args.layers} layers, hidden {args.hidden}, {args.heads} heads, "
            f"vocabulary {args.vocab}, float32",
            "draft": "random (seed 0)",
            "layers": list(layers),
            "draft vocabulary": args.vocab,
            "draft autocast": autocast,
            "questions": len(prompts),
            "prompt tokens": args.prompt_tokens,
            "tokens": args.tokens,
            **measured,
        }
        write(f"{name}_{'bf16' if autocast else 'float32'}", settings, rows, load_before=load_before)
        errors = [abs(r["error"]) for r in rows]
        print(f"prediction error: median {sorted(errors)[len(errors) // 2]:.3f}, max {max(errors):.3f}", flush=True)


if __name__ == "__main__":
    main()
