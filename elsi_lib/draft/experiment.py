"""Notebook 06's experiment: drafts on every layer set, trained alike, and tau by replay (issue 12).

    calibration stats -> `draft_methods` (the layer sets) -> `run`:
      replies (training prompts, SpecBench questions) -> stored target features -> draft vocabulary
      -> lock-step training per seed group -> held-out step accuracy -> replay at 30 / 60 nodes

Every stage is cached by its full configuration (replies per batch, feature shards, draft
checkpoints during training, replay per question), so `run` resumes where an interruption left it
and a notebook opened later shows only results of its own configuration.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd
import torch

from ..selection.conventions import eagle3_layers
from ..selection.entropy import set_entropy
from ..inputs.models import load_model
from ..common.progress import progress_bar
from ..selection.scorer import SetScorer
from ..paper.study import SINGLE_LAYER_RULE, TABLE1_SETTINGS, compartments, selection_table
from . import corpus
from . import features
from .features import build_features
from .model import FINAL_NORM, Eagle3Draft
from .vocabulary import draft_vocabulary, init_lm_head_from_target
from .replay import question_tau, replay
from .train import TrainSettings, checkpoint_key, checkpoint_path, finished_drafts, step_accuracy, train_drafts


@dataclass(frozen=True)
class Experiment:
    """Everything that defines notebook 06's numbers (the cache keys are built from it)."""

    model: str = "smollm2-135m"
    n_train: int = 1000  # training prompts (the target replies to each)
    n_heldout: int = 64  # of those, held out for step accuracy
    train_max_new_tokens: int = 256
    eval_per_column: int = 20  # SpecBench questions per paper column
    replay_tokens: int = 128  # greedy continuation tokens generated and replayed per question
    draft_vocab: int = 8192
    sizes: tuple[int, ...] = (30, 60)
    temperatures: tuple[float, ...] = (0.0, 1.0)  # T > 0: replay of a seeded sampled continuation (replay.py)
    depth: int = 6
    top_k: int = 10
    seeds: tuple[int, ...] = (0, 1, 2)  # seed 0 trains every method; later seeds the `reseeded`
    reseeded: tuple[str, ...] = ("EAGLE3", "ELSI m=3")
    lever_lm_head: bool = True  # also train EAGLE3 without the lm_head initialisation (what that lever buys)
    train: TrainSettings = field(default_factory=TrainSettings)
    max_length: int = 1024  # training conversations (prompt + reply) keep their first max_length tokens
    eval_seed: int = 0  # which SpecBench questions
    eval_max_length: int = 2048  # SpecBench prompts reach 1,343 tokens (summarization): none is cut

    @classmethod
    def from_dict(cls, params: dict) -> "Experiment":
        params = dict(params)
        train = TrainSettings(**params.pop("train", {}))
        params = {k: tuple(v) if isinstance(v, list) else v for k, v in params.items()}
        return cls(train=train, **params)


