"""Shared fixtures and markers."""
import inspect
import os
import re
import warnings

import pytest

os.environ.setdefault("MXNET_STORAGE_FALLBACK_LOG_VERBOSE", "0")
os.environ.setdefault("OMP_NUM_THREADS", "2")
# the AMX note (mxnet_amp.mx.hardware.amx_off_note) would otherwise warn in every bf16 test on a
# Xeon with AMX, where tests that turn warnings into errors run too; tests/mx/test_hardware.py turns it on
os.environ.setdefault("MXNET_AMP_NO_AMX_NOTE", "1")
warnings.filterwarnings("ignore", category=DeprecationWarning)


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long zoo sweeps, not run in CI (pytest -m slow)")


def _bf16_mode() -> str:
    from mxnet_amp.mx.hardware import bf16_runs_natively
    return "native" if bf16_runs_natively() else "emulated"


def pytest_generate_tests(metafunc):
    # the test id says how bfloat16 was checked here: test_x[bf16-native] or [bf16-emulated]
    if "bf16_mode" in metafunc.fixturenames:
        mode = _bf16_mode()
        metafunc.parametrize("bf16_mode", [mode], ids=[f"bf16-{mode}"])


_GATES = ("bf16_runs_natively", "runs_natively", "native_bf16", "bf16_mode")


def _gated_names(module) -> frozenset:
    """The gate's names and the module's own functions that call one (a helper such as
    ``_native(dtype)``): a test naming any of them takes a hardware-dependent branch."""
    names = set(_GATES)
    for name, fn in vars(module).items():
        if inspect.isfunction(fn) and fn.__module__ == module.__name__ and not name.startswith("test"):
            try:
                source = inspect.getsource(fn)
            except (OSError, TypeError):
                continue
            if any(g in source for g in _GATES):
                names.add(name)
    return frozenset(names)


def _is_gated(item, cache: dict) -> bool:
    if {"native_bf16", "bf16_mode"} & set(getattr(item, "fixturenames", ())):
        return True
    fn, module = getattr(item, "function", None), getattr(item, "module", None)
    if fn is None or module is None:
        return False
    if module not in cache:
        cache[module] = _gated_names(module)
    try:
        source = inspect.getsource(fn)
    except (OSError, TypeError):
        return False
    marks = " ".join(str(m.kwargs) + str(m.args) for m in item.iter_markers("skipif"))
    return any(re.search(rf"\b{re.escape(n)}\b", source + marks) for n in cache[module])


def pytest_collection_modifyitems(config, items):
    # a test that asks the hardware gate (the fixtures, hardware.bf16_runs_natively, or a
    # helper of its module that does) is hardware-gated: .ci/run reruns these under
    # DNNL_MAX_CPU_ISA=AVX2 (pytest -m native_bf16)
    cache: dict = {}
    for item in items:
        if _is_gated(item, cache):
            item.add_marker(pytest.mark.native_bf16)


@pytest.fixture(scope="session")
def native_bf16():
    """True where this CPU executes bf16 Convolution/FullyConnected (needs avx512)."""
    from mxnet_amp.mx.hardware import bf16_runs_natively
    return bf16_runs_natively()


@pytest.fixture(scope="module")
def verified_passes():
    """Counts the checks the pass runner makes (each pass checks its own output graph)."""
    from helpers import VerifiedPasses
    mp = pytest.MonkeyPatch()
    try:
        yield VerifiedPasses(mp)
    finally:
        mp.undo()
