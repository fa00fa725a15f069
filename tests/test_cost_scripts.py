"""The cost benchmarks' refusals before any timing: engines/cost_vllm.py (vLLM's environment, loaded here
as a file) refuses a missing engine, a draft exported for another target and a chain length out of range."""

import importlib.util
import json
import sys
import types
from pathlib import Path

import numpy as np
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


def test_the_draft_side_takes_each_chain_from_the_others():
    """k = 1 (one draft pass) is its own calibration; each chain of k >= 2 takes the line in k through
    the other chains of k >= 2 (leave one out), the one other's value when only one, its own when none."""
    module = cost_vllm()
    forward = {2: 100.0, 3: 104.0, 4: 107.0, 5: 110.0, 6: 111.0}
    spent = {1: 16.0, 2: 55.0, 3: 60.0, 4: 65.0, 5: 72.0}
    rounds = {k: forward[k + 1] + ms for k, ms in spent.items()}
    side, calibrated = module.draft_side(rounds, forward)
    assert calibrated == (1,)
    assert side[1] == pytest.approx(16.0)
    for k in (2, 3, 4, 5):
        others = [j for j in (2, 3, 4, 5) if j != k]
        slope, intercept = np.polyfit(others, [spent[j] for j in others], 1)
        assert side[k] == pytest.approx(intercept + slope * k)
    assert side[2] == pytest.approx(65.0 + 2 / 3 - 12.0)  # through (3, 60), (4, 65), (5, 72): slope 6
    assert side[4] != pytest.approx(spent[4])  # its own round is not used
    side, calibrated = module.draft_side({k: rounds[k] for k in (1, 2, 3)}, forward)
    assert side == {1: pytest.approx(16.0), 2: pytest.approx(60.0), 3: pytest.approx(55.0)} and calibrated == (1,)
    side, calibrated = module.draft_side({k: rounds[k] for k in (1, 2)}, forward)
    assert side == {1: pytest.approx(16.0), 2: pytest.approx(55.0)} and calibrated == (1, 2)


def test_reanalysis_keeps_the_measured_columns(tmp_path, monkeypatch):
    """--reanalyse recomputes a committed vLLM result's predicted columns from its own measurements: the
    measured columns and the machine stay, the error of every chain of k >= 2 is out of sample, and a
    second reanalysis changes nothing."""
    import shutil

    module = cost_vllm()
    name = "cost_vllm_table3_f32_elsi-m3-frobenius-seed0_float32"
    shutil.copy(ROOT / "bench" / "results" / f"{name}.json", tmp_path / f"{name}.json")
    record_module = sys.modules["record"]
    monkeypatch.setattr(record_module, "RESULTS", tmp_path)
    monkeypatch.setattr(module, "read", lambda n: record_module.read(n, tmp_path))
    monkeypatch.setattr(module, "write", lambda *a, **kw: record_module.write(*a, folder=tmp_path, **kw))
    before = json.loads((tmp_path / f"{name}.json").read_text())
    module.reanalyse(name)
    after = json.loads((tmp_path / f"{name}.json").read_text())
    measured = ("k", "tau vLLM", "round ms measured", "speed-up measured", "lossless")
    assert [[r[c] for c in measured] for r in after["rows"]] == [[r[c] for c in measured] for r in before["rows"]]
    assert after["machine"] == before["machine"]
    assert [r["error"] == "calibration" for r in after["rows"]] == [r["k"] == 1 for r in after["rows"]]
    module.reanalyse(name)
    assert json.loads((tmp_path / f"{name}.json").read_text())["rows"] == after["rows"]
    with pytest.raises(SystemExit, match="no result 'nothing'"):
        module.reanalyse("nothing")
    (tmp_path / "cost_elsi_x.json").write_text(json.dumps({"benchmark": "cost_elsi_x", "rows": [{"shape": "chain"}]}))
    with pytest.raises(SystemExit, match="not a cost_vllm.py result"):
        module.reanalyse("cost_elsi_x")


def bench_cost_and_costs():
    """bench/bench_cost.py as a module, and a chain shape with its costs (ms) each timed alone."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import bench_cost
    finally:
        sys.path.remove(str(ROOT / "bench"))
    shape = (2, 2, 1)
    costs = {"trees": {shape: 10.0}, "rows": {1: 2.0, 2: 3.0, 3: 4.0}, "other": {shape: 1.0}, "prefill": 50.0}
    return bench_cost, shape, costs


def test_elsis_prediction_adds_up_its_costs():
    """bench/bench_cost.py's round: tree + forward(nodes + 1) + update rows at the tokens per round +
    the rest; each question's prefill once; the ceiling at depth + 1 tokens."""
    bench_cost, shape, costs = bench_cost_and_costs()
    round_s, speed, ceiling = bench_cost.predict(shape, 1.5, costs, {3: 100.0}, plain_s=10.0, generated=42, prompts=2)
    assert round_s == pytest.approx(0.114)  # 10 + 100 + 3 (rows at round(1.5) = 2) + 1 ms
    assert speed == pytest.approx(10.0 / (2 * 0.05 + 40 / 1.5 * 0.114))
    assert ceiling == pytest.approx(10.0 / (2 * 0.05 + 40 / 3 * 0.115))  # 3 tokens: rows[3] = 4 ms


