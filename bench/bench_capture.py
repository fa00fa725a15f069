"""Capture throughput and peak memory on the bundled SmolLM2, measured in one run.

Prints tokens/s (non-padding tokens) of
  1. a bare forward that computes the logits at every position and nothing else (the least work
     that token entropies need),
  2. a bare forward with logits_to_keep=1,
  3. capture(...) (hooks, chunked entropies, selection, block sums),
all on the same 64 prompts in the same batches, with the ratios, and the time of hashing every weight
for the cache key against the capture's; then the peak resident memory of
capture in fresh processes for 64 and 256 prompts. Targets: capture >= 0.9x the full-logits
forward; peak memory for 256 prompts within 10% of that for 64.

    .venv/bin/python bench/bench_capture.py [--prompts 64] [--big 256]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import torch

import elsi_lib
from elsi_lib.hidden.forward import pad_batch, pad_id, plan_batches, tokenize_samples
from elsi_lib.common.identity import weights_sha256
from record import write

BATCH = dict(batch_size=8, max_batch_tokens=4096, max_length=1024)


def bare_forward_rate(model, tokenizer, prompts, logits_to_keep: int) -> float:
    samples, _ = tokenize_samples(tokenizer, prompts, BATCH["max_length"])
    batches = plan_batches([len(s.ids) for s in samples], BATCH["batch_size"], BATCH["max_batch_tokens"])
    tokens, start = 0, time.perf_counter()
    with torch.no_grad():
        for batch in batches:
            ids, mask = pad_batch([samples[i] for i in batch], pad_id(tokenizer))
            model(input_ids=ids, attention_mask=mask, use_cache=False, logits_to_keep=logits_to_keep)
            tokens += int(mask.sum())
    return tokens / (time.perf_counter() - start)


def capture_rate(model, tokenizer, prompts) -> tuple[float, dict]:
    start = time.perf_counter()
    stats = elsi_lib.capture(model, tokenizer, prompts, cache=False, progress=False, **BATCH)
    return stats.counts["tokens_seen"] / (time.perf_counter() - start), stats.counts


QWEN3_4B_SHAPE = dict(
    n_layers=36,
    hidden_size=2560,
    intermediate_size=9728,
    n_heads=32,
    num_key_value_heads=8,
    head_dim=128,
    vocab_size=49152,
)  # Qwen3-4B but for the vocabulary (SmolLM2's tokenizer)


def child(n_prompts: int, qwen3: bool = False) -> None:
    if qwen3:  # a randomly initialised Qwen3-4B-shaped model in bfloat16, short prompts
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(elsi_lib.inputs.models.resolve_model_path(None)[0])
        model = elsi_lib.random_model("qwen3", dtype="bfloat16", **QWEN3_4B_SHAPE)
        BATCH.update(max_length=128, max_batch_tokens=1024)
    else:
        model, tokenizer = elsi_lib.load_model()
    prompts = elsi_lib.calibration_prompts(n_prompts, seed=0)
    before = resident_kib("VmRSS")
    reset_peak()  # the peak of loading is not the peak of capture
    rate, counts = capture_rate(model, tokenizer, prompts)
    print(
        json.dumps(
            {
                "peak_mib": resident_kib("VmHWM") / 1024,
                "after_load_mib": before / 1024,
                "rate": rate,
                "tokens": counts["tokens_seen"],
            }
        )
    )


def resident_kib(field: str) -> float:
    """VmRSS (now) or VmHWM (peak since the last reset) of this process, in KiB."""
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return float(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as handle:  # "5" resets VmHWM to the current RSS
        handle.write("5")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--big", type=int, default=256)
    parser.add_argument(
        "--qwen3",
        action="store_true",
        help="also measure peak memory on a random Qwen3-4B-shaped bf16 model (8 vs 32 prompts, ~5 min, 9 GB)",
    )
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--child-qwen3", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child, args.child_qwen3)

    load_before = [round(x, 2) for x in os.getloadavg()]
    model, tokenizer = elsi_lib.load_model()
    prompts = elsi_lib.calibration_prompts(args.prompts, seed=0)
    bare_forward_rate(model, tokenizer, prompts[:8], 0)  # warm-up
    full = bare_forward_rate(model, tokenizer, prompts, 0)
    last = bare_forward_rate(model, tokenizer, prompts, 1)
    rate, counts = capture_rate(model, tokenizer, prompts)
    start = time.perf_counter()
    weights_sha256(model)  # what a cache key costs: every weight hashed (once per model and process)
    hashing = time.perf_counter() - start
    print(f"SmolLM2-135M, {args.prompts} prompts, {counts['tokens_seen']} tokens, batches {BATCH}")
    print(f"{'bare forward, logits at every position':<44}{full:>9.0f} tok/s")
    print(f"{'bare forward, logits_to_keep=1':<44}{last:>9.0f} tok/s   ({last / full:.2f}x full)")
    print(f"{'capture':<44}{rate:>9.0f} tok/s   ({rate / full:.2f}x full, target >= 0.90)")
    capture_seconds = counts["tokens_seen"] / rate
    print(
        f"{'hashing every weight for the cache key':<44}{hashing:>9.2f} s       "
        f"({hashing / capture_seconds:.3f}x this capture's {capture_seconds:.0f} s)"
    )

    rows = [
        {"measure": "bare forward, logits at every position", "tok/s": round(full), "ratio": 1.0},
        {"measure": "bare forward, logits_to_keep=1", "tok/s": round(last), "ratio": round(last / full, 2)},
        {"measure": "capture", "tok/s": round(rate), "ratio": round(rate / full, 2)},
        {
            "measure": "hashing every weight (s)",
            "tok/s": round(hashing, 2),
            "ratio": round(hashing / capture_seconds, 3),
        },
    ]
    peaks = {"SmolLM2-135M": peak_memory("SmolLM2-135M", args.prompts, args.big, [])}
    if args.qwen3:
        peaks["random Qwen3-4B-shaped"] = peak_memory(
            "random Qwen3-4B-shaped, bf16, max_length 128", 8, 32, ["--child-qwen3"]
        )
    settings = {
        "prompts": args.prompts,
        "big": args.big,
        "batches": BATCH,
        "tokens": counts["tokens_seen"],
        "peak memory MiB": peaks,
    }
    write("bench_capture", settings, rows, load_before=load_before)


def peak_memory(label: str, small: int, big: int, flags: list[str]) -> None:
    """Peak resident memory of capture, each size in a fresh process."""
    peaks = {}
    for n in (small, big):
        out = subprocess.run(
            [sys.executable, __file__, "--child", str(n), *flags], capture_output=True, text=True, check=True
        )
        peaks[n] = json.loads(out.stdout.strip().splitlines()[-1])
        print(
            f"{label}: peak memory, capture of {n:>4} prompts ({peaks[n]['tokens']:>6} tokens): "
            f"{peaks[n]['peak_mib']:7.0f} MiB (before capture: {peaks[n]['after_load_mib']:.0f} MiB)"
        )
    ratio = peaks[big]["peak_mib"] / peaks[small]["peak_mib"]
    print(f"{label}: peak ratio {big}/{small} prompts: {ratio:.3f}   (target <= 1.10)")
    return {str(n): round(p["peak_mib"]) for n, p in peaks.items()} | {"ratio": round(ratio, 3)}


if __name__ == "__main__":
    main()
