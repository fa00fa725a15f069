"""What the project's own trained drafts showed for a selection criterion, read from the committed
results (`common.results`): the paired difference in tau (accepted tokens per target forward) between
the criterion's draft and EAGLE3's on the same SpecBench questions, with its 95% interval, per
family and protocol, and, where the ledger's records trained the criterion's draft on more prompts than
the tables did, that draft's too. `elsi select` prints it beside its answer; where no draft of the
criterion was trained on the model, it says so and shows the bundled families instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ..common.results import PROTOCOLS, result_path, results_dir, slug

NODES = 60  # the larger tree of the tables


@dataclass(frozen=True)
class Evidence:
    """One criterion's drafts against EAGLE3's on one family and protocol, at NODES nodes."""

    family: str
    protocol: str
    about: str
    method: str  # the tables' label, e.g. "ELSI m=3"
    drafts: int  # trained drafts the table rests on
    prompts: int | None
    differences: dict  # {temperature: (diff, low, high)}

    def verdict(self) -> str:
        lows, highs = [d[1] for d in self.differences.values()], [d[2] for d in self.differences.values()]
        if all(low > 0 for low in lows):
            return "for it: above EAGLE3 at every temperature"
        if all(high < 0 for high in highs):
            return "against it: below EAGLE3 at every temperature"
        if any(high < 0 for high in highs):
            return "against it at some temperature, no difference shown at another"
        if any(low > 0 for low in lows):
            return "for it at some temperature, no difference shown at another"
        return "no difference from EAGLE3 shown"

    def line(self) -> str:
        cells = "; ".join(
            f"T = {t:g}: {d:+.3f} [{lo:+.3f}, {hi:+.3f}]" for t, (d, lo, hi) in sorted(self.differences.items())
        )
        prompts = f"{self.prompts:,} training prompts, " if self.prompts else ""
        return (
            f"{self.method} drafts on {self.family} ({self.protocol}: {prompts}{self.drafts} drafts): tau minus "
            f"EAGLE3's at {NODES} nodes {cells}: {self.verdict()}"
        )


def method_label(method: str, m: int) -> str | None:
    """The tables' label of a criterion's draft (None: a criterion the study trains no draft of)."""
    return {"elsi": f"ELSI m={m}", "elsi-c": f"ELSI-C m={m}", "probe": f"probe m={m}", "eagle2": "EAGLE2"}.get(method)


def _differences(rows: pd.DataFrame) -> dict:
    """{temperature: (diff, low, high)} of paired-difference rows, one row a temperature."""
    return {float(r.temperature): (float(r["diff"]), float(r.low), float(r.high)) for _, r in rows.iterrows()}


def _drafts(table: str, family: str) -> tuple[int, int | None]:
    """(trained drafts, training prompts) of a protocol: its per-question rows at their largest prompt
    count where they exist, else the rows of its accepted-token table at seed 0."""
    rows = result_path(table, "question_tau", family)
    if rows.is_file():
        frame = pd.read_csv(rows, usecols=["prompts", "method", "seed"])
        last = frame[frame.prompts == frame.prompts.max()]
        return int(last[["method", "seed"]].drop_duplicates().shape[0]), int(frame.prompts.max())
    tau = pd.read_csv(result_path(table, "accepted_tokens", family), usecols=["method"])
    return int(tau.method.nunique()), None


def evidence(family: str, method: str, m: int) -> list[Evidence]:
    """Every protocol's evidence on `family` (a registry name) for `method` with m layers, strongest first."""
    label = method_label(method, m)
    found = []
    for table, about in PROTOCOLS.get(slug(family), []):
        path = result_path(table, "paired", family)
        if label is None or not path.is_file():
            continue
        paired = pd.read_csv(path)
        rows = paired[(paired.method == label) & (paired.nodes == NODES)]
        if rows.empty:
            continue
        drafts, prompts = _drafts(table, family)
        found.append(
            Evidence(
                family,
                table,
                about,
                label,
                drafts,
                prompts,
                _differences(rows),
            )
        )
    return found


def evidence_lines(model: str, method: str, m: int, chosen_differs: bool = False) -> list[str]:
    """What `elsi select` prints beside its answer: the model's own evidence (its strongest protocol), or,
    where there is none, a plain statement that it is absent and the bundled families' evidence."""
    if method == "eagle3":
        return ["evidence: EAGLE3's fixed set is the baseline every trained draft here is compared with"]
    own = evidence(model, method, m)
    note = (
        " (the drafts read the criterion's unrestricted choice, not this restricted set)"
        if chosen_differs and own
        else ""
    )
    if own:
        more = more_data(own[0])
        more_lines = [f"  with more training data ({more.about}): {more.line()}", *reseed_lines(more)] if more else []
        return [f"evidence: {own[0].line()}{note}", *reseed_lines(own[0]), *more_lines]
    label = method_label(method, m) or f"--method {method}"
    lines = [f"evidence: none for {model}: no {label} draft was trained on it in this project's results"]
    for family in PROTOCOLS:
        others = evidence(family, method, m)
        lines.append(f"  on {family}: {others[0].line()}" if others else f"  on {family}: no {label} draft trained")
    return lines


