"""Accepted-token tables (paper Tables 2-3) with uncertainty: pure functions over per-question tau.

Input everywhere: a long DataFrame of per-question results with columns method, seed, nodes,
question_id, column (the paper's SpecBench column) and tau (mean accepted + 1 over the question's
rounds), plus rounds and, from the experiment, temperature. A cell is the mean of its questions' tau
(each question weighs the same; EAGLE's scripts divide total tokens by total rounds instead, which
weighs questions by their rounds: with continuations of one fixed length the two differ little). AVG
is sample-weighted: the mean over all questions, as the paper's AVG over SpecBench's questions.
Intervals are percentile bootstraps over questions (seeded), resampled within each column so that
the column sizes stay fixed (AVG across all questions together when a column holds fewer than
MIN_QUESTIONS); paired differences resample the same questions for both methods.

What the tables refuse (ValueError) rather than estimate: missing required columns; a tree size,
training seed or temperature that is not in the results; results holding several temperatures when
none is chosen (they would be averaged together); a (method, seed, question) counted twice; a
question labelled with two columns, or with none of the paper's SpecBench columns (`corpus.COLUMNS`:
it would count in AVG but in no column of the table); a tau below 1 or infinite (tau = mean(accepted + 1) is always
finite and >= 1); a method with no finite tau at all; fewer than MIN_BOOT or a non-integer n_boot.
A NaN tau is a question without a round: that row is dropped, for that method, by every function
alike (tau_table averages the questions a method has a tau for, paired_differences pairs it with
the baseline on the questions both have one for). A cell, AVG or paired difference estimated from
fewer than MIN_QUESTIONS questions keeps its estimate but gets NaN low, high and P(ahead);
`formatted` writes it as '2.51 [no interval: 1 question]'.

Written tables: `tau_long` turns a block into long rows of numbers (TAU_CSV_COLUMNS: one row per
method, SpecBench column, temperature and tree size, with tau, low, high as floats, the questions
behind the cell and whether it is the best of its column), `save_tau_tables` writes them as CSV at
full float precision and, from those same rows, the Markdown table of formatted, bold cells
(`tau_markdown`); `read_tau_csv` reads the CSV back with its dtypes.
"""

from __future__ import annotations

import numbers

import numpy as np
import pandas as pd

from ...draft.corpus import COLUMNS

AVG = "AVG"
REQUIRED = ("method", "seed", "nodes", "question_id", "column", "tau")
# Fewest questions a bootstrap interval is drawn from: one question resamples to itself, a
# zero-width interval (and P(ahead) 0 or 1) that would read as a significant result.
MIN_QUESTIONS = 2
# Fewest bootstrap resamples: the 2.5% and 97.5% percentiles of fewer draws are a draw or two
# (n_boot = 1 gives an "interval" that excludes the estimate).
MIN_BOOT = 100


def _columns(results) -> list[str]:
    return [c for c in COLUMNS if c in set(results["column"])]


def _resample(frame, n_boot: int, seed: int) -> dict[str, np.ndarray]:
    """{column: (n_boot, Q_c) bootstrap row indices of `frame` within that column}, plus AVG: their
    concatenation (n_boot, Q), a bootstrap stratified by column, or, when a column holds fewer than
    MIN_QUESTIONS questions, a resample of all Q rows together (a stratum of one question never varies:
    strata of one each would give AVG a zero-width interval)."""
    rng = np.random.default_rng(seed)
    draws = {
        col: rng.choice(rows, size=(n_boot, len(rows)), replace=True)
        for col, rows in frame.groupby("column", sort=False).indices.items()
    }
    if min(d.shape[1] for d in draws.values()) >= MIN_QUESTIONS:
        draws[AVG] = np.concatenate(list(draws.values()), axis=1)
    else:
        draws[AVG] = rng.choice(len(frame), size=(n_boot, len(frame)), replace=True)
    return draws


