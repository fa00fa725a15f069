"""`make test-engines`, step 1 (elsi's own environment): drafts for the engine check, exported, with
elsi's own numbers to compare against.

SmolLM2-135M: the ELSI m=3 and EAGLE3 layer sets from the calibration statistics (200 prompts, as
notebooks 05-06), one draft each, trained alike on the target's greedy replies to `N_TRAIN` training
prompts (a small, quick version of notebook 06's training: the check needs real acceptance, not
the best draft). Each draft is written in both layouts (`elsi_lib.draft.export`). On SpecBench
questions (`PER_COLUMN` per paper column, first turn) elsi's own loop (`elsi_lib.draft.decode`,
float32 draft on float32 features, as vLLM runs it with dtype float32) decodes with chains of
k = 1..5 draft tokens: its tokens, accepted counts and rounds go to build/engines/plan.json, which
`engines/check_engines.py` reads in the engine's environment.

    .venv/bin/python engines/prepare.py
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from elsi_lib import study
from elsi_lib.draft import corpus
from elsi_lib.draft.decode import speculative_generate
from elsi_lib.draft.experiment import _make_draft, draft_methods
from elsi_lib.draft.export import save_draft
from elsi_lib.draft.features import build_features
from elsi_lib.draft.model import draft_vocabulary
from elsi_lib.draft.train import TrainSettings, train_drafts
from elsi_lib.formatting import tokenize_conversation
from elsi_lib.identity import model_fingerprint
from elsi_lib.models import load_model, resolve_model_path
from elsi_lib.progress import progress_bar

MODEL = "smollm2-135m"
METHODS = ("ELSI m=3", "EAGLE3")
N_TRAIN = 240  # training prompts (replies cached, shared with nothing else)
SETTINGS = TrainSettings(epochs=3.0)
DRAFT_VOCAB = 8192
PER_COLUMN = 2  # SpecBench questions per paper column
MAX_TOKENS = 64  # generated tokens per question
CHAINS = (1, 2, 3, 4, 5)
OUT = Path("build/engines")


def main() -> None:
    torch.manual_seed(0)
    model, tokenizer = load_model(MODEL)
    n_layers = model.config.num_hidden_layers
    stats = study.paper_stats([MODEL], 200, seed=0)[MODEL]
    sources = draft_methods(stats).set_index("method").source
    chosen = {m: tuple(sources[m]) for m in METHODS}
    convs = corpus.training_conversations(model, tokenizer, N_TRAIN, max_new_tokens=256, max_length=1024)
    layers = sorted({l for s in chosen.values() for l in s} | {n_layers - 1})
    store = build_features(model, tokenizer, convs, layers, max_length=1024, desc="target features (engines)")
    counts = np.bincount(store.reply_tokens(), minlength=model.config.vocab_size)
    d2t, t2d = draft_vocabulary(torch.from_numpy(counts), DRAFT_VOCAB)
    target_rows = model.get_output_embeddings().weight[t2d].detach().float()
    drafts = {m: _make_draft(model, src, n_layers, d2t, t2d, DRAFT_VOCAB, SETTINGS.seed) for m, src in chosen.items()}
    key = {"purpose": "engines", "model": model_fingerprint(model), "n_train": N_TRAIN, "vocab": DRAFT_VOCAB,
           "features": store.folder.name}
    out = train_drafts(drafts, chosen, store, target_rows, SETTINGS, key=key, name="engines")
    if out["done"] < out["total"]:
        raise RuntimeError(f"training stopped at batch {out['done']} of {out['total']}")

    questions = corpus.eval_questions(PER_COLUMN, seed=0)
    prompts = [tokenize_conversation(tokenizer, c, add_generation_prompt=True)[0] for c in questions.conversation]
    plan = {"target": resolve_model_path(MODEL)[0], "max_tokens": MAX_TOKENS, "chains": list(CHAINS),
            "questions": questions.question_id.tolist(), "prompts": prompts, "drafts": {}}
    OUT.mkdir(parents=True, exist_ok=True)
    for method, draft in drafts.items():
        slug = method.replace(" ", "").replace("=", "")
        folders = {fmt: str(save_draft(draft, OUT / f"{slug}-{fmt}", target=model, source=chosen[method],
                                       format=fmt, verifier=plan["target"]).resolve())
                   for fmt in ("speculators", "eagle")}
        runs = {}
        bar = progress_bar(total=len(CHAINS) * len(prompts), desc=f"elsi loop, {method}", unit="question")
        for k in CHAINS:
            decoded = []
            for prompt in prompts:
                decoded.append(speculative_generate(model, draft, chosen[method], prompt, max_new_tokens=MAX_TOKENS,
                                                    nodes=k, depth=k, top_k=1, autocast=False,
                                                    round_features=False))
                bar.update(1)
            # vLLM counts a round's accepted tokens before it cuts at the end-of-sequence token or the length
            # limit: compare with elsi's counts before those cuts too
            runs[k] = {"tokens": [d.tokens for d in decoded], "accepted": sum(sum(d.accepted_full) for d in decoded),
                       "rounds": sum(len(d.accepted) for d in decoded)}
        bar.close()
        plan["drafts"][method] = {"layers_elsi": list(chosen[method]), "folders": folders, "elsi": runs}
    (OUT / "plan.json").write_text(json.dumps(plan, indent=1))
    for method, entry in plan["drafts"].items():
        print(method, entry["layers_elsi"], {k: round(1 + r["accepted"] / r["rounds"], 3) for k, r in entry["elsi"].items()})


if __name__ == "__main__":
    main()
