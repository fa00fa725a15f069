"""Greedy replies through vLLM (CPU), for elsi's reply step through an engine (`elsi_lib.hidden.engine_replies`).

Runs in the engines' environment (.venv-engines); elsi starts it as a subprocess and never imports
vLLM. Reads a request (JSON: the model folder, dtype, max_new_tokens, max_model_len and the prompts
as token ids, already rendered and truncated by elsi) and appends one JSON line per finished prompt
to the output, `{"i": index, "ids": [generated ids, the end-of-sequence token included]}`, after a
header line `{"engine": "vllm", "version": ..., "request": sha256 of the request}`. Prompts go to
vLLM in chunks (continuous batching inside each); the output is flushed and synced after every
chunk, so an interrupted run resumes from the prompts its output already holds. An output whose
header names another request or engine version is refused (elsi discards it).

    .venv-engines/bin/python engines/replies.py REQUEST.json OUTPUT.jsonl [--chunk 512]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path


def done_indices(path: Path, header: dict) -> set[int]:
    """Indices the output already holds; a torn last line (an interrupted write) is dropped."""
    if not path.exists():
        return set()
    lines = path.read_bytes().split(b"\n")
    try:
        first = json.loads(lines[0])
    except ValueError:  # interrupted while writing the header: nothing was written after it
        path.unlink()
        return set()
    if first != header:
        raise SystemExit(f"{path}: written for another request or engine version; remove it")
    done, good = set(), len(lines[0]) + 1
    for line in lines[1:]:
        try:
            done.add(int(json.loads(line)["i"]))
            good += len(line) + 1
        except (ValueError, KeyError):
            break
    with open(path, "r+b") as handle:  # cut a torn tail so that appends start on a line of their own
        handle.truncate(min(good, path.stat().st_size))
    return done


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("request", type=Path)
    parser.add_argument("output", type=Path)
    parser.add_argument("--chunk", type=int, default=512, help="prompts per vLLM generate call")
    args = parser.parse_args()
    import vllm
    from vllm import LLM, SamplingParams

    raw = args.request.read_bytes()
    request = json.loads(raw)
    header = {"engine": "vllm", "version": vllm.__version__, "request": hashlib.sha256(raw).hexdigest()}
    done = done_indices(args.output, header)
    todo = [i for i in range(len(request["prompts"])) if i not in done]
    print(f"vLLM {vllm.__version__}: {len(done)} replies present, {len(todo)} to write", file=sys.stderr, flush=True)
    if not todo:
        return 0
    llm = LLM(model=request["model"], dtype=request["dtype"], max_model_len=request["max_model_len"], seed=0,
              enforce_eager=True)
    params = SamplingParams(temperature=0.0, max_tokens=request["max_new_tokens"])
    with open(args.output, "ab") as out:
        if not done:
            out.write((json.dumps(header) + "\n").encode())
        start, written, tokens = time.perf_counter(), 0, 0
        for k in range(0, len(todo), args.chunk):
            chunk = todo[k:k + args.chunk]
            results = llm.generate([{"prompt_token_ids": request["prompts"][i]} for i in chunk], params, use_tqdm=False)
            for i, result in zip(chunk, results):
                ids = list(result.outputs[0].token_ids)
                out.write((json.dumps({"i": i, "ids": ids}) + "\n").encode())
                tokens += len(ids)
            out.flush()
            os.fsync(out.fileno())
            written += len(chunk)
            rate = tokens / (time.perf_counter() - start)
            print(f"replies {len(done) + written}/{len(request['prompts'])}, {rate:.0f} tok/s", file=sys.stderr,
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
