"""The strong drafts' training replies (the next accepted-token run): SmolLM2-135M's greedy replies of
up to 256 tokens to every training prompt `../shared/data` offers (15,306, disjoint from the whole
calibration mix and from SpecBench), written by vLLM through elsi's reply step
(`corpus.training_conversations(..., engine="vllm")`, the call the experiment makes with
`Experiment(n_train=15306, reply_engine="vllm")`, so its cache is the experiment's). Hours on 2 cores;
resumable: rerun to continue from the replies already written, in the cache or in the archive.

`--archive` runs no engine: it archives what is written so far (finished or not, while the engine
runs too) to `data/replies/` (gzip), which is committed, so that a new machine, whose cache is empty,
resumes from there instead of writing the replies again.

    .venv/bin/python engines/training_replies.py [--archive]     (make replies-strong / replies-archive)
"""
import argparse
import time

from elsi_lib.draft import corpus
from elsi_lib.hidden.engine_replies import archive_replies
from elsi_lib.inputs.models import load_model

N_PROMPTS = 15306  # every training prompt of the training mix (corpus.training_prompt_list refuses more)
SETTINGS = {"max_new_tokens": 256, "max_length": 1024}

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--archive", action="store_true", help="archive the replies written so far; run no engine")
    args = parser.parse_args()
    start = time.time()
    model, tokenizer = load_model("smollm2-135m")
    if args.archive:
        path, count = archive_replies(model, tokenizer, corpus.training_prompt_list(N_PROMPTS), **SETTINGS)
        print(f"{count} of {N_PROMPTS} replies archived in {path} ({path.stat().st_size / 1e6:.1f} MB)")
        raise SystemExit(0)
    conversations = corpus.training_conversations(model, tokenizer, N_PROMPTS, engine="vllm", **SETTINGS)
    print(f"{len(conversations)} conversations with replies in {time.time() - start:.0f} s")
    counts = corpus.reply_tokens_by_set(tokenizer, conversations, corpus.training_prompt_sets(N_PROMPTS))
    for prompt_set, tokens in counts.items():
        print(f"  {prompt_set:<20} {tokens:>10,} reply tokens")
