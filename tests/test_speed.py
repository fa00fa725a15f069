"""The cost model's findings (elsi_lib.study.pages.speed), figures (speed_plots) and page (speed_page) from benchmark records: a synthetic record
of each engine's layout, its finding computed from its rows, its curve through the cost model."""

import json

import pytest

from elsi_lib.draft import cost
from elsi_lib.study.pages import speed, speed_device, speed_page, speed_plots

MACHINE = {"cpu": "Test CPU", "date": "2026-12-04T00:00:00+00:00", "cores": 2, "load_1_5_15": [0.0, 0.0, 0.0]}


def elsi_record():
    settings = {
        "engine": "elsi",
        "model": "tiny",
        "draft": "eagle3 seed 0",
        "questions": 2,
        "generated": 42,
        "plain s": 2.1,
        "plain tok/s": 20.0,
        "prefill ms": 200.0,
        "per-step acceptance": [0.4, 0.3],
    }
    rows = [
        {
            "shape": "chain",
            "k or nodes": 1,
            "depth": 1,
            "top-k": 1,
            "tau measured": 1.4,
            "tau predicted": 1.38,
            "round ms predicted": 60.0,
            "round ms measured": 61.0,
            "break-even tau": 1.2,
            "speed-up measured": 1.1,
            "speed-up predicted": 1.05,
            "error": -0.045,
            "ceiling": 1.5,
            "lossless": True,
        },
        {
            "shape": "chain",
            "k or nodes": 2,
            "depth": 2,
            "top-k": 1,
            "tau measured": 1.6,
            "tau predicted": 1.62,
            "round ms predicted": 70.0,
            "round ms measured": 69.0,
            "break-even tau": 1.4,
            "speed-up measured": 1.2,
            "speed-up predicted": 1.26,
            "error": 0.05,
            "ceiling": 1.8,
            "lossless": True,
        },
        {
            "shape": "tree",
            "k or nodes": 30,
            "depth": 6,
            "top-k": 10,
            "tau measured": 2.0,
            "tau predicted": 2.0,
            "round ms predicted": 150.0,
            "round ms measured": 150.0,
            "break-even tau": 3.0,
            "speed-up measured": 0.6,
            "speed-up predicted": 0.62,
            "error": 0.033,
            "ceiling": 1.9,
            "lossless": True,
        },
    ]
    return {"benchmark": "cost_elsi_tiny", "machine": MACHINE, "settings": settings, "rows": rows, "notes": ""}


def vllm_record():
    settings = {
        "engine": "vLLM 0.32.0",
        "family": "tiny",
        "draft": "elsi-m3 seed 0",
        "questions": 2,
        "generated": 42,
        "plain s": 1.0,
        "plain tok/s": 42.0,
        "prefill ms": 100.0,
        "per-step acceptance": [0.3, 0.2, 0.1, 0.05],
    }
    rows = [
        {
            "k": k,
            "tau vLLM": 1.2 + 0.1 * k,
            "round ms predicted": 30.0 + 5 * k,
            "break-even tau": 1.3,
            "speed-up measured": 0.9 + 0.02 * k,
            "speed-up predicted": 0.9 if k < 3 else (0.9 + 0.02 * k) * (1 - 0.08 * (k - 2)),  # the error's own
            "ceiling": 1.4,
            "error": "calibration" if k < 3 else -0.08 * (k - 2),
            "lossless": True,
        }
        for k in (1, 2, 3, 4)
    ]
    return {"benchmark": "cost_vllm_tiny", "machine": MACHINE, "settings": settings, "rows": rows, "notes": ""}


@pytest.fixture
def folder(tmp_path):
    for record in (elsi_record(), vllm_record()):
        (tmp_path / f"{record['benchmark']}.json").write_text(json.dumps(record))
        (tmp_path / f"{record['benchmark']}.md").write_text(f"{record['benchmark']} table\n")
    return tmp_path


def test_results_keep_chains_only_under_one_name(folder):
    results = speed.cost_results(folder)
    assert [len(r["chains"]) for r in results] == [2, 4]  # the tree row is not a chain
    assert [c["k"] for c in results[0]["chains"]] == [1, 2]
    assert results[1]["chains"][0]["tau measured"] == pytest.approx(1.3)


def test_the_finding_is_computed_from_the_rows(folder):
    elsi, vllm = speed.cost_results(folder)
    text = " ".join(speed.finding(elsi))
    assert "Best chain k = 2: 1.2x measured" in text
    assert "within 5.0%" in text and "2 chains" in text  # max |error| of the chain rows
    assert "first token 40% of the time" in text
    text = " ".join(speed.finding(vllm))
    assert "42.0 tokens/s" in text and "Best chain k = 4" in text
    assert "within 16.0%" in text and "2 chains" in text  # calibration rows are not counted
    assert "repeats' spread" not in text  # measured once: no spread to read


def test_the_finding_weighs_each_error_against_its_repeats_spread(folder):
    """With --repeat, each out-of-sample error counts as explained when within 10% or within its chain's
    spread (k = 3: -8% < 10%; k = 4: -16% within a 20% spread); calibration rows are not counted."""
    result = speed.cost_results(folder)[1]
    result["settings"]["repeat"] = 3
    for row, spread in zip(result["chains"], (0.01, 0.02, 0.05, 0.2)):
        row["spread"] = spread
    text = " ".join(speed.finding(result))
    assert "ran 3 times" in text and "is 5.0-20.0%" in text and "2 of 2 errors lie within 10%" in text
    result["chains"][3]["spread"] = 0.15
    assert "1 of 2 errors" in " ".join(speed.finding(result))
    result["settings"]["engines per chain"] = 2
    assert "ran 3 times (a chain's in each of 2 engines)" in " ".join(speed.finding(result))


def test_the_model_accuracy_counts_the_vllm_chains_out_of_sample(folder):
    """Over vLLM's runs only (elsi's loop has its own line), calibration rows left out: k = 3 (8%) within
    10%, k = 4 (16%) not; with spreads, an error within its spread counts too."""
    results = speed.cost_results(folder)
    line = speed.model_accuracy(results)
    assert line.startswith("The cost model in vLLM-CPU, over 1 runs: 1 of 2 out-of-sample chains")
    assert "median error 12.0%, worst 16.0%" in line and "repeated" not in line
    for row, spread in zip(results[1]["chains"], (0.0, 0.0, 0.05, 0.2)):
        row["spread"] = spread
    assert "in the 1 runs that repeated each generation, 2 of 2 within 10% or within" in speed.model_accuracy(results)
    assert speed.model_accuracy(results[:1]) is None


