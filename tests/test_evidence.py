"""The evidence file `elsi select` reads (elsi_lib/evidence.json, `make evidence`) and the decision it
gives: the file is the committed records' (its provenance names each record's sha256), an altered,
missing or foreign file is refused with its reason, and the verdict never contradicts a family's own
drafts."""

import hashlib
import json
import re
from pathlib import Path

import pytest
from scipy import stats as scipy_stats

from elsi_lib.draft import evidence as ev
from elsi_lib.draft.decision import decide, fit, widening
from elsi_lib.common.cachefiles import REPO_ROOT
from elsi_lib.inputs.models import REGISTRY


@pytest.fixture(scope="module")
def evidence():
    return ev.load()


def test_the_file_is_the_committed_records(evidence):
    """Its provenance holds every committed record with the sha256 it has now: a record added or changed
    without `make evidence` fails here."""
    root = REPO_ROOT / "data" / "drafts"  # the committed records (the tests' own records folder is elsewhere)
    now = {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.glob("*/*.json"))}
    assert evidence["provenance"]["records"] == now


@pytest.mark.parametrize(
    "change, reason",
    [
        (lambda d: d["comparisons"][0].update(diff=9.0), "checksum"),
        (lambda d: d.update(schema=99), "schema 99"),
        (lambda d: d.pop("checksum"), "checksum"),
    ],
)
def test_an_altered_or_foreign_file_is_refused_with_why(evidence, tmp_path, change, reason):
    data = json.loads(json.dumps(evidence))
    change(data)
    path = tmp_path / "evidence.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ev.EvidenceUnavailable, match=reason):
        ev.load(path)
    with pytest.raises(ev.EvidenceUnavailable, match="no evidence file"):
        ev.load(tmp_path / "missing.json")
    path.write_text("{not json")
    with pytest.raises(ev.EvidenceUnavailable, match="not readable JSON"):
        ev.load(path)


def test_the_verdict_never_contradicts_a_familys_own_drafts(evidence):
    """For every draft of a criterion's set that trails EAGLE3's at some temperature (interval below
    zero), deciding between that set and the default never says "change", whatever the criterion's
    difference, on both families and with the pooled fit."""
    trailing = [
        c for c in evidence["comparisons"] if c["nodes"] == ev.NODES and c["high"] is not None and c["high"] < 0
    ]
    assert trailing, "the committed records hold drafts that trail EAGLE3"
    default = tuple(map(int, trailing[0]["baseline layers"].split()))
    for c in trailing:
        best = tuple(map(int, c["layers"].split()))
        for method in ("probe", "elsi"):
            for dscore in (-1.0, 0.0, 1.0):
                made = ev.decision(method, c["family"], dscore, best, default, evidence)
                assert made.verdict != "change", (c["protocol"], c["method"], made.reason)


def test_a_strong_enough_prediction_changes_the_set():
    """The rule itself: intervals above zero at every temperature -> change; one holding zero -> keep."""
    x = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    up = fit(["a"] * 6, x, [0.1 + 0.5 * v + e for v, e in zip(x, (0.01, -0.01, 0.0, 0.01, -0.01, 0.0))], pooled=True)
    flat = fit(["a"] * 6, x, [0.0, 0.3, -0.3, 0.3, -0.3, 0.0], pooled=True)
    assert up is not None and flat is not None
    assert decide({0.0: {"family": None, "pooled": up}}, None, 3.0, (5, 6), (1, 2)).verdict == "change"
    kept = decide({0.0: {"family": None, "pooled": flat}}, None, 3.0, (5, 6), (1, 2))
    assert kept.verdict == "keep the default" and "holds zero" in kept.reason
    trails = [{"temperature": 0.0, "diff": -0.1, "low": -0.2, "high": -0.01}]
    assert (
        decide({0.0: {"family": None, "pooled": up}}, None, 3.0, (5, 6), (1, 2), trails).verdict == "keep the default"
    )
    assert decide({0.0: {"family": None, "pooled": None}}, None, 3.0, (5, 6), (1, 2)).verdict == "no verdict"
    assert "is the default" in decide({}, None, 0.0, (1, 2), (1, 2)).reason


def test_a_fit_withheld_for_one_protocol_group_says_so(evidence):
    """Fits of one protocol group cannot be judged out of sample and are withheld: the reason says that,
    not that the ledger is too thin to fit (it named the wrong cause)."""
    import copy

    one_group = copy.deepcopy(evidence)
    for entry in one_group["models"]["probe error"].values():
        entry.update({"family": None, "pooled": None, "coverage": None})
    made = ev.decision("probe", "smollm2-135m", -0.05, (21, 27, 28), (1, 14, 26), one_group)
    assert made.verdict == "no verdict" and "judged out of sample" in made.reason and "too thin" not in made.reason
    assert "could be predicted from the others' drafts" in made.reason  # several groups: not "one protocol group"
    for entry in one_group["models"]["probe error"].values():
        entry["rests on"]["groups"] = 1
    made = ev.decision("probe", "smollm2-135m", -0.05, (21, 27, 28), (1, 14, 26), one_group)
    assert "its drafts come from one protocol group" in made.reason
    assert "not judged out of sample (its drafts come from one protocol group)" in " ".join(
        ev.rests_on(one_group, "probe")
    )
    thin = decide({0.0: {"family": None, "pooled": None}}, None, 3.0, (5, 6), (1, 2))
    assert "too thin" in thin.reason


def test_the_fit_each_temperature_used_is_named():
    """Where the family's fit holds one temperature and the pooled fit the other, the decision says which
    fit made which prediction (it named the last one used, "pooled", for both)."""
    x = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    y = [0.1 + 0.5 * v + e for v, e in zip(x, (0.01, -0.01, 0.0, 0.01, -0.01, 0.0))]
    own, pooled = fit(["a"] * 6, x, y, pooled=False), fit(["a"] * 6, x, y, pooled=True)
    assert own is not None and pooled is not None
    both = {0.0: {"family": own, "pooled": pooled}, 1.0: {"family": None, "pooled": pooled}}
    assert decide(both, "a", 3.0, (5, 6), (1, 2)).model == "family a at T = 0, pooled at T = 1"
    assert decide({0.0: both[0.0]}, "a", 3.0, (5, 6), (1, 2)).model == "family a"