def draft_methods(stats: dict, n_layers: int | None = None) -> pd.DataFrame:
    """The layer sets of notebook 06 from one model's calibration statistics ({selection: LayerStats}):
    EAGLE2 (the normed last hidden state), EAGLE3 (EAGLE's [2, N//2, N-3] as inputs of those layers,
    converted to elsi's output convention), ELSI m=1 under the paper's rule and unrestricted, ELSI and
    ELSI-C m=2, 3, the lowest-entropy control (m=3), and ELSI m=3 under notebook 05's variants when
    they choose a different set. Columns: method, source (layer tuple or FINAL_NORM), setting, m,
    layers (for entropy), entropy (set entropy on the paper setting's Z)."""
    Z = stats["entropy"].Z
    N = n_layers or Z.shape[0]
    tables = {name: selection_table(stats[sel].Z, normalize=norm).set_index(["method", "m"])
              for name, (sel, norm) in TABLE1_SETTINGS.items()}
    paper = tables["paper"]
    rows = [("EAGLE2", FINAL_NORM, "paper", (N - 1,)),
            ("EAGLE3", eagle3_layers(N), "paper", None),
            ("ELSI m=1", paper.loc[(SINGLE_LAYER_RULE, 1), "layers"], "paper", None),
            ("ELSI m=1, unrestricted", paper.loc[("ELSI", 1), "layers"], "paper", None)]
    for m in (2, 3):
        rows += [(f"ELSI m={m}", paper.loc[("ELSI", m), "layers"], "paper", None),
                 (f"ELSI-C m={m}", paper.loc[("ELSI-C", m), "layers"], "paper", None)]
    rows.append(("lowest-entropy m=3", paper.loc[("lowest-entropy control", 3), "layers"], "paper", None))
    for setting, label in (("no_template", "template excluded"), ("frobenius", "Frobenius")):
        rows.append((f"ELSI m=3, {label}", tables[setting].loc[("ELSI", 3), "layers"], setting, None))
    out, seen = [], set()
    for method, source, setting, layers in rows:
        source = source if source == FINAL_NORM else tuple(int(l) for l in source)
        if setting != "paper" and source in seen:
            continue  # a variant that chose the paper's set adds nothing
        if method == "ELSI m=1, unrestricted" and source in seen:
            continue
        seen.add(source)
        layers = layers or source
        out.append({"method": method, "source": source, "setting": setting, "m": len(layers), "layers": layers,
                    "entropy": set_entropy(Z, layers)})
    return pd.DataFrame(out)


def beam_overlap(Z, methods: pd.DataFrame, *, top: int = 10) -> pd.DataFrame:
    """For each method's set (paper setting's Z): its rank and percentile among all C(N, m) sets by
    set entropy (exact: every set scored), how many of the `top` best m-sets share a layer with it,
    and the CKA compartment (0 = first) of each of its layers."""
    scorer = SetScorer(Z)
    N = Z.shape[0]
    bounds = list(compartments(Z).boundaries)
    rows, scored = [], {}  # scored: {m: (every m-set, its entropy)}, each m scored once
    for row in methods.itertuples():
        layers = tuple(row.layers)
        if len(layers) not in scored:
            sets = list(itertools.combinations(range(N), len(layers)))
            scored[len(layers)] = sets, scorer.entropies(sets)
        sets, values = scored[len(layers)]
        mine = values[sets.index(layers)]
        rank = int((values > mine + 1e-12).sum()) + 1
        best = [set(sets[i]) for i in np.argsort(-values, kind="stable")[:top]]
        rows.append({"method": row.method, "layers": layers, "entropy": mine, "rank": rank, "of": len(sets),
                     "percentile": 100.0 * (1 - (rank - 1) / len(sets)),
                     f"top-{top} sets sharing a layer": sum(bool(s & set(layers)) for s in best),
                     "compartments": tuple(int(np.searchsorted(bounds, l, side="left")) for l in layers)})
    return pd.DataFrame(rows)


def data_key(exp: Experiment, model, tokenizer) -> dict:
    """What the drafts' training depends on besides TrainSettings (which `train_drafts` adds): the
    target (fingerprint, not its name or path), the training prompts and how their replies and
    features are made, and the draft vocabulary. Known before any reply or feature exists (so
    `trained_drafts` finds a checkpoint without rebuilding the data); the evaluation settings are
    left out, so that changing them never retrains a draft."""
    from ..inputs.prompts import conversations_hash
    from ..common.identity import model_fingerprint, tokenizer_fingerprint, versions
    data = {name: getattr(exp, name) for name in ("n_train", "n_heldout", "train_max_new_tokens", "draft_vocab",
                                                  "max_length")}
    return {"data": data, "model": model_fingerprint(model), "tokenizer": tokenizer_fingerprint(tokenizer),
            "library": versions(), "prompts": conversations_hash(corpus.training_prompt_list(exp.n_train)),
            "replies": {"batch": corpus.REPLY_BATCH}, "features_format": features.FORMAT}


