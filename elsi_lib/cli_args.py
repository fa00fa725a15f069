"""The `elsi` command's arguments: the parser (`build_parser`) and every check the arguments alone
allow (`_check`), run before any file is read or model loaded. Bad arguments raise `UsageError`
(exit status 2)."""

from __future__ import annotations

import argparse
import contextlib
import os
from pathlib import Path

from .draft.evidence import default_method
from .inputs.prompts import PROMPT_SETS
from .selection.engines import ENGINES as ENGINE_ENTRIES
from .selection.methods import METHODS as REGISTERED, method as method_named

PACKAGE_ROOT = Path(__file__).resolve().parent  # elsi_lib: what the command reads ships in it

# every method and engine as `selection.methods` and `selection.engines` declare them, nothing repeated
METHODS = tuple(REGISTERED)
MEASURED = tuple(name for name, m in REGISTERED.items() if m.measured)  # the methods whose set comes from the capture
FIXED_SIZES = {name: m.size for name, m in REGISTERED.items() if m.size is not None}  # a fixed method's set size
DEFAULTS = {"m": 3, "k_beam": 10, "k_expand": 5}  # the parser's default is None: an explicit value is told apart
READ_BY = {o: tuple(n for n, m in REGISTERED.items() if o in m.options) for o in ("k_beam", "k_expand")}
ENGINES = tuple(ENGINE_ENTRIES)
FORMATS = ("text", "json", *ENGINES)
# the versions whose layer-id handling elsi has read (selection/conventions.py says where): another is refused
ENGINE_VERSIONS = {name: e.versions for name, e in ENGINE_ENTRIES.items()}


def _method_name(text: str) -> str:
    """A method's name from any of its declared spellings (`selection.methods`); an unknown one is left
    as typed, for the parser's choices to refuse."""
    try:
        return method_named(text).name
    except ValueError:
        return text


STABILITY_MIN = 20  # fewer resamples: a share in steps coarser than 5 % (one resample: 0 or 100 %)
STABILITY_MAX = 10_000  # more: hours of selection, and the resample weights alone fill memory


class UsageError(Exception):
    """Bad arguments: exit status 2."""


class _Once(argparse._StoreAction):
    """An option that takes one value, given once: a second one (`--model a --model b`) is refused, not
    silently the one used."""

    def __call__(self, parser, namespace, values, option_string=None):
        given = namespace.__dict__.setdefault("_given", {})
        if self.dest in given:
            parser.error(f"{option_string} given twice ({given[self.dest]!r} and {values!r}): give it once")
        given[self.dest] = values
        super().__call__(parser, namespace, values, option_string)


def _capture_options(p: argparse.ArgumentParser) -> None:
    p.register("action", None, _Once)  # every single-valued option of the command (the default action)
    p.register("action", "store", _Once)
    p.add_argument(
        "--model", required=True, help="registry name (e.g. smollm2-135m), local folder, .gguf file or hub id"
    )
    p.add_argument(
        "--data",
        nargs="+",
        action="extend",  # --data A --data B reads both, as --data A B does
        metavar="FILE",
        help="ShareGPT-format JSON/JSONL conversation files or prompt-set "
        "names (default: the clean-licence calibration mix)",
    )
    p.add_argument("--prompts", type=int, default=200, help="calibration conversations (default 200)")
    p.add_argument("--rho", type=float, default=0.3, help="share of positions kept by next-token entropy (default 0.3)")
    p.add_argument("--block", type=int, default=32, help="retained tokens averaged per block, B (default 32)")
    p.add_argument("--seed", type=int, default=0, help="seeds the prompt sample and the bootstrap (default 0)")
    p.add_argument(
        "--reply-model",
        default="smollm2-135m",
        help="writes the greedy replies to prompts that end "
        "with a user turn (default smollm2-135m, as the notebooks; 'self' = the model itself)",
    )


MAX_BLOCK = 4096  # rows a block averages: the paper uses 32


