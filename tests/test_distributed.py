"""Capture sharded over 2 gloo processes gives the Z of a single-process run."""

import os

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from elsi_lib import capture

from conftest import make_conversations

OPTS = dict(rho=0.5, block=4, batch_size=1, cache=False, progress=False)


def _worker(rank, world, folder, init_file):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        model = AutoModelForCausalLM.from_pretrained(folder).eval()
        tokenizer = AutoTokenizer.from_pretrained(folder)
        forwards = []
        model.get_decoder().layers[0].register_forward_pre_hook(lambda *a: forwards.append(1))
        stats = capture(model, tokenizer, make_conversations(7), **OPTS)
        np.savez(
            os.path.join(folder, f"rank{rank}.npz"),
            Z=stats.Z,
            final_norm=stats.final_norm,
            sample_entropy=stats.sample_entropy,
            sample_index=stats.sample_index,
            blocks=stats.counts["blocks"],
            seen=stats.counts["tokens_seen"],
            forwards=len(forwards),
        )
    finally:
        dist.destroy_process_group()


def test_two_gloo_processes_match_one(tiny_model, tiny_tokenizer, tmp_path):
    tiny_model.save_pretrained(tmp_path)
    tiny_tokenizer.save_pretrained(tmp_path)
    single = capture(tiny_model, tiny_tokenizer, make_conversations(7), **OPTS)
    mp.spawn(_worker, args=(2, str(tmp_path), str(tmp_path / "init")), nprocs=2, join=True)
    assert sorted(int(np.load(tmp_path / f"rank{r}.npz")["forwards"]) for r in range(2)) == [3, 4]  # sharded
    for rank in range(2):
        result = np.load(tmp_path / f"rank{rank}.npz")
        # the same samples, each in its own batch: only the float64 summation order differs
        np.testing.assert_allclose(result["Z"], single.Z, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(result["final_norm"], single.final_norm, rtol=1e-12, atol=1e-14)
        np.testing.assert_array_equal(result["sample_index"], single.sample_index)
        np.testing.assert_allclose(result["sample_entropy"], single.sample_entropy, rtol=1e-12)
        assert int(result["blocks"]) == single.counts["blocks"]
        assert int(result["seen"]) == single.counts["tokens_seen"]
