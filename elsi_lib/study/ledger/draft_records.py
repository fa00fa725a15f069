"""One trained draft, one record: the durable product of a unit (family, protocol, method id, seed).

A record is a small JSON file under `data/drafts/<protocol>/<method id>-seed<seed>.json` (no weights):
the unit, its protocol's digest and numeric settings, the draft's layer set with its set entropy and
probe scores, held-out step-1..3 accuracy, per-question tau (T, tree nodes, SpecBench question), the
learning-curve points the protocol asks for, and, apart from those numbers, the stage times and what
it ran on. Written atomically; a second record of the same unit with other numbers is refused
(`RecordConflict`), never a replacement; a record that lacks a field, names no method, sits under
another unit's path or was made under another definition of its protocol is refused naming the file
and the field (`RecordError`). `question_frame` turns records into the per-question rows every
table of the study is computed from.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
from pathlib import Path

import pandas as pd

from ...common.cachefiles import REPO_ROOT, atomic_write_bytes
from ...common.checks import half_unit, unique_keys
from ...common.hardware import NUMERIC_COLUMNS
from ...inputs.models import REGISTRY
from ...draft.corpus import COLUMNS, column_of
from ...draft.evidence_checks import MAX_TEMPERATURE, SAME_SCORE
from ...inputs.prompts import load_specbench
from ..experiments.layer_choices import label_of
from ...selection.methods import METHODS
from .protocols import PROTOCOLS, protocol

FORMAT = 1
STEPS = ("step 1", "step 2", "step 3")
QUESTION_FIELDS = ("temperature", "nodes", "question_id", "column", "tau")
# every field of a record; the last two are how it was made, not its numbers
FIELDS = (
    "format",
    "unit",
    "protocol digest",
    "label",
    "layers",
    "set entropy",
    "probe error",
    "probe agreement",
    "numeric",
    "prompts",
    "step accuracy",
    "questions",
    "curve",
    "stages",
    "ran on",
)
NOT_NUMBERS = ("stages", "ran on")


COPY_TOLERANCE = 1e-3  # two seeds' drafts whose every tau agrees this closely are one draft recorded twice
PATTERN = 10  # distinct taus a record needs before its pattern across questions can show a rounded copy
# (rounded, perhaps): two trainings differ by 0.45 or more on some question in every committed pair
MAX_LOST = 0.10  # the share of a block's questions a record may leave without a tau


class RecordError(ValueError):
    """A record that cannot be used, named with its file and field."""


class RecordConflict(RecordError):
    """A second record of one unit whose numbers differ from the first's."""


def records_dir() -> Path:
    """Where records live: $ELSI_DRAFT_RECORDS, else `data/drafts` in the repository (committed)."""
    return Path(os.environ.get("ELSI_DRAFT_RECORDS") or REPO_ROOT / "data" / "drafts")


def is_method(method_id) -> bool:
    """A draft method id of `layer_choices.draft_methods` (the probe's sets are probe-m<m>)."""
    return isinstance(method_id, str) and (label_of(method_id) is not None)


def unit_path(unit: dict, root: Path | None = None) -> Path:
    return Path(root or records_dir()) / unit["protocol"] / f"{unit['method']}-seed{unit['seed']}.json"


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@functools.lru_cache(maxsize=None)
def _experiment(name: str):
    """A protocol's Experiment, read once per process (its parameter file parsed for every record else)."""
    return protocol(name).experiment()


@functools.lru_cache(maxsize=1)
def specbench_columns() -> dict:
    """{SpecBench question id: the paper's column of its category} (the pinned questions)."""
    questions = load_specbench()
    return {int(q): column_of(c) for q, c in zip(questions.question_id, questions.category)}


