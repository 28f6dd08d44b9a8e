"""What this machine can execute in low precision."""
from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from functools import lru_cache
from typing import TYPE_CHECKING, Iterator, Mapping

from ..errors import HardwareError
from ..ir.dtypes import bfloat16_np
from ..policy import check_target_dtype
from ..warn import warn_user

if TYPE_CHECKING:   # mxnet itself is imported where it runs
    from mxnet import Context

__all__ = ["bf16_runs_natively", "fp16_runs_natively", "runs_natively", "native_note",
           "enable_amx", "cpu_flags", "amx_off_note", "warn_amx_off", "AMXOffWarning",
           "environ_set", "quiet_stderr", "HardwareWarning", "warn_not_native", "runs_where",
           "cpu_summary", "ISA_FLAGS", "refuse_not_native", "not_native_reason"]

# the flags that change which oneDNN kernel runs (reports and the timing cache's key list them)
ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "avx512_fp16",
             "amx_bf16", "amx_tile", "amx_int8")

_ARCH_REQ_XCOMP_PERM = 0x1023   # arch_prctl code: ask Linux for an extended CPU state
_XFEATURE_XTILEDATA = 18        # AMX tile data
_SYS_ARCH_PRCTL = 158           # x86_64 syscall number


@contextlib.contextmanager
def environ_set(name: str, value: str | None) -> Iterator[None]:
    """``os.environ[name]`` is ``value`` inside the block (None: unset), and as it was before
    once the block ends (even by an exception).

    MXNet reads some settings from the environment each time they apply, not once:
    ``MXNET_SUBGRAPH_BACKEND`` at each bind, ``OMP_NUM_THREADS`` as a spawned child starts.

    Parameters
    ----------
    name : str
        The environment variable.
    value : str or None
        Its value in the block; None removes it there.
    """
    before = os.environ.get(name)
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


@contextlib.contextmanager
def quiet_stderr() -> Iterator[None]:
    """File descriptor 2 goes to a temporary file inside the block, and back once it ends
    (even by an exception).

    MXNet's C++ logging writes to fd 2 directly (``[16:46:58] ../src/operator/nn/mkldnn/
    mkldnn_fully_connected.cc:71: could not create a primitive descriptor iterator``), past
    ``sys.stderr``: a probe that expects the failure would print it before the user's answer.
    What Python wrote to ``sys.stderr`` before the block is flushed first.
    """
    try:
        sys.stderr.flush()
    except (AttributeError, ValueError, OSError):   # no stderr, or a closed one
        pass
    try:
        saved = os.dup(2)
    except OSError:      # no fd 2 at all: nothing to keep quiet
        yield
        return
    try:
        with tempfile.TemporaryFile() as sink:
            os.dup2(sink.fileno(), 2)
            try:
                yield
            finally:
                os.dup2(saved, 2)
    finally:
        os.close(saved)


@lru_cache(maxsize=None)
def bf16_runs_natively() -> bool:
    """True when MXNet runs a bf16 FullyConnected on the CPU.

    oneDNN implements bf16 matrix ops only on CPUs with avx512 (avx512_bf16 for speed), and
    only up to the ISA ``DNNL_MAX_CPU_ISA`` allows (``AVX2`` makes an avx512 CPU an AVX2 one);
    elsewhere MXNet fails with "could not create a primitive descriptor iterator". The probe
    runs it and reads the answer (the CPU flags say what the CPU has, not what oneDNN runs);
    MXNet's log line of the failure is kept off the terminal (:func:`quiet_stderr`).
    """
    import mxnet as mx
    with quiet_stderr():
        try:
            x = mx.nd.ones((2, 8)).astype(bfloat16_np)
            w = mx.nd.ones((4, 8)).astype(bfloat16_np)
            y = mx.nd.FullyConnected(x, w, num_hidden=4, no_bias=True)
            return float(y.astype("float32").asnumpy()[0, 0]) == 8.0
        except mx.base.MXNetError:
            return False


@lru_cache(maxsize=None)
def fp16_runs_natively(ctx: Context | None = None) -> bool:
    """True when a float16 FullyConnected runs on ``ctx`` (never on CPU in MXNet 1.9); MXNet's
    log line of a failure is kept off the terminal (:func:`quiet_stderr`)."""
    import mxnet as mx
    ctx = ctx or mx.cpu()
    with quiet_stderr():
        try:
            x = mx.nd.ones((2, 8), ctx=ctx, dtype="float16")
            y = mx.nd.FullyConnected(x, x[:1], num_hidden=1, no_bias=True)
            return float(y.asnumpy()[0, 0]) == 8.0
        except mx.base.MXNetError:
            return False


def runs_natively(target_dtype: str) -> bool:
    """True when this machine executes ``target_dtype`` models: bfloat16 on this CPU, float16
    on a GPU MXNet sees.

    Parameters
    ----------
    target_dtype : str
        ``'float16'`` or ``'bfloat16'`` (or an alias, see
        :func:`mxnet_amp.policy.check_target_dtype`).

    Returns
    -------
    bool
    """
    import mxnet as mx
    if check_target_dtype(target_dtype) == "bfloat16":
        return bf16_runs_natively()
    return any(fp16_runs_natively(mx.gpu(k)) for k in range(mx.context.num_gpus()))


