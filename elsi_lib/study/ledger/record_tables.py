"""The study's tables from the records present (`draft_records.read_records`), each saying how many drafts it
rests on: per protocol, ELSI m = 3 and the probe's set against EAGLE3 (paired, 95% intervals) beside
the reseed spread where reseeds exist (`findings`); and the criteria out of sample, pooled over the
protocols with a permutation test stratified by protocol (`pooled_criteria`), one protocol of each pair
of numeric twins (the same sets trained in bf16 and in float32 are not two samples of a criterion).

The pooled statistic is the drafts-weighted mean of each protocol's Spearman rho (signed so that a
positive rho means the criterion ranks the better drafts higher); its p-value shuffles the outcome
within each protocol, never across (two protocols' drafts differ by more than their sets). Curve points
are left out: they are the same sets, trained further.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd

from .protocols import PROTOCOLS
from ..experiments.rank_stats import check_n_perm, spearman_rows
from .draft_records import question_frame, read_records
from ..experiments.tables import paired_differences, seed_spread
from ..experiments.criteria_vs_drafts import BASELINE, CRITERIA, OUTCOMES, draft_table
from ...draft.pooled_checks import default_for

NODES = 60
COMPARED = ("ELSI m=3", "probe m=3")
# the drafts whose sets were ranked after the probe's settings (rank 64, ridge by its own held-out
# error) were fixed on Table 2's small protocol: every protocol with records
OUT_OF_SAMPLE = tuple(PROTOCOLS)


def final_rows(records: list[dict], *, twins: bool = False) -> pd.DataFrame:
    """Per-question rows of the records at each unit's own (largest) prompt count: no curve points;
    `twins`: records of two numeric twins that agree may mix (`question_frame`)."""
    return question_frame([{**r, "curve": []} for r in records], twins=twins)


# two units of one seed whose methods chose the same layers train the same draft (ELSI and ELSI-C at
# m = 2 and 3 on Qwen), with the same numbers: one draft is (layers, seed, held-out step-1 accuracy)
SAME_DRAFT = ["layers", "seed", "step 1"]


def distinct_drafts(records: list[dict]) -> int:
    """How many different drafts `records` hold (SAME_DRAFT)."""
    return len({(str(r["layers"]), r["unit"]["seed"], r["step accuracy"]["step 1"]) for r in records})


def reseed_range(block: pd.DataFrame) -> float:
    """What a reseed alone moves in `block` (one temperature): the largest AVG tau range across seeds at
    NODES nodes, once two or more methods have two or more seeds (EAGLE3 and ELSI m = 3), else NaN."""
    spread = seed_spread(block, NODES)
    return float(spread["range"].max()) if len(spread) >= 2 else np.nan


def findings(name: str, *, records: list[dict] | None = None, n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
    """For protocol `name` (or the joined twins `name` whose `records` are given, `twins.joined_tables`):
    each of COMPARED against EAGLE3 at NODES nodes and T = 0, 1, at each training seed both have (paired
    over the questions both have rounds on: a reseeded method against the reseeded EAGLE3), the distinct
    drafts the table rests on, the family and the drafts' training prompts (what `elsi select` reads to
    show a family's best-trained evidence), and the reseed range of AVG tau where both EAGLE3 and ELSI
    m = 3 have two or more seeds (else NaN: no noise floor yet). Each row is one training run against
    another and its interval holds the questions' variance only (its "interval" column says so); the
    comparisons at the seed level are `seed_stats.difference`'s (`decision_model` writes them)."""
    joined = records is not None
    records = records if joined else read_records(name)
    if not records:
        return pd.DataFrame()
    rows = final_rows(records, twins=joined)
    n_drafts = distinct_drafts(records)
    (family,) = {r["unit"]["family"] for r in records}  # twins are one family's
    out = []
    for T in sorted(rows.temperature.unique()):
        block = rows[rows.temperature == T]
        floor = reseed_range(block)
        for model_seed in sorted(block.loc[block.method == BASELINE, "seed"].unique()):
            paired = paired_differences(block, NODES, n_boot=n_boot, seed=seed, model_seed=model_seed)
            for r in paired[paired.method.isin(COMPARED)].itertuples():
                out.append(
                    {
                        "protocol": name,
                        "family": family,
                        "prompts": int(block.loc[block.method == r.method, "prompts"].max()),
                        "temperature": float(T),
                        "nodes": NODES,
                        "seed": int(model_seed),
                        "method": r.method,
                        "diff": r.diff,
                        "low": r.low,
                        "high": r.high,
                        "questions": r.questions,
                        "drafts": n_drafts,
                        "reseed range": floor,
                        "interval": "the questions' only: one seed against EAGLE3's same seed",
                    }
                )
    return pd.DataFrame(out)


