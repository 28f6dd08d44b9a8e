"""Warnings attributed to the caller's line: the first frame outside mxnet-amp."""
from __future__ import annotations

import contextlib
import os
import sys
import warnings
from types import FrameType

__all__ = ["warn_user"]

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep
# frames a decorator adds between the package's functions (gc_paused is a contextmanager)
_WRAPPERS = (os.path.abspath(contextlib.__file__),)


def warn_user(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn(message, category)`` with the ``stacklevel`` of the first frame outside
    this package (and the wrappers between its functions): the warning names the user's line,
    however deep in the package it was raised."""
    frame: FrameType | None = sys._getframe(1)
    level = 2   # stacklevel 1 is this function, 2 its caller (the frame above)
    while frame is not None and (frame.f_code.co_filename.startswith(_PACKAGE)
                                 or os.path.abspath(frame.f_code.co_filename) in _WRAPPERS):
        frame = frame.f_back
        level += 1
    warnings.warn(message, category, stacklevel=level)
