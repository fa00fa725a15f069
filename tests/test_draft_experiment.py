"""Notebook 06's experiment (elsi_lib.study.experiments.experiment): seed groups, time plan and configuration,
and the drafts `run` trained, read back from their checkpoint (what bench_decoding and an export
take), refused before the training has finished."""

from dataclasses import replace

import pandas as pd
import pytest
import torch

from elsi_lib import load_model, random_model
from elsi_lib.study.experiments import budget
from elsi_lib.study.experiments import experiment as E
from elsi_lib.study.experiments import run_data as D
from elsi_lib.study.experiments.curve import snapshot_batches
from elsi_lib.draft.config import FINAL_NORM as FINAL
from elsi_lib.draft.train import TrainSettings

pytestmark = pytest.mark.usefixtures("one_torch_thread")
METHODS = pd.DataFrame(
    {"id": ["eagle3", "elsi-m3"], "method": ["EAGLE3", "ELSI m=3"], "source": [(0, 1, 2), (1, 2, 3)]}
)


@pytest.fixture
def tiny_experiment(tmp_path, tiny_tokenizer):
    folder = tmp_path / "tiny-target"
    random_model(n_layers=4, hidden_size=32, vocab_size=len(tiny_tokenizer), seed=0).save_pretrained(folder)
    tiny_tokenizer.save_pretrained(folder)
    exp = E.Experiment(
        model=str(folder),
        n_train=6,
        n_heldout=2,
        train_max_new_tokens=8,
        eval_per_column=1,
        replay_tokens=6,
        draft_vocab=64,
        tree_nodes=(4,),
        temperatures=(0.0,),
        depth=2,
        top_k=2,
        seeds=(0,),
        reseeded=(),
        lever_lm_head=False,
        train=TrainSettings(epochs=1.0, batch_tokens=256, warmup=1),
    )
    return exp, load_model(str(folder))


def test_trained_drafts_are_the_drafts_run_trained(tiny_experiment):
    exp, loaded = tiny_experiment
    with pytest.raises(RuntimeError, match="make tables"):
        E.trained_drafts(exp, METHODS, loaded=loaded)
    ran = E.run(exp, METHODS, loaded=loaded, progress=False)
    again = E.trained_drafts(exp, METHODS, loaded=loaded)
    assert set(again) == set(ran.drafts) == {"eagle3", "elsi-m3"}
    for method, draft in ran.drafts.items():
        trained, read = draft.state_dict(), again[method].state_dict()
        assert trained.keys() == read.keys()
        assert all(torch.equal(trained[k], read[k]) for k in trained)
    data = D.training_data(exp, METHODS, *loaded, False)
    fresh = E.make_draft(loaded[0], (0, 1, 2), data.d2t, data.t2d, 0)
    assert not torch.equal(fresh.fc.weight, again["eagle3"].fc.weight)  # training moved the weights
    assert torch.equal(again["eagle3"].d2t, data.d2t) and again["elsi-m3"].config.source == (1, 2, 3)


def test_every_result_records_its_numeric_settings(tiny_experiment, tmp_path):
    """The same parameter file trains in bf16 on one CPU and float32 on another: every frame of a run,
    its per-question rows, its saved tables and its drafts (and so their exports) say which."""
    from elsi_lib.common.hardware import numeric_label
    from elsi_lib.study.experiments.tables import tau_table
    from elsi_lib.study.experiments.tau_files import read_tau_csv, save_tau_tables, tau_long
    from elsi_lib.study.paper import plots
    from elsi_lib.study.experiments import criteria_vs_drafts

    exp, loaded = tiny_experiment
    ran = E.run(exp, METHODS, loaded=loaded, progress=False)
    want = {"draft matmuls": numeric_label(exp.train.autocast_bf16), "target features": "store (float32 forward)"}
    assert ran.numeric == want and E.numeric_settings(exp) == want
    for frame in (ran.results, ran.accuracy):
        assert (frame[list(want)] == pd.Series(want)).all().all()
    assert all(d.numeric == want for d in ran.drafts.values())
    assert all(d.numeric == want for d in E.trained_drafts(exp, METHODS, loaded=loaded).values())
    rows = criteria_vs_drafts.question_rows(
        ran.results, ran.accuracy, METHODS.assign(entropy=0.0, layers=METHODS.source), protocol="p", prompts=4
    )
    assert (rows[list(want)] == pd.Series(want)).all().all()
    plots.save_table(ran.accuracy.drop(columns=list(want)), "acc", tmp_path, numeric=ran.numeric)
    assert (pd.read_csv(tmp_path / "acc.csv")[list(want)] == pd.Series(want)).all().all()
    long = tau_long(*tau_table(ran.results, 4, n_boot=100), temperature=0.0, nodes=4)
    save_tau_tables(long, "tau", tmp_path, numeric=ran.numeric)
    assert (read_tau_csv(tmp_path / "tau.csv")[list(want)] == pd.Series(want)).all().all()
    assert "draft matmuls: " + want["draft matmuls"] in (tmp_path / "tau.md").read_text()
    live = replace(exp, features="live", live_bf16=True, train=replace(exp.train, autocast_bf16=True))
    assert E.numeric_settings(live) == {"draft matmuls": "bf16", "target features": "live (bf16 forward)"}