def test_a_set_of_a_size_no_draft_had_gets_no_verdict(evidence):
    """The fits saw drafts of 1-, 2- and 3-layer sets: a set of another size is outside what they predict,
    so the answer says so instead of a prediction (the verdict the rule would give to a 3-layer set stays)."""
    sizes = {len(c["layers"].split()) for t in ("0", "1") for c in ev.points(evidence["comparisons"], float(t))}
    assert sizes and max(sizes) < 5
    default = (2, 15, 27)
    five = ev.decision("probe", "smollm2-135m", 1.0, (1, 2, 3, 4, 5), default, evidence)
    assert five.verdict == "no verdict" and "5-layer set" in five.reason and not five.predicted
    assert "3" in five.reason.split("fitted on drafts of ")[1].split("-layer")[0]
    three = ev.decision("probe", "smollm2-135m", 1.0, (1, 2, 3), default, evidence)
    assert three.verdict != "no verdict" and three.predicted
    up = fit(["a"] * 3, [0.0, 1.0, 2.0], [0.0, 0.5, 1.01], pooled=True)
    assert decide({0.0: {"family": None, "pooled": up}}, None, 3.0, (5, 6), (1, 2), sizes={3}).verdict == "no verdict"


def test_a_thin_ledger_fits_nothing():
    assert fit(["a", "a"], [0.0, 1.0], [0.0, 1.0], pooled=True) is None  # no residual degree of freedom
    assert fit(["a"] * 4, [1.0] * 4, [0.0, 1.0, 2.0, 3.0], pooled=True) is None  # one criterion value
    assert fit(["a"] * 4, [0.0, 1.0, float("nan"), 3.0], [0.0, 1.0, 2.0, 3.0], pooled=True) is None
    # x varies, but only between the families: their intercepts take it all, no slope is left to fit
    assert fit(["a", "a", "b", "b", "b"], [0.0, 0.0, 1.0, 1.0, 1.0], [0.1, 0.2, 0.3, 0.4, 0.5], pooled=False) is None
    up = fit(["a"] * 3, [0.0, 1.0, 2.0], [0.0, 0.5, 1.01], pooled=True)
    for nan in (float("nan"), float("inf")):  # a criterion difference that is no number gives no verdict
        made = decide({0.0: {"family": None, "pooled": up}}, None, nan, (5, 6), (1, 2))
        assert made.verdict == "no verdict" and "nothing to predict from" in made.reason


def test_intervals_are_widened_to_cover_out_of_sample(evidence):
    assert widening([0.5, 0.5, 2.0]) == 2.0 and widening([0.1] * 10) == 1.0
    for criterion, by_t in evidence["models"].items():
        for t, entry in by_t.items():
            assert entry["coverage widened"] >= 0.9, (criterion, t)
            ratios = [r["ratio"] for r in entry["out of sample"]]
            assert entry["coverage"] == pytest.approx(sum(r <= 1 for r in ratios) / len(ratios))


@pytest.mark.parametrize(
    "name, family",
    [
        ("smollm2-135m", "smollm2-135m"),
        ("SmolLM2-135M", None),  # the registry's name is exact (its loader refuses these capitals too)
        ("HuggingFaceTB/SmolLM2-135M-Instruct", "smollm2-135m"),
        ("{tmp}/models/Qwen2.5-Coder-0.5B-Instruct/", "qwen2.5-coder-0.5b"),  # a download's folder
        ("gemma3-270m", None),
        ("HuggingFaceTB/SmolLM2-135M", None),  # the base model: not the instruct family
        ("Qwen/Qwen2.5-Coder-0.5B", None),
        ("{tmp}/models/smollm2-135m", None),
        ("someone/SmolLM2-135M-Instruct", None),  # another owner's model (a fine-tune): not the family
        ("{tmp}/nowhere/Qwen2.5-Coder-0.5B-Instruct", None),  # no such folder: a hub id, of another owner
    ],
)
def test_a_bundled_family_is_matched_as_users_name_it(name, family, tmp_path):
    name = name.format(tmp=tmp_path)
    if "nowhere" not in name and name.startswith(str(tmp_path)):
        Path(name).mkdir(parents=True)
        (Path(name) / "config.json").write_text(
            json.dumps(_config("qwen2.5-coder-0.5b" if "Qwen" in name else "smollm2-135m"))
        )
    assert ev.family_of(name) == family


def _config(family: str, **changes) -> dict:
    """A config.json of the family's shape (what a hub download of it holds), with `changes`."""
    entry = REGISTRY[family]
    shape = {"num_hidden_layers": entry.n_layers, "hidden_size": entry.hidden_size, "vocab_size": entry.vocab_size}
    return {**shape, **changes}


def test_a_folder_named_as_the_family_holding_another_model_is_not_the_family(tmp_path):
    """A folder named Qwen2.5-Coder-0.5B-Instruct whose config gives 30 layers, or the family's 24 layers at
    another width or vocabulary (another model saved under that name) would get the family's fit and
    drafts: it is no family, nor is a folder without a config."""
    folder = tmp_path / "Qwen2.5-Coder-0.5B-Instruct"
    folder.mkdir()
    assert ev.family_of(str(folder)) is None
    for other in ({"num_hidden_layers": 30}, {"hidden_size": 16}, {"vocab_size": 32000}):
        (folder / "config.json").write_text(json.dumps(_config("qwen2.5-coder-0.5b", model_type="qwen2", **other)))
        assert ev.family_of(str(folder)) is None, other
    (folder / "config.json").write_text(json.dumps(_config("qwen2.5-coder-0.5b", model_type="qwen2")))
    assert ev.family_of(str(folder)) == "qwen2.5-coder-0.5b"


