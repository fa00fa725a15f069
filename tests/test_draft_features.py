"""Stored target features (elsi_lib.draft.features) on a tiny random target: where each reply
starts, the stored states against the model itself, and a corrupt shard rebuilt alone."""

import json
import os
import re
import shutil
import time

import pytest
import torch

from conftest import module_feature_store, replied_conversations
from elsi_lib.common.cachefiles import verify_manifest
from elsi_lib.draft import features as F
from elsi_lib.draft.config import FINAL_NORM
from elsi_lib.inputs.chat import tokenize_conversation

LAYERS = (0, 1, 2, 3)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def store(tiny_model, tiny_tokenizer, tmp_path_factory):
    return module_feature_store(tiny_model, tiny_tokenizer, tmp_path_factory, 6, LAYERS)


def test_reply_starts_point_at_the_reply(tiny_tokenizer):
    conversations = replied_conversations(5, seed=7)
    starts = F.reply_starts(tiny_tokenizer, conversations, max_length=1024)
    for conversation, start in zip(conversations, starts):
        ids = tokenize_conversation(tiny_tokenizer, conversation)[0]
        reply = conversation[-1]["content"]
        assert tiny_tokenizer.decode(ids[start:]).startswith(reply)
        assert tiny_tokenizer.decode(ids[:start]).endswith("<|im_start|>assistant\n")
    assert F.reply_starts(tiny_tokenizer, conversations, max_length=10) == [10] * 5  # cut to max_length
    with pytest.raises(ValueError, match="conversation 1 does not end with an assistant reply"):
        F.reply_starts(tiny_tokenizer, [conversations[0], conversations[1][:-1]], max_length=1024)


def reference_states(model, ids):
    """Output of every decoder layer, via transformers' output_hidden_states (layers 0..N-2: index
    l+1; the last entry is after the final norm, so the last layer's output comes from a hook)."""
    captured = {}
    layers = model.get_decoder().layers
    handle = layers[-1].register_forward_hook(
        lambda module, args, output: captured.update(last=output[0] if isinstance(output, tuple) else output)
    )
    try:
        with torch.no_grad():
            out = model(ids[None], output_hidden_states=True)
    finally:
        handle.remove()
    states = [out.hidden_states[l + 1][0] for l in range(len(layers) - 1)] + [captured["last"][0]]
    return states, out.hidden_states[-1][0], out.logits[0]


def test_feature_store_matches_the_model(tiny_model, store):
    assert len(store) == 6
    for i in range(len(store)):
        states, final, logits = reference_states(tiny_model, store.sequence(i)["ids"])
        for layer_ids in [(1,), (0, 3), (1, 2, 3), LAYERS]:
            s = store.sequence(i, layer_ids)
            n = len(s["ids"])
            assert s["features"].shape == (n, len(layer_ids) * 32)
            for j, l in enumerate(layer_ids):
                torch.testing.assert_close(s["features"][:, j * 32 : (j + 1) * 32], states[l], atol=2e-3, rtol=2e-3)
        s = store.sequence(i, FINAL_NORM)
        torch.testing.assert_close(s["features"], final, atol=2e-3, rtol=2e-3)
        torch.testing.assert_close(s["final_norm"], final, atol=2e-3, rtol=2e-3)
        assert s["argmax"].tolist() == logits.argmax(-1).tolist()
        assert store.length(i) == n


def test_features_rebuild_a_corrupt_shard(tiny_model, tiny_tokenizer, monkeypatch):
    monkeypatch.setattr(F, "SHARD", 2)  # 3 shards of 2 conversations
    conversations = replied_conversations(6, seed=1, reply_words=(2, 5))
    forwards = []
    handle = tiny_model.get_decoder().layers[0].register_forward_pre_hook(lambda m, a: forwards.append(a[0].shape[0]))
    try:
        store = F.build_features(tiny_model, tiny_tokenizer, conversations, (1, 2), progress=False)
        assert sum(forwards) == 6
        original = [store.sequence(i, (1, 2)) for i in range(6)]
        forwards.clear()
        F.build_features(tiny_model, tiny_tokenizer, conversations, (1, 2), progress=False)
        assert forwards == []  # everything reused

        shard = store.folder / "shard_00001"
        path = shard / "hidden.npy"
        data = bytearray(path.read_bytes())
        data[-5] ^= 0xFF  # same size, different content
        path.write_bytes(bytes(data))
        key = F._key(tiny_model, tiny_tokenizer, conversations, (1, 2), 1024)
        assert "checksum mismatch" in verify_manifest(shard, {**key, "index": 1})
        with pytest.raises(RuntimeError, match="shard_00001"):
            F.open_features(store.folder, key, (1, 2), 3)

        rebuilt = F.build_features(tiny_model, tiny_tokenizer, conversations, (1, 2), progress=False)
        assert sum(forwards) == 2  # only the corrupt shard's two conversations
        assert verify_manifest(shard, {**key, "index": 1}) is None
        for i in range(6):
            again = rebuilt.sequence(i, (1, 2))
            assert torch.equal(again["features"], original[i]["features"])
            assert torch.equal(again["ids"], original[i]["ids"]) and again["start"] == original[i]["start"]
    finally:
        handle.remove()


# ---------------------------------------------------------------- shards you can trust