def test_trained_drafts_read_the_checkpoint_alone(tiny_experiment, monkeypatch, capsys):
    """No reply, feature store or vocabulary is rebuilt to read the drafts back (each draft's
    config and vocabulary maps are in the checkpoint); a corrupt checkpoint is refused, naming it,
    and `run` then discards and retrains it with a message."""
    exp, loaded = tiny_experiment
    E.run(exp, METHODS, loaded=loaded, progress=False)
    with monkeypatch.context() as patch:
        for name in ("training_conversations", "eval_conversations"):
            patch.setattr(D.corpus, name, lambda *a, **k: pytest.fail("the training data was rebuilt"))
        patch.setattr(D, "build_features", lambda *a, **k: pytest.fail("the features were rebuilt"))
        drafts = E.trained_drafts(exp, METHODS, loaded=loaded)
    assert {m: d.config.source for m, d in drafts.items()} == dict(zip(METHODS["id"], METHODS.source))
    path, _ = E.group_checkpoint(exp, D.data_key(exp, *loaded), E.groups(exp, METHODS)[0])
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(RuntimeError, match=path.name):
        E.trained_drafts(exp, METHODS, loaded=loaded)
    E.run(exp, METHODS, loaded=loaded, progress=False)
    assert "discarding checkpoint" in capsys.readouterr().err
    assert len(E.trained_drafts(exp, METHODS, loaded=loaded)) == 2


THREE = pd.DataFrame(
    {
        "id": ["eagle2", "eagle3", "elsi-m3"],
        "method": ["EAGLE2", "EAGLE3", "ELSI m=3"],
        "source": [FINAL, (1, 3, 4), (2, 5, 6)],
    }
)


def test_groups_first_seed_trains_everything_later_seeds_the_reseeded():
    groups = E.groups(E.Experiment(seeds=(0, 1, 2), reseeded=("eagle3", "elsi-m3"), lever_lm_head=False), THREE)
    assert [(g.seed, g.lm_head_from_target, g.name) for g in groups] == [
        (0, True, "seed0"),
        (1, True, "seed1"),
        (2, True, "seed2"),
    ]
    assert groups[0].sources == {"eagle2": FINAL, "eagle3": (1, 3, 4), "elsi-m3": (2, 5, 6)}
    assert groups[0].labels == {"eagle2": "EAGLE2", "eagle3": "EAGLE3", "elsi-m3": "ELSI m=3"}
    assert groups[1].sources == groups[2].sources == {"eagle3": (1, 3, 4), "elsi-m3": (2, 5, 6)}
    groups = E.groups(E.Experiment(seeds=(7, 3), reseeded=("eagle2",), lever_lm_head=False), THREE)
    assert [(g.seed, g.sources) for g in groups] == [(7, dict(zip(THREE["id"], THREE.source))), (3, {"eagle2": FINAL})]
    # the lm_head lever: EAGLE3 once more at the first seed, lm_head not from the target, labelled apart
    groups = E.groups(E.Experiment(seeds=(7, 3), reseeded=("eagle2",)), THREE)
    lever = groups[-1]
    assert len(groups) == 3 and (lever.seed, lever.lm_head_from_target, lever.name) == (7, False, "seed7-lever")
    assert lever.sources == {E.LEVER_ID: (1, 3, 4)} and lever.labels == {E.LEVER_ID: "EAGLE3, lm_head not from target"}