def _check_n_boot(n_boot) -> None:
    if isinstance(n_boot, bool) or not isinstance(n_boot, numbers.Integral):
        raise ValueError(
            f"n_boot must be an integer number of bootstrap resamples, got {type(n_boot).__name__} {n_boot!r}"
        )
    if n_boot < MIN_BOOT:
        raise ValueError(
            f"n_boot = {n_boot} resamples are too few for a 95% percentile interval: use at least MIN_BOOT = {MIN_BOOT}"
        )


def _present(values) -> list:
    return sorted(pd.unique(values).tolist())


def _block(results: pd.DataFrame, nodes: int, *, model_seed=None, temperature=None, baseline=None):
    """The rows of one table: `results` at `nodes` (and training seed `model_seed` unless None) at
    one temperature, checked as the module docstring says, without the rows of NaN tau.

    temperature None: the results must hold a single temperature (or have no temperature column);
    a temperature given must be one of the results' (a frame without that column cannot say which
    temperature it holds, so asking one of it is an error too)."""
    missing = [c for c in REQUIRED if c not in results]
    if missing:
        raise ValueError(f"the results lack the column(s) {missing} (required: {list(REQUIRED)})")
    if "temperature" in results:
        present = _present(results["temperature"])
        if temperature is None and len(present) > 1:
            raise ValueError(
                f"the results hold several temperatures {present}: pass temperature= one of "
                "them (each table is at one temperature; they are not averaged together)"
            )
        if temperature is not None:
            if temperature not in present:
                raise ValueError(f"no results at temperature {temperature}: the temperatures present are {present}")
            results = results[results["temperature"] == temperature]
    elif temperature is not None:
        raise ValueError(
            f"temperature={temperature!r} was asked for but the results have no 'temperature' "
            "column: pass temperature=None for results of one (unrecorded) temperature"
        )
    tree_nodes = _present(results["nodes"])
    if nodes not in tree_nodes:
        raise ValueError(
            f"no results at {nodes} nodes"
            + (f" (baseline {baseline!r})" if baseline else "")
            + f": the tree sizes present are {tree_nodes}"
        )
    block = results[results["nodes"] == nodes]
    if model_seed is not None:
        if model_seed not in (seeds := _present(block["seed"])):
            raise ValueError(
                f"no results for training seed {model_seed} at {nodes} nodes: the seeds present are {seeds}"
            )
        block = block[block["seed"] == model_seed]
    where = f"at {nodes} nodes" + (f", temperature {temperature}" if temperature is not None else "")

    twice = block[block.duplicated(["method", "seed", "question_id"], keep=False)]
    if len(twice):
        row = twice.iloc[0]
        raise ValueError(
            f"method {row.method!r} (seed {row.seed}) has question {row.question_id} more than once "
            f"{where} ({len(twice)} duplicated rows): each question must count once"
        )
    _check_paper_columns(block, where)
    labels = block.groupby("question_id")["column"].unique()
    mixed = labels[labels.map(len) > 1]
    if len(mixed):
        raise ValueError(
            f"question {mixed.index[0]} is labelled with several columns "
            f"{sorted(mixed.iloc[0].tolist())} {where}: a question belongs to one column"
        )
    tau = block["tau"].astype(float)
    wrong = block[(tau < 1) | np.isinf(tau)]
    if len(wrong):
        row = wrong.iloc[0]
        raise ValueError(
            f"method {row.method!r} (seed {row.seed}) has tau {row.tau} on question {row.question_id} "
            f"{where}: tau is a mean of (accepted + 1), always finite and >= 1"
        )
    scored = tau.notna().groupby([block["method"], block["seed"]], sort=False).any()
    if not scored.all():
        method, seed = scored.index[~scored.to_numpy()][0]
        raise ValueError(
            f"method {method!r} (seed {seed}) has no finite tau {where}: none of its questions had a round"
        )
    return block[tau.notna()]