def not_native_reason(target_dtype: str) -> str:
    """Why this machine cannot execute ``target_dtype`` models, in a few words (what
    :func:`native_note` and the demo say): the CPU flags where they explain it,
    ``DNNL_MAX_CPU_ISA`` where it is what keeps oneDNN off the CPU's avx512 kernels.

    Parameters
    ----------
    target_dtype : str

    Returns
    -------
    str
    """
    if check_target_dtype(target_dtype) == "float16":
        return "MXNet has no float16 kernels for CPU"
    isa = os.environ.get("DNNL_MAX_CPU_ISA")
    why = (f"DNNL_MAX_CPU_ISA={isa} keeps oneDNN off this CPU's avx512 kernels"
           if isa and "avx512f" in cpu_flags() else "no avx512")
    return f"{why}: oneDNN has no bfloat16 matrix kernels here"


def native_note(target_dtype: str) -> str | None:
    """None when :func:`runs_natively`; else one sentence saying that this machine cannot run
    ``target_dtype`` models, where they do run, and how to check one here.

    Parameters
    ----------
    target_dtype : str

    Returns
    -------
    str or None
    """
    target_dtype = check_target_dtype(target_dtype)
    if runs_natively(target_dtype):
        return None
    if target_dtype == "float16":
        return ("this machine cannot execute the float16 model: MXNet has no float16 CPU "
                "kernels and no GPU is visible. Run it on an NVIDIA GPU (the 'gpu' extra, "
                "mxnet-cu112); here, check its numerics with mxnet_amp.emulate_model "
                "(mxnet-amp auto --execution emulated).")
    return (f"this CPU cannot execute the bfloat16 model ({not_native_reason(target_dtype)}; "
            "MXNet fails with \"could not create a primitive descriptor "
            "iterator\"). Run it on a CPU with avx512_bf16 or AMX (Intel Cooper Lake, Sapphire "
            "Rapids or later; AMD Zen 4 or later); here, check its numerics with "
            "mxnet_amp.emulate_model (mxnet-amp auto --execution emulated).")


class HardwareWarning(UserWarning):
    """A model is converted to a dtype this machine cannot execute (:func:`native_note`)."""


def warn_not_native(target_dtype: str) -> None:
    """Warn (:class:`HardwareWarning`, attributed to the caller's line) with
    :func:`native_note` when this machine cannot execute ``target_dtype`` models; nothing
    where it can. Each public converter calls it once, at its start.

    Parameters
    ----------
    target_dtype : str
        ``'float16'`` or ``'bfloat16'`` (or an alias).
    """
    note = native_note(target_dtype)
    if note is not None:
        warn_user(f"converting to {check_target_dtype(target_dtype)}: {note}", HardwareWarning)


def refuse_not_native(target_dtype: str, what: str) -> None:
    """Raise :class:`~mxnet_amp.errors.HardwareError` with :func:`native_note` when this
    machine cannot execute ``target_dtype`` models; nothing where it can.

    Parameters
    ----------
    target_dtype : str
    what : str
        What needs native execution, to start the message (``"execution='native'"``,
        ``'the converted block'``).
    """
    note = native_note(target_dtype)
    if note is not None:
        raise HardwareError(f"{what}: {note}", target_dtype=check_target_dtype(target_dtype))


def runs_where(target_dtype: str) -> str:
    """Where ``target_dtype`` models execute, in words (for a saved model's note).

    Parameters
    ----------
    target_dtype : str

    Returns
    -------
    str
    """
    if check_target_dtype(target_dtype) == "float16":
        return "an NVIDIA GPU (MXNet has no float16 CPU kernels)"
    return ("a CPU with avx512_bf16 or AMX (Intel Cooper Lake, Sapphire Rapids or later; AMD "
            "Zen 4 or later), or an NVIDIA GPU")


def cpu_summary() -> str:
    """The CPU a run ran on, for reports: the ISA flags that pick oneDNN's kernels
    (:data:`ISA_FLAGS`, from ``/proc/cpuinfo``), ``DNNL_MAX_CPU_ISA`` where set, and whether
    bfloat16 executes natively (what the probe found, which the flags alone do not say:
    ``DNNL_MAX_CPU_ISA=AVX2`` on an avx512_bf16 CPU runs no bf16 kernel).

    Returns
    -------
    str
        e.g. ``'avx2 fma avx512f avx512bw avx512_vnni avx512_bf16; DNNL_MAX_CPU_ISA=AVX2;
        native bfloat16: no'``.
    """
    flags = " ".join(f for f in ISA_FLAGS if f in cpu_flags()) or "flags unknown"
    isa = os.environ.get("DNNL_MAX_CPU_ISA")
    parts = [flags] + ([f"DNNL_MAX_CPU_ISA={isa}"] if isa else [])
    parts.append(f"native bfloat16: {'yes' if bf16_runs_natively() else 'no'}")
    return "; ".join(parts)


