"""mxnet_amp.interrupts: SIGTERM/SIGHUP unwinding a write so its clean-ups run."""
import os
import signal

import pytest

from mxnet_amp.errors import CheckpointError
from mxnet_amp.interrupts import TerminationSignal, signals_unwind


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
