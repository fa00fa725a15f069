"""Each method and engine declared once (elsi_lib.selection.methods, .engines): one entry plus its code
adds one, read by the parser, the selection dispatch, the restriction and the default set; an engine or
method not declared is refused, never given another's rules."""

import dataclasses
import importlib
import json

import pytest

from elsi_lib.selection import engines, feasible, methods
from elsi_lib.selection.conventions import engine_fragment


def test_a_fake_method_is_one_entry(monkeypatch, capsys, tmp_path, tiny_tokenizer):
    """`middle`, the m layers around the middle, chosen from the capture: added as one entry, the
    command takes it (and its spelling), answers with its set and compares it with the default."""
    from conftest import replied_conversations, write_sharegpt

    from elsi_lib import random_model

    def middle(Z, m, k_beam, k_expand, where):
        n = Z.shape[0]
        layers = tuple(range(n // 2 - m // 2, n // 2 - m // 2 + m))
        return layers, 0.0

    fake = methods.Method("middle", ("the-middle",), "capture", "middle m={m}", "set entropy", (), middle)
    monkeypatch.setitem(methods.METHODS, "middle", fake)
    from elsi_lib import cli, cli_args, cli_select

    for module in (cli_args, cli_select, cli):
        importlib.reload(module)
    folder = tmp_path / "model"
    random_model(n_layers=8, hidden_size=32, vocab_size=len(tiny_tokenizer), seed=0).save_pretrained(folder)
    tiny_tokenizer.save_pretrained(folder)
    data = tmp_path / "convs.jsonl"
    write_sharegpt(data, replied_conversations(12, seed=3, reply_words=(40, 80)))
    argv = [
        "select",
        "--model",
        str(folder),
        "--data",
        str(data),
        "--prompts",
        "12",
        "--block",
        "4",
        "--format",
        "json",
    ]
    try:
        assert cli.main([*argv, "--method", "the-middle"]) == 0
        result = json.loads(capsys.readouterr().out)
        assert result["method"] == "middle" and result["layers"] == [3, 4, 5]
        assert result["decision"]["default_set"] == [1, 3, 4] and result["decision"]["best_set"] == [3, 4, 5]
    finally:
        monkeypatch.undo()
        for module in (cli_args, cli_select, cli):
            importlib.reload(module)
    with pytest.raises(ValueError, match="unknown method 'middle'"):
        methods.method("middle")


def test_a_fake_engine_gets_its_own_rules_never_anothers(monkeypatch):
    """A declared engine is restricted by its own entry (here: no last layer, for its own reason; two
    layers exactly) and compared with its own default; without an id conversion written for it, its
    format is refused plainly, never falling through to SGLang's reading."""
    toy = engines.Engine(
        "toy",
        "input",
        ("1.0",),
        "toy reads the last layer as its logits",
        False,
        2,
        "eagle2",
        "exactly two layers: toy's rule",
    )
    monkeypatch.setitem(engines.ENGINES, "toy", toy)
    rule = feasible.restriction("toy", 10)
    assert rule.allowed == tuple(range(9)) and rule.m == 2
    assert rule.why == ("no last layer (9): toy reads the last layer as its logits", "exactly two layers: toy's rule")
    assert methods.default_of("toy", 10).layers == (9,)  # its declared default, EAGLE-2's set
    with pytest.raises(ValueError, match="no id conversion"):
        engine_fragment((1, 2), 10, "toy")
    with pytest.raises(ValueError, match="unknown engine 'nope'"):
        feasible.restriction("nope", 10)
    with pytest.raises(ValueError, match="unknown engine 'nope'"):
        methods.default_of("nope", 10)


def test_every_declared_engine_and_method_is_consistent():
    from elsi_lib.cli_args import ENGINE_VERSIONS, ENGINES, FORMATS, MEASURED, METHODS

    assert ENGINES == tuple(engines.ENGINES) and FORMATS[2:] == ENGINES
    assert METHODS == tuple(methods.METHODS) and set(MEASURED) == {n for n, m in methods.METHODS.items() if m.measured}
    assert all(ENGINE_VERSIONS[n] == e.versions for n, e in engines.ENGINES.items())
    for m in methods.METHODS.values():
        assert (m.choose is None) != (m.reads == "capture") or m.reads != "capture"
        assert (m.fixed is not None) == (m.reads == "fixed") and dataclasses.is_dataclass(m)