def test_a_hub_id_that_names_a_local_folder_is_judged_by_the_folder(tmp_path, monkeypatch):
    """Where a hub id is also a folder here, the loader reads the folder: its config decides the family."""
    folder = tmp_path / "HuggingFaceTB" / "SmolLM2-135M-Instruct"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(_config("smollm2-135m", num_hidden_layers=12)))
    monkeypatch.chdir(tmp_path)
    assert ev.family_of("HuggingFaceTB/SmolLM2-135M-Instruct") is None
    assert ev.family_of("HuggingFaceTB/SmolLM2-135M-Instruct/") is None
    (folder / "config.json").write_text(json.dumps(_config("smollm2-135m")))
    assert ev.family_of("HuggingFaceTB/SmolLM2-135M-Instruct") == "smollm2-135m"


def test_comparison_lines_say_the_seeds(evidence):
    lines = ev.comparison_lines(evidence, "qwen2.5-coder-0.5b", "elsi", 3)
    head = "evidence: ELSI m=3 drafts (layers 1 22 23) on qwen2.5-coder-0.5b ("
    strong = next(c for c in evidence["comparisons"] if c["protocol"] == "qwen_strong" and c["method"] == "ELSI m=3")
    seeds = f"{strong['seeds']} seed{'s' * (strong['seeds'] > 1)} against EAGLE3's {strong['baseline seeds']}"
    assert lines[0].startswith(head + f"qwen_strong: 4,744 training prompts, {seeds}")  # the most data first
    assert any(
        line.startswith("  " + head[len("evidence: ") :] + "table3_f32: 936") and "3 seeds against EAGLE3's 3" in line
        for line in lines
    )
    assert any("seed variance not measured" in line for line in lines)  # table3's single-seed bf16 drafts
    assert ev.comparison_lines(evidence, "some/other-model", "probe", 3)[0].startswith(
        "evidence: none of this model's own"
    )


def test_comparison_lines_say_when_the_drafts_set_is_not_the_answers(evidence):
    """The method's drafts may have chosen another set than this answer (another restriction, other data):
    said in the line; EAGLE2's drafts read the state after the final norm, which no engine id of the last
    layer gives: never quoted for its set."""
    mine = ev.comparison_lines(evidence, "qwen2.5-coder-0.5b", "elsi", 3, (1, 22, 23))[0]
    assert "(layers 1 22 23) on" in mine
    other = ev.comparison_lines(evidence, "qwen2.5-coder-0.5b", "elsi", 3, (1, 11, 22))[0]
    assert "(layers 1 22 23, not this answer's set) on" in other
    (eagle2,) = ev.comparison_lines(evidence, "smollm2-135m", "eagle2", 1, (29,))
    assert eagle2.startswith("evidence: none for this set: the EAGLE2 drafts here read") and "[" not in eagle2


def test_the_default_method_is_the_files(evidence):
    from elsi_lib.cli_args import build_parser

    assert build_parser().parse_args(["select", "--model", "x"]).method == evidence["default_method"]
    line = ev.criterion_line(evidence)
    row = next(
        r for r in evidence["pooled_criteria"] if r["criterion"] == "probe error" and r["outcome"] == "tau minus EAGLE3"
    )
    assert line is not None and f"rho {row['pooled rho']:+.2f}" in line
    assert ev.criterion_line(evidence, evidence["default_method"]) == line  # the answer used the default
    other = "elsi" if evidence["default_method"] == "probe" else "probe"
    assert f"by default; this answer compares --method {other}'s set" in ev.criterion_line(evidence, other)
    assert ev.criterion_line(evidence, "eagle2").endswith("this answer compares --method eagle2's set")


def _every_fit(data: dict, **change) -> None:
    for entries in data["models"].values():
        for entry in entries.values():
            for kind in ("family", "pooled"):
                if entry[kind] is not None:
                    entry[kind].update(change)


def _rows(data: dict, label: str | None, **change) -> None:
    """Change every comparison of the method `label` (every one when None)."""
    for c in data["comparisons"]:
        if label is None or c["method"] == label:
            c.update(change)


def _shift(data: dict, protocol: str, label: str, by: float) -> None:
    for c in data["comparisons"]:
        if c["protocol"] == protocol and c["method"] == label:
            c.update(diff=c["diff"] + by, low=c["low"] + by, high=c["high"] + by)


def _perfect_judgment(data: dict) -> None:
    """Every out-of-sample row made a hit and no widening: what a study bug would need to flip a verdict."""
    for entries in data["models"].values():
        for entry in entries.values():
            for row in entry["out of sample"]:
                row.update(measured=row["predicted"], ratio=0.0)
            entry.update({"coverage": 1.0, "coverage widened": 1.0, "widen": 1.0})
            for kind in ("family", "pooled"):
                if entry[kind] is not None:
                    entry[kind]["widen"] = 1.0


def _pooled(data: dict) -> dict:
    """The pooled row the default method and the criteria line read."""
    return next(
        r for r in data["pooled_criteria"] if r["criterion"] == "probe error" and r["outcome"] == "tau minus EAGLE3"
    )


def _weak_rho(p: float) -> dict:
    """The probe's pooled row given a rho near zero and a p of `p`."""
    return {
        "per protocol rho": "+0.00 +0.02 +0.01",
        "per protocol p": "0.990 0.970 0.980",
        "pooled rho": 0.01,
        "p (stratified permutation)": p,
    }


def _is(c: dict, protocol: str, label: str) -> bool:
    return c["protocol"] == protocol and c["method"] == label


def _seed_level(data: dict) -> dict:
    return next(c for c in data["comparisons"] if c["seed level"] == "yes")


def _with_df(c: dict, df: float) -> dict:
    """A comparison given the degrees of freedom `df`, its interval made what they give."""
    half = float(scipy_stats.t.ppf(0.975, df) * (c["questions variance"] + c["seed variance"]) ** 0.5)
    c.update(df=df, low=c["diff"] - half, high=c["diff"] + half)
    return c


def _with_variances(c: dict, by: float) -> dict:
    """A seed-level comparison whose seed variance is `by` times larger, its df and interval recomputed as
    Welch-Satterthwaite's (so only the protocol's other rows can tell)."""
    n, v_q, v_s = c["questions"], c["questions variance"], c["seed variance"]
    df_s = v_s**2 / ((v_q + v_s) ** 2 / c["df"] - v_q**2 / (n - 1))
    v_s *= by
    c["seed variance"] = v_s
    return _with_df(c, (v_q + v_s) ** 2 / (v_q**2 / (n - 1) + v_s**2 / round(df_s)))