@pytest.fixture
def three_shards(tiny_model, tiny_tokenizer, monkeypatch):
    """(conversations, store, key, forwards): features of 6 conversations in 3 shards of 2, and the
    batch sizes of every target forward since (cleared)."""
    monkeypatch.setattr(F, "SHARD", 2)
    conversations = replied_conversations(6, seed=2, reply_words=(2, 5))
    store = F.build_features(tiny_model, tiny_tokenizer, conversations, (1, 2), progress=False)
    forwards = []
    handle = tiny_model.get_decoder().layers[0].register_forward_pre_hook(lambda m, a: forwards.append(a[0].shape[0]))
    yield conversations, store, F._key(tiny_model, tiny_tokenizer, conversations, (1, 2), 1024), forwards
    handle.remove()


def test_a_file_taken_off_the_manifest_and_altered_is_not_served(tiny_model, tiny_tokenizer, three_shards):
    conversations, store, key, forwards = three_shards
    shard = store.folder / "shard_00001"
    manifest = json.loads((shard / "manifest.json").read_text())
    del manifest["files"]["hidden.npy"]
    (shard / "manifest.json").write_text(json.dumps(manifest))
    data = bytearray((shard / "hidden.npy").read_bytes())
    data[-5] ^= 0xFF
    (shard / "hidden.npy").write_bytes(bytes(data))
    with pytest.raises(RuntimeError, match=r"shard_00001 .*does not list: hidden.npy"):
        F.open_features(store.folder, key, (1, 2), 3)
    F.build_features(tiny_model, tiny_tokenizer, conversations, (1, 2), progress=False)
    assert sum(forwards) == 2  # that shard rebuilt, alone


def test_a_shard_replaced_by_a_file_is_named_before_any_forward(tiny_model, tiny_tokenizer, three_shards):
    """A shard replaced by a file is named before any forward, not rebuilt first only to fail naming the
    temporary folder `.shard_00001.tmp`."""
    conversations, store, key, forwards = three_shards
    shard = store.folder / "shard_00001"
    shutil.rmtree(shard)
    shard.write_text("not a shard")
    with pytest.raises(NotADirectoryError, match=re.escape(str(shard)) + " is a file") as raised:
        F.build_features(tiny_model, tiny_tokenizer, conversations, (1, 2), progress=False)
    assert ".tmp" not in str(raised.value) and forwards == []
    with pytest.raises(RuntimeError, match=r"shard_00001 is not usable \(not a folder\)"):
        F.open_features(store.folder, key, (1, 2), 3)


def test_an_unfinished_shard_folder_is_removed_and_said_so(tiny_model, tiny_tokenizer, three_shards):
    """A build killed while writing a shard leaves `.shard_k.tmp`: the next build removes it (saying
    so) and writes the shard afresh, with nothing of the old folder in it."""
    conversations, store, key, forwards = three_shards
    shutil.rmtree(store.folder / "shard_00001")
    left = store.folder / ".shard_00001.tmp"
    left.mkdir()
    (left / "stray.npy").write_bytes(b"from an interrupted build")
    with pytest.warns(UserWarning, match=r"removed .*\.shard_00001\.tmp.*interrupted"):
        F.build_features(tiny_model, tiny_tokenizer, conversations, (1, 2), progress=False)
    assert not left.exists() and not (store.folder / "shard_00001" / "stray.npy").exists()
    assert sum(forwards) == 2


@pytest.mark.parametrize("change", ["in place", "replaced"])
def test_a_shard_changed_on_disk_while_open_is_refused(three_shards, change):
    """The store memory-maps its shards once verified; a shard rewritten afterwards (in place, or a
    new file in its place) is refused: otherwise it is read as it is now, or as it was, without a word."""
    _, store, _, _ = three_shards
    store.sequence(2, (1, 2))  # read once: mapped
    path = store.folder / "shard_00001" / "hidden.npy"
    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF
    if change == "in place":
        time.sleep(0.05)  # file times tick on a coarse clock (a few ms): a later write shows in them
        with open(path, "r+b") as handle:
            handle.write(bytes(data))
    else:
        path.with_name("new.npy").write_bytes(bytes(data))
        os.replace(path.with_name("new.npy"), path)
    with pytest.raises(RuntimeError, match=r"shard_00001 changed on disk .*hidden.npy"):
        store.sequence(2, (1, 2))
    with pytest.raises(RuntimeError, match="shard_00001 changed on disk"):
        store.length(3)
    assert store.sequence(0, (1, 2))["features"].shape == (store.length(0), 64)  # the other shards still read


def test_two_builders_of_one_store_wait_for_each_other(tiny_model, tiny_tokenizer, monkeypatch):
    """Two processes (here two threads, each with its own lock file handle) building the same store: the
    second waits for the first and reads what it wrote. Without the lock the second would remove the
    first's shard in progress as 'unfinished', or rewrite a shard the first has open (two notebooks under
    one cache)."""
    import threading

    conversations = replied_conversations(F.SHARD + 2)
    writes = []
    original = F._write_shard
    monkeypatch.setattr(F, "_write_shard", lambda *a, **k: writes.append(a[3]) or original(*a, **k))
    stores, errors = [], []

    def build():
        try:
            stores.append(F.build_features(tiny_model, tiny_tokenizer, conversations, LAYERS, progress=False))
        except Exception as err:  # noqa: BLE001 (reported below)
            errors.append(err)

    threads = [threading.Thread(target=build) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(stores) == 2
    assert sorted(writes) == [0, 1]  # each shard written once: the second builder found them complete
    for store in stores:
        assert len(store) == len(conversations)
