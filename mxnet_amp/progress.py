"""Byte progress bars for reading, converting and writing large checkpoints.

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

__all__ = ["byte_bar", "preread", "watch_growth"]

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