def test_the_curve_is_the_cost_model(folder):
    settings = speed.cost_results(folder)[0]["settings"]
    expected = 2.1 / cost.generation_seconds(42, 2, 1.5, 0.06, 0.1)
    assert speed.curve(settings, 60.0, [1.5])[0] == pytest.approx(expected)


def test_the_page_shows_findings_tables_and_a_figure(folder, tmp_path):
    images = tmp_path / "images"
    images.mkdir()
    text = speed_page.page(images, folder)
    assert "## `cost_elsi_tiny`" in text and "## `cost_vllm_tiny`" in text  # the tables, made from the records
    assert "| shape | k or nodes | depth |" in text and "| 4 | 1.6 |" in text
    assert (images / "cost_model.png").stat().st_size > 10_000
    assert (images / "cost_accuracy.png").stat().st_size > 10_000 and "images/cost_accuracy.png" in text
    assert "No cost benchmark" in speed_page.page(images, tmp_path / "empty")


def test_the_tau_needed_reaches_its_speedup_on_the_curve(folder):
    settings = speed.cost_results(folder)[0]["settings"]
    tau = speed.tau_needed(settings, 60.0, 1.3)
    assert speed.curve(settings, 60.0, [tau])[0] == pytest.approx(1.3)
    assert speed.tau_needed(settings, 60.0, 20.0) is None  # the prefills alone take longer


def test_the_lever_finding_reads_the_one_run_comparison(folder):
    assert speed.lever_finding("tiny", folder) is None  # no weight-first record yet
    lever = elsi_record()
    lever["benchmark"] = "cost_elsi_tiny_weight_first"
    lever["settings"] |= {
        "target forward ms by tokens": {"2": 22.0},
        "plain decode step ms": 20.0,
        "with F.linear": {"target forward ms by tokens": {"2": 45.0}, "plain decode step ms": 22.5},
    }
    other = json.loads(json.dumps(lever))  # a slower weight-first draft: not the one quoted
    other["benchmark"] = "cost_elsi_tiny_other_weight_first"
    other["settings"]["draft"] = "another draft"
    for row in other["rows"]:
        row["speed-up measured"] = 0.5
        if isinstance(row.get("error"), float):
            row["speed-up predicted"] = 0.5 * (1 + row["error"])
    for record in (lever, other):
        (folder / f"{record['benchmark']}.json").write_text(json.dumps(record))
    text = speed.lever_finding("tiny", folder)
    assert (
        "costs 2.00x a plain decoding step" in text and "it costs 1.10x (one run, cost_elsi_tiny_weight_first)" in text
    )
    assert "the best chain, k = 2, runs at 1.2x plain decoding (1.26x predicted), 24.00 tokens/s" in text
    assert "token for token plain greedy's" in text
    assert "vLLM-CPU's best 41.16 (draft elsi-m3 seed 0)" in text  # its k = 4 row: 0.98x of 42 tokens/s
    assert "bench_linears" not in text
    linears = [
        {"weight (out x in)": "all linears", "rows": n, "F.linear / its one row": ratio}
        for n, ratio in ((1, 1.0), (2, 2.5), (3, 3.0), (4, 2.0), (8, 9.0))
    ]
    (folder / "bench_linears_tiny.json").write_text(json.dumps({"rows": linears}))
    assert "linears over 2-4 rows cost 2.00-3.00x one row" in speed.lever_finding("tiny", folder)


def device_record(autocast: bool, chain5_ms: float, plain_tok_s: float):
    """An accelerator's record (bench_cost_device.py's layout): two chains and a tree."""
    record = elsi_record()
    record["benchmark"] = f"cost_device_cuda_{'bf16' if autocast else 'float32'}"
    record["settings"] |= {
        "device": "Test GPU",
        "torch": "9.9",
        "model": "random llama",
        "draft autocast": autocast,
        "plain tok/s": plain_tok_s,
        "plain s": 42 / plain_tok_s,  # the rate is generated / plain s
        "plain decode step ms": 10.0,
        "target forward ms by tokens": {"2": 10.0, "3": 10.5, "31": 12.0},
        "draft ms by shape": {"1x1x1": 2.0, "2x2x1": chain5_ms, "30x6x10": 9.0},
    }
    return record


def test_the_device_finding_is_computed_from_its_records(folder, tmp_path):
    assert speed_device.device_results(folder) == []  # no accelerator's record: no section
    images = tmp_path / "images"
    images.mkdir()
    assert "On an accelerator" not in speed_page.page(images, folder)
    for record in (device_record(False, 4.0, 80.0), device_record(True, 5.0, 60.0)):
        (folder / f"{record['benchmark']}.json").write_text(json.dumps(record))
        (folder / f"{record['benchmark']}.md").write_text("device table\n")
    results = speed_device.device_results(folder)
    assert [r["settings"]["draft autocast"] for r in results] == [True, False]  # name order: bf16 first
    lines = speed_device.device_finding(results)
    assert len(lines) == 3  # one per record, one per model with both settings
    assert "over 31 tokens costs 12.0 ms against 10.0 ms over 2 (1.20x)" in lines[1]
    assert "a draft step 2.0 ms (20% of a plain decoding step)" in lines[1]  # the longest chain (2) over 2 steps
    assert "tree of 30 would reach 1.9x" in lines[1]  # the highest ceiling
    assert "within 4% of the measured ones at the median shape, 5% at the worst (3 shapes)" in lines[1]
    assert "from 4.0 ms to 5.0 ms (1.25x)" in lines[2] and "80.0 and 60.0 tokens/s" in lines[2]
    assert "On an accelerator" in speed_page.page(images, folder)


def test_the_device_line_gives_ranges_over_the_records(folder):
    assert speed_device.device_line(folder) is None
    for record in (device_record(False, 4.0, 80.0), device_record(True, 5.0, 60.0)):
        (folder / f"{record['benchmark']}.json").write_text(json.dumps(record))
    line = speed_device.device_line(folder)
    assert line.startswith("On an Test GPU") and "2 runs" in line
    assert "over 31 tokens cost 1.20-1.20x its forward over 2" in line
    assert "reach 1.90-1.90x plain decoding" in line  # the highest ceiling of each record
    assert "a draft step cost 20-25% of a plain decoding step" in line  # chain of 2: 4.0 / 2 and 5.0 / 2 over 10 ms
    assert "took the draft's chain to 1.25-1.25x its float32 time" in line


