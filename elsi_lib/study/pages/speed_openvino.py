"""Wall clock in OpenVINO GenAI, the CPU engine that runs EAGLE-3 drafts as token trees: what
`engines/check_openvino.py` (bench/results/engines_openvino.json: elsi's drafts served, lossless, their
tokens per target forward against elsi's loop) and `bench/bench_openvino_rounds.py`
(openvino_rounds_<target>.json: each chain's and tree's round cost, the tokens per round a speed-up
needs, the cost model out of sample) measured, as lines for the "Wall clock" page. Every number is read
from those files; a file that lacks a field it should have is refused naming the file.
"""

from __future__ import annotations

import re
import statistics
from pathlib import Path

import numpy as np

from ...common.checks import half_unit, ratio_holds
from .cost_records import TOLERANCE, _positive, check_machine, read_json
from .speed import BENCH, MIN_QUESTIONS

MIN_REPEATS = 3  # the repeats of each generation a wall-clock claim needs


def _read(path: Path, fields: tuple[str, ...]) -> dict:
    """A record (`read_json`: one value a key) with its machine, its name, settings and rows that each
    hold `fields`."""
    record = read_json(path)
    if not isinstance(record, dict) or [f for f in ("settings", "rows", "machine") if f not in record]:
        raise ValueError(f"{path}: not a benchmark record (settings, rows, machine)")
    if not isinstance(record["rows"], list) or not isinstance(record["settings"], dict):
        raise ValueError(f"{path}: rows must be a list and settings a mapping")
    check_machine(record["machine"], path)
    if record.get("benchmark") != path.stem:
        raise ValueError(f"{path}: benchmark {record.get('benchmark')!r}, not its file's name {path.stem!r}")
    if not record["rows"]:
        raise ValueError(f"{path}: no rows")
    for i, row in enumerate(record["rows"]):
        if not isinstance(row, dict):
            raise ValueError(f"{path}: row {i} is not a row")
        lacking = [f for f in fields if f not in row]
        if lacking:
            raise ValueError(f"{path}: row {i} lacks {lacking}")
    return record


DECODING = re.compile(
    r"chain k=(?P<k>[1-9]\d*)|tree depth (?P<depth>[1-9]\d*), top-[1-9]\d*, (?P<nodes>[1-9]\d*) nodes"
)


def _most_tokens(where: str, decoding) -> int:
    """The most tokens a round of `decoding` ("chain k=K" or "tree depth D, top-T, N nodes") can give:
    its accepted draft tokens and the bonus one."""
    found = DECODING.fullmatch(decoding) if isinstance(decoding, str) else None
    if found is None:
        raise ValueError(f"{where}: decoding {decoding!r} is neither 'chain k=K' nor 'tree depth D, top-T, N nodes'")
    return int(found["k"] or found["depth"]) + 1


def repeats(settings: dict, path: Path) -> int:
    """How many times each generation ran (1 where the settings name no repeat)."""
    value = settings.get("repeat", 1)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{path}: settings' repeat = {value!r}, not a count >= 1")
    return value


