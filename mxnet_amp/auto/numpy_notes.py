"""numpy's floating point warnings during the automatic mode's measurements, as report notes.

An ``invalid value encountered in add`` printed mid-search names neither the step nor the
code that met it, and is lost from the JSON and HTML reports. Here numpy's floating point
errors (divide, overflow, invalid) call a recorder instead of warning; each kind is said
once per place and step, with a count, in the report's notes. Code that silences them with
its own ``np.errstate`` keeps them silenced.
"""
from __future__ import annotations

import contextlib
import os
import sys
from types import FrameType
from typing import Iterator, Sequence

import numpy as np

from .records import SearchStep

__all__ = ["numpy_warnings_noted"]

_NUMPY = os.path.dirname(os.path.abspath(np.__file__)) + os.sep


@contextlib.contextmanager
def numpy_warnings_noted(steps: Sequence[SearchStep], notes: list[str]) -> Iterator[None]:
    """Within the block, each numpy floating point error becomes a note in ``notes`` (added
    on exit) naming the step of the search it happened in (``steps`` grows by one per model
    execution: the one under way is the next) and the code that met it."""
    seen: dict[tuple[str, str, int], int] = {}

    def record(kind: str, flag: int) -> None:
        key = (kind, _where(), len(steps))
        seen[key] = seen.get(key, 0) + 1
    try:
        with np.errstate(divide="call", over="call", invalid="call", call=record):
            yield
    finally:
        notes.extend(f"numpy met {kind!r} {count} time{'s' if count > 1 else ''} during "
                     f"{_step_text(steps, k)}, in {where}: figures computed there may hold "
                     "inf or nan" for (kind, where, k), count in seen.items())


def _step_text(steps: Sequence[SearchStep], k: int) -> str:
    """The step ``k`` (0-based) in words: its kind once it is recorded."""
    kind = f"the {steps[k].kind} run" if k < len(steps) else "the final conversion"
    return f"step {k + 1} ({kind})"


def _where() -> str:
    """``function (file:line)`` of the innermost frame outside numpy: the code that called it
    (mxnet-amp's measurements, or a user's ``validate``)."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(_NUMPY):
        frame = frame.f_back
    if frame is None:
        return "unknown code"
    return f"{frame.f_code.co_name} ({os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno})"
