"""Selection restricted to the sets an engine can feed a draft (elsi_lib.selection.feasible and the
`allowed` / `required` arguments of the searches): every restricted answer is one the engine's own
id rules (conventions.engine_fragment) accept, the exhaustive one is the best such set, and an
unrestricted search is unchanged."""

import itertools

import numpy as np
import pytest

from elsi_lib.selection import select
from elsi_lib.selection.conventions import ENGINE_FORMATS, SGLANG_READINGS
from elsi_lib.selection.entropy import set_entropy
from elsi_lib.selection.feasible import check_size, feasible, restriction
from elsi_lib.selection.probe import probe_choice, probe_stats

N = 8
ARCHITECTURES = ["LlamaForCausalLM", "DeepseekV3ForCausalLM", "Qwen2ForCausalLM", None]


def stack(seed=0, last_is_best=True):
    """A layer stack whose last layer carries the most structure (so unrestricted searches pick it)."""
    rng = np.random.default_rng(seed)
    Z = rng.normal(size=(N, 12, 16)) * np.linspace(0.5, 1.0, N)[:, None, None]
    if last_is_best:
        Z[-1] = rng.normal(size=(12, 16)) * 3
    return Z


@pytest.mark.parametrize("engine", ENGINE_FORMATS)
@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_every_restricted_answer_is_feasible_and_the_exhaustive_one_is_the_best(engine, architecture):
    rule = restriction(engine, N, architecture)
    Z = stack()
    for m in (1, 2, 3):
        try:
            check_size(rule, m)
        except ValueError:
            continue
        where = {"allowed": rule.allowed, "required": rule.required}
        for chosen in (
            select.elsi(Z, m, 4, 3, **where),
            select.elsi_c(Z, m, 4, 3, **where),
            select.exhaustive(Z, m, **where),
        ):
            assert feasible(chosen.layers, N, engine, architecture) is None, (chosen.method, chosen.layers)
        every = [s for s in itertools.combinations(range(N), m) if feasible(s, N, engine, architecture) is None]
        best = max(every, key=lambda s: set_entropy(Z, s))
        assert select.exhaustive(Z, m, **where).layers == best


def test_the_rules():
    assert restriction("vllm", N).allowed == tuple(range(N)) and not restriction("vllm", N).restricts
    assert restriction("speculators", N).allowed == tuple(range(N - 1))
    llama = restriction("sglang", N, "LlamaForCausalLM")
    assert llama.allowed == tuple(range(N - 1)) and llama.required == ()
    deepseek = restriction("sglang", N, "DeepseekV3ForCausalLM")
    assert deepseek.allowed == tuple(range(1, N - 1)) and deepseek.required == ()
    unknown = restriction("specforge", N, "Qwen2ForCausalLM")
    assert unknown.allowed == tuple(range(1, N - 1)) and unknown.required == (1,) and unknown.m == 3
    assert "Qwen2ForCausalLM" not in SGLANG_READINGS  # why Qwen2 gets the strictest rule
    with pytest.raises(ValueError, match="exactly 3 layers"):
        check_size(unknown, 2)
    with pytest.raises(ValueError, match="unknown engine"):
        restriction("tgi", N)


def test_an_unrestricted_search_is_unchanged():
    Z = stack(1)
    for m in (1, 2, 3):
        for search in (select.elsi, select.elsi_c, select.exhaustive):
            free, open_ = search(Z, m), search(Z, m, allowed=range(N), required=())
            assert free.layers == open_.layers and free.entropy == open_.entropy and free.params == open_.params


def test_a_restricted_search_refuses_what_cannot_be():
    Z = stack()
    with pytest.raises(ValueError, match="required layers"):
        select.elsi(Z, 2, allowed=(0, 1), required=(3,))
    with pytest.raises(ValueError, match="cannot hold"):
        select.exhaustive(Z, 3, allowed=(0, 1))
    with pytest.raises(ValueError, match="lie in"):
        select.elsi_c(Z, 2, allowed=(0, N))
    for name, given in (("allowed", [1.0, 2.0, 3.5]), ("allowed", "012"), ("required", [True])):
        with pytest.raises(TypeError, match=f"{name} must be integer layer ids"):  # never truncated or spelt out
            select.elsi(Z, 2, **{name: given})
    assert select.elsi(Z, 2, allowed=(np.int64(0), 1, 2)).layers  # numpy's integers are integers


def test_the_probe_searches_the_restricted_sets_too():
    rng = np.random.default_rng(0)
    x, hx = rng.normal(size=(200, N, 6)), rng.normal(size=(80, N, 6))
    y, hy = x[:, -1] @ rng.normal(size=(6, 4)), hx[:, -1] @ rng.normal(size=(6, 4))
    stats, _ = probe_stats(x, y, hx, hy, rank=4)
    rule = restriction("sglang", N, None)
    free = probe_choice(stats, 3)
    bound = probe_choice(stats, 3, allowed=rule.allowed, required=rule.required)
    assert feasible(bound.layers, N, "sglang", None) is None and bound.ridge == free.ridge
    assert bound.error >= free.error
    beam = probe_choice(stats, 3, allowed=rule.allowed, required=rule.required, exhaustive_limit=1)
    assert beam.search == "beam" and feasible(beam.layers, N, "sglang", None) is None
