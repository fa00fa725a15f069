"""The `elsi` command (also `python -m elsi_lib`): which layers should my EAGLE-3 draft see?

    elsi select  --model MODEL [...]   capture (or reuse the cached capture), select, print the set
    elsi capture --model MODEL [...]   capture only (fills the cache `select` and `report` read)
    elsi report  --model MODEL [...]   a depth profile: per-layer entropy, top-row energy, CKA boundaries

stdout carries the answer only (a table, JSON, or an engine's fragment), so scripts can pipe it;
progress bars and notes (a cache rebuilt, replies regenerated) go to stderr. Every check the arguments,
data files and model config allow runs before the capture (and before `--out` is written). Exit
status: 0 on success, 2 for bad arguments, 1 when a run fails; user errors print one line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .cli_args import MEASURED, READ_BY, UsageError, _check, build_parser
from .cli_select import decision_for, decision_lines, recipe_commands, recipe_line, restriction_lines, stability
from .common.identity import conversations_hash, model_fingerprint
from .common.results import slug
from .common.version import __version__
from .draft import evidence as ev
from .hidden import calibration, probe_capture, replies
from .hidden.capture import capture_variants
from .hidden.forward import decoder_layers
from .hidden.settings import CaptureSettings
from .inputs.chat import TemplateRefusal, blank, opening, render, reply_starts
from .inputs.models import load_model
from .inputs.weights import ModelNotFoundError
from .inputs.prompts import PROMPT_SETS, calibration_prompts, load_prompts, sample
from .selection import select
from .selection.cka import compartments
from .selection.conventions import EAGLE3_MIN_LAYERS, convert_layer_ids, eagle3_layers, engine_fragment, engine_reading
from .selection.entropy import set_entropy
from .selection.feasible import check_size, feasible, restriction
from .selection.methods import METHODS

if TYPE_CHECKING:
    from .selection.probe import ProbeChoice


def _prompts(args) -> list:
    """The sampled conversations, read and checked before any model is loaded: --prompts beyond
    what --data holds is refused, as the calibration mix refuses it; so is a file with no usable
    conversation or one that ends with a system turn (nobody would reply to it)."""

    if not args.data:
        try:
            return calibration_prompts(args.prompts, seed=args.seed)  # refuses more than the mix holds
        except ValueError as err:
            raise UsageError(f"--prompts {args.prompts}: {err}") from None
    pool = []
    for prompt_set in args.data:
        if prompt_set in PROMPT_SETS and Path(prompt_set).is_file():  # the user's file, or the bundled set?
            raise UsageError(
                f"--data {prompt_set} names both a bundled prompt set and the file {Path(prompt_set).resolve()}: "
                f"pass ./{prompt_set} for the file"
            )
        conversations = load_prompts(prompt_set)
        if not conversations and Path(prompt_set).is_file() and not Path(prompt_set).read_bytes().strip():
            raise UsageError(f"--data {prompt_set}: the file is empty")
        if not conversations:
            raise UsageError(
                f"--data {prompt_set}: no usable conversation (each needs a user turn: ShareGPT "
                "'from': 'human' or 'user')"
            )
        for i, conversation in enumerate(conversations, 1):
            which = f"conversation {i} (the one starting {opening(conversation)!r})"  # numbered after drops
            if conversation[-1]["role"] not in ("user", "assistant"):
                raise UsageError(
                    f"--data {prompt_set}: {which} ends with a {conversation[-1]['role']} turn; "
                    "end it with a user turn (the reply model answers it) or an assistant reply"
                )
            if any(m["role"] == "user" and blank(m["content"]) for m in conversation):
                raise UsageError(f"--data {prompt_set}: {which} has an empty user turn (nothing to reply to)")
            if any(m["role"] == "assistant" and blank(m["content"]) for m in conversation):
                raise UsageError(
                    f"--data {prompt_set}: {which} has an empty assistant turn: the capture reads the replies' "
                    "tokens; drop the turn (the reply model then answers) or give the reply"
                )
        pool += conversations
    unique = list({json.dumps(c, sort_keys=True): c for c in pool}.values())
    if len(unique) < len(pool):  # one conversation counted twice would weigh twice in the capture
        print(f"--data: {len(pool) - len(unique)} repeated conversation(s) counted once", file=sys.stderr)
    pool = unique
    if args.prompts > len(pool):
        raise UsageError(
            f"--prompts {args.prompts}: --data {' '.join(map(str, args.data))} holds only {len(pool)} "
            f"conversations; pass --prompts {len(pool)} or fewer, or more data"
        )
    return sample(pool, args.prompts, seed=args.seed)


class _Job:
    """What a command has read and loaded before its capture: prompts, the model, its shape."""

    def __init__(self, args) -> None:

        self.prompts = _prompts(args)
        self.loaded: tuple[Any, Any] = load_model(args.model)  # (model, tokenizer)
        try:
            self.n_layers = len(decoder_layers(self.loaded[0]))
        except ValueError as e:  # before the replies and the capture
            raise UsageError(f"--model {args.model}: {e}") from None
        self.architecture = (getattr(self.loaded[0].config, "architectures", None) or [type(self.loaded[0]).__name__])[
            0
        ]
        self._replier: tuple[Any, Any] | None = self.loaded if args.reply_model in ("self", args.model) else None
        _check_template(args, self.loaded[1], self.prompts)
        self.conversations: list[list[dict]] | None = None  # set by `_stats`: the conversations captured ...
        self.max_length: int | None = None  # ... and their max_length, the probe's data too
        self.probe: ProbeChoice | None = None  # set by `_selection` with --method probe: the answer's choice

    def replier(self, args) -> tuple[Any, Any]:

        if self._replier is None:
            self._replier = load_model(args.reply_model)
        return self._replier


def _check_template(args, tokenizer, prompts: list) -> None:
    """Before any reply or capture: the model's chat template renders every conversation (a template that
    refuses one, say a second user turn in a row, names it), and where the probe reads the replies, it
    renders a reply after the prompt's generation prompt (a template that opens a thinking block in the
    generation prompt alone does not, and the replies' tokens cannot be found). A prompt is rendered as the
    replies see it (with the generation prompt) and as the capture does (with a reply after it)."""
    replied = [c if c[-1]["role"] == "assistant" else [*c, {"role": "assistant", "content": "Hi."}] for c in prompts]
    for prompt, conversation in zip(prompts, replied):  # with a reply, as captured; a prompt as the replies see it
        try:
            if conversation is not prompt:
                render(tokenizer, prompt, add_generation_prompt=True)
            render(tokenizer, conversation, add_generation_prompt=False)
        except Exception as err:  # a template's own error (jinja's TemplateError, a raise_exception call)
            reason = err.reason if isinstance(err, TemplateRefusal) else f"{type(err).__name__}: {err}"
            raise UsageError(
                f"{'--data' if args.data else 'the calibration mix'}: {args.model}'s chat template refuses the "
                f"conversation starting {opening(conversation)!r}: {reason}"
            ) from None
    if getattr(args, "method", None) != "probe" or not getattr(tokenizer, "chat_template", None):
        return
    first = replied[0]
    try:  # the user's own first conversation (a template may need a system turn, say), with a reply
        reply_starts(tokenizer, [first], 1 << 30)
    except Exception as err:  # ValueError: not a prefix; a template's own error on an assistant turn
        given = "" if "method" in getattr(args, "_given", {}) else " (the default)"
        why = (
            "does not render a reply after the prompt's generation prompt (it adds text there alone, such as an "
            "opening thinking block)"
            if isinstance(err, ValueError)
            else f"refuses the conversation starting {opening(first)!r} with a reply ({type(err).__name__}: {err})"
        )
        raise UsageError(
            f"--method probe{given}: {args.model}'s chat template {why}, so the probe cannot find the replies' "
            "tokens; use --method elsi, which reads every position"
        ) from None


def _stats(args, job: _Job, *, with_probe: bool = False):
    """(the model's LayerStats of the paper's selection, the conversations' description); `with_probe`:
    the probe's statistics of the same conversations from the same forward (`probe_alongside`)."""

    settings = CaptureSettings().replace(rho=args.rho, block=args.block)
    needs = [c for c in job.prompts if c[-1]["role"] == "user"]  # the rest carry their replies (--data)
    replied = iter(
        replies.reply_conversations(
            *job.replier(args),
            needs,
            max_length=settings.max_length,
            batch_size=calibration.REPLY_BATCH,
            shipped=calibration.SHIPPED_REPLIES,  # the bundled model's replies to the calibration mix
        )
        if needs
        else ()
    )
    conversations = [c if c[-1]["role"] == "assistant" else next(replied) for c in job.prompts]
    described: dict[str, Any] = {"data": list(args.data) if args.data else "calibration mix"}
    empty = sum(c[-1]["role"] == "assistant" and blank(c[-1]["content"]) for c in conversations)
    if empty == len(conversations):  # nothing but prompts and the template would be captured
        raise UsageError(
            f"--reply-model {args.reply_model} wrote an empty reply to every one of the {empty} prompts: the capture "
            "reads the replies' tokens; use another reply model, or give replies with --data"
        )
    if empty:
        print(
            f"{empty} of {len(conversations)} replies are empty: those conversations add no reply token",
            file=sys.stderr,
        )
    described.update(
        {
            "prompts": len(conversations),
            "conversations_sha256": conversations_hash(conversations),
            "reply_model": args.reply_model if needs else "none (every conversation carries its reply)",
        }
    )
    job.conversations, job.max_length = conversations, settings.max_length  # the probe's data too
    # the selection the answer reads, alone: the others cost time
    paper = {"entropy": calibration.SELECTIONS["entropy"]}
    model, tokenizer = job.loaded
    probe = (
        probe_capture.probe_alongside(model, tokenizer, conversations, max_length=settings.max_length)
        if with_probe
        else None
    )
    with probe or contextlib.nullcontext() as on_batch:
        captured = capture_variants(model, tokenizer, conversations, paper, settings, on_batch=on_batch)
    stats = captured["entropy"]
    if stats.Z.shape[0] != job.n_layers:
        raise RuntimeError(f"the capture has {stats.Z.shape[0]} layers, the model {job.n_layers}")
    cut = int(stats.counts.get("truncated_samples", 0))
    described["cut_at_max_length"] = cut
    if cut:  # a long prompt leaves its reply, the tokens the capture reads, past the cut
        print(
            f"{cut} of {len(conversations)} conversations are longer than {settings.max_length} tokens: each was "
            "cut there before the capture (a reply past the cut is not read)",
            file=sys.stderr,
        )
    return stats, described


def _fixed_layers(method: str, n_layers: int):

    rule = METHODS[method].fixed
    assert rule is not None, f"--method {method} is not a fixed method"
    return rule(n_layers)


def _check_select(args, job: _Job):
    """The checks the model's layer count and architecture allow, before the capture: --m fits the
    model and the engine's restriction; a fixed method's set is one the engine can feed. Returns the
    sets --engine can feed a draft on this model (`selection.feasible.restriction`), None without --engine."""

    N = job.n_layers
    restricted = restriction(args.engine, N, job.architecture) if args.engine else None
    if args.method in MEASURED:
        if args.m > N:
            given = "" if "m" in getattr(args, "_given", {}) else " (the default)"
            raise UsageError(f"--m {args.m}{given} exceeds the model's {N} layers")
        if restricted is not None:
            try:
                check_size(restricted, args.m)
            except ValueError as err:
                raise UsageError(f"--engine {args.engine} --m {args.m}: {err}") from None
        return restricted
    try:
        layers = _fixed_layers(args.method, N)
    except ValueError as err:
        raise UsageError(f"--method {args.method}: {err}") from None
    problem = feasible(layers, N, args.engine, job.architecture) if args.engine else None
    if problem:
        raise UsageError(f"--engine {args.engine} cannot feed a draft --method {args.method}'s set {layers}: {problem}")
    return restricted


def _selection(Z, args, job=None, restricted=None) -> tuple[tuple, float]:
    """(the set --method chooses, its score: set entropy, or the probe's held-out error), among the
    sets `restricted` (a `feasible.Restriction`) allows when given."""

    N = Z.shape[0]
    if args.m > N and args.method in MEASURED:
        raise UsageError(f"--m {args.m} exceeds the model's {N} layers")
    where = {} if restricted is None else {"allowed": restricted.allowed, "required": restricted.required}
    if METHODS[args.method].reads == "probe":
        model, tokenizer = job.loaded
        choice = probe_capture.cached_probe_choice(
            model, tokenizer, job.conversations, args.m, k_beam=args.k_beam, max_length=job.max_length, **where
        )
        if job.probe is None:  # the answer's choice (asked first), not the comparison's
            job.probe = choice
        return tuple(choice.layers), float(choice.error)
    choose = METHODS[args.method].choose
    if choose is None:  # a fixed method: its set from the layer count
        layers = tuple(_fixed_layers(args.method, N))
        return layers, set_entropy(Z, layers)
    return choose(Z, args.m, args.k_beam, args.k_expand, where)


def _restricted_choice(Z, args, job, layers: tuple, score: float, restricted) -> dict:
    """What --engine's restriction cost: the unrestricted choice and both scores (the probe's held-out
    error is lower-better, set entropy higher-better)."""
    free, free_score = _selection(Z, args, job) if args.method in MEASURED else (layers, score)
    name = "probe held-out relative error" if args.method == "probe" else "set entropy"
    return {
        "engine": args.engine,
        "rules": list(restricted.why),
        "allowed": list(restricted.allowed),
        "required": list(restricted.required),
        "score": name,
        "restricted": {"layers": list(layers), "score": score},
        "unrestricted": {"layers": list(free), "score": free_score},
        "costs": abs(free_score - score),
    }


def cmd_select(args) -> str:

    try:  # read and checked before any capture: an unusable file costs the answer nothing
        evidence, unavailable = ev.current(), None
    except ev.EvidenceUnavailable as err:
        evidence, unavailable = None, str(err)
    job = _Job(args)
    restricted = _check_select(args, job)
    stats, described = _stats(args, job, with_probe=METHODS[args.method].reads == "probe")
    model = job.loaded[0]
    Z, N = stats.Z, stats.Z.shape[0]
    layers, score = _selection(Z, args, job, restricted)
    probe = job.probe  # the probe's choice with --method probe, else None
    fragment = None
    if args.format not in ("text", "json"):
        try:
            fragment = engine_fragment(layers, N, args.format, job.architecture)
        except ValueError as err:
            raise UsageError(f"--format {args.format} cannot express the selected set {layers}: {err}") from None
    eagle3 = eagle3_layers(N) if N >= EAGLE3_MIN_LAYERS else None
    where = {} if restricted is None else {"allowed": restricted.allowed, "required": restricted.required}
    optimum = select.exhaustive(Z, len(layers), **where)  # among the sets the engine can feed, as the answer
    result = {
        "layers": list(layers),
        "entropy": set_entropy(Z, layers),
        "method": args.method,
        "m": len(layers),
        "eagle3": {"layers": list(eagle3), "entropy": set_entropy(Z, eagle3)} if eagle3 else None,
        "exhaustive_optimum": {"layers": list(optimum.layers), "entropy": optimum.entropy},
        "provenance": {
            "model": args.model,
            "weights_sha256": model_fingerprint(model)["weights_sha256"],
            **described,
            "rho": args.rho,
            "block": args.block,
            "seed": args.seed,
            **{  # the searches' settings, where a search ran (the probe's answer shows ELSI's beside it)
                o: getattr(args, o)
                for o in ("k_beam", "k_expand")
                if {args.method, "elsi" if args.method == "probe" else args.method} & set(READ_BY[o])
            },
            "elsi_version": __version__,
            "n_layers": N,
            "convention": "elsi: layer l = output of decoder layer l",
        },
    }
    if args.method == "probe":  # the paper's method beside the default, under the same restriction
        paper = _selection(Z, argparse.Namespace(**{**vars(args), "method": "elsi"}), job, restricted)
        result["elsi"] = {"layers": list(paper[0]), "entropy": paper[1]}
    if restricted is not None:
        result["restriction"] = _restricted_choice(Z, args, job, layers, score, restricted)
    decision = decision_for(args, job, Z, layers, evidence)
    result["decision"] = decision
    recommended = tuple(decision.get("recommended_layers", layers))
    result["recommended_layers"] = list(recommended)  # the decision's set: the criterion's, or the default kept
    result["vllm_layer_ids"] = list(convert_layer_ids(recommended, "elsi", "vllm", N))  # of the set recommended
    if fragment is not None and recommended != tuple(layers):  # an engine's config carries the decision's set
        fragment = engine_fragment(recommended, N, args.format, job.architecture)
    if evidence is None:
        result["evidence"] = [f"evidence: unavailable: {unavailable}"]
    else:
        result["evidence"] = ev.comparison_lines(evidence, args.model, args.method, len(layers), layers)
        result["evidence"] += [line for line in [ev.criterion_line(evidence, args.method)] if line]
    if probe is not None:
        result["probe"] = {"heldout_relative_error": probe.error, "ridge": probe.ridge, "search": probe.search}
    if args.stability:
        result["stability"] = stability(args, stats, layers, described["prompts"], restricted)
    if args.format == "json":
        return json.dumps(result, indent=2)
    if fragment is not None:
        if recommended != tuple(layers):  # the config holds another set than the criterion chose: said, not only in it
            print(
                f"--format {args.format}: the config carries the decision's set {recommended}, not "
                f"{args.method}'s {layers} ({decision.get('verdict', 'keep the default')})",
                file=sys.stderr,
            )
        extra = {"recipe_commands": recipe_commands(fragment)} if "launch_args" in fragment else {}
        return json.dumps(
            {
                **fragment,
                **extra,
                "elsi_provenance": result["provenance"]
                | {
                    "layers_elsi": list(layers),
                    "layers_fragment": list(recommended),  # the decision's set: the criterion's, or the default kept
                    "entropy": result["entropy"],
                    "eagle3_entropy": result["eagle3"]["entropy"] if eagle3 else None,
                    "architecture": job.architecture,
                    "ids_for": engine_reading(args.format, job.architecture),
                    **({"restriction": result["restriction"]} if restricted is not None else {}),
                    **({"stability": result["stability"]} if args.stability else {}),
                    "evidence": result["evidence"],
                    "decision": decision,
                },
            },
            indent=2,
        )
    lines = [
        f"{args.model}: {N} layers, {described['prompts']} conversations, rho {args.rho}, B {args.block}",
        "",
        f"{'set':<28} {'layers (elsi: output of layer l)':<34} entropy",
        f"{args.method + ' m=' + str(len(layers)):<28} {str(layers):<34} {result['entropy']:.4f}",
    ]
    if "elsi" in result:  # the paper's method beside the probe
        row = f"elsi m={len(layers)} (the paper's)"
        lines.append(f"{row:<28} {str(tuple(result['elsi']['layers'])):<34} {result['elsi']['entropy']:.4f}")
    if eagle3:
        lines.append(f"{'EAGLE3 [2, N//2, N-3]':<28} {str(eagle3):<34} {result['eagle3']['entropy']:.4f}")
    lines += [f"{'exhaustive optimum':<28} {str(optimum.layers):<34} {optimum.entropy:.4f}", ""]
    lines += [*decision_lines(decision), ""]
    if restricted is not None:
        lines += restriction_lines(result["restriction"])
    lines += [
        f"the decision's set {recommended} in the engines' ids:",
        f"vLLM / speculators eagle_aux_hidden_state_layer_ids: {list(convert_layer_ids(recommended, 'elsi', 'vllm', N))}",
        recipe_line(engine_fragment(recommended, N, "speculators")),
    ]
    try:
        sglang = engine_fragment(recommended, N, "sglang", job.architecture)["eagle_config"][
            "eagle_aux_hidden_state_layer_ids"
        ]
        lines.append(f"SGLang eagle_aux_hidden_state_layer_ids ({job.architecture}): {sglang}")
    except ValueError as err:
        lines.append(f"SGLang: none: {err} (--engine sglang restricts the search to the sets it can capture)")
    try:
        openvino = engine_fragment(recommended, N, "openvino", job.architecture)["hidden_layers_list"]
        lines.append(f"OpenVINO GenAI hidden_layers_list: {openvino}")
    except ValueError as err:
        lines.append(f"OpenVINO GenAI: none: {err}")
    if probe is not None:
        lines.append(f"probe: held-out relative error {probe.error:.4f} (ridge {probe.ridge:g}, {probe.search} search)")
    if args.stability:
        lines.append(
            f"stability: chosen in {100 * result['stability']['share_choosing_this_set']:.0f}% of "
            f"{args.stability} bootstrap resamples of the prompts"
        )
    return "\n".join(lines + [""] + result["evidence"])


def cmd_capture(args) -> str:
    stats, described = _stats(args, _Job(args))
    return (
        f"{args.model}: Z {stats.Z.shape} from {described['prompts']} conversations, "
        f"{stats.counts.get('tokens_seen', '?')} tokens, {stats.counts.get('blocks', '?')} blocks (kept in the cache)"
    )


def cmd_report(args) -> str:

    stats, described = _stats(args, _Job(args))
    Z = stats.Z
    entropy = stats.layer_entropy()
    energy = _top_row_energy(Z)
    bounds = set(int(b) for b in compartments(Z).boundaries)
    lines = [
        f"{args.model}: {Z.shape[0]} layers, {described['prompts']} conversations",
        "",
        "layer  entropy  top-row energy  CKA boundary after it (Eq. 8 peak)",
    ]
    lines += [
        f"{l:>5}  {entropy[l]:7.4f}  {energy[l]:14.3f}  {'----' if l in bounds else ''}" for l in range(Z.shape[0])
    ]
    if args.figures:
        from .common import figures as plots  # matplotlib: loaded only when figures are asked for

        fig = plots.layer_profile(entropy, energy, sorted(bounds), f"{args.model}: depth profile")
        paths = plots.save_figure(fig, f"profile_{slug(args.model)}", args.figures)
        print("saved " + ", ".join(map(str, paths)), file=sys.stderr)
    return "\n".join(lines)


def _top_row_energy(Z):
    """Per layer, the share of Z_l's squared norm in its largest row (an attention-sink block shows as ~1)."""

    rows = (np.asarray(Z, dtype=np.float64) ** 2).sum(axis=2)  # (N, B)
    return rows.max(axis=1) / rows.sum(axis=1)


def _notice(message, category, filename, lineno, file=None, line=None) -> None:
    print(f"elsi: warning: {message}", file=sys.stderr)


def main(argv=None) -> int:
    os.environ.setdefault("ELSI_PROGRESS", "stderr")  # bars on stderr: stdout stays the answer
    args = build_parser().parse_args(argv)  # bad syntax: argparse prints usage and exits 2
    answer = sys.stdout
    try:
        with contextlib.redirect_stdout(sys.stderr), warnings.catch_warnings():  # notices are not the answer
            warnings.showwarning = _notice  # a library's warning as one line, not Python's source excerpt
            _check(args)
            text = {"select": cmd_select, "capture": cmd_capture, "report": cmd_report}[args.command](args)
            if getattr(args, "out", None):
                Path(args.out).write_text(text + "\n")
    except UsageError as err:
        print(f"elsi: error: {err}", file=sys.stderr)
        return 2
    except TemplateRefusal as err:  # on a reply the pre-check's stub could not foresee
        print(f"elsi: error: --model {getattr(args, 'model', None)}: {err}", file=sys.stderr)
        return 2
    except (ValueError, TypeError, FileNotFoundError, ModelNotFoundError) as err:
        kind = (
            2 if isinstance(err, (ValueError, TypeError, ModelNotFoundError)) else 1
        )  # a model no name resolves: usage
        print(f"elsi: {'error' if kind == 2 else 'failed'}: {err}", file=sys.stderr)
        return kind
    except Exception as err:  # a failure while running: one line, no traceback
        print(f"elsi: failed: {type(err).__name__}: {err}", file=sys.stderr)
        return 1
    try:
        print(text, file=answer)
    except BrokenPipeError:  # `elsi select ... | head`: the reader left; nothing is wrong with the answer
        os.dup2(os.open(os.devnull, os.O_WRONLY), answer.fileno())  # no second error when Python flushes
    return 0


def console_main() -> None:
    """The `elsi` console script."""
    sys.exit(main())


if __name__ == "__main__":  # `python -m elsi_lib.cli` as `python -m elsi_lib`
    console_main()
