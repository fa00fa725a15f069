"""What the evidence file's pooled criteria test (`draft.evidence`) must hold, checked field by field
even behind a valid checksum: one row per criterion and outcome the study tests, over protocols that hold
records; per-protocol counts that sum to its drafts and rho whose drafts-weighted mean is the pooled one;
each p one a permutation test of those drafts can give (`check_p`); and the default method the pooled
row gives (`default_for`). Any malformation is an `EvidenceUnavailable` naming the row and the field.
"""

from __future__ import annotations

import math

import numpy as np

from ..selection.methods import METHODS
from .evidence_checks import CRITERIA, EvidenceUnavailable, _number, _text

POOLED_CRITERIA = (*CRITERIA, "probe agreement")  # what the pooled criteria test ranks drafts by
OUTCOMES = ("step 1", "tau minus EAGLE3")  # ... and against
ALPHA = 0.05  # the pooled test's level: the probe is the default method when its rho > 0 at p < ALPHA


def default_for(pooled: list[dict]) -> str:
    """The method `elsi select` uses by default, from the pooled criteria rows: "probe" when the probe's
    error predicts tau minus EAGLE3's out of sample (pooled rho > 0 at p < ALPHA), else "elsi"."""
    rows = [r for r in pooled if r.get("criterion") == "probe error" and r.get("outcome") == "tau minus EAGLE3"]
    return "probe" if rows and rows[0]["pooled rho"] > 0 and rows[0]["p (stratified permutation)"] < ALPHA else "elsi"


def check_pooled_rows(data: dict, path) -> None:
    """The file's pooled criteria rows (`check_pooled`) and its default method, the one they give."""
    pairs = set()
    for i, r in enumerate(data["pooled_criteria"]):
        where = f"{path}, pooled criteria row {i}"
        if not isinstance(r, dict):
            raise EvidenceUnavailable(f"{where}: not a row")
        _text(where, "criterion", r.get("criterion"))
        _text(where, "outcome", r.get("outcome"))
        _text(where, "protocols", r.get("protocols"))
        _number(where, "pooled rho", r.get("pooled rho"), -1, 1)
        _number(where, "p (stratified permutation)", r.get("p (stratified permutation)"), 1e-300, 1)
        _number(where, "drafts", r.get("drafts"), 3, integer=True)
        protocols = r["protocols"].split()
        for field in ("per protocol rho", "per protocol p"):
            if r.get(field) is not None and len(str(r[field]).split()) != len(protocols):
                raise EvidenceUnavailable(
                    f"{where}: {field} {r[field]!r} has not one value for each of its protocols {protocols}"
                )
        if r["drafts"] < 3 * len(protocols):
            raise EvidenceUnavailable(
                f"{where}: {r['drafts']} drafts over {len(protocols)} protocols, fewer than the 3 a rank test needs in each"
            )
        pair = (r["criterion"], r["outcome"])
        if pair in pairs:
            raise EvidenceUnavailable(f"{where}: a pooled criteria row listed twice ({pair})")
        pairs.add(pair)
        check_pooled(where, r, data["provenance"]["records"])
    lacking = sorted({(c, o) for c in POOLED_CRITERIA for o in OUTCOMES} - pairs)
    if lacking:  # a missing row reads as a criterion never tested: the default method would fall back unsaid
        raise EvidenceUnavailable(f"{path}: pooled criteria rows for {lacking} missing: one per criterion and outcome")
    chooses = [name for name, m in METHODS.items() if m.criterion]
    if data["default_method"] not in chooses:
        raise EvidenceUnavailable(f"{path}: default_method {data['default_method']!r} is not one of {chooses}")
    if data["default_method"] != default_for(data["pooled_criteria"]):
        raise EvidenceUnavailable(
            f"{path}: default_method {data['default_method']!r}, but its pooled criteria row gives "
            f"{default_for(data['pooled_criteria'])!r} (the probe is the default when its rho > 0 at p < {ALPHA})"
        )