def _questions_ok(rows, where: str, exp) -> None:
    """Each row [temperature, nodes, question_id, column, tau]: a temperature in [0, MAX_TEMPERATURE], a
    tree of one node or more, a SpecBench question in its own column, and tau (accepted tokens per target
    forward) between 1 and what a tree of that size and the protocol's depth allows (min(nodes, depth) + 1:
    a whole branch accepted, plus the target's own token), or NaN; and the rows are the protocol's
    evaluation (`exp`): its temperatures and tree sizes, each column's eval_per_column questions."""
    depth = exp.depth
    if not isinstance(rows, list) or not rows:
        raise RecordError(f"{where}: no per-question rows")
    for row in rows:
        if not isinstance(row, list) or len(row) != len(QUESTION_FIELDS) or not _number(row[4]):
            raise RecordError(f"{where}: a row {row!r} is not {list(QUESTION_FIELDS)}")
        temperature, nodes, question, column, tau = row
        if not isinstance(question, int) or isinstance(question, bool) or question < 0:
            raise RecordError(f"{where}: question id {question!r} is not a SpecBench question id (an integer >= 0)")
        if not _number(temperature) or not 0 <= temperature <= MAX_TEMPERATURE or math.copysign(1.0, temperature) < 0:
            raise RecordError(
                f"{where}: temperature {temperature!r} for question {question} is not a number in [0, {MAX_TEMPERATURE:g}]"
            )
        if not isinstance(nodes, int) or isinstance(nodes, bool) or nodes < 1:
            raise RecordError(f"{where}: nodes {nodes!r} for question {question} is not a tree size >= 1")
        if column != specbench_columns().get(question):
            raise RecordError(
                f"{where}: question {question} in column {column!r}; SpecBench puts it in "
                f"{specbench_columns().get(question, 'none (no such question)')!r}"
            )
        most = min(nodes, depth) + 1
        if not (1 <= tau <= most or math.isnan(tau)):
            raise RecordError(
                f"{where}: tau {tau} for question {question} is outside [1, {most}] ({nodes} nodes, depth {depth})"
            )
    blocks: dict = {}  # (T, nodes) -> [questions without a tau, questions]
    for temperature, nodes, _, _, tau in rows:
        count = blocks.setdefault((temperature, nodes), [0, 0])
        count[0] += math.isnan(tau)
        count[1] += 1
    empty = [f"T = {t:g}, {n} nodes" for (t, n), (lost, asked) in blocks.items() if lost == asked]
    if empty:
        raise RecordError(f"{where}: no question has a tau at {', '.join(empty)} (the draft measured nothing there)")
    thin = [
        f"T = {t:g}, {n} nodes: {lost} of {asked}"
        for (t, n), (lost, asked) in blocks.items()
        if lost > MAX_LOST * asked
    ]
    if thin:  # its AVG would speak for questions it never measured (the records lose at most 3 of 120)
        raise RecordError(f"{where}: questions without a tau ({'; '.join(thin)}), more than {MAX_LOST:.0%} of a block")
    keys = [(row[0], row[1], row[2]) for row in rows]
    if len(set(keys)) != len(keys):
        t, n, q = next(k for k in keys if keys.count(k) > 1)
        raise RecordError(f"{where}: question {q} is listed twice at T = {t:g}, {n} nodes (each question counts once)")
    want = {(float(t), n) for t in exp.temperatures for n in exp.tree_nodes}
    if set(blocks) != want:
        raise RecordError(
            f"{where}: blocks {sorted(blocks)} (temperature, nodes), the protocol evaluates {sorted(want)}"
        )
    per_column: dict = {}
    for temperature, nodes, _, column, _ in rows:
        per_column[temperature, nodes, column] = per_column.get((temperature, nodes, column), 0) + 1
    for t, n in sorted(want):
        short = {
            c: per_column.get((t, n, c), 0) for c in COLUMNS if per_column.get((t, n, c), 0) != exp.eval_per_column
        }
        if short:
            raise RecordError(
                f"{where}: at T = {t:g}, {n} nodes the columns {short} hold other than the protocol's "
                f"{exp.eval_per_column} questions each (its evaluation asks every draft the same questions)"
            )


