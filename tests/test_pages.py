"""The documentation site's generator (elsi_lib.study.pages.site): every page is written from the committed
results, a changed number in the data changes the page (and, across 0, its verdict), and a results
file a page needs that is missing fails the build naming it. (`make docs` builds the site from these
pages and opens each in headless Chromium: docs/check_site.py.)"""

import hashlib
import json
import re
import shutil

import pandas as pd
import pytest

from elsi_lib.common.results import results_dir
from elsi_lib.draft import evidence as ev
from elsi_lib.common.cachefiles import REPO_ROOT
from elsi_lib.study.pages import findings, site, tables


@pytest.fixture(autouse=True)
def committed_records(monkeypatch):
    """The pages check the ledger's tables against the committed records: read them (never written)."""
    monkeypatch.setenv("ELSI_DRAFT_RECORDS", str(REPO_ROOT / "data" / "drafts"))


def _elsi_row(evidence: dict) -> dict:
    return next(
        c
        for c in evidence["comparisons"]
        if c["protocol"] == "table3_f32" and c["method"] == "ELSI m=3" and c["nodes"] == 60 and c["temperature"] == 0
    )


def test_every_page_is_written_from_the_committed_results(tmp_path):
    written = site.build(tmp_path / "site")
    names = {p.name for p in written}
    assert {f"{p.slug}.md" for p in site.PAGES} <= names
    assert {"index.md", "api.md", "benchmarks.md", "command-select.md"} <= names
    table3 = (tmp_path / "site" / "docs" / "table3.md").read_text()
    row = _elsi_row(ev.load())  # the seed-level comparison, from the evidence file
    assert f"{row['diff']:+.3f} [{row['low']:+.3f}, {row['high']:+.3f}]" in table3
    assert "3 seeds against EAGLE3's 3" in table3
    assert "table3_f32_records_qwen2.5-coder-0.5b" in table3  # Table 3 in the paper's layout, from the records
    assert "](images/fig08_tau_by_column_qwen2.5-coder-0.5b.png)" in table3
    assert (tmp_path / "site" / "docs" / "images" / "fig08_tau_by_column_qwen2.5-coder-0.5b.png").is_file()
    assert "--engine" in (tmp_path / "site" / "docs" / "command-select.md").read_text()


def test_an_evidence_file_the_records_do_not_give_is_refused(tmp_path, monkeypatch):
    """The findings quote the evidence file: one whose comparison was changed (its fits and checksum
    rewritten, as `make evidence` would, and the comparisons table beside it) is not what the committed
    records give, and is refused naming it; the pages never quote it."""
    from elsi_lib.study.ledger.evidence_file import comparisons_table, criterion_models
    from elsi_lib.study.paper.plots import csv_text

    evidence = json.loads(ev.EVIDENCE_PATH.read_text())
    row = _elsi_row(evidence)
    half = row["high"] - row["diff"]
    row.update(diff=0.01, low=0.01 - half, high=0.01 + half)  # the same interval's width, moved
    evidence["models"] = json.loads(json.dumps(criterion_models(pd.DataFrame(evidence["comparisons"]))))
    payload = {k: v for k, v in evidence.items() if k != "checksum"}
    evidence["checksum"] = hashlib.sha256(ev.canonical(payload)).hexdigest()
    path = tmp_path / "evidence.json"
    path.write_text(json.dumps(evidence))
    monkeypatch.setattr(ev, "EVIDENCE_PATH", path)
    assert ev.load()["comparisons"] == evidence["comparisons"]  # a file the reader itself accepts
    copy = tmp_path / "results"
    shutil.copytree(results_dir(), copy)
    (copy / "comparisons_seed_level.csv").write_text(csv_text(comparisons_table(evidence)))
    with pytest.raises(ValueError, match="evidence.json: its comparisons are not what the committed records give"):
        site.build(tmp_path / "site", copy)
    assert not (tmp_path / "site").exists()


@pytest.mark.parametrize("stem", ["fig04_variance_reduction.csv", "table1_bootstrap.csv"])
def test_a_missing_results_file_fails_naming_it(tmp_path, stem):
    copy = tmp_path / "results"
    shutil.copytree(results_dir(), copy)
    (copy / stem).unlink()
    with pytest.raises(site.MissingResult, match=stem):
        site.build(tmp_path / "site", copy)


