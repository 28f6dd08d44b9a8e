"""mxnet_amp.files.interrupts: SIGTERM/SIGHUP unwinding a write so its clean-ups run."""
import os
import signal

import pytest

from mxnet_amp.errors import CheckpointError
from mxnet_amp.files.interrupts import TerminationSignal, signals_unwind


def test_a_signal_in_the_block_runs_finally_and_reaches_the_previous_handler():
    """SIGTERM inside the block raises TerminationSignal (finally runs), then the previous
    Python handler runs; when it returns, a CheckpointError says the write did not happen."""
    seen, cleaned = [], []
    old = signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(signum))
    try:
        with pytest.raises(CheckpointError, match="the save was interrupted by SIGTERM"):
            with signals_unwind("the save"):
                try:
                    os.kill(os.getpid(), signal.SIGTERM)
                finally:
                    cleaned.append(True)
        assert cleaned == [True] and seen == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, old)


def test_handlers_are_restored_after_a_quiet_block():
    """Leaving the block without a signal puts the previous handlers back unchanged."""
    def mine(signum, frame):
        return None
    old = signal.signal(signal.SIGHUP, mine)
    try:
        with signals_unwind():
            assert signal.getsignal(signal.SIGHUP) is not mine
        assert signal.getsignal(signal.SIGHUP) is mine
    finally:
        signal.signal(signal.SIGHUP, old)


def test_termination_signal_is_not_an_exception():
    """TerminationSignal is a BaseException ('except Exception' cannot swallow it) naming the signal."""
    err = TerminationSignal(signal.SIGTERM)
    assert not isinstance(err, Exception)
    assert str(err) == "interrupted by SIGTERM" and err.signum == signal.SIGTERM


def test_an_ignored_signal_stays_ignored():
    """A signal the process ignores (nohup) is left alone inside the block."""
    old = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with signals_unwind():
            assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, old)


def _ctrl_c_when(started):
    """A thread that sends this process SIGINT once ``started`` is set."""
    import threading

    def send():
        if started.wait(60):
            os.kill(os.getpid(), signal.SIGINT)
    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


def test_interruptible_hears_ctrl_c_while_the_call_still_runs():
    """Ctrl-C during the call raises KeyboardInterrupt in the caller at once, while the call
    (here: blocked until the test releases it) is still running on its thread: a long C call
    such as mx.nd.load of a 1 GB file no longer delays the interrupt until it returns."""
    import threading

    from mxnet_amp.files.interrupts import interruptible
    started, release, finished = threading.Event(), threading.Event(), threading.Event()

    def call():
        started.set()
        release.wait(60)   # the hang guard: the test releases it
        finished.set()
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _ctrl_c_when(started)
        with pytest.raises(KeyboardInterrupt):
            interruptible(call)
        assert started.is_set() and not finished.is_set()
    finally:
        release.set()
        signal.signal(signal.SIGINT, old)
    assert finished.wait(60)


def test_interruptible_returns_the_value_and_raises_the_error_of_the_call():
    """Without an interrupt it is the call: its value, or its exception raised here."""
    from mxnet_amp.files.interrupts import interruptible
    assert interruptible(sorted, [3, 1, 2]) == [1, 2, 3]
    with pytest.raises(ZeroDivisionError):
        interruptible(divmod, 1, 0)


def test_interrupt_deferred_holds_ctrl_c_to_the_end_of_the_block():
    """Ctrl-C inside the block lets the block finish, then raises KeyboardInterrupt; the
    default handler is back afterwards; a quiet block raises nothing."""
    from mxnet_amp.files.interrupts import interrupt_deferred
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    done = []
    try:
        with pytest.raises(KeyboardInterrupt):
            with interrupt_deferred():
                os.kill(os.getpid(), signal.SIGINT)
                done.append("after the signal")
        assert done == ["after the signal"]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        with interrupt_deferred():
            done.append("quiet")
        assert done[-1] == "quiet"
    finally:
        signal.signal(signal.SIGINT, old)
