"""What ``tune=`` asks for (:class:`Tuning`, built by :func:`make_tuning` from the keyword),
the kernel a timer times (:class:`KernelCase`) and what a timer answers (:class:`KernelTimer`).
Plain data: the timing itself, through MXNet, is :mod:`mxnet_amp.tune.timing`'s, and the options of a
conversion (:mod:`mxnet_amp.options`) hold a :class:`Tuning` without importing it.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Protocol

from ..errors import TuneError

if TYPE_CHECKING:   # mxnet itself is imported where it runs
    from mxnet.symbol import Symbol

__all__ = ["KernelCase", "KernelTimer", "Tuning", "make_tuning", "default_cache_path"]


def default_cache_path() -> str:
    """``$MXNET_AMP_TUNE_CACHE``, else ``$XDG_CACHE_HOME/mxnet_amp/tune.json`` (``~/.cache``)."""
    if os.environ.get("MXNET_AMP_TUNE_CACHE"):
        return os.environ["MXNET_AMP_TUNE_CACHE"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "mxnet_amp", "tune.json")


@dataclass(frozen=True)
class KernelCase:
    """One distinct kernel of a model: op, attributes and the shape of each input, each input
    marked ``'data'`` (cast from float32 in the bf16 version) or ``'param'`` (stored in bf16)."""

    op: str
    attrs: tuple[tuple[str, str], ...]
    inputs: tuple[tuple[str, tuple[int, ...]], ...]

    def key(self) -> str:
        """The case as text: its key in the timing cache."""
        return json.dumps([self.op, [list(a) for a in self.attrs],
                           [[kind, list(shape)] for kind, shape in self.inputs]], separators=(",", ":"))

    def describe(self) -> str:
        """The case in words for reports: ``Convolution(8x64x56x56, 64x64x3x3, 64)``."""
        shapes = ", ".join("x".join(map(str, s)) for _, s in self.inputs)
        return f"{self.op}({shapes})"


class KernelTimer(Protocol):
    """What tuning measures with (the real one is :class:`MXNetTimer`; tests pass their own)."""

    def kernel(self, case: KernelCase, target_dtype: str) -> tuple[float, float]:
        """``(float32 seconds, target dtype seconds)`` per call of ``case``."""
        ...

    def model(self, untuned: tuple[Symbol, dict, dict], tuned: tuple[Symbol, dict, dict],
              data_shapes: Mapping[str, tuple[int, ...]]) -> tuple[float, float]:
        """``(untuned seconds, tuned seconds)`` per batch of two converted models."""
        ...


@dataclass(frozen=True)
class Tuning:
    """How to tune (:func:`make_tuning` builds it from ``tune=``).

    Attributes
    ----------
    cache : str or None
        The JSON file of timings, read first and written back (None: none).
    timer : KernelTimer or None
        What measures (None: :class:`~mxnet_amp.tune.timing.MXNetTimer`).
    rounds : int
        Interleaved rounds per kernel (each a few calls of the float32 and the bf16 kernel).
    """

    cache: str | None = None
    timer: KernelTimer | None = None
    rounds: int = 5


def make_tuning(tune: object, target_dtype: str) -> Tuning | None:
    """``tune=`` as a :class:`Tuning`: None / False (off), True (the default cache file,
    :func:`default_cache_path`), a path (that JSON file), or a :class:`Tuning`.

    Raises
    ------
    TuneError
        ``tune`` with ``target_dtype='float16'`` (MXNet has no float16 CPU kernels to time),
        or a value of another type.
    """
    if tune is None or tune is False:
        return None
    if target_dtype != "bfloat16":
        raise TuneError(f"tune= times kernels on this CPU, and MXNet has no {target_dtype} CPU "
                        "kernels (float16 runs on GPUs only): tune a bfloat16 conversion, or "
                        "convert to float16 without tune")
    if tune is True:
        return Tuning(cache=default_cache_path())
    if isinstance(tune, (str, os.PathLike)):
        return Tuning(cache=os.fspath(tune))
    if isinstance(tune, Tuning):
        return tune
    raise TuneError(f"tune={tune!r}: expected True, a cache file path or a mxnet_amp.tune.tuning.Tuning")
