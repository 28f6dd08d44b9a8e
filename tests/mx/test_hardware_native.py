"""Told at conversion, typed at first call, quiet probes (issue 42 items 2 and 3).

Where the target dtype cannot execute here (float16 on this GPU-less machine always; bfloat16
where oneDNN runs no bf16, e.g. under ``DNNL_MAX_CPU_ISA=AVX2``), every public converter
warns once with :func:`mxnet_amp.mx.hardware.native_note`'s text at the caller's line, a
converted bfloat16 block's first CPU call raises :class:`mxnet_amp.HardwareError`, and no
MXNet log line reaches the terminal. The AVX2 cases run in a subprocess with
``DNNL_MAX_CPU_ISA=AVX2`` (oneDNN reads it once per process).
"""
from __future__ import annotations

import os
import pickle
import re
import subprocess
import sys
import warnings

import mxnet as mx
import numpy as np
import pytest

import mxnet_amp as amp
from mxnet_amp.mx import hardware
from mxnet_amp.mx.hardware import HardwareWarning, native_note, quiet_stderr

from helpers import saved_small_model, small_model

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MXNET_LOG = re.compile(r"^\[\d\d:\d\d:\d\d\] \S+:\d+: |mkldnn", re.M)   # MXNet's own log lines


def _avx2(code_or_args: list[str], timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "DNNL_MAX_CPU_ISA": "AVX2", "PYTHONPATH": ROOT}
    return subprocess.run([sys.executable, *code_or_args], capture_output=True, text=True,
                          env=env, timeout=timeout, cwd=ROOT)


def _dense_net():
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Dense(8, in_units=4), mx.gluon.nn.Dense(2, in_units=8))
    net.initialize()
    net.hybridize()
    return net


def _hardware_warnings(caught) -> list:
    return [w for w in caught if issubclass(w.category, HardwareWarning)]


def test_quiet_stderr_keeps_fd2_writes_off_and_restores_it(capfd):
    os.write(2, b"before\n")
    with quiet_stderr():
        os.write(2, b"[12:00:00] ../src/operator/nn/mkldnn/x.cc:1: hidden\n")
    os.write(2, b"after\n")
    err = capfd.readouterr().err
    assert "before" in err and "after" in err and "hidden" not in err


def test_quiet_stderr_restores_fd2_after_an_exception(capfd):
    with pytest.raises(RuntimeError):
        with quiet_stderr():
            raise RuntimeError("x")
    os.write(2, b"still here\n")
    assert "still here" in capfd.readouterr().err


def test_the_probe_under_avx2_says_false_and_prints_nothing():
    done = _avx2(["-c", "from mxnet_amp.mx import hardware as h; print(h.bf16_runs_natively()); "
                        "print(h.cpu_summary())"])
    assert done.returncode == 0, done.stderr
    answer, summary = done.stdout.splitlines()
    assert answer == "False"
    # the flags say what the CPU has, the summary also what executes
    assert "DNNL_MAX_CPU_ISA=AVX2" in summary and summary.endswith("native bfloat16: no")
    assert not MXNET_LOG.search(done.stderr), done.stderr


def test_demo_and_convert_tune_under_avx2_print_no_mxnet_log_line(tmp_path):
    demo = _avx2(["-m", "mxnet_amp", "demo", "--size", "32", "--runs", "1", "-q"])
    assert demo.returncode == 0, demo.stderr
    assert "Native bfloat16 is unavailable on this CPU" in demo.stdout
    prefix = saved_small_model(tmp_path, "m")
    tune = _avx2(["-m", "mxnet_amp", "convert", prefix, "--target-dtype", "bfloat16", "--tune",
                  "--input-shape", "data:2x3x8x8", "--out", str(tmp_path / "out"), "-q"])
    assert tune.returncode == 2 and "tune times bfloat16 kernels" in tune.stderr, tune.stderr
    for done in (demo, tune):
        assert not MXNET_LOG.search(done.stderr), done.stderr


def test_every_converter_warns_once_at_the_callers_line(tmp_path):
    """float16 never executes on this GPU-less machine: each public entry point says so once,
    naming this file's line, with native_note's text."""
    assert native_note("float16") is not None
    sym, args, auxs = small_model()
    prefix = saved_small_model(tmp_path, "m")
    mod = mx.mod.BucketingModule(lambda key: (small_model()[0], ("data",), None), default_bucket_key=8)
    mod.bind(data_shapes=[("data", (2, 3, 8, 8))], for_training=False)
    mod.set_params(args, auxs)
    calls = {
        "convert_symbol": lambda: amp.convert_symbol(sym, target_dtype="float16"),
        "convert_model": lambda: amp.convert_model(sym, args, auxs, target_dtype="float16"),
        "convert_block": lambda: amp.convert_block(_dense_net(), target_dtype="float16"),
        "convert_checkpoint": lambda: amp.convert_checkpoint(
            prefix, 0, str(tmp_path / "out"), target_dtype="float16"),
        "convert_bucketing_module": lambda: amp.convert_bucketing_module(mod, target_dtype="float16"),
    }
    for name, call in calls.items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            call()
        said = _hardware_warnings(caught)
        assert len(said) == 1, (name, [str(w.message) for w in said])
        assert said[0].filename == __file__, (name, said[0].filename)
        assert native_note("float16") in str(said[0].message)