LEDGER = "ledger_findings"  # each seed's draft against EAGLE3's same seed, per protocol (notebook 10)


def reseed_lines(found: Evidence) -> list[str]:
    """The same criterion's drafts against EAGLE3's at every training seed, where the records of the
    protocol or its float32 twin hold more than one (`ledger_findings.csv`), with what a reseed alone
    moves: a lead at one seed that another seed does not repeat is not a finding. [] without reseeds."""
    path = results_dir() / f"{LEDGER}.csv"
    if not path.is_file():
        return []
    rows = pd.read_csv(path)
    if "seed" not in rows:
        return []
    lines = []
    for protocol in (found.protocol, f"{found.protocol}_f32"):
        mine = rows[(rows.protocol == protocol) & (rows.method == found.method) & (rows.nodes == NODES)]
        if mine.seed.nunique() < 2:
            continue
        seeds = "; ".join(
            f"seed {seed}: "
            + ", ".join(
                f"T = {r.temperature:g} {r['diff']:+.3f} [{r.low:+.3f}, {r.high:+.3f}]" for _, r in g.iterrows()
            )
            for seed, g in mine.sort_values(["seed", "temperature"]).groupby("seed")
        )
        ranges = mine.groupby("temperature")["reseed range"].first().dropna()  # NaN: too few reseeded methods
        spread = (
            "a reseed alone moves AVG tau up to " + ", ".join(f"{v:.3f} at T = {t:g}" for t, v in ranges.items())
            if len(ranges)
            else "no reseed range yet (it needs two methods with two seeds each)"
        )
        lines.append(f"  across training seeds ({protocol}): {seeds}; {spread}")
    return lines


def more_data(found: Evidence) -> Evidence | None:
    """The same criterion's draft against EAGLE3's at its first training seed in the ledger protocol of
    `found`'s family whose drafts trained on the most prompts (`ledger_findings.csv`), where that is more
    than `found`'s (the paper-scale tables rest on fewer prompts than the ledger's strong protocols);
    None without one."""
    path = results_dir() / f"{LEDGER}.csv"
    if not path.is_file() or found.prompts is None:
        return None
    rows = pd.read_csv(path)
    if not {"family", "prompts"} <= set(rows.columns):
        return None
    mine = rows[(rows.family == found.family) & (rows.method == found.method) & (rows.nodes == NODES)]
    mine = mine[mine.prompts > found.prompts]
    if mine.empty:
        return None
    best = mine[mine.prompts == mine.prompts.max()]
    best = best[(best.protocol == best.protocol.min()) & (best.seed == best.seed.min())]
    r = best.iloc[0]
    return Evidence(
        found.family,
        str(r.protocol),
        f"the ledger's records, seed {int(r.seed)}",
        found.method,
        int(r.drafts),
        int(r.prompts),
        _differences(best),
    )


POOLED = "criteria_pooled"  # the criteria out of sample, pooled over the protocols (notebook 10)


def probe_predicts(pooled: pd.DataFrame, alpha: float = 0.05) -> bool:
    """Whether the probe's error predicts the drafts' tau out of sample: its pooled rho against tau
    minus EAGLE3's is positive at p < alpha (`criteria_pooled`'s columns). `elsi select` recommends
    the probe's set by default only then."""
    row = pooled[(pooled.criterion == "probe error") & (pooled.outcome == "tau minus EAGLE3")]
    return bool(len(row)) and row["pooled rho"].iloc[0] > 0 and row["p (stratified permutation)"].iloc[0] < alpha


def criterion_line() -> str | None:
    """Whether a criterion has been shown to predict which draft is best: the probe's error against
    tau minus EAGLE3's, pooled out of sample over the protocols with records (`criteria_pooled.csv`),
    and what `elsi select` recommends by default because of it; None without that file."""
    path = results_dir() / f"{POOLED}.csv"
    if not path.is_file():
        return None
    pooled = pd.read_csv(path)
    row = pooled[(pooled.criterion == "probe error") & (pooled.outcome == "tau minus EAGLE3")]
    if row.empty:
        return None
    r = row.iloc[0]
    rho, p = float(r["pooled rho"]), float(r["p (stratified permutation)"])
    held = probe_predicts(pooled)
    return (
        f"criteria: the probe's error against tau minus EAGLE3's, pooled out of sample over {int(r.drafts)} drafts "
        f"({r.protocols}): rho {rho:+.2f}, p = {p:.3f}; "
        + (
            "it predicts the drafts, so the probe's set is the default"
            if held
            else "no criterion has been shown to predict which draft is best, so the default stays ELSI (the paper's method)"
        )
    )