def _check_paper_columns(block: pd.DataFrame, where: str) -> None:
    """Refuse questions labelled with none of the paper's SpecBench columns (another label, or none):
    AVG would count them while no column of the table shows them."""
    outside = block[~block["column"].isin(list(COLUMNS))]
    if len(outside):
        named = "; ".join(
            f"column {label!r}: questions {_present(rows['question_id'])}"
            for label, rows in outside.groupby("column", dropna=False, sort=False)
        )
        raise ValueError(
            f"{named} ({where}): not one of the paper's SpecBench columns {list(COLUMNS)}, so they would "
            "count in AVG but in no column (label each question with `corpus.column_of` of its "
            "SpecBench category)"
        )


def _interval(means) -> tuple[float, float]:
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


def tau_table(
    results: pd.DataFrame,
    nodes: int,
    *,
    seed: int = 0,
    n_boot: int = 1000,
    model_seed: int = 0,
    temperature: float | None = None,
):
    """One block of Table 2/3: rows methods (training seed `model_seed`), columns the SpecBench
    columns and AVG; each cell tau with its 95% bootstrap interval (NaN when the cell holds fewer
    than MIN_QUESTIONS questions). Returns (tau, low, high) frames; tau.attrs["questions"] is
    {method: {column: number of questions}}, which `formatted` reads."""
    _check_n_boot(n_boot)
    block = _block(results, nodes, model_seed=model_seed, temperature=temperature)
    methods = list(dict.fromkeys(block["method"]))
    cols = _columns(block) + [AVG]
    tau, low, high = (pd.DataFrame(index=methods, columns=cols, dtype=float) for _ in range(3))
    questions = {}
    for method in methods:
        frame = block[block.method == method].sort_values("question_id").reset_index(drop=True)
        values, draws = frame["tau"].to_numpy(float), _resample(frame, n_boot, seed)
        questions[method] = {}
        for col in cols:
            in_col = np.ones(len(frame), bool) if col == AVG else (frame["column"] == col).to_numpy()
            questions[method][col] = n = int(in_col.sum())
            if n:
                tau.loc[method, col] = values[in_col].mean()
            if n >= MIN_QUESTIONS:
                low.loc[method, col], high.loc[method, col] = _interval(values[draws[col]].mean(axis=1))
    tau.attrs["questions"] = questions
    return tau, low, high


def formatted(tau, low, high, *, bold_best: bool = True, markdown: bool = True, best=None) -> pd.DataFrame:
    """Cells as '2.51 [2.40, 2.62]', the best tau of each column in bold (Markdown); a cell without
    an interval as '2.51 [no interval: 1 question]' (the count from tau.attrs["questions"]), one
    without questions as 'n/a [no questions]'. `best`, a boolean frame like `tau`, names the cells
    to bold instead of the column maxima of `tau` (tau read back at the precision it was printed
    at can tie where the run did not)."""
    counts = tau.attrs.get("questions", {})
    out = pd.DataFrame(index=tau.index, columns=tau.columns, dtype=object)
    for col in tau.columns:
        top = tau[col].max()
        for method in tau.index:
            t, lo, hi = tau.loc[method, col], low.loc[method, col], high.loc[method, col]
            n = counts.get(method, {}).get(col)
            if np.isnan(t):
                text = "n/a [no questions]"
            elif np.isnan(lo) or np.isnan(hi):
                many = f"fewer than {MIN_QUESTIONS} questions" if n is None else f"{n} question{'s' * (n != 1)}"
                text = f"{t:.2f} [no interval: {many}]"
            else:
                text = f"{t:.2f} [{lo:.2f}, {hi:.2f}]"
            is_best = bool(best.loc[method, col]) if best is not None else t == top
            out.loc[method, col] = f"**{text}**" if bold_best and markdown and is_best else text
    return out