def _check_check(path: Path, record: dict) -> None:
    """engines_openvino: counts and versions in the settings; one plain decoding row, its rate positive;
    per draft run (one a draft and decoding) its decoding named, a tau >= 1 and within what the decoding
    allows (and elsi's, where given), lossless a bool and what the output digests say, tokens/s positive,
    and a speed-up only where the run was lossless: its tokens/s over plain decoding's."""
    s = record["settings"]
    for field in ("questions", "max_tokens"):
        if not (isinstance(s.get(field), int) and not isinstance(s.get(field), bool) and s[field] >= 1):
            raise ValueError(f"{path}: settings' {field} = {s.get(field)!r}, not a count >= 1")
    repeats(s, path)
    if not isinstance(s.get("openvino-genai"), str):
        raise ValueError(f"{path}: settings name no openvino-genai version")
    plain = [r for r in record["rows"] if r["draft"] == "plain decoding"]
    if len(plain) != 1 or not _positive(plain[0]["tok/s"]):
        raise ValueError(f"{path}: one plain decoding row with a positive tok/s expected, found {len(plain)}")
    seen: dict = {}
    for i, r in enumerate(record["rows"]):
        if r["draft"] == "plain decoding":
            continue
        where = f"{path}: row {i}"
        if not (isinstance(r["draft"], str) and r["draft"].strip()):
            raise ValueError(f"{where}: draft = {r['draft']!r}, not a name")
        most = _most_tokens(where, r["decoding"])
        if (r["draft"], r["decoding"]) in seen:
            raise ValueError(
                f"{where}: {r['draft']} with {r['decoding']} is also row {seen[r['draft'], r['decoding']]}"
            )
        seen[r["draft"], r["decoding"]] = i
        if not (_positive(r["tau OpenVINO"]) and 1 <= r["tau OpenVINO"] <= most + 1e-9):
            raise ValueError(f"{where}: tau OpenVINO = {r['tau OpenVINO']!r}, not a number in [1, {most}]")
        if r["tau elsi"] != "" and not (_positive(r["tau elsi"]) and 1 <= r["tau elsi"] <= most + 1e-9):
            raise ValueError(f"{where}: tau elsi = {r['tau elsi']!r}, not a number in [1, {most}]")
        if not isinstance(r["lossless"], bool):
            raise ValueError(f"{where}: lossless = {r['lossless']!r}, not true or false")
        if not _positive(r["tok/s"]):
            raise ValueError(f"{where}: tok/s = {r['tok/s']!r}, not a positive rate")
        if r["lossless"] and not _positive(r["vs plain"]):
            raise ValueError(f"{where}: vs plain = {r['vs plain']!r}, not a positive speed-up")
        if not r["lossless"] and _positive(r["vs plain"]):
            raise ValueError(f"{where}: a lossy run with a speed-up ({r['vs plain']}): none is reported for one")
        if r["lossless"] and abs(r["vs plain"] - r["tok/s"] / plain[0]["tok/s"]) > 0.01:
            raise ValueError(
                f"{where}: vs plain {r['vs plain']}, but its {r['tok/s']} tok/s over plain decoding's "
                f"{plain[0]['tok/s']} is {r['tok/s'] / plain[0]['tok/s']:.3f}"
            )
    _check_digests(path, record)


def _check_digests(path: Path, record: dict) -> None:
    """Where the record keeps each run's output digests (details' "output digests": "plain", then one
    entry a draft run in the rows' order, controls aside), each run's lossless is what they say: every
    question's digest plain decoding's."""
    digests = (record.get("details") or {}).get("output digests") if isinstance(record.get("details"), dict) else None
    if digests is None:
        return
    runs = [r for r in record["rows"] if r["draft"] != "plain decoding" and not r["draft"].endswith("(control)")]
    if not isinstance(digests, dict) or not isinstance(digests.get("plain"), list) or len(digests) - 1 != len(runs):
        raise ValueError(f"{path}: output digests: 'plain' and one list a draft run ({len(runs)}) expected")
    for (name, got), r in zip(list(digests.items())[1:], runs):
        if not (isinstance(got, list) and len(got) == len(digests["plain"]) and name.endswith(" " + r["decoding"])):
            raise ValueError(f"{path}: output digests {name!r} are not the run {r['draft']}, {r['decoding']}'s")
        if (got == digests["plain"]) != r["lossless"]:
            raise ValueError(
                f"{path}: {r['draft']}, {r['decoding']}: lossless {r['lossless']}, but its output digests "
                f"{'equal' if got == digests['plain'] else 'differ from'} plain decoding's"
            )


PERCENT = re.compile(r"[+-]\d+(\.\d+)?%")


