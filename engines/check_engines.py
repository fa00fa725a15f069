"""`make test-engines`, step 2 (the engines' environment, .venv-engines): vLLM and speculators are the
referees of elsi's exported drafts. Reads build/engines/plan.json (engines/prepare.py) and checks:

1. speculators loads each speculators-layout export (`Eagle3DraftModel.from_pretrained`) with every
   weight equal to the file's;
2. vLLM (CPU, dtype float32, eager) loads each export in both layouts and, at temperature 0, its
   output with the draft equals its output without it (lossless), for chains of k = 1..5;
3. vLLM's own acceptance counters (`llm.get_metrics()`) agree with elsi's loop on the same prompts:
   mean acceptance length 1 + accepted / drafts within TOLERANCE of elsi's 1 + accepted / rounds.
   Both run the draft in float32 on float32 features; what remains are float32 rounding differences
   between two implementations, which can flip a near-tie between two draft tokens now and then.
4. vLLM captured the exported layers, not its defaults: vLLM 0.32's model runner logs "Using
   auxiliary layers from speculative config: (ids)" (`gpu_model_runner.py`) when it takes the
   draft's `eagle_aux_hidden_state_layer_ids` and logs nothing when it falls back to the target's
   default layers (later versions: "Using Eagle3 auxiliary layers from config / from model"; vLLM
   PR #50170 adds the missing warning). The log of each engine start (build/engines/logs/) is read
   back and must name exactly the export's ids;
5. wall clock: vLLM's tokens/s with and without each draft, questions one at a time (batch 1);
6. the reply step through vLLM (`elsi_lib.hidden.engine_replies`, run by prepare.py on 64 training
   prompts) against transformers' greedy replies: how many are equal token for token (a count, not a
   failure: float32 near-ties may part them), recorded with the results.

Exit status 0 when every check passes; the engines' logs and every run's tokens in build/engines/, the
table (machine, date, load, rows) in bench/results/engines_vllm.json and .md, which the README quotes.

    VLLM_CPU_KVCACHE_SPACE=1 LD_PRELOAD=.venv-engines/lib/libiomp5.so .venv-engines/bin/python engines/check_engines.py [--drafts small|strong|qwen]
"""

from __future__ import annotations

import gc
import json
import os
import re
import sys
from contextlib import contextmanager
from pathlib import Path

OUT = Path("build/engines")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from record import write  # noqa: E402  (standalone: no elsi import in this environment)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vllm_session import counters, engine, generate, shutdown  # noqa: E402

TOLERANCE = 0.05  # |vLLM's mean acceptance length - elsi's| (tokens per target forward)


# vLLM 0.32: "Using auxiliary layers from speculative config: (10, 11, 30)"; newer vLLM (eagle3_utils.py):
# "Using Eagle3 auxiliary layers from config: (...)" or "... from model: (...)" (its defaults)
AUX_LOG = re.compile(r"Using (?:Eagle3 )?auxiliary layers from (speculative config|config|model): [\[(]([\d, ]*)[\])]")


@contextmanager
def captured_output(path: Path, log: list):
    """Everything written to file descriptors 1 and 2 while the block runs, by this process and by
    the engine processes it starts (they inherit them and keep writing there afterwards), goes to
    `path` (kept: the engine's own log); its text at the end of the block is appended to `log` and
    echoed to the terminal."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as file:
        saved = [os.dup(1), os.dup(2)]
        sys.stdout.flush(), sys.stderr.flush()
        os.dup2(file.fileno(), 1), os.dup2(file.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush(), sys.stderr.flush()
            os.dup2(saved[0], 1), os.dup2(saved[1], 2)
            os.close(saved[0]), os.close(saved[1])
    text = path.read_text(errors="replace")
    sys.stderr.write(text)
    log.append(text)


def aux_layers_used(log_text: str) -> tuple[str, list[int]] | None:
    """("config" or "model", ids) from vLLM's log line naming the auxiliary layers it captures."""
    found = AUX_LOG.findall(log_text)
    if not found:
        return None
    where, ids = found[-1]
    return ("model" if where == "model" else "config"), [int(x) for x in ids.replace(" ", "").split(",") if x]


def run_vllm(plan: dict, draft_folder: str | None, k: int = 0, out: Path = OUT) -> dict:
    """Greedy generation of every prompt, one at a time; tokens, seconds and acceptance counters (the
    engine's log in out/logs/)."""
    log: list[str] = []
    name = "plain" if draft_folder is None else f"{Path(draft_folder).name}-k{k}"
    with captured_output(out / "logs" / f"vllm-{name}.log", log):
        llm = engine(plan["target"], draft_folder, k)
    generate(llm, plan["prompts"][:1], plan["max_tokens"])  # warm-up
    before = counters(llm)
    tokens, seconds = generate(llm, plan["prompts"], plan["max_tokens"])
    after = counters(llm)
    shutdown(llm)
    del llm
    gc.collect()  # the engine's weights, before the next one starts
    return {
        "tokens": tokens,
        "seconds": seconds,
        "generated": sum(map(len, tokens)),
        **{
            name: after.get(name, 0) - before.get(name, 0)
            for name in ("num_drafts", "num_accepted_tokens", "num_draft_tokens")
        },
        "aux_layers": aux_layers_used("".join(log)),
    }