def test_the_builder_never_deletes_what_it_did_not_write(tmp_path):
    """Pointed at a folder of someone else's files (a checkout, say), it refuses and leaves them; its own
    earlier site it replaces whole."""
    theirs = tmp_path / "checkout"
    (theirs / "docs").mkdir(parents=True)
    (theirs / "docs" / "notes.md").write_text("mine")
    (theirs / "mkdocs.yml").write_text("mine")
    with pytest.raises(FileExistsError, match="did not write"):
        site.build(theirs)
    assert (theirs / "docs" / "notes.md").read_text() == "mine" and (theirs / "mkdocs.yml").read_text() == "mine"
    ours = tmp_path / "site"
    site.build(ours)
    (ours / "docs" / "stale.md").write_text("from an older build")  # a page an older build wrote, in its list
    marker = ours / site.MARKER
    marker.write_text(marker.read_text() + "docs/stale.md\n")
    site.build(ours)
    assert not (ours / "docs" / "stale.md").exists() and (ours / "docs" / "index.md").is_file()
    for mine in ("CNAME", "docs/extra.md", ".git/config"):  # refused, never deleted with the old site
        (ours / mine).parent.mkdir(parents=True, exist_ok=True)
        (ours / mine).write_text("mine")
        with pytest.raises(
            FileExistsError, match=rf"holds \[(.*, )?'{re.escape(mine)}'\], which the pages builder did not"
        ):
            site.build(ours)
        assert (ours / mine).read_text() == "mine"
        (ours / mine).unlink()


def test_a_file_saved_into_the_site_while_it_is_built_is_refused_not_deleted(tmp_path, monkeypatch):
    """The check at the start is not enough: a build takes minutes, and a file saved into its folder
    meanwhile would go with the old site. Checked again before the swap; the old site and the file stay."""
    ours = tmp_path / "site"
    site.build(ours)
    write_site = site._write_site

    def saving_meanwhile(fresh, folder, bench):
        (ours / "docs" / "draft-notes.md").write_text("mine")
        return write_site(fresh, folder, bench)

    monkeypatch.setattr(site, "_write_site", saving_meanwhile)
    with pytest.raises(FileExistsError, match=r"holds \['docs/draft-notes.md'\], which the pages builder did not"):
        site.build(ours)
    assert (ours / "docs" / "draft-notes.md").read_text() == "mine" and (ours / "docs" / "index.md").is_file()


def test_a_site_under_a_file_is_refused_naming_the_file(tmp_path):
    """A site under a file is refused naming the file, not with "[Errno 17] File exists" without the path
    that is a file."""
    (tmp_path / "notes").write_text("mine")
    with pytest.raises(NotADirectoryError, match="notes is a file, not a folder"):
        site.build(tmp_path / "notes" / "deeper" / "site")
    assert (tmp_path / "notes").read_text() == "mine"


@pytest.mark.parametrize("kind", ["link", "file"])
def test_a_link_or_a_file_where_the_site_goes_is_refused_before_any_work(tmp_path, kind):
    """A link or a file where the site goes is refused before any work: otherwise a link to an empty folder
    is replaced by the site and the link left behind under a temporary name, with a raw OSError, and a file
    gets a whole build first, then NotADirectoryError and a leaked folder."""
    out = tmp_path / "site"
    if kind == "link":
        (tmp_path / "elsewhere").mkdir()
        out.symlink_to(tmp_path / "elsewhere")
    else:
        out.write_text("a file")
    with pytest.raises(FileExistsError, match=f"site is a {kind}, not a folder"):
        site.build(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["site"] + (["elsewhere"] if kind == "link" else []))


def test_a_failed_rebuild_leaves_the_previous_site(tmp_path):
    ours = tmp_path / "site"
    site.build(ours)
    before = sorted(p.relative_to(ours) for p in ours.rglob("*"))
    copy = tmp_path / "results"
    shutil.copytree(results_dir(), copy)
    (copy / "fig04_variance_reduction.csv").unlink()
    with pytest.raises(site.MissingResult):
        site.build(ours, copy)
    assert sorted(p.relative_to(ours) for p in ours.rglob("*")) == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".site.")] == []  # no half-written folder left


def test_an_older_builders_marker_never_lets_a_users_file_go(tmp_path):
    """An older builder's marker names no files: what this build would not write is refused, and left,
    rather than the folder being replaced whole, the user's notes beside the site with it."""
    out = tmp_path / "site"
    site.build(out)
    (out / site.MARKER).write_text((out / site.MARKER).read_text().splitlines()[0] + "\n")  # the header alone
    site.build(out)  # only the builder's own files there: replaced
    (out / site.MARKER).write_text((out / site.MARKER).read_text().splitlines()[0] + "\n")
    (out / "my_notes.txt").write_text("mine")
    (out / "sub").mkdir()
    (out / "sub" / "keep.md").write_text("mine too")
    with pytest.raises(FileExistsError, match="my_notes.txt"):
        site.build(out)
    assert (out / "my_notes.txt").read_text() == "mine" and (out / "sub" / "keep.md").read_text() == "mine too"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["site"]  # no fresh folder left behind


@pytest.mark.parametrize(
    "change, reason",
    [
        (lambda f: f.assign(**{"max S_1": float("nan")}), r"row 2: max S_1 = .*nan.*, not a number"),
        (lambda f: f.iloc[:0], "no row the page reads"),
        (lambda f: f.rename(columns={"max S_1": "max S1"}), r"no column\(s\) \['max S_1'\]"),
        (lambda f: f.assign(model=""), "row 2: model is empty"),
        (lambda f: f.assign(**{"argmax layer": True}), "argmax layer = 'True', not a whole number"),
        (lambda f: f.assign(**{"argmax layer": 3.7}), "argmax layer = '3.7', not a whole number"),
    ],
)
def test_a_results_csv_a_page_reads_is_checked_naming_the_file_row_and_column(tmp_path, change, reason):
    """A page printed "peaks at layer nan", an empty finding, or a KeyError naming no file: each refused."""
    copy = tmp_path / "results"
    shutil.copytree(results_dir(), copy)
    path = copy / "fig02_layer_entropy_summary.csv"
    change(pd.read_csv(path)).to_csv(path, index=False)
    with pytest.raises(ValueError, match=reason) as caught:
        site.build(tmp_path / "site", copy)
    assert "fig02_layer_entropy_summary.csv" in str(caught.value)


