"""The strong drafts' training replies (the next accepted-token run): SmolLM2-135M's greedy replies of
up to 256 tokens to every training prompt `../shared/data` offers (15,306, disjoint from the whole
calibration mix and from SpecBench), written by vLLM through elsi's reply step
(`corpus.training_conversations(..., engine="vllm")`, the call the experiment makes with
`Experiment(n_train=15306, reply_engine="vllm")`, so its cache is the experiment's). Hours on 2 cores;
resumable: rerun to continue from the replies already written.

    .venv/bin/python engines/training_replies.py        (make replies-strong)
"""
import time

from elsi_lib.draft import corpus
from elsi_lib.inputs.models import load_model

N_PROMPTS = 15306  # every training prompt of the training mix (corpus.training_prompt_list refuses more)

if __name__ == "__main__":
    start = time.time()
    model, tokenizer = load_model("smollm2-135m")
    conversations = corpus.training_conversations(model, tokenizer, N_PROMPTS, max_new_tokens=256, max_length=1024,
                                                  engine="vllm")
    print(f"{len(conversations)} conversations with replies in {time.time() - start:.0f} s")
    counts = corpus.reply_tokens_by_set(tokenizer, conversations, corpus.training_prompt_sets(N_PROMPTS))
    for prompt_set, tokens in counts.items():
        print(f"  {prompt_set:<20} {tokens:>10,} reply tokens")