def test_the_targets_dtype_is_a_lever_read_from_a_pair_of_vllm_records(tmp_path):
    """Two vLLM records of one family, draft, CPU and day, float32 and bfloat16, make one finding whose
    ratios come from their settings and best chains; a record of another draft pairs with nothing."""
    forward = {"f32": {"1": 100.0, "2": 120.0, "3": 140.0}, "bf16": {"1": 50.0, "2": 55.0, "3": 60.0}}
    records = []
    for dtype, plain, side, speeds in (("float32", 5.0, 20.0, (0.9, 0.8)), ("bfloat16", 8.0, 16.0, (1.1, 1.25))):
        r = vllm_record()
        r["benchmark"] = f"cost_vllm_tiny_{dtype}"
        r["machine"] = {**MACHINE, "bf16 matmul flags": ["avx512_bf16"]}
        r["settings"].update(
            {
                "dtype": dtype,
                "plain tok/s": plain,
                "plain s": r["settings"]["generated"] / plain,  # the rate is generated / plain s
                "target forward ms by tokens": forward["f32" if dtype == "float32" else "bf16"],
                "draft side ms by k": {"1": side, "2": side + 10},
            }
        )
        r["rows"] = [{**row, "speed-up measured": s} for row, s in zip(r["rows"][:2], speeds)]
        records.append(r)
    other = vllm_record()
    other["benchmark"] = "cost_vllm_tiny_other"
    other["settings"].update({"dtype": "bfloat16", "draft": "another draft"})
    for record in (*records, other, elsi_record()):
        (tmp_path / f"{record['benchmark']}.json").write_text(json.dumps(record))
    results = speed.cost_results(tmp_path)
    pairs = speed.dtype_pairs(results)
    assert [(a["settings"]["dtype"], b["settings"]["dtype"]) for a, b in pairs] == [("float32", "bfloat16")]
    (line,) = speed.dtype_finding(results)
    assert "plain decoding 8.0 tokens/s against 5.0 in float32 (1.60x)" in line
    assert "over 3 tokens costs 1.20x one token in bf16 against 1.40x in float32" in line
    assert "at k = 1 16.0 ms against 20.0 ms" in line
    assert "k = 2, 1.25x its plain decoding (10.00 tokens/s), against k = 1, 0.9x in float32 (4.50 tokens/s)" in line
    assert "runs at 2.00x float32's plain decoding" in line and "avx512_bf16" in line
    assert "target bfloat16" in speed.label(records[1]) and "target" not in speed.label(records[0])
    # the same draft in bfloat16 on another question set, or on fewer questions, pairs with nothing
    coding = json.loads(json.dumps(records[1]))
    coding["benchmark"], coding["settings"]["question set"] = "cost_vllm_tiny_coding", "SpecBench coding"
    fewer = json.loads(json.dumps(records[1]))
    fewer["benchmark"], fewer["settings"]["questions"] = "cost_vllm_tiny_fewer", 1
    for record in (coding, fewer):
        (tmp_path / f"{record['benchmark']}.json").write_text(json.dumps(record))
    pairs = speed.dtype_pairs(speed.cost_results(tmp_path))
    assert [(a["benchmark"], b["benchmark"]) for a, b in pairs] == [
        ("cost_vllm_tiny_float32", "cost_vllm_tiny_bfloat16")
    ]
    assert speed.label(coding).endswith(", SpecBench coding") and "SpecBench" not in speed.label(records[1])
    # a pair on another question set says which, so two pairs of one draft read apart
    coding_f32 = json.loads(json.dumps(records[0]))
    coding_f32["benchmark"], coding_f32["settings"]["question set"] = "cost_vllm_tiny_coding_f32", "SpecBench coding"
    (tmp_path / "cost_vllm_tiny_coding_f32.json").write_text(json.dumps(coding_f32))
    lines = speed.dtype_finding(speed.cost_results(tmp_path))
    assert len(lines) == 2 and sum("SpecBench coding" in line for line in lines) == 1
    # a second float32 run of one pair: which one pairs would be a guess, so it is refused naming both
    again = json.loads(json.dumps(records[0]))
    again["benchmark"] = "cost_vllm_tiny_float32_again"
    again["settings"]["repeat"] = 2  # another run, not a copy of the first
    (tmp_path / "cost_vllm_tiny_float32_again.json").write_text(json.dumps(again))
    with pytest.raises(
        ValueError, match="cost_vllm_tiny_float32(_again)? and cost_vllm_tiny_float32(_again)?: two float32 runs"
    ):
        speed.dtype_pairs(speed.cost_results(tmp_path))


def test_each_question_set_reports_the_median_over_its_lossless_float32_runs_with_the_range(tmp_path):
    """Per question set, over the float32 vLLM runs on the family: the median of each run's best chain with
    the range, the best named as the best; bf16 runs and other families are not counted, a lossy run is left
    out and said so; the verdict is the median's against 1.3x; fewer than 40 questions said so; SpecBench's
    columns first."""

    def run(name, speedups, question_set=None, dtype="float32", family="tiny", lossless=True, step=50.0):
        record = vllm_record()
        record["benchmark"] = name
        record["settings"].update(family=family, dtype=dtype, draft=f"draft {name}", **{"plain decode step ms": step})
        if question_set:
            record["settings"]["question set"] = question_set
        for row, speedup in zip(record["rows"], speedups):
            row.update(
                {
                    "speed-up measured": speedup,
                    "round ms measured": 40.0 + row["k"],
                    "lossless": lossless,
                    "ceiling": 3.0,
                }
            )
            if isinstance(row["error"], float):  # the error stays the predicted speed-up's own
                row["speed-up predicted"] = speedup * (1 + row["error"])
        (tmp_path / f"{name}.json").write_text(json.dumps(record))

    run("cost_vllm_a", [0.9, 1.0, 1.1, 1.2], step=30.0)  # one per column: best 1.2x at k = 4, rounds > a step
    run("cost_vllm_b", [1.0, 1.35, 1.1, 1.0], "SpecBench coding")
    run("cost_vllm_c", [1.0, 1.31, 1.1, 1.0], "SpecBench coding")
    run("cost_vllm_d", [1.0, 1.9, 1.1, 1.0], "SpecBench coding", dtype="bfloat16")
    run("cost_vllm_e", [1.0, 1.8, 1.1, 1.0], "SpecBench coding", lossless=False)
    run("cost_vllm_f", [1.0, 1.7, 1.1, 1.0], family="other")
    lines = speed.question_sets(speed.cost_results(tmp_path), family="tiny")
    assert len(lines) == 2
    assert lines[0].startswith(
        "SpecBench, one per column, vLLM-CPU on tiny, lossless: median 1.200x plain decoding over 1 run"
    )
    assert "short of 1.3x" in lines[0] and "the best, 1.2x, is draft" in lines[0]
    # coding: the lossless float32 runs b (1.35x) and c (1.31x); d (bfloat16) is another target, e is lossy
    assert (
        "median 1.330x plain decoding over 2 runs (each run's best chain; range 1.310-1.350x), reaching 1.3x"
        in lines[1]
    )
    assert "the best, 1.35x, is draft" in lines[1] and "1 lossy run left out" in lines[1]
    assert "fewer than the 40 a claim needs" in lines[1]
    assert speed.question_sets(speed.cost_results(tmp_path), family="none") == []


