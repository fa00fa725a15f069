"""engines/vllm_session.py, the vLLM engine both engine scripts start (check_engines.py, cost_vllm.py),
against a stand-in `vllm` module: the settings the engine gets, batch-1 greedy generation, the counters
read back by short name and differenced by check_engines, the engine's core shut down."""

import importlib.util
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


class Metric:
    """vLLM's Counter has `value`, its Vector `values` (never both)."""

    def __init__(self, name, value=None, values=None):
        self.name = name
        if values is None:
            self.value = value
        else:
            self.values = values


class FakeLLM:
    """Replies with the prompt's ids plus one; each request adds one draft and two accepted tokens."""

    started: list = []

    def __init__(self, **settings):
        self.settings = settings
        self.requests = 0
        self.stopped = False
        self.llm_engine = types.SimpleNamespace(engine_core=types.SimpleNamespace(shutdown=self.stop))
        FakeLLM.started.append(self)

    def stop(self):
        self.stopped = True

    def generate(self, requests, params, use_tqdm=False):
        assert len(requests) == 1 and params.temperature == 0.0  # batch 1, greedy
        self.requests += 1
        ids = [t + 1 for t in requests[0]["prompt_token_ids"]][: params.max_tokens]
        return [types.SimpleNamespace(outputs=[types.SimpleNamespace(token_ids=ids)])]

    def get_metrics(self):
        n = self.requests
        return [
            Metric("vllm:spec_decode_num_drafts", value=n),
            Metric("vllm:spec_decode_num_accepted_tokens", value=2 * n),
            Metric("vllm:spec_decode_num_draft_tokens", value=3 * n),
            Metric("vllm:spec_decode_num_accepted_tokens_per_pos", values=[n, n, 0]),
            Metric("vllm:prefix_cache_hits", value=7),
        ]


@pytest.fixture
def engines(monkeypatch):
    fake = types.ModuleType("vllm")
    fake.LLM = FakeLLM
    fake.SamplingParams = lambda temperature, max_tokens: types.SimpleNamespace(
        temperature=temperature, max_tokens=max_tokens
    )
    monkeypatch.setitem(sys.modules, "vllm", fake)
    monkeypatch.syspath_prepend(str(ROOT / "engines"))
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    FakeLLM.started = []

    def load(name):
        spec = importlib.util.spec_from_file_location(name, ROOT / "engines" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load


def test_the_engine_and_its_counters(engines):
    session = engines("vllm_session")
    llm = session.engine("target", "draft", 3, prefix_caching=True)
    assert llm.settings["speculative_config"] == {"method": "eagle3", "model": "draft", "num_speculative_tokens": 3}
    assert llm.settings["dtype"] == "float32" and llm.settings["enable_prefix_caching"] is True
    assert llm.settings["disable_log_stats"] is False  # the counters need the statistics
    plain = session.engine("target")
    assert plain.settings["speculative_config"] is None
    assert "enable_prefix_caching" not in plain.settings  # vLLM's own default
    for k in (0, -1, 2.0):
        with pytest.raises(ValueError, match="k >= 1"):
            session.engine("target", "draft", k)
    tokens, _ = session.generate(llm, [[1, 2], [5, 6, 7]], max_tokens=2)
    assert tokens == [[2, 3], [6, 7]]
    assert session.counters(llm) == {
        "num_drafts": 2,
        "num_accepted_tokens": 4,
        "num_draft_tokens": 6,
        "num_accepted_tokens_per_pos": [2, 2, 0],
    }
    assert session.counters(llm, "vllm:prefix_cache_hits") == {"prefix_cache_hits": 7}
    empty = types.SimpleNamespace(get_metrics=lambda: [Metric("vllm:spec_decode_x", values=[])])
    assert session.counters(empty) == {"x": []}  # an empty Vector stays a list
    session.shutdown(llm)
    assert llm.stopped


def test_check_engines_counts_only_the_timed_requests(engines, tmp_path):
    check = engines("check_engines")
    plan = {"target": "target", "prompts": [[1, 2], [3], [4, 5]], "max_tokens": 4}
    result = check.run_vllm(plan, str(tmp_path / "draft"), 2, out=tmp_path)
    (llm,) = FakeLLM.started
    assert llm.settings["speculative_config"]["num_speculative_tokens"] == 2
    assert "enable_prefix_caching" not in llm.settings  # as check_engines' committed results ran
    assert result["tokens"] == [[2, 3], [4], [5, 6]] and result["generated"] == 5
    # the warm-up request is not counted: three timed requests
    assert (result["num_drafts"], result["num_accepted_tokens"], result["num_draft_tokens"]) == (3, 6, 9)
    assert llm.stopped
    assert (tmp_path / "logs" / "vllm-draft-k2.log").exists()