def _first(data: dict, label: str, temperature: float) -> dict:
    return next(c for c in data["comparisons"] if c["method"] == label and c["temperature"] == temperature)


def _resealed(data: dict) -> dict:
    payload = {k: v for k, v in data.items() if k != "checksum"}
    return {**payload, "checksum": hashlib.sha256(ev.canonical(payload)).hexdigest()}


@pytest.mark.parametrize(
    "change, reason",
    [
        (lambda d: d["comparisons"][0].update(low=d["comparisons"][0]["high"] + 1), "does not hold its diff"),
        (lambda d: d["comparisons"].append(dict(d["comparisons"][0])), "listed twice"),
        (lambda d: d["comparisons"][0].update(seeds="3"), r"seeds = '3', not an integer"),
        (lambda d: d["comparisons"][0].update(seeds=True), r"seeds = True, not an integer"),
        (lambda d: d["comparisons"][0].update({"baseline seeds": -3}), r"baseline seeds = -3"),
        (lambda d: d["comparisons"][0].pop("low"), r"comparison 0 .*: low = None, not a number"),
        (lambda d: d["comparisons"][0].update(diff="0.1"), r"diff = '0.1', not a number"),
        (lambda d: d["comparisons"][0].update(prompts="4744"), r"prompts = '4744', not an integer"),
        (lambda d: d["comparisons"][0].update(protocol=d["comparisons"][0]["protocol"] + " "), "not a name"),
        (lambda d: d["comparisons"][0].update(temperature=-1), "temperature = -1"),
        (lambda d: d["pooled_criteria"].append(dict(d["pooled_criteria"][0])), "listed twice"),
        (
            lambda d: d["pooled_criteria"][0].update({"p (stratified permutation)": 7.0}),
            r"p \(stratified permutation\) = 7.0",
        ),
        (lambda d: d["pooled_criteria"][0].update({"pooled rho": 3.0}), "pooled rho = 3.0"),
        (lambda d: d["pooled_criteria"][0].pop("p (stratified permutation)"), r"p \(stratified permutation\) = None"),
        (lambda d: d.update(pooled_criteria=None), "must be lists"),
        (lambda d: d.update(default_method="eagle3"), "default_method"),
        (
            lambda d: d.update(default_method="elsi" if d["default_method"] == "probe" else "probe"),
            "pooled criteria row gives",
        ),
        (lambda d: d.pop("models"), "no 'models'"),
        (lambda d: d.update(nodes=30), "nodes 30; elsi's readers compare at 60"),
        (
            lambda d: d.update(
                pooled_criteria=[r for r in d["pooled_criteria"] if r["criterion"] != "probe error"],
                default_method="elsi",
            ),
            r"pooled criteria rows for \[\('probe error', 'step 1'\), \('probe error', 'tau minus EAGLE3'\)\] missing",
        ),
        (lambda d: d.update(pooled_criteria=[], default_method="elsi"), "pooled criteria rows for .* missing"),
        (lambda d: d["models"]["probe error"]["0"].update(family=None), r"\['family'\]: no fit, but its"),
        (
            lambda d: d["provenance"]["records"].update({"../../etc/qwen_strong/eagle3-seed0.json": "0" * 64}),
            r"provenance must name each record it rests on \(<protocol>/<unit>.json\)",
        ),
        (lambda d: d["models"].update({"probe error": {}}), "no fits for 'probe error'"),
        (lambda d: d["models"]["probe error"].pop("1"), r"holds temperatures \[0.0\], the comparisons \[0.0, 1.0\]"),
        (lambda d: d["models"]["probe error"]["0"]["family"].update(s2=-1.0), "s2 = -1.0"),
        (lambda d: d["models"]["probe error"]["0"]["family"].update(df=0), "df = 0"),
        (lambda d: d["models"]["probe error"]["0"]["family"].update(widen=0.01), "widen = 0.01"),
        (lambda d: d["models"]["probe error"]["0"]["family"].update(beta=[1.0]), "beta has 1 terms"),
        (lambda d: d["models"]["probe error"]["0"]["family"].update(extra=1), "must hold exactly"),
        (lambda d: d["models"]["probe error"]["0"].update(coverage=1.5), "coverage = 1.5"),
        (lambda d: d["models"]["probe error"]["0"]["rests on"].update(seeds=0), "rests on seeds = 0"),
        (
            lambda d: d["models"]["probe error"].update({"0.0": d["models"]["probe error"]["0"]}),
            "one temperature twice",
        ),
        (
            lambda d: d["models"]["probe error"]["0"]["family"].update(
                xtx_inv=[[0.0 if i == j else -100.0 for j in range(3)] for i in range(3)]
            ),
            "not a symmetric positive definite",
        ),
        (lambda d: d["models"]["probe error"]["0"]["family"].update(columns=[1, 2, "slope"]), "distinct group names"),
        (lambda d: d["models"]["probe error"]["0"]["family"].update(widen=5.0), "the entry says"),
        (lambda d: d["comparisons"][0].update(family="Qwen2.5-Coder-0.5B"), "not one of the ledger's"),
        (
            lambda d: d["comparisons"][0].update({"seed level": "yes", "seeds": 1, "baseline seeds": 1}),
            "seed level 'yes'",
        ),
        (lambda d: d["pooled_criteria"][0].pop("protocols"), "protocols = None"),
        (lambda d: d["pooled_criteria"][0].update({"per protocol rho": "+0.5"}), "not one value for each"),
        (lambda d: d["pooled_criteria"][0].update(drafts=4), "fewer than the 3 a rank test needs"),
        (
            lambda d: d["models"]["probe error"]["0"]["rests on"].update(drafts=19),
            r"rests on drafts 19, its comparisons give \d+",
        ),
        (
            lambda d: d["models"]["probe error"]["0"]["rests on"].update(groups=7),
            "rests on groups 7, its comparisons give 3",
        ),
        (
            lambda d: d["models"]["probe error"]["0"]["out of sample"][0].update(ratio=0.0),
            "out-of-sample rows are not what",
        ),
        (
            lambda d: d["models"]["probe error"]["0"]["out of sample"][0].update(protocol="table9"),
            "out-of-sample rows are not what",
        ),
        (lambda d: d["models"]["probe error"]["0"]["out of sample"][0].pop("half"), "out-of-sample rows are not what"),
        (lambda d: d["models"]["set entropy"]["1"].update(coverage=0.95), "coverage = 0.95, its out-of-sample rows"),
        (
            lambda d: d["models"]["set entropy"]["0"].update({"coverage widened": 1.0}),
            "coverage widened = 1.0, its out-of-sample rows",
        ),
        (
            lambda d: d["models"]["probe error"]["0"]["rests on"].update(families=["smollm2-135m"]),
            r"rests on families \['smollm2-135m'\], its comparisons give",
        ),
        (lambda d: d["models"]["probe error"]["0"].update({"out of sample": []}), "out-of-sample rows are not what"),
        # a fit that is not its comparisons', sets and baselines that are not what the labels and the rule
        # say, counts and intervals that contradict each other
        (lambda d: _every_fit(d, s2=1e-300), r"\['family'\]: not the fit its \d+ comparisons"),
        (lambda d: _every_fit(d, df=100000), r"not the fit its \d+ comparisons"),
        (lambda d: d["models"]["probe error"]["0"]["rests on"].update(seeds=1000), "rests on seeds 1000"),
        (lambda d: _rows(d, "probe m=3", layers="19"), "a label says its set's size"),
        (lambda d: _rows(d, "probe m=3", layers="abc"), "layers = 'abc', not ascending distinct layer ids"),
        (lambda d: _rows(d, "probe m=3", layers="21 28 31"), "not ascending distinct layer ids of the family's"),
        (lambda d: _rows(d, None, baseline="ELSI m=1"), "every comparison is against EAGLE3's rule's set"),
        (lambda d: _rows(d, None, **{"baseline layers": "5 6 7"}), "every comparison is against EAGLE3's"),
        (lambda d: _rows(d, "probe m=3", **{"method": "FOO m=4"}), "'FOO m=4' is not a draft's label"),
        (lambda d: _rows(d, "probe m=3", **{"method": "frobnicate m=3"}), "not a draft's label"),
        (lambda d: d["comparisons"][0].update(prompts=936.0), r"prompts = 936.0, not an integer"),
        (lambda d: _first(d, "probe m=3", 1.0).update(seeds=2), r"its method's rows at other temperatures"),
        (lambda d: d["comparisons"][0].update(temperature=50.0), "temperature = 50.0"),
        (lambda d: d["comparisons"][0].update(questions=0), r"questions = 0, not an integer in \[2"),
        (lambda d: d["comparisons"][0].update(seeds=50), "seed level 'no' with 50"),
        (
            lambda d: d["comparisons"][0].update(low=d["comparisons"][0]["diff"], high=d["comparisons"][0]["diff"]),
            "half-width",
        ),
        (lambda d: d["comparisons"][0].update(prompts=5), r"\(family, group, prompts\)"),
        (lambda d: d["comparisons"][0].update(family="smollm2-135m"), "rule's set on smollm2-135m"),
        (lambda d: d["pooled_criteria"][0].update({"p (stratified permutation)": 1e-200}), "below"),
        (lambda d: d["pooled_criteria"][0].update({"per protocol rho": "x y"}), "per protocol rho 'x y'"),
        (lambda d: d["pooled_criteria"][0].update({"per protocol p": "nan 7"}), "per protocol p 'nan 7'"),
        (lambda d: d.update(schema=True), "schema True"),
        (lambda d: d.update(provenance="junk"), "provenance must name each record"),
        (lambda d: _pooled(d).update(drafts=9999), "9999 drafts, but its protocols hold"),
        (
            lambda d: _pooled(d).update(protocols="nonexistent_protocol other third"),
            "hold no record this file rests on",
        ),
        (lambda d: _pooled(d).update({"pooled rho": -0.9}), "pooled rho -0.900, but its protocols' rho"),
        # a pooled p its drafts' permutations cannot give: the probe's weak rho made significant, a strong
        # one made insignificant, a Monte Carlo p below one shuffle, counts that are not the drafts'
        (lambda d: _pooled(d).update(_weak_rho(1e-12)), "1e-12 below 0.0001, the least 10000 permutations"),
        (lambda d: _pooled(d).update(_weak_rho(0.001)), "a permutation test gives a p between 0.05"),
        (
            lambda d: _pooled(d).update({"p (stratified permutation)": 0.6}),
            r"a permutation test gives a p between 0 and [\d.]+",
        ),
        (lambda d: _pooled(d).update({"per protocol p": "0.9 0.333 0.213"}), "per protocol p of table3_f32 0.9"),
        (lambda d: _pooled(d).update({"per protocol drafts": "10 3 9"}), r"are not counts summing to its \d+"),
        (lambda d: _pooled(d).pop("per protocol drafts"), "per protocol drafts None"),
        (lambda d: _pooled(d).update({"per protocol rho": "+0.88 +1.00 +0.10"}), "weighted by their drafts"),
        (lambda d: _pooled(d).update({"p exact": "yes"}), "p exact 'yes' with 10000 permutations"),
        (lambda d: _pooled(d).update(permutations=2.5), "permutations = 2.5, not an integer"),
        # comparisons a record does not stand behind, or that contradict each other's df and criteria
        (lambda d: _rows(d, None, protocol="made_up_protocol"), "protocol 'made_up_protocol' holds no record"),
        (lambda d: _with_df(d["comparisons"][0], 1.0), r"df 1 without seed variance, but 120 questions give 119"),
        (lambda d: d["comparisons"][0].update(questions=2), r"df 119 without seed variance, but 2 questions give 1"),
        (lambda d: _with_df(_seed_level(d), _seed_level(d)["df"] + 1.5), "implies no whole number of seed degrees"),
        (
            lambda d: _with_variances(_seed_level(d), 2.0),
            "one pooled seed variance a protocol",
        ),
        (
            lambda d: [
                c.update({"d probe error": -0.5}) for c in d["comparisons"] if _is(c, "table3_f32", "ELSI-C m=2")
            ],
            "one set has one score on its protocol's capture",
        ),
        (
            lambda d: [c.update(layers="1 11 20") for c in d["comparisons"] if _is(c, "qwen_strong", "probe m=3")],
            "for the baseline's own set: it is 0 there",
        ),
        (lambda d: d["pooled_criteria"][0].update(criterion="banana"), "'banana'.* is not a criterion"),
        (lambda d: _shift(d, "table3_f32", "ELSI m=2", 0.5), "are ELSI-C m=2's draft too|ELSI m=2's draft too"),
        (lambda d: _rows(d, "probe m=3", **{"method": "PROBE m=3"}), "'PROBE m=3' is not a draft's label"),
        (lambda d: d["comparisons"][0].update(temperature=-0.0), "temperature -0.0"),
        (lambda d: d["comparisons"][0].update({"baseline layers": "01 11 20"}), "baseline layers = '01 11 20'"),
        (lambda d: _perfect_judgment(d), "out-of-sample rows are not what leaving each protocol group out"),
        (lambda d: d["provenance"]["records"].update({"x/y.json": "not a digest"}), "provenance must name"),
    ],
)
def test_a_sealed_file_with_wrong_contents_is_refused_naming_the_row(evidence, tmp_path, change, reason):
    """Behind a valid checksum (a study bug, not an edit): swapped intervals, repeated rows, counts as text
    or bools or below one, names with stray spaces, p and rho out of range, a default the pooled row does
    not give, fits missing a temperature or with impossible variances, degrees of freedom or widening, a
    missing part, out-of-sample rows, coverage or draft counts that disagree with what the fit states:
    refused, naming the row and the field. Otherwise several of these reach the answer (a fit-less
    criterion gives "change"), and a missing field ends `elsi --help` with a KeyError."""
    data = json.loads(json.dumps(evidence))
    change(data)
    path = tmp_path / "evidence.json"
    path.write_text(json.dumps(_resealed(data)))
    with pytest.raises(ev.EvidenceUnavailable, match=reason):
        ev.load(path)


