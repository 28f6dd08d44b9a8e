"""Termination signals during a write: unwind it like Ctrl-C, then end as the signal would.

Ctrl-C raises :class:`KeyboardInterrupt`, so an interrupted :func:`mxnet_amp.files.atomic.atomic_writes`
removes its temporary files on the way out. SIGTERM (``kill``, a batch scheduler, a container
stop) and SIGHUP (a closed terminal) kill the process without running any Python, leaving a
hidden ``.NAME.XXXX.tmp`` beside the output (as large as the params). While a write runs,
:func:`signals_unwind` turns them into an exception too; after the clean-up the previous
handler is put back and the signal raised again, so the process ends as it would have.

Python runs its signal handlers between bytecodes only: a main thread inside one long C call
(``mx.nd.load`` of a 1 GB params file) hears Ctrl-C when the call returns.
:func:`interruptible` runs such a call on a helper thread while the main thread waits, so the
interrupt acts at once.
"""
from __future__ import annotations

import contextlib
import signal
import threading
from typing import Any, Callable, Iterator, TypeVar

from ..errors import CheckpointError

__all__ = ["signals_unwind", "TerminationSignal", "interruptible", "interrupt_deferred"]

_T = TypeVar("_T")

# the signals that end a process by default and that a user or a system sends to stop it
_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


class TerminationSignal(BaseException):
    """A termination signal arrived inside :func:`signals_unwind` (a BaseException, like
    KeyboardInterrupt: ``except Exception`` must not swallow it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = signum


def _raise(signum: int, frame: object) -> None:
    raise TerminationSignal(signum)


@contextlib.contextmanager
def signals_unwind(what: str = "the write") -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP raise :class:`TerminationSignal` (so ``finally``
    and ``except BaseException`` clean-ups run); on leaving, the previous handlers are back
    and a signal caught is raised again under them (default: the process ends by it).

    When a previous Python handler returns instead of ending the process, a
    :class:`~mxnet_amp.errors.CheckpointError` says that ``what`` did not happen.

    Only the main thread can set handlers (Python's rule): elsewhere, and for a signal that
    is ignored (``nohup``) or whose handler was not set from Python, nothing changes.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    for signum in _SIGNALS:
        old = signal.getsignal(signum)
        if old is None or old == signal.SIG_IGN:
            continue
        previous[signum] = old
        signal.signal(signum, _raise)
    caught = None
    try:
        yield
    except TerminationSignal as err:
        caught = err
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)
    if caught is not None:
        # the previous handler decides: the default ends the process by this signal; a
        # Python handler runs (and may raise); if it returns, the write still did not happen
        signal.raise_signal(caught.signum)
        raise CheckpointError(f"{what} was {caught}; nothing was written") from None


def interruptible(call: Callable[..., _T], *args: Any) -> _T:
    """``call(*args)``, run on a helper thread while this one waits for it, so that Ctrl-C
    (:class:`KeyboardInterrupt`) acts at once even while ``call`` is one long C function.

    Interrupted, the call is abandoned: it runs to its end on its thread (a daemon: it never
    holds the process open) and its result is dropped. So only for calls whose effects
    nobody has to undo: reading a file, not writing one. An exception of ``call`` is raised
    here. Off the main thread (where no signal is heard) it simply calls.
    """
    if threading.current_thread() is not threading.main_thread():
        return call(*args)
    values: list[_T] = []
    errors: list[BaseException] = []

    def target() -> None:
        try:
            values.append(call(*args))
        except BaseException as err:   # noqa: BLE001 - raised again in the caller's thread
            errors.append(err)
    helper = threading.Thread(target=target, name="mxnet-amp-interruptible", daemon=True)
    helper.start()
    while helper.is_alive():
        helper.join(0.05)   # a Ctrl-C raises here, between two short waits
    if errors:
        raise errors[0]
    return values[0]


@contextlib.contextmanager
def interrupt_deferred() -> Iterator[None]:
    """Within the block, a Ctrl-C waits; it is raised (:class:`KeyboardInterrupt`) as the
    block ends. For a short step that must not be cut in two: starting a worker process and
    keeping its handle (cut inside ``subprocess.Popen``, the child runs on with nobody to
    stop it).

    Only from the main thread, and only while SIGINT has Python's default handler (a
    caller's own handler is left alone).
    """
    if threading.current_thread() is not threading.main_thread() \
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return
    caught: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if caught:
        raise KeyboardInterrupt
