"""`make bench-openvino-rounds`, step 1 (elsi's environment): what bench/bench_openvino_rounds.py times in
OpenVINO GenAI. For each target, an untrained draft of the shapes elsi trains (m = 3 on EAGLE-3's set,
the 8,192-token draft vocabulary, `Eagle3Draft.from_target`, seed 0) exported in the openvino layout:
its rounds accept nothing, so each round's wall clock is the cost of drafting and verifying that shape
alone (what the cost model, `elsi_lib.draft.cost`, takes as round_s). The questions are SpecBench's
first turns, PER_COLUMN from each of the paper's mixed columns (`corpus.eval_questions`) and the first CODING of
MT-bench's coding questions (`corpus.category_questions`), tokenized with the chat template.

    .venv/bin/python bench/openvino_rounds_plan.py [--models smollm2-135m,qwen2.5-coder-0.5b]

Writes build/openvino-rounds/plan.json.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from elsi_lib.draft import corpus
from elsi_lib.draft.export import save_draft
from elsi_lib.draft.model import Eagle3Draft
from elsi_lib.inputs.chat import tokenize_conversation
from elsi_lib.inputs.models import load_model, resolve_model_path
from elsi_lib.selection.conventions import eagle3_layers

OUT = Path("build/openvino-rounds")
DRAFT_VOCAB = 8192  # the draft vocabulary of every protocol's drafts (Experiment.draft_vocab)
PER_COLUMN = 2  # mixed questions per paper column (6 columns)
CODING = 6  # MT-bench's coding questions (SpecBench's "coding" category holds ten)
CHAINS = (1, 3, 5)
TREES = ((4, 4, 12), (6, 10, 30), (6, 10, 60))  # EAGLE-2 trees (depth, top_k, nodes), as engines/prepare.py's


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", default="smollm2-135m,qwen2.5-coder-0.5b")
    parser.add_argument("--max-tokens", type=int, default=64)
    args = parser.parse_args()
    mixed = corpus.eval_questions(PER_COLUMN, seed=0)
    coding = corpus.category_questions("coding").head(CODING)
    plan = {"max_tokens": args.max_tokens, "chains": list(CHAINS), "trees": [list(t) for t in TREES], "targets": {}}
    for name in args.models.split(","):
        model, tokenizer = load_model(name)
        n_layers = model.config.num_hidden_layers
        layers = eagle3_layers(n_layers)
        draft = Eagle3Draft.from_target(model, layers, DRAFT_VOCAB, seed=0)
        path = resolve_model_path(name)[0]
        folder = save_draft(draft, OUT / f"{name}-untrained", target=model, format="openvino", verifier=path)
        prompts = {
            kind: [tokenize_conversation(tokenizer, c, add_generation_prompt=True)[0] for c in questions.conversation]
            for kind, questions in (("mixed", mixed), ("coding", coding))
        }
        plan["targets"][name] = {
            "target": path,
            "layers": list(layers),
            "draft": str(folder.resolve()),
            "prompts": prompts,
        }
        print(
            f"{name}: untrained draft on {layers} in {folder}; {len(prompts['mixed'])} mixed, {len(prompts['coding'])} coding"
        )
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "plan.json").write_text(json.dumps(plan))


if __name__ == "__main__":
    main()