def _check_rounds(path: Path, record: dict) -> None:
    """openvino_rounds: per question set in the settings, one plain row (a positive step, 1.0 step) and
    each decoding once; a round's cost in steps its round ms over the step's, the tau a speed-up X needs
    X times that, lossless a bool; the out-of-sample errors percentages that are (predicted - measured) /
    measured of their rows; the strong drafts' predictions complete."""
    s = record["settings"]
    if not isinstance(s.get("target"), str):
        raise ValueError(f"{path}: settings name no target")
    kinds = s.get("questions")
    if not (isinstance(kinds, dict) and kinds and all(_positive(n) and isinstance(n, int) for n in kinds.values())):
        raise ValueError(f"{path}: settings' questions = {kinds!r}, not a count for each question set")
    steps: dict = {}
    for i, r in enumerate(record["rows"]):
        where = f"{path}: row {i}"
        if not isinstance(r["questions"], str) or r["questions"] not in kinds:
            raise ValueError(f"{where}: questions {r['questions']!r}, not one of the settings' {sorted(kinds)}")
        if r["decoding"] == "plain":
            if not (_positive(r["round ms"]) and r["round / step"] == 1.0):
                raise ValueError(f"{where}: plain decoding's round ms {r['round ms']!r} and round / step 1.0 expected")
            if r["questions"] in steps:
                raise ValueError(f"{where}: a second plain row for the {r['questions']} questions")
            steps[r["questions"]] = r["round ms"]
    seen = set()
    for i, r in enumerate(record["rows"]):
        where = f"{path}: row {i}"
        if r["decoding"] == "plain":
            continue
        _most_tokens(where, r["decoding"])
        if (r["questions"], r["decoding"]) in seen:
            raise ValueError(f"{where}: {r['decoding']} on the {r['questions']} questions twice")
        seen.add((r["questions"], r["decoding"]))
        if r["questions"] not in steps:
            raise ValueError(f"{path}: no plain decoding row for the {r['questions']} questions")
        for field in [f for f in r if f in ("round ms", "round / step") or f.startswith("tau for ")]:
            if not _positive(r[field]):
                raise ValueError(f"{where}: {field} = {r[field]!r}, not a positive number")
        if abs(r["round / step"] - r["round ms"] / steps[r["questions"]]) > 0.002 + 0.001 * r["round / step"]:
            raise ValueError(
                f"{where}: round / step {r['round / step']}, but {r['round ms']} ms over the step's "
                f"{steps[r['questions']]} is {r['round ms'] / steps[r['questions']]:.3f}"
            )
        for field in [f for f in r if f.startswith("tau for ")]:
            speedup = float(field.removeprefix("tau for ").removesuffix("x"))
            if abs(r[field] - speedup * r["round / step"]) > 0.003 * speedup:
                raise ValueError(
                    f"{where}: {field} {r[field]}, but {speedup}x at {r['round / step']} steps a round needs {speedup * r['round / step']:.3f}"
                )
        if "lossless" in r and not isinstance(r["lossless"], bool):
            raise ValueError(f"{where}: lossless = {r['lossless']!r}, not true or false")
    details = record.get("details", {})
    if not isinstance(details, dict):
        raise ValueError(f"{path}: details = {details!r}, not a mapping")
    for i, r in enumerate(details.get("out_of_sample") or []):
        where = f"{path}: out-of-sample row {i}"
        if not (isinstance(r, dict) and isinstance(r.get("error"), str) and PERCENT.fullmatch(r["error"])):
            raise ValueError(
                f"{where}: error {r.get('error') if isinstance(r, dict) else r!r} is not a percentage (+x.x%)"
            )
        measured, predicted = r.get("speed-up measured"), r.get("predicted")
        if not (_positive(measured) and _positive(predicted)):
            raise ValueError(f"{where}: speed-up measured and predicted must be positive numbers")
        error = 100 * (predicted - measured) / measured
        if abs(float(r["error"].rstrip("%")) - error) > 0.15:
            raise ValueError(f"{where}: error {r['error']}, but (predicted - measured) / measured is {error:+.1f}%")
    for i, r in enumerate(details.get("strong_predictions") or []):
        fields = ("replay tau", "predicted speed-up (decode)", "tau for 1.3x", "questions")
        if (
            not isinstance(r, dict)
            or not all(_positive(r.get(f)) for f in fields)
            or not all(isinstance(r.get(f), str) and r[f] for f in ("draft", "tree"))
        ):
            raise ValueError(
                f"{path}: strong prediction row {i} lacks a positive {', '.join(fields)} or its draft and tree"
            )