def build_parser() -> argparse.ArgumentParser:
    fmt = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog="elsi", description="Which layers should my EAGLE-3 draft see?", formatter_class=fmt, allow_abbrev=False
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="{select,capture,report}")
    select = commands.add_parser(
        "select",
        formatter_class=fmt,
        allow_abbrev=False,
        help="choose the draft's layers",
        description="Capture (or reuse the cached capture), select a layer set and print "
        "it next to EAGLE3's and the exhaustive optimum.",
        epilog="example:\n  elsi select --model smollm2-135m --format vllm\n"
        "  elsi select --model smollm2-135m --m 2 --method elsi-c --format json --out set.json",
    )
    _capture_options(select)
    select.add_argument(
        "--m",
        type=int,
        help="layers in the set (default 3); the layer count fixes eagle3's set "
        "(3 layers) and eagle2's (1): with them, --m may only repeat that size",
    )
    select.add_argument(
        "--method",
        type=_method_name,
        choices=METHODS,
        default=default_method(),
        help=f"default {default_method()} (read from the evidence file): probe: the task probe (ridge map from the set's states to the target's next-token "
        "state), the default while its error predicts this project's drafts out of sample (notebook 10), "
        "with ELSI's set beside it; elsi: the paper's beam search (Alg. 1)",
    )
    select.add_argument("--k-beam", type=int, help="beam width (default 10; elsi, elsi-c and probe only)")
    select.add_argument("--k-expand", type=int, help="expansion pool (default 5; elsi and elsi-c only)")
    select.add_argument(
        "--format",
        choices=FORMATS,
        default="text",
        help="default text; an engine's format "
        f"({', '.join(ENGINES)}) also restricts the search to the sets it can feed a draft, as --engine does",
    )
    select.add_argument(
        "--engine",
        choices=ENGINES,
        help="restrict the search to the sets this engine or training recipe can feed a draft ("
        + "; ".join(
            f"{name}: " + ", ".join(filter(None, [e.no_last_layer and "never the last layer", e.size_why]))
            for name, e in ENGINE_ENTRIES.items()
            if e.no_last_layer or e.size_why
        )
        + ") and say what the restriction cost (default: the --format's engine)",
    )
    select.add_argument(
        "--engine-version",
        help="the engine version the ids are for; only versions elsi has read "
        "are accepted (" + "; ".join(f"{e}: {', '.join(v)}" for e, v in ENGINE_VERSIONS.items()) + ")",
    )
    select.add_argument(
        "--stability",
        type=int,
        default=0,
        metavar="N",
        help=f"rerun the selection on N bootstrap resamples of the prompts and report how often it "
        f"wins: N at least {STABILITY_MIN} (a share in steps of 5 %% or finer) and at most "
        f"{STABILITY_MAX}; needs --prompts 2 or more",
    )
    select.add_argument("--out", help="also write the output to this file")
    capture = commands.add_parser(
        "capture",
        formatter_class=fmt,
        allow_abbrev=False,
        help="capture layer statistics only",
        description="Capture the per-layer statistics (cached) that select and report read.",
        epilog="example:\n  elsi capture --model smollm2-135m --prompts 200",
    )
    _capture_options(capture)
    report = commands.add_parser(
        "report",
        formatter_class=fmt,
        allow_abbrev=False,
        help="print a depth profile",
        description="Per-layer entropy, top-row energy share and CKA compartment boundaries.",
        epilog="example:\n  elsi report --model smollm2-135m --figures figures/",
    )
    _capture_options(report)
    report.add_argument("--figures", metavar="DIR", help="also save the profile figure (PNG and PDF) here")
    return parser


def _check(args) -> None:
    """Every check the arguments alone allow, before any file is read or model loaded; fills in the
    defaults of --m, --k-beam and --k-expand (None in the parser, to tell an explicit value apart)."""
    if not str(args.model).strip():
        raise UsageError(
            f"--model {args.model!r} is empty: give a bundled model's name (default smollm2-135m), a folder or a hub id"
        )
    if args.prompts < 1:
        raise UsageError(f"--prompts must be at least 1, got {args.prompts}")
    if not 0 < args.rho <= 1:
        raise UsageError(f"--rho must be in (0, 1], got {args.rho}")
    if not 2 <= args.block <= MAX_BLOCK:  # one row has no spread (every entropy 0); B x B Grams beyond are no block
        raise UsageError(f"--block must be from 2 to {MAX_BLOCK}, got {args.block}")
    if args.seed < 0:
        raise UsageError(f"--seed must be 0 or more (it seeds the sample and the bootstrap), got {args.seed}")
    if args.command == "select" and args.method == "probe" and args.prompts < 2:  # it fits on some, judges on others
        given = "" if "method" in getattr(args, "_given", {}) else " (the default)"
        raise UsageError(
            f"--prompts {args.prompts} with --method probe{given}: the probe is fitted on some conversations and "
            "judged on held-out others, so it needs at least 2; pass more, or --method elsi"
        )
    if args.command == "select":
        _check_method_options(args)
        _check_stability(args)
        _check_engine(args)
    _check_data(args.data or [])
    if getattr(args, "out", None) is not None:
        _check_writable_file(args.out, "--out")
        _check_out_is_no_input(args)
    if getattr(args, "figures", None) is not None:
        _check_writable_folder(args.figures, "--figures")
        figures = Path(args.figures).resolve()
        inside = [PACKAGE_ROOT] + [Path(args.model).resolve()] * Path(args.model).is_dir()
        if any(figures.is_relative_to(folder) for folder in inside):
            raise UsageError(
                f"--figures {args.figures} lies inside elsi's package or the --model folder, which the command "
                "reads: save the figures elsewhere"
            )