def test_the_accuracy_figure_draws_each_out_of_sample_chain_once(folder):
    """elsi's two chains and vLLM's two out-of-sample ones (k = 3, 4; the calibration rows are not drawn),
    one legend entry per family and engine, the 10% band; a repeated run's spread as a bar."""
    results = speed.cost_results(folder)
    results[1]["chains"][3]["spread"] = 0.2
    ax = speed_plots.accuracy(results).axes[0]
    points = sorted(
        (round(l.get_xdata()[0], 3), round(l.get_ydata()[0], 3)) for l in ax.lines if len(l.get_xdata()) == 1
    )
    assert points == [(0.823, 0.98), (0.883, 0.96), (1.05, 1.1), (1.26, 1.2)]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert sorted(labels) == ["measured = predicted", "tiny, elsi's loop", "tiny, vLLM, target float32", "within 10%"]
    assert len([c for c in ax.collections if c.__class__.__name__ == "LineCollection"]) == 1  # one bar
    empty = speed_plots.accuracy([{**results[0], "chains": []}]).axes[0]
    assert "no chain predicted out of sample yet" in [t.get_text() for t in empty.texts]


def test_the_curves_figure_puts_vllms_runs_first_with_every_chain_measured(folder):
    """cost_results reads elsi's record before vLLM's; the figure draws vLLM's panel first (the engine
    users serve with), one measured dot per chain in each panel, titles wrapped to the panel."""
    results = speed.cost_results(folder)
    assert [r["settings"]["engine"].startswith("vLLM") for r in results] == [False, True]
    panels = [ax for ax in speed_plots.curves(results).axes if ax.get_visible()]
    titles = [ax.get_title().replace("\n", " ") for ax in panels]
    assert titles == [speed.label(results[1]), speed.label(results[0])]
    for ax, result in zip(panels, (results[1], results[0])):
        dots = [l for l in ax.lines if l.get_marker() == "o"]
        assert [round(l.get_xdata()[0], 3) for l in dots] == [round(c["tau measured"], 3) for c in result["chains"]]


@pytest.mark.parametrize(
    "change, reason",
    [
        (lambda r: r["settings"].__setitem__("per-step acceptance", [0.5, 1.4]), "a_2 = 1.4, not a share"),
        (
            lambda r: next(x for x in r["rows"] if "k" in x or x.get("shape") == "chain").update(
                {"tau vLLM": 9.0, "tau measured": 9.0}
            ),
            r"tau 9.0 is not a number in \[1, ",
        ),
        (
            lambda r: next(x for x in r["rows"] if "k" in x).update({"tau vLLM": "9.0"}),
            r"tau '9.0' is not a number",
        ),
        (lambda r: r["settings"].update({"plain s": -5.0}), "plain s = -5.0, not a positive"),
        (lambda r: r["settings"].update({"per-step acceptance": [True, 0.5]}), "a_1 = True"),
        (lambda r: r["rows"].append(dict(next(x for x in r["rows"] if "k" in x))), r"chain k = \d+ is also row"),
        (
            lambda r: next(x for x in r["rows"] if "k" in x).update({"speed-up measured": 50.0}),
            "beyond the ceiling",
        ),
        (lambda r: r.update(rows=[]), "no machine or no rows"),
        (
            lambda r: next(x for x in r["rows"] if isinstance(x.get("error"), float)).update(error=-50.0),
            "is not \\(predicted - measured\\) / measured",
        ),
        (lambda r: next(x for x in r["rows"] if "k" in x).update(spread=-1.0), "spread -1.0 is no share >= 0"),
        (
            lambda r: next(x for x in r["rows"] if "k" in x and "ceiling" in x).update({"speed-up predicted": 99.0}),
            "speed-up predicted 99.0 is beyond its ceiling",
        ),
        (lambda r: r.pop("machine"), "no machine or no rows"),
        # text where numbers belong: refused, never read as numbers or let past the checks
        (lambda r: next(x for x in r["rows"] if "k" in x).update(ceiling="n/a"), "ceiling 'n/a' is not a positive"),
        (lambda r: [x.update({"speed-up measured": "1.1"}) for x in r["rows"] if "k" in x], "speed-up measured '1.1'"),
        (
            lambda r: next(x for x in r["rows"] if "k" in x).update({"speed-up measured": None}),
            "speed-up measured None",
        ),
        (lambda r: next(x for x in r["rows"] if "k" in x).update(error="0.5"), "error '0.5' is neither a number"),
        (
            lambda r: next(x for x in r["rows"] if "k" in x).update(lossless="yes"),
            "lossless 'yes' is not true or false",
        ),
    ],
)
def test_a_cost_file_out_of_range_is_refused_naming_it(tmp_path, change, reason):
    """A per-step acceptance above 1 (or a chain's tau above k + 1) would become a plausible-looking
    speed-up: the file is refused, naming it and the field."""
    import json

    from elsi_lib.study.pages import speed

    source = sorted(speed.BENCH.glob("cost_vllm_*.json"))[0]
    result = json.loads(source.read_text())
    change(result)
    (tmp_path / source.name).write_text(json.dumps(result))
    with pytest.raises(ValueError, match=reason):
        speed.cost_results(tmp_path)


def openvino_records(folder):
    machine = {"cpu": "Test CPU", "date": "2026-12-06T00:00:00+00:00", "cores": 2, "load_1_5_15": [0, 0, 0]}
    check = {
        "benchmark": "engines_openvino",
        "settings": {"openvino-genai": "2026.4.1.0", "questions": 12, "max_tokens": 64},
        "machine": machine,
        "rows": [
            {"draft": "plain decoding", "decoding": "", "tau OpenVINO": "", "tau elsi": "", "lossless": "",
             "tok/s": 30.0, "vs plain": 1.0},
            {"draft": "A (1, 2, 3)", "decoding": "chain k=1", "tau OpenVINO": 1.5, "tau elsi": 1.49, "lossless": True,
             "tok/s": 33.0, "vs plain": 1.1},
            {"draft": "A (1, 2, 3)", "decoding": "tree depth 6, top-10, 30 nodes", "tau OpenVINO": 2.0, "tau elsi": 2.03,
             "lossless": True, "tok/s": 39.0, "vs plain": 1.3},
            {"draft": "A (1, 2, 3)", "decoding": "chain k=3", "tau OpenVINO": 1.7, "tau elsi": "", "lossless": False,
             "tok/s": 45.0, "vs plain": "lossy: none"},
        ],
    }  # fmt: skip
    rounds = {
        "benchmark": "openvino_rounds_tiny",
        "settings": {"target": "tiny", "questions": {"mixed": 12}},
        "machine": machine,
        "rows": [
            {"questions": "mixed", "decoding": "plain", "round ms": 20.0, "round / step": 1.0},
            {"questions": "mixed", "decoding": "chain k=1", "round ms": 26.0, "round / step": 1.3, "tau for 1.3x": 1.69},
            {"questions": "mixed", "decoding": "tree depth 6, top-10, 30 nodes", "round ms": 40.0, "round / step": 2.0,
             "tau for 1.3x": 2.6},
        ],
        "details": {
            "out_of_sample": [
                {"speed-up measured": 1.0, "predicted": 1.04, "error": "+4.0%"},
                {"speed-up measured": 1.0, "predicted": 0.875, "error": "-12.5%"},
            ],
            "strong_predictions": [
                {"draft": "qwen_strong eagle3-seed0 (1, 11, 20)", "tree": "tree depth 6, top-10, 30 nodes",
                 "questions": 120, "replay tau": 2.1, "predicted speed-up (decode)": 1.05, "tau for 1.3x": 2.6}
            ],
        },
    }  # fmt: skip
    (folder / "engines_openvino.json").write_text(json.dumps(check))
    (folder / "openvino_rounds_tiny.json").write_text(json.dumps(rounds))
    return check, rounds