def test_a_malformed_evidence_file_leaves_help_and_the_parser_working(evidence, tmp_path, monkeypatch):
    """`elsi select --help` reads the default method from the evidence: an unusable file falls back to
    ELSI's, never a traceback."""
    from elsi_lib.cli_args import build_parser

    data = json.loads(json.dumps(evidence))
    data["comparisons"][0].pop("low")
    path = tmp_path / "evidence.json"
    path.write_text(json.dumps(_resealed(data)))
    monkeypatch.setattr(ev, "EVIDENCE_PATH", path)
    ev._cached.cache_clear()
    try:
        assert ev.default_method() == "elsi"
        assert build_parser().parse_args(["select", "--model", "x"]).method == "elsi"
    finally:
        ev._cached.cache_clear()


def test_drafts_measured_against_eagle3s_set_never_speak_for_another_default(evidence):
    """OpenVINO's default reads the rule's layers as outputs (another set than EAGLE3's): the family's
    drafts, all measured against EAGLE3's set, say nothing of it: "this family's own drafts of that set
    trail the default" would quote them against OpenVINO's set."""
    from elsi_lib.selection.methods import default_of

    best = (9, 10, 29)
    against_eagle3 = ev.decision("elsi", "smollm2-135m", -0.5, best, default_of("speculators", 30).layers, evidence)
    assert against_eagle3.measured and "trail the default" in against_eagle3.reason
    against_openvino = ev.decision("elsi", "smollm2-135m", -0.5, best, default_of("openvino", 30).layers, evidence)
    assert default_of("openvino", 30).layers != default_of("speculators", 30).layers
    assert against_openvino.measured == [] and "trail" not in against_openvino.reason


