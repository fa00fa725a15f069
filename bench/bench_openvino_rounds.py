"""`make bench-openvino-rounds`, step 2 (OpenVINO GenAI's environment, .venv-openvino): the cost model of
speculative decoding (`elsi_lib.draft.cost`: speed-up = tokens per round x plain step / round) extended to
OpenVINO GenAI's token trees, measured on this CPU, one question at a time, float32 inference.

1. costs: plain greedy decoding (its decode step: the generation less its prefill, per token) and, for
   every chain (num_assistant_tokens = k) and EAGLE-2 tree (tree_depth, branching_factor,
   num_assistant_tokens) of bench/openvino_rounds_plan.py, the seconds of one round with an untrained
   draft of elsi's shapes, which accepts nothing (its rounds are the generation less its prefill,
   divided by its rounds: drafting plus the verification of the shape's tokens);
2. what a draft must reach: for each shape, the break-even tokens per round (round / plain step) and
   the tokens per round that 1.3x, 1.5x and 2x need;
3. out of sample, where engines/check_openvino.py has run (build/engines-openvino/results.json, the
   same mixed questions and tokens): each trained draft's
   speed-up predicted from its measured tokens per round and the costs above alone, against its
   measured speed-up; the error;
4. the strong Qwen drafts' tokens per round on SpecBench's mixed columns (their ledger records,
   elsi's replay at 30 and 60 nodes, T = 0) through the tree costs: the speed-up they would give in
   OpenVINO GenAI (a prediction, said so).

    .venv-openvino/bin/python bench/bench_openvino_rounds.py [--plan build/openvino-rounds/plan.json]

Results: bench/results/openvino_rounds_<target>.json and .md. Never run it beside another job: it times.
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
from check_openvino import config, pipeline, run, to_ir, tree_name  # noqa: E402
from record import write  # noqa: E402

SPEEDUPS = (1.3, 1.5, 2.0)
STRONG = ("qwen_strong", "qwen2.5-coder-0.5b", ("eagle3-seed0", "probe-m3-seed0"))  # protocol, family, units


def decode_seconds(r: dict) -> float:
    """The generation's seconds less its prefills (each question's prompt forward and first token)."""
    return r["seconds"] - sum(r["prefill_seconds"])


def shapes(plan: dict) -> list[tuple[str, object]]:
    return [(f"chain k={k}", ("chain", k)) for k in plan["chains"]] + [
        (tree_name(t), ("tree", tuple(t))) for t in plan["trees"]
    ]


def measure(target: dict, plan: dict, out: Path, name: str) -> dict:
    """Plain decoding and one untrained-draft run per shape, on each question set."""
    target_ir = to_ir(Path(target["target"]), out / f"{name}-target-ir")
    draft_ir = to_ir(Path(target["draft"]), out / f"{name}-untrained-ir", target["layers"])
    costs = {}
    for kind, prompts in target["prompts"].items():
        plain = run(pipeline(target_ir, None), prompts, config(plan["max_tokens"]))
        step = decode_seconds(plain) / (plain["generated"] - len(prompts))
        costs[kind] = {"plain": {"step_s": step, "tokens": plain["tokens"], "prefill_s": sum(plain["prefill_seconds"])}}
        pipe = pipeline(target_ir, draft_ir)
        for label, (shape, value) in shapes(plan):
            gc = config(plan["max_tokens"], chain=value) if shape == "chain" else config(plan["max_tokens"], tree=value)
            try:
                r = run(pipe, prompts, gc)
            except Exception as err:  # noqa: BLE001 (the engine's failure on this shape: said, the others still timed)
                print(f"{name} {kind} {label}: OpenVINO GenAI failed: {type(err).__name__}: {err}", flush=True)
                continue
            costs[kind][label] = {
                "round_s": decode_seconds(r) / max(1, r["rounds"]),
                "rounds": r["rounds"],
                "accepted": r["accepted"],
                "lossless": r["tokens"] == plain["tokens"],
            }
            print(name, kind, label, f"round {costs[kind][label]['round_s'] * 1000:.1f} ms, step {step * 1000:.1f} ms")
        del pipe
    return costs


def predicted_vs_measured(costs: dict, name: str, prompts: list | None = None) -> list[dict]:
    """Each trained draft's run in engines/check_openvino.py (mixed questions), predicted from its tokens
    per round and this run's costs: speed-up = (plain's prefill + decode) / (prefill + rounds x round).
    The check must have run the same questions: the same plain tokens, or (re-analysed from a record,
    `prompts`) the same prompts in its plan."""
    check = ROOT / "build" / "engines-openvino" / "results.json"
    if not check.is_file():
        return []
    results = json.loads(check.read_text())
    checked = json.loads((check.parent / "plan.json").read_text())["prompts"]
    same = (
        checked == prompts if prompts is not None else results["plain"]["tokens"] == costs["mixed"]["plain"]["tokens"]
    )
    if not same:
        print(f"{name}: engines/check_openvino.py ran other questions or tokens: no out-of-sample comparison")
        return []
    plain = results["plain"]
    rows = []
    for method, runs in results.items():
        if method == "plain" or not isinstance(runs, dict):
            continue
        for label, r in runs.items():
            if not isinstance(r, dict) or "tau" not in r or label not in costs["mixed"]:
                continue
            if not r["lossless"]:
                continue
            measured = plain["seconds"] / r["seconds"]
            tau = r["tau"]
            rounds = r["rounds"]
            predicted_s = sum(r["prefill_seconds"]) + rounds * costs["mixed"][label]["round_s"]
            predicted = plain["seconds"] / predicted_s
            rows.append(
                {
                    "draft": method,
                    "decoding": label,
                    "tau": round(tau, 3),
                    "speed-up measured": round(measured, 3),
                    "predicted": round(predicted, 3),
                    "error": f"{100 * (predicted - measured) / measured:+.1f}%",
                }
            )
    return rows


def strong_predictions(costs: dict) -> list[dict]:
    """The strong Qwen drafts' replay tau (ledger records, T = 0, mixed columns) through the tree costs."""
    protocol, family, units = STRONG
    rows = []
    for unit in units:
        path = ROOT / "data" / "drafts" / protocol / f"{unit}.json"
        if not path.is_file():
            continue
        record = json.loads(path.read_text())
        for label, cost in costs["mixed"].items():
            if not label.startswith("tree depth 6, top-10"):
                continue
            nodes = int(label.rsplit(", ", 1)[1].split()[0])
            taus = [q[4] for q in record["questions"] if q[0] == 0.0 and q[1] == nodes]
            if not taus:
                continue
            tau = statistics.mean(taus)
            step = costs["mixed"]["plain"]["step_s"]
            rows.append(
                {
                    "draft": f"{protocol} {unit} (layers {record['layers']})",
                    "tree": label,
                    "questions": len(taus),
                    "replay tau": round(tau, 3),
                    "predicted speed-up (decode)": round(tau * step / cost["round_s"], 3),
                    "tau for 1.3x": round(1.3 * cost["round_s"] / step, 3),
                }
            )
    return rows


