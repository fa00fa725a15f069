"""`make test-openvino`, step 2 (OpenVINO GenAI's own environment, .venv-openvino): OpenVINO GenAI's
EAGLE-3 pipeline on the CPU is a referee of elsi's drafts, chains and token trees. Reads
build/engines-openvino/plan.json (`engines/prepare.py --formats openvino,eagle`) and checks:

1. conversion: the target and each draft's "openvino" export (`elsi_lib.draft.export`) go to IR through
   optimum-intel (`optimum-cli export openvino --task text-generation-with-past --weight-format fp32
   --trust-remote-code`: the draft's architecture loads optimum-intel's own LlamaEagle3ForCausalLM), and
   the draft's layer ids are written into the draft IR's rt_info (`hidden_layers_list`), where the
   pipeline reads them (openvino.genai `eagle3_model_transforms.cpp`, `apply_eagle3_rt_info`). A folder
   that is not elsi's openvino export (a vLLM layout, say) is refused, naming its layout;
2. the layers: OpenVINO taps, for id k, the first node of the target IR that is a residual Add of a
   MatMul of a Multiply and whose name holds "layers.<k>/" (`is_hidden_state_residual_node`,
   `find_decoder_layer_hidden_state_outputs`; the rule is replicated here). Those nodes, made outputs of
   the target IR, equal transformers' hidden_states[k + 1] (the output of decoder layer k, elsi's id k)
   on a prompt, so the ids OpenVINO reads are the ones the draft was trained on;
3. lossless: at temperature 0 the pipeline's tokens with the draft equal its tokens without it, for
   every chain (num_assistant_tokens = k) and every token tree (tree_depth, branching_factor,
   num_assistant_tokens as the tree's size); a lossy run gets no speed-up in the table;
4. acceptance: tokens per target forward agree with elsi's own loop on the same prompts (within
   TOLERANCE), and the pipeline reads the ids from the IR: the same draft stamped with a layer the
   target lacks is refused (were they ignored, it would run on its default {2, N/2, N-3}); a control
   with the same weights on ids one layer off is measured beside them (informational: a weak draft may
   not tell neighbouring layers apart, which the taps in 2 do);
5. wall clock: tokens/s with and without each draft, one question at a time, float32 inference
   (INFERENCE_PRECISION_HINT f32, so that plain and speculative decoding compute the same logits).

Exit status 0 when every check passes; IRs and results in build/engines-openvino/, the table in
bench/results/engines_openvino.json and .md.

    .venv-openvino/bin/python engines/check_openvino.py [--out build/engines-openvino]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from record import write  # noqa: E402  (standalone: no elsi import in this environment)

TOLERANCE = 0.05  # |OpenVINO's tokens per target forward - elsi's| on the same chains
PRECISION = {"INFERENCE_PRECISION_HINT": "f32"}
CHAIN_AS_TREE = (4, 1, 4)  # tree_depth 4, branching_factor 1, 4 tokens: a chain of 4 built as a tree
TAP_TOLERANCE = 1e-4  # relative: two float32 implementations of one forward; a neighbouring layer differs by O(1)
OPTIMUM_CLI = Path(sys.executable).parent / "optimum-cli"


class NotAnOpenvinoExport(ValueError):
    """A draft folder that is not elsi's "openvino" layout."""


def draft_layers(folder: Path) -> list[int]:
    """The layer ids of an elsi "openvino" export (its config's hidden_layers_list), after checking
    that elsi wrote it in that layout."""
    record = json.loads((folder / "elsi.json").read_text()) if (folder / "elsi.json").is_file() else {}
    if record.get("format") != "openvino":
        raise NotAnOpenvinoExport(
            f"{folder}: a draft exported as {record.get('format', 'something other than elsi')!r}, not 'openvino': "
            "OpenVINO GenAI reads its layers as outputs of decoder layers and its weights under optimum-intel's "
            "names; export it with save_draft(..., format='openvino')"
        )
    ids = json.loads((folder / "config.json").read_text())["hidden_layers_list"]
    if len(ids) != 3:
        raise NotAnOpenvinoExport(f"{folder}: {len(ids)} layers {ids}; OpenVINO GenAI takes exactly three")
    return [int(i) for i in ids]


