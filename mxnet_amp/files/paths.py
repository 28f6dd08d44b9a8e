"""Checks on the files a command reads and writes, made before anything is written.

One place decides whether an output would destroy an input: paths are compared by their
real location (symlinks followed, ``..`` resolved) and, for files that exist, by identity
(:func:`os.path.samefile`: hard links, case-insensitive file systems). Outputs are also
checked against each other and for a writable folder, so that a command either writes all
of its files or none of them.
"""
from __future__ import annotations

import numbers
import os
import stat
from typing import Iterable, NamedTuple, Sequence, Tuple

from ..errors import CheckpointError, OutputPathError, OverwriteError
from ..warn import warn_user

__all__ = ["checkpoint_files", "check_epoch", "refuse_overwrite", "check_writable",
           "check_outputs", "OutputTarget", "output_target", "refuse_stream_prefix", "STREAM_NAMES",
           "temp_prefix", "clear_stale_temps"]

# (what the file is, its path): e.g. ("output symbol", "m-amp-symbol.json")
Labelled = Tuple[str, "str | os.PathLike | None"]   # None: the file is not written


def check_epoch(epoch: object, what: str = "epoch") -> int:
    """``epoch`` as an int; :class:`CheckpointError` when it is not a non-negative integer
    (a negative one would name a ``-001.params`` file). numpy integers are integers."""
    if isinstance(epoch, bool) or not isinstance(epoch, numbers.Integral) or epoch < 0:
        raise CheckpointError(f"{what} must be a non-negative integer (it numbers the "
                              f"PREFIX-NNNN.params file), got {epoch!r}")
    return int(epoch)


def checkpoint_files(prefix: str | os.PathLike, epoch: int, what: str = "epoch") -> tuple[str, str]:
    """``(prefix-symbol.json, prefix-NNNN.params)`` for a checkpoint; :class:`CheckpointError`
    for a prefix that names a folder (``out/`` would mean files ``out/-symbol.json``)."""
    if not isinstance(prefix, (str, os.PathLike)):
        raise CheckpointError(f"{what.replace('epoch', 'prefix')} must be a path (str), got {prefix!r}")
    prefix = os.fspath(prefix)
    if not os.path.basename(prefix):
        raise CheckpointError(f"checkpoint prefix {prefix!r} names a folder: the files are "
                              "PREFIX-symbol.json and PREFIX-NNNN.params, so give a name in it "
                              f"(e.g. {os.path.join(prefix, 'model')!r})")
    epoch = check_epoch(epoch, what)
    return f"{prefix}-symbol.json", f"{prefix}-{epoch:04d}.params"


# names that mean a standard stream, not a file: each is written to the stream itself (a
# rename over /dev/stdout would replace the link, and opening it would truncate a redirect)
STREAM_NAMES = {"-": "stdout", "/dev/stdout": "stdout", "/dev/fd/1": "stdout",
                "/proc/self/fd/1": "stdout", "/dev/stderr": "stderr", "/dev/fd/2": "stderr",
                "/proc/self/fd/2": "stderr"}


class OutputTarget(NamedTuple):
    """Where an output path is written, and how.

    ``kind`` is ``"file"`` (a regular file or nothing yet: written beside ``real`` and
    renamed over it; ``real`` is a symlink's target, so the link is kept), ``"stream"``
    (a character device or a FIFO: written straight through, never replaced) or
    ``"stdout"`` / ``"stderr"`` (the process's own stream)."""

    path: str
    kind: str
    real: str


