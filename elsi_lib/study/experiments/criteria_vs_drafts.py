"""Does a selection criterion predict the trained draft? Rank correlations of set scores (set entropy,
Eq. 4-6; the task probe's held-out error and lm_head agreement, `selection.probe`) with what the
drafts trained on those sets measured: held-out step-1 accuracy, and AVG tau as the paired difference
from EAGLE3's draft on the same questions (ranking the drafts by it ranks them by AVG tau on the
questions they share; EAGLE3 itself scores 0).

Input: per-question rows of trained drafts (`question_rows`: the tables' per-question tau with each
draft's layer set, its set entropy and its held-out step accuracy; notebooks 06 and 07 write them as
`*_question_tau_*.csv`) turned into one row per draft (`draft_table`), or, for a protocol run before
those rows were written, the drafts rebuilt from its committed tables (`drafts_from_tables`); and the
probe's score of each set (`probe_scores`). Output (`rank_correlations`): per protocol and curve
point, Spearman's rank correlation of each criterion, signed so that a positive rho means "the
criterion ranks the better drafts higher", with each outcome across the drafts of the first training
seed, and two percentile bootstrap intervals: over the sets (drafts resampled with replacement),
and, for tau where per-question rows exist, over the SpecBench questions (all together, not by
column) and the sets together."""

from __future__ import annotations

import zlib

import numpy as np
import pandas as pd

from .tables import _check_n_boot, paired_differences
from ...common.hardware import NUMERIC_COLUMNS
from .rank_stats import check_n_perm, interval, permutation_p, spearman_rows
from ...selection.probe import ProbeStats, agreement, set_errors

# criterion column: +1 if a higher value predicts a better draft, -1 if a lower one does
CRITERIA = {"set entropy": 1, "probe error": -1, "probe agreement": 1}
BASELINE = "EAGLE3"
OUTCOMES = ("step 1", f"tau minus {BASELINE}")  # the paired AVG tau difference: EAGLE3 itself scores 0
KEY = ["protocol", "prompts", "id", "seed"]  # one trained draft (at one point of its learning curve)


def layers_text(layers) -> str:
    """A layer set as the CSVs hold it: "1 14 26"."""
    return " ".join(str(int(l)) for l in layers)


def parse_layers(text) -> tuple:
    return tuple(int(l) for l in str(text).split())


def question_rows(
    results: pd.DataFrame, accuracy: pd.DataFrame, methods: pd.DataFrame, *, protocol: str, prompts: int | None = None
) -> pd.DataFrame:
    """The per-question tau rows of `results` (`experiment.Run.results`, or `Run.curve` with its own
    prompts and step columns) with each draft's scored layers (`layer_choices.layers`: EAGLE2's normed last
    state is scored as the last layer), set entropy and held-out step accuracy (`accuracy`, joined on
    method and seed unless the rows carry it), under `protocol` and the training prompts `prompts`,
    and the numeric settings the drafts ran with where the rows carry them (`protocol.NUMERIC_COLUMNS`)."""
    steps = [c for c in accuracy.columns if c.startswith("step ")]
    rows = results.copy()
    if not all(c in rows for c in steps):
        rows = rows.drop(columns=[c for c in steps if c in rows]).merge(
            accuracy[["method", "seed", *steps]], on=["method", "seed"], how="left"
        )
    if rows[steps].isna().any().any():
        raise ValueError("some drafts have no held-out step accuracy: `accuracy` must hold every (method, seed)")
    unknown = sorted(set(rows["id"]) - set(methods["id"]))
    if unknown:
        raise ValueError(f"method ids {unknown} are not in `methods`")
    sets = methods.set_index("id")
    rows["layers"] = rows["id"].map(lambda i: layers_text(sets.loc[i, "layers"]))
    rows["set entropy"] = rows["id"].map(sets["entropy"]).astype(float)
    if prompts is not None:
        rows["prompts"] = int(prompts)
    if "prompts" not in rows:
        raise ValueError("pass prompts= (the training prompts) when the rows have no prompts column")
    keep = [
        "prompts",
        "id",
        "method",
        "seed",
        "layers",
        "set entropy",
        *steps,
        "temperature",
        "nodes",
        "question_id",
        "column",
        "tau",
        *[c for c in NUMERIC_COLUMNS if c in rows],
    ]
    return rows.assign(protocol=protocol)[["protocol", *keep]]