def test_the_openvino_lines_say_what_its_records_hold(tmp_path):
    from elsi_lib.study.pages import speed_openvino

    check, rounds = openvino_records(tmp_path)
    [line] = speed_openvino.engine_check(tmp_path)
    assert "2 of 3 runs (chains and trees) gave plain decoding's tokens exactly" in line
    assert "within 0.030 of elsi's own loop" in line and "(2 runs)" in line
    assert (
        "median 1.20x over the lossless runs (range 1.10-1.30x); the best, 1.3x, is A (1, 2, 3)" in line
    )  # two runs: their mean
    assert "12 questions, each run once: fewer than the 40 questions and the 3 repeats a wall-clock claim" in line
    costs = speed_openvino.round_costs(tmp_path)
    assert "a plain decoding step 20.0 ms; one round costs 1.3x a step (chain k=1), 2.0x a step (tree" in costs[0]
    assert "needs tokens per round of 1.69 (chain k=1), 2.6 (tree depth 6, top-10, 30 nodes)" in costs[0]
    assert "1 of 2 runs within 10% of the measured speed-up (worst 12.5%)" in costs[1]
    assert costs[2].startswith("Predicted, not measured: qwen_strong eagle3-seed0") and "1.05x" in costs[2]
    del rounds["rows"][1]["round / step"]
    (tmp_path / "openvino_rounds_tiny.json").write_text(json.dumps(rounds))
    with pytest.raises(ValueError, match=r"openvino_rounds_tiny.json: row 1 lacks \['round / step'\]"):
        speed_openvino.round_costs(tmp_path)
    assert speed_openvino.engine_check(tmp_path / "none") == [] == speed_openvino.round_costs(tmp_path / "none")


@pytest.mark.parametrize(
    "which, change, reason",
    [
        ("check", lambda c, r: c["rows"][1].update({"vs plain": -4}), "vs plain = -4, not a positive speed-up"),
        ("check", lambda c, r: c["rows"][1].update(lossless="true"), "lossless = 'true', not true or false"),
        ("check", lambda c, r: c["rows"][3].update({"vs plain": 1.5}), "a lossy run with a speed-up"),
        ("check", lambda c, r: c["rows"][1].update({"tau OpenVINO": "2"}), "tau OpenVINO = '2'"),
        ("check", lambda c, r: c["settings"].pop("openvino-genai"), "no openvino-genai version"),
        ("check", lambda c, r: c.update(rows=None), "rows must be a list"),
        ("rounds", lambda c, r: r["rows"][1].update({"round / step": -1.6}), "round / step = -1.6"),
        (
            "rounds",
            lambda c, r: r["details"]["out_of_sample"][0].update(error="nan%"),
            "error 'nan%' is not a percentage",
        ),
        ("rounds", lambda c, r: r["details"]["strong_predictions"][0].pop("replay tau"), "strong prediction row 0"),
        # beyond each range, the values a line reads together agree
        ("check", lambda c, r: c["rows"][1].update({"vs plain": 5.0}), r"vs plain 5.0, but its 33.0 tok/s over"),
        ("check", lambda c, r: c["rows"].append(dict(c["rows"][1])), r"with chain k=1 is also row 1"),
        ("check", lambda c, r: c["rows"][1].update(draft=5), "draft = 5, not a name"),
        ("check", lambda c, r: c["rows"][1].update({"tau OpenVINO": 1e6}), r"not a number in \[1, 2\]"),
        ("check", lambda c, r: c["rows"][1].update(decoding="warp"), "decoding 'warp' is neither"),
        ("check", lambda c, r: c["rows"][0].update({"tok/s": 0}), "one plain decoding row with a positive tok/s"),
        ("check", lambda c, r: c["settings"].update(repeat=True), "repeat = True, not a count"),
        ("check", lambda c, r: c["machine"].update(date="yesterday"), "date 'yesterday' is not an ISO date"),
        ("check", lambda c, r: c.update(benchmark="engines_vllm"), "not its file's name"),
        ("rounds", lambda c, r: r["rows"][1].update({"round / step": 0.5}), r"round / step 0.5, but 26.0 ms"),
        ("rounds", lambda c, r: r["rows"][0].update({"round ms": ""}), "plain decoding's round ms ''"),
        ("rounds", lambda c, r: r["rows"][1].update(lossless="false"), "lossless = 'false', not true or false"),
        ("rounds", lambda c, r: r["rows"][1].update({"tau for 1.3x": 0.5}), r"tau for 1.3x 0.5, but 1.3x at 1.3"),
        ("rounds", lambda c, r: r["rows"][1].update(questions=["mixed"]), r"questions \['mixed'\], not one of"),
        ("rounds", lambda c, r: r["rows"].append(dict(r["rows"][1])), "chain k=1 on the mixed questions twice"),
        ("rounds", lambda c, r: r.update(rows=[]), "no rows"),
        ("rounds", lambda c, r: r.update(details=[1]), r"details = \[1\], not a mapping"),
        ("rounds", lambda c, r: r["details"]["out_of_sample"][0].update(error="+1.0%"), r"error \+1.0%, but"),
        ("rounds", lambda c, r: r["details"]["out_of_sample"][0].update(error="0.04"), "'0.04' is not a percentage"),
        ("rounds", lambda c, r: r["details"]["strong_predictions"][0].pop("tree"), "its draft and tree"),
    ],
)
def test_an_openvino_record_with_an_impossible_value_is_refused_naming_it(tmp_path, which, change, reason):
    """Every field's value is checked, not only its presence: -4x, "nanx", or a lossless given as text
    (which would count as lossy) is refused, naming it; and the values a line reads together agree (a
    speed-up is its tokens/s over plain decoding's, a round in steps its time over a step's, the tau a
    speed-up needs that times it, an out-of-sample error its row's); a run recorded twice, a decoding the
    page cannot parse or a repeat of True is refused."""
    from elsi_lib.study.pages import speed_openvino

    check, rounds = openvino_records(tmp_path)
    change(check, rounds)
    (tmp_path / "engines_openvino.json").write_text(json.dumps(check))
    (tmp_path / "openvino_rounds_tiny.json").write_text(json.dumps(rounds))
    read = speed_openvino.engine_check if which == "check" else speed_openvino.round_costs
    with pytest.raises(ValueError, match=reason):
        read(tmp_path)


