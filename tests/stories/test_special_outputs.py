"""Outputs never replace what is not ours (issue 33): a character device, a FIFO, ``-``,
``/dev/stdout``, a symlink, a folder and a full disk, through the Python API and the CLI.

Each special file must still be the same special file afterwards; nothing else in its
folder may change (no temporary file left, no stray output).
"""
from __future__ import annotations

import errno
import json
import os
import stat
import subprocess
import sys
import threading

import mxnet as mx
import pytest

from mxnet_amp.errors import OutputPathError
from mxnet_amp.files.atomic import atomic_write, atomic_writes
from mxnet_amp.mx.io import save_checkpoint

from helpers import saved_small_model, small_model

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _text(text: str):
    def write(tmp):
        with open(tmp, "w") as f:
            f.write(text)
    return write


def _char_device(folder, name: str, minor: int) -> str:
    """A twin of the memory char device ``1,minor`` in ``folder``; skips where mknod is refused."""
    path = str(folder / name)
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, minor))
    except (PermissionError, OSError) as err:
        pytest.skip(f"mknod refused here: {err}")
    return path


def _null_device(folder) -> str:
    """A /dev/null twin (char device 1,3): writes are discarded."""
    return _char_device(folder, "null", 3)


def _full_device(folder) -> str:
    """A /dev/full twin (char device 1,7): every write fails with ENOSPC."""
    return _char_device(folder, "full", 7)


class _FifoReader:
    """Reads a FIFO in a thread until its writer closes it."""

    def __init__(self, path):
        self.data = b""
        self.thread = threading.Thread(target=self._read, args=(path,), daemon=True)
        self.thread.start()

    def _read(self, path):
        with open(path, "rb") as f:
            self.data = f.read()

    def join(self):
        self.thread.join(timeout=60)
        assert not self.thread.is_alive()
        return self.data


def _lstat(path):
    """What a replaced path would change: its type, inode and, for a link, its target."""
    st = os.lstat(path)
    return st.st_mode, st.st_ino, os.readlink(path) if stat.S_ISLNK(st.st_mode) else None


def _cli(*argv, timeout=240):
    env = {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "mxnet_amp", *map(str, argv)], capture_output=True,
                          text=True, env=env, timeout=timeout, cwd=REPO)


# ----------------------------------------------------------------------------- Python API

def test_char_device_is_written_through_not_replaced(tmp_path):
    dev = _null_device(tmp_path)
    atomic_write(dev, _text("discarded"))
    assert stat.S_ISCHR(os.stat(dev).st_mode) and os.stat(dev).st_rdev == os.makedev(1, 3)
    assert sorted(os.listdir(tmp_path)) == ["null"]


def test_full_device_gives_a_typed_error_naming_it(tmp_path):
    dev = _full_device(tmp_path)
    with pytest.raises(OutputPathError, match=r"cannot write .*full: No space left on device"):
        atomic_write(dev, _text("x" * 10))
    assert stat.S_ISCHR(os.stat(dev).st_mode)
    assert sorted(os.listdir(tmp_path)) == ["full"]


def test_full_device_through_mxnet_save_is_caught(tmp_path):
    """nd.save does not check its final flush: a small params file to /dev/full 'succeeds'
    in MXNet; the write through is checked by us."""
    dev = _full_device(tmp_path)
    with pytest.raises(OutputPathError, match="No space left on device"):
        atomic_write(dev, lambda p: mx.nd.save(p, {"a": mx.nd.ones((10,))}))
    assert stat.S_ISCHR(os.stat(dev).st_mode)


def test_fifo_is_written_through(tmp_path):
    fifo = str(tmp_path / "pipe")
    os.mkfifo(fifo)
    reader = _FifoReader(fifo)
    atomic_write(fifo, _text("through the pipe"))
    assert reader.join() == b"through the pipe"
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and os.listdir(tmp_path) == ["pipe"]