def output_target(path: str | os.PathLike, label: str = "output") -> OutputTarget:
    """How ``path`` is written (:class:`OutputTarget`); :class:`OutputPathError` naming
    ``label`` and the path when it is nothing mxnet-amp may write or replace: a folder, a
    block device, a socket."""
    path = os.fspath(path)
    if path in STREAM_NAMES:
        return OutputTarget(path, STREAM_NAMES[path], path)
    real = os.path.realpath(path)
    try:
        mode = os.stat(real).st_mode
    except OSError:   # nothing there (or a file where a folder should be): the folder check says which
        return OutputTarget(path, "file", real)
    if stat.S_ISREG(mode):
        return OutputTarget(path, "file", real)
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return OutputTarget(path, "stream", real)
    what = ("a folder" if stat.S_ISDIR(mode) else "a block device" if stat.S_ISBLK(mode)
            else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")
    raise OutputPathError(f"cannot write the {label} {path}: it is {what}, which mxnet-amp "
                          "never replaces; give a file name")


def refuse_stream_prefix(prefix: str | os.PathLike, what: str = "out_prefix") -> None:
    """:class:`OutputPathError` naming ``what`` when a checkpoint prefix means a standard
    stream (``-``): a checkpoint is two binary files, which no stream can hold."""
    if os.fspath(prefix) in STREAM_NAMES:
        raise OutputPathError(
            f"{what} {os.fspath(prefix)!r} means a standard stream, but a checkpoint is two "
            "binary files (PREFIX-symbol.json and PREFIX-NNNN.params): give a file prefix")


def _key(path: str) -> str:
    """What makes two output paths one destination: a standard stream by its name."""
    return "<" + STREAM_NAMES[path] + ">" if path in STREAM_NAMES else os.path.realpath(path)


def _same(a: str, b: str) -> bool:
    if a in STREAM_NAMES or b in STREAM_NAMES:
        return _key(a) == _key(b)
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:   # one of them does not exist (yet): the real paths decided
        return False


def refuse_overwrite(inputs: Iterable[Labelled], outputs: Iterable[Labelled]) -> None:
    """Raise :class:`OverwriteError` naming both files when an output is an input, or two
    outputs are one file.

    Parameters
    ----------
    inputs, outputs : iterable of (str, path)
        Each file with what it is (``"input symbol"``, ``"--report"``); ``None`` paths
        are skipped.
    """
    ins = [(label, os.fspath(p)) for label, p in inputs if p is not None]
    outs = [(label, os.fspath(p)) for label, p in outputs if p is not None]
    for k, (out_label, out) in enumerate(outs):
        for in_label, src in ins:
            if _same(out, src):
                raise OverwriteError(
                    f"refusing to overwrite an input: the {out_label} {out} is the {in_label} "
                    f"{src}" + ("" if os.path.abspath(out) == os.path.abspath(src) else
                                f" (both are {os.path.realpath(src)})")
                    + "; choose another output name")
        for other_label, other in outs[:k]:
            if _same(out, other) and not _discards(out):
                raise OverwriteError(f"the {out_label} {out} and the {other_label} {other} are "
                                     "the same file; give them different names")


def _discards(path: str) -> bool:
    """A character device (``/dev/null``): two outputs written through to it do not clash."""
    try:
        return path not in STREAM_NAMES and stat.S_ISCHR(os.stat(path).st_mode)
    except OSError:
        return False


def check_writable(outputs: Iterable[Labelled]) -> None:
    """Raise :class:`OutputPathError` when an output's folder is missing or not writable,
    or the output is something never replaced (:func:`output_target`: a folder, a block
    device, a socket), or a device or FIFO that is not writable. A file's folder (a
    symlink's target's) is also asked for a file: some refuse one whatever their
    permission bits say (read-only or special file systems, quotas)."""
    probed: set[str] = set()
    for label, given in outputs:
        if given is None:
            continue
        target = output_target(given, label)
        path = target.path
        if target.kind == "stream" and not os.access(target.real, os.W_OK):
            raise OutputPathError(f"cannot write the {label} {path}: it is not writable")
        if target.kind in ("stdout", "stderr") and not _stream_open(target.kind):
            raise OutputPathError(f"cannot write the {label} {path}: standard "
                                  f"{'output' if target.kind == 'stdout' else 'error'} is closed")
        if target.kind != "file":
            continue
        folder = os.path.dirname(target.real)
        if not os.path.isdir(folder):
            raise OutputPathError(f"cannot write the {label} {path}: folder {folder} does not exist")
        # the file is written beside its final name and renamed: the folder must be writable
        if not os.access(folder, os.W_OK | os.X_OK):
            raise OutputPathError(f"cannot write the {label} {path}: folder {folder} is not writable")
        if folder not in probed:
            probed.add(folder)
            why = _refusal(folder)
            if why:
                raise OutputPathError(f"cannot write the {label} {path}: folder {folder} "
                                      f"refuses new files ({why})")


def _stream_open(kind: str) -> bool:
    """Whether this process's standard output (``kind`` 'stdout') or error is open: Python
    sets ``sys.stdout`` to None when its descriptor was closed at start (``>&-``)."""
    import sys
    stream = sys.stdout if kind == "stdout" else sys.stderr
    if stream is None:
        return False
    try:
        os.fstat(stream.fileno())
    except (OSError, ValueError, AttributeError):   # closed, or a capture without a descriptor
        return not getattr(stream, "closed", False)
    return True


def _refusal(folder: str) -> str | None:
    """Why ``folder`` refuses a new file (None when it takes one): a hidden empty file is
    created there and removed, as the write will do."""
    import tempfile
    try:
        fd, probe = tempfile.mkstemp(prefix=".mxnet-amp-", suffix=".tmp", dir=folder)
    except OSError as err:
        return err.strerror or str(err)
    os.close(fd)
    os.unlink(probe)
    return None


def check_outputs(inputs: Sequence[Labelled], outputs: Sequence[Labelled]) -> None:
    """:func:`refuse_overwrite` then :func:`check_writable`: everything a command checks
    about its files before it writes the first one."""
    refuse_overwrite(inputs, outputs)
    check_writable(outputs)


def temp_prefix(path: str) -> str:
    """The name start of the hidden temporary file a write of ``path`` fills before its
    rename: ``.NAME.PID-`` (the writer's process id: a later run can tell a leftover of a
    killed writer from the file of a live one)."""
    return f".{os.path.basename(path)}.{os.getpid()}-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):   # another user's process: alive
        return True
    return True


def _process_start() -> float | None:
    """When this process started (Linux: its /proc entry), None where unknown."""
    try:
        return os.stat(f"/proc/{os.getpid()}").st_ctime
    except OSError:
        return None


def clear_stale_temps(path: str, shown: str | None = None) -> list[tuple[str, int]]:
    """Remove the hidden temporary files an earlier write of ``path`` left when it was killed
    (SIGKILL, or a signal without a handler, give it no chance to clean up; each is as large
    as the file): ``.NAME.PID-XXXXXXXX.tmp`` whose writer ``PID`` is no longer running, and
    ``.NAME.XXXXXXXX.tmp`` (written before the pid was in the name) not touched since this
    process started. A live writer's file is left alone. Returns ``(file, bytes)`` of each
    removed (a file that cannot be removed is left, and not returned), and says so in a
    warning naming ``shown`` (default ``path``)."""
    import re
    folder, name = os.path.split(os.path.abspath(path))
    pattern = re.compile(r"\." + re.escape(name) + r"\.(?:(\d+)-)?[A-Za-z0-9_]{8}\.tmp")
    try:
        entries = os.listdir(folder)
    except OSError:
        return []
    started, removed = _process_start(), []
    for entry in entries:
        match = pattern.fullmatch(entry)
        if match is None:
            continue
        full = os.path.join(folder, entry)
        try:
            info = os.stat(full)
            pid = match.group(1)
            stale = (not _alive(int(pid)) if pid is not None
                     else started is not None and info.st_mtime < started)
            if stale and stat.S_ISREG(info.st_mode):
                os.unlink(full)
                removed.append((full, info.st_size))
        except OSError:   # gone meanwhile, or not ours to remove
            continue
    if removed:
        warn_user(f"removed {len(removed)} temporary file(s) an interrupted write of {shown or path} "
                  f"left ({sum(n for _, n in removed) / 2 ** 20:.1f} MiB): "
                  f"{', '.join(os.path.basename(f) for f, _ in removed)}")
    return removed
