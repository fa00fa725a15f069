"""The evidence line `elsi select` prints (elsi_lib.draft.evidence): read from the committed results,
it follows their numbers (a changed cell changes the line and, across 0, the verdict), and says
plainly when no draft of the criterion was trained on the model."""

import shutil

import pandas as pd
import pytest

from elsi_lib.common.results import result_path, results_dir
from elsi_lib.draft.evidence import NODES, evidence, evidence_lines


def test_the_line_quotes_the_committed_paired_difference():
    paired = pd.read_csv(result_path("table3", "paired", "qwen2.5-coder-0.5b"))
    row = paired[(paired.method == "ELSI m=3") & (paired.nodes == NODES) & (paired.temperature == 0)].iloc[0]
    line = evidence_lines("qwen2.5-coder-0.5b", "elsi", 3)[0]
    assert f"T = 0: {row['diff']:+.3f} [{row.low:+.3f}, {row.high:+.3f}]" in line and "table3" in line
    strong = evidence("smollm2-135m", "elsi", 3)[0]
    assert strong.protocol == "table2_strong" and strong.prompts == 4744 and strong.drafts == 3


def test_a_changed_number_changes_the_line_and_the_verdict(tmp_path, monkeypatch):
    copy = tmp_path / "results"
    shutil.copytree(results_dir(), copy)
    monkeypatch.setenv("ELSI_RESULTS", str(copy))
    assert "for it" in evidence_lines("qwen2.5-coder-0.5b", "elsi", 3)[0]
    path = result_path("table3", "paired", "qwen2.5-coder-0.5b")
    paired = pd.read_csv(path)
    mine = (paired.method == "ELSI m=3") & (paired.nodes == NODES)
    paired.loc[mine, ["diff", "low", "high"]] = [-0.5, -0.6, -0.4]
    paired.to_csv(path, index=False)
    line = evidence_lines("qwen2.5-coder-0.5b", "elsi", 3)[0]
    assert "-0.500 [-0.600, -0.400]" in line and "against it: below EAGLE3 at every temperature" in line


@pytest.mark.parametrize("method, m", [("elsi-c", 3), ("exhaustive", 3), ("elsi", 2)])
def test_absent_evidence_is_said_plainly(method, m):
    lines = evidence_lines("qwen2.5-coder-0.5b", method, m)
    assert lines[0].startswith("evidence: none for qwen2.5-coder-0.5b")
    assert len(lines) == 3 and all(line.startswith("  on ") for line in lines[1:])


def test_a_restricted_set_is_not_passed_off_as_the_trained_one():
    line = evidence_lines("smollm2-135m", "elsi", 3, chosen_differs=True)[0]
    assert "not this restricted set" in line


def test_the_criterion_line_is_the_pooled_test_and_the_default_follows_it(tmp_path, monkeypatch):
    from elsi_lib.cli_args import build_parser
    from elsi_lib.draft.evidence import criterion_line
    from elsi_lib.study.record_tables import verdict

    pooled = pd.read_csv(results_dir() / "criteria_pooled.csv")
    row = pooled[(pooled.criterion == "probe error") & (pooled.outcome == "tau minus EAGLE3")].iloc[0]
    line = criterion_line()
    assert f"rho {row['pooled rho']:+.2f}, p = {row['p (stratified permutation)']:.3f}" in line
    default = build_parser().parse_args(["select", "--model", "x"]).method
    assert default == verdict(pooled)  # the command recommends what the committed test supports
    assert ("default stays ELSI" in line) == (default == "elsi")
    copy = tmp_path / "results"
    shutil.copytree(results_dir(), copy)
    monkeypatch.setenv("ELSI_RESULTS", str(copy))
    changed = pooled.copy()
    mine = (changed.criterion == "probe error") & (changed.outcome == "tau minus EAGLE3")
    changed.loc[mine, ["pooled rho", "p (stratified permutation)"]] = [0.8, 0.01]
    changed.to_csv(copy / "criteria_pooled.csv", index=False)
    assert "rho +0.80, p = 0.010; it predicts the drafts" in criterion_line()
    assert verdict(changed) == "probe"
    (copy / "criteria_pooled.csv").unlink()
    assert criterion_line() is None


def test_a_set_two_methods_chose_is_one_draft_for_the_criteria(monkeypatch):
    """ELSI and ELSI-C chose layers (0, 1) at m = 2 on Qwen (table3_f32): the same draft, trained twice,
    counts once in the criteria's correlations."""
    from elsi_lib.common.cachefiles import REPO_ROOT
    from elsi_lib.study.record_tables import drafts

    monkeypatch.setenv("ELSI_DRAFT_RECORDS", str(REPO_ROOT / "data" / "drafts"))  # the committed records

    table = drafts(["table3_f32"])
    assert {"elsi-m2", "elsi-c-m2"} & set(table.id), "the committed records hold both m = 2 drafts"
    assert len({"elsi-m2", "elsi-c-m2"} & set(table.id)) == 1
    assert not table.duplicated(["layers", "step 1", "tau"]).any()
    assert {"eagle2", "elsi-m1-rule"} <= set(table.id)  # one layer, two feature sources: two drafts


