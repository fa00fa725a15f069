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
        E.trained_drafts(exp, METHODS, loaded=loaded, progress=False)
    ran = E.run(exp, METHODS, loaded=loaded, progress=False)
    again = E.trained_drafts(exp, METHODS, loaded=loaded, progress=False)
    assert set(again) == set(ran["drafts"]) == {"EAGLE3", "ELSI m=3"}
    for method, draft in ran["drafts"].items():
        trained, read = draft.state_dict(), again[method].state_dict()
        assert trained.keys() == read.keys()
        assert all(torch.equal(trained[k], read[k]) for k in trained)
    data = E._training_data(exp, METHODS, *loaded, False)
    fresh = E._make_draft(loaded[0], (0, 1, 2), 4, data["d2t"], data["t2d"], exp.draft_vocab, 0)
    assert not torch.equal(fresh.fc.weight, again["EAGLE3"].fc.weight)  # training moved the weights