LEVER = "EAGLE3, lm_head not from target"  # the lm_head-initialisation lever's ablation


def _groups(exp: Experiment, methods: pd.DataFrame) -> list[tuple[int, bool, dict[str, object]]]:
    """Lock-step groups as (seed, lm_head from the target?, {method: source}): every method at the
    first seed, the `reseeded` ones at the others, and (`lever_lm_head`) EAGLE3 at the first seed
    with a randomly initialised lm_head."""
    sources = dict(zip(methods.method, methods.source))
    missing = [m for m in exp.reseeded + (("EAGLE3",) if exp.lever_lm_head else ()) if m not in sources]
    if missing:
        raise ValueError(f"reseeded methods {missing} are not among {list(sources)}")
    groups = [(seed, True, sources if i == 0 else {m: sources[m] for m in exp.reseeded})
              for i, seed in enumerate(exp.seeds)]
    if exp.lever_lm_head:
        groups.append((exp.seeds[0], False, {LEVER: sources["EAGLE3"]}))
    return groups


def plan(exp: Experiment, methods: pd.DataFrame, rates: dict | None = None) -> pd.DataFrame:
    """Estimated time of each stage from per-unit costs measured on this 2-core machine
    (`bench/bench_draft.py`; pass `rates` to override): minutes per stage, before anything runs."""
    # Measured in the first paper-scale runs (2026-11-30): replies 1.9 s each (batches of 16, up to 256
    # tokens), features about 370 tok/s, training about 1,550 draft-tokens/s in lock-step (batches of
    # 512 tokens), 283 tokens per training conversation, replay 0.7 s per question and draft (both sizes).
    r = {"reply_s": 1.9, "feature_tok_s": 370.0, "train_tok_s": 1550.0, "replay_s_per_q": 0.7,
         "tokens_per_conv": 283.0, **(rates or {})}
    n_drafts = sum(len(g) for _, _, g in _groups(exp, methods))
    n_eval = exp.eval_per_column * len(corpus.COLUMNS)
    train_tokens = (exp.n_train - exp.n_heldout) * r["tokens_per_conv"] * exp.train.epochs
    n_T = len(exp.temperatures)
    rows = [("replies (training prompts + SpecBench)", (exp.n_train + n_T * n_eval) * r["reply_s"]),
            ("target features", (exp.n_train + n_T * n_eval) * r["tokens_per_conv"] / r["feature_tok_s"]),
            (f"training {n_drafts} drafts", n_drafts * train_tokens / r["train_tok_s"]),
            (f"replay {n_drafts} drafts x {n_eval} questions" + (f" x {n_T} temperatures" if n_T > 1 else ""),
             n_drafts * n_eval * n_T * r["replay_s_per_q"])]
    frame = pd.DataFrame(rows, columns=["stage", "minutes"])
    frame["minutes"] = (frame["minutes"] / 60).round(1)
    return pd.concat([frame, pd.DataFrame([{"stage": "total", "minutes": frame["minutes"].sum()}])], ignore_index=True)


def _eval_name(temperature: float) -> str:
    return "SpecBench" if temperature == 0 else f"SpecBench T={temperature:g}"


def make_draft(model, source, d2t, t2d, seed: int, lm_head_from_target: bool = True) -> Eagle3Draft:
    """A fresh draft on `model` reading `source` (a layer set or FINAL_NORM), with the vocabulary maps
    `d2t` / `t2d` and (by default) the target's lm_head rows of that vocabulary."""
    draft = Eagle3Draft.from_target(model, source, len(d2t), seed=seed)
    draft.set_vocabulary(d2t, t2d)
    if lm_head_from_target:
        init_lm_head_from_target(draft, model.get_output_embeddings())
    return draft


