"""One try of extracting training features through vLLM (speculators' path) against elsi's own target
forward, on this CPU: the same training conversations, EAGLE3's layers, float32. Measures tokens/s of
both (vLLM's prefill with the hidden-state connector, less its start-up; elsi's `LiveFeatures` batch
forward) and how far vLLM's states are from elsi's (relative norm of the difference per layer).
Needs .venv-engines (`make test-engines`); writes bench/results/bench_vllm_hidden.{json,md}. Run it
on a quiet machine.

    .venv/bin/python bench/bench_vllm_hidden.py [--conversations 24]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from elsi_lib.common.cachefiles import REPO_ROOT
from elsi_lib.draft import corpus
from elsi_lib.draft.live import LiveFeatures
from elsi_lib.hidden.engine_env import engine_environment, engines_python, model_folder
from elsi_lib.inputs.models import load_model
from elsi_lib.selection.conventions import convert_layer_ids, eagle3_layers
from record import write


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--conversations", type=int, default=24)
    args = parser.parse_args()
    load_before = [round(x, 2) for x in os.getloadavg()]
    model, tokenizer = load_model("smollm2-135m")
    n = len(model.get_decoder().layers)
    layers = eagle3_layers(n)  # elsi's convention: outputs of these layers
    convs = corpus.training_conversations(model, tokenizer, args.conversations, progress=False)
    live = LiveFeatures(model, tokenizer, convs, layers)
    tokens = sum(live.length(i) for i in range(len(live)))
    start = time.perf_counter()
    batch = live.collate(list(range(len(live))), {tuple(layers)})
    elsi_seconds = time.perf_counter() - start
    rows, notes = (
        [
            {
                "path": "elsi forward (LiveFeatures, one batch)",
                "tok/s": round(tokens / elsi_seconds),
                "relative difference": "",
            }
        ],
        "",
    )
    with tempfile.TemporaryDirectory() as folder:
        request = {
            "model": str(model_folder(model)),
            "layers": list(convert_layer_ids(layers, "elsi", "vllm", n)),
            "prompts": [live.samples[i].ids for i in range(len(live))],
        }
        (Path(folder) / "request.json").write_text(json.dumps(request))
        python = engines_python()
        done = subprocess.run(
            [
                str(python),
                str(REPO_ROOT / "engines" / "extract_hidden.py"),
                str(Path(folder) / "request.json"),
                str(Path(folder) / "out.npz"),
            ],
            env=engine_environment(python),
            capture_output=True,
            text=True,
        )
        if done.returncode:
            tail = "\n".join(done.stderr.strip().splitlines()[-6:])
            notes = f"vLLM's extraction did not run on this CPU (exit {done.returncode}):\n\n```\n{tail}\n```"
            print(notes)
        else:
            out = np.load(Path(folder) / "out.npz")
            d = model.config.hidden_size
            diffs = []
            for i in range(len(live)):
                T = live.length(i)
                mine = batch["features"][tuple(layers)][i, :T].numpy().reshape(T, len(layers), d)
                theirs = out[f"states_{i}"].reshape(T, -1, d)[:, : len(layers)]
                diffs.append(np.linalg.norm(theirs - mine, axis=(0, 2)) / np.linalg.norm(mine, axis=(0, 2)))
            rows.append(
                {
                    "path": "vLLM extract_hidden_states (prefill, less start-up)",
                    "tok/s": round(tokens / float(out["seconds"])),
                    "relative difference": json.dumps([round(float(x), 5) for x in np.max(diffs, axis=0)]),
                }
            )
    for row in rows:
        print(row)
    write(
        "bench_vllm_hidden",
        {**vars(args), "layers elsi": list(layers), "tokens": tokens},
        rows,
        load_before=load_before,
        notes=notes,
    )


if __name__ == "__main__":
    main()
