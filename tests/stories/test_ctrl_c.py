"""Ctrl-C in ``mxnet-amp auto`` (issue 42, newcomer audit: 29 s to act on a 1 GB model):
the process ends with exit code 130 and one sentence, its worker processes gone, nothing
written, no temporary file left, its inputs untouched.

Each run is a subprocess that gets SIGINT at a point it reaches for sure (its worker
processes started); the timeouts are hang guards, not timings."""
import hashlib
import os
import signal
import subprocess
import sys
import time

import mxnet as mx
import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="reads /proc")


def _model(folder):
    """A two-layer FullyConnected checkpoint and a folder of 4 labelled batches."""
    x = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=64, name="fc0")
    x = mx.sym.FullyConnected(mx.sym.Activation(x, act_type="relu"), num_hidden=10, name="fc1")
    sym = mx.sym.SoftmaxOutput(x, name="softmax")
    rng = np.random.default_rng(0)
    args = {"fc0_weight": mx.nd.array(rng.standard_normal((64, 32)) / 6),
            "fc0_bias": mx.nd.zeros(64), "fc1_weight": mx.nd.array(rng.standard_normal((10, 64)) / 8),
            "fc1_bias": mx.nd.zeros(10)}
    prefix = str(folder / "net")
    mx.model.save_checkpoint(prefix, 0, sym, args, {})
    batches = folder / "batches"
    batches.mkdir()
    for k in range(4):
        np.savez(batches / f"b{k}.npz", data=rng.standard_normal((16, 32)).astype(np.float32),
                 label=rng.integers(0, 10, 16))
    return prefix, str(batches)


def _children(pid):
    """The pids of ``pid``'s child processes."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except OSError:
        return []


def _sigint_default():
    """SIGINT back to its default in the child: a test run in the background (``cmd &``)
    inherits it ignored, and Python then sets no KeyboardInterrupt handler."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _digest(folder):
    return {name: hashlib.sha256((folder / name).read_bytes()).hexdigest()
            for name in sorted(os.listdir(folder)) if (folder / name).is_file()}


@pytest.mark.parametrize("to_group", [True, False], ids=["terminal", "kill-INT"])
def test_ctrl_c_with_worker_processes_ends_at_once_and_leaves_nothing(tmp_path, to_group):
    """SIGINT to the process group (a terminal's Ctrl-C) or to the process alone, once its
    two worker processes run: exit 130, stderr exactly "mxnet-amp: interrupted" (no worker's
    KeyboardInterrupt traceback, no runpy warning from their start), the workers gone when it
    exits (killed, not waited for), no output, no temporary file, the inputs unchanged."""
    work = tmp_path / "work"
    work.mkdir()
    prefix, batches = _model(work)
    temp = tmp_path / "tmp"
    temp.mkdir()
    before = _digest(work)
    env = {**os.environ, "TMPDIR": str(temp), "PYTHONPATH": ROOT}
    proc = subprocess.Popen(
        [sys.executable, "-m", "mxnet_amp", "auto", prefix, "--eval-data", batches, "--workers", "2",
         "--target-dtype", "bfloat16", "--out", str(work / "out")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True,
        preexec_fn=_sigint_default)
    try:
        deadline = time.monotonic() + 120
        while len(_children(proc.pid)) < 2 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        workers = _children(proc.pid)
        assert len(workers) == 2, "the worker processes never started"
        if to_group:
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, err.decode()
    assert err.decode().strip() == "mxnet-amp: interrupted"
    assert not any(os.path.exists(f"/proc/{pid}") and open(f"/proc/{pid}/stat").read().split()[2] != "Z"
                   for pid in workers)
    assert _digest(work) == before   # no output, nothing beside the inputs, inputs unchanged
    assert os.listdir(temp) == []


def test_the_program_ends_at_once_after_ctrl_c_without_freeing_what_the_frames_held(tmp_path):
    """After "interrupted", the program (run, exit_at_interrupt) ends by os._exit(130): the
    arrays the interrupted frames held are not freed one by one (seconds for a 1 GB model,
    #42) and MXNet's teardown does not run; main() called in-process returns 130 and frees
    them as usual."""
    code = ("import sys\n"
            "import mxnet_amp.cli.main as m\n"
            "class Held:\n"
            "    def __del__(self):\n"
            "        sys.stderr.write('freed\\n')\n"
            "def interrupted(args):\n"
            "    held = Held()\n"
            "    raise KeyboardInterrupt\n"
            "m.check_before_work = interrupted\n"
            "if sys.argv[1] == 'program':\n"
            "    sys.argv[1:] = ['inspect', 'none']\n"
            "    m.run()\n"
            "sys.stderr.write(f'returned {m.main([\"inspect\", \"none\"])}\\n')\n")
    env = {**os.environ, "PYTHONPATH": ROOT}
    program = subprocess.run([sys.executable, "-c", code, "program"], capture_output=True,
                             text=True, env=env, timeout=120)
    assert program.returncode == 130 and program.stderr == "mxnet-amp: interrupted\n"
    called = subprocess.run([sys.executable, "-c", code, "main"], capture_output=True, text=True,
                            env=env, timeout=120)
    assert called.returncode == 0
    assert called.stderr.splitlines() == ["mxnet-amp: interrupted", "freed", "returned 130"]