@pytest.mark.parametrize(
    "stem, change, reason",
    [
        ("ledger_findings", lambda f: f.assign(low=f["high"] + 5), "not what the committed records give"),
        ("table1_layer_selection", lambda f: f.assign(setting="Paper"), "setting = 'Paper', not one of"),
        ("criteria_rank_correlations", lambda f: f.assign(outcome="tau  minus EAGLE3"), "outcome = 'tau  minus"),
        ("fig05_boundaries", lambda f: f.drop(columns=["boundaries (after layer)"]), "no column"),
    ],
)
def test_the_rows_a_page_reads_are_the_ones_checked(tmp_path, stem, change, reason):
    """An interval whose ends do not hold its difference, a filter that keeps no row (an empty finding), a
    column a line reads: refused naming the file."""
    _refused_after_changing(tmp_path, stem, change, reason)


def test_a_markdown_table_that_is_not_text_is_named(tmp_path):
    copy = tmp_path / "results"
    shutil.copytree(results_dir(), copy)
    (copy / "fig05_boundaries.md").write_bytes(b"\xff\xfe\x00bad")  # never read: the table is the CSV's
    site.build(tmp_path / "site", copy)
    (copy / "table1_bootstrap.csv").write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(ValueError, match="table1_bootstrap.csv: not a results CSV"):
        site.build(tmp_path / "site", copy)


def test_an_empty_folder_of_the_users_in_a_site_is_refused_and_left(tmp_path):
    """A folder holds nothing the builder wrote when none of its files lies in it, empty or not."""
    ours = tmp_path / "site"
    site.build(ours)
    (ours / "drafts" / "empty").mkdir(parents=True)
    with pytest.raises(FileExistsError, match=r"holds \['drafts/', 'drafts/empty/'\]"):
        site.build(ours)
    assert (ours / "drafts" / "empty").is_dir()