def reanalyse(name: str, plan: dict) -> None:
    """The out-of-sample comparison and the strong drafts' predictions of bench/results/openvino_rounds_<name>
    again, from its recorded round costs against engines/check_openvino.py's latest results (no timing);
    the record rewritten with its own machine and date."""
    path = ROOT / "bench" / "results" / f"openvino_rounds_{name}.json"
    record = json.loads(path.read_text())
    costs = {"mixed": {}}
    for r in record["rows"]:
        if r["questions"] == "mixed":
            costs["mixed"][r["decoding"]] = {"round_s": r["round ms"] / 1000, "step_s": r["round ms"] / 1000}
    oos = (
        predicted_vs_measured(costs, name, plan["targets"][name]["prompts"]["mixed"]) if name == "smollm2-135m" else []
    )
    strong = strong_predictions(costs) if name == STRONG[1] else []
    rows = [{**{k: "" for k in record["rows"][1]}, **r} if r["decoding"] == "plain" else r for r in record["rows"]]
    notes = [oos_note(oos, len(plan["targets"][name]["prompts"]["mixed"]))] if oos else []
    notes += [strong_note(strong)] if strong else []
    write(path.stem, record["settings"], rows, load_before=record["machine"]["load_1_5_15"], notes="\n\n".join(notes),
          machine_info=record["machine"], details={"out_of_sample": oos, "strong_predictions": strong})  # fmt: skip
    print(path.with_suffix(".md").read_text())


def strong_note(strong: list[dict]) -> str:
    return "Predicted, not measured (the strong drafts are not on this machine):\n\n" + "\n".join(
        f"- {r}" for r in strong
    )


def oos_note(oos: list[dict], questions: int) -> str:
    errors = [abs(float(r["error"].rstrip("%"))) for r in oos]
    return (
        f"Out of sample (engines_openvino's trained drafts, the same {questions} mixed questions, lossless runs): "
        f"predicted against measured speed-up, |error| median {statistics.median(errors):.1f}%, max "
        f"{max(errors):.1f}%, within 10% on {sum(e <= 10 for e in errors)} of {len(errors)}.\n\n"
        + "\n".join(f"- {r}" for r in oos)
    )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--plan", type=Path, default=ROOT / "build" / "openvino-rounds" / "plan.json")
    parser.add_argument("--reanalyse", metavar="TARGET", help="redo TARGET's out-of-sample comparison, no timing")
    args = parser.parse_args()
    plan = json.loads(args.plan.read_text())
    if args.reanalyse:
        reanalyse(args.reanalyse, plan)
        return 0
    out = args.plan.parent
    for name, target in plan["targets"].items():
        load_before = [round(x, 2) for x in os.getloadavg()]
        costs = measure(target, plan, out, name)
        rows = []
        for kind, by_shape in costs.items():
            step = by_shape["plain"]["step_s"]
            plain_row = {"questions": kind, "decoding": "plain", "round ms": round(step * 1000, 2), "round / step": 1.0}
            plain_row.update(
                {f"tau for {x:g}x": "" for x in SPEEDUPS}, lossless=""
            )  # the table's columns: its first row's
            rows.append(plain_row)
            for label, c in by_shape.items():
                if label == "plain":
                    continue
                ratio = c["round_s"] / step
                rows.append(
                    {
                        "questions": kind,
                        "decoding": label,
                        "round ms": round(c["round_s"] * 1000, 2),
                        "round / step": round(ratio, 3),
                        **{f"tau for {x:g}x": round(x * ratio, 3) for x in SPEEDUPS},
                        "lossless": c["lossless"],
                    }
                )
        oos = predicted_vs_measured(costs, name) if name == "smollm2-135m" else []
        strong = strong_predictions(costs) if name == STRONG[1] else []
        notes = []
        if oos:
            notes.append(oos_note(oos, len(target["prompts"]["mixed"])))
        if strong:
            notes.append(strong_note(strong))
        write(
            f"openvino_rounds_{name}",
            {
                "target": name,
                "questions": {k: len(v) for k, v in target["prompts"].items()},
                "max_tokens": plan["max_tokens"],
                "draft": f"untrained, layers {target['layers']}, 8192-token vocabulary",
                "precision": "f32",
                "batch": 1,
            },
            rows,
            load_before=load_before,
            notes="\n\n".join(notes),
            details={"out_of_sample": oos, "strong_predictions": strong},
        )
        print((ROOT / "bench" / "results" / f"openvino_rounds_{name}.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
