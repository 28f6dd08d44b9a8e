"""Compile, cache and load the rounding kernels (``round.cc``): MXNet 1.9 external operators
that round float32 values to float16 or bfloat16 bit for bit as the emulation's round trips
``amp_cast(amp_cast(x, low), float32)`` do, in one vectorised pass (F16C / AVX2), and the
float16 conv / dense bias step (round, add the bias, round) in one.

The library is compiled on first use with the C++ compiler found (``$CXX``, else ``g++``)
against the headers the MXNet wheel ships (``mxnet/include/mxnet/lib_api.h``,
``mxnet/src/lib_api.cc``), into a user cache directory (``$XDG_CACHE_HOME/mxnet-amp`` or
``~/.cache/mxnet-amp``; never inside the installed package), under a name keyed by the
sources' hash, the MXNet version, the compiler and its flags, written to a temporary file and
renamed into place (processes building at once never read a half-written library). It is
loaded once per process (``mx.library.load``; MXNet cannot register an op twice).

Where there is no compiler, the build or the load fails, or ``MXNET_AMP_NO_KERNELS=1`` is set,
:func:`kernel_state` says why and the emulation runs MXNet's own casts (the same bits,
slower). This module owns the one piece of state: whether this process loaded the library.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

__all__ = ["KernelState", "kernel_state", "kernels_disabled", "cache_dir", "library_key",
           "compile_command", "build_library", "ROUND_OP", "ROUND_BIAS_OP", "DISABLE_ENV",
           "SOURCE"]

# the ops round.cc registers (their names in symbol JSON)
ROUND_OP = "mxnet_amp_round"
ROUND_BIAS_OP = "mxnet_amp_round_bias"
# set to 1: never build or load the kernels (the emulation then runs MXNet's casts)
DISABLE_ENV = "MXNET_AMP_NO_KERNELS"
SOURCE = Path(__file__).with_name("round.cc")
# no -ffast-math: the bias step's float32 add must be IEEE's, as MXNet's broadcast_add
_FLAGS = ("-O2", "-std=c++17", "-shared", "-fPIC", "-fopenmp", "-ffp-contract=off")
_BUILD_SECONDS = 600


@dataclass(frozen=True)
class KernelState:
    """Whether the kernels run in this process: ``loaded``, the library's ``path`` and, where
    they do not, ``reason`` (no compiler, a failed build, disabled)."""

    loaded: bool
    path: str | None = None
    reason: str = ""
    vectorised: bool = False   # AVX2 + F16C code runs (else the scalar code of the same bits)

    def describe(self) -> str:
        """One line for a report: which rounding ran and, if MXNet's casts, why."""
        if self.loaded:
            how = "F16C/AVX2" if self.vectorised else "scalar code: this CPU has no AVX2/F16C"
            return f"rounding by mxnet-amp's compiled kernels ({how}; the same bits as MXNet's casts)"
        return f"rounding by MXNet's casts ({self.reason})"


def kernels_disabled() -> bool:
    """Whether ``MXNET_AMP_NO_KERNELS`` asks for MXNet's casts (read at each call)."""
    return os.environ.get(DISABLE_ENV, "").strip().lower() not in ("", "0", "false", "no")


def kernel_state() -> KernelState:
    """The kernels' state in this process: built and loaded on the first call (once per
    process), unless ``MXNET_AMP_NO_KERNELS`` is set now."""
    if kernels_disabled():
        return KernelState(False, reason=f"{DISABLE_ENV} is set")
    return _loaded()


def cache_dir() -> Path:
    """Where built libraries are kept: ``$XDG_CACHE_HOME/mxnet-amp``, else
    ``~/.cache/mxnet-amp``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "mxnet-amp"


def _mxnet_dir() -> Path:
    import mxnet
    return Path(mxnet.__file__).parent


def compile_command(compiler: str, output: str | os.PathLike) -> list[str]:
    """The command that builds the library at ``output`` with ``compiler``."""
    mx_dir = _mxnet_dir()
    return [compiler, *_FLAGS, f"-I{mx_dir / 'include'}", str(SOURCE),
            str(mx_dir / "src" / "lib_api.cc"), "-o", str(output)]


def library_key(compiler: str, compiler_version: str) -> str:
    """The cache key: the sources (``round.cc``, MXNet's ``lib_api.h`` and ``lib_api.cc``),
    the MXNet version, the compiler's version line and the flags, hashed."""
    import mxnet
    digest = hashlib.sha256()
    mx_dir = _mxnet_dir()
    for path in (SOURCE, mx_dir / "include" / "mxnet" / "lib_api.h", mx_dir / "src" / "lib_api.cc"):
        digest.update(path.read_bytes())
    for text in (mxnet.__version__, compiler, compiler_version, " ".join(_FLAGS)):
        digest.update(b"\0" + text.encode())
    return digest.hexdigest()[:20]


def _compiler() -> tuple[str, str] | None:
    """``(compiler path, its version line)``, or None where there is none."""
    compiler = shutil.which(os.environ.get("CXX") or "g++")
    if compiler is None:
        return None
    try:
        out = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = out.stdout.splitlines()
    return (compiler, lines[0]) if out.returncode == 0 and lines else None


def build_library() -> tuple[Path | None, str]:
    """The library's path in the cache (built now if it is not there), or ``(None, why
    not)``. Never raises for a missing compiler or a failed build."""
    found = _compiler()
    if found is None:
        return None, f"no C++ compiler ({os.environ.get('CXX') or 'g++'}) found"
    compiler, version = found
    target = cache_dir() / f"mxnet_amp_round-{library_key(compiler, version)}.so"
    if target.is_file():
        return target, ""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=target.stem + ".", suffix=".tmp.so", dir=target.parent)
        os.close(fd)
    except OSError as err:
        return None, f"cannot write the kernel cache {target.parent}: {err}"
    try:
        out = subprocess.run(compile_command(compiler, tmp), capture_output=True, text=True,
                             timeout=_BUILD_SECONDS)
        if out.returncode != 0:
            last = (out.stderr.strip().splitlines() or ["no message"])[-1]
            return None, f"the kernel build failed ({compiler}: {last[:200]})"
        os.replace(tmp, target)   # atomic: a concurrent build replaces it with the same bytes
    except (OSError, subprocess.SubprocessError) as err:
        return None, f"the kernel build failed ({err})"
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target, ""


@lru_cache(maxsize=1)
def _loaded() -> KernelState:
    """Build and load the library once per process (MXNet registers an op once)."""
    path, reason = build_library()
    if path is None:
        return KernelState(False, reason=reason)
    import mxnet as mx
    try:
        mx.library.load(str(path), verbose=False)
        vectorised = bool(ctypes.CDLL(str(path)).mxnet_amp_round_vectorised())
    except Exception as err:   # noqa: BLE001 - MXNetError or OSError: fall back, say why
        return KernelState(False, reason=f"MXNet could not load {path.name}: {str(err)[:200]}")
    return KernelState(True, str(path), vectorised=vectorised)
