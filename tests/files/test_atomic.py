"""mxnet_amp.files.atomic: files written all at once."""
from __future__ import annotations


def test_a_write_killed_by_sigkill_leaves_a_temporary_the_next_write_removes(tmp_path):
    """SIGKILL gives a write no chance to clean up: its hidden ``.NAME.PID-*.tmp`` stays. The
    next write of that file removes it and says so in a warning (it was neither removed nor
    mentioned; newcomer audit, #42)."""
    import os
    import signal
    import subprocess
    import sys
    import warnings

    from mxnet_amp.files.atomic import atomic_write
    out = tmp_path / "m-0000.params"
    code = ("import sys, time\nfrom mxnet_amp.files.atomic import atomic_write\n"
            "def slow(tmp):\n    open(tmp, 'wb').write(b'y' * 4096)\n    print('writing', flush=True)\n"
            "    time.sleep(60)\n"
            f"atomic_write({str(out)!r}, slow)\n")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert child.stdout.readline().strip() == "writing"
    child.send_signal(signal.SIGKILL)
    child.wait()
    left = [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]
    assert len(left) == 1 and left[0].startswith(f".m-0000.params.{child.pid}-")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        atomic_write(str(out), lambda tmp: open(tmp, "wb").write(b"new"))
    assert os.listdir(tmp_path) == ["m-0000.params"] and out.read_bytes() == b"new"
    assert any(f"removed 1 temporary file(s) an interrupted write of {out} left" in str(w.message)
               and left[0] in str(w.message) for w in caught)