def training_data(exp: Experiment, methods: pd.DataFrame, model, tokenizer, progress: bool = True) -> dict:
    """The training side of `run`: replies to the training prompts (split off the `n_heldout` last
    ones), the training feature store over every layer any method reads, and the draft vocabulary."""
    n_layers = len(model.get_decoder().layers)
    convs = corpus.training_conversations(model, tokenizer, exp.n_train, max_new_tokens=exp.train_max_new_tokens,
                                          max_length=exp.max_length, progress=progress)
    train_convs, heldout_convs = convs[:exp.n_train - exp.n_heldout], convs[exp.n_train - exp.n_heldout:]
    layers = sorted({l for s in methods.source if s != FINAL_NORM for l in s} | {n_layers - 1})
    store = build_features(model, tokenizer, train_convs, layers, max_length=exp.max_length, progress=progress,
                           desc="target features (train)")
    reply_tokens = store.reply_tokens()
    counts = np.bincount(reply_tokens, minlength=model.config.vocab_size)
    d2t, t2d = draft_vocabulary(torch.from_numpy(counts), exp.draft_vocab)
    return {"train_convs": train_convs, "heldout_convs": heldout_convs, "layers": layers, "store": store,
            "reply_tokens": reply_tokens, "d2t": d2t, "t2d": t2d}


def _group_key(key: dict, seed: int, lm_head_init: bool) -> dict:
    """A lock-step group's part of its checkpoint key: `data_key`'s, the seed and the lm_head start."""
    return {**key, "seed": seed, **({} if lm_head_init else {"lm_head": "random"})}


def group_checkpoint(exp: Experiment, key: dict, seed: int, lm_head_init: bool, group: dict):
    """(path, full key, name) of one lock-step group's checkpoint; `key` is `data_key`'s."""
    name = f"seed{seed}" + ("" if lm_head_init else "-lever")
    full_key = checkpoint_key(group, replace(exp.train, seed=seed), _group_key(key, seed, lm_head_init))
    return checkpoint_path(name, full_key), full_key, name


def train_group(exp: Experiment, model, key: dict, data: dict, seed: int, lm_head_init: bool, group: dict, *,
                progress: bool = True, max_batches: int | None = None) -> tuple[dict, dict, str]:
    """One lock-step group's drafts ({method: source}), trained or resumed from their checkpoint
    (`group_checkpoint`). Returns ({method: draft}, train_drafts' output, the group's name)."""
    drafts = {m: make_draft(model, src, data["d2t"], data["t2d"], seed, lm_head_init) for m, src in group.items()}
    target_rows = model.get_output_embeddings().weight[data["t2d"]].detach().float()
    path, full_key, name = group_checkpoint(exp, key, seed, lm_head_init, group)
    out = train_drafts(drafts, data["store"], target_rows, replace(exp.train, seed=seed),
                       key=_group_key(key, seed, lm_head_init), name=name, progress=progress, max_batches=max_batches)
    assert out["path"] == path, "the checkpoint key is built in group_checkpoint only"
    return drafts, out, name


def trained_drafts(exp: Experiment, methods: pd.DataFrame, *, loaded: tuple | None = None) -> dict:
    """The drafts `run` trained at the first seed (lm_head from the target), {method: Eagle3Draft},
    read from their finished checkpoint alone (each draft's config, source and vocabulary maps are
    stored there; no reply or feature is rebuilt): what notebook 06 measured, for decoding or
    export. Refuses (RuntimeError) when that checkpoint is missing, corrupt or unfinished; it never
    trains (run `make tables`)."""
    model, tokenizer = loaded or load_model(exp.model)
    seed, lm_head_init, group = _groups(exp, methods)[0]
    path, full_key, _ = group_checkpoint(exp, data_key(exp, model, tokenizer), seed, lm_head_init, group)
    drafts = finished_drafts(path, full_key, model)
    for method, source in group.items():
        if drafts[method].config.source != source:
            raise RuntimeError(f"{path}: {method} reads {drafts[method].config.source}, the methods say {source}")
    return drafts