def test_a_reseeded_criterion_shows_every_seed_beside_its_evidence(tmp_path, monkeypatch):
    """ELSI m = 3's Qwen lead at seed 0 and its seed-1 draft: `elsi select` prints both and the reseed range."""
    copy = tmp_path / "results"
    shutil.copytree(results_dir(), copy)
    monkeypatch.setenv("ELSI_RESULTS", str(copy))
    rows = [
        ("table3_f32", T, 60, seed, "ELSI m=3", diff, diff - 0.02, diff + 0.02, 120, 8, spread, "no")
        for T, spread in ((0.0, 0.019), (1.0, 0.047))
        for seed, diff in ((0, 0.024), (1, 0.002))
    ]
    columns = ["protocol", "temperature", "nodes", "seed", "method", "diff", "low", "high", "questions", "drafts"]
    pd.DataFrame(rows, columns=[*columns, "reseed range", "beyond the reseed range"]).to_csv(
        copy / "ledger_findings.csv", index=False
    )
    lines = evidence_lines("qwen2.5-coder-0.5b", "elsi", 3)
    assert len(lines) == 2 and lines[0].startswith("evidence: ELSI m=3 drafts on qwen2.5-coder-0.5b (table3")
    assert lines[1] == (
        "  across training seeds (table3_f32): seed 0: T = 0 +0.024 [+0.004, +0.044], T = 1 +0.024 [+0.004, +0.044]; "
        "seed 1: T = 0 +0.002 [-0.018, +0.022], T = 1 +0.002 [-0.018, +0.022]; "
        "a reseed alone moves AVG tau up to 0.019 at T = 0, 0.047 at T = 1"
    )
    assert len(evidence_lines("qwen2.5-coder-0.5b", "probe", 3)) == 1  # one seed: no line
    pd.DataFrame(rows[:1], columns=[*columns, "reseed range", "beyond the reseed range"]).to_csv(
        copy / "ledger_findings.csv", index=False
    )
    assert len(evidence_lines("qwen2.5-coder-0.5b", "elsi", 3)) == 1


def test_the_best_trained_ledger_draft_shows_beside_the_tables_evidence(tmp_path, monkeypatch):
    """The table3 evidence rests on 936 training prompts; a ledger protocol of the same family whose
    probe draft trained on 4,744 adds a line (its first seed, its own drafts and verdict, its seeds); one
    on no more prompts, another family's, or a findings file without prompts adds none."""
    copy = tmp_path / "results"
    shutil.copytree(results_dir(), copy)
    monkeypatch.setenv("ELSI_RESULTS", str(copy))
    columns = ["protocol", "family", "prompts", "temperature", "nodes", "seed", "method", "diff", "low", "high"]
    qwen = "qwen2.5-coder-0.5b"
    rows = [
        ("table3_f32", qwen, 936, 0.0, 60, 0, "probe m=3", 0.2, 0.1, 0.3),
        ("qwen_strong", qwen, 4744, 0.0, 60, 0, "probe m=3", 0.25, 0.15, 0.35),
        ("qwen_strong", qwen, 4744, 1.0, 60, 0, "probe m=3", -0.01, -0.04, 0.02),
        ("qwen_strong", qwen, 4744, 0.0, 30, 0, "probe m=3", 0.9, 0.8, 1.0),  # another tree size
        ("qwen_strong", qwen, 4744, 0.0, 60, 1, "probe m=3", -0.5, -0.6, -0.4),  # a later seed
        ("big_smol", "smollm2-135m", 9000, 0.0, 60, 0, "probe m=3", 0.5, 0.4, 0.6),  # another family's
    ]
    frame = pd.DataFrame(rows, columns=columns).assign(questions=120, drafts=2)
    frame["reseed range"], frame["beyond the reseed range"] = float("nan"), "no reseeds yet"
    frame.to_csv(copy / "ledger_findings.csv", index=False)
    lines = evidence_lines(qwen, "probe", 3)
    assert lines[0].startswith("evidence: probe m=3 drafts on qwen2.5-coder-0.5b (table3: 936 training prompts")
    assert lines[-1].startswith("  across training seeds (qwen_strong): seed 0: T = 0 +0.250")
    assert lines[-1].endswith(
        "seed 1: T = 0 -0.500 [-0.600, -0.400]; no reseed range yet (it needs two methods with two seeds each)"
    )
    assert lines[-2] == (
        "  with more training data (the ledger's records, seed 0): probe m=3 drafts on qwen2.5-coder-0.5b "
        "(qwen_strong: 4,744 training prompts, 2 drafts): tau minus EAGLE3's at 60 nodes "
        "T = 0: +0.250 [+0.150, +0.350]; T = 1: -0.010 [-0.040, +0.020]: "
        "for it at some temperature, no difference shown at another"
    )
    smol = [line for line in evidence_lines("smollm2-135m", "probe", 3) if "with more training data" in line]
    assert len(smol) == 1 and "(big_smol: 9,000 training prompts, 2 drafts)" in smol[0]  # its own family's
    frame[frame.protocol != "qwen_strong"].to_csv(copy / "ledger_findings.csv", index=False)
    assert not any("with more training data" in line for line in evidence_lines(qwen, "probe", 3))
    frame.drop(columns=["family", "prompts"]).to_csv(copy / "ledger_findings.csv", index=False)
    assert not any("with more training data" in line for line in evidence_lines(qwen, "probe", 3))
