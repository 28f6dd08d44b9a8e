"""mxnet_amp.auto.worker_process: the worker's program, its messages over pipes."""
import io
import os
import subprocess
import sys

import mxnet as mx
import numpy as np

from mxnet_amp.auto.worker_process import receive, send, serve
from mxnet_amp.auto.workers import ModelBlob


def _blob():
    sym = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=2, name="fc")
    params = {"fc_weight": mx.nd.array([[1, 0, 0], [0, 1, 1]]), "fc_bias": mx.nd.array([0.5, 0])}
    return ModelBlob("fc", sym, params, {"data": "float32"})


def _inbox(*messages):
    stream = io.BytesIO()
    for m in messages:
        send(stream, m)
    stream.seek(0)
    return stream


def _replies(outbox):
    outbox.seek(0)
    got = []
    while True:
        try:
            got.append(receive(outbox))
        except EOFError:
            return got


def test_send_and_receive_round_trip_messages_in_order():
    """Messages written one after another are read back whole, in order, then EOFError."""
    stream = _inbox(("run", 3, {"data": np.arange(4.0)}), ("stop",))
    first = receive(stream)
    assert first[:2] == ("run", 3)
    np.testing.assert_array_equal(first[2]["data"], np.arange(4.0))
    assert receive(stream) == ("stop",)


def test_serve_runs_batches_on_the_model_and_sends_errors_back_as_text():
    """A batch before any model and a batch missing an input are error replies with their
    traceback; a good batch is the model's outputs; the end of the input stops the loop."""
    outbox = io.BytesIO()
    x = np.array([[1, 2, 3]], dtype=np.float32)
    serve(_inbox(("run", 0, {"data": x}), ("model", _blob()), ("run", 1, {"data": x}),
                 ("run", 2, {"nodata": x})), outbox)
    replies = _replies(outbox)
    assert [r[:2] for r in replies] == [("error", 0), ("ok", 1), ("error", 2)]
    assert "before any model" in replies[0][2]
    np.testing.assert_allclose(replies[1][2][0], [[1.5, 5.0]])
    assert "data" in replies[2][2] and "WorkerError" in replies[2][2]


def test_serve_stops_at_a_stop_message_before_later_batches():
    outbox = io.BytesIO()
    x = np.array([[1, 2, 3]], dtype=np.float32)
    serve(_inbox(("model", _blob()), ("stop",), ("run", 0, {"data": x})), outbox)
    assert _replies(outbox) == []


def test_the_program_keeps_its_replies_apart_from_what_is_printed():
    """The worker's program (``main``): what prints once it runs, from Python or straight to
    file descriptor 1 as C code does, goes to stderr; stdout holds only the replies."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    stdin = _inbox(("model", _blob()), ("run", 7, {"data": np.ones((1, 3), np.float32)}),
                   ("run", 8, {"data": np.ones((1, 3), np.float32)}))
    code = ("import os, sys, mxnet_amp.auto.worker_process as w\n"
            "serve = w.serve\n"
            "def noisy(inbox, outbox):\n"
            "    print('python noise'); sys.stdout.flush(); os.write(1, b'fd noise')\n"
            "    serve(inbox, outbox)\n"
            "w.serve = noisy\n"
            "sys.exit(w.main())\n")
    done = subprocess.run([sys.executable, "-c", code], input=stdin.getvalue(),
                          capture_output=True, timeout=120, env={**os.environ, "PYTHONPATH": root})
    assert done.returncode == 0, done.stderr[-2000:]
    assert b"python noise" in done.stderr and b"fd noise" in done.stderr
    replies = _replies(io.BytesIO(done.stdout))
    assert [r[:2] for r in replies] == [("ok", 7), ("ok", 8)]
    np.testing.assert_allclose(replies[0][2][0], [[1.5, 2.0]])
