"""`make test-engines`, step 1 (elsi's own environment): drafts for the engine check, exported, with
elsi's own numbers to compare against.

SmolLM2-135M: the ELSI m=3 and EAGLE3 layer sets from the calibration statistics (200 prompts, as
notebooks 05-06), one draft each, trained alike on the target's greedy replies to 240 training
prompts (notebook 06's own pipeline, `elsi_lib.study.experiments.experiment`, at a small scale: the check needs
real acceptance, not the best draft). Each draft is written in both layouts (`elsi_lib.draft.export`). On SpecBench
questions (`PER_COLUMN` per paper column, first turn) elsi's own loop (`elsi_lib.draft.decode`,
float32 draft on float32 features, as vLLM runs it with dtype float32) decodes with chains of
k = 1..5 draft tokens: its tokens, accepted counts and rounds go to build/engines/plan.json, which
`engines/check_engines.py` reads in the engine's environment. Last, the reply step through vLLM
(`elsi_lib.hidden.engine_replies`) and through transformers write greedy replies to the same 64
training prompts, and plan.json records how many agree token for token.

With --drafts strong (`make test-engines-strong`) the drafts are instead notebook 07's strong drafts,
read from its finished checkpoint (`make tables-strong`; refused before it has finished): EAGLE3's
and the entropy-chosen set's with the highest AVG tau at 60 nodes, T = 0, in its committed table.
With --drafts qwen (`make test-engines`, once `make tables-qwen` has written Table 3), the second
family's ELSI m=3 draft from notebook 06's finished Table 3 checkpoint. Their files go to
build/engines-strong and build/engines-qwen; the reply check runs with the small drafts only.

    .venv/bin/python engines/prepare.py [--drafts small|qwen-small|strong|qwen [--skip-untrained]]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path


import torch

from elsi_lib.study.paper import captures
from elsi_lib.draft import corpus
from elsi_lib.draft.decode import speculative_generate
from elsi_lib.study.experiments.experiment import groups, train_group, trained_drafts
from elsi_lib.study.experiments.run_data import data_key, training_data
from elsi_lib.study.experiments.experiment_settings import Experiment, from_parameters
from elsi_lib.study.experiments.layer_choices import draft_methods, run_methods
from elsi_lib.study.experiments.tables import AVG
from elsi_lib.study.experiments.tau_files import read_tau_csv
from elsi_lib.draft.export import FORMATS, save_draft
from elsi_lib.draft.train import TrainSettings
from elsi_lib.hidden.engine_replies import engine_replies
from elsi_lib.hidden.replies import generate_responses
from elsi_lib.inputs.chat import tokenize_conversation
from elsi_lib.inputs.models import load_model, resolve_model_path
from elsi_lib.common.progress import progress_bar

MODEL = "smollm2-135m"
METHODS = ("elsi-m3", "eagle3")  # method ids
# notebook 06's pipeline at a small scale: 240 training prompts (all trained on, none held out), 3 epochs
EXPERIMENT = Experiment(
    model=MODEL,
    n_train=240,
    n_heldout=0,
    draft_vocab=8192,
    seeds=(0,),
    reseeded=(),
    lever_lm_head=False,
    temperatures=(0.0,),
    train=TrainSettings(epochs=3.0),
)
# the second family's check (`make test-engines-qwen`): its ELSI m=3 draft on the first 240 of the 1,000 replies
# vLLM wrote for Table 3 (archived in data/replies/), one epoch (this target's features and draft cost about
# three times SmolLM2's), the draft in float32: on a CPU without bf16 matmul instructions (AVX2 only) bf16
# autocast runs a draft's matmuls 31 to 110 times slower (bench/bench_bf16.py)
QWEN_EXPERIMENT = Experiment(
    model="qwen2.5-coder-0.5b",
    n_train=240,
    n_heldout=0,
    reply_engine="vllm",
    reply_request=1000,
    draft_vocab=8192,
    seeds=(0,),
    reseeded=(),
    lever_lm_head=False,
    temperatures=(0.0,),
    train=TrainSettings(epochs=1.0, autocast_bf16=False),
)
PER_COLUMN = 2  # SpecBench questions per paper column
CHAINS = (1, 2, 3, 4, 5)
# EAGLE-2 trees (depth, top_k, nodes): elsi's own tables' (depth 6, top-10, 30 nodes) and a smaller one
TREES = ((6, 10, 30), (4, 4, 12))


def tree_name(tree) -> str:
    """A tree's key in plan.json: "tree depth D, top-K, N nodes"."""
    return "tree depth {}, top-{}, {} nodes".format(*tree)