def _check_engine(args) -> None:
    """--engine (default: the --format's engine) agrees with --format, --engine-version is one elsi has
    read, and SpecForge gets three layers."""
    if args.format in ENGINES:
        if args.engine not in (None, args.format):
            raise UsageError(
                f"--engine {args.engine} with --format {args.format}: the format's ids are for "
                f"{args.format}; drop --engine, or print --format text / json"
            )
        args.engine = args.format
    if args.engine_version is not None:
        if args.engine is None:
            raise UsageError("--engine-version needs --engine (or an engine's --format)")
        if args.engine_version not in ENGINE_VERSIONS[args.engine]:
            raise UsageError(
                f"--engine-version {args.engine_version}: elsi has read how {args.engine} "
                f"{' and '.join(ENGINE_VERSIONS[args.engine])} name layers, not this version; its ids "
                "may name other layers (selection/conventions.py says what was read)"
            )
    size = ENGINE_ENTRIES[args.engine].size if args.engine else None
    if size is not None:  # an engine that fixes the set size (its registry entry says why)
        why = ENGINE_ENTRIES[args.engine].size_why or f"exactly {size} layers"
        free = ", ".join(e for e, entry in ENGINE_ENTRIES.items() if entry.size is None)
        if args.method in FIXED_SIZES and FIXED_SIZES[args.method] != size:
            raise UsageError(
                f"--engine {args.engine} ({why}) with --method {args.method}, whose set has "
                f"{FIXED_SIZES[args.method]} layer{'s' * (FIXED_SIZES[args.method] > 1)}: choose a measured method "
                f"({', '.join(MEASURED)}) or another engine ({free})"
            )
        if args.method in MEASURED and args.m is not None and args.m != size:
            raise UsageError(
                f"--engine {args.engine} ({why}), got --m {args.m}: select with --m {size}, or use another "
                f"engine's format ({free})"
            )


def _check_method_options(args) -> None:
    """--m, --k-beam, --k-expand: at least 1, and given only to a method that uses them (a fixed
    method's --m only as its own set's size); the defaults filled in."""
    for name, default in DEFAULTS.items():
        value, option = getattr(args, name), f"--{name.replace('_', '-')}"
        if value is None:
            setattr(args, name, default)
            continue
        if value < 1:
            raise UsageError(f"{option} must be at least 1, got {value}")
        if name == "m" and args.method in FIXED_SIZES and value != FIXED_SIZES[args.method]:
            size = FIXED_SIZES[args.method]
            raise UsageError(
                f"--m {value}: --method {args.method}'s set is fixed by the layer count ({size} "
                f"layer{'s' * (size > 1)}); drop --m, or choose a measured method ({', '.join(MEASURED)})"
            )
        if name in READ_BY and args.method not in READ_BY[name]:
            raise UsageError(
                f"{option} {value} does not apply to --method {args.method}: only "
                f"{', '.join(READ_BY[name])} search with it; drop {option}"
            )


def _check_stability(args) -> None:
    """--stability N: a measured method, prompts to resample, and N within [STABILITY_MIN, STABILITY_MAX]."""
    if args.stability < 0:
        raise UsageError(f"--stability must be >= 0, got {args.stability}")
    if not args.stability:
        return
    if args.method == "probe":
        raise UsageError("--stability resamples the entropy capture; --method probe is not scored from it")
    if args.method not in MEASURED:
        raise UsageError(
            f"--stability needs a method scored from the capture ({', '.join(m for m in MEASURED if m != 'probe')}), not --method {args.method}: "
            f"{args.method}'s set is fixed by the layer count, so there is nothing to resample"
        )
    if args.prompts < 2:
        raise UsageError(
            f"--stability needs at least 2 prompts to resample, got --prompts {args.prompts} "
            f"(every resample of one prompt is that prompt: the share would be 100 %)"
        )
    if not STABILITY_MIN <= args.stability <= STABILITY_MAX:
        bound = f"at least {STABILITY_MIN}" if args.stability < STABILITY_MIN else f"at most {STABILITY_MAX}"
        raise UsageError(
            f"--stability {args.stability}: {bound} resamples (from {STABILITY_MIN}, a share in "
            f"steps of 5 % or finer, to {STABILITY_MAX})"
        )