def check_speculators(folder: str) -> str:
    import torch
    from safetensors.torch import load_file
    from speculators.models.eagle3.core import Eagle3DraftModel

    model = Eagle3DraftModel.from_pretrained(folder)
    state = model.state_dict()
    written = load_file(str(Path(folder) / "model.safetensors"))
    missing = [k for k in written if k not in state]
    different = [k for k in written if k in state and not torch.equal(state[k].to(written[k].dtype), written[k])]
    if missing or different:
        return f"speculators: keys not loaded {missing}, weights that differ {different}"
    return ""


def main() -> int:
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--drafts",
        choices=["small", "strong", "qwen"],
        default="small",
        help="which drafts engines/prepare.py --drafts exported",
    )
    # their output folder and this check's record
    out, name = {
        "small": (OUT, "engines_vllm"),
        "strong": (Path("build/engines-strong"), "engines_vllm_strong"),
        "qwen": (Path("build/engines-qwen"), "engines_vllm_qwen"),
    }[parser.parse_args().drafts]
    load_before = [round(x, 2) for x in os.getloadavg()]
    plan = json.loads((out / "plan.json").read_text())
    failures, rows, results = [], [], {"plain": None, "drafts": {}}
    for method, entry in plan["drafts"].items():
        problem = check_speculators(entry["folders"]["speculators"])
        print(f"speculators loads {method}: {'ok' if not problem else problem}", flush=True)
        if problem:
            failures.append(problem)
    plain = run_vllm(plan, None, out=out)
    results["plain"] = plain
    plain_rate = plain["generated"] / plain["seconds"]
    rows.append(
        {
            "draft": "plain decoding",
            "layout": "",
            "k": "",
            "tau vLLM": "",
            "tau elsi": "",
            "tok/s": round(plain_rate, 1),
            "vs plain": 1.0,
            "outputs equal to elsi's": "",
        }
    )
    for method, entry in plan["drafts"].items():
        results["drafts"][method] = {}
        for fmt, folder in entry["folders"].items():
            for k in plan["chains"] if fmt == "speculators" else plan["chains"][-1:]:
                r = run_vllm(plan, folder, k, out=out)
                elsi = entry["elsi"][str(k)]
                tau_vllm = 1 + r["num_accepted_tokens"] / max(1, r["num_drafts"])
                tau_elsi = 1 + elsi["accepted"] / max(1, elsi["rounds"])
                lossless = r["tokens"] == plain["tokens"]
                same_as_elsi = sum(a == b for a, b in zip(r["tokens"], elsi["tokens"]))
                rate = r["generated"] / r["seconds"]
                results["drafts"][method][f"{fmt} k={k}"] = {
                    **r,
                    "tau_vllm": tau_vllm,
                    "tau_elsi": tau_elsi,
                    "lossless": lossless,
                    "questions_equal_to_elsi": same_as_elsi,
                }
                rows.append(
                    {
                        "draft": entry.get("label", method),
                        "layout": fmt,
                        "k": k,
                        "tau vLLM": round(tau_vllm, 3),
                        "tau elsi": round(tau_elsi, 3),
                        "tok/s": round(rate, 1),
                        "vs plain": round(rate / plain_rate, 2),
                        "outputs equal to elsi's": same_as_elsi,
                    }
                )
                print(
                    f"{method} {fmt} k={k}: lossless {lossless}, tau vLLM {tau_vllm:.3f} elsi {tau_elsi:.3f}, "
                    f"{rate:.1f} tok/s ({rate / plain_rate:.2f}x), elsi's tokens on {same_as_elsi} questions",
                    flush=True,
                )
                exported = json.loads((Path(folder) / "config.json").read_text())["eagle_aux_hidden_state_layer_ids"]
                if r["aux_layers"] != ("config", exported):
                    failures.append(
                        f"{method} {fmt} k={k}: vLLM captured {r['aux_layers']} (from its log), not the "
                        f"exported ids {exported}"
                    )
                if not lossless:
                    failures.append(f"{method} {fmt} k={k}: vLLM's output with the draft differs from without it")
                if abs(tau_vllm - tau_elsi) > TOLERANCE:
                    failures.append(
                        f"{method} {fmt} k={k}: vLLM's acceptance length {tau_vllm:.3f} vs elsi's "
                        f"{tau_elsi:.3f} (tolerance {TOLERANCE})"
                    )
    (out / "results.json").write_text(json.dumps(results, indent=1))
    replies = plan.get("reply_check")  # the small drafts' run only
    record = write(
        name,
        {
            "questions": len(plan["prompts"]),
            "max_tokens": plan["max_tokens"],
            "chains": plan["chains"],
            "dtype": "float32",
            "batch": 1,
            "tolerance": TOLERANCE,
            **({"greedy replies equal to transformers'": replies} if replies else {}),
        },
        rows,
        load_before=load_before,
    )
    print(record.with_suffix(".md").read_text())
    for f in failures:
        print("FAILED:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
