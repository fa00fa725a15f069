"""One try of vLLM's own hidden-state extraction (speculators' data path: the `extract_hidden_states`
speculative method with the example hidden-states connector) on this CPU, in the engines' environment.

Reads REQUEST.json ({"model": folder, "layers": vLLM layer ids, "prompts": [token ids]}), runs one
prefill per prompt (max_tokens=1), and writes OUT.npz with each prompt's captured states
("states_<i>", (T, layers, d) float32) and the prefill seconds; bench/bench_vllm_hidden.py compares
them with elsi's forward and times both.

    .venv-engines/bin/python engines/extract_hidden.py REQUEST.json OUT.npz
"""

from __future__ import annotations

import json
import sys
import tempfile
import time

import numpy as np


def main() -> None:
    from vllm import LLM, SamplingParams
    from vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector import load_hidden_states

    request = json.loads(open(sys.argv[1]).read())
    with tempfile.TemporaryDirectory() as folder:
        llm = LLM(
            model=request["model"],
            dtype="float32",
            max_model_len=2048,
            enforce_eager=True,
            seed=0,
            speculative_config={
                "method": "extract_hidden_states",
                "num_speculative_tokens": 1,
                "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": request["layers"]}},
            },
            kv_transfer_config={
                "kv_connector": "ExampleHiddenStatesConnector",
                "kv_role": "kv_producer",
                "kv_connector_extra_config": {"shared_storage_path": folder},
            },
        )
        start = time.perf_counter()
        outputs = llm.generate(
            [{"prompt_token_ids": p} for p in request["prompts"]],
            SamplingParams(max_tokens=1, temperature=0.0),
            use_tqdm=False,
        )
        arrays = {}
        for i, output in enumerate(outputs):
            data = load_hidden_states(output.kv_transfer_params["hidden_states_path"])
            arrays[f"states_{i}"] = data["hidden_states"].float().numpy()
        seconds = time.perf_counter() - start
    np.savez(sys.argv[2], seconds=seconds, **arrays)
    print(f"vLLM extracted {sum(len(p) for p in request['prompts'])} tokens' states in {seconds:.1f} s", flush=True)


if __name__ == "__main__":
    main()
