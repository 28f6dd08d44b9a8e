"""Typed errors raised by mxnet-amp.

Every error says what failed, the offending value (node, op, param or file) and, where
there is one, how to fix it. Callers can catch :class:`AMPError` for all of them.
"""
from __future__ import annotations

__all__ = [
    "AMPError",
    "UnknownOpError",
    "ListError",
    "GraphError",
    "TypeInferenceError",
    "ParamError",
    "AlreadyConvertedError",
    "DeferredInitError",
    "CheckpointError",
    "TargetDtypeError",
]


class AMPError(Exception):
    """Base class of every error mxnet-amp raises on purpose."""


class UnknownOpError(AMPError, ValueError):
    """An op name (in a list file or a user override) is not in the live MXNet registry."""

    def __init__(self, names, where: str):
        self.names = tuple(sorted(names))
        self.where = where
        super().__init__(
            f"unknown operator name(s) in {where}: {', '.join(self.names)}; "
            "they are not registered in this MXNet build (check the spelling, or load the "
            "plugin library that defines them first)")


class ListError(AMPError, ValueError):
    """An op list file or override is malformed or classifies an op twice."""


class GraphError(AMPError, ValueError):
    """A symbol graph (or its JSON) is malformed or unsupported."""


class TypeInferenceError(AMPError):
    """MXNet type inference failed on a graph the pass produced or was given."""


class ParamError(AMPError, ValueError):
    """arg/aux params do not match the symbol (missing, extra, wrong shape or dtype)."""


class AlreadyConvertedError(AMPError, ValueError):
    """The model was converted before: its graph holds amp casts to low precision, or its
    weights are float16/bfloat16 already (the message names them)."""


class DeferredInitError(AMPError, RuntimeError):
    """A Gluon block's parameters are not initialised yet (deferred initialisation)."""


class CheckpointError(AMPError, OSError):
    """A checkpoint file is missing, truncated or not what it claims to be."""


class TargetDtypeError(AMPError, ValueError):
    """``target_dtype`` is not one of the low precision dtypes mxnet-amp converts to."""