def run(exp: Experiment, methods: pd.DataFrame, *, progress: bool = True, loaded: tuple | None = None) -> dict:
    """Run (or resume from the caches) the whole experiment. Returns {"results": per-question tau
    (method, seed, nodes, question_id, category, column, tau, rounds), "lever": the same for the
    lm_head lever's ablation, "accuracy": held-out step accuracy per draft, "training": per-batch
    logs per group, "questions", "data": corpus sizes}."""
    model, tokenizer = loaded or load_model(exp.model)
    key = data_key(exp, model, tokenizer)
    picked = corpus.eval_questions(exp.eval_per_column, seed=exp.eval_seed)
    if not exp.temperatures or min(exp.temperatures) < 0:
        raise ValueError(f"temperatures must be non-empty and >= 0, got {exp.temperatures}")
    eval_convs, sampled = {}, {}  # per temperature: conversations, and the sampled ids when T > 0
    for T in exp.temperatures:
        out = corpus.eval_conversations(model, tokenizer, picked, max_new_tokens=exp.replay_tokens,
                                        max_length=exp.eval_max_length, progress=progress, temperature=T,
                                        seed=exp.eval_seed)
        eval_convs[T], sampled[T] = (out, None) if T == 0 else out
    t = training_data(exp, methods, model, tokenizer, progress)
    train_convs, heldout_convs, layers = t["train_convs"], t["heldout_convs"], t["layers"]
    stores = {"train": t["store"], **{name: build_features(model, tokenizer, c, layers, max_length=length,
                                                           progress=progress, desc=f"target features ({name})")
                                      for name, c, length in [("held-out", heldout_convs, exp.max_length)] +
                                      [(_eval_name(T), eval_convs[T], exp.eval_max_length) for T in exp.temperatures]}}
    reply_tokens = t["reply_tokens"]
    counts = np.bincount(reply_tokens, minlength=model.config.vocab_size)
    coverage = float(counts[t["t2d"].numpy()].sum() / counts.sum())

    results, accuracy, logs, first_drafts = [], [], {}, {}
    for seed, lm_head_init, group in _groups(exp, methods):
        drafts, out, name = train_group(exp, model, key, t, seed, lm_head_init, group, progress=progress)
        if out["done"] < out["total"]:
            raise RuntimeError(f"training of {name} stopped at batch {out['done']} of {out['total']}")
        logs[name] = out["log"]
        if seed == exp.seeds[0] and lm_head_init:
            first_drafts = drafts
        for method, draft in drafts.items():
            draft_key = {"checkpoint": out["path"].name, "method": method,
                         "questions": {"per_column": exp.eval_per_column, "seed": exp.eval_seed,
                                       "max_length": exp.eval_max_length}}
            acc = step_accuracy(draft, stores["held-out"], exp.train.ttt_steps,
                                autocast=exp.train.autocast_bf16)
            accuracy.append({"method": method, "seed": seed, **{f"step {k + 1}": a for k, a in enumerate(acc)}})
            for T in exp.temperatures:
                per_question = replay(draft, stores[_eval_name(T)],
                                      key={**draft_key, **({"temperature": T} if T else {})}, sizes=exp.sizes,
                                      depth=exp.depth, top_k=exp.top_k, max_tokens=exp.replay_tokens,
                                      autocast=exp.train.autocast_bf16, progress=progress, sampled=sampled[T],
                                      desc=f"replay {method} (seed {seed}, T = {T:g})")
                for q, lengths in zip(picked.itertuples(), per_question):
                    for nodes, rounds in lengths.items():
                        results.append({"method": method, "seed": seed, "temperature": T, "nodes": nodes,
                                        "question_id": q.question_id, "category": q.category, "column": q.column,
                                        "tau": question_tau(rounds), "rounds": len(rounds), "accepted": rounds})
    data = {"training conversations": len(train_convs), "held-out conversations": len(heldout_convs),
            "training reply tokens": len(reply_tokens), "SpecBench questions": len(picked),
            "draft vocabulary": exp.draft_vocab, "draft vocabulary coverage of reply tokens": coverage}
    results = pd.DataFrame(results)
    lever = results[results.method == LEVER] if len(results) else results
    return {"results": results.drop(lever.index), "lever": lever, "accuracy": pd.DataFrame(accuracy), "training": logs,
            "questions": picked.drop(columns="conversation"), "data": data, "drafts": first_drafts,
            "loaded": (model, tokenizer), "eval_store": stores[_eval_name(0.0)] if 0.0 in exp.temperatures else None}


