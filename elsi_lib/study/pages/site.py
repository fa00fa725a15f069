"""The documentation site's pages, generated from the committed results (`make docs`): one page per
paper figure and table (its figures, its tables, and the finding written from the data with its
interval), one per `elsi` command (its help), the Python API (docstrings) and the benchmarks.
`build(out)` writes the mkdocs source tree; a file a page needs that is missing fails the
build naming it (`MissingResult`).

    python -m elsi_lib.study.pages.site build/docs-src     (make docs, then mkdocs build)
"""

from __future__ import annotations

import inspect
import os
import shutil
import tempfile
import sys
from dataclasses import dataclass, field
from pathlib import Path


import elsi_lib

from ...common.cachefiles import REPO_ROOT, check_parents, replace_folder
from ...cli_args import build_parser
from ...common.results import results_dir
from . import speed_page
from .findings import (
    FAMILIES,
    MissingResult,
    compartments,
    criteria,
    drafts,
    families,
    filtering,
    ledger,
    selection,
    wave,
)
from .tables import table_markdown

FIGURES = REPO_ROOT / "figures"
BENCH = REPO_ROOT / "bench" / "results"


@dataclass(frozen=True)
class Page:
    """One paper figure or table: its notebook, figures (stems in figures/) and tables (stems in data/results/)."""

    slug: str
    title: str
    notebook: str
    figures: tuple = ()
    tables: tuple = ()
    finding: object = field(default=None, compare=False)  # (results folder) -> markdown lines


PAGES = (
    Page(
        "fig01-02",
        "Fig. 1-2: the activation wave",
        "01_activation_wave.ipynb",
        ("fig01_activation_wave", "fig02_layer_entropy_families"),
        ("fig02_layer_entropy_summary",),
        wave,
    ),
    Page("fig03", "Fig. 3: pair entropy", "02_pair_entropy.ipynb", ("fig03_pair_entropy",), ("fig03_pair_gains",)),
    Page(
        "fig04",
        "Fig. 4: token filtering",
        "03_token_filtering.ipynb",
        tuple(f"fig04_token_filtering_{f}" for f in FAMILIES),
        ("fig04_variance_reduction",),
        filtering,
    ),
    Page(
        "fig05-06",
        "Fig. 5-6: CKA compartments",
        "04_cka_compartments.ipynb",
        ("fig05_cka_compartments", "fig06_transition_scores"),
        ("fig05_boundaries",),
        compartments,
    ),
    Page(
        "table1",
        "Table 1 and Fig. 7: layer selection",
        "05_layer_selection.ipynb",
        ("fig07_beam_frontier",),
        ("table1_layer_selection", "table1_bootstrap"),
        selection,
    ),
    Page(
        "table2",
        "Table 2: accepted tokens on SmolLM2-135M",
        "06_accepted_tokens.ipynb",
        ("fig08_tau_by_column_smollm2-135m",),
        ("table2_accepted_tokens_smollm2-135m", "table2_paired_smollm2-135m"),
        drafts(("smollm2-135m",), ("elsi", "elsi-c")),
    ),
    Page(
        "table3",
        "Table 3: accepted tokens on Qwen2.5-Coder-0.5B",
        "06_accepted_tokens.ipynb",
        ("fig08_tau_by_column_qwen2.5-coder-0.5b",),
        (
            "table3_f32_records_qwen2.5-coder-0.5b",
            "table3_records_qwen2.5-coder-0.5b",
            "table3_accepted_tokens_qwen2.5-coder-0.5b",
            "table3_paired_qwen2.5-coder-0.5b",
        ),
        drafts(("qwen2.5-coder-0.5b",)),
    ),
    Page(
        "strong",
        "Strong drafts and the learning curve (Fig. 9)",
        "07_strong_drafts.ipynb",
        ("fig09_learning_curve_smollm2-135m",),
        (
            "table2_strong_records_smollm2-135m",
            "table2_strong_paired_smollm2-135m",
            "table2_learning_curve_smollm2-135m",
        ),
        drafts(("smollm2-135m",)),
    ),
    Page(
        "criteria",
        "Fig. 10: which criterion predicts the drafts",
        "08_selection_criteria.ipynb",
        ("fig10_criteria_vs_drafts",),
        ("criteria_rank_correlations",),
        criteria,
    ),
    Page(
        "families",
        "Fig. 11: the layer choice per family",
        "09_families.ipynb",
        ("fig11_families",),
        ("families_compared", "families_interchangeability"),
        families,
    ),
    Page(
        "ledger",
        "The drafts behind the tables: records and the criteria out of sample",
        "10_ledger.ipynb",
        (),
        ("comparisons_seed_level", "ledger_findings", "criteria_pooled"),
        ledger,
    ),
)