def test_groups_unknown_reseeded_method_raises():
    with pytest.raises(ValueError, match="elsi-c-m3"):
        E.groups(E.Experiment(reseeded=("eagle3", "elsi-c-m3")), THREE)
    with pytest.raises(ValueError, match="EAGLE3"):
        E.groups(E.Experiment(reseeded=("EAGLE3",)), THREE)  # a label is not an id


def test_plan_stages_and_total():
    exp = E.Experiment(
        n_train=100,
        n_heldout=10,
        eval_per_column=5,
        seeds=(0, 1),
        reseeded=("eagle3",),
        train=TrainSettings(epochs=1.0),
        lever_lm_head=False,
        temperatures=(0.0,),
    )
    rates = {"reply_s": 6.0, "feature_tok_s": 13.0, "train_tok_s": 36.0, "replay_s_per_q": 1.5, "tokens_per_conv": 60.0}
    out = budget.plan(exp, THREE, rates)
    # 4 drafts (3 at seed 0, 1 at seed 1), 30 questions (5 x 6 columns), 130 conversations
    assert out["stage"].tolist() == [
        "replies (100 training prompts, hf; SpecBench)",
        "stored target features",
        "training 4 drafts",
        "replay 4 drafts x 30 questions",
        "total",
    ]
    # 130 * 6 s; 130 * 60 / 13 s; 4 * 90 * 60 / 36 s; 4 * 30 * 1.5 s
    assert out["minutes"].tolist() == pytest.approx([13.0, 10.0, 10.0, 3.0, 36.0])
    both = budget.plan(replace(exp, temperatures=(0.0, 1.0)), THREE, rates)  # T = 1: replies, features, replay again
    assert both["stage"].tolist()[3] == "replay 4 drafts x 30 questions x 2 temperatures"
    assert both["minutes"].tolist() == pytest.approx([16.0, 12.3, 10.0, 6.0, 44.3])
    # live features and vLLM replies: only the held-out and SpecBench features are stored, the target
    # runs once more per training run (2 groups), and the curve's snapshot (3 drafts) is replayed too
    live = replace(exp, features="live", reply_engine="vllm", curve_prompts=(50,))
    out = budget.plan(live, THREE, {**rates, "vllm_reply_s": 2.0, "live_tok_s": 18.0, "replay_s_per_q": 2.0})
    assert out["stage"].tolist() == [
        "replies (100 training prompts, vllm; SpecBench)",
        "stored target features",
        "live target forward (2 training runs)",
        "training 4 drafts",
        "replay 7 drafts x 30 questions",
        "total",
    ]
    # 100 * 2 + 30 * 6 s; (10 + 30) * 60 / 13 s; 2 * 90 * 60 / 18 s; as above; 7 * 30 * 2 s
    assert out["minutes"].tolist() == pytest.approx([6.3, 3.1, 10.0, 10.0, 7.0, 36.4])
    bf16 = budget.plan(
        replace(live, live_bf16=True),
        THREE,
        {**rates, "vllm_reply_s": 2.0, "live_tok_s": 18.0, "replay_s_per_q": 2.0, "live_bf16_speedup": 2.0},
    )
    assert bf16.stage.tolist()[2] == "live target forward (bf16) (2 training runs)" and bf16.minutes[
        2
    ] == pytest.approx(5.0)
    default = budget.plan(E.Experiment(), THREE)
    assert default["minutes"].iloc[-1] == pytest.approx(default["minutes"].iloc[:-1].sum())
    assert (default["minutes"].iloc[:-1] > 0).all()


