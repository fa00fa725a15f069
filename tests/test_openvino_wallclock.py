"""bench/bench_openvino_wallclock.py's summary of timed rounds (the OpenVINO runs themselves need
.venv-openvino): speed-ups per round against the same round's plain decoding, a lossy chain given none,
the round cost and the tau a chain of that cost needs."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from bench_openvino_wallclock import summary  # noqa: E402


def one_run(seconds, tokens, accepted=0, prefill=0.5):
    generated = sum(map(len, tokens))
    return {
        "tokens": tokens,
        "seconds": seconds,
        "prefill_seconds": [prefill / len(tokens)] * len(tokens),
        "generated": generated,
        "accepted": accepted,
        "rounds": generated - len(tokens) - accepted,
    }


PLAIN = [[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]]  # 2 questions, 10 tokens: 8 decode steps


def test_speed_ups_pair_each_round_with_its_own_plain_run():
    runs = {
        "plain": [one_run(8.5, PLAIN), one_run(10.5, PLAIN)],
        "chain k=1": [one_run(4.5, PLAIN, accepted=4), one_run(7.5, PLAIN, accepted=4)],
    }
    rows, details = summary("mixed", runs, 2)
    chain = rows[1]
    assert chain["lossless"] is True
    assert chain["speed-up median"] == pytest.approx((8.5 / 4.5 + 10.5 / 7.5) / 2, abs=1e-3)
    assert chain["range"] == f"{10.5 / 7.5:.3f}-{8.5 / 4.5:.3f}"
    assert chain["tau"] == pytest.approx(8 / 4)  # 8 tokens after the first, in 4 rounds
    step = (8.0 / 8 + 10.0 / 8) / 2  # plain's decode seconds per token, median of the rounds
    round_s = (4.0 / 4 + 7.0 / 4) / 2
    assert chain["tau for 1.3x"] == pytest.approx(1.3 * round_s / step, abs=1e-3)
    assert len(details["chain k=1"]) == 2 and details["plain"][0]["digests"] == details["chain k=1"][1]["digests"]


def test_a_chain_whose_tokens_part_from_plain_decoding_gets_no_speed_up():
    other = [[1, 2, 3, 4, 5], [6, 7, 8, 9, 11]]
    runs = {"plain": [one_run(8.5, PLAIN)] * 2, "chain k=2": [one_run(4.5, PLAIN), one_run(4.5, other)]}
    chain = summary("coding", runs, 2)[0][1]
    assert chain["lossless"] is False
    assert chain["speed-up median"] == "lossy: none" and chain["range"] == ""


def test_plain_decoding_that_changes_between_rounds_is_said():
    other = [[1, 2, 3, 4, 5], [6, 7, 8, 9, 11]]
    assert (
        summary("mixed", {"plain": [one_run(8.5, PLAIN), one_run(8.5, other)]}, 2)[1]["plain the same in every round"]
        is False
    )
    assert (
        summary("mixed", {"plain": [one_run(8.5, PLAIN), one_run(9.5, PLAIN)]}, 2)[1]["plain the same in every round"]
        is True
    )


def _record(tmp_path, questions=2, repeat=2):
    from record import write

    other = [[1, 2, 3, 4, 5], [6, 7, 8, 9, 11]]
    runs = {
        "plain": [one_run(8.5, PLAIN)] * repeat,
        "chain k=1": [one_run(6.5, PLAIN, accepted=2)] * repeat,
        "chain k=2": [one_run(4.5, other, accepted=4)] * repeat,
    }
    rows, details = summary("mixed", runs, questions)
    settings = {"engine": "OpenVINO GenAI 0", "draft": "p m seed 0 (layers [1, 2, 3])", "questions": {"mixed": questions},
                "max_tokens": 5, "repeat": repeat, "chains": [1, 2]}  # fmt: skip
    write("openvino_wallclock_test", settings, rows, folder=tmp_path, details={"mixed": details})
    return tmp_path / "openvino_wallclock_test.json"


def test_the_page_names_the_best_chain_says_the_lossy_one_and_a_short_run(tmp_path):
    from elsi_lib.study.pages.speed_openvino import wallclock

    _record(tmp_path)
    (line,) = wallclock(tmp_path)
    assert f"chain k=1 {round(8.5 / 6.5, 3)}x plain decoding" in line
    assert "chain k=2 changed the output (lossy: no speed-up)" in line
    assert "The best is chain k=1" in line
    assert "fewer than the 40 questions and the 3 repeats" in line


def test_the_page_refuses_a_record_whose_digests_contradict_its_lossless_column(tmp_path):
    import json

    from elsi_lib.study.pages.speed_openvino import wallclock

    path = _record(tmp_path)
    record = json.loads(path.read_text())
    record["rows"][2].update({"lossless": True, "speed-up median": 1.8, "range": "1.800-1.900"})
    path.write_text(json.dumps(record))
    with pytest.raises(ValueError, match="row 2: lossless True, but its 2 rounds' output digests"):
        wallclock(tmp_path)
    flipped = json.loads(path.read_text())  # the other way: lossless runs recorded as lossy
    flipped["rows"][1].update({"lossless": False, "speed-up median": "lossy: none", "range": ""})
    path.write_text(json.dumps(flipped))
    with pytest.raises(ValueError, match="row 1: lossless False, but its 2 rounds' output digests"):
        wallclock(tmp_path)
    record["rows"][1]["speed-up median"] = 9.0  # outside its own range
    record["rows"][2].update({"lossless": False, "speed-up median": "lossy: none", "range": ""})
    path.write_text(json.dumps(record))
    with pytest.raises(ValueError, match="row 1: speed-up 9.0 not a positive median within its range"):
        wallclock(tmp_path)


@pytest.mark.parametrize(
    "change, reason",
    [
        (  # a median and range its rounds' seconds do not give
            lambda r: r["rows"][1].update({"speed-up median": 1.5, "range": "1.400-1.600"}),
            r"row 1: speed-up 1.5 \(range 1.400-1.600\), but its rounds' plain seconds over the chain's give 1.308",
        ),
        (  # a tau for 1.3x that the round costs do not give
            lambda r: r["rows"][1].update({"tau for 1.3x": 1.05}),
            r"row 1: tau for 1.3x = 1.05, but 1.3 x its round ms .* over the plain step",
        ),
        (  # the plain step changed: every chain's need contradicts it
            lambda r: r["rows"][0].update({"round ms": 5000.0}),
            r"row 1: tau for 1.3x = .*, but 1.3 x its round ms",
        ),
        (lambda r: r["settings"].pop("repeat"), r"settings lack \['repeat'\]"),
        (  # lossless read off some of the questions only
            lambda r: [
                run.update(digests=run["digests"][:1])
                for runs in r["details"]["mixed"].values()
                if isinstance(runs, list)
                for run in runs
            ],
            r"row 1: 'plain' rounds hold \[1, 1\] output digests, not one for each of the 2 questions",
        ),
        (  # a chain's digests dropped: its lossless then rests on nothing
            lambda r: r["details"]["mixed"].pop("chain k=1"),
            r"row 1: the details keep the plain rounds' output digests but not 'chain k=1''s",
        ),
    ],
)
def test_the_page_refuses_speed_ups_and_needs_the_record_itself_contradicts(tmp_path, change, reason):
    """The speed-up median and range are the rounds' plain seconds over the chain's, "tau for Nx" is N x the
    round cost over the plain step, and a record names its repeats: a number the record's own details or
    rows contradict is refused naming the row and the field, not shown on the page."""
    import json

    from elsi_lib.study.pages.speed_openvino import wallclock

    path = _record(tmp_path)
    assert wallclock(tmp_path)  # as written: accepted
    record = json.loads(path.read_text())
    change(record)
    path.write_text(json.dumps(record))
    with pytest.raises(ValueError, match=reason):
        wallclock(tmp_path)
