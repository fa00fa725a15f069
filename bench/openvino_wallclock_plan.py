"""`make bench-openvino-wallclock`, step 1 (elsi's environment): what bench/bench_openvino_wallclock.py
times in OpenVINO GenAI. A finished ledger unit's draft (`unit_draft`: read from its checkpoint, never
trained here) exported in the openvino layout, and two question sets tokenized with the chat template:

- mixed: PER_COLUMN SpecBench first turns from each of the paper's six columns (`corpus.eval_questions`,
  seed 0; every column holds 80 questions, so equal shares are SpecBench's proportions);
- coding: every SpecBench question of the coding category (`corpus.category_questions`; SpecBench holds
  ten, all of them here: a coding set of 40 does not exist in it).

    .venv/bin/python bench/openvino_wallclock_plan.py --ledger qwen_strong --method elsi-m3 --seed 0

Writes build/openvino-wallclock/<ledger>_<method>-seed<seed>/plan.json.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from elsi_lib.draft import corpus
from elsi_lib.draft.export import save_draft
from elsi_lib.inputs.chat import tokenize_conversation
from elsi_lib.inputs.models import resolve_model_path
from elsi_lib.study.ledger.prepared import unit_draft
from elsi_lib.study.ledger.protocols import protocol

OUT = Path("build/openvino-wallclock")
PER_COLUMN = 7  # 42 mixed questions
CHAINS = (1, 2)  # num_assistant_tokens: the chains the round costs (openvino_rounds_*) leave a chance of 1.3x


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ledger", required=True, help="a ledger protocol whose unit is finished")
    parser.add_argument("--method", required=True, help="the unit's method id (e.g. elsi-m3)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tokens", type=int, default=128, help="new tokens per question")
    parser.add_argument("--repeat", type=int, default=3, help="runs of every setting, interleaved")
    args = parser.parse_args()
    for name in ("tokens", "repeat"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    proto = protocol(args.ledger)
    model, tokenizer, draft = unit_draft(proto, args.method, args.seed)
    name = f"{args.ledger}_{args.method}-seed{args.seed}"
    folder = OUT / name
    path = resolve_model_path(proto.family)[0]
    exported = save_draft(draft, folder / "draft", target=model, format="openvino", verifier=path)
    sets = {"mixed": corpus.eval_questions(PER_COLUMN, seed=0), "coding": corpus.category_questions("coding")}
    plan = {
        "name": name,
        "family": proto.family,
        "draft": f"{args.ledger} {args.method} seed {args.seed}",
        "layers": list(draft.config.source),
        "target": path,
        "draft_folder": str(exported.resolve()),
        "max_tokens": args.tokens,
        "repeat": args.repeat,
        "chains": list(CHAINS),
        "question_sets": {
            kind: {
                "question_ids": [int(q) for q in frame.question_id],
                "columns": list(frame.column),
                "prompts": [
                    tokenize_conversation(tokenizer, c, add_generation_prompt=True)[0] for c in frame.conversation
                ],
            }
            for kind, frame in sets.items()
        },
    }
    (folder / "plan.json").write_text(json.dumps(plan))
    counts = ", ".join(f"{len(s['prompts'])} {k}" for k, s in plan["question_sets"].items())
    print(
        f"{plan['draft']} (layers {plan['layers']}) exported to {exported}; {counts} questions -> {folder / 'plan.json'}"
    )


if __name__ == "__main__":
    main()