def check_record(record: dict, where) -> dict:
    """`record` if every field is there and well-formed and its unit names a method and a protocol
    whose current definition made it; RecordError naming `where` and the field otherwise."""
    if not isinstance(record, dict):
        raise RecordError(f"{where}: not a record (a JSON object)")
    missing = [f for f in FIELDS if f not in record]
    if missing:
        raise RecordError(f"{where}: missing field(s) {missing}")
    if type(record["format"]) is not int or record["format"] != FORMAT:
        raise RecordError(f"{where}: field 'format' is {record['format']!r}, this elsi reads {FORMAT}")
    unit = record["unit"]
    if not isinstance(unit, dict) or set(unit) != {"family", "protocol", "method", "seed"}:
        raise RecordError(f"{where}: field 'unit' must hold family, protocol, method and seed, got {unit!r}")
    if not is_method(unit["method"]):
        raise RecordError(f"{where}: field 'unit' names no method: {unit['method']!r}")
    if not isinstance(unit["seed"], int) or isinstance(unit["seed"], bool) or unit["seed"] < 0:
        raise RecordError(f"{where}: field 'unit' has seed {unit['seed']!r}, not an integer >= 0")
    try:
        proto = protocol(unit["protocol"])
    except KeyError as err:
        raise RecordError(f"{where}: field 'unit': {err.args[0]}") from None
    if unit["family"] != proto.family:
        raise RecordError(f"{where}: field 'unit' has family {unit['family']!r}; {proto.name} is on {proto.family}")
    if record["protocol digest"] != proto.digest:
        raise RecordError(
            f"{where}: field 'protocol digest' {record['protocol digest']!r} is not {proto.name}'s ({proto.digest}): "
            "the record was made under another definition of its protocol"
        )
    if record["numeric"] != proto.numeric:
        raise RecordError(f"{where}: field 'numeric' {record['numeric']} is not {proto.name}'s {proto.numeric}")
    for name in ("set entropy", "prompts"):
        if not _number(record[name]):
            raise RecordError(f"{where}: field {name!r} is not a number: {record[name]!r}")
    if not (math.isfinite(record["set entropy"]) and record["set entropy"] >= 0):
        raise RecordError(f"{where}: field 'set entropy' is {record['set entropy']!r}, not a matrix entropy >= 0")
    if record["label"] != label_of(unit["method"]):
        raise RecordError(
            f"{where}: field 'label' is {record['label']!r}; method {unit['method']}'s drafts are labelled "
            f"{label_of(unit['method'])!r}"
        )
    layers = record["layers"]
    ids = [int(x) for x in layers.split()] if isinstance(layers, str) and re.fullmatch(r"\d+( \d+)*", layers) else None
    if ids is None or ids != sorted(set(ids)) or layers != " ".join(map(str, ids)):
        raise RecordError(f"{where}: field 'layers' is {layers!r}, not ascending distinct layer ids such as '1 14 26'")
    size = re.search(r"-m(\d+)", unit["method"])
    m = int(size.group(1)) if size else {"eagle3": 3, "eagle2": 1}.get(unit["method"])
    if m is not None and len(ids) != m:
        raise RecordError(
            f"{where}: field 'layers' {layers!r} holds {len(ids)} layers; method {unit['method']} has {m}"
        )
    n_layers = REGISTRY[proto.family].n_layers if proto.family in REGISTRY else None
    if n_layers is not None and ids[-1] >= n_layers:
        raise RecordError(f"{where}: field 'layers' {layers!r} names layer {ids[-1]}; {proto.family} has {n_layers}")
    rule = METHODS[unit["method"]].fixed if unit["method"] in METHODS else None
    if rule is not None and n_layers is not None and tuple(ids) != tuple(rule(n_layers)):
        raise RecordError(
            f"{where}: field 'layers' {layers!r} is not {unit['method']}'s set on {proto.family} "
            f"({METHODS[unit['method']].rule}, {n_layers} layers: {' '.join(map(str, rule(n_layers)))})"
        )
    for name, hi in (("probe error", math.inf), ("probe agreement", 1.0)):
        value = record[name]
        if value is not None and not (_number(value) and math.isfinite(value) and 0 <= value <= hi):
            raise RecordError(f"{where}: field {name!r} is {value!r}, not a finite number in [0, {hi:g}]")
    exp = _experiment(proto.name)
    trained = exp.n_train - exp.n_heldout
    if record["prompts"] != trained:
        raise RecordError(
            f"{where}: field 'prompts' is {record['prompts']!r}; {proto.name}'s drafts train on {trained} "
            f"({exp.n_train} prompts, {exp.n_heldout} held out)"
        )
    if not isinstance(record["stages"], dict):
        raise RecordError(f"{where}: field 'stages' is {type(record['stages']).__name__}, not a mapping of stages")
    group = record["stages"].get("group")
    owed = {method for method, _ in proto.ledger}
    if group is not None and not (
        isinstance(group, list)
        and len(set(map(str, group))) == len(group) > 1
        and unit["method"] in group
        and all(isinstance(m, str) and m in owed for m in group)
    ):
        raise RecordError(
            f"{where}: field 'stages' names a lock-step group {group!r}: it must list two or more distinct "
            f"methods of {proto.name}'s ledger, this unit's among them"
        )
    seconds = record["stages"].get("seconds", {})
    if not isinstance(seconds, dict) or not all(_number(v) and math.isfinite(v) and v >= 0 for v in seconds.values()):
        raise RecordError(f"{where}: field 'stages' has seconds {seconds!r}, not a mapping of stages to times >= 0")
    if not isinstance(record["curve"], list):
        raise RecordError(f"{where}: field 'curve' is not a list of points")
    points = [p.get("prompts") for p in record["curve"] if isinstance(p, dict)]
    if len(set(points)) != len(points) or any(not isinstance(n, int) or n >= record["prompts"] for n in points):
        raise RecordError(
            f"{where}: field 'curve' has points at {points} prompts: each point once, below the draft's {record['prompts']}"
        )
    for point in [record, *record["curve"]]:
        lacking = [
            f for f in ("prompts", "questions", "step accuracy") if not isinstance(point, dict) or f not in point
        ]
        if lacking:
            raise RecordError(f"{where}: a point of field 'curve' lacks {lacking}")
        if not isinstance(point["step accuracy"], dict) or sorted(point["step accuracy"]) != list(STEPS):
            raise RecordError(f"{where}: field 'step accuracy' must hold {list(STEPS)}, got {point['step accuracy']}")
        for step, value in point["step accuracy"].items():
            if not _number(value) or not (0 <= value <= 1 or math.isnan(value)):
                raise RecordError(f"{where}: field 'step accuracy' has {step} {value!r}, not a share in [0, 1]")
        if not isinstance(point["prompts"], int) or isinstance(point["prompts"], bool) or point["prompts"] < 1:
            raise RecordError(f"{where}: field 'prompts' is {point['prompts']!r}, not a count of training prompts >= 1")
        _questions_ok(point["questions"], f"{where}: field 'questions' (at {point['prompts']} prompts)", exp)
        if all(math.isnan(v) for v in point["step accuracy"].values()):
            raise RecordError(f"{where}: field 'step accuracy' has no step measured (every value NaN)")
    return record


