"""Building, caching and loading the rounding kernels, and what happens where they cannot be
built: a reason, never an exception, never a half-written library."""
import os
import stat
from pathlib import Path

import pytest

from mxnet_amp.kernels import build
from mxnet_amp.kernels.build import (DISABLE_ENV, KernelState, build_library, cache_dir,
                                     compile_command, kernel_state, kernels_disabled, library_key)


def test_the_cache_is_the_user_cache_dir_never_the_package(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_dir() == tmp_path / "mxnet-amp"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "mxnet-amp"
    package = Path(build.__file__).resolve().parents[1]
    assert package not in cache_dir().resolve().parents


def test_the_key_changes_with_the_compiler_and_its_version():
    key = library_key("/usr/bin/g++", "g++ 12.2.0")
    assert key == library_key("/usr/bin/g++", "g++ 12.2.0") and len(key) == 20
    assert key != library_key("/usr/bin/g++", "g++ 13.1.0")
    assert key != library_key("/usr/bin/clang++", "g++ 12.2.0")


def test_the_compile_command_builds_round_cc_with_mxnets_lib_api():
    cmd = compile_command("g++", "/tmp/out.so")
    assert cmd[0] == "g++" and str(build.SOURCE) in cmd and cmd[-2:] == ["-o", "/tmp/out.so"]
    assert any(c.endswith(os.path.join("src", "lib_api.cc")) for c in cmd)
    assert "-ffp-contract=off" in cmd and not any("fast-math" in c for c in cmd)


def test_no_compiler_is_a_reason_not_an_error(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    path, why = build_library()
    assert path is None and why.startswith("no C++ compiler") and "no-such-compiler" in why
    assert not (tmp_path / "mxnet-amp").exists()


def test_a_failed_build_leaves_nothing_in_the_cache(monkeypatch, tmp_path):
    """A compiler that answers --version but fails to build: the reason names it and quotes
    its last line; no library, no temporary file is left behind."""
    fake = tmp_path / "fake-g++"
    fake.write_text('#!/bin/sh\nif [ "$1" = --version ]; then echo "fake 1.0"; exit 0; fi\n'
                    'echo "round.cc:1: error: broken" >&2\nexit 1\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("CXX", str(fake))
    path, why = build_library()
    assert path is None and "the kernel build failed" in why and "error: broken" in why
    assert list((tmp_path / "cache" / "mxnet-amp").iterdir()) == []


def test_disabled_by_the_environment_at_each_call(monkeypatch):
    monkeypatch.setenv(DISABLE_ENV, "1")
    assert kernels_disabled()
    state = kernel_state()
    assert state == KernelState(False, reason=f"{DISABLE_ENV} is set")
    assert state.describe() == f"rounding by MXNet's casts ({DISABLE_ENV} is set)"
    for off in ("0", "", "false"):
        monkeypatch.setenv(DISABLE_ENV, off)
        assert not kernels_disabled()


def test_built_once_into_the_cache_and_loaded_once_per_process(monkeypatch):
    """With a compiler (CI has g++) the library is in the cache under its key, loaded: a
    second call is the same state (MXNet registers an op once per process)."""
    monkeypatch.delenv(DISABLE_ENV, raising=False)
    state = kernel_state()
    if not state.loaded:
        pytest.skip(f"the kernels are not built here: {state.reason}")
    path = Path(state.path)
    assert path.parent == cache_dir() and path.name.startswith("mxnet_amp_round-")
    assert kernel_state() is state and "compiled kernels" in state.describe()
    import mxnet as mx
    one = ('{"nodes":[{"op":"null","name":"x","inputs":[]},{"op":"mxnet_amp_round","name":"r",'
           '"attrs":{"dtype":"float16"},"inputs":[[0,0,0]]}],"arg_nodes":[0],"heads":[[1,0,0]]}')
    out = mx.nd.CachedOp(mx.sym.load_json(one))(mx.nd.array([1.0001, 70000.0, 2.0 ** -25]))
    assert out.asnumpy().tolist() == [1.0, float("inf"), 0.0]   # registered and running


def test_the_state_says_which_code_rounds():
    fast = KernelState(True, "/x.so", vectorised=True).describe()
    slow = KernelState(True, "/x.so", vectorised=False).describe()
    assert "F16C/AVX2" in fast and "scalar code" in slow and "the same bits" in slow
    import mxnet_amp.mx.hardware as hw
    state = kernel_state()
    if state.loaded:   # this CPU's flags say which runs
        assert state.vectorised == ({"avx2", "f16c"} <= hw.cpu_flags())
