"""Pause Python's cyclic garbage collector while a big graph is built.

Parsing or converting a 100k-node graph allocates millions of small objects and no
cycles; each automatic collection then walks every live object, which makes the work
quadratic. The collector's previous state is restored on exit.
"""
from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator

__all__ = ["gc_paused"]


@contextmanager
def gc_paused() -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
