"""The cost benchmarks' refusals before any timing: engines/cost_vllm.py (vLLM's environment, loaded here
as a file) refuses a missing engine, a draft exported for another target and a chain length out of range."""

import importlib.util
import json
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def cost_vllm():
    spec = importlib.util.spec_from_file_location("cost_vllm", ROOT / "engines" / "cost_vllm.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def plan(tmp_path, *, verifier=None, width=64, chains=3):
    target, draft = tmp_path / "target", tmp_path / "draft"
    target.mkdir()
    draft.mkdir()
    (target / "config.json").write_text(json.dumps({"hidden_size": 64, "vocab_size": 100}))
    (draft / "config.json").write_text(json.dumps({"target_hidden_size": width}))
    (draft / "elsi.json").write_text(json.dumps({"verifier": str(verifier or target)}))
    return {"target": str(target), "draft": str(draft), "chains": chains}


@pytest.fixture
def fake_vllm(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", types.ModuleType("vllm"))


def test_no_engine_is_refused_before_any_timing(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm raises ImportError
    with pytest.raises(SystemExit, match="vLLM is not installed"):
        cost_vllm().check_plan(plan(tmp_path))


def test_a_fitting_plan_passes(tmp_path, fake_vllm):
    cost_vllm().check_plan(plan(tmp_path))


def test_a_draft_exported_for_another_target_is_refused(tmp_path, fake_vllm):
    with pytest.raises(SystemExit, match="exported for .*other-model"):
        cost_vllm().check_plan(plan(tmp_path, verifier=tmp_path / "other-model"))


def test_a_draft_of_another_width_is_refused(tmp_path, fake_vllm):
    with pytest.raises(SystemExit, match="hidden size 32, the target's is 64"):
        cost_vllm().check_plan(plan(tmp_path, width=32))


@pytest.mark.parametrize("chains", [0, 9, 2.5, True])
def test_a_chain_length_out_of_range_is_refused(tmp_path, fake_vllm, chains):
    with pytest.raises(SystemExit, match="chains"):
        cost_vllm().check_plan(plan(tmp_path, chains=chains))


def test_the_draft_side_calibration_reproduces_its_own_chains():
    """overhead + k * step from the chains of 1 and 2: their rounds come back exactly; with K < 3 the
    step alone, from k = 1."""
    module = cost_vllm()
    forward = {2: 100.0, 3: 104.0, 4: 107.0}
    rounds = {1: 100.0 + 30.0, 2: 104.0 + 45.0}  # overhead 15, step 15
    step, overhead, calibrated = module.draft_side(rounds, forward, 3)
    assert (step, overhead, calibrated) == (pytest.approx(15.0), pytest.approx(15.0), (1, 2))
    for k in (1, 2):
        assert forward[k + 1] + overhead + k * step == pytest.approx(rounds[k])
    assert module.draft_side({1: 130.0}, forward, 1) == (pytest.approx(30.0), 0.0, (1,))


def test_elsis_prediction_adds_up_its_costs():
    """bench/bench_cost.py's round: tree + forward(nodes + 1) + update rows at the tokens per round +
    the rest; each question's prefill once; the ceiling at depth + 1 tokens."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import bench_cost
    finally:
        sys.path.remove(str(ROOT / "bench"))
    shape = (2, 2, 1)
    costs = {"trees": {shape: 10.0}, "rows": {1: 2.0, 2: 3.0, 3: 4.0}, "other": {shape: 1.0}, "prefill": 50.0}
    round_s, speed, ceiling = bench_cost.predict(shape, 1.5, costs, {3: 100.0}, plain_s=10.0, generated=42, prompts=2)
    assert round_s == pytest.approx(0.114)  # 10 + 100 + 3 (rows at round(1.5) = 2) + 1 ms
    assert speed == pytest.approx(10.0 / (2 * 0.05 + 40 / 1.5 * 0.114))
    assert ceiling == pytest.approx(10.0 / (2 * 0.05 + 40 / 3 * 0.115))  # 3 tokens: rows[3] = 4 ms