def _check_data(data: list) -> None:
    """Each --data is a file or a prompt set, and none is given twice (a file however spelt or linked: by
    its device and inode), which would count its conversations twice."""

    seen: dict = {}  # a prompt set's name or a file's (device, inode) -> the --data given
    for prompt_set in data:
        if prompt_set not in PROMPT_SETS and not Path(prompt_set).is_file():
            raise UsageError(
                f"--data {prompt_set!r} is neither a file nor a prompt set ({', '.join(sorted(PROMPT_SETS))})"
            )
        if prompt_set in PROMPT_SETS:
            key = prompt_set
        else:
            stat = Path(prompt_set).stat()  # a hard link or a symlink to one file is that file
            key = (stat.st_dev, stat.st_ino)
        if key in seen and prompt_set in PROMPT_SETS:
            raise UsageError(f"--data {prompt_set} is given twice: pass each prompt set once")
        if key in seen:
            raise UsageError(
                f"--data {seen[key]} and {prompt_set} are the same file ({Path(prompt_set).resolve()}): pass it once, or "
                "its conversations count twice"
            )
        seen[key] = prompt_set


def _check_writable_folder(name: str, option: str) -> None:
    """`name` is a folder that can be written, or one that can be made (its nearest existing parent
    a folder that can be written): fail now, not after the capture."""
    path = Path(name)
    existing = next((p for p in (path, *path.parents) if p.exists()), Path("."))
    if existing == path and not path.is_dir():
        raise UsageError(f"{option} {name!r} exists and is not a folder")
    if not existing.is_dir():
        raise UsageError(f"{option} {name!r}: {str(existing)!r} is not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"{option} {name!r} cannot be written (permission denied on {str(existing)!r})")


def _check_writable_file(name: str, option: str) -> None:
    """`name` can be written (created or replaced) as a file: fail now, not after the capture."""
    path = Path(name)
    folder = path.parent if str(path.parent) else Path(".")
    if not name:
        raise UsageError(f"{option} is empty; give a file name")
    if path.is_dir() or name.endswith(os.sep):
        raise UsageError(f"{option} {name!r} is a folder; give a file name")
    if not folder.exists():
        raise UsageError(f"{option} {name!r}: the folder {str(folder)!r} does not exist")
    if not folder.is_dir():
        raise UsageError(f"{option} {name!r}: {str(folder)!r} is not a folder")
    if path.exists() and not path.is_file():
        raise UsageError(f"{option} {name!r} exists and is not a regular file")
    if not os.access(path if path.exists() else folder, os.W_OK) or not os.access(folder, os.X_OK):
        raise UsageError(
            f"{option} {name!r} cannot be written (permission denied on {str(path if path.exists() else folder)!r})"
        )


def _check_out_is_no_input(args) -> None:
    """--out is none of the files the command reads: a --data file, a file of elsi's package (the
    evidence file, the bundled prompt sets) or of a --model / --reply-model folder (however spelt or
    linked: a file by its device and inode, a folder by its resolved path)."""
    out = Path(args.out).resolve()
    inputs = [("--data", given) for given in args.data or []]
    inputs += [(f"--{o.replace('_', '-')}", getattr(args, o, None)) for o in ("model", "reply_model")]
    for option, given in inputs:
        if given and Path(given).is_file() and out.exists() and os.path.samefile(given, out):  # a hard link too
            raise UsageError(f"--out {args.out} is {option} {given}: the answer would overwrite its own input")
    folders = {"elsi's package (its evidence file and prompt sets)": PACKAGE_ROOT}
    for option, given in inputs[len(args.data or []) :]:
        if given and Path(given).is_dir():
            folders[f"{option} {given}"] = Path(given)
    for what, folder in folders.items():
        if out.is_relative_to(folder.resolve()):
            raise UsageError(
                f"--out {args.out} lies inside {what}, which the command reads: write the answer elsewhere"
            )
        linked = _linked_file(out, folder)
        if linked:  # a hard link to one of its files, elsewhere: writing it would write that file
            raise UsageError(f"--out {args.out} is {linked}, a file of {what}: the answer would overwrite it")


def _linked_file(out: Path, folder: Path) -> Path | None:
    """The file under `folder` that `out` is a hard link of, if any (looked for only where `out` has another
    link: a file of one link is no other file); an unreadable subfolder is passed over."""
    try:
        if not out.is_file() or out.stat().st_nlink < 2:
            return None
        mine = out.stat()
        for root, _, files in os.walk(folder):
            for name in files:
                found = Path(root) / name
                with contextlib.suppress(OSError):
                    if os.path.samestat(found.stat(), mine):
                        return found
    except OSError:
        return None
    return None
