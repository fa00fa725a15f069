"""Benchmark results as committed files: `bench/results/<name>.json` (the machine, the date, the
settings and the measured rows) and `<name>.md` (the same rows as the Markdown table the README
quotes). Standalone (no elsi import), so that the engines' environment can use it too."""

from __future__ import annotations

import datetime
import json
import os
import platform
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # x86 flags of bf16 matmul instructions; machines of one name differ


def cpu_flags(path: str = "/proc/cpuinfo") -> set[str]:
    """The CPU's feature flags (the first processor's), empty where the file is not there."""
    try:
        text = Path(path).read_text()
    except OSError:
        return set()
    line = next((ln for ln in text.splitlines() if ln.startswith("flags")), "")
    return set(line.partition(":")[2].split())


def machine() -> dict:
    """Where and when a benchmark ran: CPU model, cores, its bf16 matmul flags, load averages before the
    run, versions."""
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "bf16 matmul flags": sorted(cpu_flags() & set(BF16_FLAGS)),
        "load_1_5_15": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
    }
    try:
        import torch

        info["torch"] = torch.__version__
        info["torch_threads"] = torch.get_num_threads()
    except ImportError:
        pass
    return info


def markdown_table(rows: list[dict]) -> str:
    """The rows as a Markdown table, columns in the first row's order."""
    if not rows:
        return ""
    columns = list(rows[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(r.get(c, "")) for c in columns) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def write(
    name: str,
    settings: dict,
    rows: list[dict],
    *,
    load_before: list | None = None,
    notes: str = "",
    folder: Path = RESULTS,
    machine_info: dict | None = None,
    details: dict | None = None,
) -> Path:
    """Write `<folder>/<name>.json` and `.md`; `load_before`: the load averages when the run began
    (default: now); `details`: what the JSON keeps beside the rows and the table leaves out (per-question
    output digests, say). Returns the JSON file's path."""
    folder.mkdir(parents=True, exist_ok=True)
    info = machine_info or machine()  # machine_info: a record's own, when its rows are recomputed
    if load_before is not None:
        info["load_1_5_15"] = load_before
    record = {"benchmark": name, "machine": info, "settings": settings, "rows": rows, "notes": notes}
    if details:
        record["details"] = details
    path = folder / f"{name}.json"
    path.write_text(json.dumps(record, indent=1) + "\n")
    header = (
        f"{name}: {info['date']}, {info['cpu']} ({info['cores']} cores"
        + (f", bf16 matmul: {' '.join(info['bf16 matmul flags'])}" if info.get("bf16 matmul flags") else "")
        + "), load before the run "
        f"{' / '.join(map(str, info['load_1_5_15']))}; settings {json.dumps(settings)}\n\n"
    )
    (folder / f"{name}.md").write_text(header + markdown_table(rows) + (f"\n{notes}\n" if notes else ""))
    return path


def read(name: str, folder: Path = RESULTS) -> dict:
    return json.loads((folder / f"{name}.json").read_text())