def test_a_lossy_chain_is_never_reported_as_a_speed_up(folder):
    """A chain whose output differs from plain greedy decoding's is never the "Best chain ... measured"."""
    _, vllm = speed.cost_results(folder)
    fastest = max(vllm["chains"], key=lambda r: r["speed-up measured"])
    fastest["lossless"] = False
    best = speed.best_chain(vllm)
    assert best["k"] != fastest["k"] and best["lossless"] is True
    assert f"Best chain k = {best['k']}" in " ".join(speed.finding(vllm))
    for row in vllm["chains"]:
        row["lossless"] = False
    assert speed.best_chain(vllm) is None
    (line,) = speed.finding(vllm)
    assert "no speed-up is reported" in line and "Best chain" not in line


@pytest.mark.parametrize(
    "change, reason",
    [
        (lambda r: r["machine"].pop("cpu"), "machine's cpu = None, not text"),
        (lambda r: r["machine"].update(date=20240101), "machine's date = 20240101, not text"),
        (lambda r: r["settings"].update(ceiling=None) or r["rows"][0].update(ceiling=-5.0), r"ceiling = -5.0"),
        (lambda r: r["settings"].update({"draft autocast": "true"}), "draft autocast = 'true', not true or false"),
        (lambda r: r["settings"].update(device=None), "settings' device = None, not text"),
        (lambda r: r["settings"]["target forward ms by tokens"].update({"2": 0.0}), r"\['2'\] = 0.0"),
        (lambda r: r["settings"]["target forward ms by tokens"].update({"many": 3.0}), r"\['many'\]"),
        (lambda r: r["settings"].update({"plain decode step ms": 0}), "plain decode step ms = 0"),
        (lambda r: r["rows"][0].update(error=float("nan")), "NaN is no measurement"),
        (lambda r: r.update(rows={"a": 1}), "is not a chain's or a tree's"),
    ],
)
def test_an_accelerator_record_that_cannot_be_read_is_refused_naming_the_field(tmp_path, change, reason):
    """The device line reads every accelerator record: each is checked first, naming the file and the
    field (a missing CPU, a date as a number, a negative ceiling, text where true or false belongs, a
    zero time that a ratio divides by, NaN errors)."""
    record = json.loads(json.dumps(device_record(False, 4.0, 80.0)))  # a copy: the fixtures share MACHINE
    change(record)
    (tmp_path / f"{record['benchmark']}.json").write_text(json.dumps(record))
    with pytest.raises(ValueError, match=reason) as caught:
        speed_device.device_results(tmp_path)
    assert record["benchmark"] in str(caught.value)


def test_accelerator_records_of_two_devices_make_no_one_line(tmp_path):
    """One line speaks for one device: records of two are refused, not read as the first one's."""
    for autocast, device in ((False, "NVIDIA H200"), (True, "Apple M1")):
        record = device_record(autocast, 4.0, 80.0)
        record["settings"]["device"] = device
        (tmp_path / f"{record['benchmark']}.json").write_text(json.dumps(record))
    with pytest.raises(ValueError, match=r"records of \['Apple M1', 'NVIDIA H200'\]"):
        speed_device.device_results(tmp_path)


def test_a_truncated_or_structurally_wrong_cost_file_is_refused_naming_it(tmp_path):
    import json as json_

    record = vllm_record()
    path = tmp_path / f"{record['benchmark']}.json"
    path.write_text(json_.dumps(record)[:40])
    with pytest.raises(ValueError, match=f"{path.name}: not readable JSON"):
        speed.cost_results(tmp_path)
    for change, reason in (
        (lambda r: r["settings"].pop("plain tok/s"), "settings have no 'plain tok/s'"),
        (lambda r: r["settings"].update({"per-step acceptance": []}), "per-step acceptance \\[\\] is not a list"),
        (lambda r: r.update(rows={"k": 1}), "settings must be a mapping and rows a list"),
        (lambda r: [x.pop("speed-up predicted") for x in r["rows"]], "has speed-up predicted None"),
        (lambda r: [x.update(error=float("nan")) for x in r["rows"] if x["error"] != "calibration"], "NaN is no"),
    ):
        record = json_.loads(json_.dumps(vllm_record()))
        change(record)
        path.write_text(json_.dumps(record))
        with pytest.raises(ValueError, match=reason):
            speed.cost_results(tmp_path)


@pytest.mark.parametrize(
    "change, reason",
    [
        (lambda r: r["settings"].update(generated=r["settings"]["questions"] - 1), "generated = .*, not a count >="),
        (lambda r: r["settings"].update({"plain tok/s": 999.0}), "plain tok/s 999.0 is not generated / plain s"),
        (lambda r: r["settings"].pop("questions"), "settings have no 'questions'"),
        (lambda r: [x.pop("lossless") for x in r["rows"]], "lossless None is not true or false"),
        (lambda r: [x.pop("tau measured", None) for x in r["rows"]], "has no tau measured"),
    ],
)
def test_a_cost_files_settings_agree_with_each_other(tmp_path, change, reason):
    """Settings a finding reads together are checked together: a generation of fewer tokens than questions
    (a negative tau needed), a rate that is not its tokens over its seconds, a row without its lossless
    flag (a lossy run taken as lossless), a chain without its tau."""
    record = json.loads(json.dumps(elsi_record()))
    change(record)
    (tmp_path / f"{record['benchmark']}.json").write_text(json.dumps(record))
    with pytest.raises(ValueError, match=reason):
        speed.cost_results(tmp_path)


def test_a_cost_file_with_a_key_twice_is_refused(tmp_path):
    """json keeps the last of two keys without a word: the reader refuses the file, naming it."""
    record = vllm_record()
    text = json.dumps(record).replace('"plain tok/s": ', '"plain tok/s": 1.0, "plain tok/s": ', 1)
    (tmp_path / f"{record['benchmark']}.json").write_text(text)
    with pytest.raises(ValueError, match="key 'plain tok/s' appears twice"):
        speed.cost_results(tmp_path)


