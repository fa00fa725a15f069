"""The paper's accepted-token tables (Table 3 on Qwen2.5-Coder-0.5B, the strong Table 2 on SmolLM2) in
the paper's layout, built from the drafts' records: one row per method the protocol's records hold, per
temperature (0, 1) and tree size (30, 60 nodes): tau (accepted tokens per target forward) by SpecBench
column, seed-averaged, AVG with its seed-level 95% interval (`seed_stats.level`), the difference from
EAGLE3 with its seed-level interval (`seed_stats.difference`), the layers, the seeds behind the row and
the numeric settings the drafts ran under.

    python -m elsi_lib.study.ledger.paper_tables       data/results/<protocol>_records_<family>.{csv,md}
"""

from __future__ import annotations

import argparse
import sys

import pandas as pd

from ...common.results import result_path, results_dir
from .record_tables import final_rows
from ..paper.plots import CSV_FLOAT_FORMAT, markdown_table
from .draft_records import RecordError, read_records
from .protocols import PROTOCOLS
from .seed_stats import difference, level
from ..experiments.criteria_vs_drafts import BASELINE

# the protocols whose records make a paper table: Table 3's two numeric twins, the strong Table 2
TABLES = ("table3", "table3_f32", "table2_strong")
COLUMNS = ("MT", "Trans", "Sum", "QA", "M/R", "RAG")  # the paper's SpecBench columns, in its order


def paper_table(name: str) -> pd.DataFrame:
    """Protocol `name`'s table in the paper's layout (module docstring); empty without records."""
    records = read_records(name)
    if not records:
        return pd.DataFrame()
    rows = final_rows(records)
    numeric = "; ".join(f"{k}: {v}" for k, v in records[0]["numeric"].items())
    methods = list(dict.fromkeys([BASELINE, *rows.method]))  # EAGLE3 first, then the records' order
    out = []
    for T in sorted(rows.temperature.unique()):
        for nodes in sorted(rows.nodes.unique()):
            block = rows[(rows.temperature == T) & (rows.nodes == nodes)]
            for method in methods:
                mine = block[block.method == method]
                if mine.empty:
                    continue
                per_question = mine.groupby(["column", "question_id"]).tau.mean()  # seed-averaged
                by_column = per_question.groupby(level="column").mean()
                avg = level(rows, method, temperature=T, nodes=nodes)
                row = {
                    "protocol": name,
                    "family": records[0]["unit"]["family"],
                    "temperature": float(T),
                    "nodes": int(nodes),
                    "method": method,
                    "layers": mine.layers.iloc[0],
                    "seeds": " ".join(map(str, sorted(mine.seed.unique()))),
                    "prompts": int(mine.prompts.max()),
                    **{c: float(by_column.get(c, float("nan"))) for c in COLUMNS},
                    "AVG": avg["AVG"],
                    "AVG low": avg["low"],
                    "AVG high": avg["high"],
                }
                if method != BASELINE and BASELINE in set(block.method):
                    d = difference(rows, method, temperature=T, nodes=nodes)
                    row.update({"minus EAGLE3": d["diff"], "low": d["low"], "high": d["high"]})
                    row["seed level"] = d["seed level"]
                else:
                    row.update({"minus EAGLE3": float("nan"), "low": float("nan"), "high": float("nan")})
                    row["seed level"] = avg["seed level"]
                row["numeric"] = numeric
                out.append(row)
    return pd.DataFrame(out)


def markdown(table: pd.DataFrame) -> str:
    """The table as the docs show it: one block per temperature and tree size, tau to 3 decimals, the
    intervals in brackets."""
    parts = []
    for (T, nodes), block in table.groupby(["temperature", "nodes"], sort=True):
        show = block.assign(
            AVG=[f"{a:.3f} [{lo:.3f}, {hi:.3f}]" for a, lo, hi in zip(block.AVG, block["AVG low"], block["AVG high"])],
            **{
                "minus EAGLE3": [
                    "" if pd.isna(d) else f"{d:+.3f} [{lo:+.3f}, {hi:+.3f}]"
                    for d, lo, hi in zip(block["minus EAGLE3"], block.low, block.high)
                ]
            },
        )
        cols = ["method", "layers", "seeds", *COLUMNS, "AVG", "minus EAGLE3", "seed level"]
        parts.append(f"T = {T:g}, {nodes} nodes\n\n" + markdown_table(show[cols], digits=3))
    first = table.iloc[0]
    head = (
        f"{first.protocol} ({first.family}, {first.prompts:,} training prompts; {first.numeric}). "
        "seed level 'yes': the intervals hold the seed-to-seed variance (pooled over the protocol's reseeded "
        "methods) as well as the questions'; 'no': no method of the protocol has two seeds, so they hold the questions' only."
    )
    return head + "\n\n" + "\n\n".join(parts) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", metavar="PROTOCOL", help=f"default: {' '.join(TABLES)}")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in PROTOCOLS]
    if unknown:
        parser.error(f"unknown protocol(s) {unknown}; use some of {sorted(PROTOCOLS)}")
    args.names = args.names or list(TABLES)
    tables = {}
    try:  # every table made before any is written: a bad record leaves the committed ones as they were
        tables = {name: paper_table(name) for name in args.names}
    except (RecordError, ValueError) as err:
        sys.exit(f"paper tables: {err}")
    folder = results_dir()
    if not folder.is_dir():  # pandas would call a file "a non-existent directory"
        what = "is a file, not a folder" if folder.exists() else "does not exist"
        sys.exit(f"paper tables: results folder {folder} {what} (ELSI_RESULTS?)")
    for name, table in tables.items():
        if table.empty:
            print(f"{name}: no records")
            continue
        path = result_path(name, "records", table.family.iloc[0])
        table.to_csv(path, index=False, float_format=CSV_FLOAT_FORMAT)
        path.with_suffix(".md").write_text(markdown(table))
        print(f"wrote {path} ({len(table)} rows)")


if __name__ == "__main__":
    main()