def probe_scores(layer_sets, probe: ProbeStats, ridge: float, lm_head=None) -> pd.DataFrame:
    """One row per distinct set: layers (text), the probe's held-out relative error and, with the
    target's `lm_head` (V, d), its held-out lm_head agreement."""
    sets = sorted({parse_layers(s) if isinstance(s, str) else tuple(s) for s in layer_sets})
    frame = pd.DataFrame({"layers": [layers_text(s) for s in sets], "probe error": set_errors(probe, sets, ridge)})
    if lm_head is not None:
        frame["probe agreement"] = [agreement(probe, s, ridge, lm_head) for s in sets]
    return frame


def draft_table(rows: pd.DataFrame, *, temperature: float, nodes: int, baseline: str = BASELINE) -> pd.DataFrame:
    """One row per trained draft of the first training seed at each (protocol, prompts): its layers,
    set entropy, step accuracy, AVG tau at `temperature` and `nodes` (the mean over the questions it
    has a round on, as the tables' AVG) and its paired difference from `baseline` (the mean over the
    questions both have a round on, as `tables.paired_differences`). The rows used are checked first
    (`_check_rows`: each (draft, question) once, tau finite and >= 1 or NaN, one id per method)."""
    part = _first_seed(rows, temperature, nodes)
    steps = [c for c in part.columns if c.startswith("step ")]
    drafts = (
        part.groupby(KEY, sort=False)
        .agg(
            method=("method", "first"),
            layers=("layers", "first"),
            **{c: (c, "first") for c in ["set entropy", *steps]},
            tau=("tau", "mean"),
            questions=("tau", "count"),
        )
        .reset_index()
    )
    diffs = []
    for point, group in part.groupby(["protocol", "prompts"], sort=False):
        matrix = _differences(group, baseline, point)  # (Q, S) question x draft
        diffs += [
            pd.DataFrame(
                {
                    "protocol": point[0],
                    "prompts": point[1],
                    "id": matrix.columns,
                    OUTCOMES[1]: np.nanmean(matrix.to_numpy(), axis=0),
                }
            )
        ]
    drafts = drafts.merge(pd.concat(diffs), on=["protocol", "prompts", "id"])
    return drafts.assign(temperature=temperature, nodes=nodes)


def _first_seed(rows, temperature, nodes):
    """The per-question rows at `temperature` and `nodes` of each point's first training seed, checked
    (`_check_rows`)."""
    part = rows[(rows.temperature == temperature) & (rows.nodes == nodes)]
    if part.empty:
        raise ValueError(f"no rows at temperature {temperature} and {nodes} nodes")
    first = part.groupby(["protocol", "prompts"]).seed.transform("min")
    at_first = part[part.seed == first].groupby(["protocol", "prompts"]).method.agg(set)  # per point
    has_first = [m in at_first.get((p, n), set()) for p, n, m in zip(part.protocol, part.prompts, part.method)]
    lacking = part[~np.array(has_first, dtype=bool)]
    missing = lacking.groupby(["protocol", "prompts", "method"], sort=False).seed.unique()
    if len(missing):  # dropped, its set would leave the pooled test unsaid; paired at another seed, a mix
        (protocol, prompts, method), seeds = next(iter(missing.items()))
        first_seed = int(first[lacking.index[0]])
        raise ValueError(
            f"{protocol} at {prompts} prompts: {method} has drafts at seed(s) {sorted(map(int, seeds))} but none "
            f"at seed {first_seed}, the first seed of the point, which the drafts are compared at (train "
            f"{method} at seed {first_seed}, or leave its other seeds out)"
        )
    part = part[part.seed == first]
    _check_rows(part, f"at temperature {temperature}, {nodes} nodes")
    return part


