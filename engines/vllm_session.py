"""One vLLM engine as elsi's engine scripts use it (standalone: vLLM's environment, no elsi import):
the target in float32, eager, batch-1 greedy generation, the speculative-decoding counters read from
`llm.get_metrics()`, and the engine shut down before the next one starts (engines/check_engines.py,
engines/cost_vllm.py)."""

from __future__ import annotations

import gc
import time


def engine(
    target: str, draft: str | None = None, k: int = 0, prefix_caching: bool | None = None, dtype: str = "float32"
):
    """vLLM's LLM on `target` (`dtype`, float32 unless said; eager, 2,048 positions, seed 0, statistics
    on), with the EAGLE-3 draft folder `draft` proposing chains of k >= 1 tokens when one is given (vLLM
    runs it in the target's dtype); prefix caching as vLLM's default unless `prefix_caching` says."""
    from vllm import LLM

    if draft is not None and (not isinstance(k, int) or k < 1):
        raise ValueError(f"a draft proposes chains of k >= 1 tokens, got k = {k!r}")
    spec = None if draft is None else {"method": "eagle3", "model": draft, "num_speculative_tokens": k}
    caching = {} if prefix_caching is None else {"enable_prefix_caching": prefix_caching}
    return LLM(
        model=target,
        dtype=dtype,
        enforce_eager=True,
        max_model_len=2048,
        disable_log_stats=False,
        speculative_config=spec,
        seed=0,
        **caching,
    )


def generate(llm, prompts, max_tokens: int) -> tuple[list[list[int]], float]:
    """Greedy replies to the token-id prompts, one request at a time (batch 1), and the seconds they took."""
    from vllm import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=max_tokens)
    tokens, start = [], time.perf_counter()
    for prompt in prompts:
        out = llm.generate([{"prompt_token_ids": prompt}], params, use_tqdm=False)
        tokens.append(list(out[0].outputs[0].token_ids))
    return tokens, time.perf_counter() - start


def counters(llm, prefix: str = "vllm:spec_decode") -> dict:
    """vLLM's counters whose name starts with `prefix`, named without "vllm:" and "spec_decode_"
    (num_drafts, num_accepted_tokens, ...; a Vector's per-position values as a list)."""
    out = {}
    for m in llm.get_metrics():
        if m.name.startswith(prefix):
            name = m.name.removeprefix("vllm:").removeprefix("spec_decode_")
            out[name] = list(m.values) if hasattr(m, "values") else m.value
    return out


def shutdown(llm) -> None:
    """Stop the engine's core (its process, weights and KV space) before the next one starts."""
    core = getattr(llm.llm_engine, "engine_core", None)
    if core is not None and hasattr(core, "shutdown"):
        core.shutdown()
    gc.collect()
