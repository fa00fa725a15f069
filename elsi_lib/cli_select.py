"""What `elsi select` prints beside its answer: the decision (the engine's default set against the
criterion's, `draft.decision`), how often bootstrap resamples of the prompts choose the
same set (`--stability`), speculators' recipe as two commands whose ids agree, and what an engine's
restriction (`--engine`) cost. Called by `cli.cmd_select` only.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .cli_args import UsageError
from .draft import evidence as ev
from .hidden import probe_capture
from .selection import stability as resampling
from .selection.conventions import SPECULATORS_RECIPE, eagle3_layers
from .selection.entropy import set_entropy
from .selection.methods import METHODS, default_of


class _Chosen(NamedTuple):
    """A set and its score, as `bootstrap_choices` reads a method's answer (`.layers`, `.entropy`)."""

    layers: tuple
    entropy: float


def stability(args, stats, layers: tuple, n_prompts: int, restricted=None) -> dict:
    """How often `layers` wins over --stability bootstrap resamples of the prompts that filled a block
    (the others add nothing to resample): refused when fewer than 2 did. Each resample chooses among the
    sets --engine's restriction (`restricted`) allows, as the answer did."""

    if stats.sample_blocks is not None and np.count_nonzero(stats.sample_blocks) < 2:
        raise UsageError(
            f"--stability: only {np.count_nonzero(stats.sample_blocks)} of the {n_prompts} prompts "
            f"kept a full block of --block {args.block} tokens, and a bootstrap needs 2 or more: pass "
            "more or longer prompts, or a smaller --block"
        )
    choose = METHODS[args.method].choose  # a capture method (the parser refuses --stability for the others)
    assert choose is not None, f"--stability needs a method that chooses from the capture, not {args.method}"

    where = {} if restricted is None else {"allowed": restricted.allowed, "required": restricted.required}

    def method(Z, m):
        return _Chosen(*choose(Z, m, args.k_beam, args.k_expand, where))

    choices = resampling.bootstrap_choices(stats, args.m, n_boot=args.stability, seed=args.seed, method=method)
    wins = choices[choices.layers == layers]["share"].sum()
    return {
        "resamples": args.stability,
        "share_choosing_this_set": float(wins),
        "choices": [{"layers": list(l), "share": float(s)} for l, s in zip(choices.layers, choices.share)],
    }


def recipe_line(fragment: dict) -> str:

    if "recipe_unavailable" in fragment:
        return f"speculators' recipe: {fragment['recipe_unavailable']} (--engine speculators restricts the search to sets it can train)"
    return (
        f"speculators' recipe: {SPECULATORS_RECIPE[0]} MODEL {' '.join(fragment['launch_args'])} -- ..., "
        f"then {SPECULATORS_RECIPE[1]} ... {' '.join(fragment['train_args'])}"
    )


def recipe_commands(fragment: dict) -> list[str]:
    """speculators' recipe as two commands whose ids agree (launch_vllm.py appends N; train.py takes the ids without it)."""

    return [
        f"python {SPECULATORS_RECIPE[0]} MODEL {' '.join(fragment['launch_args'])}",
        f"python {SPECULATORS_RECIPE[1]} ... {' '.join(fragment['train_args'])}",
    ]


def restriction_lines(info: dict) -> list[str]:
    if not info["rules"]:
        return []
    free, mine = info["unrestricted"], info["restricted"]
    lines = [f"restricted to the sets {info['engine']} can feed a draft: " + "; ".join(info["rules"])]
    if free["layers"] == mine["layers"]:
        return lines + ["  the unrestricted choice is the same set: the restriction costs nothing"]
    return lines + [
        f"  unrestricted, the choice would be {tuple(free['layers'])} ({info['score']} {free['score']:.4f} "
        f"against {mine['score']:.4f}: the restriction costs {info['costs']:.4f})"
    ]


def decision_for(args, job, Z, layers: tuple, evidence: dict | None) -> dict:
    """The answer as a decision (`draft.decision`): the engine's default set against the criterion's
    best feasible set, the predicted difference in tau with its interval, and the verdict."""

    try:
        default, rule = default_of(args.engine, job.n_layers)
    except ValueError as err:
        return {"verdict": "no verdict", "reason": f"{err}: nothing to compare the set with", "best_set": list(layers)}
    head = {"default_set": list(default), "default_is": rule, "best_set": list(layers)}
    head["engine"] = args.engine or "any (no --engine)"
    if evidence is None:
        return {**head, "verdict": "no verdict", "reason": "the evidence file is unavailable"}
    if ev.criterion_of(args.method) is None:
        same = tuple(layers) == default
        why = "the set is the default" if same else f"--method {args.method}'s set is fixed: no criterion predicts it"
        return {**head, "verdict": "keep the default" if same else "no verdict", "reason": why}
    if METHODS[args.method].reads == "probe":
        model, tokenizer = job.loaded
        chosen = job.probe
        if chosen is None or job.max_length is None:
            raise RuntimeError("the probe's choice is missing: _selection sets it before the decision")
        score = chosen.error
        base = probe_capture.cached_probe_error(
            model, tokenizer, job.conversations, default, chosen.ridge, max_length=job.max_length
        )
    else:
        score, base = set_entropy(Z, layers), set_entropy(Z, default)
    try:  # the set the fits' differences are against, on this model
        baseline: tuple | None = tuple(eagle3_layers(job.n_layers))
    except ValueError:
        baseline = None
    made = ev.decision(args.method, args.model, score - base, tuple(layers), default, evidence, baseline)
    family = ev.family_of(args.model)
    return {
        **head,
        **made.as_dict(),
        "criterion": ev.criterion_of(args.method),
        "criterion_difference": score - base,
        "criterion_best": score,
        "criterion_default": base,
        "family": family,
        "pooled_because": None if made.model != "pooled" else f"{args.model} is not a family the ledger holds",
        "rests_on": ev.rests_on(evidence, args.method),
        # kept: the default; changed, or nothing to decide with (every "no verdict"): the criterion's set
        "recommended_layers": list(default) if made.verdict == "keep the default" else list(layers),
    }


def decision_lines(d: dict) -> list[str]:
    """The decision in a few lines: the verdict and why, the prediction, what it rests on."""
    default, best = tuple(d.get("default_set", ())), tuple(d["best_set"])
    if d["verdict"] == "change":
        head = f"decision: change to {best}: it is predicted to beat the default {default}"
    elif d["verdict"] == "keep the default":
        head = f"decision: keep the default {default} ({d['default_is']}, what {d['engine']} uses with no layers given)"
    else:
        head = (
            f"decision: none, so the answer is the criterion's set {best}, which the ledger neither backs nor refutes"
        )
    lines = [f"{head}; why: {d['reason']}"]
    if d.get("predicted_tau_difference"):
        cells = "; ".join(
            f"T = {t}: {c['diff']:+.3f} [{c['low']:+.3f}, {c['high']:+.3f}]"
            for t, c in d["predicted_tau_difference"].items()
        )
        model = (
            f"the pooled fit ({d['pooled_because']})"
            if d["pooled_because"]
            else f"{d['model'].split()[-1]}'s fit"
            if " at T = " not in d["model"]
            else f"the fits ({d['model']})"
        )
        lines.append(
            f"  {d['criterion']}: {best} {d['criterion_best']:.4f}, the default {d['criterion_default']:.4f}; predicted "
            f"tau of {best} minus the default's at 60 nodes, by {model}: {cells}"
        )
        lines += [f"  {part}" for part in d["rests_on"]]
    return lines
