"""A user's first answer: `elsi select --model MODEL` as the command runs it, cold (an empty cache: the
model converted, the calibration replies written or read from the package, the capture, the probe's
statistics) and then warm (the same cache), each in a fresh process. Each stage's wall time and the
process's peak resident memory after it are recorded (the stages are the command's own functions,
timed where the command calls them), and the whole command's time. Then, in a third process, the bare
forward (the model's own forward with its logits, nothing captured) over the same calibration
conversations at the capture's batching, against which the command's capture is measured:
bare seconds / capture seconds (1 = the capture costs no more than the forward it rides on; the
capture's stage holds the probe's rows as well, which share its forward). Never beside another job.

    .venv/bin/python bench/bench_first_answer.py [--model smollm2-135m] [--engine speculators]

Writes bench/results/first_answer_<model>.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import record  # noqa: E402

STAGES = {  # (module, function): the stage it is
    ("elsi_lib.inputs.models", "load_model"): "load the model",
    ("elsi_lib.hidden.replies", "reply_conversations"): "calibration replies",
    ("elsi_lib.cli", "capture_variants"): "capture (and the probe's rows, one forward)",  # as the command calls it
    ("elsi_lib.hidden.probe_capture", "ProbeRows.stats"): "probe statistics (from the spilled rows)",
    ("elsi_lib.hidden.probe_capture", "cached_probe_choice"): "probe choice (and its statistics when not built above)",
    ("elsi_lib.hidden.probe_capture", "cached_probe_error"): "probe error of the default set",
}


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(model: str, engine: str | None) -> None:
    """Run the command in this process with its stages timed; print one JSON line of the timings."""
    import importlib

    times: dict[str, float] = {}
    peaks: dict[str, float] = {}
    for (module_name, name), stage in STAGES.items():
        owner = importlib.import_module(module_name)
        *path, name = name.split(".")
        for part in path:  # a class's method: patched on the class
            owner = getattr(owner, part)
        original = getattr(owner, name)

        def timed(*args, _original=original, _stage=stage, **kwargs):
            start = time.perf_counter()
            try:
                return _original(*args, **kwargs)
            finally:
                times[_stage] = times.get(_stage, 0.0) + time.perf_counter() - start
                peaks[_stage] = _peak_mb()

        setattr(owner, name, timed)
    from elsi_lib import cli

    argv = ["select", "--model", model, "--format", "json"] + (["--engine", engine] if engine else [])
    start = time.perf_counter()
    code = cli.main(argv)
    total = time.perf_counter() - start
    print(json.dumps({"code": code, "total": total, "times": times, "peaks": peaks, "peak": _peak_mb()}))


def bare(model: str) -> None:
    """The model's own forward (logits, no hooks) over the calibration conversations the command
    captures, batched as the capture batches them; print one JSON line: seconds, tokens."""
    import torch

    from elsi_lib.hidden.calibration import calibration_conversations
    from elsi_lib.hidden.forward import pad_batch, pad_id, plan_batches, tokenize_samples
    from elsi_lib.hidden.probe_capture import BATCHING
    from elsi_lib.hidden.settings import CaptureSettings
    from elsi_lib.inputs.models import DEFAULT_MODEL, load_model

    loaded = load_model(model)  # the replies are the default reply model's, as the command's are
    conversations = calibration_conversations(200, loaded=loaded if model == DEFAULT_MODEL else None, progress=False)
    samples, _ = tokenize_samples(loaded[1], conversations, CaptureSettings.max_length)
    plan = plan_batches([len(s.ids) for s in samples], *BATCHING)
    start = time.perf_counter()
    with torch.no_grad():
        for positions in plan:
            ids, mask = pad_batch([samples[i] for i in positions], pad_id(loaded[1]))
            loaded[0](input_ids=ids, attention_mask=mask, use_cache=False)
    seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "tokens": sum(len(s.ids) for s in samples)}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--engine", default=None)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--bare", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.model, args.engine)
        return
    if args.bare:
        bare(args.model)
        return
    load = [round(x, 2) for x in os.getloadavg()]
    rows = []
    with tempfile.TemporaryDirectory(prefix="elsi-first-answer-") as cache:
        env = {**os.environ, "ELSI_CACHE_DIR": cache, "HF_HUB_OFFLINE": "1"}
        for run in ("cold", "warm"):
            cmd = [sys.executable, __file__, "--child", "--model", args.model] + (
                ["--engine", args.engine] if args.engine else []
            )
            start = time.perf_counter()
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            wall = time.perf_counter() - start
            answer, _, timing = done.stdout.strip().rpartition("\n")
            result = json.loads(timing)
            keep = Path(__file__).resolve().parents[1] / "build" / f"first_answer_{args.model}_{run}.json"
            keep.parent.mkdir(exist_ok=True)
            keep.write_text(answer + "\n")  # the command's own answer, for reading beside the timings
            assert result["code"] == 0, done.stderr[-2000:]
            for stage in STAGES.values():
                if stage in result["times"]:
                    rows.append(
                        {
                            "run": run,
                            "stage": stage,
                            "seconds": round(result["times"][stage], 1),
                            "peak MB after": round(result["peaks"][stage]),
                        }
                    )
            rows.append(
                {
                    "run": run,
                    "stage": "the whole command (process)",
                    "seconds": round(wall, 1),
                    "peak MB after": round(result["peak"]),
                }
            )
            print(f"{run}: {wall:.1f} s, peak {result['peak']:.0f} MB", flush=True)
            if run == "cold":
                capture_seconds = result["times"]["capture (and the probe's rows, one forward)"]
        done = subprocess.run(
            [sys.executable, __file__, "--bare", "--model", args.model], env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr[-2000:]
        forward = json.loads(done.stdout.strip().rpartition("\n")[2])
        rows.append(
            {
                "run": "bare forward",
                "stage": f"the model's forward over the same {forward['tokens']} tokens, same batching",
                "seconds": round(forward["seconds"], 1),
                "peak MB after": None,
            }
        )
        rows.append(
            {
                "run": "ratio",
                "stage": "bare forward seconds / the cold capture's seconds",
                "seconds": round(forward["seconds"] / capture_seconds, 2),
                "peak MB after": None,
            }
        )
        print(f"capture at {forward['seconds'] / capture_seconds:.2f}x the bare forward", flush=True)
    name = f"first_answer_{args.model}" + (f"_{args.engine}" if args.engine else "")
    path = record.write(
        name,
        {"model": args.model, "engine": args.engine, "cache": "empty, then the same"},
        rows,
        load_before=load,
        notes="Stages are the command's own functions, timed where it calls them; a stage's peak is the "
        "process's peak resident memory when the stage ended (it never falls).",
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