def test_a_bfloat16_conversion_warns_only_where_bf16_does_not_run(bf16_mode):
    sym, args, auxs = small_model()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        amp.convert_model(sym, args, auxs, target_dtype="bfloat16")
    said = _hardware_warnings(caught)
    assert len(said) == (0 if bf16_mode == "native" else 1)


def test_the_block_raises_hardware_error_at_its_first_call_under_avx2():
    code = """
import pickle, warnings, mxnet as mx, mxnet_amp as amp
net = mx.gluon.nn.HybridSequential(); net.add(mx.gluon.nn.Dense(8, in_units=4)); net.initialize()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    new = amp.convert_block(net, target_dtype="bfloat16")
print([w.category.__name__ for w in caught if "cannot execute" in str(w.message)])
try:
    new(mx.nd.ones((2, 4)))
except amp.HardwareError as err:
    again = pickle.loads(pickle.dumps(err))
    print(type(again).__name__, again.target_dtype, str(again) == str(err))
    print(err)
print(amp.emulate_block(new)(mx.nd.ones((2, 4))).shape)
"""
    done = _avx2(["-c", code])
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "['HardwareWarning']"
    assert lines[1] == "HardwareError bfloat16 True"
    assert "avx512_bf16" in lines[2] and "DNNL_MAX_CPU_ISA=AVX2" in lines[2]
    assert "emulate_model" in lines[2]          # what to do here
    assert lines[3] == "(2, 8)"                   # the emulation runs on this CPU
    assert not MXNET_LOG.search(done.stderr), done.stderr


def test_hardware_error_is_an_amp_error_and_pickles():
    err = amp.HardwareError("this CPU cannot execute the bfloat16 model", target_dtype="bfloat16")
    again = pickle.loads(pickle.dumps(err))
    assert isinstance(again, amp.AMPError) and again.target_dtype == "bfloat16"
    assert str(again) == str(err)


def test_auto_native_bf16_is_refused_up_front_where_it_cannot_run(bf16_mode):
    from mxnet_amp.auto.runner import execution_mode
    if bf16_mode == "native":
        assert execution_mode("bfloat16", mx.cpu(), "native") == ("native", None)
        return
    with pytest.raises(amp.HardwareError, match="execution='native'.*avx512"):
        execution_mode("bfloat16", mx.cpu(), "native")


def test_cli_auto_native_bf16_under_avx2_is_one_sentence_before_any_work():
    done = _avx2(["-m", "mxnet_amp", "auto", "tiny", "--target-dtype", "bf16", "--input",
                  "data:2x3x32x32", "--execution", "native"])
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("mxnet-amp: error: --execution native cannot run bfloat16 here: this "
                           "CPU cannot execute the bfloat16 model (DNNL_MAX_CPU_ISA=AVX2")


def test_save_checkpoint_says_where_a_float16_model_runs(tmp_path):
    sym, args, auxs = small_model()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = amp.convert_model(sym, args, auxs, target_dtype="float16")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        amp.save_checkpoint(str(tmp_path / "m16"), 0, *model)
    [said] = _hardware_warnings(caught)
    assert "runs on an NVIDIA GPU" in str(said.message) and said.filename == __file__
    assert os.path.isfile(tmp_path / "m16-0000.params")   # said after the write


def test_notes_agree_with_the_probe_not_the_flags(monkeypatch):
    """An AMX CPU under DNNL_MAX_CPU_ISA=AVX2 runs no bf16: no AMX note, the native note."""
    monkeypatch.setattr(hardware, "bf16_runs_natively", lambda: False)
    monkeypatch.setattr(hardware, "cpu_flags", lambda cpuinfo="": frozenset(
        "avx2 avx512f avx512_bf16 amx_bf16 amx_tile".split()))
    monkeypatch.setenv("DNNL_MAX_CPU_ISA", "AVX2")
    monkeypatch.delenv("MXNET_AMP_NO_AMX_NOTE", raising=False)
    assert hardware.amx_off_note() is None
    note = native_note("bfloat16")
    assert note is not None and "DNNL_MAX_CPU_ISA=AVX2 keeps oneDNN off" in note
    monkeypatch.delenv("DNNL_MAX_CPU_ISA")
    monkeypatch.setattr(hardware, "cpu_flags", lambda cpuinfo="": frozenset({"avx2", "fma"}))
    assert "(no avx512:" in native_note("bfloat16")
    assert np.all([f in hardware.ISA_FLAGS for f in ("avx2", "avx512_bf16", "amx_bf16")])