def enable_amx() -> bool:
    """Let MXNet's oneDNN run bfloat16 matrix ops on Intel AMX (Sapphire Rapids and later).

    MXNet 1.9.1 ships oneDNN 2.4.4, which uses AMX only when ``DNNL_MAX_CPU_ISA`` allows it
    and only once the process holds Linux's permission for the AMX tile state (kernel 5.16+
    asks programs to request it; oneDNN 2.4 does not, and with the variable set but no
    permission the first AMX instruction kills the process). Without AMX, oneDNN runs bf16
    on avx512_bf16 instructions, which on these CPUs are no faster than fp32 FMA: a bf16 3x3
    convolution (8x96x28x28) took 9.4-13.5 ms against 6.5-7.0 ms in fp32, on AMX 1.14 ms.

    This changes the process, not a model: call it once, before the first MXNet operation
    (oneDNN reads ``DNNL_MAX_CPU_ISA`` when it creates its first primitive, and ignores it
    later). A ``DNNL_MAX_CPU_ISA`` the caller set is left as it is.

    Returns
    -------
    bool
        True when the CPU has AMX bf16 and Linux granted the permission (the variable is then
        set); False elsewhere (nothing changed).
    """
    import ctypes
    import platform
    if platform.system() != "Linux" or platform.machine() != "x86_64":
        return False
    if "amx_bf16" not in cpu_flags():
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        granted = bool(libc.syscall(_SYS_ARCH_PRCTL, _ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA) == 0)
    except (OSError, AttributeError):
        return False
    if granted:
        os.environ.setdefault("DNNL_MAX_CPU_ISA", "AVX512_CORE_AMX")
    return granted


class AMXOffWarning(UserWarning):
    """A bfloat16 model is converted or run on a CPU with Intel AMX that MXNet's oneDNN was not
    allowed to use (:func:`amx_off_note`)."""


@lru_cache(maxsize=None)
def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> frozenset[str]:
    """The CPU feature flags Linux lists in ``cpuinfo`` (empty where it cannot be read).

    Parameters
    ----------
    cpuinfo : str, default '/proc/cpuinfo'
        The file to read (a test passes a file of its own).

    Returns
    -------
    frozenset of str
    """
    try:
        with open(cpuinfo) as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return frozenset()


def amx_off_note(flags: frozenset[str] | None = None,
                 environ: Mapping[str, str] | None = None) -> str | None:
    """One sentence with the one-line fix where this CPU has AMX bf16 and MXNet's oneDNN was
    not allowed to use it; None elsewhere.

    MXNet 1.9.1's oneDNN 2.4 runs bf16 on AMX only with ``DNNL_MAX_CPU_ISA=AVX512_CORE_AMX``
    *and* Linux's AMX permission (:func:`enable_amx` gives both; the variable alone kills the
    process at the first AMX instruction). It is not turned on at ``import mxnet_amp``: it
    changes the whole process (every other MXNet model in it), and with AMX on MXNet 1.9.1's
    imperative ``mx.nd`` API fails to read some convolution outputs (docs/benchmarks.md).
    ``MXNET_AMP_NO_AMX_NOTE=1`` in the environment silences it.

    Parameters
    ----------
    flags : frozenset of str, optional
        The CPU flags (default :func:`cpu_flags`, and None where bfloat16 does not run here
        at all, e.g. under ``DNNL_MAX_CPU_ISA=AVX2``: :func:`native_note` says that).
    environ : mapping, optional
        The environment (default ``os.environ``).

    Returns
    -------
    str or None
    """
    if flags is None:   # this machine: where oneDNN runs no bf16 at all, native_note speaks
        if not bf16_runs_natively():
            return None
        flags = cpu_flags()
    environ = os.environ if environ is None else environ
    if ("amx_bf16" not in flags or "AMX" in environ.get("DNNL_MAX_CPU_ISA", "").upper()
            or environ.get("MXNET_AMP_NO_AMX_NOTE", "") not in ("", "0")):
        return None
    return ("this CPU has Intel AMX, which MXNet's oneDNN 2.4 uses only when asked: bfloat16 "
            "runs on avx512_bf16 instructions here, no faster than float32 (a bf16 3x3 "
            "convolution 1.5x slower than fp32, with AMX 6x faster). Fix: call "
            "mxnet_amp.mx.hardware.enable_amx() at the start of the process, before the first "
            "MXNet operation.")


def warn_amx_off(target_dtype: str, where: str) -> None:
    """Warn (:class:`AMXOffWarning`) with :func:`amx_off_note` when ``target_dtype`` is
    bfloat16 and the note applies: once per process for each ``where`` (``'conversion'``, a
    converted block's ``'first run'``), attributed to the caller's line."""
    if target_dtype == "bfloat16" and amx_off_note() is not None:
        _warn_once(where)


@lru_cache(maxsize=None)
def _warn_once(where: str) -> None:
    # once per process and place: Python's own per-line registry is reset whenever a
    # catch_warnings() block exits, which conversions run many of
    warn_user(f"{amx_off_note()} (said once, at {where})", AMXOffWarning)
