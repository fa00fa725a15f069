"""The answer as a decision: keep the engine's default set unless the criterion's best set is
predicted to beat it, by how much, and how sure.

A linear model maps a criterion's difference between two sets (the best set's score minus the default
set's: the probe's held-out error, or set entropy, Eq. 4-6) to the difference in tau (accepted tokens
per target forward, SpecBench, 60 nodes) between drafts trained on them:

    dtau = a_family + b * dscore + e          (a family the ledger holds: its own intercept)
    dtau = a + b * dscore + e                 (any other model: the pooled fit)

fitted by least squares on the ledger's drafts (`study.ledger.evidence_file` writes the fits into the evidence
file). A prediction's 95% interval is t(df) * s * sqrt(1 + x0' (X'X)^-1 x0), widened by the factor that
made the intervals cover 90% or more of the drafts out of sample (leave one protocol out).
Change the set only where every temperature's interval lies above zero and the family's own drafts of
that set do not trail the default; otherwise keep the default, and say why.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy import stats

LEVEL = 0.95
COVERAGE_TARGET = 0.90


@dataclass(frozen=True)
class Fit:
    """A least-squares fit: columns (the intercepts' families or "pooled", then "slope"), beta, the
    unscaled covariance (X'X)^-1, the residual variance s2 on df degrees of freedom, and `widen`."""

    columns: tuple
    beta: tuple
    xtx_inv: tuple  # rows of (X'X)^-1
    s2: float
    df: int
    widen: float = 1.0

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in ("columns", "beta", "xtx_inv", "s2", "df", "widen")}


def fit(groups: list[str], x: np.ndarray, y: np.ndarray, *, pooled: bool) -> Fit | None:
    """Least squares of y on one intercept ("pooled") or one per group (its family), and a slope on x;
    None where the points leave no residual degree of freedom or x does not vary (within the groups)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    names = ["pooled"] if pooled else sorted(set(groups))
    if not len(y) or np.ptp(x) == 0 or not np.isfinite(np.r_[x, y]).all():
        return None
    intercepts = [np.ones(len(x))] if pooled else [np.array([g == name for g in groups], float) for name in names]
    X = np.column_stack([*intercepts, x])  # (points, intercepts + 1)
    df = len(y) - X.shape[1]
    if df < 1 or np.linalg.matrix_rank(X) < X.shape[1]:  # x constant within each family: no slope to fit
        return None
    xtx_inv = np.linalg.inv(X.T @ X)
    beta = xtx_inv @ X.T @ y
    resid = y - X @ beta
    return Fit(
        tuple([*names, "slope"]),
        tuple(map(float, beta)),
        tuple(tuple(map(float, row)) for row in xtx_inv),
        float(resid @ resid / df),
        int(df),
    )


def predict(model: Fit, group: str | None, dscore: float, *, anchored: bool = True) -> tuple[float, float]:
    """(predicted dtau, half-width of its widened 95% interval) at `dscore`, with `group`'s intercept
    (None or "pooled" for a pooled fit). `anchored`: the default is the set the fit's differences are
    against (EAGLE3's); else both sets are drafts the fit predicts, so the intercept cancels,
    dtau = b * dscore, and each draft brings its own residual: variance s2 (2 + x0' (X'X)^-1 x0)."""
    x0 = np.array([float(name == (group or "pooled")) for name in model.columns[:-1]] + [dscore])
    if model.columns[0] != "pooled" and x0[:-1].sum() != 1:
        raise ValueError(f"{group!r} is not one of the fit's families {model.columns[:-1]}")
    if not anchored:
        x0[:-1] = 0.0  # (best's intercept + b * its score) minus (the default's intercept + b * its score)
    se = np.sqrt(model.s2 * ((1 if anchored else 2) + x0 @ np.array(model.xtx_inv) @ x0))
    return float(x0 @ np.array(model.beta)), float(stats.t.ppf(0.5 + LEVEL / 2, model.df) * se * model.widen)


def widening(ratios) -> float:
    """The smallest factor >= 1 by which intervals whose |error| / half-width are `ratios` cover
    COVERAGE_TARGET of them."""
    r = np.sort(np.asarray(ratios, float))
    if not len(r):
        return np.nan
    k = int(np.ceil(COVERAGE_TARGET * len(r))) - 1
    return float(max(1.0, r[k]))


@dataclass
class Decision:
    """What `elsi select` decides: change the set, keep the default, or nothing to decide."""

    verdict: str  # "change", "keep the default" or "no verdict"
    reason: str
    default: tuple
    best: tuple
    predicted: dict = field(default_factory=dict)  # {temperature: (dtau, low, high)}
    model: str = ""  # "family smollm2-135m" or "pooled"
    measured: list = field(default_factory=list)  # the family's own drafts of the best set against the default

    def as_dict(self) -> dict:
        return {
            "verdict": self.verdict,
            "reason": self.reason,
            "default_set": list(self.default),
            "best_set": list(self.best),
            "predicted_tau_difference": {
                f"{t:g}": {"diff": d, "low": lo, "high": hi} for t, (d, lo, hi) in sorted(self.predicted.items())
            },
            "model": self.model,
            "measured": self.measured,
        }


def decide(
    fits: dict,
    family: str | None,
    dscore: float,
    best: tuple,
    default: tuple,
    measured: list | None = None,
    *,
    anchored: bool = True,
    sizes: set | None = None,
) -> Decision:
    """The verdict from `fits` ({temperature: {"family": Fit | None, "pooled": Fit | None, "unjudged": why}},
    unjudged: why the fits were withheld, not testable out of sample): the family's
    fit where `family` is one of its families, else the pooled one; `measured`: the family's own
    seed-level differences of drafts of `best` against the default's ({temperature, diff, low, high, ...});
    `anchored`: the default is the set the fits' differences are against (`predict`); `sizes`: the set sizes
    of the drafts the fits were made on (a set of another size is outside what they can predict)."""
    measured = list(measured or [])
    if tuple(best) == tuple(default):
        return Decision("keep the default", "the criterion's best set is the default set", default, best)
    if not fits:
        return Decision("no verdict", "the evidence holds no fit of the criterion's model", default, best)
    if not np.isfinite(dscore):
        reason = f"the criterion's difference between the two sets is {dscore}: nothing to predict from"
        return Decision("no verdict", reason, default, best)
    if sizes is not None and len(best) not in sizes:
        fitted = ", ".join(map(str, sorted(sizes))) or "no"
        return Decision(
            "no verdict",
            f"the criterion's model was fitted on drafts of {fitted}-layer sets; it cannot predict a "
            f"{len(best)}-layer set",
            default,
            best,
        )
    predicted, models = {}, {}
    for t, pair in sorted(fits.items()):
        own = pair.get("family")
        use = own if own is not None and family in own.columns[:-1] else pair.get("pooled")
        if use is None:
            reason = (
                f"the criterion's model cannot be judged out of sample ({pair['unjudged']}), and an untested model "
                "makes no prediction"
                if pair.get("unjudged")
                else "the ledger is too thin to fit the criterion's model (fewer drafts than its terms, or one "
                "criterion value): no prediction can be made"
            )
            return Decision("no verdict", reason, default, best)
        models[float(t)] = f"family {family}" if use is own else "pooled"
        d, half = predict(use, family if use is own else None, dscore, anchored=anchored)
        predicted[float(t)] = (d, d - half, d + half)
    # one fit at every temperature, or which at each (a family's fit may lack a temperature the pooled has)
    model = (
        next(iter(models.values()))
        if len(set(models.values())) == 1
        else ", ".join(f"{m} at T = {t:g}" for t, m in models.items())
    )
    behind = [m for m in measured if m["high"] < 0]
    if behind:
        where = ", ".join(
            f"T = {m['temperature']:g} {m['diff']:+.3f} [{m['low']:+.3f}, {m['high']:+.3f}]" for m in behind
        )
        reason = f"this family's own drafts of that set trail the default ({where})"
        return Decision("keep the default", reason, default, best, predicted, model, measured)
    if all(lo > 0 for _, lo, _ in predicted.values()):
        reason = "predicted above the default at every temperature, the whole interval"
        return Decision("change", reason, default, best, predicted, model, measured)
    below = [t for t, (_, _, hi) in predicted.items() if hi < 0]
    reason = (
        f"predicted below the default at T = {', '.join(f'{t:g}' for t in below)}"
        if below
        else "the predicted difference's 95% interval holds zero at T = "
        + ", ".join(f"{t:g}" for t, (_, lo, _) in sorted(predicted.items()) if lo <= 0)
    )
    return Decision("keep the default", reason, default, best, predicted, model, measured)