def test_elsis_rows_keep_the_committed_columns():
    """bench_cost's rows name every column once, in the order of its committed records; the predicted
    ones come from predicted_columns."""
    bench_cost, shape, costs = bench_cost_and_costs()
    predicted = bench_cost.predicted_columns(shape, 1.5, 0.9, costs, {3: 100.0}, 10.0, 60.0, 42, 2)
    assert set(predicted) < set(bench_cost.COLUMNS)
    assert len(set(bench_cost.COLUMNS)) == len(bench_cost.COLUMNS)
    for path in sorted((ROOT / "bench" / "results").glob("cost_elsi_*.json")):
        for row in json.loads(path.read_text())["rows"]:
            assert tuple(row) == bench_cost.COLUMNS, path.name


def bench_cost_device(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import bench_cost_device

    return bench_cost_device


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--device", "cuda"], "sees no CUDA device"),
        (["--device", "cpu", "--layers", "6"], "--layers must be >= 8"),
        (["--device", "cpu", "--hidden", "60", "--heads", "8"], "multiple of --heads"),
        (["--device", "cpu", "--repeat", "0"], "--repeat must be >= 1"),
    ],
)
def test_the_device_benchmark_refuses_bad_input_before_any_timing(monkeypatch, capsys, argv, message):
    import torch

    module = bench_cost_device(monkeypatch)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(module, "measure", lambda *a, **k: pytest.fail("timed before refusing"))
    monkeypatch.setattr(sys, "argv", ["bench_cost_device.py", *argv])
    with pytest.raises(SystemExit) as stop:
        module.main()
    assert message in str(stop.value) + capsys.readouterr().err


def test_the_device_benchmark_writes_both_settings_on_a_cpu(monkeypatch, tmp_path):
    """A tiny run on the CPU: one record per autocast setting, every row in bench_cost's columns and
    token-identical to plain greedy decoding (a float32 target on the CPU)."""
    module = bench_cost_device(monkeypatch)
    written = []

    def write(name, settings, rows, **kwargs):
        written.append((name, settings, rows))

    monkeypatch.setattr(module, "write", write)
    calls = []  # (nodes, max_new_tokens) of each end-to-end decoding, in order
    generate = module.measure.__globals__["speculative_generate"]

    def counted(model, draft, prompt, *, max_new_tokens, nodes, **kwargs):
        calls.append((nodes, max_new_tokens))
        return generate(model, draft, prompt, max_new_tokens=max_new_tokens, nodes=nodes, **kwargs)

    monkeypatch.setitem(module.measure.__globals__, "speculative_generate", counted)
    argv = "--device cpu --layers 8 --hidden 32 --heads 4 --vocab 128 --prompts 1 --prompt-tokens 8 --tokens 16"
    monkeypatch.setattr(sys, "argv", ["bench_cost_device.py", *argv.split(), "--repeat", "1", "--chains", "2"])
    module.main()
    assert [name for name, _, _ in written] == ["cost_device_cpu_float32", "cost_device_cpu_bf16"]
    for _, settings, rows in written:
        assert settings["layers"] == [1, 3, 4]  # EAGLE3's rule on 8 layers, elsi's convention
        assert [(r["k or nodes"], r["depth"]) for r in rows] == [(1, 1), (2, 2), (30, 6), (60, 6)]
        assert all(tuple(r) == module.measure.__globals__["COLUMNS"] for r in rows)
        assert all(r["lossless"] for r in rows)
    # each shape warms up untimed on a few tokens, then runs its one prompt: in both settings
    warm = module.measure.__globals__["WARM_UP_TOKENS"]
    assert calls == [(n, t) for n in (1, 2, 30, 60) for t in (warm, 16)] * 2