def engine_check(folder: Path = BENCH) -> list[str]:
    """The engine check's finding: lossless runs, agreement with elsi's loop, the best speed-up named as
    the best, the median over the drafts' lossless runs; [] without the record."""
    path = Path(folder) / "engines_openvino.json"
    if not path.is_file():
        return []
    record = _read(path, ("draft", "decoding", "tau OpenVINO", "tau elsi", "lossless", "tok/s", "vs plain"))
    _check_check(path, record)
    s, m = record["settings"], record["machine"]
    runs = [r for r in record["rows"] if r["draft"] != "plain decoding" and not r["draft"].endswith("(control)")]
    if not runs:
        raise ValueError(f"{path}: no draft's run")
    lossless = [r for r in runs if r["lossless"] is True]
    agree = [abs(r["tau OpenVINO"] - r["tau elsi"]) for r in runs if isinstance(r["tau elsi"], (int, float))]
    speedups = sorted(r["vs plain"] for r in lossless)
    best = max(lossless, key=lambda r: r["vs plain"]) if lossless else None
    line = (
        f"**OpenVINO GenAI {s['openvino-genai']}** ({m['cpu']}, {m['date'][:10]}) served elsi's drafts on "
        f"{s['questions']} SpecBench questions, {s['max_tokens']} tokens each: {len(lossless)} of {len(runs)} runs "
        "(chains and trees) gave plain decoding's tokens exactly"
    )
    if agree:
        line += (
            f"; tokens per target forward within {max(agree):.3f} of elsi's own loop on the same drafts and "
            f"questions ({len(agree)} runs)"
        )
    if best is not None:
        line += (
            f". Speed-up over its own plain decoding: median {float(np.median(speedups)):.2f}x over the lossless "
            f"runs (range {speedups[0]:.2f}-{speedups[-1]:.2f}x); the best, {best['vs plain']}x, is {best['draft']} "
            f"with {best['decoding']} (tau {best['tau OpenVINO']})"
        )
    runs_each = repeats(s, path)
    short = [f"the {MIN_QUESTIONS} questions"] * (s["questions"] < MIN_QUESTIONS)
    short += [f"the {MIN_REPEATS} repeats"] * (runs_each < MIN_REPEATS)
    if short:
        line += (
            f"; {s['questions']} questions, each run {'once' if runs_each == 1 else f'{runs_each} times'}: fewer "
            f"than {' and '.join(short)} a wall-clock claim needs, so these speed-ups are a check's, not a measurement"
        )
    return [line + "."]


def round_costs(folder: Path = BENCH) -> list[str]:
    """Per target: a plain step, each shape's round in plain steps, the tokens per round 1.3x needs on the
    trees, the cost model's out-of-sample accuracy and the strong drafts' predicted speed-ups."""
    lines = []
    for path in sorted(Path(folder).glob("openvino_rounds_*.json")):
        record = _read(path, ("questions", "decoding", "round ms", "round / step"))
        _check_rounds(path, record)
        s, m = record["settings"], record["machine"]
        for kind in dict.fromkeys(r["questions"] for r in record["rows"]):
            rows = [r for r in record["rows"] if r["questions"] == kind]
            plain = next((r for r in rows if r["decoding"] == "plain"), None)
            if plain is None:
                raise ValueError(f"{path}: no plain decoding row for the {kind} questions")
            shapes = [r for r in rows if r["decoding"] != "plain"]
            lines.append(
                f"**OpenVINO GenAI, {s['target']}, {kind} questions** ({m['cpu']}, {m['date'][:10]}): a plain "
                f"decoding step {plain['round ms']} ms; one round costs "
                + ", ".join(f"{r['round / step']}x a step ({r['decoding']})" for r in shapes)
                + "; so 1.3x plain decoding needs tokens per round of "
                + ", ".join(f"{r['tau for 1.3x']} ({r['decoding']})" for r in shapes if "tau for 1.3x" in r)
                + "".join(
                    f"; {r['decoding']} changed the output with an untrained draft (lossy)"
                    for r in shapes
                    if r.get("lossless") is False
                )
                + "."
            )
        details = record.get("details", {})
        oos = details.get("out_of_sample") or []
        if oos:
            errors = [abs(float(str(r["error"]).rstrip("%"))) / 100 for r in oos]
            lines.append(
                f"The cost model on {s['target']} in OpenVINO GenAI, out of sample (each trained draft's speed-up "
                "from its tokens per round and the untrained draft's round costs alone): "
                f"{sum(e <= TOLERANCE for e in errors)} of {len(errors)} runs within 10% of the measured speed-up "
                f"(worst {100 * max(errors):.1f}%)."
            )
        for r in details.get("strong_predictions") or []:
            lines.append(
                f"Predicted, not measured: {r['draft']} made tau {r['replay tau']} on {r['questions']} mixed "
                f"questions in elsi's replay ({r['tree']}); at this machine's round cost that is "
                f"{r['predicted speed-up (decode)']}x plain decoding in OpenVINO GenAI (1.3x needs tau {r['tau for 1.3x']})."
            )
    return lines


