"""Typed errors raised by mxnet-amp.

Every error says what failed, the offending value (node, op, param or file) and, where
there is one, how to fix it. Callers can catch :class:`AMPError` for all of them.
"""
from __future__ import annotations

import re
from typing import Iterable

__all__ = [
    "AMPError",
    "UnknownOpError",
    "ListError",
    "GraphError",
    "GraphCheckError",
    "PassNodeError",
    "PassOrderError",
    "TypeInferenceError",
    "InferenceFailed",
    "DrawError",
    "CLIError",
    "ParamError",
    "AlreadyConvertedError",
    "StrippedCastsError",
    "DeferredInitError",
    "CheckpointError",
    "TargetDtypeError",
    "OverwriteError",
    "OutputPathError",
    "InputShapeError",
    "InputValueError",
    "BackendError",
    "ArgumentError",
    "OnnxExportError",
    "OnnxMissingError",
    "FusionError",
    "TuneError",
    "HardwareError",
    "error_text",
]


class AMPError(Exception):
    """Base class of every error mxnet-amp raises on purpose."""


class UnknownOpError(AMPError, ValueError):
    """An op name (in a list file or a user override) is not in the live MXNet registry."""

    def __init__(self, names: Iterable[str], where: str) -> None:
        self.names = tuple(sorted(names))
        self.where = where
        super().__init__(
            f"unknown operator name(s) in {where}: {', '.join(self.names)}; "
            "they are not registered in this MXNet build (check the spelling, or load the "
            "plugin library that defines them first)")

    def __reduce__(self) -> tuple:
        # rebuilt from its fields (Exception's default passes the message as ``names``): a
        # worker process or a Dask cluster sends it back pickled
        return type(self), (self.names, self.where)


class ListError(AMPError, ValueError):
    """An op list file or override is malformed or classifies an op twice."""


class GraphError(AMPError, ValueError):
    """A symbol graph (or its JSON) is malformed or unsupported."""


class GraphCheckError(GraphError):
    """A graph breaks an invariant every pass keeps (:func:`mxnet_amp.ir.verify.verify_graph`):
    the message names the node and shows the nodes around it."""


class PassNodeError(AMPError, RuntimeError):
    """A graph pass failed on one node for a reason that is no typed error of its own (a bug,
    or input the pass does not expect): the message names the pass, the node and its op;
    the original exception is the ``__cause__``."""


class PassOrderError(AMPError, RuntimeError):
    """A pass list breaks an order constraint its builder declared (``this_before_that``):
    the message names both passes and the list."""


class TypeInferenceError(AMPError):
    """MXNet type inference failed on a graph the pass produced or was given."""


class InferenceFailed(TypeInferenceError):
    """MXNet's type inference rejected the given dtypes (the message is MXNet's)."""


class DrawError(AMPError, RuntimeError):
    """The picture cannot be written in the format asked for."""


class CLIError(AMPError, ValueError):
    """A command line value is wrong (a bad ``--input`` spec, say)."""


class ParamError(AMPError, ValueError):
    """arg/aux params do not match the symbol (missing, extra, wrong shape or dtype).

    A shape mismatch names the ``param``, the shape ``found`` and the shape ``expected``;
    ``input_shapes`` is True when the given input shapes may be what is wrong. Every
    ParamError has these attributes (None / False when they do not apply).
    """

    def __init__(self, message: str, *, param: str | None = None,
                 found: tuple[int, ...] | None = None, expected: object = None,
                 input_shapes: bool = False) -> None:
        super().__init__(message)
        self.param = param
        self.found = found
        self.expected = expected
        self.input_shapes = input_shapes


class AlreadyConvertedError(AMPError, ValueError):
    """The model was converted before: its graph holds amp casts to low precision, or its
    weights are float16/bfloat16 already (the message names them)."""


class StrippedCastsError(AlreadyConvertedError):
    """A mixed precision model saved without its amp casts (``mx.model.save_checkpoint``,
    ``export()``, ``Symbol.save`` strip them by default): float16/bfloat16 weights, no
    amp_cast, and MXNet cannot bind it. Raised where it cannot be converted again, or its
    casts cannot be restored exactly; the message says how to save it with its casts."""


class DegenerateModelError(ParamError):
    """The float32 model itself computes inf/nan on the sample inputs because of its params
    (a BatchNorm whose ``moving_var + eps`` is not positive, a non-finite weight): no
    low precision configuration can be judged against it. ``nodes`` names where the
    non-finite values start."""

    def __init__(self, message: str, *, nodes: tuple[str, ...] = (),
                 param: str | None = None) -> None:
        super().__init__(message, param=param)
        self.nodes = nodes


class DeferredInitError(AMPError, RuntimeError):
    """A Gluon block's parameters are not initialised yet (deferred initialisation)."""