def lockstep_groups(name: str, root: Path | None = None) -> dict:
    """{(method id, seed): the method ids it trained with in lock-step} for the records of protocol
    `name` that name a group (`units.unit_record`: only groups of two or more are named)."""
    return {
        (r["unit"]["method"], r["unit"]["seed"]): tuple(r["stages"]["group"])
        for r in read_records(name, root)
        if r["stages"].get("group")
    }


def numbers(record: dict) -> dict:
    """What a record measured: every field but how it was made (NOT_NUMBERS)."""
    return {k: v for k, v in record.items() if k not in NOT_NUMBERS}


def _dump(record: dict) -> bytes:
    return (json.dumps(record, indent=1, sort_keys=True, allow_nan=True) + "\n").encode()


def read_record(path) -> dict:
    """The checked record at `path`, which must sit at its own unit's path."""
    path = Path(path)
    try:
        record = json.loads(path.read_text(), object_pairs_hook=unique_keys)
    except (OSError, ValueError, RecursionError) as err:
        raise RecordError(f"{path}: unreadable ({type(err).__name__}: {err})") from None
    check_record(record, path)
    if path.name != unit_path(record["unit"], Path(".")).name or path.parent.name != record["unit"]["protocol"]:
        raise RecordError(f"{path}: field 'unit' {record['unit']} belongs at {unit_path(record['unit'], Path('...'))}")
    return record


