"""On a CPU with Intel AMX, MXNet 1.9.1's oneDNN runs bf16 on AMX only when asked
(``mxnet_amp.mx.hardware.enable_amx()``); without it a bf16 model is slower than fp32 there. A
plain conversion and a converted block's first run then say so once, with the one-line fix;
on a CPU without AMX, or with AMX allowed, nothing is said. Both cpuinfo cases are simulated
(a cpuinfo file of the test's own, and the flags given)."""
from __future__ import annotations

import warnings

import mxnet as mx
import pytest

import mxnet_amp as amp
from mxnet_amp.mx import hardware
from mxnet_amp.mx.hardware import AMXOffWarning, amx_off_note, bf16_runs_natively, cpu_flags

from helpers import small_model

SAPPHIRE_RAPIDS = "fpu sse avx2 avx512f avx512_bf16 amx_bf16 amx_tile amx_int8"
EPYC_ZEN4 = "fpu sse avx2 avx512f avx512_bf16"


def _cpuinfo(tmp_path, flags: str) -> str:
    path = tmp_path / "cpuinfo"
    path.write_text(f"processor\t: 0\nmodel name\t: a CPU\nflags\t\t: {flags}\n\n"
                    f"processor\t: 1\nflags\t\t: {flags}\n")
    return str(path)


def test_cpu_flags_reads_a_cpuinfo_file(tmp_path):
    assert "amx_bf16" in cpu_flags(_cpuinfo(tmp_path / "..", SAPPHIRE_RAPIDS))
    other = tmp_path / "b"
    other.mkdir()
    flags = cpu_flags(_cpuinfo(other, EPYC_ZEN4))
    assert "avx512_bf16" in flags and "amx_bf16" not in flags
    assert cpu_flags(str(tmp_path / "missing")) == frozenset()


def test_the_note_names_the_fix_only_where_amx_is_there_and_off():
    amx, no_amx = frozenset(SAPPHIRE_RAPIDS.split()), frozenset(EPYC_ZEN4.split())
    note = amx_off_note(amx, {})
    assert note is not None and "mxnet_amp.mx.hardware.enable_amx()" in note and "AMX" in note
    assert amx_off_note(no_amx, {}) is None
    assert amx_off_note(amx, {"DNNL_MAX_CPU_ISA": "AVX512_CORE_AMX"}) is None
    assert amx_off_note(amx, {"DNNL_MAX_CPU_ISA": "avx512_core_bf16"}) is not None
    assert amx_off_note(amx, {"MXNET_AMP_NO_AMX_NOTE": "1"}) is None


@pytest.mark.parametrize("has_amx", [True, False])
def test_conversion_and_the_first_run_warn_once_on_a_cpu_with_amx_off(has_amx, monkeypatch):
    flags = SAPPHIRE_RAPIDS if has_amx else EPYC_ZEN4
    monkeypatch.setattr(hardware, "cpu_flags", lambda cpuinfo="": frozenset(flags.split()))
    monkeypatch.delenv("MXNET_AMP_NO_AMX_NOTE", raising=False)
    monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)
    hardware._warn_once.cache_clear()   # an earlier test of this process may have warned
    sym, args, auxs = small_model()
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Dense(8, in_units=4), mx.gluon.nn.Dense(2, in_units=8))
    net.initialize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        amp.convert_model(sym, args, auxs, target_dtype="float16")   # a GPU model: no word
        for _ in range(2):
            amp.convert_model(sym, args, auxs, target_dtype="bfloat16")
        block = amp.convert_hybrid_block(net, target_dtype="bfloat16")
        for _ in range(2):
            try:
                block(mx.nd.ones((2, 4)))
            except amp.HardwareError:
                assert not bf16_runs_natively()   # refused before MXNet would fail
    notes = [w for w in caught if issubclass(w.category, AMXOffWarning)]
    if not has_amx or not bf16_runs_natively():   # where no bf16 runs, native_note speaks
        assert notes == []
        return
    if not has_amx:
        assert notes == []
        return
    # once at conversion (however many), once at the block's first run
    assert len(notes) == 2, [(w.filename, w.lineno) for w in notes]
    # each names the caller's line (the conversion, the block's first run), not the package's
    assert {w.filename for w in notes} == {__file__}
    assert len({w.lineno for w in notes}) == 2
    assert all("enable_amx()" in str(w.message) for w in notes)
