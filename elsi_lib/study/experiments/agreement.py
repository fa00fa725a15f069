"""The real decoding loop against replay: notebook 06's check that tau by replay is what decoding does."""

from __future__ import annotations

import pandas as pd

from ...common.cachefiles import per_question_cache, save_per_question
from ...common.identity import weights_sha256
from ...common.progress import progress_bar
from ...draft.decode import speculative_generate
from .experiment import Run
from .experiment_settings import Experiment
from ...draft.replay import continuation_end, question_tau
from ...draft.runner import ran_on


def loop_agreement(
    exp: Experiment, ran: Run, checked, *, per_column: int = 2, nodes: int | None = None, progress: bool = True
) -> pd.DataFrame:
    """The real loop (`decode.speculative_generate`, batch 1, T = 0) against replay on the first
    `per_column` questions of each column (a stated subsample: the loop runs one target forward per
    round), for the `checked` method ids' first-seed drafts at `nodes` (default the largest tree).
    Per question: rounds and tau of both, whether every round's accepted length agrees (else the
    first round that differs: a floating-point near-tie decided differently by the two
    computations), and whether the loop's tokens are the target's greedy continuation. Cached per
    question."""
    nodes = nodes or max(exp.tree_nodes)
    if 0.0 not in ran.evaluation.stores:
        raise ValueError("loop_agreement needs the T = 0 results (temperatures must include 0)")
    store, results = ran.evaluation.stores[0.0], ran.results
    questions = ran.questions.reset_index(drop=True)
    subsample = [i for _, g in questions.groupby("column", sort=False) for i in g.index[:per_column]]
    rows = []
    for method_id in checked:
        if method_id not in ran.drafts:
            raise KeyError(f"no first-seed draft {method_id!r} among {list(ran.drafts)}")
        draft = ran.drafts[method_id]
        key = {
            "method": method_id,
            "source": str(draft.config.source),
            "nodes": nodes,
            "depth": exp.depth,
            "top_k": exp.top_k,
            "max_tokens": exp.replay_tokens,
            "autocast": exp.train.autocast_bf16,
            **ran_on(draft),
            "store": store.folder.name,
            "draft": weights_sha256(draft),
        }
        path, done = per_question_cache("loop", key)
        mine_rows = results[
            (results["id"] == method_id)
            & (results.seed == exp.seeds[0])
            & (results.temperature == 0)
            & (results.nodes == nodes)
        ]
        label = mine_rows.method.iloc[0] if len(mine_rows) else method_id
        replayed = mine_rows.set_index("question_id")
        bar = progress_bar(
            total=len(subsample),
            initial=len(set(subsample) & set(done)),
            unit="question",
            desc=f"real loop, {label}",
            disable=not progress,
        )
        for i in subsample:
            seq = store.sequence(i, features=False)
            start = seq["start"]
            end = continuation_end(seq["ids"], seq["argmax"], start, exp.replay_tokens)
            if end - start < 2:  # no round to compare (replay has none either)
                bar.update(i not in done)
                continue
            if i not in done:
                out = speculative_generate(
                    ran.model,
                    draft,
                    seq["ids"][:start],
                    max_new_tokens=end - start,
                    nodes=nodes,
                    depth=exp.depth,
                    top_k=exp.top_k,
                    stop_at_eos=False,
                    autocast=exp.train.autocast_bf16,
                )
                done[i] = {"accepted": out.accepted, "greedy": out.tokens == seq["ids"][start:end].tolist()}
                save_per_question(path, key, done)
                bar.update(1)
            q = questions.loc[i]
            mine, theirs = done[i]["accepted"], list(replayed.loc[q.question_id, "accepted"])
            differ = [r for r, (a, b) in enumerate(zip(mine, theirs)) if a != b]
            rows.append(
                {
                    "method": label,
                    "question_id": q.question_id,
                    "column": q.column,
                    "rounds (loop)": len(mine),
                    "rounds (replay)": len(theirs),
                    "tau (loop)": question_tau(mine),
                    "tau (replay)": question_tau(theirs),
                    "rounds agree": mine == theirs,
                    "first differing round": differ[0] if differ else None,
                    "loop output is greedy": done[i]["greedy"],
                }
            )
        bar.close()
    return pd.DataFrame(rows)