def check_pooled(where: str, r: dict, records: dict) -> None:
    """A pooled criteria row's criterion and outcome are ones the study tests; its protocols hold records
    (twins joined by "+"), as many as its drafts at least; its per-protocol counts sum to its drafts, their
    values parse and lie in range, the pooled rho is their drafts-weighted mean; and each p is one a
    permutation test of those drafts can give (`check_p`)."""
    if r["criterion"] not in POOLED_CRITERIA or r["outcome"] not in OUTCOMES:
        raise EvidenceUnavailable(
            f"{where}: ({r['criterion']!r}, {r['outcome']!r}) is not a criterion {POOLED_CRITERIA} against an "
            f"outcome {OUTCOMES}"
        )
    held = {name.split("/")[0] for name in records}
    names = [part for protocol in r["protocols"].split() for part in protocol.split("+")]
    unknown = [n for n in names if n not in held]
    if unknown:
        raise EvidenceUnavailable(f"{where}: protocols {unknown} hold no record this file rests on")
    recorded = sum(1 for name in records if name.split("/")[0] in names)
    if r["drafts"] > recorded:
        raise EvidenceUnavailable(f"{where}: {r['drafts']} drafts, but its protocols hold {recorded} records")
    values = {}
    for field, lo, hi in (
        ("per protocol drafts", 3.0, math.inf),
        ("per protocol rho", -1.0, 1.0),
        ("per protocol p", 0.0, 1.0),
    ):
        try:
            values[field] = [float(v) for v in str(r.get(field)).split()]
        except ValueError:
            values[field] = [math.nan]
        if len(values[field]) != len(r["protocols"].split()) or not all(lo <= v <= hi for v in values[field]):
            raise EvidenceUnavailable(
                f"{where}: {field} {r.get(field)!r}: one value in [{lo:g}, {hi:g}] for each of its protocols expected"
            )
    sizes, rhos = np.array(values["per protocol drafts"]), np.array(values["per protocol rho"])
    if not all(n.is_integer() for n in sizes) or sizes.sum() != r["drafts"]:
        raise EvidenceUnavailable(
            f"{where}: per protocol drafts {r['per protocol drafts']!r} are not counts summing to its {r['drafts']} drafts"
        )
    weighted = float(sizes @ rhos / sizes.sum())  # each protocol's rho is written to 2 decimals
    if abs(weighted - r["pooled rho"]) > 0.005 + 1e-9:
        raise EvidenceUnavailable(
            f"{where}: pooled rho {r['pooled rho']:+.3f}, but its protocols' rho {r['per protocol rho']!r} weighted "
            f"by their drafts {r['per protocol drafts']!r} give {weighted:+.3f}"
        )
    _number(where, "permutations", r.get("permutations"), 1, integer=True)
    orderings = math.prod(math.factorial(int(n)) for n in sizes)
    exact, draws = r.get("p exact"), r["permutations"]
    if (
        exact not in ("yes", "no")
        or (exact == "yes") != (orderings <= draws)
        or (exact == "yes" and draws != orderings)
    ):
        raise EvidenceUnavailable(
            f"{where}: p exact {exact!r} with {draws} permutations, but its drafts {r['per protocol drafts']!r} "
            f"have {orderings:.4g} orderings (exact is every ordering, when they number no more than the shuffles)"
        )
    weights = sizes / sizes.sum()
    pooled_p = r["p (stratified permutation)"]
    check_p(
        where,
        "p (stratified permutation)",
        pooled_p,
        r["pooled rho"],
        1e-6,
        float(np.sum(weights**2 / (sizes - 1))),
        exact == "yes",
        draws,
    )
    for n, rho, p, name in zip(sizes, rhos, values["per protocol p"], r["protocols"].split()):
        enumerated = math.factorial(int(n)) <= draws
        shuffles = math.factorial(int(n)) if enumerated else draws
        check_p(where, f"per protocol p of {name}", p, rho, 0.005, 1 / (n - 1), enumerated, shuffles, 0.0005)


def check_p(
    where: str,
    field: str,
    p: float,
    rho: float,
    rho_rounding: float,
    variance: float,
    exact: bool,
    draws: int,
    rounding: float = 1e-6,
) -> None:
    """A permutation p-value of a (drafts-weighted mean of) Spearman rho is one its null can give. Under
    shuffling, rho has mean 0 and variance `variance` (1/(n-1) for n drafts, whatever the ties) and
    |rho| <= 1, so P(|rho| >= r) lies between the Paley-Zygmund bound (V - r^2)^2 / V (for r^2 < V) and
    Chebyshev's V / r^2; and no p is smaller than one draw in `draws`. A Monte Carlo p (not `exact`) is
    allowed six binomial standard deviations of its `draws` shuffles, and its +1, beside those bounds."""
    r_high, r_low = abs(rho) + rho_rounding, max(abs(rho) - rho_rounding, 0.0)
    low = (variance - r_high**2) ** 2 / variance if r_high**2 < variance else 0.0
    high = min(1.0, variance / r_low**2) if r_low > 0 else 1.0
    floor = 1 / draws if exact else 1 / (draws + 1)

    def slack(bound: float) -> float:  # a Monte Carlo p's binomial spread about a bound
        return rounding if exact else rounding + 6 * math.sqrt(bound / draws) + 1 / (draws + 1)

    if p < floor - rounding:
        raise EvidenceUnavailable(f"{where}: {field} {p:g} below {floor:.3g}, the least {draws} permutations can give")
    if not low - slack(low) <= p <= high + slack(high):
        raise EvidenceUnavailable(
            f"{where}: {field} {p:g} with rho {rho:+.3f}: a permutation test gives a p between {low:.3g} and "
            f"{high:.3g} there (null variance {variance:.3g}; {'exact' if exact else f'{draws} shuffles'})"
        )