def test_a_set_two_methods_chose_is_fitted_once_by_its_most_seeded_row_and_eagle2_never():
    """Two methods that chose one set trained one draft: the fit takes the row with the most seeds, whatever
    the rows' order; EAGLE2's feature (after the final norm) is not the layer set the criteria score."""
    from elsi_lib.draft.evidence_checks import points

    common = {"protocol": "p", "group": "p", "temperature": 0.0, "nodes": 60, "baseline seeds": 1}
    rows = [
        {**common, "layers": "1 2 3", "method": m, "seeds": s, "diff": d}
        for m, s, d in (("ELSI-C m=3", 1, 0.03), ("ELSI m=3", 3, 0.02))
    ]
    rows.append({**rows[0], "layers": "23", "method": "EAGLE2", "seeds": 1, "diff": 0.05})
    for order in (rows, rows[::-1]):
        assert [(p["method"], p["diff"]) for p in points(order, 0.0)] == [("ELSI m=3", 0.02)]


def test_numeric_twins_drafts_of_one_set_are_fitted_once():
    """bf16 and float32 twins train the same sets on the same data: a set both trained is one point
    (the most seeded row, then the protocol with more drafts), a set one of them trained is its own."""
    from elsi_lib.draft.evidence_checks import points

    def row(protocol, layers, diff, seeds=1):
        return {"protocol": protocol, "group": "t/t_f32", "temperature": 0.0, "nodes": 60, "method": "ELSI m=3",
                "layers": layers, "seeds": seeds, "baseline seeds": 1, "diff": diff}  # fmt: skip

    rows = [row("t", "1 2 3", 0.01), row("t_f32", "1 2 3", 0.02), row("t_f32", "4 5 6", 0.03), row("t", "7 8 9", 0.04)]
    rows.append(row("t_f32", "10 11 12", 0.05))
    for order in (rows, rows[::-1]):
        got = sorted((p["layers"], p["diff"]) for p in points(order, 0.0))
        assert got == [("1 2 3", 0.02), ("10 11 12", 0.05), ("4 5 6", 0.03), ("7 8 9", 0.04)]
    seeded = [row("t", "1 2 3", 0.01, seeds=3), row("t_f32", "1 2 3", 0.02)]
    assert [p["diff"] for p in points(seeded, 0.0)] == [0.01]