OUT = Path("build/engines")
# drafts trained here: (experiment, method ids, output folder, questions per column, chains); the Qwen target's
# loop costs about a minute per question and chain on 2 cores, so its check is one question per column, k = 1, 3, 5
SMALL = {
    "small": (EXPERIMENT, METHODS, OUT, PER_COLUMN, CHAINS),
    "qwen-small": (QWEN_EXPERIMENT, ("elsi-m3",), Path("build/engines-qwen"), 1, (1, 3, 5)),
}
MAX_TOKENS = 64  # generated tokens per question
REPLY_SAMPLE = 64  # training prompts whose greedy replies vLLM and transformers both write (128 tokens)
# finished runs whose drafts the engines serve: (parameter file, its accepted-token table, output folder,
# the method ids served: "best elsi" is the entropy-chosen set with the highest AVG tau, 60 nodes, T = 0)
FINISHED = {
    "strong": (
        "notebooks/tables_strong.yaml",
        "data/results/table2_strong_accepted_tokens_smollm2-135m.csv",
        "build/engines-strong",
        ("eagle3", "best elsi"),
    ),
    "qwen": (
        "notebooks/tables_qwen.yaml",
        "data/results/table3_accepted_tokens_qwen2.5-coder-0.5b.csv",
        "build/engines-qwen",
        ("elsi-m3",),
    ),
}


def small_drafts(exp: Experiment, ids, model, tokenizer, methods) -> dict:
    """The engine check's drafts on the method `ids`, trained here (notebook 06's pipeline at a small scale)."""
    methods = methods[methods["id"].isin(ids)]
    data = training_data(exp, methods, model, tokenizer)
    group = groups(exp, methods)[0]
    drafts, out = train_group(exp, model, data_key(exp, model, tokenizer), data, group)
    if out["done"] < out["total"]:
        raise RuntimeError(f"training stopped at batch {out['done']} of {out['total']}")
    return drafts


