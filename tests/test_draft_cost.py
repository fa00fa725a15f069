"""The cost model of speculative decoding (elsi_lib.draft.cost): per-step acceptance from a chain's
rounds, the expected tokens per round, and speed-up / break-even from measured seconds."""

import numpy as np
import pytest

from elsi_lib.draft import cost


def test_step_acceptance_counts_rounds_that_reached_each_step():
    # 10 rounds of a chain of 3: accepted 0 x4, 1 x3, 2 x2, 3 x1
    accepted = [0] * 4 + [1] * 3 + [2] * 2 + [3]
    rates = cost.step_acceptance(accepted, 3)
    assert rates == pytest.approx([6 / 10, 3 / 6, 1 / 3])


def test_tokens_per_round_of_a_chain_equals_its_measured_tau():
    """1 + mean accepted is exactly the product formula with the chain's own rates."""
    rng = np.random.default_rng(0)
    accepted = rng.integers(0, 6, size=257).tolist()
    assert cost.tokens_per_round(cost.step_acceptance(accepted, 5)) == pytest.approx(1 + np.mean(accepted))


def test_rates_of_a_long_chain_predict_a_shorter_one():
    """Rounds whose steps are accepted independently with rates a_i: the rates measured on chains of 5,
    truncated to 2, predict the tau of chains of 2 (Monte Carlo, 20,000 rounds each)."""
    rng = np.random.default_rng(1)
    true = [0.7, 0.5, 0.6, 0.4, 0.3]

    def rounds(k, n):
        ok = rng.random((n, k)) < np.array(true[:k])
        return np.cumprod(ok, axis=1).sum(axis=1)  # accepted prefix length per round

    measured_5 = cost.step_acceptance(rounds(5, 20000).tolist(), 5)
    tau_2 = 1 + rounds(2, 20000).mean()
    assert cost.tokens_per_round(measured_5[:2]) == pytest.approx(tau_2, abs=0.02)
    assert cost.tokens_per_round(true[:2]) == pytest.approx(1 + 0.7 + 0.7 * 0.5)


def test_unreached_steps_get_rate_zero_and_perfect_acceptance_is_the_ceiling():
    assert cost.step_acceptance([0, 0, 1], 3) == [pytest.approx(1 / 3), 0.0, 0.0]
    assert cost.tokens_per_round([1.0] * 4) == 5.0
    assert cost.tokens_per_round([]) == 1.0


def test_speedup_is_one_at_break_even_and_scales_with_tokens():
    round_s, plain_s = 0.084, 0.051
    tau = cost.break_even(round_s, plain_s)
    assert cost.speedup(tau, round_s, plain_s) == pytest.approx(1.0)
    assert cost.speedup(2 * tau, round_s, plain_s) == pytest.approx(2.0)
    assert cost.round_seconds(0.011, 0.061, 0.002) == pytest.approx(0.074)


def test_generation_seconds_counts_prefills_and_rounds():
    # 3 prompts, 63 tokens: 3 from the prefills, 60 from rounds of 2 tokens each (30 rounds of 0.1 s)
    assert cost.generation_seconds(63, 3, 2.0, 0.1, 0.5) == pytest.approx(1.5 + 3.0)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: cost.step_acceptance([0, 4], 3), "0..3"),
        (lambda: cost.step_acceptance([], 3), "no rounds"),
        (lambda: cost.step_acceptance([0], 0), "k must be"),
        (lambda: cost.tokens_per_round([0.5, 1.2]), r"\[0, 1\]"),
        (lambda: cost.tokens_per_round([float("nan")]), r"\[0, 1\]"),
        (lambda: cost.round_seconds(-0.1, 0.2), "draft_s"),
        (lambda: cost.round_seconds(0.0, 0.0), "some time"),
        (lambda: cost.speedup(0.5, 0.1, 0.05), r"tokens per round must be a finite number in \[1, inf\], got 0.5"),
        (lambda: cost.break_even(0.1, 0.0), "plain_s"),
        (lambda: cost.generation_seconds(2, 3, 1.5, 0.1, 0.2), "generated tokens must be a whole number >= 3"),
        (lambda: cost.generation_seconds(9, 3, 0.0, 0.1, 0.2), "tokens per round must be"),
        (lambda: cost.generation_seconds(9, 3, 1.5, 0.1, -0.2), r"prefill_s must be a finite number in \[0, inf\]"),
        (lambda: cost.step_acceptance([0, 1.5], 3), "accepted count of round 2 must be a whole number"),
        # text, bools, NaN and infinities: refused in the model's words, never taken as numbers
        (lambda: cost.tokens_per_round("0.5"), "a sequence of numbers"),
        (lambda: cost.tokens_per_round(["0.5", "0.5"]), "a_1 must be a finite number in \\[0, 1\\], got '0.5'"),
        (lambda: cost.tokens_per_round([True, True]), "a_1 must be a finite number"),
        (lambda: cost.round_seconds("1", 1), r"draft_s \(seconds\) must be a finite number"),
        (lambda: cost.step_acceptance([float("nan")], 3), "accepted count of round 1 must be a whole number"),
        (lambda: cost.speedup(float("inf"), 1, 1), "tokens per round must be a finite number"),
        (lambda: cost.generation_seconds(10.5, 2, 2, 1, 0), "generated tokens must be a whole number"),
        (lambda: cost.generation_seconds(True, True, 2, 1, 0), "prompts must be a whole number"),
        (lambda: cost.step_acceptance({0: 1, 5: 2}, 5), "a sequence of whole numbers, one per round"),
    ],
)
def test_bad_input_is_refused_with_its_name(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_the_engines_cost_script_repeats_the_same_arithmetic():
    """engines/cost_vllm.py cannot import elsi (vLLM's environment): its copy of the model must agree."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "engines" / "cost_vllm.py"
    spec = importlib.util.spec_from_file_location("cost_vllm", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    accepted = [0] * 5 + [1] * 4 + [2] * 3 + [3] * 2  # 14 rounds of a chain of 3
    per_position = [sum(a > i for a in accepted) for i in range(3)]  # vLLM's counters: accepted at position i
    rates = module.rates_from_positions(len(accepted), per_position)
    assert rates == pytest.approx(cost.step_acceptance(accepted, 3))
    assert module.tokens_per_round(rates) == pytest.approx(cost.tokens_per_round(rates))
    assert module.tokens_per_round(rates) == pytest.approx(1 + np.mean(accepted))


def test_numpy_counts_are_counts():
    """A numpy integer k (as the benchmarks compute it) is a chain length like a Python int."""
    import numpy as np

    assert cost.step_acceptance([3, 2, 1], np.int64(3)) == cost.step_acceptance([3, 2, 1], 3)


def test_unordered_rates_or_rounds_are_refused():
    """A set loses the steps' order (and a repeated round): a_1..a_k and the rounds must come as sequences."""
    with pytest.raises(ValueError, match="a sequence"):
        cost.tokens_per_round({0.9, 0.5})
    with pytest.raises(ValueError, match="a sequence"):
        cost.step_acceptance({1, 2, 2}, 2)