def test_bf16_is_refused_before_any_timing_on_a_cpu_without_bf16_instructions(tmp_path):
    """--dtype bfloat16 needs avx512_bf16 or amx_bf16 among the CPU's flags; an unknown dtype is refused;
    the flags are read from /proc/cpuinfo's first `flags` line (none where the file is missing)."""
    module = cost_vllm()
    with pytest.raises(SystemExit, match="bf16 matmul instructions"):
        module.check_dtype("bfloat16", {"avx2", "fma"})
    with pytest.raises(SystemExit, match="one of float32, bfloat16"):
        module.check_dtype("float16", {"avx512_bf16"})
    module.check_dtype("bfloat16", {"avx2", "avx512_bf16"})
    module.check_dtype("float32", set())
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu avx2 amx_bf16\n\nprocessor\t: 1\nflags\t\t: fpu\n")
    assert module.cpu_flags(str(info)) == {"fpu", "avx2", "amx_bf16"}
    assert module.cpu_flags(str(tmp_path / "missing")) == set()


@pytest.mark.parametrize(
    "argv, said",
    [
        (["--category", "poetry"], "unknown SpecBench category 'poetry'; the categories are writing"),
        (["--category", "coding", "--questions", "11"], "--questions 11: SpecBench coding holds 10"),
        (["--questions", "7"], "--questions 7: SpecBench, one per column holds 6"),
    ],
)
def test_a_question_set_it_cannot_give_is_refused_before_any_model_loads(monkeypatch, capsys, argv, said):
    bench_cost, _, _ = bench_cost_and_costs()
    monkeypatch.setattr(sys, "argv", ["bench_cost.py", *argv])
    monkeypatch.setattr(bench_cost, "load_model", lambda *a, **k: pytest.fail("a model loaded"))
    with pytest.raises(SystemExit) as err:
        bench_cost.main()
    assert err.value.code == 2 and said in capsys.readouterr().err


class FakeSession:
    """vllm_session's engine, generate, counters and shutdown for cost_vllm's runs, no vLLM: each
    generation takes the next of `seconds` and drafts `drafts` rounds with `accepted` per position."""

    def __init__(self, seconds, tokens=None, drafts=10, accepted=(6, 2)):
        self.seconds, self.tokens, self.drafts, self.accepted = list(seconds), tokens, drafts, list(accepted)
        self.total = {"num_drafts": 0, "num_accepted_tokens": 0, "num_accepted_tokens_per_pos": [0] * len(accepted)}

    def install(self, module, monkeypatch):
        monkeypatch.setattr(module, "engine", lambda *a, **k: "llm")
        monkeypatch.setattr(module, "shutdown", lambda llm: None)
        monkeypatch.setattr(module, "counters", lambda llm, *a: json.loads(json.dumps(self.total)))
        monkeypatch.setattr(module, "generate", self.generate)

    def generate(self, llm, prompts, max_tokens):
        if max_tokens == 8:  # the warm-up
            return [[1] * 8], 0.1
        self.total["num_drafts"] += self.drafts
        self.total["num_accepted_tokens"] += sum(self.accepted)
        self.total["num_accepted_tokens_per_pos"] = [
            a + b for a, b in zip(self.total["num_accepted_tokens_per_pos"], self.accepted)
        ]
        tokens = self.tokens.pop(0) if self.tokens else [[5] * max_tokens for _ in prompts]
        return tokens, self.seconds.pop(0)


def test_a_chain_is_measured_by_its_median_repeat(monkeypatch):
    """--repeat runs each chain that many times in one engine: the median repeat's seconds and counters
    are the chain's (each repeat's counters its own, not the engine's running totals), every repeat's
    seconds are kept, and whether the repeats gave the same tokens and rounds."""
    module = cost_vllm()
    FakeSession([3.0, 2.0, 9.0]).install(module, monkeypatch)
    run = module.chain_run({"target": "t", "draft": "d", "prompts": [[1, 2]], "max_tokens": 4}, 2, repeat=3)
    assert run["seconds"] == 3.0 and run["repeats"] == [3.0, 2.0, 9.0] and run["repeats agree"]
    assert run["drafts"] == 10 and run["accepted"] == 8 and run["per_pos"] == [6, 2]
    FakeSession([3.0, 2.0], tokens=[[[5]], [[6]]]).install(module, monkeypatch)
    run = module.chain_run({"target": "t", "draft": "d", "prompts": [[1, 2]], "max_tokens": 4}, 2, repeat=2)
    assert run["seconds"] == 2.0 and not run["repeats agree"]  # the lower median of two
    FakeSession([5.0, 6.0]).install(module, monkeypatch)  # a second engine's repeats pool with the first's
    first = module.chain_run({"target": "t", "draft": "d", "prompts": [[1, 2]], "max_tokens": 4}, 2, repeat=1)
    run = module.chain_run(
        {"target": "t", "draft": "d", "prompts": [[1, 2]], "max_tokens": 4}, 2, repeat=1, earlier=first["runs"]
    )
    assert run["repeats"] == [5.0, 6.0] and run["seconds"] == 5.0 and len(run["runs"]) == 2


