"""A user's first answer: `elsi select --model MODEL` as the command runs it, cold (an empty cache: the
model converted, the calibration replies written or read from the package, the capture, the probe's
statistics) and then warm (the same cache), each in a fresh process. Each stage's wall time and the
process's peak resident memory after it are recorded (the stages are the command's own functions,
timed where the command calls them), and the whole command's time. Never beside another job.

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
    ("elsi_lib.hidden.calibration", "calibration_conversations"): "calibration replies",
    ("elsi_lib.hidden.calibration", "capture_selections"): "capture",
    ("elsi_lib.hidden.probe_capture", "cached_probe_choice"): "probe (statistics and choice)",
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
        module = importlib.import_module(module_name)
        original = getattr(module, name)

        def timed(*args, _original=original, _stage=stage, **kwargs):
            start = time.perf_counter()
            try:
                return _original(*args, **kwargs)
            finally:
                times[_stage] = times.get(_stage, 0.0) + time.perf_counter() - start
                peaks[_stage] = _peak_mb()

        setattr(module, name, timed)
    from elsi_lib import cli

    argv = ["select", "--model", model, "--format", "json"] + (["--engine", engine] if engine else [])
    start = time.perf_counter()
    code = cli.main(argv)
    total = time.perf_counter() - start
    print(json.dumps({"code": code, "total": total, "times": times, "peaks": peaks, "peak": _peak_mb()}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--engine", default=None)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.model, args.engine)
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