def test_experiment_from_dict():
    params = {
        "tree_nodes": [30],
        "seeds": [0, 4],
        "reseeded": ["eagle3"],
        "n_train": 50,
        "n_heldout": 10,
        "train": {"epochs": 2.0, "lr": 1e-3},
    }
    exp = E.Experiment.from_dict(params)
    assert exp.tree_nodes == (30,) and exp.seeds == (0, 4) and exp.reseeded == ("eagle3",)
    assert exp.n_train == 50 and exp.model == E.Experiment().model
    assert exp.train == TrainSettings(epochs=2.0, lr=1e-3)
    assert "train" in params and params["tree_nodes"] == [30]  # the caller's dict is left alone
    hash(exp)  # frozen and made of tuples: usable as a key
    assert E.Experiment.from_dict({}) == E.Experiment()
    assert E.Experiment.from_dict({"depth": 4}).train == TrainSettings()


def test_the_learning_curve_scores_the_first_seeds_drafts_part_way(tiny_experiment):
    exp, loaded = tiny_experiment
    exp = replace(exp, curve_prompts=(2, 4, 100))  # of 4 training prompts: a snapshot at 2 only
    ran = E.run(exp, METHODS, loaded=loaded, progress=False)
    curve = ran.curve
    total = len(ran.training["seed0"])
    assert set(curve["id"]) == {"eagle3", "elsi-m3"} and set(curve.prompts) == {2, 4}
    snapshot, finished = curve[curve.prompts == 2], curve[curve.prompts == 4]
    assert set(snapshot.batches) == {round(total * 2 / 4)} and set(curve.of_batches) == {total}
    assert len(snapshot) == len(finished) == len(ran.results)  # every question and tree size, as the finished drafts
    assert curve["step 1"].between(0, 1).all() and curve.tau.dropna().ge(1).all()
    assert snapshot_batches(exp, 4, total) == (round(total / 2),)
    # the last point is the finished drafts: their own tau and held-out accuracy
    merged = finished.merge(ran.results, on=["id", "temperature", "nodes", "question_id"], suffixes=("", "_run"))
    assert len(merged) == len(ran.results) and (merged.tau.fillna(-1) == merged.tau_run.fillna(-1)).all()
    assert dict(zip(finished.method, finished["step 1"])) == dict(zip(ran.accuracy.method, ran.accuracy["step 1"]))
    # reply tokens: all of them at the end, part of them at the snapshot
    data = D.training_data(exp, METHODS, *loaded, False)
    everything = sum(data.store.length(i) - data.store.start(i) for i in range(len(data.store)))
    assert set(finished.reply_tokens) == {everything} and 0 < snapshot.reply_tokens.iloc[0] < everything


def test_live_features_train_the_same_drafts_under_their_own_key(tiny_experiment):
    """features="live" forwards the target per training batch instead of storing it: a key of its
    own (the stored run's key is unchanged), and drafts within float16 noise of the stored run's."""
    exp, loaded = tiny_experiment
    live = replace(exp, features="live")
    stored_key, live_key = D.data_key(exp, *loaded), D.data_key(live, *loaded)
    assert "features" not in stored_key and live_key == {**stored_key, "features": "live"}
    data = D.training_data(live, METHODS, *loaded, False)
    assert type(data.store).__name__ == "LiveFeatures"
    ran_stored, ran_live = (
        E.run(exp, METHODS, loaded=loaded, progress=False),
        E.run(live, METHODS, loaded=loaded, progress=False),
    )
    for method in ("eagle3", "elsi-m3"):
        a, b = ran_stored.drafts[method].state_dict(), ran_live.drafts[method].state_dict()
        assert all(torch.allclose(a[k], b[k], atol=1e-3, rtol=1e-3) for k in a)
    assert ran_live.accuracy["step 1"].to_numpy() == pytest.approx(ran_stored.accuracy["step 1"].to_numpy(), abs=0.05)


