"""Draft training (elsi_lib.draft.train) on a tiny random target: training-time test against the
inference chain it imitates, the masks, batch plans, determinism and resumption of `train_drafts`."""

import re

import numpy as np
import pytest
import torch

from conftest import module_feature_store, perturb_norms
from elsi_lib.draft.model import Eagle3Draft
from elsi_lib.draft.config import FINAL_NORM
from elsi_lib.draft.vocabulary import draft_vocabulary, init_lm_head_from_target
from elsi_lib.draft import checkpoints as C
from elsi_lib.draft import train as T

LAYERS = (0, 1, 2, 3)
DRAFT_VOCAB = 48

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def store(tiny_model, tiny_tokenizer, tmp_path_factory):
    return module_feature_store(tiny_model, tiny_tokenizer, tmp_path_factory, 6, LAYERS)


@pytest.fixture(scope="module")
def vocab(tiny_model, store):
    counts = torch.zeros(tiny_model.config.vocab_size)
    for i in range(len(store)):
        counts += torch.bincount(store.sequence(i)["argmax"], minlength=len(counts))
    return draft_vocabulary(counts, DRAFT_VOCAB)


def make_draft(model, vocab, source, seed=0, perturb=True):
    draft = Eagle3Draft.from_target(model, source, DRAFT_VOCAB, seed=seed)
    draft.set_vocabulary(*vocab)
    init_lm_head_from_target(draft, model.get_output_embeddings())
    if perturb:
        perturb_norms(draft, seed)
    return draft


def target_rows(model, vocab):
    return model.get_output_embeddings().weight[vocab[1]].detach()


# ---------------------------------------------------------------- 5. training-time test == inference chain


def chain_logits(draft, ids, features, t, K):
    """What a tree round at root t+1 computes along the ground-truth path: a prefix pass over rows
    0..t (features of token j, embedding of token j+1, position j), then x[t+2], x[t+3], ... fed as a
    chain (hidden = the previous node's output, positions t+1, t+2, ...), each node attending to the
    prefix and the chain so far. Re-run from scratch for every step; returns [K] (V_draft,) logits."""
    prefix_ids, prefix_g = ids[1 : t + 2], draft.project(features[: t + 1])  # (t+1,), (t+1, d)
    P = t + 1
    out, chain_ids, chain_hidden = [], [], []
    _, hidden, _ = draft.step(
        prefix_ids[None],
        prefix_g[None],
        positions=torch.arange(P),
        allowed=torch.ones(P, P, dtype=torch.bool).tril()[None, None],
    )
    out.append(draft.lm_head(draft.norm(hidden[0, t])))
    last = hidden[0, t]
    for k in range(2, K + 1):
        chain_ids.append(int(ids[t + k]))
        chain_hidden.append(last)
        T_ = P + len(chain_ids)
        tokens = torch.cat([prefix_ids, torch.tensor(chain_ids)])
        hidden_in = torch.cat([prefix_g, torch.stack(chain_hidden)])
        positions = torch.cat([torch.arange(P), torch.arange(t + 1, t + k)])
        allowed = torch.ones(T_, T_, dtype=torch.bool).tril()  # prefix causal, chain sees prefix + earlier chain
        logits, hidden, _ = draft.step(tokens[None], hidden_in[None], positions=positions, allowed=allowed[None, None])
        out.append(logits[0, -1])
        last = hidden[0, -1]
    return out


