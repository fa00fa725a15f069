"""The README is a front door: at most 15 KB; the evidence line of its `elsi select` example is the one
the committed results give today (draft/evidence.py), the notebooks and files it names exist."""

import re

from elsi_lib.common.cachefiles import REPO_ROOT
from elsi_lib.draft.evidence import evidence_lines

README = REPO_ROOT / "README.md"


def test_the_readme_is_short():
    assert README.stat().st_size <= 15_000


def test_its_evidence_line_is_the_committed_results():
    text = README.read_text()
    quoted = [line for line in text.splitlines() if line.startswith("evidence: ")]
    assert quoted, "the README's example shows no evidence line"
    assert quoted[0] == evidence_lines("smollm2-135m", "probe", 3, chosen_differs=True)[0]  # the default method's


def test_what_it_names_exists():
    text = README.read_text()
    for notebook in set(re.findall(r"`(\d\d_\w+\.ipynb)`", text)):
        assert (REPO_ROOT / "notebooks" / notebook).is_file(), notebook
    for path in set(re.findall(r"\]\(([^)#:]+)\)", text)):
        assert (REPO_ROOT / path).exists(), path


def test_its_criteria_line_is_the_committed_pooled_test():
    from elsi_lib.draft.evidence import criterion_line

    quoted = [line for line in README.read_text().splitlines() if line.startswith("criteria: ")]
    assert quoted == [criterion_line()]


def test_its_wall_clock_lines_are_the_committed_benchmarks():
    from elsi_lib.study import speed

    lines = speed.headline(speed.cost_results())
    assert lines and all(line in README.read_text().splitlines() for line in lines)


def test_its_cost_model_accuracy_line_is_the_committed_benchmarks():
    from elsi_lib.study import speed

    line = speed.model_accuracy(speed.cost_results())
    assert line is not None and line in README.read_text().splitlines()


def test_its_lever_line_is_the_committed_benchmarks():
    from elsi_lib.study import speed

    line = speed.lever_finding()
    assert line is not None and line in README.read_text().splitlines()


def test_its_gpu_line_is_the_committed_device_benchmarks():
    from elsi_lib.study import speed_device

    line = speed_device.device_line()
    assert line is not None and any(l.startswith(line) for l in README.read_text().splitlines())


def test_its_qwen_sentence_is_the_committed_ledger_findings():
    """'trained on 936 prompts the probe's set beats EAGLE3's fixed set (one training seed so far), and
    ELSI's set does at two of three training seeds': in the float32 ledger (936 prompts) at 60 nodes, the
    probe's draft is above EAGLE3 at every temperature at its one seed, and ELSI m = 3's is above EAGLE3's
    same seed at every temperature at two of its three seeds."""
    import pandas as pd

    from elsi_lib.common.results import results_dir

    text = " ".join(README.read_text().split())
    assert "(one training seed so far), and ELSI's set does at two of three training seeds" in text
    found = pd.read_csv(results_dir() / "ledger_findings.csv")
    mine = found[(found.protocol == "table3_f32") & (found.nodes == 60)]
    probe = mine[mine.method == "probe m=3"]
    assert probe.seed.nunique() == 1 and (probe.low > 0).all()
    elsi = mine[mine.method == "ELSI m=3"]
    above = [bool((g.low > 0).all()) for _, g in elsi.groupby("seed")]
    assert (sum(above), len(above)) == (2, 3)
    assert set(mine.prompts) == {936} and "trained on 936 prompts the probe's set beats" in text


def test_its_strong_qwen_clause_is_the_committed_ledger_findings():
    """'but on 4,744 prompts the probe's lead is not shown (one seed)': in the qwen_strong ledger at 60
    nodes, the probe's draft (4,744 training prompts, one seed) has an interval holding 0 at some
    temperature."""
    import pandas as pd

    from elsi_lib.common.results import results_dir

    assert "but on 4,744 prompts the probe's lead is not shown (one seed)" in " ".join(README.read_text().split())
    found = pd.read_csv(results_dir() / "ledger_findings.csv")
    probe = found[(found.protocol == "qwen_strong") & (found.nodes == 60) & (found.method == "probe m=3")]
    assert set(probe.prompts) == {4744} and probe.seed.nunique() == 1
    assert not (probe.low > 0).all()