def write_record(record: dict, root: Path | None = None) -> tuple[Path, bool]:
    """Write `record` at its unit's path, atomically; (path, written). The same unit recorded again
    with the same numbers keeps the first record (written False); with other numbers, RecordConflict
    naming the file and the fields that differ."""
    check_record(record, f"the record of {record.get('unit')}")
    path = unit_path(record["unit"], root)
    if path.exists():
        old = read_record(path)
        mine, theirs = json.loads(_dump(numbers(record))), json.loads(_dump(numbers(old)))
        if mine != theirs:
            differ = sorted(k for k in mine if mine[k] != theirs.get(k))
            raise RecordConflict(f"{path}: a record of this unit exists with other numbers in {differ}; not replaced")
        return path, False
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, _dump(record))
    return path, True


def record_paths(root: Path | None = None) -> list[Path]:
    """Every record the records folder holds (`<protocol>/<unit>.json`, in name order): what the tables read
    and the evidence rests on. A folder that is missing or a file, another folder in it (one level too high,
    say), or a record spelt NAME.JSON is refused (read as fewer records, a ledger run would retrain them);
    hidden entries (.git, an editor's) are no records."""
    root = Path(root or records_dir())
    if not root.is_dir():
        what = "is a file, not a folder" if root.exists() else "does not exist"
        raise RecordError(f"records folder {root} {what} (ELSI_DRAFT_RECORDS?)")
    foreign = sorted(p.name for p in root.iterdir() if p.name not in PROTOCOLS and not p.name.startswith("."))
    if foreign:  # another folder (one level too high, say) would read as a ledger with no records
        raise RecordError(
            f"records folder {root} holds {foreign[:5]}, which are no protocol's folders ({', '.join(PROTOCOLS)}): "
            "is it the records folder (ELSI_DRAFT_RECORDS)?"
        )
    paths = []
    for folder in sorted(root / name for name in PROTOCOLS if (root / name).exists()):
        if not folder.is_dir():
            raise RecordError(f"{folder}: a file where the protocol's folder of records belongs")
        odd = sorted(
            p.name for p in folder.iterdir() if not p.name.startswith(".") and not (p.is_file() and p.suffix == ".json")
        )
        if odd:  # read as no record, a ledger run would train it again
            raise RecordError(f"{folder}: {odd} are no records: each record is a file <unit>.json")
        paths += sorted(p for p in folder.glob("*.json") if not p.name.startswith("."))  # ._x.json: macOS's, no record
    return paths


def read_records(protocol_name: str, root: Path | None = None) -> list[dict]:
    """Every record of a protocol, checked, in file-name order; a records folder that does not exist is
    refused (read as empty, a ledger run would train every unit again)."""
    try:
        protocol(protocol_name)  # a name no protocol has reads as nothing, which a run would retrain
    except KeyError as err:
        raise RecordError(err.args[0]) from None
    paths = [p for p in record_paths(root) if p.parent.name == protocol_name]
    records = [read_record(p) for p in paths]
    _one_label_and_set_per_method(records, paths)
    return records


def _rounded_copy(pairs: list[tuple[float, float]]) -> bool:
    """Two seeds' taus, question by question, where each pair is one number and the same number rounded
    (its gap within half a unit of the last decimal either is written with), over a pattern of at least
    PATTERN distinct values: a question's tau is a ratio of counts, so two drafts' taus agree this way on
    every question only when one record is the other rounded. Records whose questions hold a few values
    (the tests' uniform ones) show no pattern to judge."""
    if len({a for a, _ in pairs}) < PATTERN and len({b for _, b in pairs}) < PATTERN:
        return False
    return all(abs(a - b) <= max(half_unit(a), half_unit(b)) + 1e-12 for a, b in pairs)


