"""`make bench-openvino-wallclock`, step 2 (OpenVINO GenAI's environment, .venv-openvino): a trained draft's
wall clock in OpenVINO GenAI's EAGLE-3 pipeline on the CPU, on enough questions to mean something.

For each question set of the plan (bench/openvino_wallclock_plan.py: SpecBench's mixed columns, and its
coding questions on their own), REPEAT rounds, each of them plain greedy decoding and then every chain
(num_assistant_tokens = k) over all the questions, one question at a time, float32 inference; the
settings interleaved so that a drift of the machine's speed falls on all of them alike. Per run: the
seconds, the tokens per target forward (tau), and a digest of every question's output tokens beside plain
decoding's of the same round: a run is lossless when every digest equals plain's, and a lossy run gets no
speed-up. Per chain: the speed-up of each round (plain's seconds / the chain's), reported as the median
with the range over the rounds; the round cost measured (the generation less its prefills, per round,
against plain decoding's step) and the tau a chain of that cost needs for 1.3x and 1.5x (the cost model,
`elsi_lib.draft.cost`: speed-up = tau x step / round).

    .venv-openvino/bin/python bench/bench_openvino_wallclock.py build/openvino-wallclock/<name>/plan.json

Results: bench/results/openvino_wallclock_<name>.json and .md. It times: never beside another job.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "engines"))
sys.path.insert(0, str(ROOT / "bench"))
from check_openvino import _version, config, pipeline, run, to_ir, tokens_digest  # noqa: E402
from record import write  # noqa: E402

TARGETS = (1.3, 1.5)


def decode_seconds(r: dict) -> float:
    """The generation's seconds less its prefills (each question's prompt forward and first token)."""
    return r["seconds"] - sum(r["prefill_seconds"])


def timed_rounds(target_ir: Path, draft_ir: Path, prompts: list, plan: dict) -> dict:
    """{"plain": [run per round], "chain k=K": [...]}: REPEAT rounds, each plain then every chain."""
    plain_pipe, draft_pipe = pipeline(target_ir, None), pipeline(target_ir, draft_ir)
    runs: dict[str, list] = {"plain": []} | {f"chain k={k}": [] for k in plan["chains"]}
    for r in range(plan["repeat"]):
        runs["plain"].append(run(plain_pipe, prompts, config(plan["max_tokens"])))
        print(f"round {r + 1}: plain {runs['plain'][-1]['seconds']:.1f} s", flush=True)
        for k in plan["chains"]:
            runs[f"chain k={k}"].append(run(draft_pipe, prompts, config(plan["max_tokens"], chain=k)))
            print(f"round {r + 1}: chain k={k} {runs[f'chain k={k}'][-1]['seconds']:.1f} s", flush=True)
    return runs


def summary(kind: str, runs: dict, questions: int) -> tuple[list[dict], dict]:
    """The table's rows for one question set and the per-run details (digests, seconds)."""
    plains = runs["plain"]
    steady = all(p["tokens"] == plains[0]["tokens"] for p in plains)  # plain greedy is deterministic
    step = statistics.median(decode_seconds(p) / (p["generated"] - questions) for p in plains)
    rows = [
        {
            "questions": f"{kind} ({questions})",
            "decoding": "plain",
            "tau": "",
            "lossless": "",
            "round ms": round(step * 1000, 1),
            "speed-up median": 1.0,
            "range": "",
            "tau for 1.3x": "",
            "tau for 1.5x": "",
        }
    ]
    details = {
        "plain": [{"seconds": p["seconds"], "digests": tokens_digest(p["tokens"])} for p in plains],
        "plain the same in every round": steady,
    }
    for label, chain_runs in runs.items():
        if label == "plain":
            continue
        lossless = all(c["tokens"] == p["tokens"] for c, p in zip(chain_runs, plains))
        speedups = [p["seconds"] / c["seconds"] for c, p in zip(chain_runs, plains)]
        tau = statistics.median((c["generated"] - questions) / max(1, c["rounds"]) for c in chain_runs)
        round_s = statistics.median(decode_seconds(c) / max(1, c["rounds"]) for c in chain_runs)
        rows.append(
            {
                "questions": f"{kind} ({questions})",
                "decoding": label,
                "tau": round(tau, 3),
                "lossless": lossless,
                "round ms": round(round_s * 1000, 1),
                "speed-up median": round(statistics.median(speedups), 3) if lossless else "lossy: none",
                "range": f"{min(speedups):.3f}-{max(speedups):.3f}" if lossless else "",
                **{f"tau for {t}x": round(t * round_s / step, 3) for t in TARGETS},
            }
        )
        details[label] = [
            {
                "seconds": c["seconds"],
                "accepted": c["accepted"],
                "rounds": c["rounds"],
                "digests": tokens_digest(c["tokens"]),
            }
            for c in chain_runs
        ]
    return rows, details


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("plan", type=Path, help="plan.json of bench/openvino_wallclock_plan.py")
    args = parser.parse_args()
    load_before = [round(x, 2) for x in os.getloadavg()]
    plan = json.loads(args.plan.read_text())
    out = args.plan.parent
    target_ir = to_ir(Path(plan["target"]), out.parent / f"{plan['family']}-target-ir")
    draft_ir = to_ir(Path(plan["draft_folder"]), out / "draft-ir", plan["layers"])
    rows, details = [], {}
    for kind, questions in plan["question_sets"].items():
        runs = timed_rounds(target_ir, draft_ir, questions["prompts"], plan)
        kind_rows, details[kind] = summary(kind, runs, len(questions["prompts"]))
        rows += kind_rows
        details[kind]["question_ids"] = questions["question_ids"]
    settings = {
        "engine": f"OpenVINO GenAI {_version('openvino-genai')}",
        "family": plan["family"],
        "draft": f"{plan['draft']} (layers {plan['layers']})",
        "questions": {k: len(q["prompts"]) for k, q in plan["question_sets"].items()},
        "max_tokens": plan["max_tokens"],
        "repeat": plan["repeat"],
        "chains": plan["chains"],
        "precision": "f32 (weights and inference)",
        "batch": 1,
    }
    notes = (
        "Each round runs plain decoding, then every chain, over all the questions; the speed-up is each round's plain "
        "seconds over the chain's (median, range over the rounds). lossless: every question's tokens equal plain "
        "decoding's in every round (the JSON holds each run's per-question digests: sha256 of the token ids, first 16 "
        "hex digits). round ms: the generation less its prefills, per round (plain: per token); tau for Nx: what a "
        "chain of this round cost needs for N times plain decoding (tau x step / round)."
    )
    record = write(f"openvino_wallclock_{plan['name']}", settings, rows, load_before=load_before, notes=notes,
                   details=details)  # fmt: skip
    print(record.with_suffix(".md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