WALLCLOCK_FIELDS = ("questions", "decoding", "tau", "lossless", "round ms", "speed-up median", "range")
RANGE = re.compile(r"(?P<low>\d+(\.\d+)?)-(?P<high>\d+(\.\d+)?)")
NEEDS = re.compile(r"tau for (?P<n>\d+(\.\d+)?)x")  # what a chain of the row's round cost needs for N x plain


def _whole_count(n) -> bool:
    return isinstance(n, int) and not isinstance(n, bool) and n >= 1


def _check_wallclock(path: Path, record: dict) -> dict[str, list[dict]]:
    """openvino_wallclock: the settings' question counts and repeats; per question set one plain row and
    one row a chain; a chain's tau within [1, k + 1], lossless a bool, a speed-up (median, its range over
    the rounds around it) only where lossless, a positive round cost; where the details keep each round's
    output digests, lossless is what they say. Returns the rows by question set."""
    s = record["settings"]
    runs_each = repeats(s, path)
    counts = s.get("questions")
    if not isinstance(counts, dict) or not counts or not all(_whole_count(n) for n in counts.values()):
        raise ValueError(f"{path}: settings' questions = {counts!r}, not a count per question set")
    lacking = [f for f in ("engine", "draft", "max_tokens", "repeat") if f not in s]
    if lacking:
        raise ValueError(f"{path}: settings lack {lacking}")
    by_set: dict[str, list[dict]] = {}
    for i, r in enumerate(record["rows"]):
        where = f"{path}: row {i}"
        kind = str(r["questions"]).split(" (")[0]
        if kind not in counts or r["questions"] != f"{kind} ({counts[kind]})":
            raise ValueError(f"{where}: questions {r['questions']!r} is no question set of the settings {counts}")
        if not _positive(r["round ms"]):
            raise ValueError(f"{where}: round ms = {r['round ms']!r}, not a positive time")
        by_set.setdefault(kind, []).append(r)
        if r["decoding"] == "plain":
            continue
        most = _most_tokens(where, r["decoding"])
        if not (_positive(r["tau"]) and 1 <= r["tau"] <= most + 1e-9):
            raise ValueError(f"{where}: tau = {r['tau']!r}, not a number in [1, {most}]")
        if not isinstance(r["lossless"], bool):
            raise ValueError(f"{where}: lossless = {r['lossless']!r}, not true or false")
        digests = ((record.get("details") or {}).get(kind) or {}) if isinstance(record.get("details"), dict) else {}
        if "plain" in digests:  # every round holds one digest a question, for plain and each chain alike
            _check_digest_counts(where, digests, ("plain", r["decoding"]), counts[kind])
        if r["decoding"] in digests and "plain" in digests:  # either way: lossless is what the digests say
            rounds = list(zip(digests["plain"], digests[r["decoding"]]))
            if len(rounds) != runs_each or (all(p["digests"] == c["digests"] for p, c in rounds)) != r["lossless"]:
                raise ValueError(
                    f"{where}: lossless {r['lossless']}, but its {len(rounds)} rounds' output digests say otherwise"
                )
        if not r["lossless"]:
            if _positive(r["speed-up median"]):
                raise ValueError(f"{where}: a lossy run with a speed-up ({r['speed-up median']}): none is reported")
            continue
        span = RANGE.fullmatch(str(r["range"]))
        if not (
            _positive(r["speed-up median"])
            and span
            and float(span["low"]) <= r["speed-up median"] <= float(span["high"])
        ):
            raise ValueError(
                f"{where}: speed-up {r['speed-up median']!r} not a positive median within its range {r['range']!r}"
            )
        if (
            r["decoding"] in digests and "plain" in digests
        ):  # the speed-up is the rounds' plain seconds over the chain's
            seconds = [(p.get("seconds"), c.get("seconds")) for p, c in rounds]
            if not all(_positive(a) and _positive(b) for a, b in seconds):
                raise ValueError(f"{where}: its rounds' seconds {seconds} are not all positive times")
            _check_speedups(where, r, [a / b for a, b in seconds], span)
    for kind, rows in by_set.items():
        if [r["decoding"] for r in rows].count("plain") != 1 or len({r["decoding"] for r in rows}) != len(rows):
            raise ValueError(f"{path}: the {kind} questions need one plain row and one row a chain")
    for i, r in enumerate(record["rows"]):
        if r["decoding"] != "plain":
            rows = by_set[str(r["questions"]).split(" (")[0]]
            _check_needs(f"{path}: row {i}", r, next(x for x in rows if x["decoding"] == "plain")["round ms"])
    return by_set