def finished_drafts(name: str, model, tokenizer) -> tuple[dict, object]:
    """The drafts FINISHED[name] serves, from the run's finished checkpoint, and its methods."""
    parameters, table, _, served = FINISHED[name]
    exp, methods = run_methods(Path(parameters), loaded=(model, tokenizer))
    cells = read_tau_csv(Path(table))
    cells = cells[(cells.column == AVG) & (cells.temperature == 0) & (cells.nodes == 60)].set_index("method").tau
    ids = dict(zip(methods.method, methods["id"]))
    if "best elsi" in served:
        best = max((label for label in cells.index if ids.get(label, "").startswith("elsi")), key=cells.get)
        served = tuple(ids[best] if s == "best elsi" else s for s in served)
    drafts = trained_drafts(exp, methods, loaded=(model, tokenizer))
    labels = methods.set_index("id").method
    print(f"{name} drafts: " + ", ".join(f"{labels[m]} (AVG tau {cells[labels[m]]:.3f})" for m in served))
    return {m: drafts[m] for m in served}, methods


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--drafts",
        choices=[*SMALL, *FINISHED],
        default="small",
        help="the small check's drafts (trained here: SmolLM2's, or qwen-small), or a finished run's",
    )
    parser.add_argument(
        "--skip-untrained",
        action="store_true",
        help="a finished run's drafts: when its checkpoint is not here, say so and write no plan",
    )
    parser.add_argument(
        "--formats",
        default="speculators,eagle",
        help="the export layouts to write, comma-separated (elsi_lib.draft.export.FORMATS; openvino: "
        "`make test-openvino`, which writes no reply check)",
    )
    parser.add_argument("--out", type=Path, default=None, help="the folder for the drafts and plan.json")
    parser.add_argument(
        "--epochs",
        type=float,
        default=None,
        help="the small drafts' training epochs (default: the experiment's); fewer train faster, accept less",
    )
    args = parser.parse_args()
    formats = [f for f in args.formats.split(",") if f]
    unknown = sorted(set(formats) - set(FORMATS))
    if unknown or not formats:
        parser.error(f"--formats: unknown layouts {unknown}; use some of {FORMATS}")
    torch.manual_seed(0)
    per_column, chains = PER_COLUMN, CHAINS
    if args.drafts in SMALL:
        exp, ids, out_dir, per_column, chains = SMALL[args.drafts]
        if args.epochs is not None:
            exp = dataclasses.replace(exp, train=dataclasses.replace(exp.train, epochs=args.epochs))
        target = exp.model
    else:
        target, out_dir = from_parameters(Path(FINISHED[args.drafts][0]))[0].model, Path(FINISHED[args.drafts][2])
    out_dir = args.out or out_dir
    (out_dir / "plan.json").unlink(missing_ok=True)  # no stale plan for check_engines.py to read
    model, tokenizer = load_model(target)
    if args.drafts in SMALL:
        methods = draft_methods(captures.paper_stats([target], 200, seed=0)[target])
        drafts = small_drafts(exp, ids, model, tokenizer, methods)
    else:
        try:
            drafts, methods = finished_drafts(args.drafts, model, tokenizer)
        except RuntimeError as error:  # trained_drafts: no finished checkpoint of that run here
            if not args.skip_untrained:
                raise
            print(
                f"skipped: {args.drafts} drafts not trained here ({error}); run its notebook first (or "
                "--drafts qwen-small: make test-engines-qwen)"
            )
            return

    questions = corpus.eval_questions(per_column, seed=0)
    prompts = [tokenize_conversation(tokenizer, c, add_generation_prompt=True)[0] for c in questions.conversation]
    plan = {
        "target": resolve_model_path(target)[0],
        "max_tokens": MAX_TOKENS,
        "chains": list(chains),
        "trees": [list(t) for t in TREES] if "openvino" in formats else [],
        "questions": questions.question_id.tolist(),
        "prompts": prompts,
        "drafts": {},
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    for method, draft in drafts.items():
        folders = {
            fmt: str(
                save_draft(
                    draft, out_dir / f"{method}-{fmt}", target=model, format=fmt, verifier=plan["target"]
                ).resolve()
            )
            for fmt in formats
        }
        runs = {}
        # chains of k (nodes = depth = k, top-1) for every engine; with the openvino layout also EAGLE-2 trees
        # (depth, top_k, nodes), which OpenVINO GenAI builds alike (tree_depth, branching_factor, num_assistant_tokens)
        shapes = [(str(k), (k, k, 1)) for k in chains]
        shapes += [(tree_name(t), t) for t in (TREES if "openvino" in formats else ())]
        bar = progress_bar(total=len(shapes) * len(prompts), desc=f"elsi loop, {method}", unit="question")
        for name, (depth, top_k, nodes) in shapes:
            decoded = []
            for prompt in prompts:
                decoded.append(
                    speculative_generate(
                        model,
                        draft,
                        prompt,
                        max_new_tokens=MAX_TOKENS,
                        nodes=nodes,
                        depth=depth,
                        top_k=top_k,
                        autocast=False,
                        round_features=False,
                    )
                )
                bar.update(1)
            # vLLM counts a round's accepted tokens before it cuts at the end-of-sequence token or the length
            # limit: compare with elsi's counts before those cuts too
            runs[name] = {
                "tokens": [d.tokens for d in decoded],
                "accepted": sum(sum(d.accepted_full) for d in decoded),
                "rounds": sum(len(d.accepted) for d in decoded),
            }
        bar.close()
        label = methods.set_index("id").method[method]
        plan["drafts"][method] = {
            "label": label,
            "layers_elsi": list(draft.config.layer_ids),
            "folders": folders,
            "elsi": runs,
        }
    # vLLM's replies against transformers': with the vLLM layouts of the small drafts only
    vllm = args.drafts == "small" and "speculators" in formats
    plan["reply_check"] = reply_check(model, tokenizer) if vllm else None
    (out_dir / "plan.json").write_text(json.dumps(plan, indent=1))
    for method, entry in plan["drafts"].items():
        print(
            method,
            entry["layers_elsi"],
            {k: round(1 + r["accepted"] / r["rounds"], 3) for k, r in entry["elsi"].items()},
        )


def reply_check(model, tokenizer) -> dict:
    """vLLM's greedy replies (elsi's reply step through the engine) against transformers' on the same
    prompts: how many are token for token equal, and where the others first part (float32 near-ties)."""
    prompts = corpus.training_prompt_list(REPLY_SAMPLE)
    _, hf = generate_responses(model, tokenizer, prompts, max_new_tokens=128, batch_size=16, with_ids=True)
    _, vllm, _ = engine_replies(model, tokenizer, prompts, max_new_tokens=128)
    parted = [
        next((j for j, (a, b) in enumerate(zip(x, y)) if a != b), min(len(x), len(y)))
        for x, y in zip(hf, vllm)
        if x != y
    ]
    print(
        f"replies: vLLM equals transformers on {len(prompts) - len(parted)} of {len(prompts)} prompts; the others "
        f"part at tokens {parted}"
    )
    return {"prompts": len(prompts), "equal": len(prompts) - len(parted), "parted_at": parted}


if __name__ == "__main__":
    main()
