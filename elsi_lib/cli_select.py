"""What `elsi select` prints beside its answer: how often bootstrap resamples of the prompts choose the
same set (`--stability`), speculators' recipe as two commands whose ids agree, and what an engine's
restriction (`--engine`) cost. Called by `cli.cmd_select` only.
"""

from __future__ import annotations

from .cli_args import UsageError


def stability(args, stats, layers: tuple, n_prompts: int) -> dict:
    """How often `layers` wins over --stability bootstrap resamples of the prompts that filled a block
    (the others add nothing to resample): refused when fewer than 2 did."""
    import numpy as np

    from .selection.stability import bootstrap_choices
    from .selection import select

    if stats.sample_blocks is not None and np.count_nonzero(stats.sample_blocks) < 2:
        raise UsageError(
            f"--stability: only {np.count_nonzero(stats.sample_blocks)} of the {n_prompts} prompts "
            f"kept a full block of --block {args.block} tokens, and a bootstrap needs 2 or more: pass "
            "more or longer prompts, or a smaller --block"
        )
    methods = {
        "elsi": lambda Z, m: select.elsi(Z, m, args.k_beam, args.k_expand),
        "elsi-c": lambda Z, m: select.elsi_c(Z, m, args.k_beam, args.k_expand),
        "exhaustive": select.exhaustive,
    }
    choices = bootstrap_choices(stats, args.m, n_boot=args.stability, seed=args.seed, method=methods[args.method])
    wins = choices[choices.layers == layers]["share"].sum()
    return {
        "resamples": args.stability,
        "share_choosing_this_set": float(wins),
        "choices": [{"layers": list(l), "share": float(s)} for l, s in zip(choices.layers, choices.share)],
    }


def recipe_line(fragment: dict) -> str:
    from .selection.conventions import SPECULATORS_RECIPE

    if "recipe_unavailable" in fragment:
        return f"speculators' recipe: {fragment['recipe_unavailable']} (--engine speculators restricts the search to sets it can train)"
    return (
        f"speculators' recipe: {SPECULATORS_RECIPE[0]} MODEL {' '.join(fragment['launch_args'])} -- ..., "
        f"then {SPECULATORS_RECIPE[1]} ... {' '.join(fragment['train_args'])}"
    )


def recipe_commands(fragment: dict) -> list[str]:
    """speculators' recipe as two commands whose ids agree (launch_vllm.py appends N; train.py takes the ids without it)."""
    from .selection.conventions import SPECULATORS_RECIPE

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