def paired_differences(
    results: pd.DataFrame,
    nodes: int,
    baseline: str = "EAGLE3",
    *,
    seed: int = 0,
    n_boot: int = 1000,
    model_seed: int = 0,
    temperature: float | None = None,
) -> pd.DataFrame:
    """Each method's AVG tau minus the baseline's on the questions those two share (`questions`),
    with a 95% paired bootstrap interval (both methods resampled with the same question indices,
    stratified by column) and the share of resamples where the method is ahead; both NaN below
    MIN_QUESTIONS shared questions. Each method's row depends only on it and the baseline."""
    _check_n_boot(n_boot)
    block = _block(results, nodes, model_seed=model_seed, temperature=temperature, baseline=baseline)
    if baseline not in set(block["method"]):
        raise ValueError(f"baseline {baseline!r} has no results at {nodes} nodes")
    base = block.loc[block.method == baseline, ["question_id", "column", "tau"]]
    rows = []
    for method in [m for m in dict.fromkeys(block["method"]) if m != baseline]:
        mine = block.loc[block.method == method, ["question_id", "tau"]]
        pair = base.merge(mine, on="question_id", suffixes=("_base", "")).sort_values("question_id")
        pair = pair.reset_index(drop=True)
        diff = (pair["tau"] - pair["tau_base"]).to_numpy(float)
        row = {
            "method": method,
            "nodes": nodes,
            "diff": diff.mean() if len(diff) else np.nan,
            "low": np.nan,
            "high": np.nan,
            "P(ahead)": np.nan,
            "questions": len(diff),
        }
        if len(diff) >= MIN_QUESTIONS:
            means = diff[_resample(pair, n_boot, seed)[AVG]].mean(axis=1)
            row["low"], row["high"] = _interval(means)
            row["P(ahead)"] = float((means > 0).mean())
        rows.append(row)
    return pd.DataFrame(rows, columns=["method", "nodes", "diff", "low", "high", "P(ahead)", "questions"])


def seed_spread(results: pd.DataFrame, nodes: int, *, temperature: float | None = None) -> pd.DataFrame:
    """AVG tau per (method, training seed) for the methods trained with several seeds, with the
    range (max - min) across seeds: what a reseed alone moves."""
    block = _block(results, nodes, temperature=temperature)
    per_seed = block.groupby(["method", "seed"])["tau"].mean().unstack("seed")
    per_seed = per_seed[per_seed.notna().sum(axis=1) > 1]
    per_seed.columns = [f"seed {s}" for s in per_seed.columns]
    per_seed["range"] = per_seed.max(axis=1) - per_seed.min(axis=1)
    return per_seed


def rank_correlation(x, y) -> float:
    """Spearman's rank correlation (average ranks on ties) of paired values: x and y of one length,
    at least 3 (two values only ever rank +-1)."""
    if len(x) != len(y):
        raise ValueError(f"rank_correlation pairs x with y value by value: got {len(x)} x values and {len(y)} y values")
    if len(x) < 3:
        raise ValueError(f"rank_correlation got {len(x)} values: a rank correlation needs at least 3")
    x, y = pd.Series(np.asarray(x, float)).rank(), pd.Series(np.asarray(y, float)).rank()
    return float(np.corrcoef(x, y)[0, 1])


def summary(
    results: pd.DataFrame,
    methods: pd.DataFrame,
    nodes: int,
    *,
    seed: int = 0,
    n_boot: int = 1000,
    baseline: str = "EAGLE3",
    model_seed: int = 0,
    temperature: float | None = None,
) -> pd.DataFrame:
    """Per method at one tree size: AVG tau with its interval, the set entropy of its layers and the
    paired difference from `baseline`: the rows the scatter and the findings quote."""
    tau, low, high = tau_table(results, nodes, seed=seed, n_boot=n_boot, model_seed=model_seed, temperature=temperature)
    diffs = paired_differences(
        results, nodes, baseline, seed=seed, n_boot=n_boot, model_seed=model_seed, temperature=temperature
    ).set_index("method")
    entropy = dict(zip(methods.method, methods.entropy))
    rows = []
    for method in tau.index:
        d = diffs.loc[method] if method in diffs.index else None
        rows.append(
            {
                "method": method,
                "nodes": nodes,
                "tau": tau.loc[method, AVG],
                "low": low.loc[method, AVG],
                "high": high.loc[method, AVG],
                "entropy": entropy.get(method, np.nan),
                f"minus {baseline}": 0.0 if d is None else d["diff"],
                "diff low": 0.0 if d is None else d["low"],
                "diff high": 0.0 if d is None else d["high"],
            }
        )
    return pd.DataFrame(rows)
