"""The bf16 warning (elsi_lib.common.hardware): it reads the CPU's flags, warns only on a CPU known to lack
bf16 matmul instructions, and never on another device or an unknown CPU."""

import warnings

import pytest

from elsi_lib.common import hardware as H


def test_flags_are_read_from_cpuinfo(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu avx2 fma\n\nprocessor\t: 1\nflags\t\t: fpu avx2 fma\n")
    assert H.cpu_flags(info) == {"fpu", "avx2", "fma"}
    assert H.cpu_flags(tmp_path / "missing") is None
    info.write_text("processor\t: 0\n")
    assert H.cpu_flags(info) is None


def test_it_warns_only_where_bf16_is_known_to_be_slow():
    avx2, amx, avx512 = {"avx2", "fma"}, {"avx2", "amx_bf16"}, {"avx512f", "avx512_bf16"}
    assert H.bf16_matmul_is_slow(avx2) and not H.bf16_matmul_is_slow(amx) and not H.bf16_matmul_is_slow(avx512)
    with pytest.warns(RuntimeWarning, match="draft training runs under bfloat16 autocast.*autocast_bf16=False"):
        assert H.warn_if_bf16_is_slow("cpu", "draft training", avx2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not H.warn_if_bf16_is_slow("cpu", "draft training", avx512)
        assert not H.warn_if_bf16_is_slow("cuda", "draft training", avx2)
    assert H.bf16_matmul_is_slow(set())


def test_the_training_default_follows_the_cpu(monkeypatch):
    from elsi_lib.draft.train import TrainSettings

    monkeypatch.setattr(H, "cpu_flags", lambda: {"avx2"})
    assert TrainSettings().autocast_bf16 is False and TrainSettings(autocast_bf16=True).autocast_bf16 is True
    monkeypatch.setattr(H, "cpu_flags", lambda: {"avx2", "amx_bf16"})
    assert TrainSettings().autocast_bf16 is True
    monkeypatch.setattr(H, "cpu_flags", lambda: None)  # unknown: float32, said (not bf16 without a word)
    with pytest.warns(RuntimeWarning, match="cannot read this CPU's flags"):
        assert TrainSettings().autocast_bf16 is False


def test_arm_features_are_read(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nFeatures\t: fp asimd bf16 i8mm\n")
    assert H.cpu_flags(info) == {"fp", "asimd", "bf16", "i8mm"} and not H.bf16_matmul_is_slow(H.cpu_flags(info))
    info.write_bytes(b"\xff\xfe flags")
    assert H.cpu_flags(info) is None


def test_replay_and_the_loop_default_to_the_cpu(monkeypatch):
    """replay and speculative_generate default to the training default of this CPU, not to bf16
    autocast whatever the CPU."""
    import inspect

    from elsi_lib.draft.decode import speculative_generate
    from elsi_lib.draft.replay import replay
    from elsi_lib.draft.runner import resolved_autocast

    for fn in (replay, speculative_generate):
        assert inspect.signature(fn).parameters["autocast"].default is None
    monkeypatch.setattr(H, "cpu_flags", lambda: {"avx2"})
    assert resolved_autocast(None) is False and resolved_autocast(True) is True
    monkeypatch.setattr(H, "cpu_flags", lambda: {"amx_bf16"})
    assert resolved_autocast(None) is True and resolved_autocast(False) is False