def test_a_prefix_of_a_larger_vllm_request_is_read_not_generated(monkeypatch, tiny_model, tiny_tokenizer):
    """`reply_request`: the first n_train replies of the engine's request for more prompts (the strong
    replies), read without the engine; it is part of the training key, and needs vLLM and a request
    at least as large."""
    exp = E.Experiment(n_train=40, n_heldout=8, reply_engine="vllm", reply_request=100)
    calls = []

    def written(model, tokenizer, n_prompts, first, **kw):
        calls.append((n_prompts, first, kw))
        raise LookupError("stop here")

    monkeypatch.setattr(D.corpus, "training_conversations_written", written)
    monkeypatch.setattr(D.corpus, "training_conversations", lambda *a, **k: pytest.fail("the engine was asked"))
    with pytest.raises(LookupError, match="stop here"):
        D.training_data(exp, METHODS, None, None, progress=False)
    assert calls == [(100, 40, {"max_new_tokens": 256, "max_length": 1024})]
    monkeypatch.setattr(D.corpus, "vllm_version", lambda: "9.9")
    key = D.data_key(exp, tiny_model, tiny_tokenizer)
    assert key["reply_request"] == 100 and "reply_request" not in D.data_key(
        replace(exp, reply_request=0), tiny_model, tiny_tokenizer
    )
    for bad in ({"reply_engine": "hf"}, {"reply_request": 39}, {"reply_request": 40}):
        with pytest.raises(ValueError, match="reply_request"):
            E.Experiment(**{"n_train": 40, "reply_engine": "vllm", "reply_request": 100, **bad})
    plan = budget.plan(exp, THREE)
    assert plan.stage[0] == "replies (the first 40 of 100 written by vllm; SpecBench)"
    assert plan.minutes[0] == pytest.approx(budget.plan(replace(exp, n_train=10, reply_request=100), THREE).minutes[0])


def test_experiment_refuses_unknown_engines_and_feature_modes():
    with pytest.raises(ValueError, match="reply_engine must be"):
        E.Experiment(reply_engine="sglang")
    with pytest.raises(ValueError, match="features 'store' or 'live'"):
        E.Experiment.from_dict({"features": "disk"})


def test_stage_log_sums_interrupted_and_resumed_runs(tiny_experiment, tmp_path):
    from elsi_lib.common.progress import StageClock, stage_history

    exp, loaded = tiny_experiment
    log = tmp_path / "times.jsonl"
    clock = StageClock(log)
    with pytest.raises(KeyboardInterrupt):
        with clock("training"):
            raise KeyboardInterrupt  # a run stopped part way: its time is kept, marked interrupted
    E.run(exp, METHODS, loaded=loaded, progress=False, stage_log=log)
    with open(log, "a") as f:
        f.write('{"stage": "replay", "seco')  # a torn last line
    history = stage_history(log).set_index("stage")
    lines = [__import__("json").loads(l) for l in log.read_text().splitlines()[:-1]]
    assert history.loc["training", "interrupted"] == 1 and history.loc["training", "runs"] == 1
    assert history.loc["replay", "seconds"] == pytest.approx(sum(l["seconds"] for l in lines if l["stage"] == "replay"))
    assert history.loc["total", "seconds"] == pytest.approx(sum(l["seconds"] for l in lines))
    assert {"load the target", "held-out step accuracy", "training seed0 (2 drafts)"} <= set(history.index)


def test_the_notebooks_parameter_files_are_experiments():
    """`make tables` and `make tables-strong` pass these files to papermill: each must name valid
    Experiment fields (from_dict refuses others), and notebook 07's its methods."""
    from elsi_lib.common.cachefiles import REPO_ROOT

    small, ids = E.from_parameters(REPO_ROOT / "notebooks" / "tables_scale.yaml")
    assert small == E.Experiment(model="smollm2-135m") and ids is None
    qwen, qwen_ids = E.from_parameters(REPO_ROOT / "notebooks" / "tables_qwen.yaml")
    assert qwen == E.Experiment(
        model="qwen2.5-coder-0.5b",
        reply_engine="vllm",
        lever_lm_head=False,
        seeds=(0,),
        reseeded=(),
        features="live",
        live_bf16=True,
    )
    assert qwen_ids == [
        "eagle3",
        "elsi-m3",
        "elsi-m1-rule",
        "probe-m3",
    ]  # the sets notebook 09 compares, and the probe's
    strong, ids = E.from_parameters(REPO_ROOT / "notebooks" / "tables_strong.yaml")
    assert ids == ["eagle3", "elsi-m3", "probe-m3"]
    assert (strong.n_train, strong.reply_request, strong.reply_engine, strong.features, strong.curve_prompts) == (
        5000,
        15306,
        "vllm",
        "live",
        (1000, 3000),
    )
    assert strong.train.batch_tokens == 512 and strong.seeds == (0,) and not strong.lever_lm_head
    assert strong.live_bf16 and strong.train.feature_noise == 0.0
    three = pd.DataFrame({"id": ids, "method": ids, "source": [(i, i + 1, i + 2) for i in range(3)]})
    plan = budget.plan(strong, three)
    assert plan.stage.str.startswith("live target forward").any() and 60 < plan.minutes.iloc[-1] < 140  # one session


