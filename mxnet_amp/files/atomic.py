"""Files written all at once: a temporary file beside the target, renamed over it when
complete, so an interrupted or failed write never leaves a truncated file under the final
name. Streams (standard output, devices, FIFOs) are written through, never replaced."""
from __future__ import annotations

import os
import tempfile
from typing import Any, Callable, Sequence

from ..errors import CheckpointError, OutputPathError, error_text
from .interrupts import signals_unwind
from .paths import check_writable, clear_stale_temps, output_target, temp_prefix

__all__ = ["atomic_write", "atomic_writes", "text_writer"]


def atomic_write(path: str | os.PathLike, write: Callable[[str], object]) -> None:
    """Write a file under ``path`` all at once: ``write(tmp_path)`` fills a temporary file
    beside it, which is renamed over ``path`` only when complete, so an interrupted write
    never leaves a truncated file under the final name. ``-`` and ``/dev/stdout`` write to
    standard output; a character device or FIFO is written straight through, never
    replaced; a symlink's target is written (the link is kept)."""
    atomic_writes([(path, write)])


def atomic_writes(files: Sequence[tuple[str | os.PathLike, Callable[[str], object]]]) -> None:
    """:func:`atomic_write` for several ``(path, write)`` pairs: every file is written to
    its temporary name first, then the streams (standard output, devices, FIFOs) are
    written, and the renames follow back to back, so an interruption or a failed write
    leaves either none of the new files or (only inside that last instant) some of them,
    never a truncated one. A path whose folder is missing or not writable, or that is a
    folder, a block device or a socket, raises :class:`~mxnet_amp.errors.OutputPathError`
    naming it before anything is written; a write that fails (a full disk) raises one
    naming the file and the cause, and the previous file under that name is kept."""
    named = [(str(os.fspath(path)), write) for path, write in files]
    check_writable([("output file", path) for path, _ in named])
    targets = [(output_target(path), write) for path, write in named]
    umask = os.umask(0)
    os.umask(umask)
    done: list[tuple[str, str]] = []
    # SIGTERM / SIGHUP unwind like Ctrl-C, so the temporary files go with the write
    with signals_unwind("writing " + ", ".join(path for path, _ in named)):
        try:
            for target, write in targets:
                if target.kind == "file":
                    done.append((_temp_beside(target.real, target.path), target.real))
                    _filled(write, done[-1][0], target.path)
                    _check_complete(done[-1][0], target.path)
                    with open(done[-1][0], "rb") as f:
                        os.fsync(f.fileno())
                    # mkstemp creates the file 0600; give it the mode a plain open() would
                    os.chmod(done[-1][0], 0o666 & ~umask)
            for target, write in targets:
                if target.kind != "file":
                    _write_stream(target, write)
            for tmp, real in done:
                os.replace(tmp, real)
        except BaseException as err:
            for tmp, _ in done:
                if os.path.exists(tmp):
                    os.unlink(tmp)
            if isinstance(err, OSError) and not isinstance(err, OutputPathError) \
                    and err.filename in {tmp for tmp, _ in done}:
                # the temporary name means nothing to the user: name the file asked for
                path = next(t.path for t, _ in targets if t.real == dict(done)[err.filename])
                raise OutputPathError(f"cannot write {path}: {err.strerror or err}") from err
            raise


def _filled(write: Callable[[str], object], dest: str, path: str) -> None:
    """``write(dest)``; an OSError or MXNet's failed write (a full disk: "FileStream.Write
    incomplete") becomes an :class:`OutputPathError` naming ``path`` and the cause."""
    try:
        write(dest)
    except OSError as err:
        if isinstance(err, CheckpointError):
            raise
        raise OutputPathError(f"cannot write {path}: {err.strerror or error_text(err)}") from err
    except Exception as err:
        if type(err).__name__ != "MXNetError":   # mxnet is not imported here for this
            raise
        cause = _write_refusal(dest) or f"MXNet: {error_text(err)}"
        raise OutputPathError(f"cannot write {path}: {cause}") from None


def _write_refusal(dest: str) -> str | None:
    """Why the regular file ``dest`` takes no more bytes (``No space left on device``),
    asked by appending one byte and taking it back; None when it takes one."""
    try:
        size = os.path.getsize(dest)
        with open(dest, "ab", buffering=0) as f:
            try:
                f.write(b"\0")
                os.fsync(f.fileno())   # a full disk may only say so here
            finally:
                f.truncate(size)
    except OSError as err:
        return err.strerror or str(err)
    return None


def _check_complete(tmp: str, path: str) -> None:
    """MXNet's ``nd.save`` checks its writes but not the final flush: on a full disk a small
    params file ends empty with no error. When the file system has no room left, ask it
    for one more byte; :class:`OutputPathError` naming ``path`` when it refuses."""
    try:
        full = os.statvfs(os.path.dirname(tmp) or ".").f_bavail == 0
    except OSError:   # no statvfs here (or the folder went): the write's own errors stand
        return
    why = _write_refusal(tmp) if full else None
    if why:
        raise OutputPathError(f"cannot write {path}: {why}")


def _write_stream(target: Any, write: Callable[[str], object]) -> None:
    """Write to a device, a FIFO or this process's standard output / error: ``write``
    fills a private temporary file (not beside the output: nothing is ever renamed over
    a stream) whose bytes are then written to the stream, every write checked (MXNet's
    own writer leaves a failed final flush unchecked)."""
    import sys
    fd, tmp = tempfile.mkstemp(prefix=".mxnet-amp-", suffix=".tmp")
    os.close(fd)
    name = {"stdout": " (standard output)", "stderr": " (standard error)"}.get(target.kind, "")
    try:
        _filled(write, tmp, target.path)
        try:
            with open(tmp, "rb") as f:
                if target.kind == "stream":
                    with open(target.real, "wb", buffering=0) as out:
                        for chunk in iter(lambda: f.read(1 << 20), b""):
                            _write_all(out.fileno(), chunk)
                else:
                    stream = sys.stdout if target.kind == "stdout" else sys.stderr
                    stream.flush()
                    binary = getattr(stream, "buffer", None)
                    if binary is not None:
                        for chunk in iter(lambda: f.read(1 << 20), b""):
                            binary.write(chunk)
                    else:   # a text-only stream (a test's capture): what goes to one is text
                        stream.write(f.read().decode("utf-8", errors="replace"))
                    stream.flush()
        except OSError as err:
            raise OutputPathError(f"cannot write {target.path}{name}: "
                                  f"{err.strerror or err}") from err
    finally:
        os.unlink(tmp)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _temp_beside(path: str, shown: str | None = None) -> str:
    """A new empty hidden file beside ``path`` (same folder: the rename stays atomic);
    :class:`OutputPathError` naming ``shown`` (default ``path``) when the folder refuses it."""
    folder = os.path.dirname(os.path.abspath(path))
    clear_stale_temps(path, shown or path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=temp_prefix(path), suffix=".tmp", dir=folder)
    except OSError as err:
        raise OutputPathError(f"cannot write {shown or path}: {err.strerror or err} (creating a "
                              f"file in {folder})") from None
    os.close(fd)
    return tmp


def text_writer(text: str) -> Callable[[str], None]:
    """A ``write`` for :func:`atomic_writes` that writes ``text`` (a symbol's JSON)."""
    def write(tmp: str) -> None:
        with open(tmp, "w") as f:
            f.write(text)
    return write
