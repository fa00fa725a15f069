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
from elsi_lib.study.pages import site


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


def test_a_changed_number_changes_the_page(tmp_path, monkeypatch):
    """The findings are the evidence file's: a changed comparison (its fits and checksum rewritten, as
    `make evidence` would) changes the page."""
    from elsi_lib.study.ledger.evidence_file import criterion_models

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
    site.build(tmp_path / "site")
    table3 = (tmp_path / "site" / "docs" / "table3.md").read_text()
    assert f"+0.010 [{0.01 - half:+.3f}, {0.01 + half:+.3f}]" in table3


@pytest.mark.parametrize("stem", ["fig04_variance_reduction.csv", "table1_layer_selection.md"])
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
        ("ledger_findings", lambda f: f.assign(low=f["high"] + 5), "an interval that does not hold its diff"),
        ("table1_layer_selection", lambda f: f.assign(setting="Paper"), "no row the page reads"),
        ("criteria_rank_correlations", lambda f: f.assign(outcome="tau  minus EAGLE3"), "no row the page reads"),
        ("fig05_boundaries", lambda f: f.drop(columns=["boundaries (after layer)"]), "no column"),
    ],
)
def test_the_rows_a_page_reads_are_the_ones_checked(tmp_path, stem, change, reason):
    """An interval whose ends do not hold its difference, a filter that keeps no row (an empty finding), a
    column a line reads: refused naming the file."""
    copy = tmp_path / "results"
    shutil.copytree(results_dir(), copy)
    path = copy / f"{stem}.csv"
    change(pd.read_csv(path)).to_csv(path, index=False)
    with pytest.raises(ValueError, match=reason) as caught:
        site.build(tmp_path / "site", copy)
    assert f"{stem}.csv" in str(caught.value)


def test_a_markdown_table_that_is_not_text_is_named(tmp_path):
    copy = tmp_path / "results"
    shutil.copytree(results_dir(), copy)
    (copy / "fig05_boundaries.md").write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(ValueError, match="fig05_boundaries.md: not a readable Markdown table"):
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
