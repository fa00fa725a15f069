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
    monkeypatch.setattr(H, "cpu_flags", lambda: None)  # unknown: the former default
    assert TrainSettings().autocast_bf16 is True