@pytest.mark.parametrize("source", [(1, 3), FINAL_NORM])
def test_ttt_unroll_equals_inference_chain(tiny_model, vocab, store, source):
    draft = make_draft(tiny_model, vocab, source).eval()
    K, indices = 3, [1, 4]  # two sequences of different lengths: padding in the batch
    assert store.length(1) != store.length(4)
    batch = T.collate(store, indices, {source})
    batch["start"] = torch.zeros(2, dtype=torch.long)  # score every row, not only the reply
    with torch.no_grad():
        steps = list(T.ttt_unroll(draft, batch, K, autocast=False))
        assert [k for k, *_ in steps] == [1, 2, 3]
        for row, i in enumerate(indices):
            s = store.sequence(i, source)
            n = len(s["ids"])
            for t in (0, 5, n // 2, n - K - 2):
                reference = chain_logits(draft, s["ids"], s["features"], t, K)
                for k, logits, chosen, position, label in steps:
                    assert int(position[t]) == t + k
                    hit = ((chosen[0] == row) & (chosen[1] == t)).nonzero().flatten()
                    assert len(hit) == 1, (row, t, k)
                    torch.testing.assert_close(logits[hit[0]], reference[k - 1], atol=1e-4, rtol=1e-4)
                    assert int(label[hit[0]]) == int(draft.to_draft(s["argmax"][t + k]))
            # The last scored row at step k predicts the sequence's last token; later rows are not scored.
            for k, logits, chosen, position, label in steps:
                assert int(chosen[1][chosen[0] == row].max()) == n - k - 2
    # Rows before the reply are not scored with the real start; steps 2..K then run only the rows
    # from start - K - 1 on, and every scored row's logits equal those of the all-rows run.
    batch["start"] = torch.tensor([store.sequence(i)["start"] for i in indices])
    with torch.no_grad():
        for (k, logits, chosen, position, label), full in zip(T.ttt_unroll(draft, batch, K, autocast=False), steps):
            assert (position[chosen[1]] + 1 >= batch["start"][chosen[0]]).all()
            assert int((position[chosen[1]] + 1 == batch["start"][chosen[0]]).sum()) == 2
            index = {(int(r), int(t)): i for i, (r, t) in enumerate(zip(*full[2]))}
            same = torch.tensor([index[(int(r), int(t))] for r, t in zip(*chosen)])
            torch.testing.assert_close(logits, full[1][same], atol=1e-4, rtol=1e-4)
            assert torch.equal(label, full[4][same])


# ---------------------------------------------------------------- 6. ttt_masks


def test_ttt_masks_small_example():
    valid = torch.tensor([[True, True, True], [True, True, False]])
    masks = T.ttt_masks(valid, 3)
    assert [tuple(m.shape) for m in masks] == [(2, 1, 3, 3), (2, 1, 3, 6), (2, 1, 3, 9)]
    causal_full = [[1, 0, 0], [1, 1, 0], [1, 1, 1]]
    causal_padded = [[1, 0, 0], [1, 1, 0], [1, 1, 1]]  # row 2 is padding: sees rows 0, 1 and itself
    eye = [[1, 0, 0], [0, 1, 0], [0, 0, 1]]
    assert masks[0][0, 0].int().tolist() == causal_full
    assert masks[0][1, 0].int().tolist() == causal_padded
    # Later steps: a padded row sees the real keys up to it (its own later-step keys keep it finite).
    seen_padded = [[1, 0, 0], [1, 1, 0], [1, 1, 0]]
    for k in (2, 3):
        for b, causal in enumerate((causal_full, seen_padded)):
            blocks = masks[k - 1][b, 0].int().split(3, dim=-1)
            assert [blk.tolist() for blk in blocks] == [causal] + [eye] * (k - 1)
    # A padded key is hidden from the real rows after it.
    valid = torch.tensor([[True, False, True]])
    assert T.ttt_masks(valid, 1)[0][0, 0].int().tolist() == [[1, 0, 0], [1, 1, 0], [1, 0, 1]]
    assert all(m.dtype == torch.bool for m in masks)


# ---------------------------------------------------------------- 7. train_drafts determinism / resume

SETTINGS = T.TrainSettings(
    ttt_steps=3, epochs=2, batch_tokens=400, warmup=2, lr=2e-3, autocast_bf16=False, seed=3, checkpoint_seconds=1e9
)
SOURCES = {"a": (1, 3), "b": FINAL_NORM}


def fresh_drafts(model, vocab):
    return {m: make_draft(model, vocab, src, seed=5, perturb=False) for m, src in SOURCES.items()}


def states(drafts):
    return {m: {k: v.clone() for k, v in d.state_dict().items()} for m, d in drafts.items()}


def assert_same_states(a, b):
    assert a.keys() == b.keys()
    for m in a:
        assert a[m].keys() == b[m].keys()
        for name in a[m]:
            assert torch.equal(a[m][name], b[m][name]), (m, name)


def test_train_drafts_deterministic_and_resumable(tiny_model, vocab, store):
    rows, key = target_rows(tiny_model, vocab), {"test": "determinism"}
    initial = states(fresh_drafts(tiny_model, vocab))

    drafts = fresh_drafts(tiny_model, vocab)
    first = T.train_drafts(drafts, store, rows, SETTINGS, key=key, progress=False)
    assert first["done"] == first["total"] >= 4
    trained = states(drafts)
    assert not torch.equal(trained["a"]["fc.weight"], initial["a"]["fc.weight"])  # training changed the weights

    # A rerun with the finished checkpoint in place trains nothing and restores the weights.
    drafts = fresh_drafts(tiny_model, vocab)
    again = T.train_drafts(drafts, store, rows, SETTINGS, key=key, progress=False)
    assert again["done"] == first["total"] and again["log"] == first["log"]
    assert_same_states(states(drafts), trained)

    # A fresh run (checkpoint deleted) gives identical weights.
    first["path"].unlink()
    drafts = fresh_drafts(tiny_model, vocab)
    second = T.train_drafts(drafts, store, rows, SETTINGS, key=key, progress=False)
    assert_same_states(states(drafts), trained)
    assert second["log"] == first["log"]

    # Interrupted after 2 batches, then rerun to the end: the same weights as without interruption.
    second["path"].unlink()
    drafts = fresh_drafts(tiny_model, vocab)
    part = T.train_drafts(drafts, store, rows, SETTINGS, key=key, progress=False, max_batches=2)
    assert part["done"] == 2 and part["path"].is_file()
    drafts = fresh_drafts(tiny_model, vocab)
    rest = T.train_drafts(drafts, store, rows, SETTINGS, key=key, progress=False)
    assert rest["done"] == first["total"]
    assert rest["log"] == first["log"]
    assert_same_states(states(drafts), trained)

    # A different seed is a different run (batch order and checkpoint key).
    other = T.TrainSettings(**{**SETTINGS.__dict__, "seed": 4})
    drafts = fresh_drafts(tiny_model, vocab)
    T.train_drafts(drafts, store, rows, other, key=key, progress=False)
    assert not torch.equal(states(drafts)["a"]["fc.weight"], trained["a"]["fc.weight"])


def test_snapshots_are_the_drafts_as_they_were_after_so_many_batches(tiny_model, vocab, store):
    """One run with snapshots after batches 1 and 2 keeps the drafts of a run stopped there, and trains
    on to the same end as a run without them (a learning curve from one run)."""
    rows, key = target_rows(tiny_model, vocab), {"test": "snapshots"}
    drafts = fresh_drafts(tiny_model, vocab)
    stopped = T.train_drafts(drafts, store, rows, SETTINGS, key={"test": "stopped"}, progress=False, max_batches=2)
    at_two = states(drafts)
    drafts = fresh_drafts(tiny_model, vocab)
    full = T.train_drafts(drafts, store, rows, SETTINGS, key=key, progress=False, snapshots=(1, 2))
    assert full["done"] == full["total"] > 2
    full_key = C.read_checkpoint(full["path"])[0]["key"]
    kept = C.finished_drafts(C.snapshot_path("drafts", full_key, 2), C.snapshot_key(full_key, 2), tiny_model)
    assert_same_states(states(kept), at_two)
    assert C.read_checkpoint(C.snapshot_path("drafts", full_key, 2))[0]["log"] == stopped["log"]
    assert C.snapshot_path("drafts", full_key, 1).is_file() and not C.snapshot_path("drafts", full_key, 3).is_file()
    plain = fresh_drafts(tiny_model, vocab)
    T.train_drafts(plain, store, rows, SETTINGS, key={"test": "no snapshots"}, progress=False)
    assert_same_states(states(drafts), states(plain))  # snapshots change nothing of the training


def test_train_drafts_ignores_a_corrupt_checkpoint(tiny_model, vocab, store, capsys):
    rows, key = target_rows(tiny_model, vocab), {"test": "corrupt"}
    drafts = fresh_drafts(tiny_model, vocab)
    out = T.train_drafts(drafts, store, rows, SETTINGS, key=key, progress=False, max_batches=1)
    trained = states(drafts)
    out["path"].write_bytes(out["path"].read_bytes()[:100])  # truncated
    drafts = fresh_drafts(tiny_model, vocab)
    rerun = T.train_drafts(drafts, store, rows, SETTINGS, key=key, progress=False, max_batches=1)
    assert "discarding checkpoint" in capsys.readouterr().err
    assert rerun["done"] == 1  # started over, not resumed
    assert_same_states(states(drafts), trained)


def test_a_checkpoint_with_a_flipped_bit_is_discarded_never_resumed(tiny_model, vocab, store, capsys):
    """A checkpoint whose bytes still unpickle but differ from what was written (one flipped bit in
    a weight) fails its checksum: it is discarded with a message and training starts over; the
    finished-checkpoint reader refuses it, naming the file."""
    rows, key = target_rows(tiny_model, vocab), {"test": "bitflip"}
    drafts = fresh_drafts(tiny_model, vocab)
    out = T.train_drafts(drafts, store, rows, SETTINGS, key=key, progress=False, max_batches=1)
    trained = states(drafts)
    data = bytearray(out["path"].read_bytes())
    data[len(data) // 2] ^= 0x10
    out["path"].write_bytes(bytes(data))
    assert C.read_checkpoint(out["path"])[0] is None
    full_key = C.checkpoint_key(SOURCES, SETTINGS, key)
    with pytest.raises(RuntimeError, match=out["path"].name):
        C.finished_drafts(out["path"], full_key, tiny_model)
    drafts = fresh_drafts(tiny_model, vocab)
    rerun = T.train_drafts(drafts, store, rows, SETTINGS, key=key, progress=False, max_batches=1)
    assert "discarding checkpoint" in capsys.readouterr().err and rerun["done"] == 1
    assert_same_states(states(drafts), trained)


def test_finished_drafts_rebuild_from_the_checkpoint_alone(tiny_model, vocab, store):
    """Each draft's config (its source, EAGLE2's final-norm state said as such) and vocabulary maps
    are in the checkpoint: the drafts come back without the store; an unfinished one is refused."""
    rows, key = target_rows(tiny_model, vocab), {"test": "records"}
    full_key = C.checkpoint_key(SOURCES, SETTINGS, key)
    drafts = fresh_drafts(tiny_model, vocab)
    part = T.train_drafts(drafts, store, rows, SETTINGS, key=key, progress=False, max_batches=1)
    with pytest.raises(RuntimeError, match="batch 1 of"):
        C.finished_drafts(part["path"], full_key, tiny_model)
    T.train_drafts(drafts, store, rows, SETTINGS, key=key, progress=False)
    back = C.finished_drafts(part["path"], full_key, tiny_model)
    assert {m: d.config.source for m, d in back.items()} == SOURCES
    assert back["b"].config.reads_final_norm and back["b"].config.m == 1
    with pytest.raises(ValueError, match="final-norm"):
        back["b"].config.layer_ids
    assert_same_states(states(back), states(drafts))
    with pytest.raises(RuntimeError, match="another configuration"):
        C.finished_drafts(part["path"], {**full_key, "seed": 99}, tiny_model)


# ---------------------------------------------------------------- 8. loss decreases


def test_training_reduces_the_loss(tiny_model, vocab, store):
    # The random target is nearly uniform (its soft labels' entropy is ~log 48, the loss's floor), so
    # the labels come from its lm_head rows scaled by 20: a confident target (entropy ~1.5 nats).
    epochs = 12
    settings = T.TrainSettings(
        ttt_steps=3,
        epochs=epochs,
        batch_tokens=400,
        warmup=2,
        lr=1e-2,
        autocast_bf16=False,
        seed=0,
        checkpoint_seconds=1e9,
    )
    drafts = {"a": make_draft(tiny_model, vocab, (1, 3), seed=0, perturb=False)}
    out = T.train_drafts(
        drafts, store, 20 * target_rows(tiny_model, vocab), settings, key={"test": "loss"}, progress=False
    )
    per_epoch = out["total"] // epochs
    assert out["total"] == epochs * per_epoch and per_epoch >= 2
    losses = [entry["a"]["loss"] for entry in out["log"]]
    first, last = np.mean(losses[:per_epoch]), np.mean(losses[-per_epoch:])
    assert last < 0.8 * first, (first, last)
    accuracy = [
        np.mean([entry["a"]["acc"][0] for entry in out["log"][:per_epoch]]),
        np.mean([entry["a"]["acc"][0] for entry in out["log"][-per_epoch:]]),
    ]
    assert accuracy[1] > accuracy[0] + 0.1, accuracy


# ---------------------------------------------------------------- 9. batch_plan


def test_batch_plan():
    rng = np.random.default_rng(0)
    lengths = [int(x) for x in rng.integers(5, 120, size=40)] + [300]  # one sequence longer than a batch
    batch_tokens, epochs = 256, 3
    plan = T.batch_plan(lengths, batch_tokens, epochs, seed=1)
    one = T.batch_plan(lengths, batch_tokens, 1, seed=1)
    n_batches = len(one)
    assert len(plan) == epochs * n_batches
    for e in range(epochs):  # every sequence exactly once per epoch
        epoch = [i for batch in plan[e * n_batches : (e + 1) * n_batches] for i in batch]
        assert sorted(epoch) == list(range(len(lengths)))
    for batch in plan:
        assert batch and (len(batch) * max(lengths[i] for i in batch) <= batch_tokens or len(batch) == 1)
    assert [40] in plan  # the long one alone
    assert sorted(map(tuple, plan[:n_batches])) == sorted(map(tuple, plan[n_batches : 2 * n_batches]))  # same batches
    assert plan[:n_batches] != plan[n_batches : 2 * n_batches]  # reshuffled each epoch
    assert T.batch_plan(lengths, batch_tokens, epochs, seed=1) == plan
    other = T.batch_plan(lengths, batch_tokens, epochs, seed=2)
    assert other != plan and sorted(map(tuple, other)) == sorted(map(tuple, plan))
    # A fractional last epoch: its first share of the batches.
    half = T.batch_plan(lengths, batch_tokens, 1.5, seed=1)
    assert len(half) == n_batches + round(0.5 * n_batches) and half[:n_batches] == plan[:n_batches]
    assert len(set(map(tuple, half[n_batches:]))) == len(half) - n_batches
    # Sequences sorted by length are cut greedily: the batches are consecutive runs of the sorted
    # order, each as long as batch_tokens allows.
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    rank = {i: p for p, i in enumerate(order)}
    runs = sorted((sorted(batch, key=rank.get) for batch in one), key=lambda batch: rank[batch[0]])
    assert [i for run in runs for i in run] == order
    for run, following in zip(runs, runs[1:]):
        assert (len(run) + 1) * lengths[following[0]] > batch_tokens


def test_feature_noise_is_seeded_per_batch_keyed_and_survives_a_resume(tiny_model, vocab, store):
    """Noise on the features (feature_noise > 0) changes the training, is the same whether training
    ran through or was interrupted and resumed, and enters the checkpoint key only when it is on
    (so checkpoints trained without the setting keep their key)."""
    rows, key = target_rows(tiny_model, vocab), {"test": "noise"}
    noisy = T.TrainSettings(**{**SETTINGS.__dict__, "feature_noise": 0.5})
    sources = {"a": (0, 1)}
    assert "feature_noise" not in C.checkpoint_key(sources, SETTINGS, key)["settings"]
    assert C.checkpoint_key(sources, noisy, key)["settings"]["feature_noise"] == 0.5
    features = {(0, 1): torch.zeros(2, 3, 4)}
    assert T.with_noise(features, 0.0, 0, 0) is features
    once, twice = T.with_noise(features, 0.5, 0, 3), T.with_noise(features, 0.5, 0, 3)
    assert torch.equal(once[(0, 1)], twice[(0, 1)]) and once[(0, 1)].std() == pytest.approx(0.5, rel=0.5)
    assert not torch.equal(once[(0, 1)], T.with_noise(features, 0.5, 0, 4)[(0, 1)])

    drafts = fresh_drafts(tiny_model, vocab)
    through = T.train_drafts(drafts, store, rows, noisy, key=key, progress=False)
    noisy_states = states(drafts)
    clean = fresh_drafts(tiny_model, vocab)
    T.train_drafts(clean, store, rows, SETTINGS, key=key, progress=False)
    assert not torch.equal(states(clean)["a"]["fc.weight"], noisy_states["a"]["fc.weight"])
    through["path"].unlink()
    T.train_drafts(fresh_drafts(tiny_model, vocab), store, rows, noisy, key=key, progress=False, max_batches=2)
    drafts = fresh_drafts(tiny_model, vocab)
    rest = T.train_drafts(drafts, store, rows, noisy, key=key, progress=False)
    assert rest["log"] == through["log"]
    assert_same_states(states(drafts), noisy_states)
    with pytest.raises(ValueError, match="invalid training settings"):
        T.TrainSettings(feature_noise=-0.1)


def test_training_seconds_add_up_over_a_resume(tiny_model, vocab, store):
    rows, key = target_rows(tiny_model, vocab), {"test": "seconds"}
    part = T.train_drafts(
        fresh_drafts(tiny_model, vocab), store, rows, SETTINGS, key=key, progress=False, max_batches=2
    )
    saved = C.read_checkpoint(part["path"])[0]["seconds"]
    assert 0 < saved <= part["seconds"] + 1e-9
    rest = T.train_drafts(fresh_drafts(tiny_model, vocab), store, rows, SETTINGS, key=key, progress=False)
    assert rest["seconds"] > saved
    again = T.train_drafts(fresh_drafts(tiny_model, vocab), store, rows, SETTINGS, key=key, progress=False)
    assert again["seconds"] == pytest.approx(
        C.read_checkpoint(rest["path"])[0]["seconds"]
    )  # nothing trained: no time added


# ---------------------------------------------------------------- 10. nothing to train on


def test_training_without_reply_tokens_is_refused_before_it_starts(tiny_model, tiny_tokenizer, vocab):
    """Every reply past max_length: the store holds 0 reply tokens, and training is refused before it
    starts: otherwise every batch scores nothing, its loss is 0.0, the weights stay as they were, and
    training reports done."""
    from conftest import replied_conversations
    from elsi_lib.draft.features import build_features

    cut = build_features(tiny_model, tiny_tokenizer, replied_conversations(3), LAYERS, max_length=10, progress=False)
    assert all(cut.start(i) == cut.length(i) == 10 for i in range(len(cut)))
    drafts = fresh_drafts(tiny_model, vocab)
    with pytest.raises(ValueError, match=r"3 sequences hold 0 reply tokens.*past max_length=10"):
        T.train_drafts(drafts, cut, target_rows(tiny_model, vocab), SETTINGS, key={"test": "empty"}, progress=False)
    full_key = C.checkpoint_key(SOURCES, SETTINGS, {"test": "empty"})
    assert not C.checkpoint_path("drafts", full_key).exists()  # nothing was written


# ---------------------------------------------------------------- 11. a checkpoint write killed before its rename

KILLED_WRITE = """
import importlib.util, os, signal, sys
spec = importlib.util.spec_from_file_location("cachefiles", sys.argv[1])
cachefiles = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cachefiles)
os.fsync = lambda fd: os.kill(os.getpid(), signal.SIGKILL)  # every byte written, killed before the rename
cachefiles.write_checked(sys.argv[2], b"x" * 200_000)
"""


def test_a_checkpoint_write_killed_before_its_rename_leaves_nothing_behind(tiny_model, vocab, store):
    """A kill while a checkpoint is written leaves a full-size `.tmp` beside it that nothing else would
    remove: the next run removes it, saying so."""
    import subprocess
    import sys

    from elsi_lib.common import cachefiles

    rows, key = target_rows(tiny_model, vocab), {"test": "killed"}
    path = C.checkpoint_path("drafts", C.checkpoint_key(SOURCES, SETTINGS, key))
    path.parent.mkdir(parents=True, exist_ok=True)
    said = r"removed .*\.tmp \(\d+ bytes\).*interrupted write of " + re.escape(path.name)

    def killed_write():
        assert subprocess.run([sys.executable, "-c", KILLED_WRITE, cachefiles.__file__, str(path)]).returncode < 0
        [tmp] = [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]
        assert tmp.stat().st_size > 200_000 and not path.exists()
        return tmp

    tmp = killed_write()
    with pytest.warns(UserWarning, match=said):
        assert C.read_checkpoint(path) == (None, "no checkpoint")
    assert not tmp.exists()
    killed_write()
    with pytest.warns(UserWarning, match=said):
        out = T.train_drafts(
            fresh_drafts(tiny_model, vocab), store, rows, SETTINGS, key=key, progress=False, max_batches=1
        )
    assert out["path"] == path and sorted(path.parent.iterdir()) == [path]