def drafts(names=OUT_OF_SAMPLE, *, temperature: float = 0.0, joined: dict | None = None) -> pd.DataFrame:
    """One row per draft of the first seed of every protocol in `names` with records: its criteria
    (set entropy, probe error, probe agreement) and outcomes (held-out step 1, tau minus EAGLE3's).
    `joined`: {name: records} of twins that agree (`twins.joined_tables`), each one table in place of
    its two protocols."""
    joined = joined or {}
    inside = {r["unit"]["protocol"] for records in joined.values() for r in records}
    tables = [(name, read_records(name), False) for name in names if name not in inside]
    parts, left_out = [], []
    for name, records, twins in [*tables, *((name, records, True) for name, records in joined.items())]:
        if not records:
            continue
        rows = final_rows(records, twins=twins).assign(protocol=name)
        if BASELINE not in set(rows.method) or rows.id.nunique() < 2:  # no outcome to measure: named, not dropped
            why = "no EAGLE3 draft: no tau minus EAGLE3's" if BASELINE not in set(rows.method) else "EAGLE3's alone"
            left_out.append(f"{name} ({rows.id.nunique()} draft{'s' * (rows.id.nunique() > 1)}, {why})")
            continue
        table = draft_table(rows, temperature=temperature, nodes=NODES)
        # one draft for the criteria (SAME_DRAFT), or a set two methods chose would count twice
        table = table.drop_duplicates(SAME_DRAFT)
        probe = rows.drop_duplicates("id").set_index("id")[["probe error", "probe agreement"]]
        parts.append(table.join(probe, on="id"))
    out = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    out.attrs["left out"] = left_out  # protocols with records but no draft to pool, and why
    return out


def one_per_twins(groups: list[pd.DataFrame]) -> list[pd.DataFrame]:
    """Of each pair of numeric twins (`Protocol.twins`: the same family's sets on the same data, bf16 and
    float32), the protocol with more drafts (the first listed on a tie). The twins' sets and criteria
    are the same, so pooling both would count each set twice and shrink the p-value without new evidence;
    a protocol not in PROTOCOLS is its own group."""
    best: dict = {}  # twins' key -> index of the group kept
    for i, g in enumerate(groups):
        name = g.protocol.iloc[0]
        key = PROTOCOLS[name].twins if name in PROTOCOLS else name
        if key not in best or len(g) > len(groups[best[key]]):
            best[key] = i
    return [groups[i] for i in sorted(best.values())]


def _two_sided_p(draws: np.ndarray, observed: float) -> float:
    """Permutation p-value of `observed` among `draws` (+1 both sides); NaN for a NaN observation."""
    if not np.isfinite(observed):
        return np.nan
    return float((1 + np.sum(np.abs(draws) >= abs(observed) - 1e-12)) / (len(draws) + 1))


def _shuffles(v: np.ndarray, n_perm: int, rng) -> tuple[np.ndarray, bool]:
    """(every permutation of v, True) where there are at most n_perm of them, else (n_perm seeded
    shuffles, False): (draws, len(v))."""
    if math.factorial(len(v)) <= n_perm:
        return np.array(list(itertools.permutations(v)), float), True
    return np.stack([rng.permutation(v) for _ in range(n_perm)]), False


def _exact_p(draws: np.ndarray, observed: float) -> float:
    """The exact two-sided p-value over an enumerated null: the share whose |rho| reaches the observed."""
    return float(np.mean(np.abs(draws) >= abs(observed) - 1e-12)) if np.isfinite(observed) else np.nan


