"""The probe's rows and cached statistics (elsi_lib.hidden.probe_capture) on a tiny random target."""

import numpy as np
import pytest
import torch

from conftest import replied_conversations
from elsi_lib.common.cachefiles import cache_dir
from elsi_lib.hidden import probe_capture as C
from elsi_lib.inputs.chat import reply_starts, tokenize_conversation

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_rows_are_what_the_first_draft_step_sees(tiny_model, tiny_tokenizer):
    conversations = replied_conversations(4)
    rows = C.probe_rows(tiny_model, tiny_tokenizer, conversations, progress=False)
    N, d = len(tiny_model.get_decoder().layers), tiny_model.config.hidden_size
    assert rows["x"].shape[1:] == (N + 1, d) and rows["y"].shape[1:] == (d,)
    starts = reply_starts(tiny_tokenizer, conversations, 1024)
    for i, conversation in enumerate(conversations):
        ids = torch.tensor(tokenize_conversation(tiny_tokenizer, conversation)[0])
        mine = rows["conversation"] == i
        assert mine.sum() == len(ids) - starts[i]  # t = start - 1 .. T - 2
        with torch.no_grad():
            out = tiny_model(ids[None], output_hidden_states=True)
        t = np.arange(starts[i] - 1, len(ids) - 1)
        for layer in range(N - 1):  # hidden_states[l + 1] is the output of layer l (the last is after the norm)
            assert rows["x"][mine][:, layer] == pytest.approx(out.hidden_states[layer + 1][0, t].numpy(), abs=1e-4)
        embedding = tiny_model.get_input_embeddings().weight[ids[t + 1]].detach().numpy()
        assert rows["x"][mine][:, N] == pytest.approx(embedding, abs=1e-6)
        assert rows["y"][mine] == pytest.approx(out.hidden_states[-1][0, t + 1].numpy(), abs=1e-4)
        assert (rows["next"][mine] == out.logits[0, t + 1].argmax(-1).numpy()).all()


def test_heldout_conversations_are_a_seeded_share():
    held = C.heldout_conversations(20, 0.25, seed=3)
    assert len(held) == 5 and (held == C.heldout_conversations(20, 0.25, seed=3)).all()
    assert not (held == C.heldout_conversations(20, 0.25, seed=4)).all()
    assert len(C.heldout_conversations(3, 0.01, 0)) == 1 and len(C.heldout_conversations(3, 0.99, 0)) == 2
    with pytest.raises(ValueError, match="heldout_share"):
        C.heldout_conversations(1, 0.5, 0)


def test_cached_probe_is_reused_and_a_corrupt_cache_rebuilt(tiny_model, tiny_tokenizer, monkeypatch):
    conversations = replied_conversations(8)
    stats = C.cached_probe(tiny_model, tiny_tokenizer, conversations, rank=4, progress=False)
    assert stats.n_train + stats.n_heldout == len(
        C.probe_rows(tiny_model, tiny_tokenizer, conversations, progress=False)["y"]
    )
    with monkeypatch.context() as patch:
        patch.setattr(C, "_forward", lambda *a, **k: pytest.fail("recomputed"))
        again = C.cached_probe(tiny_model, tiny_tokenizer, conversations, rank=4, progress=False)
    assert all(np.array_equal(getattr(stats, f), getattr(again, f)) for f in C.FIELDS)
    path = next((cache_dir() / "probe").iterdir())
    path.write_bytes(path.read_bytes()[:-10])  # truncated
    rebuilt = C.cached_probe(tiny_model, tiny_tokenizer, conversations, rank=4, progress=False)
    assert np.array_equal(rebuilt.gram, stats.gram)
    other = C.cached_probe(tiny_model, tiny_tokenizer, conversations, rank=3, progress=False)
    assert other.gram.shape != stats.gram.shape  # another configuration, another entry