def folder_digest(folder: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(p for p in folder.iterdir() if p.is_file()):
        h.update(path.name.encode())
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()[:16]


def to_ir(source: Path, dest: Path, layers: list[int] | None = None) -> Path:
    """`source` (a transformers folder) converted to OpenVINO IR in `dest`, kept while the source's
    files and the layer ids are the same; a draft's `layers` go into the IR's rt_info."""
    import openvino as ov

    key = {"source": folder_digest(source), "layers": layers, "optimum": _version("optimum-intel")}
    stamp = dest / "elsi-ir.json"
    if stamp.is_file() and json.loads(stamp.read_text()) == key:
        return dest
    shutil.rmtree(dest, ignore_errors=True)
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    command = [str(OPTIMUM_CLI), "export", "openvino", "-m", str(source), "--task", "text-generation-with-past"]
    command += ["--weight-format", "fp32", "--trust-remote-code", str(tmp)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"optimum-cli could not convert {source}:\n{done.stderr[-3000:]}")
    if layers is not None:
        model = ov.Core().read_model(tmp / "openvino_model.xml")
        if not (model.has_rt_info("eagle3_mode") and model.get_rt_info("eagle3_mode").astype(str) == "True"):
            raise RuntimeError(f"{source}: optimum-intel did not convert it as an EAGLE-3 draft (no eagle3_mode)")
        model.set_rt_info(" ".join(map(str, layers)), ["hidden_layers_list"])
        stamped = tmp / "stamped"  # the read model maps openvino_model.bin: never write over it while it lives
        ov.save_model(model, stamped / "openvino_model.xml", compress_to_fp16=False)
        del model
        for name in ("openvino_model.xml", "openvino_model.bin"):
            os.replace(stamped / name, tmp / name)
        stamped.rmdir()
    stamp_tmp = tmp / "elsi-ir.json"
    stamp_tmp.write_text(json.dumps(key))
    tmp.rename(dest)
    return dest


def stamped_copy(draft_ir: Path, dest: Path, layers: list[int]) -> Path:
    """A copy of a converted draft IR whose rt_info names `layers` instead (no second conversion)."""
    import openvino as ov

    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(draft_ir, dest)
    model = ov.Core().read_model(draft_ir / "openvino_model.xml")
    model.set_rt_info(" ".join(map(str, layers)), ["hidden_layers_list"])
    for name in ("openvino_model.xml", "openvino_model.bin"):
        (dest / name).unlink()
    ov.save_model(model, dest / "openvino_model.xml", compress_to_fp16=False)
    (dest / "elsi-ir.json").unlink(missing_ok=True)  # not a conversion to_ir may reuse
    return dest


def refusal(target_ir: Path, draft_ir: Path, prompt: list[int]) -> str:
    """The pipeline's error when built (and asked for two tokens) with `draft_ir`, "" if it ran."""
    try:
        run(pipeline(target_ir, draft_ir), [prompt], config(2, chain=1))
    except Exception as err:  # noqa: BLE001 (what the engine says, recorded)
        return f"refused: {type(err).__name__}: {str(err).strip().splitlines()[-1][:200]}"
    return ""


def _version(package: str) -> str:
    from importlib.metadata import version

    return version(package)


def residual_taps(target_ir: Path, layers: list[int]) -> list[str]:
    """The target IR's nodes OpenVINO taps for `layers` (its rule, replicated: the first residual Add of
    a MatMul of a Multiply whose friendly name holds "layers.<k>/")."""
    import openvino as ov

    model = ov.Core().read_model(target_ir / "openvino_model.xml")
    found: dict[int, str] = {}
    for node in model.get_ordered_ops():
        if node.get_type_name() != "Add":
            continue
        matmul = node.input_value(1).get_node()
        if matmul.get_type_name() != "MatMul" or matmul.input_value(0).get_node().get_type_name() != "Multiply":
            continue
        for k in layers:
            if k not in found and f"layers.{k}/" in node.get_friendly_name():
                found[k] = node.get_friendly_name()
                break
    return [found.get(k, "") for k in layers]


def check_taps(target_ir: Path, target_hf: str, layers: list[int], prompt: list[int]) -> float:
    """The largest relative difference (max |OpenVINO tap - transformers'| / max |transformers'|) between
    the target IR's taps for `layers` and the outputs of those decoder layers in transformers (a forward
    hook on each layer: the last layer's output is before the final norm, as the tap is), on `prompt`;
    inf where a tap is missing."""
    import openvino as ov
    import torch
    from transformers import AutoModelForCausalLM

    names = residual_taps(target_ir, layers)
    if not all(names):
        return float("inf")
    core = ov.Core()
    model = core.read_model(target_ir / "openvino_model.xml")
    by_name = {n.get_friendly_name(): n for n in model.get_ordered_ops()}
    model.add_outputs([by_name[n].output(0) for n in names])
    compiled = core.compile_model(model, "CPU", PRECISION)
    ids = np.array([prompt], dtype=np.int64)
    feed = {"input_ids": ids, "attention_mask": np.ones_like(ids), "position_ids": np.arange(ids.shape[1])[None]}
    feed["beam_idx"] = np.zeros(1, dtype=np.int32)
    wanted = {i.any_name for i in compiled.inputs}
    out = compiled.create_infer_request().infer({k: v for k, v in feed.items() if k in wanted})
    taps = [out[compiled.outputs[len(compiled.outputs) - len(names) + j]] for j in range(len(names))]
    hf = AutoModelForCausalLM.from_pretrained(target_hf, dtype=torch.float32)
    outputs = {}
    hooks = [
        hf.model.layers[k].register_forward_hook(
            lambda _m, _i, o, k=k: outputs.__setitem__(k, (o[0] if isinstance(o, tuple) else o).numpy())
        )
        for k in layers
    ]
    with torch.no_grad():
        hf(torch.tensor(ids))
    for hook in hooks:
        hook.remove()
    return max(float(np.abs(t - outputs[k]).max() / np.abs(outputs[k]).max()) for t, k in zip(taps, layers))


def pipeline(target_ir: Path, draft_ir: Path | None):
    import openvino_genai as g

    if draft_ir is None:
        return g.LLMPipeline(str(target_ir), "CPU", **PRECISION)
    scheduler = g.SchedulerConfig()
    scheduler.cache_size = 1  # GB of KV cache: one question at a time
    draft = g.draft_model(str(draft_ir), "CPU", **PRECISION)
    return g.LLMPipeline(str(target_ir), "CPU", draft_model=draft, scheduler_config=scheduler, **PRECISION)


def config(max_tokens: int, chain: int | None = None, tree: tuple | None = None):
    """A greedy GenerationConfig: plain, a chain of `chain` drafted tokens, or an EAGLE-2 tree (depth,
    top_k, nodes). A setting the pipeline does not accept is refused naming it (its own `validate`)."""
    import openvino_genai as g

    gc = g.GenerationConfig()
    gc.max_new_tokens, gc.do_sample = max_tokens, False
    if chain is not None:
        gc.num_assistant_tokens = chain
    if tree is not None:
        gc.tree_depth, gc.branching_factor, gc.num_assistant_tokens = tree
    try:
        gc.validate()
    except Exception as err:  # noqa: BLE001 (the pipeline's own refusal, named)
        raise ValueError(f"OpenVINO GenAI refuses chain={chain} tree={tree} (depth, branching, size): {err}") from err
    return gc


def run(pipe, prompts: list[list[int]], gc) -> dict:
    """Greedy generation of every prompt, one at a time: tokens, seconds, accepted draft tokens."""
    import openvino as ov
    import openvino_genai as g

    def one(prompt):
        ids = np.array([prompt], dtype=np.int64)
        return pipe.generate(g.TokenizedInputs(ov.Tensor(ids), ov.Tensor(np.ones_like(ids))), gc)

    one(prompts[0])  # warm-up
    tokens, accepted, seconds, prefill = [], 0, [], []
    for prompt in prompts:
        start = time.perf_counter()
        result = one(prompt)
        seconds.append(time.perf_counter() - start)
        prefill.append(result.perf_metrics.get_ttft().mean / 1000)  # the prompt's forward and first token (ms)
        tokens.append([int(t) for t in result.tokens[0]])
        metrics = result.extended_perf_metrics
        accepted += int(metrics.get_num_accepted_tokens()) if metrics is not None else 0
    generated = sum(map(len, tokens))
    rounds = generated - len(tokens) - accepted  # each question: the prefill's token, then accepted + 1 a round
    return {
        "tokens": tokens,
        "seconds": sum(seconds),
        "question_seconds": seconds,
        "prefill_seconds": prefill,
        "generated": generated,
        "accepted": accepted,
        "rounds": rounds,
    }


def tree_name(tree) -> str:
    """A tree's key in plan.json (engines/prepare.py's `tree_name`)."""
    return "tree depth {}, top-{}, {} nodes".format(*tree)


def tokens_digest(tokens: list[list[int]]) -> list[str]:
    return [hashlib.sha256(json.dumps(t).encode()).hexdigest()[:16] for t in tokens]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path("build/engines-openvino"))
    parser.add_argument("--name", default="engines_openvino", help="the benchmark record's name")
    args = parser.parse_args()
    load_before = [round(x, 2) for x in os.getloadavg()]
    plan = json.loads((args.out / "plan.json").read_text())
    failures, rows, results = [], [], {}
    target_ir = to_ir(Path(plan["target"]), args.out / "target-ir")
    prompts, max_tokens = plan["prompts"], plan["max_tokens"]

    for method, entry in plan["drafts"].items():
        if "eagle" in entry["folders"]:  # a vLLM layout given to OpenVINO: refused, naming the layout
            try:
                draft_layers(Path(entry["folders"]["eagle"]))
                failures.append(f"{method}: the vLLM ('eagle') layout was not refused")
            except NotAnOpenvinoExport as err:
                print(f"refused as it should be: {err}", flush=True)

    plain = run(pipeline(target_ir, None), prompts, config(max_tokens))
    plain_rate = plain["generated"] / plain["seconds"]
    results["plain"] = {**plain, "digests": tokens_digest(plain["tokens"])}
    rows.append({"draft": "plain decoding", "decoding": "", "tau OpenVINO": "", "tau elsi": "", "lossless": ""})
    rows[-1].update({"tok/s": round(plain_rate, 1), "vs plain": 1.0})

    for method, entry in plan["drafts"].items():
        folder = Path(entry["folders"]["openvino"])
        layers = draft_layers(folder)
        if layers != entry["layers_elsi"]:
            failures.append(
                f"{method}: the export's hidden_layers_list {layers} is not the draft's {entry['layers_elsi']}"
            )
        error = check_taps(target_ir, plan["target"], layers, prompts[0])
        print(
            f"{method}: OpenVINO's taps for {layers} vs transformers' outputs of those layers: {error:.2e} (relative)"
        )
        if not error < TAP_TOLERANCE:
            failures.append(f"{method}: OpenVINO's taps for ids {layers} are not the outputs of those layers ({error})")
        draft_ir = to_ir(folder, args.out / f"{method}-ir", layers)
        n_layers = json.loads((Path(plan["target"]) / "config.json").read_text())["num_hidden_layers"]
        step = 1 if max(layers) + 1 < n_layers else -1  # one layer deeper (or shallower, at the last layer)
        shifted = [k + step for k in layers]
        control_ir = stamped_copy(draft_ir, args.out / f"{method}-control-ir", shifted)
        # the pipeline reads the IR's ids: the same draft stamped with a layer the target lacks must be refused
        # (were the rt_info ignored, OpenVINO would take its default {2, N/2, N-3} and run)
        probe_ir = stamped_copy(draft_ir, args.out / f"{method}-missing-layer-ir", [*layers[:2], n_layers])
        refused = refusal(target_ir, probe_ir, prompts[0])
        results[method + " ids read"] = refused
        print(f"{method}: a draft IR naming layer {n_layers} of {n_layers}: " + (refused or "accepted"), flush=True)
        if not refused:
            failures.append(
                f"{method}: OpenVINO GenAI ran a draft naming layer {n_layers}: it does not read the IR's ids"
            )
        pipe = pipeline(target_ir, draft_ir)
        results[method] = {"layers": layers, "taps_max_diff": error}
        # chains of k, and plan.json's EAGLE-2 trees (depth, top_k, nodes) as OpenVINO builds them: tree_depth,
        # branching_factor (each frontier node's top children, the best of them kept), num_assistant_tokens
        settings = [("chain", k, str(k), config(max_tokens, chain=k)) for k in plan["chains"]]
        settings += [("tree", tuple(t), tree_name(t), config(max_tokens, tree=tuple(t))) for t in plan.get("trees", [])]
        # a chain through the tree path (one child per node): tells a tree's own failure from the path's
        settings += [("tree", CHAIN_AS_TREE, tree_name(CHAIN_AS_TREE), config(max_tokens, tree=CHAIN_AS_TREE))]
        for kind, setting, key, gc in settings:
            try:
                r = run(pipe, prompts, gc)
            except Exception as err:  # noqa: BLE001 (the engine's own refusal or failure, recorded and named)
                failures.append(f"{method} {key}: OpenVINO GenAI failed: {type(err).__name__}: {err}")
                print(failures[-1], flush=True)
                continue
            lossless = r["tokens"] == plain["tokens"]
            tau = (r["generated"] - len(prompts)) / max(1, r["rounds"])
            elsi = entry["elsi"].get(key)
            tau_elsi = None
            if elsi is not None:  # elsi's loop on the same prompts, the same tree: tokens per target forward
                tau_elsi = sum(len(t) - 1 for t in elsi["tokens"]) / max(1, elsi["rounds"])
                if abs(tau - tau_elsi) > TOLERANCE:
                    failures.append(f"{method} {key}: tau OpenVINO {tau:.3f} vs elsi {tau_elsi:.3f}")
            if not lossless:
                failures.append(f"{method} {kind} {setting}: output differs from plain greedy decoding")
            rate = r["generated"] / r["seconds"]
            name = f"chain k={setting}" if kind == "chain" else key
            results[method][name] = {**r, "tau": tau, "tau_elsi": tau_elsi, "lossless": lossless,
                                     "digests": tokens_digest(r["tokens"])}  # fmt: skip
            rows.append(
                {
                    "draft": f"{entry.get('label', method)} {tuple(layers)}",
                    "decoding": name,
                    "tau OpenVINO": round(tau, 3),
                    "tau elsi": "" if tau_elsi is None else round(tau_elsi, 3),
                    "lossless": lossless,
                    "tok/s": round(rate, 1),
                    "vs plain": round(rate / plain_rate, 2) if lossless else "lossy: none",
                }
            )
            print(rows[-1], flush=True)
        del pipe
        longest = results[method].get(f"chain k={plan['chains'][-1]}")
        if longest is None:
            failures.append(f"{method}: no control: its longest chain did not run")
            continue
        control = run(pipeline(target_ir, control_ir), prompts, config(max_tokens, chain=plan["chains"][-1]))
        tau_control = (control["generated"] - len(prompts)) / max(1, control["rounds"])
        chain_tau = longest["tau"]
        results[method]["control"] = {
            "layers": shifted,
            "tau": tau_control,
            "lossless": control["tokens"] == plain["tokens"],
        }
        print(f"{method}: control draft on {shifted}: tau {tau_control:.3f} (the exported ids: {chain_tau:.3f})")
        rows.append(
            {
                "draft": f"{entry.get('label', method)} weights on {tuple(shifted)} (control)",
                "decoding": f"chain k={plan['chains'][-1]}",
                "tau OpenVINO": round(tau_control, 3),
                "tau elsi": "",
                "lossless": results[method]["control"]["lossless"],
                "tok/s": round(control["generated"] / control["seconds"], 1),
                "vs plain": round(control["generated"] / control["seconds"] / plain_rate, 2)
                if results[method]["control"]["lossless"]
                else "lossy: none",
            }
        )  # informational: a draft this weak may not tell its layers from their neighbours' (the taps decide)

    (args.out / "results.json").write_text(json.dumps(results, indent=1))
    record = write(
        args.name,
        {
            "questions": len(prompts),
            "max_tokens": max_tokens,
            "chains": plan["chains"],
            "trees (depth, top_k, nodes)": plan.get("trees", []),
            "precision": "f32 (weights and inference)",
            "batch": 1,
            "tolerance": TOLERANCE,
            "openvino-genai": _version("openvino-genai"),
            "optimum-intel": _version("optimum-intel"),
        },
        rows,
        load_before=load_before,
        notes="lossless: every question's tokens equal plain decoding's; the JSON's details hold each run's per-question "
        "output digests (sha256 of the token ids, first 16 hex digits) beside plain decoding's.",
        details={
            "ids read from the IR": {m[: -len(" ids read")]: v for m, v in results.items() if m.endswith(" ids read")},
            "output digests": {"plain": results["plain"]["digests"]}
            | {
                f"{m} {run}": v["digests"]
                for m, r in results.items()
                if m != "plain" and isinstance(r, dict)
                for run, v in r.items()
                if isinstance(v, dict) and "digests" in v
            },  # fmt: skip
        },
    )
    print(record.with_suffix(".md").read_text())
    for f in failures:
        print("FAILED:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