def _check_drafts(table: pd.DataFrame) -> None:
    """The pooled test's table: its columns present, every draft with a protocol, an id, a seed and a layer
    set; a draft listed twice (under its own id again, or under another id with the same set and seed,
    however the set is written: one set trained once per seed) would count twice in its protocol's rho:
    refused, naming it."""
    needed = ["protocol", "id", "seed", "layers", *CRITERIA, *OUTCOMES]
    missing = [c for c in needed if c not in table.columns]
    if missing:
        raise ValueError(f"pooled criteria: the drafts' table lacks the column(s) {missing}")
    for column in ("protocol", "id", "seed", "layers"):
        if table[column].isna().any():
            i = table.index[table[column].isna()][0]
            raise ValueError(f"pooled criteria: row {i} has no {column}")
    for column in [*CRITERIA, *OUTCOMES]:
        if not pd.api.types.is_numeric_dtype(table[column]):
            bad = pd.to_numeric(table[column], errors="coerce").isna() & table[column].notna()
            i = table.index[bad][0] if bad.any() else table.index[0]
            raise ValueError(f"pooled criteria: row {i}, {column} = {table[column].loc[i]!r} is not a number")
        infinite = np.isinf(table[column].to_numpy(float))
        if infinite.any():  # an infinite tau or criterion would rank first without being measured
            i = table.index[infinite][0]
            raise ValueError(f"pooled criteria: row {i}, {column} = {table[column].loc[i]!r} is not finite")

    def layer_set(value) -> tuple:
        try:
            return tuple(sorted({int(x) for x in str(value).replace(",", " ").split()}))
        except ValueError:
            raise ValueError(f"pooled criteria: layers {value!r} are not layer ids") from None

    # EAGLE2 reads the last layer after the final norm: its "layers" name that layer, but not its feature
    sets = [("after the final norm",) if i == "eagle2" else layer_set(v) for i, v in zip(table["id"], table["layers"])]
    keyed = table.assign(_set=sets)
    for key, what in ((["protocol", "id", "seed"], None), (["protocol", "_set", "seed"], "set")):
        repeated = keyed.duplicated(key, keep=False)
        if repeated.any():
            rows = keyed[repeated]
            r = rows.iloc[0]
            same = rows[(rows.protocol == r.protocol) & (rows._set == r._set) & (rows.seed == r.seed)]
            again = (
                "is listed twice"
                if what is None
                else f"and {sorted(set(same.id) - {r.id})} are one draft (layers {list(r._set)}, seed {r.seed})"
            )
            raise ValueError(f"pooled criteria: draft {r.id} of {r.protocol} {again}: one draft is one row")
    for criterion in CRITERIA:  # a criterion scores the set on its protocol's capture: every seed's draft the same
        spread = keyed[keyed["id"] != "eagle2"].groupby(["protocol", "_set"])[criterion].agg(lambda v: v.nunique())
        if (spread > 1).any():
            protocol, layers = spread.index[spread.to_numpy() > 1][0]
            values = sorted(
                float(v) for v in keyed[(keyed.protocol == protocol) & (keyed._set == layers)][criterion].unique()
            )
            raise ValueError(
                f"pooled criteria: {protocol}'s drafts of layers {list(layers)} give {criterion} {values}: one "
                "set has one value on its protocol's capture"
            )