def _check_rows(part: pd.DataFrame, where: str) -> None:
    """Refuse per-question rows that would count wrongly: a (draft, question) row given twice (AVG tau
    would count it twice, the paired difference once), a tau below 1 or infinite (tau = mean(accepted
    + 1) is always finite and >= 1; NaN, a question without a round, is left out as the tables do),
    and a method with several draft ids at a point (`_check_methods`)."""
    twice = part[part.duplicated([*KEY, "question_id"], keep=False)]
    if len(twice):
        row = twice.iloc[0]
        count = int(((twice.id == row.id) & (twice.question_id == row.question_id)).sum())
        raise ValueError(
            f"draft {row.id!r} (seed {row.seed}) of {row.protocol} at {row.prompts} prompts has question "
            f"{row.question_id} {count} times {where}: each (draft, question) row must count once"
        )
    tau = part["tau"].astype(float)
    wrong = part[(tau < 1) | np.isinf(tau)]
    if len(wrong):
        named = ", ".join(
            f"draft {r.id!r} (seed {r.seed}) of {r.protocol} at {r.prompts} prompts, question "
            f"{r.question_id}: tau {r.tau}"
            for r in wrong.head(3).itertuples()
        )
        more = f" and {len(wrong) - 3} more rows" if len(wrong) > 3 else ""
        raise ValueError(
            f"tau below 1 or infinite {where}: {named}{more}; tau is a mean of (accepted + 1), always finite and >= 1"
        )
    _check_methods(part, where)


def _check_methods(frame: pd.DataFrame, where: str) -> None:
    """Refuse a method trained at one seed listed under several draft ids at a point: one draft
    listed twice (or two drafts under one label, which the baseline's pairing cannot tell apart)."""
    ids = frame.groupby(["protocol", "prompts", "method", "seed"], sort=False)["id"].unique()
    several = ids[ids.map(len) > 1]
    if len(several):
        (protocol, prompts, method, seed), names = several.index[0], sorted(several.iloc[0].tolist())
        raise ValueError(
            f"method {method!r} (seed {seed}) of {protocol} at {prompts} prompts is listed under the "
            f"draft ids {names} {where}: each draft must count once"
        )


def _differences(group: pd.DataFrame, baseline: str, point) -> pd.DataFrame:
    """(questions x draft ids) tau minus the baseline's tau on the same question (NaN where either has
    no round)."""
    tau = group.pivot_table(index="question_id", columns="id", values="tau", aggfunc="first")
    labels = group.drop_duplicates("id").set_index("id").method
    if baseline not in set(labels):
        raise ValueError(
            f"{point[0]} at {point[1]} prompts has no {baseline} draft at its first seed to pair the others with"
        )
    base = tau[labels.index[labels == baseline][0]]
    return tau.sub(base, axis=0)[labels.index.tolist()]


def drafts_from_tables(
    accuracy: pd.DataFrame,
    paired: pd.DataFrame,
    overlap: pd.DataFrame,
    *,
    protocol: str,
    prompts: int,
    baseline: str = BASELINE,
) -> pd.DataFrame:
    """The drafts of a protocol run before its per-question rows were written, from the tables it
    committed: the step accuracy CSV (method, seed, step k), the paired differences from `baseline`
    (method, nodes, temperature, diff) and the beam-overlap table (method, layers, entropy). One row
    per (draft of the first seed, temperature, nodes); no per-question tau, so `rank_correlations`
    gives these only the interval over sets. The method label serves as the id; a table listing a
    method twice (`_check_once`) is refused."""
    first = accuracy[accuracy.seed == accuracy.seed.min()]
    for table, key, name in (
        (first, ["method", "seed"], "step accuracy"),
        (overlap, ["method"], "beam-overlap"),
        (paired, ["method", "temperature", "nodes"], "paired"),
    ):
        _check_once(table, key, name)
    sets = overlap.assign(
        layers=overlap["layers"].map(lambda t: layers_text(str(t).strip("()").replace(",", " ").split()))
    )
    base = first[first.method == baseline]
    if base.empty:
        raise ValueError(f"the step accuracy table has no {baseline} row")
    out = []
    for (temperature, nodes), block in paired.groupby(["temperature", "nodes"]):
        diffs = {**dict(zip(block.method, block["diff"])), baseline: 0.0}
        for _, row in first.iterrows():
            if row.method not in diffs or row.method not in set(sets.method):
                continue  # a lever's draft (not in the paired table) or a set the overlap table lacks
            s = sets[sets.method == row.method].iloc[0]
            out.append(
                {
                    "protocol": protocol,
                    "prompts": int(prompts),
                    "id": row.method,
                    "seed": row.seed,
                    "method": row.method,
                    "layers": s["layers"],
                    "set entropy": float(s["entropy"]),
                    **row.filter(like="step ").to_dict(),
                    OUTCOMES[1]: float(diffs[row.method]),
                    "temperature": float(temperature),
                    "nodes": int(nodes),
                }
            )
    return pd.DataFrame(out)