def figure_page(page: Page, folder: Path, images: Path) -> str:
    """A figure or table page: title, notebook, finding (from the data), figures, tables."""
    lines = [f"# {page.title}", "", f"Notebook: `notebooks/{page.notebook}`.", ""]
    if page.finding is not None:
        lines += ["## Finding", "", *page.finding(folder), ""]
    for stem in page.figures:
        source = FIGURES / f"{stem}.png"
        if not source.is_file():
            raise MissingResult(f"{source}: the page {page.slug} shows it (run `make figures` or its notebook)")
        shutil.copy2(source, images / source.name)
        lines += [f"![{stem}](images/{source.name})", ""]
    for stem in page.tables:
        lines += [f"## `{stem}`", "", table_markdown(folder, stem), ""]
    return "\n".join(lines)


def command_page(name: str) -> str:

    parser = build_parser()
    sub = next(a for a in parser._subparsers._group_actions if a.dest == "command").choices[name]
    return f"# elsi {name}\n\n```\n{sub.format_help()}```\n"


def api_page() -> str:

    lines = [
        "# Python API",
        "",
        "The public names of `elsi_lib` (its `__init__` gathers them), with their docstrings.",
        "",
    ]
    for name in sorted(n for n in dir(elsi_lib) if not n.startswith("_")):
        obj = getattr(elsi_lib, name)
        if not (inspect.isfunction(obj) or inspect.isclass(obj)):
            continue
        try:
            signature = str(inspect.signature(obj))
        except (TypeError, ValueError):
            signature = "(...)"
        lines += [f"## `{name}{signature}`", "", inspect.getdoc(obj) or "(no docstring)", ""]
    return "\n".join(lines)


def bench_page(folder: Path = BENCH) -> str:
    """Each benchmark record's table (`speed_page.table`: made from the JSON, checked, never from the .md)."""
    lines = ["# Benchmarks", "", "Each benchmark's last run (`bench/results/`): machine, date, load and rows.", ""]
    odd = sorted(p.name for p in Path(folder).iterdir() if p.suffix.lower() == ".json" and p.suffix != ".json")
    if odd:  # the pages list "*.json": a record named otherwise would be left out without a word
        raise ValueError(f"{folder}: {odd} end in another spelling of .json: name each record NAME.json")
    for path in sorted(Path(folder).glob("*.json")):
        lines += [f"## `{path.stem}`", "", speed_page.table(path), ""]
    return "\n".join(lines)


def home_page(pages) -> str:
    try:
        readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"{REPO_ROOT / 'README.md'}: not readable UTF-8 text ({err})") from None
    index = ["", "## Pages", ""] + [f"- [{p.title}]({p.slug}.md)" for p in pages]
    return readme + "\n".join(index) + "\n"


MKDOCS = """site_name: elsi
site_description: which hidden layers should your draft model see?
docs_dir: docs
theme:
  name: material
  features: [navigation.sections]
extra_javascript: [checks.js]
nav:
{nav}
"""
# what the browser check reads back: every image decoded (naturalWidth > 0), set on <body> once loaded
CHECKS_JS = """window.addEventListener("load", function () {
  var images = Array.prototype.slice.call(document.images);
  var broken = images.filter(function (i) { return !(i.complete && i.naturalWidth > 0); });
  document.body.setAttribute("data-images", images.length);
  document.body.setAttribute("data-broken-images", broken.map(function (i) { return i.src; }).join(" "));
});
"""


MARKER = ".elsi-pages"  # in every folder the builder wrote: the only kind it ever replaces


def _check_foreign(out: Path, files: list[str] | None) -> None:
    """FileExistsError where `out` holds a file the pages builder did not write: anything in a folder
    without its MARKER; beside a marker, a file its last build did not list (an older builder's marker
    lists none: judged by `files`, what this build writes, and not before they are known: None)."""
    if not out.is_dir() or not any(out.iterdir()):
        return
    marker = out / MARKER
    if marker.is_symlink() or not marker.is_file():
        raise FileExistsError(
            f"{out} holds files the pages builder did not write: give it a new or empty folder (make docs: build/docs-src)"
        )
    written = [line for line in marker.read_text().splitlines()[1:] if line] or files
    if written is None:
        return
    foreign = sorted(_contents(out) - _with_folders(written))
    if foreign:
        raise FileExistsError(
            f"{out} holds {foreign[:5]}{' ...' if len(foreign) > 5 else ''}, which the pages builder did not "
            "write: move them out (the builder replaces its folder whole), or give it another folder"
        )