class CheckpointError(AMPError, OSError):
    """A checkpoint file is missing, truncated or not what it claims to be."""


class OutputPathError(CheckpointError):
    """An output cannot be written where asked (its folder is missing or not writable, or
    the path is a folder); raised before anything is written."""


class OverwriteError(OutputPathError):
    """An output file is one of the input files (same real path, symlinks followed), or two
    outputs are the same file: writing would destroy what is being read."""


class InputShapeError(AMPError, ValueError):
    """A model input's shape (``data_shapes``, sample inputs, ``--input``) does not fit the
    symbol, whatever the params."""


class InputValueError(AMPError, ValueError):
    """A sample input (``sample_inputs``, ``--input``) holds values no model input takes
    (strings, objects) or nothing to check with (no finite value)."""


class BackendError(AMPError, ValueError):
    """A ``hybridize=`` value a converter cannot run the block with: neither a bool nor None
    nor a subgraph backend this MXNet build registers (the message names it)."""


class ArgumentError(AMPError, TypeError, ValueError):
    """An argument of a public function has a wrong type or value (a str where a list or a
    bool goes, a negative count, an unknown choice); the message names the parameter. Also a
    TypeError and a ValueError, which callers caught before it existed."""


class OnnxExportError(AMPError, ValueError):
    """A model cannot be exported to ONNX: ``nodes`` holds every ``(node, op, why)`` at fault
    (all of them, found before anything is converted where the op has no converter)."""

    def __init__(self, nodes: Iterable[tuple[str, str, str]], what: str = "cannot be exported to ONNX") -> None:
        self.nodes = tuple(nodes)
        lines = "\n".join(f"  {name!r} ({op}): {why}" for name, op, why in self.nodes)
        super().__init__(f"{len(self.nodes)} node(s) {what}:\n{lines}")
        self.what = what

    def __reduce__(self) -> tuple:
        return type(self), (self.nodes, self.what)


class OnnxMissingError(AMPError, ImportError):
    """The ``onnx`` package (the ``onnx`` extra) is not installed."""


class FusionError(AMPError, ValueError):
    """A model cannot be saved fused for the CPU (``fused_for='cpu'``, ``--fuse-cpu``): a
    float16 model (GPU only), an unknown ``fused_for``, or an MXNet without oneDNN."""


class TuneError(AMPError, ValueError):
    """``tune=`` (``--tune``) cannot run: float16 (no CPU kernels to time), no input shapes,
    a CPU that does not run bfloat16, or an unreadable timing cache (the message says which)."""


class TargetDtypeError(AMPError, ValueError):
    """``target_dtype`` is not one of the low precision dtypes mxnet-amp converts to, or
    cannot run natively where that is asked (float16 on a CPU)."""


class HardwareError(AMPError, RuntimeError):
    """This machine cannot execute the model's dtype (a bfloat16 model on a CPU whose oneDNN
    has no bfloat16 kernels, float16 without a GPU): raised at a converted block's first call,
    instead of MXNet's "could not create a primitive descriptor iterator", and where native
    execution is asked for. The message is :func:`mxnet_amp.mx.hardware.native_note`'s: the CPU
    feature missing, where the model runs, how to check it here. ``target_dtype`` names the
    dtype (None where not given)."""

    def __init__(self, message: str, *, target_dtype: str | None = None) -> None:
        # keyword-only extras: pickle rebuilds from args (the message) and restores __dict__
        super().__init__(message)
        self.target_dtype = target_dtype


def error_text(err: BaseException | str, limit: int = 2000) -> str:
    """The meaningful one-line part of an exception's message, for wrapping it in ours.

    MXNet's C++ errors arrive as ``Traceback (most recent call last):`` / ``File ...`` lines
    with the cause on the last line (``MXNetError: Check failed: ...: Cannot find custom
    operator sq``), sometimes followed by a ``Stack trace:`` of ``[bt]`` frames; the cause
    is what is kept, without its ``MXNetError:`` prefix. Any other exception gives its
    first non-empty line (its own text); a string is read as such a message. Never empty: the type name stands in for a
    message-less exception.
    """
    text = str(err).split("Stack trace:")[0]
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if any(line.startswith("Traceback (most recent call last)") for line in lines):
        lines = [line for line in lines if not line.startswith(("Traceback (", "File ", "[bt]"))][-1:]
    first = lines[0] if lines else (type(err).__name__ if isinstance(err, BaseException) else "")
    for prefix in ("MXNetError: ", "mxnet.base.MXNetError: "):
        if first.startswith(prefix):
            first = first[len(prefix):]
    # "[07:21:21] ../src/operator/nn/fully_connected.cc:67: " says where in MXNet, not what
    first = re.sub(r"\[\d\d:\d\d:\d\d\] [^\s:]+:\d+: ", "", first)
    return first if len(first) <= limit else first[:limit] + "…"