def _check_digest_counts(where: str, digests: dict, decodings: tuple[str, ...], questions: int) -> None:
    """Where the details keep the plain rounds' output digests, a chain's are kept too, and every
    round holds one a question of the set: lossless is never read off some of the questions."""
    for decoding in decodings:
        if decoding not in digests:
            raise ValueError(f"{where}: the details keep the plain rounds' output digests but not {decoding!r}'s")
        held = [len(run.get("digests") or []) if isinstance(run, dict) else None for run in digests[decoding]]
        if any(n != questions for n in held):
            raise ValueError(
                f"{where}: {decoding!r} rounds hold {held} output digests, not one for each of the {questions} questions"
            )


def _check_speedups(where: str, r: dict, speedups: list[float], span) -> None:
    """A row's speed-up median and range are its rounds' (within the decimals they are written with)."""
    got = (statistics.median(speedups), min(speedups), max(speedups))
    written = (r["speed-up median"], float(span["low"]), float(span["high"]))
    if not all(abs(g - w) <= half_unit(w) + 1e-9 for g, w in zip(got, written)):
        raise ValueError(
            f"{where}: speed-up {r['speed-up median']} (range {r['range']}), but its rounds' plain seconds over the "
            f"chain's give {got[0]:.3f} (range {got[1]:.3f}-{got[2]:.3f})"
        )


def _check_needs(where: str, r: dict, plain_ms: float) -> None:
    """ "tau for Nx" is N x the row's round ms over the plain step, each as rounded where written."""
    for field in [f for f in r if NEEDS.fullmatch(f) and _positive(r[f])]:
        n = float(NEEDS.fullmatch(field)["n"])
        if not ratio_holds(r[field], r["round ms"], plain_ms, scale=n):
            raise ValueError(
                f"{where}: {field} = {r[field]}, but {n:g} x its round ms {r['round ms']} over the plain step "
                f"{plain_ms} ms is {n * r['round ms'] / plain_ms:.3f}"
            )


def wallclock(folder: Path = BENCH) -> list[str]:
    """Per record and question set: the median speed-up over plain decoding with its range over the
    rounds, per chain; the best named as the best; what 1.3x would need at the measured round cost; a
    set of fewer than MIN_QUESTIONS questions or MIN_REPEATS rounds said to be short of a claim."""
    lines = []
    for path in sorted(Path(folder).glob("openvino_wallclock_*.json")):
        record = _read(path, WALLCLOCK_FIELDS)
        by_set = _check_wallclock(path, record)
        s, m = record["settings"], record["machine"]
        for kind, rows in by_set.items():
            chains = [r for r in rows if r["decoding"] != "plain"]
            lossless = [r for r in chains if r["lossless"] is True]
            line = (
                f"**{s['engine']}, {s['draft']}, {kind} questions** ({m['cpu']}, {m['date'][:10]}; {s['questions'][kind]} "
                f"questions, {s['max_tokens']} new tokens, {s['repeat']} rounds): "
            )
            line += "; ".join(
                f"{r['decoding']} {r['speed-up median']}x plain decoding (range {r['range']}, tau {r['tau']})"
                if r["lossless"]
                else f"{r['decoding']} changed the output (lossy: no speed-up)"
                for r in chains
            )
            if lossless:
                best = max(lossless, key=lambda r: r["speed-up median"])
                line += (
                    f". The best is {best['decoding']}, {best['speed-up median']}x; at its round cost ({best['round ms']} ms "
                    f"against a plain step of {next(r for r in rows if r['decoding'] == 'plain')['round ms']} ms) 1.3x needs tau {best.get('tau for 1.3x', '?')}"
                )
            short = [f"the {MIN_QUESTIONS} questions"] * (s["questions"][kind] < MIN_QUESTIONS)
            short += [f"the {MIN_REPEATS} repeats"] * (s["repeat"] < MIN_REPEATS)
            if short:
                line += (
                    f"; fewer than {' and '.join(short)} a wall-clock claim needs: a check's numbers, not a measurement"
                )
            lines.append(line + ".")
    return lines