def test_the_probes_choice_is_cached_beside_its_statistics(tiny_model, tiny_tokenizer, monkeypatch):
    from elsi_lib.selection.probe import probe_choice

    conversations = replied_conversations(8)
    choice = C.cached_probe_choice(tiny_model, tiny_tokenizer, conversations, 2, rank=4, progress=False)
    assert choice == probe_choice(C.cached_probe(tiny_model, tiny_tokenizer, conversations, rank=4), 2)
    with monkeypatch.context() as patch:
        patch.setattr(C, "probe_choice", lambda *a, **k: pytest.fail("chosen again"))
        assert C.cached_probe_choice(tiny_model, tiny_tokenizer, conversations, 2, rank=4) == choice
    for path in (cache_dir() / "probe").glob("*.json"):
        path.write_text("{}")  # foreign content: chosen again, not used
    assert C.cached_probe_choice(tiny_model, tiny_tokenizer, conversations, 2, rank=4) == choice
    assert len(C.cached_probe_choice(tiny_model, tiny_tokenizer, conversations, 3, rank=4).layers) == 3


def _fields_equal(a, b) -> bool:
    return all(np.array_equal(getattr(a, f), getattr(b, f)) for f in C.FIELDS)


def test_the_captures_forward_gives_the_probe_what_its_own_forward_would(tiny_model, tiny_tokenizer, monkeypatch):
    """One forward for both: the statistics `probe_alongside` builds from the capture's batches are, to
    the bit, those of the probe's own forward at the same batching, and a later `cached_probe` reads them."""
    from elsi_lib.hidden.capture import capture_variants

    conversations = replied_conversations(10)
    with C.probe_alongside(tiny_model, tiny_tokenizer, conversations, rank=4) as on_batch:
        assert on_batch is not None
        capture_variants(tiny_model, tiny_tokenizer, conversations, {"e": {}}, progress=False, on_batch=on_batch)
    with monkeypatch.context() as patch:
        patch.setattr(C, "_forward", lambda *a, **k: pytest.fail("the probe ran its own forward"))
        shared = C.cached_probe(tiny_model, tiny_tokenizer, conversations, rank=4, progress=False)
        with C.probe_alongside(tiny_model, tiny_tokenizer, conversations, rank=4) as on_batch:
            assert on_batch is None  # cached: nothing to collect
    assert not list((cache_dir() / "probe").glob("rows-*"))  # the spilled rows are gone
    monkeypatch.setenv("ELSI_CACHE_DIR", str(cache_dir().parent / "another-cache"))
    own = C.cached_probe(tiny_model, tiny_tokenizer, conversations, rank=4, progress=False)
    assert _fields_equal(shared, own)
    n_rows = len(C.probe_rows(tiny_model, tiny_tokenizer, conversations)["y"])
    assert own.n_train + own.n_heldout == n_rows and own.heldout_z.shape[0] == own.n_heldout


def test_a_forward_that_missed_batches_caches_no_probe(tiny_model, tiny_tokenizer, monkeypatch):
    """A capture resumed from a checkpoint (or sharded) feeds only some batches: the statistics would be
    of fewer rows, so none are cached and `cached_probe` runs a forward of its own."""
    from elsi_lib.hidden.forward import hidden_batches, pad_id

    conversations = replied_conversations(10)
    with C.probe_alongside(tiny_model, tiny_tokenizer, conversations, rank=4) as on_batch:
        rows = C.ProbeRows(
            tiny_model,
            tiny_tokenizer,
            conversations,
            cache_dir(),
            max_length=1024,
            heldout_share=0.25,
            seed=0,
            batching=C.BATCHING,
        )
        assert len(rows.plan) > 1
        for batch in hidden_batches(tiny_model, rows.samples, rows.plan[1:], pad_id(tiny_tokenizer)):
            on_batch(batch)
    assert not list((cache_dir() / "probe").glob("*.npz"))
    calls = []
    original = C._forward
    monkeypatch.setattr(C, "_forward", lambda *a, **k: calls.append(1) or original(*a, **k))
    C.cached_probe(tiny_model, tiny_tokenizer, conversations, rank=4, progress=False)
    assert calls == [1]


def test_the_batching_is_part_of_the_key(tiny_model, tiny_tokenizer):
    conversations = replied_conversations(6)
    a = C.probe_key(tiny_model, tiny_tokenizer, conversations, rank=4)
    b = C.probe_key(tiny_model, tiny_tokenizer, conversations, rank=4, batching=(64, 8192))
    assert a != b and a["batching"] == list(C.BATCHING)