def build(out: Path, folder: Path | None = None, bench: Path | None = None) -> list[Path]:
    """Write the site's source (mkdocs.yml and docs/) as the folder `out`; returns the pages written.
    The site is written into a fresh folder beside `out` and replaces it only once complete: a failed
    build leaves the previous site as it was. `out` must be new, empty, or a site this builder wrote
    (its MARKER): a folder holding anything else (a checkout, say) is refused, never emptied. `folder`: the
    results the paper's pages read (data/results); `bench`: the benchmark records the wall-clock and
    benchmark pages read (bench/results)."""
    out = Path(out)
    check_parents(out)
    folder = Path(folder) if folder is not None else results_dir()
    if not folder.is_dir():
        raise MissingResult(f"{folder}: no results folder there (the notebooks write data/results)")
    bench = Path(bench) if bench is not None else BENCH
    if not bench.is_dir():
        raise MissingResult(f"{bench}: no benchmark records there (bench/results)")
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise FileExistsError(
            f"{out} is a {'link' if out.is_symlink() else 'file'}, not a folder: the pages builder writes a folder "
            "there and replaces only a folder it wrote (give it a new or empty folder)"
        )
    _check_foreign(out, None)
    out.parent.mkdir(parents=True, exist_ok=True)
    fresh = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    umask = os.umask(0)
    os.umask(umask)
    fresh.chmod(0o777 & ~umask)  # a site others (a web server) can read, as mkdir would make it, not mkdtemp's 0700
    try:
        names = _write_site(fresh, folder, bench)
        files = sorted(str(p.relative_to(fresh)) for p in fresh.rglob("*") if p.is_file())
        _check_foreign(out, files)  # again: a file saved there while the site was built is not deleted either
        (fresh / MARKER).write_text(
            "written by elsi_lib.study.pages.site: replaced whole by the next build; the files it wrote:\n"
            + "".join(f"{f}\n" for f in files)
        )
    except BaseException:
        shutil.rmtree(fresh, ignore_errors=True)
        raise
    replace_folder(fresh, out)
    return [out / "docs" / name for name in names]


def _contents(root: Path) -> set[str]:
    """What is under `root` (relative): files and links by name, folders as "name/" (an empty folder of
    a user's is something the builder did not write too), its marker aside."""
    return {str(p.relative_to(root)) + ("/" if p.is_dir() and not p.is_symlink() else "") for p in root.rglob("*")} - {
        MARKER
    }


def _with_folders(files) -> set[str]:
    """`files` and every folder they lie in ("name/"), with the folders every build makes."""
    folders = {f"{parent}/" for f in files for parent in Path(f).parents if str(parent) != "."}
    return set(files) | folders | {"docs/", "docs/images/"}


def _write_site(out: Path, folder: Path, bench: Path) -> list[str]:
    docs = out / "docs"
    (docs / "images").mkdir(parents=True)
    written = {}
    for page in PAGES:
        written[f"{page.slug}.md"] = figure_page(page, folder, docs / "images")
    for name in ("select", "capture", "report"):
        written[f"command-{name}.md"] = command_page(name)
    written["api.md"] = api_page()
    written["benchmarks.md"] = bench_page(bench)
    written["speed.md"] = speed_page.page(docs / "images", bench)
    written["index.md"] = home_page(PAGES)
    for name, text in written.items():
        (docs / name).write_text(text)
    (docs / "checks.js").write_text(CHECKS_JS)
    nav = ["  - Home: index.md", "  - Paper figures and tables:"] + [f"    - '{p.title}': {p.slug}.md" for p in PAGES]
    nav += ["  - Commands:"] + [f"    - elsi {n}: command-{n}.md" for n in ("select", "capture", "report")]
    nav += ["  - Python API: api.md", "  - Wall clock: speed.md", "  - Benchmarks: benchmarks.md"]
    (out / "mkdocs.yml").write_text(MKDOCS.format(nav="\n".join(nav)))
    return list(written)


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else REPO_ROOT / "build" / "docs-src")
    try:
        pages = build(target)
    except (MissingResult, FileExistsError, NotADirectoryError, ValueError) as err:
        sys.exit(f"make docs: {err}")
    print(f"{len(pages)} pages in {target / 'docs'}")
