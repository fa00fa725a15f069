"""Notebook 06's methods (elsi_lib.study.experiments.layer_choices): the layer sets a draft is trained on, each with an
id apart from its label, and their entropy ranks and compartments, on small random layer stacks."""

import itertools
import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from conftest import random_layers
from elsi_lib import eagle3_layers, elsi, elsi_c, exhaustive, set_entropy
from elsi_lib.study.experiments.layer_choices import beam_overlap, draft_methods, method_row
from elsi_lib.draft.config import FINAL_NORM as FINAL
from elsi_lib.study.paper.layer_measures import regimes
from elsi_lib.selection.cka import compartments

N = 8


def stats_for(Z, Z_no_template=None):
    return {
        "entropy": SimpleNamespace(Z=Z),
        "entropy_no_template": SimpleNamespace(Z=Z if Z_no_template is None else Z_no_template),
    }


def single_entropies(Z):
    return np.array([set_entropy(Z, (l,)) for l in range(Z.shape[0])])


@pytest.mark.parametrize("seed", range(6))
def test_draft_methods_rows(seed):
    Z, Z2 = random_layers(N, 6, 10, seed=seed), random_layers(N, 6, 10, seed=seed + 100)
    methods = draft_methods(stats_for(Z, Z2))
    by = methods.set_index("method")
    assert list(methods.columns) == ["id", "method", "source", "setting", "m", "layers", "entropy"]
    assert methods["id"].is_unique and methods.method.is_unique
    ids = dict(zip(methods.method, methods["id"]))
    assert ids["EAGLE3"] == "eagle3" and ids["ELSI m=3"] == "elsi-m3" and ids["ELSI-C m=2"] == "elsi-c-m2"

    assert by.loc["EAGLE2", "source"] == FINAL and by.loc["EAGLE2", "layers"] == (N - 1,)
    assert by.loc["EAGLE3", "source"] == eagle3_layers(N) == (1, 3, 4)

    singles = single_entropies(Z)
    rule = by.loc["ELSI m=1", "source"]
    assert rule == (N // 2 + int(np.argmax(singles[N // 2 :])),)  # the best layer from N // 2 on
    assert rule[0] >= N // 2
    best = int(np.argmax(singles))
    assert ("ELSI m=1, unrestricted" in by.index) == (best < N // 2)  # kept only when it differs
    if best < N // 2:
        assert by.loc["ELSI m=1, unrestricted", "source"] == (best,)
    for m in (2, 3):
        assert by.loc[f"ELSI m={m}", "source"] == elsi(Z, m).layers
        assert by.loc[f"ELSI-C m={m}", "source"] == elsi_c(Z, m).layers
    lowest = tuple(sorted(int(l) for l in np.argsort(singles)[:3]))
    assert by.loc["lowest-entropy m=3", "source"] == lowest

    variants = {
        "ELSI m=3, template excluded": ("no_template", elsi(Z2, 3).layers),
        "ELSI m=3, Frobenius": ("frobenius", elsi(Z, 3, normalize="frobenius").layers),
    }
    paper_sources = set(methods.loc[methods.setting == "paper", "source"])
    for name, (setting, layers) in variants.items():
        assert (name in by.index) == (layers not in paper_sources)  # a variant on a paper set is dropped
        if name in by.index:
            assert by.loc[name, "setting"] == setting and by.loc[name, "source"] == layers
    non_paper = methods[methods.setting != "paper"]
    assert not set(non_paper.source) & paper_sources
    assert non_paper.source.is_unique

    for row in methods.itertuples():
        layers = (N - 1,) if row.source == FINAL else row.source
        assert row.layers == layers and row.m == len(layers)
        assert row.entropy == pytest.approx(set_entropy(Z, layers))  # always the paper setting's Z


def test_draft_methods_drops_a_variant_that_chose_the_paper_set():
    Z = random_layers(N, 6, 10, seed=1)
    with_own = draft_methods(stats_for(Z, random_layers(N, 6, 10, seed=101)))
    same = draft_methods(stats_for(Z, Z))  # no-template statistics equal to the paper's: same ELSI m=3
    assert "ELSI m=3, template excluded" in set(with_own.method)
    assert "ELSI m=3, template excluded" not in set(same.method)
    assert len(same) == len(with_own) - 1


def test_beam_overlap_ranks_against_brute_force():
    Z = random_layers(N, 6, 10, seed=3)
    opt3, opt2 = exhaustive(Z, 3).layers, exhaustive(Z, 2).layers
    methods = pd.DataFrame(
        {"method": ["opt3", "opt2", "eagle3", "mid", "single"], "layers": [opt3, opt2, (1, 3, 4), (0, 5, 7), (6,)]}
    )
    out = beam_overlap(Z, methods).set_index("method")
    assert out.loc["opt3", "rank"] == 1 and out.loc["opt2", "rank"] == 1
    bounds = compartments(Z).boundaries
    for row in methods.itertuples():
        m = len(row.layers)
        sets = list(itertools.combinations(range(N), m))
        entropies = {s: set_entropy(Z, s) for s in sets}
        mine = entropies[row.layers]
        rank = 1 + sum(e > mine + 1e-9 for e in entropies.values())
        got = out.loc[row.method]
        assert got["entropy"] == pytest.approx(mine)
        assert got["rank"] == rank and got["of"] == math.comb(N, m)
        assert got["percentile"] == pytest.approx(100.0 * (1 - (rank - 1) / math.comb(N, m)))
        top = sorted(sets, key=lambda s: -entropies[s])[:10]
        assert got["top-10 sets sharing a layer"] == sum(bool(set(s) & set(row.layers)) for s in top)
        assert len(got["compartments"]) == m
        assert list(got["compartments"]) == sorted(got["compartments"])
        assert all(0 <= c <= len(bounds) for c in got["compartments"])
    assert out.loc["mid", "rank"] > 1  # the brute force can tell the sets apart


def test_beam_overlap_compartment_of_a_layer_at_a_boundary():
    Z = random_layers(N, 6, 10, seed=3)
    assert compartments(Z).boundaries.tolist() == [1, 3]  # after layer 1, after layer 3
    labels, _ = regimes(Z)  # the same two boundaries: early 0-1, middle 2-3, late 4-7
    assert [labels[l] for l in (1, 3, 4)] == ["early", "middle", "late"]
    out = beam_overlap(Z, pd.DataFrame({"method": ["EAGLE3"], "layers": [(1, 3, 4)]}))
    assert out.loc[0, "compartments"] == (0, 1, 2)


def test_method_row_finds_a_method_by_id_and_names_the_others():
    methods = draft_methods(stats_for(random_layers(N, 6, 10, seed=2)))
    assert method_row(methods, "eagle3").method == "EAGLE3"
    with pytest.raises(KeyError, match="eagle2"):
        method_row(methods, "EAGLE3")  # a label is not an id


def test_select_methods_keeps_the_order_given_and_names_a_missing_id():
    from elsi_lib.study.experiments.layer_choices import select_methods

    methods = pd.DataFrame({"id": ["eagle2", "eagle3", "elsi-m3"], "method": ["EAGLE2", "EAGLE3", "ELSI m=3"]})
    chosen = select_methods(methods, ["elsi-m3", "eagle2"])
    assert list(chosen["id"]) == ["elsi-m3", "eagle2"] and list(chosen.columns) == ["id", "method"]
    with pytest.raises(KeyError, match="no method 'elsi-c-m3'"):
        select_methods(methods, ["eagle3", "elsi-c-m3"])
    assert list(select_methods(methods, ["elsi-c-m3", "eagle3"], present_only=True)["id"]) == ["eagle3"]


def test_the_probes_sets_join_the_methods_unless_another_method_has_them():
    Z = random_layers(N, 6, 10, seed=1)
    stats = stats_for(Z, random_layers(N, 6, 10, seed=101))
    base = draft_methods(stats)
    fresh = next(s for s in itertools.combinations(range(N), 3) if s not in set(base.source))
    with_probe = draft_methods(stats, probe={3: SimpleNamespace(layers=fresh)})  # a ProbeChoice, or its layers
    row = method_row(with_probe, "probe-m3")
    assert row.source == fresh and row.method == "probe m=3" and row.setting == "probe" and row.m == 3
    assert row.entropy == pytest.approx(set_entropy(Z, fresh)) and len(with_probe) == len(base) + 1
    taken = draft_methods(stats, probe={3: base.set_index("id").source["eagle3"]})
    assert "probe-m3" not in set(taken["id"]) and len(taken) == len(base)  # EAGLE3's set: the same draft


def test_run_methods_rebuilds_exactly_what_a_parameter_file_trained(tmp_path, monkeypatch):
    """A finished run's checkpoint is keyed by all its drafts: run_methods must rebuild its methods from
    the parameter file's calibration size, seed, probe rank and method ids."""
    from elsi_lib.study.experiments import layer_choices as M
    from elsi_lib.study.paper import captures

    STATS = stats_for(random_layers(N, 6, 10, seed=3), random_layers(N, 6, 10, seed=103))
    fresh = next(s for s in itertools.combinations(range(N), 3) if s not in set(M.draft_methods(STATS).source))
    calls = {}

    def fake_stats(models, n_prompts, seed=0, **kw):
        calls["stats"] = (tuple(models), n_prompts, seed)
        return {models[0]: STATS}

    def fake_probe(model, n_prompts, set_sizes, seed=0, rank=None, **kw):
        calls["probe"] = (model, n_prompts, tuple(set_sizes), seed, rank)
        return {3: fresh}

    monkeypatch.setattr(captures, "paper_stats", fake_stats)
    monkeypatch.setattr(captures, "probe_choices", fake_probe)
    path = tmp_path / "run.yaml"
    path.write_text(
        'MODEL: "m"\nN_PROMPTS: 40\nSEED: 2\nPROBE_RANK: 16\nMETHOD_IDS: ["probe-m3", "eagle3"]\n'
        'EXPERIMENT: {"n_train": 7, "n_heldout": 2}\n'
    )
    exp, methods = M.run_methods(path)
    assert exp.n_train == 7 and exp.model == "m"
    assert calls == {"stats": (("m",), 40, 2), "probe": ("m", 40, (3,), 2, 16)}
    assert list(methods["id"]) == ["probe-m3", "eagle3"] and methods.iloc[0].source == fresh
    path.write_text('MODEL: "m"\nN_PROMPTS: 30\nPROBE_RANK: null\n')  # notebook 06 without the probe
    calls.clear()
    _, every = M.run_methods(path)
    assert "probe" not in calls and calls["stats"] == (("m",), 30, 0)
    assert list(every["id"]) == list(M.draft_methods(STATS)["id"])
    path.write_text('MODEL: "m"\nN_PROMPTS: 30\nPROBE_RANK: null\nMETHOD_IDS: ["probe-m3"]\n')  # notebook 07: always
    calls.clear()
    assert list(M.run_methods(path)[1]["id"]) == ["probe-m3"] and calls["probe"] == ("m", 30, (3,), 0, None)
    path.write_text('MODEL: "m"\nPROBE_RANK: 8\n')
    with pytest.raises(ValueError, match=r"does not set \['N_PROMPTS'\]"):
        M.run_methods(path)
    for name in ("tables_scale.yaml", "tables_qwen.yaml", "tables_strong.yaml"):  # the committed files set both
        import yaml
        from elsi_lib.common.cachefiles import REPO_ROOT

        assert {"N_PROMPTS", "PROBE_RANK"} <= set(yaml.safe_load((REPO_ROOT / "notebooks" / name).read_text()))