def _write(folder, *records):
    for record in records:
        (folder / f"{record['benchmark']}.json").write_text(json.dumps(record))


def _renamed(record: dict, name: str) -> dict:
    return {**json.loads(json.dumps(record)), "benchmark": name}


def _weight_first(record: dict, **usual) -> dict:
    record["settings"] |= {
        "target forward ms by tokens": {"2": 22.0},
        "plain decode step ms": 20.0,
        "with F.linear": {"target forward ms by tokens": {"2": 45.0}, "plain decode step ms": 22.5, **usual},
    }
    return record


@pytest.mark.parametrize(
    "change, reason",
    [
        # a row the finding would skip without a word: every row is read
        (lambda e, v: [r.update(K=r.pop("k")) for r in v["rows"]], r"cost_vllm_tiny.json: row 0: a chain length k"),
        (lambda e, v: v["rows"][2].pop("k"), "row 2: a chain length k"),
        (lambda e, v: [r.update(shape="Chain") for r in e["rows"]], r"row 0: a shape \('chain' or 'tree'\)"),
        (lambda e, v: e["rows"][1].update(depth=5), "row 1: a chain of 2 with depth 5"),
        # names that sort a run onto a line: one spelling each
        (lambda e, v: v["settings"].update(engine="vllm 0.32.0"), "settings' engine = 'vllm 0.32.0'"),
        (lambda e, v: v["settings"].update(dtype="fp32"), "settings' dtype = 'fp32', not one of"),
        (lambda e, v: v["settings"].pop("family"), "settings' family = None, not a name"),
        (lambda e, v: v["settings"].update({"question set": 5}), "question set = 5, not a name"),
        (lambda e, v: v.pop("benchmark"), "benchmark None, not its file's name 'cost_vllm_tiny'"),
        # counts and shares as what they are
        (lambda e, v: v["settings"].update(repeat=True), "repeat = True, not a count"),
        (lambda e, v: v["settings"].update({"engines per chain": "2"}), "engines per chain = '2', not a count"),
        (
            lambda e, v: v["settings"].update(repeat=3) or v["rows"][0].update(spread="0.075"),
            "spread '0.075' is no share",
        ),
        (lambda e, v: v["settings"].update({"target forward ms by tokens": {"1": 9.0, "2x2x1": 9.0}}), "a count and"),
        (lambda e, v: v["settings"].update({"draft ms by shape": {"5": 9.0}}), "a shape KxDxT and"),
        # the lever's other side, checked as its own timings
        (lambda e, v: _weight_first(e, **{"plain decode step ms": -134.5}), "with F.linear = .*positive plain decode"),
        (lambda e, v: _weight_first(e, **{"plain decode step ms": 0}), "with F.linear = .*positive plain decode"),
        (
            lambda e, v: _weight_first(e, **{"target forward ms by tokens": {"3": 1.0}}),
            "over 2 tokens and a plain step",
        ),
        (lambda e, v: e["settings"].update({"with F.linear": "n/a"}), "with F.linear = 'n/a'"),
    ],
)
def test_a_cost_record_a_line_would_misread_is_refused_naming_it(tmp_path, change, reason):
    """What a page line sorts, skips or divides by is checked when the record is read: a row it would skip,
    an engine or dtype spelt otherwise (read as another engine's or left out of a median), a repeat of
    True, a spread as text, a table keyed by what it is not, the weight-first lever's other side."""
    elsi, vllm = elsi_record(), vllm_record()
    names = (elsi["benchmark"], vllm["benchmark"])
    change(elsi, vllm)
    for name, record in zip(names, (elsi, vllm)):
        (tmp_path / f"{name}.json").write_text(json.dumps(record))
    with pytest.raises(ValueError, match=reason):
        speed.cost_results(tmp_path)


def test_one_run_recorded_twice_is_refused(tmp_path):
    """A record copied under another name would count twice in each median and count: its name must be
    its file's, and two records of identical settings (timings included) are one run."""
    _write(tmp_path, vllm_record())
    (tmp_path / "cost_vllm_tiny_again.json").write_text(json.dumps(vllm_record()))
    with pytest.raises(ValueError, match="benchmark 'cost_vllm_tiny', not its file's name 'cost_vllm_tiny_again'"):
        speed.cost_results(tmp_path)
    _write(tmp_path, _renamed(vllm_record(), "cost_vllm_tiny_again"))
    with pytest.raises(ValueError, match="cost_vllm_tiny and cost_vllm_tiny_again hold the same run"):
        speed.cost_results(tmp_path)
    for autocast in (False, False):
        record = device_record(autocast, 4.0, 80.0)
        _write(tmp_path, record, _renamed(record, "cost_device_cuda_again"))
    with pytest.raises(ValueError, match="hold the same run"):
        speed_device.device_results(tmp_path)


@pytest.mark.parametrize(
    "change, reason",
    [
        (lambda r: r["settings"].update({"plain tok/s": 999.0}), "plain tok/s 999.0 is not generated / plain s"),
        (lambda r: r["rows"][0].update(error="calibration"), "error = 'calibration', not a number"),
        (lambda r: r["settings"]["target forward ms by tokens"].update({"2x2x1": 3.0}), r"\['2x2x1'\]"),
        (lambda r: r["settings"]["draft ms by shape"].pop("2x2x1"), "has no 2x2x1, the longest chain's"),
        (lambda r: r.update(rows=[x for x in r["rows"] if x["shape"] == "tree"]), "no chain's row"),
        (lambda r: r["rows"][0].update({"tau measured": 50.0}), "tau measured 50.0 beyond the 2 a chain of 1"),
        (lambda r: r.update(benchmark="cost_device_other"), "not its file's name"),
    ],
)
def test_an_accelerator_record_a_line_would_misread_is_refused(tmp_path, change, reason):
    record = json.loads(json.dumps(device_record(False, 4.0, 80.0)))
    name = record["benchmark"]
    change(record)
    (tmp_path / f"{name}.json").write_text(json.dumps(record))
    with pytest.raises(ValueError, match=reason):
        speed_device.device_results(tmp_path)


def test_a_device_line_says_tau_as_measured():
    """The line says "never accepted" only where every tau is 1, and otherwise gives the range."""
    record = device_record(False, 4.0, 80.0)
    assert "the random draft's tau is 1.40-2.00" in speed_device.device_finding([record])[0]
    for row in record["rows"]:
        row["tau measured"] = 1.0
    assert "never accepted (tau 1.00)" in speed_device.device_finding([record])[0]


