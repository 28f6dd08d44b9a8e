"""A worker process of :class:`~mxnet_amp.auto.workers.ProcessPool`, run as its own program:
``python -m mxnet_amp.auto.worker_process``.

It never imports the caller's script (a worker started by ``multiprocessing``'s spawn does,
so a script or notebook without an ``if __name__ == "__main__":`` guard had every worker
run it again and die). It reads pickled messages on its stdin and writes pickled replies on
its stdout; anything else printed there (MXNet's, a model's) goes to stderr instead, so the
replies stay readable. The messages:

* ``("model", blob)``: the :class:`~mxnet_amp.auto.workers.ModelBlob` the next batches run;
* ``("run", index, inputs)``: one batch; the reply is ``("ok", index, outputs)`` or
  ``("error", index, traceback text)``;
* ``("stop",)``: exit. So does the end of stdin: a parent that died or closed the pipe
  never leaves a worker waiting.

A thread reads stdin as messages come, so the parent's writes never wait for a batch to
finish: a parent writing the next batch while the worker writes a large reply cannot
deadlock (the parent keeps at most two batches per worker in flight, so what waits here is
two batches' memory).
"""
from __future__ import annotations

import os
import pickle
import queue
import signal
import sys
import threading
import traceback
from typing import IO, Any

__all__ = ["send", "receive", "serve", "main"]


def send(stream: IO[bytes], message: Any) -> None:
    """Write one pickled ``message`` to ``stream`` and flush it."""
    pickle.dump(message, stream, protocol=pickle.HIGHEST_PROTOCOL)
    stream.flush()


def receive(stream: IO[bytes]) -> Any:
    """The next pickled message on ``stream`` (``EOFError`` at its end)."""
    return pickle.load(stream)


def _read_all(inbox: IO[bytes], messages: queue.Queue) -> None:
    """Queue every message read from ``inbox``; at its end (or an unreadable message), a
    stop."""
    try:
        while True:
            message = receive(inbox)
            messages.put(message)
            if message[0] == "stop":
                return
    except Exception:   # noqa: BLE001 - EOF (the parent is gone) or a broken message: stop
        messages.put(("stop",))


def serve(inbox: IO[bytes], outbox: IO[bytes]) -> None:
    """Load models and run batches read from ``inbox``, replies to ``outbox``, until a stop
    or the end of ``inbox``."""
    messages: queue.Queue = queue.Queue()
    reader = threading.Thread(target=_read_all, args=(inbox, messages), daemon=True)
    reader.start()
    blob = None
    while True:
        message = messages.get()
        if message[0] == "stop":
            return
        if message[0] == "model":
            blob = message[1]
            continue
        _, index, inputs = message
        try:
            if blob is None:
                raise RuntimeError("a batch came before any model")
            reply = ("ok", index, blob.run(inputs))
        except Exception:   # noqa: BLE001 - sent back whole, raised there as WorkerError
            reply = ("error", index, traceback.format_exc())
        try:
            send(outbox, reply)
        except (BrokenPipeError, OSError):   # the parent is gone: nobody reads replies
            return


def main() -> int:
    """The worker's program: stdin and stdout are the pipes to the pool."""
    # the replies get the real stdout; fd 1 becomes stderr, so that whatever prints (Python
    # or C code alike) cannot corrupt them
    # Ctrl-C is the parent's to act on: it kills its workers (ProcessPool.close); here it
    # would only print a KeyboardInterrupt traceback over the parent's message
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    outbox = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    sys.stdout = sys.stderr
    serve(sys.stdin.buffer, outbox)
    return 0


if __name__ == "__main__":
    sys.exit(main())