def loop_agreement(exp: Experiment, ran: dict, methods: pd.DataFrame, checked, *, per_column: int = 2,
                   nodes: int | None = None, progress: bool = True) -> pd.DataFrame:
    """The real loop (`decode.speculative_generate`, batch 1, T = 0) against replay on the first
    `per_column` questions of each column (a stated subsample: the loop runs one target forward per
    round), for the `checked` methods' first-seed drafts at `nodes` (default the largest size). Per
    question: rounds and tau of both, whether every round's accepted length agrees (else the first
    round that differs: a floating-point near-tie decided differently by the two computations), and
    whether the loop's tokens are the target's greedy continuation. Cached per question."""
    from ..common.identity import weights_sha256
    from .decode import speculative_generate
    from .replay import continuation_end
    from ..common.cachefiles import per_question_cache, save_per_question

    nodes = nodes or max(exp.sizes)
    model, store, results = ran["loaded"][0], ran["eval_store"], ran["results"]
    if store is None:
        raise ValueError("loop_agreement needs the T = 0 results (temperatures must include 0)")
    sources = dict(zip(methods.method, methods.source))
    questions = ran["questions"].reset_index(drop=True)
    subsample = [i for _, g in questions.groupby("column", sort=False) for i in g.index[:per_column]]
    rows = []
    for method in checked:
        draft = ran["drafts"][method]
        source = draft.config.source
        if source != sources[method]:
            raise ValueError(f"{method}: the draft reads {source}, the methods table says {sources[method]}")
        key = {"method": method, "source": str(source), "nodes": nodes, "depth": exp.depth, "top_k": exp.top_k,
               "max_tokens": exp.replay_tokens, "autocast": exp.train.autocast_bf16, "store": store.folder.name,
               "draft": weights_sha256(draft)}
        path, done = per_question_cache("loop", key)
        replayed = results[(results.method == method) & (results.seed == exp.seeds[0]) & (results.temperature == 0)
                           & (results.nodes == nodes)].set_index("question_id")
        bar = progress_bar(total=len(subsample), initial=len(set(subsample) & set(done)), unit="question",
                           desc=f"real loop, {method}", disable=not progress)
        for i in subsample:
            seq = store.sequence(i, features=False)
            start = seq["start"]
            end = continuation_end(seq["ids"], seq["argmax"], start, exp.replay_tokens)
            if end - start < 2:  # no round to compare (replay has none either)
                bar.update(i not in done)
                continue
            if i not in done:
                out = speculative_generate(model, draft, seq["ids"][:start], max_new_tokens=end - start,
                                           nodes=nodes, depth=exp.depth, top_k=exp.top_k, stop_at_eos=False,
                                           autocast=exp.train.autocast_bf16)
                done[i] = {"accepted": out.accepted, "greedy": out.tokens == seq["ids"][start:end].tolist()}
                save_per_question(path, key, done)
                bar.update(1)
            q = questions.loc[i]
            mine, theirs = done[i]["accepted"], list(replayed.loc[q.question_id, "accepted"])
            differ = [r for r, (a, b) in enumerate(zip(mine, theirs)) if a != b]
            rows.append({"method": method, "question_id": q.question_id, "column": q.column,
                         "rounds (loop)": len(mine), "rounds (replay)": len(theirs),
                         "tau (loop)": question_tau(mine), "tau (replay)": question_tau(theirs),
                         "rounds agree": mine == theirs, "first differing round": differ[0] if differ else None,
                         "loop output is greedy": done[i]["greedy"]})
        bar.close()
    return pd.DataFrame(rows)