@pytest.mark.parametrize("name", ["-", "/dev/stdout"])
def test_dash_and_dev_stdout_write_standard_output(tmp_path, name):
    out = tmp_path / "so.txt"
    code = ("import sys; sys.path.insert(0, %r); from mxnet_amp.files.atomic import atomic_write\n"
            "print('before', flush=True)\n"
            "def w(p): open(p, 'w').write('REPORT')\n"
            "atomic_write(%r, w)\nprint('after')\n" % (REPO, name))
    before = _lstat("/dev/stdout")
    with open(out, "w") as f:
        subprocess.run([sys.executable, "-c", code], stdout=f, check=True, cwd=tmp_path)
    assert out.read_text() == "before\nREPORTafter\n"   # appended in order, nothing truncated
    assert _lstat("/dev/stdout") == before and sorted(os.listdir(tmp_path)) == ["so.txt"]


def test_symlink_is_written_at_its_target_and_kept(tmp_path):
    target = tmp_path / "real.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    atomic_write(link, _text("new"))
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text() == "new"
    assert sorted(os.listdir(tmp_path)) == ["link.json", "real.json"]


def test_dangling_symlink_creates_its_target(tmp_path):
    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "made.json")
    atomic_write(link, _text("new"))
    assert link.is_symlink() and (tmp_path / "made.json").read_text() == "new"


def test_folder_socket_are_refused_before_any_write(tmp_path):
    import socket
    written = []
    with pytest.raises(OutputPathError, match="it is a folder"):
        atomic_writes([(tmp_path / "ok.txt", written.append), (tmp_path, _text("x"))])
    sock_path = str(tmp_path / "s.sock")
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(sock_path)
        with pytest.raises(OutputPathError, match="it is a socket"):
            atomic_write(sock_path, _text("x"))
    finally:
        sock.close()
    assert written == [] and stat.S_ISSOCK(os.stat(sock_path).st_mode)


def test_checkpoint_to_standard_output_is_refused(tmp_path):
    sym, args, auxs = small_model()
    with pytest.raises(OutputPathError, match=r"checkpoint prefix '-'.*two\s+binary files"):
        save_checkpoint("-", 0, sym, args, auxs)
    assert not os.path.exists("--symbol.json") and not os.path.exists("--0000.params")


# ----------------------------------------------------------------------------- full disk

def test_enospc_in_a_writer_keeps_the_old_file_and_names_it(tmp_path):
    """A simulated full disk: the writer fails half way with ENOSPC."""
    path = tmp_path / "r.json"
    path.write_text("previous")

    def write(tmp):
        with open(tmp, "w") as f:
            f.write("half")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    with pytest.raises(OutputPathError, match=r"cannot write .*r\.json: No space left on device"):
        atomic_write(path, write)
    assert path.read_text() == "previous" and os.listdir(tmp_path) == ["r.json"]


def test_mxnet_write_incomplete_is_named_and_keeps_the_old_file(tmp_path):
    """MXNet's own failed write (as nd.save raises it on a full disk), simulated."""
    path = tmp_path / "m.params"
    path.write_bytes(b"previous")

    def write(tmp):
        with open(tmp, "wb") as f:
            f.write(b"half")
        raise mx.base.MXNetError("Traceback (most recent call last):\n  File \"local_filesys.cc\", "
                                 "line 38\nMXNetError: Check failed: std::fwrite(ptr, 1, size, fp_) "
                                 "== size: FileStream.Write incomplete")
    with pytest.raises(OutputPathError, match=r"cannot write .*m\.params: .*FileStream\.Write "
                                              r"incomplete") as err:
        atomic_write(path, write)
    assert "Traceback" not in str(err.value)
    assert path.read_bytes() == b"previous" and os.listdir(tmp_path) == ["m.params"]


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 64 KiB tmpfs (root only; skipped where mount is refused)."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)],
                          capture_output=True)
    if done.returncode != 0:
        pytest.skip("cannot mount a tmpfs here: " + done.stderr.decode(errors="replace"))
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