def _check_once(table: pd.DataFrame, key: list[str], name: str) -> None:
    """Refuse a committed table that lists one `key` twice (which of its rows would be the draft's?)."""
    twice = table[table.duplicated(key, keep=False)]
    if len(twice):
        first = twice.iloc[0]
        count = int((twice[key] == first[key]).all(axis=1).sum())
        named = ", ".join(f"{k} {first[k]!r}" for k in key)
        raise ValueError(f"the {name} table lists {named} {count} times: each draft must have one row")


def paired_from(
    rows: pd.DataFrame, method: str, baselines=(BASELINE,), *, nodes: int, n_boot: int = 1000, seed: int = 0
) -> pd.DataFrame:
    """`method`'s draft against each of `baselines` on the questions both have a round on
    (`tables.paired_differences`: AVG tau difference, 95% paired bootstrap interval, share of resamples
    ahead), per protocol at its finished drafts (its largest `prompts`, the first seed) and temperature,
    at `nodes`. A protocol without `method` or a baseline is left out."""
    out = []
    for protocol, part in rows.groupby("protocol", sort=False):
        part = part[part.prompts == part.prompts.max()]
        first = part.seed.min()
        for T in sorted(part.temperature.unique()):
            block = part[(part.temperature == T) & (part.seed == first)]
            for baseline in baselines:
                if not {method, baseline} <= set(block.method):
                    continue
                pair = block[block.method.isin([method, baseline])]
                diff = paired_differences(
                    pair, nodes, baseline, seed=seed, n_boot=n_boot, model_seed=first, temperature=T
                )
                out.append(
                    diff.assign(
                        protocol=protocol, prompts=int(part.prompts.iloc[0]), baseline=baseline, temperature=float(T)
                    )
                )
    columns = [
        "protocol",
        "prompts",
        "temperature",
        "nodes",
        "method",
        "baseline",
        "diff",
        "low",
        "high",
        "P(ahead)",
        "questions",
    ]
    return pd.concat(out, ignore_index=True)[columns] if out else pd.DataFrame(columns=columns)


def _check_drafts(drafts: pd.DataFrame, where: str) -> None:
    """Refuse a draft listed twice at a point: the same id (at one seed or several: the drafts are
    those of the first seed) or the same method and seed under two ids (`_check_methods`)."""
    twice = drafts[drafts.duplicated(["protocol", "prompts", "id"], keep=False)]
    if len(twice):
        row = twice.iloc[0]
        mine = twice[(twice.protocol == row.protocol) & (twice.prompts == row.prompts) & (twice.id == row.id)]
        seeds = f" (seeds {mine.seed.tolist()})" if "seed" in mine else ""
        raise ValueError(
            f"draft {row.id!r} of {row.protocol} at {row.prompts} prompts is listed {len(mine)} times"
            f"{seeds} {where}: each draft must count once (one row per draft of the first seed, as "
            "`draft_table` gives)"
        )
    if {"method", "seed"} <= set(drafts.columns):
        _check_methods(drafts, where)