def test_eagle2s_drafts_never_speak_for_the_set_of_its_layer(evidence):
    """EAGLE2 reads its one layer after the final norm: its drafts are not drafts of that layer's set, so
    the decision on a best set of that one layer quotes ELSI m = 1's drafts only."""
    for family, best in (("smollm2-135m", (29,)), ("qwen2.5-coder-0.5b", (23,))):
        default = tuple(
            map(int, next(c for c in evidence["comparisons"] if c["family"] == family)["baseline layers"].split())
        )
        made = ev.decision("elsi", family, -0.1, best, default, evidence)
        assert made.measured and {m["method"] for m in made.measured} == {"ELSI m=1"}


def test_against_a_default_other_than_eagle3s_set_the_family_intercept_cancels():
    """The fits predict a set's tau minus EAGLE3's set's: against another default (OpenVINO reads the rule's
    layers as outputs) both sets are predicted drafts, so the family's intercept cancels (b * dscore)
    and each draft brings its own residual (the interval widens)."""
    from elsi_lib.draft.decision import predict

    x = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    shifted = fit(
        ["a"] * 6, x, [-0.3 + 0.1 * v + e for v, e in zip(x, (0.01, -0.01, 0.0, 0.01, -0.01, 0.0))], pooled=True
    )
    anchored, half = predict(shifted, None, 2.0)
    between, wider = predict(shifted, None, 2.0, anchored=False)
    assert anchored == pytest.approx(-0.3 + 0.2, abs=0.02) and between == pytest.approx(0.2, abs=0.02)
    assert wider > half
    fits = {0.0: {"family": None, "pooled": shifted}}
    assert decide(fits, None, 3.0, (5, 6), (1, 2)).verdict == "keep the default"  # -0.3 + 0.3: not clear of 0
    assert decide(fits, None, 3.0, (5, 6), (2, 3), anchored=False).verdict == "change"  # 0.3 between two drafts


def test_the_decision_quotes_one_draft_once_when_two_methods_chose_its_set(evidence):
    """ELSI m=2 and ELSI-C m=2 chose one set on table3_f32: one draft, quoted once a temperature, by the row
    of the most seeds (as the fits take it)."""
    rows = [
        c
        for c in evidence["comparisons"]
        if c["protocol"] == "table3_f32" and c["method"] in ("ELSI m=2", "ELSI-C m=2")
    ]
    assert len({c["layers"] for c in rows}) == 1
    best = tuple(map(int, rows[0]["layers"].split()))
    made = ev.decision("elsi", "qwen2.5-coder-0.5b", -0.1, best, (1, 11, 20), evidence)
    keys = [(m["protocol"], m["temperature"]) for m in made.measured]
    assert len(keys) == len(set(keys)) and ("table3_f32", 0.0) in keys


def test_the_evidence_builder_writes_nothing_it_cannot_make_whole(tmp_path, monkeypatch, capsys):
    """Without the pooled criteria test (another results folder, or before `make ledger-tables`) the default
    method would fall back without a word: refused, the committed file untouched; an --out that is a folder
    is refused before anything (the seed-level table too) is written."""
    from elsi_lib.study.ledger import evidence_file

    monkeypatch.setenv("ELSI_RESULTS", str(tmp_path))
    out = tmp_path / "evidence.json"
    with pytest.raises(SystemExit, match="no draft compared with EAGLE3's"):  # the tests' empty records folder
        evidence_file.main(["--out", str(out)])
    monkeypatch.setenv("ELSI_DRAFT_RECORDS", str(REPO_ROOT / "data" / "drafts"))
    with pytest.raises(SystemExit, match="criteria_pooled.csv: no pooled criteria test"):
        evidence_file.main(["--out", str(out)])
    assert not out.exists() and not (tmp_path / "comparisons_seed_level.csv").exists()
    with pytest.raises(SystemExit):
        evidence_file.main(["--out", str(tmp_path)])
    assert "is a folder" in capsys.readouterr().err
    (tmp_path / "a-file").write_text("")
    with pytest.raises(SystemExit):  # before the build, not a traceback after it
        evidence_file.main(["--out", str(tmp_path / "a-file" / "sub" / "evidence.json")])
    assert "a-file is a file, not a folder" in capsys.readouterr().err
    (tmp_path / "a-file").unlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_the_evidence_builder_refuses_a_pooled_test_the_records_no_longer_give(tmp_path, monkeypatch):
    """criteria_pooled.csv made before a record was added or removed would carry its drafts into the
    default method and the criteria line: the builder compares it with what the records give now."""
    from elsi_lib.study.ledger import evidence_file

    monkeypatch.setenv("ELSI_DRAFT_RECORDS", str(REPO_ROOT / "data" / "drafts"))
    committed = (REPO_ROOT / "data" / "results" / "criteria_pooled.csv").read_text()
    (tmp_path / "criteria_pooled.csv").write_text(committed)
    n = int(committed.splitlines()[1].split(",")[2])  # the drafts column
    pooled = re.escape(committed.splitlines()[1].split(",")[3])  # the protocols column
    fewer = re.sub(r"(?m)^([^,\n]*,[^,\n]*,)(\d+),", lambda m: f"{m[1]}{int(m[2]) - 1},", committed)
    assert fewer != committed  # what the records would give with one draft less
    monkeypatch.setattr(evidence_file, "tables_now", lambda: {"criteria_pooled": fewer})
    with pytest.raises(
        ValueError,
        match=rf"not what the records give now \(it pools {n} drafts of {pooled}, the records {n - 1} drafts",
    ):
        evidence_file.build(tmp_path)
    other = committed.replace(",10000,", ",9999,", 1)  # the same drafts, another count of shuffles
    assert other != committed
    monkeypatch.setattr(evidence_file, "tables_now", lambda: {"criteria_pooled": other})
    with pytest.raises(ValueError, match=rf"it pools the same {n} drafts of {pooled}, other values\)"):
        evidence_file.build(tmp_path)
    monkeypatch.setattr(evidence_file, "tables_now", lambda: {"criteria_pooled": committed})
    assert evidence_file.build(tmp_path)["pooled_criteria"] == evidence_file.pooled_criteria_rows(tmp_path)


