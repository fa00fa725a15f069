"""The documentation site's generator (elsi_lib.study.pages): every page is written from the committed
results, a changed number in the data changes the page (and, across 0, its verdict), and a results
file a page needs that is missing fails the build naming it. (`make docs` builds the site from these
pages and opens each in headless Chromium: docs/check_site.py.)"""

import shutil

import pandas as pd
import pytest

from elsi_lib.common.results import results_dir
from elsi_lib.study import pages


def test_every_page_is_written_from_the_committed_results(tmp_path):
    written = pages.build(tmp_path)
    names = {p.name for p in written}
    assert {f"{p.slug}.md" for p in pages.PAGES} <= names
    assert {"index.md", "api.md", "benchmarks.md", "command-select.md"} <= names
    table3 = (tmp_path / "docs" / "table3.md").read_text()
    paired = pd.read_csv(results_dir() / "table3_paired_qwen2.5-coder-0.5b.csv")
    row = paired[(paired.method == "ELSI m=3") & (paired.nodes == 60) & (paired.temperature == 0)].iloc[0]
    assert f"{row['diff']:+.3f} [{row.low:+.3f}, {row.high:+.3f}]" in table3
    assert "](images/fig08_tau_by_column_qwen2.5-coder-0.5b.png)" in table3
    assert (tmp_path / "docs" / "images" / "fig08_tau_by_column_qwen2.5-coder-0.5b.png").is_file()
    assert "--engine" in (tmp_path / "docs" / "command-select.md").read_text()


def test_a_changed_number_changes_the_page_and_its_verdict(tmp_path, monkeypatch):
    copy = tmp_path / "results"
    shutil.copytree(results_dir(), copy)
    monkeypatch.setenv("ELSI_RESULTS", str(copy))
    path = copy / "table3_paired_qwen2.5-coder-0.5b.csv"
    paired = pd.read_csv(path)
    mine = (paired.method == "ELSI m=3") & (paired.nodes == 60)
    paired.loc[mine, ["diff", "low", "high"]] = [0.01, -0.02, 0.04]
    paired.to_csv(path, index=False)
    pages.build(tmp_path / "site", copy)
    table3 = (tmp_path / "site" / "docs" / "table3.md").read_text()
    assert "+0.010 [-0.020, +0.040]" in table3 and "no difference from EAGLE3 shown" in table3


@pytest.mark.parametrize("stem", ["fig04_variance_reduction.csv", "table1_layer_selection.md"])
def test_a_missing_results_file_fails_naming_it(tmp_path, stem):
    copy = tmp_path / "results"
    shutil.copytree(results_dir(), copy)
    (copy / stem).unlink()
    with pytest.raises(pages.MissingResult, match=stem):
        pages.build(tmp_path / "site", copy)
