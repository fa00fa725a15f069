"""`experiment.trained_drafts`: the drafts `run` trained, read back from their checkpoint (what
bench_decoding and an export take), refused before the training has finished."""
import pandas as pd
import pytest
import torch

from elsi_lib import load_model, random_model
from elsi_lib.draft import experiment as E
from elsi_lib.draft.train import TrainSettings

pytestmark = pytest.mark.usefixtures("one_torch_thread")
METHODS = pd.DataFrame({"method": ["EAGLE3", "ELSI m=3"], "source": [(0, 1, 2), (1, 2, 3)]})


@pytest.fixture
def tiny_experiment(tmp_path, tiny_tokenizer):
    folder = tmp_path / "tiny-target"
    random_model(n_layers=4, hidden_size=32, vocab_size=len(tiny_tokenizer), seed=0).save_pretrained(folder)
    tiny_tokenizer.save_pretrained(folder)
    exp = E.Experiment(model=str(folder), n_train=6, n_heldout=2, train_max_new_tokens=8, eval_per_column=1,
                       replay_tokens=6, draft_vocab=64, sizes=(4,), temperatures=(0.0,), depth=2, top_k=2,
                       seeds=(0,), reseeded=(), lever_lm_head=False,
                       train=TrainSettings(epochs=1.0, batch_tokens=256, warmup=1))
    return exp, load_model(str(folder))


def test_trained_drafts_are_the_drafts_run_trained(tiny_experiment):
    exp, loaded = tiny_experiment
    with pytest.raises(RuntimeError, match="make tables"):
        E.trained_drafts(exp, METHODS, loaded=loaded)
    ran = E.run(exp, METHODS, loaded=loaded, progress=False)
    again = E.trained_drafts(exp, METHODS, loaded=loaded)
    assert set(again) == set(ran["drafts"]) == {"EAGLE3", "ELSI m=3"}
    for method, draft in ran["drafts"].items():
        trained, read = draft.state_dict(), again[method].state_dict()
        assert trained.keys() == read.keys()
        assert all(torch.equal(trained[k], read[k]) for k in trained)
    data = E.training_data(exp, METHODS, *loaded, False)
    fresh = E.make_draft(loaded[0], (0, 1, 2), data["d2t"], data["t2d"], 0)
    assert not torch.equal(fresh.fc.weight, again["EAGLE3"].fc.weight)  # training moved the weights
    assert torch.equal(again["EAGLE3"].d2t, data["d2t"]) and again["ELSI m=3"].config.source == (1, 2, 3)


def test_trained_drafts_read_the_checkpoint_alone(tiny_experiment, monkeypatch, capsys):
    """No reply, feature store or vocabulary is rebuilt to read the drafts back (each draft's
    config and vocabulary maps are in the checkpoint); a corrupt checkpoint is refused, naming it,
    and `run` then discards and retrains it with a message."""
    exp, loaded = tiny_experiment
    E.run(exp, METHODS, loaded=loaded, progress=False)
    with monkeypatch.context() as patch:
        for name in ("training_conversations", "eval_conversations"):
            patch.setattr(E.corpus, name, lambda *a, **k: pytest.fail("the training data was rebuilt"))
        patch.setattr(E, "build_features", lambda *a, **k: pytest.fail("the features were rebuilt"))
        drafts = E.trained_drafts(exp, METHODS, loaded=loaded)
    assert {m: d.config.source for m, d in drafts.items()} == dict(zip(METHODS.method, METHODS.source))
    path, _, _ = E.group_checkpoint(exp, E.data_key(exp, *loaded), 0, True, dict(zip(METHODS.method, METHODS.source)))
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(RuntimeError, match=path.name):
        E.trained_drafts(exp, METHODS, loaded=loaded)
    E.run(exp, METHODS, loaded=loaded, progress=False)
    assert "discarding checkpoint" in capsys.readouterr().err
    assert len(E.trained_drafts(exp, METHODS, loaded=loaded)) == 2
