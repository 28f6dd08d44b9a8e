"""Shared fixtures and markers."""
import os
import warnings

import pytest

os.environ.setdefault("MXNET_STORAGE_FALLBACK_LOG_VERBOSE", "0")
os.environ.setdefault("OMP_NUM_THREADS", "2")
# the AMX note (mxnet_amp.hardware.amx_off_note) would otherwise warn in every bf16 test on a
# Xeon with AMX, where tests that turn warnings into errors run too; tests/test_hardware.py turns it on
os.environ.setdefault("MXNET_AMP_NO_AMX_NOTE", "1")
warnings.filterwarnings("ignore", category=DeprecationWarning)


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long zoo sweeps, not run in CI (pytest -m slow)")
    config.addinivalue_line("markers", "native_bf16: needs a CPU whose oneDNN runs bf16 matrix ops")


@pytest.fixture(scope="session")
def native_bf16():
    """True where this CPU executes bf16 Convolution/FullyConnected (needs avx512)."""
    from mxnet_amp.hardware import bf16_runs_natively
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