def test_the_engine_checks_caveat_says_which_of_questions_and_repeats_fall_short(tmp_path):
    from elsi_lib.study.pages import speed_openvino

    check, _ = openvino_records(tmp_path)
    for questions, repeat, said in (
        (48, 1, "48 questions, each run once: fewer than the 3 repeats"),
        (12, 3, "12 questions, each run 3 times: fewer than the 40 questions a wall-clock"),
        (40, 3, None),
    ):
        check["settings"].update(questions=questions, repeat=repeat)
        (tmp_path / "engines_openvino.json").write_text(json.dumps(check))
        [line] = speed_openvino.engine_check(tmp_path)
        assert (said in line) if said else "a check's, not a measurement" not in line


def test_an_engine_checks_lossless_is_what_its_output_digests_say(tmp_path):
    from elsi_lib.study.pages import speed_openvino

    check, _ = openvino_records(tmp_path)
    plain = ["a", "b"]
    check["details"] = {
        "output digests": {"plain": plain, "a chain k=1": plain, "a tree depth 6, top-10, 30 nodes": plain,
                           "a chain k=3": ["a", "c"]}
    }  # fmt: skip
    (tmp_path / "engines_openvino.json").write_text(json.dumps(check))
    assert speed_openvino.engine_check(tmp_path)
    check["rows"][3].update(lossless=True, **{"vs plain": 1.5})  # a lossy run called lossless
    (tmp_path / "engines_openvino.json").write_text(json.dumps(check))
    with pytest.raises(ValueError, match="chain k=3: lossless True, but its output digests differ"):
        speed_openvino.engine_check(tmp_path)
    check["details"]["output digests"].pop("a chain k=3")
    (tmp_path / "engines_openvino.json").write_text(json.dumps(check))
    with pytest.raises(ValueError, match="one list a draft run"):
        speed_openvino.engine_check(tmp_path)


def test_the_pages_tables_are_the_records_never_the_markdown_beside_them(folder, tmp_path):
    """A .md that says other than its record (a number changed, a cell dropped, undecodable bytes) or
    none at all changes nothing: the page's tables are made from the checked JSON."""
    images = tmp_path / "images"
    images.mkdir()
    (folder / "cost_vllm_tiny.md").write_bytes(b"| 9.195 | \xff\xfe |\n")
    (folder / "cost_elsi_tiny.md").unlink()
    text = speed_page.page(images, folder)
    assert "9.195" not in text and "## `cost_elsi_tiny`" in text and "| 1 | 1.3 |" in text
    (folder / "cost_vllm_tiny.json").write_bytes(b'{"benchmark": "\xff"}')
    with pytest.raises(ValueError, match="cost_vllm_tiny.json: not readable JSON"):
        speed_page.page(images, folder)


@pytest.mark.parametrize(
    "content, reason",
    [
        ({}, "no rows"),
        (
            {"rows": [{"weight (out x in)": "all linears", "rows": 2, "F.linear / its one row": float("nan")}]},
            "not readable",
        ),
        ({"rows": [{"weight (out x in)": "all linears", "rows": 2, "F.linear / its one row": "1.99"}]}, "row 0"),
    ],
)
def test_a_linears_record_is_checked_when_read(tmp_path, content, reason):
    (tmp_path / "bench_linears_tiny.json").write_text(json.dumps(content))
    with pytest.raises(ValueError, match=f"bench_linears_tiny.json: {reason}"):
        speed.linear_cost("tiny", tmp_path)
    (tmp_path / "bench_linears_tiny.json").write_bytes(b"\xff\xfe")
    with pytest.raises(ValueError, match="bench_linears_tiny.json: not readable JSON"):
        speed.linear_cost("tiny", tmp_path)


def _measured(row: dict, factor: float) -> None:
    """The row's measured speed-up scaled by `factor`, its error (predicted - measured) / measured with it."""
    row["speed-up measured"] = round(row["speed-up measured"] * factor, 3)
    if isinstance(row.get("error"), float):
        row["error"] = round((row["speed-up predicted"] - row["speed-up measured"]) / row["speed-up measured"], 3)


@pytest.mark.parametrize(
    "name, change, reason",
    [
        (
            "cost_elsi_table3_f32",
            lambda r: _measured(r["rows"][0], 1.2),
            r"row 0: speed-up measured .*, but plain s over the prefill and its 144 rounds",
        ),
        (
            "cost_elsi_table3_f32",
            lambda r: r["rows"][3].update({"round ms measured": r["rows"][3]["round ms measured"] * 0.8}),
            r"row 3: speed-up measured",
        ),
        (
            "cost_vllm_qwen_strong_probe-m3-seed0_coding",
            lambda r: _measured(r["rows"][1], 0.9),
            r"row 1: speed-up measured .* is not plain s / the run's seconds",
        ),
        (
            "cost_vllm_qwen_strong_probe-m3-seed0_coding",
            lambda r: r["rows"][2].update(lossless=not r["rows"][2]["lossless"]),
            r"row 2: lossless (True|False), but its run's is",
        ),
        (
            "cost_vllm_qwen_strong_probe-m3-seed0_coding",
            lambda r: r["rows"][0].update({"tau vLLM": 1.9}),
            r"row 0: tau vLLM 1.9, but its run's 1 \+ accepted / drafts = ",
        ),
        (
            "cost_vllm_qwen_strong_probe-m3-seed0_coding",
            lambda r: r["settings"].update(family="Qwen/Qwen2.5-Coder-0.5B-Instruct"),
            r"settings' family = 'Qwen/Qwen2.5-Coder-0.5B-Instruct': the bundled family is named 'qwen2.5-coder-0.5b'",
        ),
        (
            "cost_elsi_table3_f32",
            lambda r: r["settings"].update({"per-step acceptance": [0.2]}),
            "per-step acceptance has 1 rates, chains run to k = 5",
        ),
    ],
)
def test_a_speed_up_its_own_clock_does_not_give_is_refused(tmp_path, name, change, reason):
    """A measured speed-up is plain decoding's seconds over the run's: a row whose speed-up its own run
    time, or its rounds at their measured cost and the prefill, do not give (within the 5% a round's
    bookkeeping leaves out) is refused naming the file and the row; so is a row whose lossless or tau its
    run's counts contradict, a bundled family spelt as its hub id (its runs would leave their line) and
    fewer per-step rates than the chains read; the committed records all agree."""
    record = json.loads((speed.BENCH / f"{name}.json").read_text())
    change(record)
    (tmp_path / f"{name}.json").write_text(json.dumps(record))
    with pytest.raises(ValueError, match=reason) as caught:
        speed.cost_results(tmp_path)
    assert f"{name}.json" in str(caught.value)
    assert speed.cost_results(speed.BENCH)  # the committed records pass
