"""Greedy replies through vLLM (CPU), for elsi's reply step through an engine (`elsi_lib.hidden.engine_replies`).

Runs in the engines' environment (.venv-engines); elsi starts it as a subprocess and never imports
vLLM. Reads a request (JSON: the model folder, dtype, max_new_tokens, max_model_len and the prompts
as token ids, already rendered and truncated by elsi) and appends one JSON line per finished prompt
to the output, `{"i": index, "ids": [generated ids, the end-of-sequence token included], "sum": checksum}`
(over the request less its model path, the index and the ids), after a header line `{"engine": "vllm", "version": ..., "request": sha256 of the request}`. Prompts go to
vLLM in chunks (continuous batching inside each); the output is flushed and synced after every
chunk, so an interrupted run resumes from the prompts its output already holds. An output whose
header names another request or engine version is refused (elsi discards it).

    .venv-engines/bin/python elsi_lib/hidden/engine_reply_script.py REQUEST.json OUTPUT.jsonl [--chunk 512]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path


def request_digest(raw: bytes) -> str:
    """sha256 of the request without the model folder's path (elsi_lib.hidden.reply_records computes the same)."""
    request = json.loads(raw)
    request.pop("model", None)
    return hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()


def record(digest: str, i: int, ids: list[int]) -> dict:
    """One reply record with its checksum (elsi_lib.hidden.reply_records.record_sum)."""
    return {
        "i": i,
        "ids": ids,
        "sum": hashlib.sha256(f"{digest}|{i}|{','.join(map(str, ids))}".encode()).hexdigest()[:16],
    }


def _problem(entry, digest: str, n_prompts: int, done: set) -> str | None:
    if not isinstance(entry, dict) or set(entry) != {"i", "ids", "sum"}:
        return "not a reply record"
    if type(entry["i"]) is not int or not 0 <= entry["i"] < n_prompts:
        return f"prompt index {entry['i']!r} outside the request's {n_prompts} prompts"
    if entry["i"] in done:
        return f"a second record of prompt {entry['i']}"
    if not isinstance(entry["ids"], list) or not entry["ids"]:
        return f"an empty reply to prompt {entry['i']}"
    if record(digest, entry["i"], entry["ids"]) != entry:
        return f"the record of prompt {entry['i']} fails its checksum"
    return None


def done_indices(path: Path, header: dict, digest: str, n_prompts: int) -> set[int]:
    """Indices the output already holds, each record checked. Repairs what an interrupted run leaves,
    saying so: a torn header (the file is removed), a torn last line (cut), a repeated header line (an
    earlier version wrote one when its first chunk was interrupted; dropped). Any other bad line, or
    a header of another request or engine version, stops the run naming the file and the line."""
    if not path.exists():
        return set()
    lines = path.read_bytes().split(b"\n")
    try:
        first = json.loads(lines[0])
    except ValueError:  # interrupted while writing the header: nothing was written after it
        print(f"{path}: its header line is torn; writing it anew", file=sys.stderr)
        path.unlink()
        return set()
    if first != header:
        raise SystemExit(f"{path}: written for another request or engine version; remove it")
    done, keep, repairs = set(), [lines[0]], []
    tail = lines.pop()  # after the last newline: empty, or a line torn by an interruption
    if tail:
        repairs.append("cut a torn last line")
    for n, line in enumerate(lines[1:], 2):
        try:
            entry = json.loads(line)
        except ValueError:
            raise SystemExit(f"{path}, line {n}: not a JSON record; remove the file to write its replies anew")
        if entry == header:
            repairs.append(f"dropped a repeated header at line {n}")
            continue
        problem = _problem(entry, digest, n_prompts, done)
        if problem:
            raise SystemExit(f"{path}, line {n}: {problem}; remove the file to write its replies anew")
        done.add(entry["i"])
        keep.append(line)
    if repairs:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(b"".join(line + b"\n" for line in keep))
        os.replace(tmp, path)
        print(f"{path}: {'; '.join(repairs)}", file=sys.stderr)
    return done


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("request", type=Path)
    parser.add_argument("output", type=Path)
    parser.add_argument("--chunk", type=positive, default=512, help="prompts per vLLM generate call")
    args = parser.parse_args()
    import vllm
    from vllm import LLM, SamplingParams

    raw = args.request.read_bytes()
    request = json.loads(raw)
    header = {"engine": "vllm", "version": vllm.__version__, "request": hashlib.sha256(raw).hexdigest()}
    digest = request_digest(raw)
    done = done_indices(args.output, header, digest, len(request["prompts"]))
    todo = [i for i in range(len(request["prompts"])) if i not in done]
    print(f"vLLM {vllm.__version__}: {len(done)} replies present, {len(todo)} to write", file=sys.stderr, flush=True)
    if not todo:
        return 0
    llm = LLM(
        model=request["model"],
        dtype=request["dtype"],
        max_model_len=request["max_model_len"],
        seed=0,
        enforce_eager=True,
    )
    params = SamplingParams(temperature=0.0, max_tokens=request["max_new_tokens"])
    with open(args.output, "ab") as out:
        if out.tell() == 0:  # a new output (done_indices kept the header of one that holds no reply yet)
            out.write((json.dumps(header) + "\n").encode())
        start, written, tokens = time.perf_counter(), 0, 0
        for k in range(0, len(todo), args.chunk):
            chunk = todo[k : k + args.chunk]
            results = llm.generate([{"prompt_token_ids": request["prompts"][i]} for i in chunk], params, use_tqdm=False)
            replies = {i: [int(t) for t in result.outputs[0].token_ids] for i, result in zip(chunk, results)}
            empty = [i for i, ids in replies.items() if not ids]
            if empty:
                raise SystemExit(
                    f"vLLM returned an empty reply to prompts {empty[:5]}; nothing written for their chunk"
                )
            out.write(b"".join((json.dumps(record(digest, i, ids)) + "\n").encode() for i, ids in replies.items()))
            tokens += sum(map(len, replies.values()))
            out.flush()
            os.fsync(out.fileno())
            written += len(chunk)
            rate = tokens / (time.perf_counter() - start)
            print(
                f"replies {len(done) + written}/{len(request['prompts'])}, {rate:.0f} tok/s",
                file=sys.stderr,
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
