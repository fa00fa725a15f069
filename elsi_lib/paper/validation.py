"""Does a selection criterion predict the trained draft? Rank correlations of set scores (set entropy,
Eq. 4-6; the task probe's held-out error and lm_head agreement, `selection.probe`) with what the
drafts trained on those sets measured: held-out step-1 accuracy and AVG tau.

Input: per-question rows of trained drafts (`question_rows`: the tables' per-question tau with each
draft's layer set, its set entropy and its held-out step accuracy; notebooks 06 and 07 write them as
`*_question_tau_*.csv`), and the probe's score of each set (`probe_scores`). Output
(`rank_correlations`): per protocol and curve point, Spearman's rank correlation of each criterion,
signed so that a positive rho means "the criterion ranks the better drafts higher", with each
outcome across the drafts of the first training seed, and two percentile bootstrap intervals: over
the sets (drafts resampled with replacement), and, for tau, over the SpecBench questions and the
sets together. Each draft's tau is the mean over the questions it has a round on, as in the tables'
AVG (`draft.tables`)."""
from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.stats import rankdata

from ..selection.probe import ProbeStats, agreement, set_errors

# criterion column: +1 if a higher value predicts a better draft, -1 if a lower one does
CRITERIA = {"set entropy": 1, "probe error": -1, "probe agreement": 1}
OUTCOMES = ("step 1", "tau")
KEY = ["protocol", "prompts", "id", "seed"]  # one trained draft (at one point of its learning curve)


def layers_text(layers) -> str:
    """A layer set as the CSVs hold it: "1 14 26"."""
    return " ".join(str(int(l)) for l in layers)


def parse_layers(text) -> tuple:
    return tuple(int(l) for l in str(text).split())


def question_rows(results: pd.DataFrame, accuracy: pd.DataFrame, methods: pd.DataFrame, *, protocol: str,
                  prompts: int | None = None) -> pd.DataFrame:
    """The per-question tau rows of `results` (`experiment.Run.results`, or `Run.curve` with its own
    prompts and step columns) with each draft's scored layers (`methods.layers`: EAGLE2's normed last
    state is scored as the last layer), set entropy and held-out step accuracy (`accuracy`, joined on
    method and seed unless the rows carry it), under `protocol` and the training prompts `prompts`."""
    steps = [c for c in accuracy.columns if c.startswith("step ")]
    rows = results.copy()
    if not all(c in rows for c in steps):
        rows = rows.drop(columns=[c for c in steps if c in rows]).merge(accuracy[["method", "seed", *steps]],
                                                                        on=["method", "seed"], how="left")
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
    keep = ["prompts", "id", "method", "seed", "layers", "set entropy", *steps, "temperature", "nodes",
            "question_id", "column", "tau"]
    return rows.assign(protocol=protocol)[["protocol", *keep]]


def probe_scores(layer_sets, probe: ProbeStats, ridge: float, lm_head=None) -> pd.DataFrame:
    """One row per distinct set: layers (text), the probe's held-out relative error and, with the
    target's `lm_head` (V, d), its held-out lm_head agreement."""
    sets = sorted({parse_layers(s) if isinstance(s, str) else tuple(s) for s in layer_sets})
    frame = pd.DataFrame({"layers": [layers_text(s) for s in sets], "probe error": set_errors(probe, sets, ridge)})
    if lm_head is not None:
        frame["probe agreement"] = [agreement(probe, s, ridge, lm_head) for s in sets]
    return frame


def draft_table(rows: pd.DataFrame, *, temperature: float, nodes: int) -> pd.DataFrame:
    """One row per trained draft of the first training seed at each (protocol, prompts): its layers,
    set entropy, step accuracy and AVG tau at `temperature` and `nodes`."""
    part = rows[(rows.temperature == temperature) & (rows.nodes == nodes)]
    if part.empty:
        raise ValueError(f"no rows at temperature {temperature} and {nodes} nodes")
    first = part.groupby(["protocol", "prompts"]).seed.transform("min")
    part = part[part.seed == first]
    steps = [c for c in part.columns if c.startswith("step ")]
    return part.groupby(KEY, sort=False).agg(method=("method", "first"), layers=("layers", "first"),
                                             **{c: (c, "first") for c in ["set entropy", *steps]},
                                             tau=("tau", "mean"), questions=("tau", "count")).reset_index()


def spearman_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman's rho of each row of x (B, S) with the same row of y (average ranks on ties); NaN for a
    row where either is constant."""
    rx, ry = rankdata(x, axis=1), rankdata(y, axis=1)
    rx, ry = rx - rx.mean(axis=1, keepdims=True), ry - ry.mean(axis=1, keepdims=True)
    den = np.sqrt((rx ** 2).sum(axis=1) * (ry ** 2).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (rx * ry).sum(axis=1) / den, np.nan)


def _interval(draws) -> tuple[float, float]:
    draws = draws[np.isfinite(draws)]
    return tuple(float(v) for v in np.percentile(draws, [2.5, 97.5])) if len(draws) else (np.nan, np.nan)


def rank_correlations(rows: pd.DataFrame, scores: pd.DataFrame | None = None, *, temperature: float, nodes: int,
                      n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
    """Per (protocol, prompts), criterion and outcome: the drafts, Spearman's signed rho (module
    docstring) and its 95% bootstrap intervals over sets and, for tau, over questions and sets.
    `scores`: `probe_scores` rows (layers, probe error[, probe agreement]) joined on the layers; set
    entropy comes with the rows."""
    drafts = draft_table(rows, temperature=temperature, nodes=nodes)
    if scores is not None:
        drafts = drafts.merge(scores, on="layers", how="left")
    criteria = [c for c in CRITERIA if c in drafts and drafts[c].notna().all()]
    rng = np.random.default_rng(seed)
    out = []
    for (protocol, prompts), part in drafts.groupby(["protocol", "prompts"], sort=False):
        S = len(part)
        if S < 3:
            raise ValueError(f"{protocol} at {prompts} prompts has {S} drafts: a rank correlation needs at least 3")
        ids = part["id"].tolist()
        per_question = (rows[(rows.protocol == protocol) & (rows.prompts == prompts) & (rows.temperature == temperature)
                             & (rows.nodes == nodes) & rows["id"].isin(ids) & (rows.seed.isin(part.seed))]
                        .pivot_table(index="question_id", columns="id", values="tau", aggfunc="first")[ids].to_numpy())
        pick = rng.integers(0, S, size=(n_boot, S))  # (B, S) resampled drafts
        questions = rng.integers(0, len(per_question), size=(n_boot, len(per_question)))  # (B, Q)
        taus = np.stack([np.nanmean(per_question[q], axis=0) for q in questions])  # (B, S)
        for criterion in criteria:
            score = CRITERIA[criterion] * part[criterion].to_numpy(float)
            for outcome in OUTCOMES:
                value = part[outcome].to_numpy(float)
                rho = float(spearman_rows(score[None], value[None])[0])
                over_sets = _interval(spearman_rows(score[pick], value[pick]))
                both = (_interval(spearman_rows(score[pick], np.take_along_axis(taus, pick, axis=1)))
                        if outcome == "tau" else (np.nan, np.nan))
                out.append({"protocol": protocol, "prompts": int(prompts), "temperature": temperature, "nodes": nodes,
                            "criterion": criterion, "outcome": outcome, "drafts": S, "rho": rho,
                            "low (sets)": over_sets[0], "high (sets)": over_sets[1],
                            "low (questions and sets)": both[0], "high (questions and sets)": both[1]})
    return pd.DataFrame(out)