@pytest.mark.parametrize("size", [100, 100_000])
def test_real_full_disk_keeps_the_previous_params(small_tmpfs, size):
    """MXNet's nd.save on a full disk: a big file fails in MXNet ("FileStream.Write
    incomplete"), a small one fails silently at its final flush; both are named."""
    old = small_tmpfs / "m.params"
    old.write_bytes(b"previous")
    (small_tmpfs / "fill").write_bytes(b"x" * 60 * 1024)
    with pytest.raises(OutputPathError, match=r"cannot write .*m\.params: No space left on device"):
        atomic_write(old, lambda p: mx.nd.save(p, {"a": mx.nd.ones((size,))}))
    assert old.read_bytes() == b"previous"
    assert sorted(os.listdir(small_tmpfs)) == ["fill", "m.params"]


# ----------------------------------------------------------------------------- CLI

@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return saved_small_model(tmp_path_factory.mktemp("ck"), "m")


def test_cli_report_to_a_char_device_and_a_fifo(ckpt, tmp_path):
    dev = _null_device(tmp_path)
    fifo = str(tmp_path / "pipe")
    os.mkfifo(fifo)
    reader = _FifoReader(fifo)
    done = _cli("convert", ckpt, "--target-dtype", "bf16", "--out", tmp_path / "o",
                "--report", dev, "--html", fifo)
    assert done.returncode == 0, done.stderr
    assert b"<html" in reader.join()[:300].lower()
    assert stat.S_ISCHR(os.stat(dev).st_mode) and stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert sorted(os.listdir(tmp_path)) == ["null", "o-0000.params", "o-symbol.json", "pipe"]


def test_cli_report_to_a_full_device_fails_with_the_cause(ckpt, tmp_path):
    dev = _full_device(tmp_path)
    done = _cli("inspect", ckpt, "--target-dtype", "bf16", "--report", dev)
    assert done.returncode == 2
    assert f"cannot write {dev}: No space left on device" in done.stderr, done.stderr
    assert stat.S_ISCHR(os.stat(dev).st_mode) and os.listdir(tmp_path) == ["full"]


@pytest.mark.parametrize("name", ["-", "/dev/stdout"])
def test_cli_report_to_standard_output_is_the_json_alone(ckpt, tmp_path, name):
    out = tmp_path / "so.txt"
    before = _lstat("/dev/stdout")
    env = {**os.environ, "PYTHONPATH": REPO}
    with open(out, "w") as f:
        done = subprocess.run([sys.executable, "-m", "mxnet_amp", "inspect", ckpt,
                               "--target-dtype", "bf16", "--report", name],
                              stdout=f, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
                              timeout=240)
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())   # the JSON alone: the table went to stderr
    assert report["target_dtype"] == "bfloat16"
    assert "standard output" in done.stderr
    assert sorted(os.listdir(tmp_path)) == ["so.txt"] and _lstat("/dev/stdout") == before


def test_cli_symlinked_report_updates_its_target(ckpt, tmp_path):
    target = tmp_path / "real.json"
    target.write_text("stale")
    link = tmp_path / "r.json"
    link.symlink_to(target)
    done = _cli("inspect", ckpt, "--target-dtype", "bf16", "--report", link)
    assert done.returncode == 0, done.stderr
    assert link.is_symlink() and json.loads(target.read_text())["target_dtype"] == "bfloat16"


def test_cli_out_dash_is_refused_naming_the_flag(ckpt, tmp_path):
    done = _cli("convert", ckpt, "--target-dtype", "bf16", "--out", "-")
    assert done.returncode == 2
    assert "--out '-'" in done.stderr and "binary files" in done.stderr, done.stderr
    assert not os.path.exists(os.path.join(REPO, "--symbol.json"))


def test_cli_report_folder_is_a_typed_error(ckpt, tmp_path):
    done = _cli("convert", ckpt, "--target-dtype", "bf16", "--out", tmp_path / "o",
                "--report", tmp_path)
    assert done.returncode == 2 and "it is a folder" in done.stderr, done.stderr
    assert os.listdir(tmp_path) == []