def test_a_criterion_no_record_holds_is_named_not_sent_back_to_make_ledger_tables(tmp_path, monkeypatch):
    """Records whose probe agreement is null everywhere give no pooled row for it: rerunning the tables
    cannot add one, so the builder says the records cannot test it instead of advising the rerun."""
    from elsi_lib.study.ledger import evidence_file

    monkeypatch.setenv("ELSI_DRAFT_RECORDS", str(REPO_ROOT / "data" / "drafts"))
    committed = (REPO_ROOT / "data" / "results" / "criteria_pooled.csv").read_text()
    without = "\n".join(l for l in committed.splitlines() if not l.startswith("probe agreement,")) + "\n"
    assert without != committed
    (tmp_path / "criteria_pooled.csv").write_text(without)
    monkeypatch.setattr(evidence_file, "tables_now", lambda: {"criteria_pooled": without})
    with pytest.raises(ValueError, match=r"no protocol's drafts can test \[\('probe agreement'"):
        evidence_file.build(tmp_path)
    monkeypatch.setattr(evidence_file, "tables_now", lambda: {"criteria_pooled": committed})
    with pytest.raises(ValueError, match=r"no row for \[\('probe agreement'.*make ledger-tables writes them"):
        evidence_file.build(tmp_path)


def test_the_evidence_builder_writes_only_what_the_reader_takes_and_its_table_beside_it(tmp_path, monkeypatch, capsys):
    """A file `elsi select` would refuse is never written (the committed one stays); an --out elsewhere gets
    its comparisons table beside it, leaving the results folder's (the package file's) as it was."""
    from elsi_lib.study.ledger import evidence_file

    monkeypatch.setenv("ELSI_DRAFT_RECORDS", str(REPO_ROOT / "data" / "drafts"))
    monkeypatch.setenv("ELSI_RESULTS", str(tmp_path / "results"))
    good = ev.load()
    out = tmp_path / "out" / "evidence.json"
    out.parent.mkdir()
    monkeypatch.setattr(evidence_file, "build", lambda: {**good, "default_method": "elsi"})  # its checksum no longer
    with pytest.raises(SystemExit, match="nothing written: the file made would be refused as it is read: .*checksum"):
        evidence_file.main(["--out", str(out)])
    assert not out.exists() and not (tmp_path / "results").exists()
    monkeypatch.setattr(evidence_file, "build", lambda: good)
    evidence_file.main(["--out", str(out)])
    assert ev.load(out) == good
    assert (out.parent / "comparisons_seed_level.csv").is_file() and not (tmp_path / "results").exists()
    assert out.stat().st_mode & 0o044 == 0o044 & ~_umask()  # readable by others as a plain write makes it
    for wrong, said in ((out.parent / "comparisons_seed_level.csv", "comparisons table is written beside"),
                        (out.parent / "link.json", "is a link")):  # fmt: skip
        if said == "is a link":
            wrong.symlink_to(out)
        with pytest.raises(SystemExit):
            evidence_file.main(["--out", str(wrong)])
        assert said in capsys.readouterr().err
    assert ev.load(out) == good


def _umask() -> int:
    import os

    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_the_bundled_weights_are_the_family_by_their_path_or_converted_folder(tmp_path):
    """The bundled model given as its own GGUF file, or as the folder elsi converted it into, is the family
    the ledger measured (its evidence and fit, not the pooled one's); a copy of the GGUF with one byte
    changed, or a converted folder of other weights, is not."""
    from elsi_lib.common.cachefiles import MANIFEST, sha256_file, write_manifest
    from elsi_lib.inputs.models import bundled_weights_path

    gguf, _ = bundled_weights_path("smollm2-135m")
    assert ev.family_of(str(gguf)) == "smollm2-135m"
    converted = tmp_path / "SmolLM2-135M-Instruct.Q4_1-0123456789ab"
    converted.mkdir()
    (converted / MANIFEST).write_text(json.dumps({"key": {"gguf_sha256": sha256_file(gguf)}, "files": {}}))
    assert ev.family_of(str(converted)) == "smollm2-135m"
    (converted / "model.safetensors").write_bytes(b"weights")  # the converted weights, listed in its manifest
    write_manifest(converted, {"gguf_sha256": sha256_file(gguf)})
    assert ev.family_of(str(converted)) == "smollm2-135m"
    (converted / "model.safetensors").write_bytes(b"tuned weights")  # a fine-tune saved over them: another model
    assert ev.family_of(str(converted)) is None
    (converted / "model.safetensors").write_bytes(b"weights")
    (converted / "extra.bin").write_bytes(b"x")  # a file the conversion did not write
    assert ev.family_of(str(converted)) is None
    (converted / "extra.bin").unlink()
    assert ev.family_of(str(converted)) == "smollm2-135m"
    (converted / MANIFEST).write_text(json.dumps({"key": {"gguf_sha256": "0" * 64}, "files": {}}))
    assert ev.family_of(str(converted)) is None
    changed = tmp_path / "changed.gguf"
    data = bytearray(gguf.read_bytes())
    data[-1] ^= 1
    changed.write_bytes(bytes(data))
    assert ev.family_of(str(changed)) is None


def test_the_criteria_line_quotes_the_answers_own_criterion(evidence):
    """--method elsi's decision rests on set entropy: the line quotes that criterion's pooled test beside the
    probe's, so the reader never takes the probe's rho for the criterion the answer used."""
    line = ev.criterion_line(evidence, "elsi")
    row = next(
        r for r in evidence["pooled_criteria"] if r["criterion"] == "set entropy" and r["outcome"] == "tau minus EAGLE3"
    )
    assert f"whose set entropy shows rho {row['pooled rho']:+.2f}" in line
    assert "whose" not in ev.criterion_line(evidence, evidence["default_method"])
