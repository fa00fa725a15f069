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