def pooled_criteria(table: pd.DataFrame, *, n_perm: int = 10000, seed: int = 0) -> pd.DataFrame:
    """Per criterion and outcome: each protocol's rho with its own permutation p-value, and the pooled,
    drafts-weighted rho over the protocols with 3 or more drafts, one of each pair of twins
    (`one_per_twins`), with its stratified permutation p-value. A protocol whose criterion or outcome
    is constant has no rank to test: it is left out of the observed rho and of the null alike, and named
    in "left out". Where the stratified shuffles number at most n_perm they are all enumerated and the
    p-value is exact ("p exact" yes); else n_perm seeded shuffles (+1 both sides); "permutations" says how
    many draws the null had, "per protocol drafts" each protocol's count. A draft listed twice
    is refused. Every protocol left out is named in "left out" with why: fewer than 3 drafts, a draft
    without the criterion or the outcome, or a constant one; a criterion and outcome with no protocol
    left is not a row, and attrs["not tested"] says why."""
    _check_drafts(table)
    check_n_perm(n_perm)
    rng = np.random.default_rng(seed)
    by_protocol = [g for _, g in table.groupby("protocol", sort=False)]
    groups = [g for g in by_protocol if len(g) >= 3]
    few = [
        f"{g.protocol.iloc[0]} ({len(g)} draft{'s' * (len(g) > 1)}, fewer than 3)" for g in by_protocol if len(g) < 3
    ] + list(table.attrs.get("left out", []))  # protocols `drafts` had nothing to pool of
    out, reasons = [], []
    for criterion, sign in CRITERIA.items():
        for outcome in OUTCOMES:
            complete = [g for g in groups if g[criterion].notna().all() and g[outcome].notna().all()]
            usable = one_per_twins(complete)
            kept = {g.protocol.iloc[0] for g in usable}
            twins_kept = {PROTOCOLS[p].twins for p in kept if p in PROTOCOLS}
            missing = [
                f"{g.protocol.iloc[0]} (a draft without {criterion if g[criterion].isna().any() else outcome})"
                for g in groups
                if not any(g is c for c in complete)
                and not (g.protocol.iloc[0] in PROTOCOLS and PROTOCOLS[g.protocol.iloc[0]].twins in twins_kept)
            ]
            kept_names = {g.protocol.iloc[0] for g in usable}
            twins = [
                f"{g.protocol.iloc[0]} (its numeric twin {next(k for k in kept_names if PROTOCOLS.get(k) and PROTOCOLS[k].twins == PROTOCOLS[g.protocol.iloc[0]].twins)} has more drafts)"
                for g in complete
                if g.protocol.iloc[0] not in kept_names and g.protocol.iloc[0] in PROTOCOLS
            ]
            constant = [g for g in usable if g[criterion].nunique() < 2 or g[outcome].nunique() < 2]
            usable = [g for g in usable if not any(g is c for c in constant)]
            left_out = few + missing + twins + [f"{g.protocol.iloc[0]} (constant)" for g in constant]
            if not usable:
                reasons.append(f"{criterion} / {outcome}: " + ("; ".join(left_out) or "no protocol"))
                continue
            scores = [sign * g[criterion].to_numpy(float) for g in usable]
            values = [g[outcome].to_numpy(float) for g in usable]
            sizes = np.array([len(v) for v in values], float)
            rhos = np.array([spearman_rows(s[None], v[None])[0] for s, v in zip(scores, values)])
            pooled = float(np.sum(sizes * rhos) / sizes.sum())
            total = math.prod(math.factorial(len(v)) for v in values)
            exact = total <= n_perm
            each, parts = [], []
            for s, v, rho in zip(scores, values, rhos):
                shuffled, enumerated = _shuffles(v, n_perm, rng)  # (draws, n)
                mine = spearman_rows(np.broadcast_to(s, shuffled.shape), shuffled)
                each.append(_exact_p(mine, rho) if enumerated else _two_sided_p(mine, rho))
                parts.append(mine)
            if exact:  # every combination of the protocols' permutations
                grid = np.meshgrid(*parts, indexing="ij")
                draws = sum(n * g.ravel() for n, g in zip(sizes, grid)) / sizes.sum()
                p = _exact_p(draws, pooled)
            else:  # the protocols' shuffles drawn together, n_perm of them
                draws = sum(
                    n * (m if len(m) == n_perm else m[rng.integers(0, len(m), n_perm)]) for n, m in zip(sizes, parts)
                )
                p = _two_sided_p(draws / sizes.sum(), pooled)
            out.append(
                {
                    "criterion": criterion,
                    "outcome": outcome,
                    "drafts": int(sizes.sum()),
                    "protocols": " ".join(g.protocol.iloc[0] for g in usable),
                    "per protocol drafts": " ".join(str(len(v)) for v in values),
                    "per protocol rho": " ".join(f"{r:+.2f}" for r in rhos),
                    "per protocol p": " ".join(f"{q:.3f}" for q in each),
                    "pooled rho": pooled,
                    "p (stratified permutation)": p,
                    "p exact": "yes" if exact else "no",
                    "permutations": total if exact else n_perm,  # the null's draws: all orderings, or the shuffles
                    "left out": "; ".join(left_out),
                }
            )
    table_out = pd.DataFrame(out)
    table_out.attrs["not tested"] = reasons  # each (criterion, outcome) with no protocol to test, and why
    return table_out


def verdict(pooled: pd.DataFrame) -> str:
    """Which method `elsi select` recommends by default: the rule the command checks the evidence file
    against (`draft.pooled_checks.default_for`: "probe" if the probe's error predicts the drafts' tau out of
    sample, else "elsi", the paper's method)."""
    return default_for(pooled.to_dict("records"))
