"""Progress bars: bytes for reading, converting and writing large checkpoints; samples for
the automatic mode's passes over evaluation data (:func:`stage_bar`). Shown on a terminal
only, never into a pipe or a log file.

MXNet reads and writes a params file in one C call that reports nothing, so the bars
measure what can be measured from outside: reading streams the file through the page
cache first (``mx.nd.load`` then copies from memory), and writing watches the temporary
file grow while ``mx.nd.save`` fills it.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
from typing import TYPE_CHECKING, Iterator

if TYPE_CHECKING:
    from tqdm import tqdm

__all__ = ["byte_bar", "preread", "watch_growth", "stage_bar"]

_CHUNK = 8 << 20


def byte_bar(desc: str, total: int, enabled: bool | None) -> tqdm:
    """A tqdm bar counting bytes on stderr.

    Parameters
    ----------
    desc : str
    total : int
        Bytes expected.
    enabled : bool or None
        True shows it, False hides it, None shows it only when stderr is a terminal.

    Returns
    -------
    tqdm.tqdm
    """
    from tqdm import tqdm
    return tqdm(total=total, desc=desc, unit="B", unit_scale=True, unit_divisor=1024,
                file=sys.stderr, disable=None if enabled is None else not enabled, leave=False)


def stage_bar(desc: str, total: int | None, enabled: bool | None = None) -> tqdm:
    """A tqdm bar counting samples on stderr for one stage (a pass over the data): its rate
    in samples/s and, once ``total`` is known (after the first pass), its ETA.

    Parameters
    ----------
    desc : str
        The stage, as the bar names it.
    total : int or None
        Samples expected (None: not known yet; the bar counts without an ETA).
    enabled : bool or None
        False hides it; True or None shows it only when stderr is a terminal.

    Returns
    -------
    tqdm.tqdm
    """
    from tqdm import tqdm
    tty = sys.stderr.isatty()
    return tqdm(total=total, desc=desc, unit="sample", unit_scale=False, file=sys.stderr,
                disable=not (tty and enabled is not False), leave=False, dynamic_ncols=True)


def preread(path: str, bar: tqdm) -> None:
    """Read ``path`` once in chunks (into the page cache), advancing ``bar`` by bytes read."""
    with open(path, "rb", buffering=0) as f:
        while True:
            n = len(f.read(_CHUNK))
            if not n:
                break
            bar.update(n)


@contextlib.contextmanager
def watch_growth(path: str, bar: tqdm, interval: float = 0.2) -> Iterator[None]:
    """While the block runs, advance ``bar`` to the size of the file ``path`` grows to."""
    stop = threading.Event()

    def poll() -> None:
        seen = 0
        while not stop.wait(interval):
            try:
                size = os.path.getsize(path)
            except OSError:
                continue
            if size > seen:
                bar.update(size - seen)
                seen = size
    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