def _one_label_and_set_per_method(records: list[dict], paths: list[Path]) -> None:
    """A protocol's seeds of one method share its label and its layer set, and two methods never share a
    label (the tables pool seeds by label: a relabelled or re-layered record would pool other drafts)."""
    first: dict = {}
    by_label: dict = {}
    by_set: dict = {}  # layers -> (criteria, the first record's path)
    questions: dict = {}
    numbers_of: dict = {}
    for record, path in zip(records, paths):
        asked = sorted((t, n, q, c) for t, n, q, c, _ in record["questions"])
        reference = questions.setdefault("rows", (asked, path))
        if asked != reference[0]:
            raise RecordError(
                f"{path}: its questions (temperature, nodes, question, column) are not {reference[1].name}'s: "
                f"{len(asked)} rows against {len(reference[0])}; one protocol asks its drafts the same questions"
            )
        criteria = tuple(record[c] for c in ("set entropy", "probe error", "probe agreement"))
        feature = (record["layers"], record["unit"]["method"] == "eagle2")  # EAGLE2's: after the final norm
        known, where = by_set.setdefault(feature, (criteria, path))
        if not all(
            (a is None and b is None) or (a is not None and b is not None and math.isclose(a, b, abs_tol=SAME_SCORE))
            for a, b in zip(known, criteria)
        ):
            raise RecordError(
                f"{path}: layers {record['layers']} with (set entropy, probe error, probe agreement) {criteria}; "
                f"{where.name} of the same set has {known}: a set's criteria are the protocol's, one each"
            )
        method = record["unit"]["method"]
        taus = {(t, n, q): tau for t, n, q, _, tau in record["questions"]}
        for other, other_path in numbers_of.setdefault(method, []):
            both = [(tau, other[k]) for k, tau in taus.items() if not (math.isnan(tau) or math.isnan(other[k]))]
            gaps = [abs(a - b) for a, b in both]  # where both have a number (a NaN set in a copy hides nothing)
            if gaps and max(gaps) < COPY_TOLERANCE:
                raise RecordError(
                    f"{path}: every tau is within {COPY_TOLERANCE:g} of {other_path.name}'s: one seed's draft "
                    "recorded again as another seed"
                )
            if _rounded_copy(both):
                raise RecordError(
                    f"{path}: every tau is {other_path.name}'s rounded to the decimals one of the two is written "
                    "with: one seed's draft recorded again as another seed"
                )
        numbers_of[method].append((taus, path))
        method = record["unit"]["method"]
        mine = (record["label"], record["layers"])
        if first.setdefault(method, (mine, path))[0] != mine:
            (label, layers), other = first[method]
            raise RecordError(
                f"{path}: method {method} has label {mine[0]!r} and layers {mine[1]!r}; {other.name} of the same "
                f"method has {label!r} and {layers!r}"
            )
        owner = by_label.setdefault(record["label"], (method, path))
        if owner[0] != method:
            raise RecordError(
                f"{path}: label {record['label']!r} of method {method} is also method {owner[0]}'s ({owner[1].name})"
            )


def question_frame(records: list[dict], *, twins: bool = False) -> pd.DataFrame:
    """Per-question rows of `records` (and of their curve points), as the study's tables read them:
    protocol, prompts, id, method, seed, layers, set entropy, probe error, probe agreement, step 1-3,
    temperature, nodes, question_id, column, tau and the numeric settings. Refuses records of two
    numeric settings (RecordError naming both), unless `twins` (a table over numeric twins that agree,
    `twins.joined_tables`) and every record's protocol is of one pair of twins."""
    settings = {json.dumps(r["numeric"], sort_keys=True) for r in records}
    pairs = {protocol(r["unit"]["protocol"]).twins for r in records}
    if len(settings) > 1 and not (twins and len(pairs) == 1):
        raise RecordError(
            f"records of different numeric settings cannot share a table: {sorted(settings)}"
            + ("" if twins else " (twins that agree may: twins.joined_tables)")
        )
    frames = []
    for r in records:
        for point in [r, *r["curve"]]:
            q = pd.DataFrame(point["questions"], columns=list(QUESTION_FIELDS))
            head = {
                "protocol": r["unit"]["protocol"],
                "prompts": int(point["prompts"]),
                "id": r["unit"]["method"],
                "method": r["label"],
                "seed": r["unit"]["seed"],
                "layers": r["layers"],
                "set entropy": r["set entropy"],
                "probe error": r["probe error"],
                "probe agreement": r["probe agreement"],
                **point["step accuracy"],
            }
            frames.append(q.assign(**head, **r["numeric"]))
    columns = ["protocol", "prompts", "id", "method", "seed", "layers", "set entropy", "probe error"]
    columns += ["probe agreement", *STEPS, *QUESTION_FIELDS, *NUMERIC_COLUMNS]
    if not frames:
        return pd.DataFrame(columns=columns)
    out = pd.concat(frames, ignore_index=True)[columns]
    return out.astype({"probe error": float, "probe agreement": float})