@pytest.mark.parametrize(
    "fields, names",
    [
        ({"n_train": 10, "n_heldout": 64}, ("n_heldout 64", "n_train 10")),  # else a plan with -0.3 min of training
        ({"n_train": 64, "n_heldout": 64}, ("n_heldout 64", "n_train 64")),  # nothing left to train on
        ({"n_heldout": -1}, ("n_heldout",)),
        ({"n_train": 0}, ("n_train",)),
        ({"n_train": 10.5}, ("n_train",)),
        ({"n_train": True}, ("n_train",)),
        ({"train_max_new_tokens": 0}, ("train_max_new_tokens",)),
        ({"eval_per_column": 0}, ("eval_per_column",)),
        ({"replay_tokens": -5}, ("replay_tokens",)),
        ({"draft_vocab": 0}, ("draft_vocab",)),
        ({"depth": 0}, ("depth",)),
        ({"top_k": 0}, ("top_k",)),
        ({"max_length": 0}, ("max_length",)),
        ({"eval_max_length": 0}, ("eval_max_length",)),
        ({"tree_nodes": ()}, ("tree_nodes",)),
        ({"tree_nodes": (30, 0)}, ("tree_nodes",)),
        ({"tree_nodes": (30, 30)}, ("tree_nodes", "repeated")),
        ({"seeds": ()}, ("seeds",)),
        ({"seeds": (0, -1)}, ("seeds",)),
        ({"seeds": (1, 1)}, ("seeds", "repeated")),
        ({"curve_prompts": (0,)}, ("curve_prompts",)),
        ({"temperatures": ()}, ("temperatures",)),
        ({"temperatures": (0.0, -1.0)}, ("temperatures",)),
        ({"temperatures": (1.0, 1.0)}, ("temperatures", "repeated")),
        ({"reply_request": -1}, ("reply_request",)),
    ],
)
def test_experiment_refuses_counts_out_of_range(fields, names):
    """Every count field is checked for its range, and n_heldout against n_train, when the Experiment
    is made (not as a negative training time in the plan, or deep in a run); the error names the field."""
    with pytest.raises((ValueError, TypeError)) as err:
        E.Experiment(**fields)
    assert all(name in str(err.value) for name in names), str(err.value)
    with pytest.raises((ValueError, TypeError)):
        E.Experiment.from_dict({k: list(v) if isinstance(v, tuple) else v for k, v in fields.items()})


def test_experiment_accepts_the_edges_of_its_ranges():
    exp = E.Experiment(
        n_train=1,
        n_heldout=0,
        seeds=(0,),
        reseeded=(),
        curve_prompts=(),
        tree_nodes=(1,),
        temperatures=(0.0,),
        depth=1,
        top_k=1,
    )
    assert exp.n_train - exp.n_heldout == 1
    assert E.Experiment(n_train=65, n_heldout=64).n_heldout == 64


def test_plan_refuses_unknown_or_non_positive_rates():
    """A misspelt rate is refused naming it and the known ones (ignored, it would leave the default rate
    in use silently); a rate that is not a positive number is refused naming it."""
    exp = E.Experiment(n_train=100, n_heldout=10, eval_per_column=5, seeds=(0,), reseeded=(), lever_lm_head=False)
    with pytest.raises(ValueError, match=r"unknown rate.*'reply_sec'.*known.*'reply_s'.*'train_tok_s'"):
        budget.plan(exp, THREE, {"reply_sec": 6.0})
    for bad in (0, -1.0, "fast", None, float("nan")):
        with pytest.raises(ValueError, match=r"train_tok_s"):
            budget.plan(exp, THREE, {"train_tok_s": bad})
    assert budget.plan(exp, THREE, {}).equals(budget.plan(exp, THREE))