def rank_correlations(
    drafts: pd.DataFrame,
    rows: pd.DataFrame | None = None,
    *,
    temperature: float,
    nodes: int,
    n_boot: int = 1000,
    seed: int = 0,
    baseline: str = BASELINE,
    n_perm: int = 10000,
) -> pd.DataFrame:
    """Per (protocol, prompts), criterion and outcome at `temperature` and `nodes`: the drafts,
    Spearman's signed rho (module docstring) and its 95% bootstrap intervals over the sets and, for
    the paired tau difference of a point whose per-question `rows` are given, over the questions and
    sets together, with a permutation p-value (`permutation_p`, `n_perm` shuffles) and the number
    of distinct sets among the drafts. `drafts`: `draft_table` or `drafts_from_tables` rows, with the
    probe's columns (`probe_scores`) joined on the layers where it scored them; a criterion is used
    where every draft of a point has it. Each point draws from its own generator, seeded by `seed`
    and the point, so a point's intervals do not depend on the others. Resampling 11 chosen (not
    sampled) sets with replacement ties ranks and gives intervals that reach +-1: read them as how
    much a few drafts carry the estimate, and the p-value as whether it could be chance. A NaN rho
    (a criterion or outcome constant across the drafts) gets NaN intervals. Refused (ValueError):
    fewer than `tables.MIN_BOOT` or a non-integer n_boot, an n_perm that is no positive integer, a
    draft listed twice at a point (`_check_drafts`) and per-question rows `_check_rows` refuses."""
    missing = [c for c in ("protocol", "prompts", "id", *OUTCOMES, "temperature", "nodes") if c not in drafts]
    if missing:
        raise ValueError(f"`drafts` lacks {missing}: pass one row per draft (`draft_table`, `drafts_from_tables`)")
    _check_n_boot(n_boot)
    check_n_perm(n_perm)
    drafts = drafts[(drafts.temperature == temperature) & (drafts.nodes == nodes)]
    if drafts.empty:
        raise ValueError(f"no drafts at temperature {temperature} and {nodes} nodes")
    _check_drafts(drafts, f"at temperature {temperature}, {nodes} nodes")
    out = []
    for (protocol, prompts), part in drafts.groupby(["protocol", "prompts"], sort=False):
        rng = np.random.default_rng([seed, zlib.crc32(str(protocol).encode()), int(prompts)])
        S = len(part)
        if S < 3:
            raise ValueError(f"{protocol} at {prompts} prompts has {S} drafts: a rank correlation needs at least 3")
        pick = rng.integers(0, S, size=(n_boot, S))  # (B, S) resampled drafts
        diffs = None
        mine = None if rows is None else rows[(rows.protocol == protocol) & (rows.prompts == prompts)]
        if mine is not None and len(mine):
            matrix = _differences(_first_seed(mine, temperature, nodes), baseline, (protocol, prompts))
            matrix = matrix[part["id"].tolist()].to_numpy()  # (Q, S)
            questions = rng.integers(0, len(matrix), size=(n_boot, len(matrix)))  # (B, Q)
            diffs = np.stack([np.nanmean(matrix[q], axis=0) for q in questions])  # (B, S)
        for criterion in [c for c in CRITERIA if c in part and part[c].notna().all()]:
            score = CRITERIA[criterion] * part[criterion].to_numpy(float)
            for outcome in OUTCOMES:
                value = part[outcome].to_numpy(float)
                rho = float(spearman_rows(score[None], value[None])[0])
                over_sets = interval(spearman_rows(score[pick], value[pick]), rho)
                both = (
                    interval(spearman_rows(score[pick], np.take_along_axis(diffs, pick, axis=1)), rho)
                    if outcome == OUTCOMES[1] and diffs is not None
                    else (np.nan, np.nan)
                )
                out.append(
                    {
                        "protocol": protocol,
                        "prompts": int(prompts),
                        "temperature": temperature,
                        "nodes": nodes,
                        "criterion": criterion,
                        "outcome": outcome,
                        "drafts": S,
                        "distinct sets": int(part["layers"].nunique()),
                        "rho": rho,
                        "p (permutation)": permutation_p(score, value, n_perm, rng),
                        "low (sets)": over_sets[0],
                        "high (sets)": over_sets[1],
                        "low (questions and sets)": both[0],
                        "high (questions and sets)": both[1],
                    }
                )
    return pd.DataFrame(out)