def test_plain_decoding_that_differs_between_repeats_is_refused(monkeypatch, tmp_path):
    module = cost_vllm()
    FakeSession([1.0, 1.0], tokens=[[[5, 5]], [[5, 6]]]).install(module, monkeypatch)
    llm = types.SimpleNamespace(
        llm_engine=types.SimpleNamespace(
            vllm_config=types.SimpleNamespace(cache_config=types.SimpleNamespace(block_size=16))
        )
    )
    monkeypatch.setattr(module, "engine", lambda *a, **k: llm)
    monkeypatch.setattr(module, "forward_ms", lambda *a: pytest.fail("timed the forwards after differing runs"))
    plan_ = plan(tmp_path) | {"prompts": [[1, 2]], "max_tokens": 2}
    with pytest.raises(SystemExit, match="other tokens in a repeat"):
        module.plain_costs(plan_, 1, repeat=2)


def test_the_spread_column_adds_the_chains_and_plains_relative_ranges():
    """The rows' spread: the chain's repeats' range over their median plus plain's; None for a result
    measured once (without --repeat), so its reanalysis keeps an empty column."""
    module = cost_vllm()
    assert module.spread([1.0]) == 0.0
    assert module.spread([9.0, 10.0, 12.0]) == pytest.approx(0.3)
    m = {
        "plain_s": 10.0,
        "prefill_ms": 100.0,
        "questions": 1,
        "step_ms": 100.0,
        "forward": {2: 100.0, 3: 105.0},
        "rates": [0.5, 0.5],
        "plain_repeats": [9.5, 10.0, 10.5],
        "tau elsi": {},
        "runs": {
            k: {
                "seconds": 8.0,
                "drafts": 50,
                "accepted": 30,
                "generated": 100,
                "lossless": True,
                "repeats": [7.6, 8.0, 8.4],
            }
            for k in (1, 2)
        },
    }
    rows, _ = module.model_rows(m)
    assert [r["spread"] for r in rows] == [pytest.approx(0.2), pytest.approx(0.2)]  # 0.1 + 0.1
    for run in m["runs"].values():
        del run["repeats"]
    rows, _ = module.model_rows(m)
    assert [r["spread"] for r in rows] == [None, None]


def test_export_only_takes_elsis_tau_from_the_matching_committed_result(monkeypatch):
    """--export-only needs --export, and takes elsi's tau from a committed result of the same draft,
    family, questions and length (a result without the question-set field read as one per column);
    anything else is refused, naming what differs."""
    bench_cost, _, _ = bench_cost_and_costs()
    settings = {"model": "m", "draft": "d seed 0", "questions": 4, "tokens": 64}
    results = {"r": {"settings": settings, "rows": [{"shape": "chain", "k or nodes": 1, "tau measured": 1.2}]}}

    def read(name):
        if name not in results:
            raise FileNotFoundError(name)
        return results[name]

    monkeypatch.setattr(bench_cost, "read", read)
    one = bench_cost.corpus.ONE_PER_COLUMN
    assert bench_cost.committed_rows("r", "m", "d seed 0", one, 4, 64) == results["r"]["rows"]
    with pytest.raises(SystemExit, match=r"measured \{'question set': '" + one):
        bench_cost.committed_rows("r", "m", "d seed 0", "SpecBench coding", 4, 64)
    with pytest.raises(
        SystemExit, match=r"\{'draft': 'd seed 0', 'tokens': 64\}, not \{'draft': 'e seed 1', 'tokens': 32\}"
    ):
        bench_cost.committed_rows("r", "m", "e seed 1", one, 4, 32)
    with pytest.raises(SystemExit, match="no committed result 'x'"):
        bench_cost.committed_rows("x", "m", "d seed 0", one, 4, 64)
    monkeypatch.setattr(sys, "argv", ["bench_cost.py", "--export-only"])
    monkeypatch.setattr(bench_cost, "load_model", lambda *a, **k: pytest.fail("a model loaded"))
    with pytest.raises(SystemExit) as err:
        bench_cost.main()
    assert err.value.code == 2


def test_a_runs_output_digests_tell_equal_outputs_from_different_ones():
    """Each question's output hashed (sha256 of its token ids): a run's file shows its outputs are plain
    decoding's, question by question, without the tokens."""
    digests = cost_vllm().output_digests
    plain = digests([[1, 2, 3], [4, 5]])
    assert digests([[1, 2, 3], [4, 5]]) == plain and all(len(d) == 16 for d in plain)
    assert digests([[1, 2, 3], [4, 6]])[1] != plain[1] and digests([[1, 2, 3], [4, 6]])[0] == plain[0]