def test_a_replaced_folder_is_set_aside_under_a_name_of_its_own(tmp_path, monkeypatch):
    """Where the filesystem cannot exchange two folders, the old one goes aside under a fresh name: a
    user's folder named like the old one (".site.old") is never removed; the site is readable by others."""
    from elsi_lib.common import cachefiles

    monkeypatch.setattr(cachefiles, "_exchange", lambda tmp, final: False)
    ours = tmp_path / "site"
    site.build(ours)
    (tmp_path / ".site.old").mkdir()
    (tmp_path / ".site.old" / "user.txt").write_text("mine")
    site.build(ours)
    assert (tmp_path / ".site.old" / "user.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".site.old", "site"]
    assert ours.stat().st_mode & 0o055 == 0o055  # group and others may read and enter it


def test_the_benchmarks_page_is_made_from_the_records(tmp_path):
    """Each record's table comes from its checked JSON: a .md beside it that says otherwise, or cannot be
    decoded, changes nothing; a record that cannot be read is refused naming it."""
    record = {"benchmark": "bench_x", "machine": {"cpu": "C", "date": "2026-12-06T00:00:00"}, "settings": {},
              "rows": [{"a": 1, "b": 2.5}], "notes": "n"}  # fmt: skip
    (tmp_path / "bench_x.json").write_text(json.dumps(record))
    (tmp_path / "bench_x.md").write_bytes(b"| 9.9 | \xff |")
    page = site.bench_page(tmp_path)
    assert "| a | b |\n|---|---|\n| 1 | 2.5 |" in page and "9.9" not in page
    (tmp_path / "bench_x.json").write_bytes(b"\xff")
    with pytest.raises(ValueError, match="bench_x.json: not readable JSON"):
        site.bench_page(tmp_path)


def _refused_after_changing(tmp_path, stem: str, change, reason: str) -> None:
    """A copy of the results with `stem`.csv changed: the site build refuses it, naming the file."""
    copy = tmp_path / "results"
    shutil.copytree(results_dir(), copy)
    path = copy / f"{stem}.csv"
    change(pd.read_csv(path)).to_csv(path, index=False)
    with pytest.raises(ValueError, match=reason) as caught:
        site.build(tmp_path / "site", copy)
    assert f"{stem}.csv" in str(caught.value)


def _twice(f: pd.DataFrame, **change) -> pd.DataFrame:
    """`f` with its first row again, changed."""
    return pd.concat([f, f.iloc[[0]].assign(**change)], ignore_index=True)


def _at(f: pd.DataFrame, where, **change) -> pd.DataFrame:
    f = f.copy()
    for column, value in change.items():
        f.loc[where(f), column] = value
    return f


def lambda_tau(f: pd.DataFrame):
    """Each non-EAGLE3 point's tau moved by +0.01: inside its interval, but no longer EAGLE3's plus its difference."""
    return f.loc[f.method != "EAGLE3", "tau"] + 0.01


ELSI3 = lambda f: (f.method == "ELSI") & (f.m == 3) & (f.setting == "paper")  # noqa: E731


@pytest.mark.parametrize(
    "stem, change, reason",
    [
        # a value spelt otherwise, which a filter would drop without a word
        (
            "fig04_variance_reduction",
            lambda f: f.assign(selection=f.selection.replace("entropy", "Entropy")),
            "'Entropy', not one of",
        ),
        (
            "fig02_layer_entropy_summary",
            lambda f: f.assign(model=f.model.replace("smollm2-135m", "SmolLM2-135M")),
            "model = 'SmolLM2-135M'",
        ),
        (
            "table1_layer_selection",
            lambda f: f.assign(method=f.method.replace("ELSI", "elsi")),
            "method = 'elsi', not one of",
        ),
        (
            "criteria_rank_correlations",
            lambda f: f.assign(criterion=f.criterion.replace("probe error", "probe err")),
            "criterion = 'probe err'",
        ),
        # two rows of one thing: two contradicting lines
        ("fig02_layer_entropy_summary", lambda f: _twice(f, **{"max S_1": 0.5}), "the same model: one row each"),
        ("fig04_variance_reduction", lambda f: _twice(f, **{"early reduction %": 9.0}), "the same model, selection"),
        ("table1_layer_selection", lambda f: _twice(f, entropy=0.01), "the same model, setting, method, m"),
        ("criteria_rank_correlations", lambda f: _twice(f, rho=0.9), "the same protocol, prompts, temperature"),
        ("families_compared", lambda f: _twice(f), "the same temperature, nodes, effect"),
        # values the rest of the row, the model or the other rows contradict
        ("fig02_layer_entropy_summary", lambda f: f.assign(**{"argmax layer": 99}), "a peak or trough layer outside"),
        ("fig02_layer_entropy_summary", lambda f: f.assign(layers=31), "layers 31, but smollm2-135m has 30"),
        ("fig02_layer_entropy_summary", lambda f: f.assign(range=0.5), "range is not max S_1 - min S_1"),
        ("fig04_variance_reduction", lambda f: f.assign(**{"early reduction %": 150.0}), r"not in \[-inf, 100\]"),
        (
            "fig05_boundaries",
            lambda f: f.assign(**{"boundaries (after layer)": "[0, 40]"}),
            "ascending distinct ids of",
        ),
        ("table1_layer_selection", lambda f: _at(f, ELSI3, layers="(1, 14)"), r"layers '\(1, 14\)': 3 ascending"),
        (
            "table1_layer_selection",
            lambda f: _at(f, lambda f: f.method == "EAGLE3", layers="(1, 14, 27)"),
            "EAGLE3's layers",
        ),
        ("table1_layer_selection", lambda f: _at(f, ELSI3, entropy=9.0), "above the exhaustive optimum"),
        ("criteria_rank_correlations", lambda f: f.assign(**{"p (permutation)": 89.18}), r"= 89.18, not in \[0, 1\]"),
        ("criteria_rank_correlations", lambda f: f.assign(rho=0.0, **{"p (permutation)": 0.001}), "gives a p between"),
        ("criteria_rank_correlations", lambda f: f.assign(**{"distinct sets": 99}), "99 distinct sets of"),
        (
            "families_compared",
            lambda f: _at(f, lambda f: f.index == 1, **{f.columns[9]: 0.5}),
            "not value .* minus value",
        ),
        ("families_compared", lambda f: _at(f, lambda f: f.index == 1, effect=None), "effect is empty"),
        (
            "families_compared",
            lambda f: _at(f.astype({f.columns[3]: object}), lambda f: f.index == 0, **{f.columns[3]: "abc"}),
            r"row 2: value \(table2: smollm2-135m\) = 'abc', not a number",
        ),
        ("criteria_rank_correlations", lambda f: _at(f, lambda f: f.index == 3, rho=-0.756), "against its interval"),
        (
            "table3_paired_qwen2.5-coder-0.5b",
            lambda f: _at(f, lambda f: f.index == 3, diff=0.35),
            "outside its interval",
        ),
        (
            "table2_learning_curve_smollm2-135m",
            lambda f: _at(f, lambda f: f.method != "EAGLE3", tau=lambda_tau(f)),
            "minus EAGLE3 .*, but its tau less EAGLE3's|outside its interval",
        ),
        # every table a page shows is checked, not only the CSVs its finding reads
        (
            "fig03_pair_gains",
            lambda f: _at(f, lambda f: f.index == 0, **{"best companion": 99}),
            "outside smollm2-135m's 30",
        ),
        ("fig03_pair_gains", lambda f: _at(f, lambda f: f.index == 1, gain=0.5), "gain 0.5, but S_1 with it less"),
        (
            "fig03_pair_gains",
            lambda f: _at(f, lambda f: f.index == 1, **{"S_1 alone": -5.0}),
            r"S_1 alone = -5.0, not in",
        ),
        ("table1_bootstrap", lambda f: _at(f, lambda f: f.index == 0, share=0.9), "share 0.9, but its count 56 of 100"),
        ("table1_bootstrap", lambda f: _at(f, lambda f: f.index == 1, count=-3), r"count = -3, not in \[1, inf\]"),
        (
            "table1_bootstrap",
            lambda f: f.assign(**{"chosen on all prompts": True}),
            "sets chosen on all prompts, not one",
        ),
        (
            "table2_paired_smollm2-135m",
            lambda f: _at(f, lambda f: f.index == 0, **{"P(ahead)": 7.0}),
            r"P\(ahead\) = 7.0",
        ),
        (
            "table2_paired_smollm2-135m",
            lambda f: _at(f, lambda f: f.index == 0, low=None, high=None),
            "low = nan, not a number",
        ),
        (
            "families_interchangeability",
            lambda f: f.assign(**{"mean off-diagonal CKA": 7.0}),
            "mean off-diagonal CKA = 7.0",
        ),
        ("criteria_rank_correlations", lambda f: f.drop(columns=["low (sets)"]), r"no column\(s\) \['low \(sets\)'\]"),
        (
            "criteria_rank_correlations",
            lambda f: _at(f.astype({"low (sets)": object}), lambda f: f.index == 0, **{"low (sets)": "abc"}),
            "low \\(sets\\) = 'abc'",
        ),
        # made from the records: checked against what they give
        ("ledger_findings", lambda f: f.assign(diff=f["diff"] * 100), "line 2: not what the committed records give"),
        ("numeric_twins", lambda f: f.assign(**{"within the reseed range": "Yes"}), "not what the committed records"),
        ("numeric_twins", lambda f: f.drop(columns=["twins"]), "not what the committed records give"),
        ("criteria_pooled", lambda f: f.assign(**{"pooled rho": 0.9}), "not what the committed records give"),
        ("table3_f32_records_qwen2.5-coder-0.5b", lambda f: f.assign(AVG=f.AVG + 1), "not what the committed records"),
    ],
)
def test_a_results_file_whose_values_a_page_would_misread_is_refused(tmp_path, stem, change, reason):
    """Every row of a results CSV a page reads is checked, not only those its filter keeps: a value spelt
    otherwise, a second row of one thing, values the row, the model or the other rows contradict; and
    what is made from the committed records (the ledger's tables, a protocol's records table) is what
    they give now. Each was printed, dropped or contradicted without a word."""
    _refused_after_changing(tmp_path, stem, change, reason)


def test_the_family_difference_is_the_column_its_two_families_name(tmp_path):
    """Another column named "x minus y" before it is not the difference the page reports."""
    copy = tmp_path / "results"
    shutil.copytree(results_dir(), copy)
    path = copy / "families_compared.csv"
    f = pd.read_csv(path)
    f.insert(0, "x minus y", 9.0)
    f.to_csv(path, index=False)
    page = "\n".join(findings.families(copy))
    last = [c for c in f.columns if c.startswith("table2: smollm2-135m minus")][0]
    assert "+9.000" not in page and f"{f[last].iloc[0]:+.3f} ({last})" in page


def _bench(rows, **machine) -> dict:
    machine = {"cpu": "C", "date": "2026-12-06T00:00:00+00:00", "cores": 2, "load_1_5_15": [0.1, 0.2, 0.3], **machine}
    return {"benchmark": "bench_x", "machine": machine, "settings": {}, "rows": rows, "notes": ""}


ROWS = [
    {"shape": "1x896", "float32 ms": 1.2, "bf16 autocast ms": 2.4, "bf16 / float32": 2.0},
    {"shape": "8x896", "float32 ms": 3.0, "bf16 autocast ms": 3.3, "bf16 / float32": 1.1},
]


@pytest.mark.parametrize(
    "record, reason",
    [
        (_bench([ROWS[0], {**ROWS[1], "bf16 / float32": 0.5}]), r"row 1: bf16 / float32 = 0.5, but bf16 autocast ms"),
        (_bench([ROWS[0], {**ROWS[1], "float32 ms": -3.0}]), "row 1: float32 ms = -3.0, not a positive time"),
        (_bench([ROWS[0], {**ROWS[1], "float32 ms": "fast"}]), "row 1: float32 ms = 'fast', not a positive"),
        (
            _bench([ROWS[0], {**ROWS[0], "float32 ms": 2.4, "bf16 / float32": 1.0}]),
            r"rows 0 and 1 are alike in \['shape'\]",
        ),
        (_bench(ROWS, cores="many"), "machine's cores = 'many', not a count"),
        (_bench(ROWS, date="2026-99-99"), "machine's date '2026-99-99' is not an ISO date"),
        (_bench(ROWS, load_1_5_15="high"), "machine's load_1_5_15 = 'high'"),
    ],
)
def test_any_benchmark_record_a_page_shows_is_checked(tmp_path, record, reason):
    """The benchmarks page shows every record: its rows and machine are checked whatever the benchmark (a
    ratio its row's times contradict, a negative or textual time, two rows of one name, a machine of
    "many" cores or a 99th month), naming the file and the row."""
    (tmp_path / "bench_x.json").write_text(json.dumps(record))
    with pytest.raises(ValueError, match=reason) as caught:
        site.bench_page(tmp_path)
    assert "bench_x.json" in str(caught.value)


def test_a_records_column_names_and_notes_stay_inside_its_table(tmp_path):
    """A column named with a "|" would shift the table's cells, and notes opening with "##" or "1." would
    read as a heading or a list: escaped, so the page shows the record as it is."""
    from elsi_lib.study.pages import speed_page

    rows = [{"shape | size": r["shape"], **{k: v for k, v in r.items() if k != "shape"}} for r in ROWS]
    for notes, shown in (("## not a heading", "\\## not a heading"), ("1. not a list", "1\\. not a list")):
        (tmp_path / "bench_x.json").write_text(json.dumps({**_bench(rows), "notes": notes}))
        text = speed_page.table(tmp_path / "bench_x.json")
        assert "| shape \\| size | float32 ms |" in text and text.rstrip().endswith(shown)


ENGINE_ROWS = [
    {"draft": "plain decoding", "k": "", "tau vLLM": "", "tok/s": 12.4, "vs plain": 1.0, "outputs equal": ""},
    {"draft": "ELSI m=3", "k": 1, "tau vLLM": 1.177, "tok/s": 13.5, "vs plain": 1.09, "outputs equal": 12},
]
REPLY_ROWS = [
    {"engine": "batch 16", "seconds": 351.8, "tokens": 23854, "tok/s": 67.8, "same": True},
    {"engine": "batch 1", "seconds": 701.0, "tokens": 23854, "tok/s": 34.0, "same": False},
]


def _with(rows: list, i: int, **change) -> list:
    return [{**r, **change} if j == i else r for j, r in enumerate(rows)]


@pytest.mark.parametrize(
    "rows, settings, reason",
    [
        (
            _with(ENGINE_ROWS, 1, **{"vs plain": 3.5}),
            {},
            r"row 1: vs plain = 3.5, but its tok/s 13.5 over 12.4 is 1.09",
        ),
        (_with(ENGINE_ROWS, 1, **{"tau vLLM": 9.0}), {}, r"row 1: tau vLLM = 9.0, not in \[1, 2\]"),
        (_with(ENGINE_ROWS, 1, **{"tau vLLM": 0.5}), {}, r"row 1: tau vLLM = 0.5, not in \[1, 2\]"),
        (_with(ENGINE_ROWS, 1, **{"outputs equal": -4}), {"questions": 12}, "row 1: outputs equal = -4, not a count"),
        (_with(ENGINE_ROWS, 1, **{"outputs equal": 13}), {"questions": 12}, "row 1: outputs equal = 13, not a count"),
        (_with(ENGINE_ROWS, 0, **{"vs plain": 0.9}), {}, "vs plain: no row of vs plain = 1"),
        (  # a reference rate below zero, against which any ratio would hold
            [{**r, "vs plain": 99.0} for r in ENGINE_ROWS[1:]],
            {"plain tok/s": -12.4},
            r"vs plain: its reference, plain tok/s = -12.4, is not a positive rate",
        ),
        (_with(REPLY_ROWS, 1, seconds=-637.9), {}, "row 1: seconds = -637.9, not a positive time"),
        (_with(REPLY_ROWS, 0, **{"tok/s": 374.0}), {}, r"row 0: tok/s = 374.0, but tokens / seconds = 67.8"),
        (_with(REPLY_ROWS, 1, same="maybe"), {}, "row 1: same = 'maybe': the column holds true/false"),
        (
            [{"method": "elsi m=3", "naive s": 5.247, "fast s": 16.1, "ratio": 3.259}],
            {},
            r"row 0: ratio = 3.259, but naive s / fast s = 0.326",
        ),
        ([{"target": "t", "ms per triple": -3.0, "all triples (s)": 1.0}], {}, "ms per triple = -3.0, not a positive"),
        ([{"target": "t", "ms per triple": 3.0, "all triples (s)": 0}], {}, r"all triples \(s\) = 0, not a positive"),
        (
            [{"measure": "draft", "value": -11.5, "unit": "ms per batch"}],
            {},
            r"value = -11.5 \(ms per batch\), not a positive",
        ),
        ([{"measure": "draft", "value": "fast", "unit": "tok/s"}], {}, r"value = 'fast' \(tok/s\), not a positive"),
        ([{"measure": "draft", "value": 3.0, "unit": "tok/s"}, {}], {}, "row 1 holds no value"),
    ],
)
def test_what_any_benchmark_row_says_is_what_its_numbers_give(tmp_path, rows, settings, reason):
    """The rules every benchmark record's rows are held to (`bench_rows`): a speed ratio its tok/s do not
    give, a tau a chain of k cannot yield, a count of equal outputs outside the questions run, a time in any
    of the ways the records name one (seconds, ms per ..., (s)) not positive, tok/s that tokens over seconds
    contradict, a yes/no column holding a word: refused naming the file and the row."""
    record = {**_bench(rows), "settings": settings}
    (tmp_path / "bench_x.json").write_text(json.dumps(record))
    with pytest.raises(ValueError, match=reason) as caught:
        site.bench_page(tmp_path)
    assert "bench_x.json" in str(caught.value)


def test_a_benchmark_record_with_nan_or_a_line_break_in_a_cell(tmp_path):
    """NaN is no measurement (refused); a cell's line break would end the Markdown table (written on one line)."""
    (tmp_path / "bench_x.json").write_text(json.dumps(_bench(ROWS)).replace("1.1}", "NaN}"))
    with pytest.raises(ValueError, match="bench_x.json: not readable JSON .*NaN is no measurement"):
        site.bench_page(tmp_path)
    (tmp_path / "bench_x.json").write_text(json.dumps(_bench([{**ROWS[0], "shape": "1x896\nsecond line"}])))
    assert "| 1x896 second line | 1.2 |" in site.bench_page(tmp_path)


def test_a_results_folder_given_as_text_or_missing(tmp_path):
    """A folder given as text is a folder; one that does not exist is named as such, not as its first CSV."""
    copy = tmp_path / "results"
    shutil.copytree(results_dir(), copy)
    assert site.build(tmp_path / "site", str(copy))
    with pytest.raises(site.MissingResult, match="nowhere: no results folder there"):
        site.build(tmp_path / "site", tmp_path / "nowhere")


def test_a_table_without_a_declared_check_is_refused(tmp_path):
    """Every table a page shows is checked somewhere: one no check is declared for is refused, not shown."""
    (tmp_path / "table9_new.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match=r"table9_new.csv: no check is declared for this table"):
        tables.table_markdown(tmp_path, "table9_new")


@pytest.mark.parametrize(
    "change, reason",
    [
        (
            lambda f: _at(f, lambda f: f.model == "smollm2-135m", regimes="CKA boundaries after layers 2 and 8"),
            r"regimes 'CKA boundaries after layers 2 and 8', but Fig\. 5's entropy boundaries are after layers \[1, 8\]",
        ),
        (
            lambda f: _at(f, lambda f: (f.model == "smollm2-135m") & (f.selection == "random"), regimes="thirds"),
            "rows split its layers two ways",
        ),
    ],
)
def test_fig04s_regimes_are_fig05s_boundaries(tmp_path, change, reason):
    """Fig. 4's reductions are per regime, split at the two most prominent of Fig. 5's entropy boundaries:
    a split that names other layers, or two splits for one model, is refused naming the file and row."""
    copy = tmp_path / "results"
    shutil.copytree(results_dir(), copy)
    path = copy / "fig04_variance_reduction.csv"
    change(pd.read_csv(path)).to_csv(path, index=False)
    with pytest.raises(ValueError, match=reason) as caught:
        findings.filtering(copy)
    assert "fig04_variance_reduction.csv, row" in str(caught.value)
    assert findings.filtering(results_dir())


def test_the_benchmark_pages_read_the_folder_they_are_given(tmp_path):
    """The wall-clock and benchmark pages read the benchmark folder the build is given, not the checkout's;
    a record spelt NAME.JSON (which "*.json" would leave out without a word) is refused naming it."""
    bench = tmp_path / "bench"
    bench.mkdir()
    pages = site.build(tmp_path / "site", results_dir(), bench)
    docs = pages[0].parent
    assert "## `" not in (docs / "benchmarks.md").read_text()
    assert "No cost benchmark has run yet" in (docs / "speed.md").read_text()
    shutil.copy(REPO_ROOT / "bench" / "results" / "bench_bf16.json", bench / "bench_bf16.JSON")
    with pytest.raises(ValueError, match=r"\['bench_bf16.JSON'\] end in another spelling of \.json"):
        site.bench_page(bench)
    with pytest.raises(site.MissingResult, match="no benchmark records there"):
        site.build(tmp_path / "site", results_dir(), tmp_path / "missing")


def _swap(f: pd.DataFrame, a: str, b: str) -> pd.DataFrame:
    return f.assign(**{a: f[b], b: f[a]})


def _dup_column(f: pd.DataFrame) -> pd.DataFrame:
    """`f` with its second column written twice under one name (pandas reads the second as "name.1")."""
    return pd.concat([f, f.iloc[:, [1]]], axis=1)


CURVE = "table2_learning_curve_smollm2-135m"
PAIRED = "table2_paired_smollm2-135m"
FAM = "(table2: smollm2-135m)"


@pytest.mark.parametrize(
    "stem, read, change, reason",
    [
        (
            "criteria_rank_correlations",
            findings.criteria,
            lambda f: _swap(f, "low (sets)", "high (sets)"),
            "against its interval",
        ),
        (
            "criteria_rank_correlations",
            findings.criteria,
            lambda f: f.assign(**{"low (sets)": 0.9, "high (sets)": 0.95}),
            "against its interval",
        ),
        (
            "criteria_rank_correlations",
            findings.criteria,
            lambda f: f.assign(**{"low (questions and sets)": 0.95, "high (questions and sets)": 0.99}),
            r"against its interval \(questions and sets\)",
        ),
        ("criteria_rank_correlations", findings.criteria, lambda f: f.assign(prompts=-936), "prompts = -936, not in"),
        ("families_compared", findings.families, lambda f: _twice(f, effect=f.effect[0] + " "), "spaces around it"),
        ("fig02_layer_entropy_summary", findings.wave, lambda f: _dup_column(f), "named twice"),
        (
            "families_compared",
            findings.families,
            lambda f: _swap(f, f"low {FAM}", f"high {FAM}"),
            "does not hold value",
        ),
        (
            "families_compared",
            findings.families,
            lambda f: _at(f, lambda f: f.index == 0, **{f"value {FAM}": 0.5}),
            "does not hold value|minus",
        ),
        ("families_compared", findings.families, lambda f: f.assign(temperature=-1), r"temperature = -1"),
        (
            "table1_layer_selection",
            findings.selection,
            lambda f: _at(
                f,
                lambda f: (f.model == "smollm2-135m") & (f.method == "ELSI") & (f.m == 3) & (f.setting == "paper"),
                layers="(1, 14, 26)",
            ),
            "with two entropies",
        ),
        (
            "fig05_boundaries",
            findings.compartments,
            lambda f: f.assign(**{"boundaries (after layer)": "[1, 8"}),
            "ascending distinct ids",
        ),
        (
            "fig05_boundaries",
            findings.compartments,
            lambda f: f.assign(**{"boundaries (after layer)": "[1_0]"}),
            "ascending distinct ids",
        ),
        (
            PAIRED,
            tables.TABLE_CHECKS["_paired_"],
            lambda f: _at(f, lambda f: f.high < 0, **{"P(ahead)": 1.0}),
            "P\\(ahead\\) 1.0 beside an interval",
        ),
        (PAIRED, tables.TABLE_CHECKS["_paired_"], lambda f: f.assign(nodes=0), "nodes = 0, not in"),
        (
            CURVE,
            tables.TABLE_CHECKS["_learning_curve_"],
            lambda f: f.rename(columns={"diff low": "diff_low"}),
            "no column 'diff low'",
        ),
        (
            CURVE,
            tables.TABLE_CHECKS["_learning_curve_"],
            lambda f: _at(f.astype({"diff low": object}), lambda f: f.method != "EAGLE3", **{"diff low": "abc"}),
            "diff low = 'abc', not a number",
        ),
        (
            "families_interchangeability",
            tables.TABLE_CHECKS["families_interchangeability"],
            lambda f: f.assign(**{"pairs with CKA >= 0.95": 1.0}),
            "must not grow with the threshold",
        ),
        (
            "families_interchangeability",
            tables.TABLE_CHECKS["families_interchangeability"],
            lambda f: f.assign(**{"largest compartment share": 0.1}),
            "largest compartment share 0.1 of 3",
        ),
        (
            "fig03_pair_gains",
            tables.TABLE_CHECKS["fig03_pair_gains"],
            lambda f: f.assign(**{"best companion": f["seed layer"]}),
            "the best companion is another layer",
        ),
        (
            "fig03_pair_gains",
            tables.TABLE_CHECKS["fig03_pair_gains"],
            lambda f: f.assign(**{"median gain": f.gain + 0.5}),
            "the best companion is another layer",
        ),
        (
            "fig03_pair_gains",
            tables.TABLE_CHECKS["fig03_pair_gains"],
            lambda f: _at(f, lambda f: f["median gain"] < 0, **{"companions that lower S_1": 0}),
            "companions lowering S_1",
        ),
    ],
)
def test_a_results_row_its_own_numbers_contradict_is_refused(tmp_path, stem, read, change, reason):
    """Each results table a page shows is checked against itself: an interval with swapped ends or one that
    leaves out its own value, one set with two entropies, a layer list that does not parse as one, a
    P(ahead) against its interval's side, a renamed or textual interval end, CKA shares that grow with the
    threshold, a largest compartment below 1/k, a pair gain above the best one or a seed its own companion,
    a name with spaces around it (a second row to the one-row-each check), a column named twice: refused
    naming the file (and the row), the committed table passing the same check."""
    copy = tmp_path / "results"
    shutil.copytree(results_dir(), copy)
    path = copy / f"{stem}.csv"
    change(pd.read_csv(path)).to_csv(path, index=False)
    call = (
        (lambda folder: read(folder))
        if read in (findings.criteria, findings.families, findings.selection, findings.compartments, findings.wave)
        else (lambda folder: read(folder, stem))
    )
    with pytest.raises(ValueError, match=reason) as caught:
        call(copy)
    assert f"{stem}.csv" in str(caught.value)
    call(results_dir())
