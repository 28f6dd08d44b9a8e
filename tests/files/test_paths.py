"""mxnet_amp.files.paths: checkpoint file names and the checks made on output paths."""
import os

import pytest

from mxnet_amp.errors import CheckpointError, OutputPathError, OverwriteError
from mxnet_amp.files.paths import (check_epoch, check_outputs, checkpoint_files, output_target,
                                   refuse_overwrite, refuse_stream_prefix)


def test_checkpoint_files_number_the_params_file():
    """PREFIX-symbol.json and PREFIX-NNNN.params, the epoch zero-padded to four digits."""
    assert checkpoint_files("out/m", 7) == ("out/m-symbol.json", "out/m-0007.params")


def test_checkpoint_files_refuse_a_folder_prefix_and_a_bad_epoch():
    """A prefix ending in a separator and a negative or bool epoch are CheckpointErrors."""
    with pytest.raises(CheckpointError, match="names a folder"):
        checkpoint_files("out/", 0)
    with pytest.raises(CheckpointError, match="non-negative integer"):
        check_epoch(-1)
    with pytest.raises(CheckpointError):
        check_epoch(True)


def test_output_target_tells_files_streams_and_folders_apart(tmp_path):
    """'-' is stdout, a missing path a file, /dev/null a stream, a folder refused."""
    assert output_target("-").kind == "stdout"
    assert output_target(tmp_path / "new.json").kind == "file"
    assert output_target("/dev/null").kind == "stream"
    with pytest.raises(OutputPathError, match="it is a folder"):
        output_target(tmp_path, "--report")


def test_refuse_overwrite_names_the_output_that_is_an_input(tmp_path):
    """An output that is an input (through a symlink too) and two outputs on one file are refused."""
    src = tmp_path / "m-symbol.json"
    src.write_text("{}")
    link = tmp_path / "link.json"
    os.symlink(src, link)
    with pytest.raises(OverwriteError, match="refusing to overwrite an input"):
        refuse_overwrite([("input symbol", src)], [("output symbol", link)])
    with pytest.raises(OverwriteError, match="are the same file"):
        refuse_overwrite([], [("a", tmp_path / "x"), ("b", tmp_path / "x")])
    refuse_overwrite([("input", src)], [("out", tmp_path / "y"), ("none", None)])


def test_check_outputs_refuses_a_missing_folder_and_a_stream_prefix(tmp_path):
    """An output in a folder that does not exist is an OutputPathError naming the folder;
    '-' as a checkpoint prefix is refused."""
    with pytest.raises(OutputPathError, match="does not exist"):
        check_outputs([], [("--report", tmp_path / "no" / "r.html")])
    with pytest.raises(OutputPathError, match="standard stream"):
        refuse_stream_prefix("-")
    check_outputs([], [("--report", tmp_path / "r.html")])


def test_standard_output_closed_is_refused_before_any_work(monkeypatch):
    """``--report -`` with stdout closed (``>&-``: Python's sys.stdout is None) is an
    OutputPathError before anything is written, not an AttributeError after the checkpoint
    (newcomer audit, #42)."""
    import sys

    import pytest

    from mxnet_amp.errors import OutputPathError
    from mxnet_amp.files.paths import check_writable
    monkeypatch.setattr(sys, "stdout", None)
    with pytest.raises(OutputPathError, match="the report file -: standard output is closed"):
        check_writable([("report file", "-")])
    check_writable([("report file", "/dev/stderr")])   # the other stream is open


def test_stale_temporary_files_of_a_killed_writer_are_cleared_live_ones_kept(tmp_path):
    """Of the hidden temporaries beside an output, those whose writer's pid is gone, and old
    ones without a pid (an earlier version's), are removed; a live writer's, another
    output's and a recent one without a pid stay (newcomer audit, #42)."""
    import subprocess
    import sys
    import time

    from mxnet_amp.files.paths import clear_stale_temps, temp_prefix
    out = str(tmp_path / "m-0000.params")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    names = {"dead": f".m-0000.params.{dead}-abcd1234.tmp", "old": ".m-0000.params.k2j4h5g6.tmp",
             "live": f"{temp_prefix(out)}zzzz9999.tmp", "other": f".n-0000.params.{dead}-abcd1234.tmp",
             "recent": ".m-0000.params.q1w2e3r4.tmp"}
    for key, name in names.items():
        (tmp_path / name).write_bytes(b"x" * 10)
    hour_ago = time.time() - 3600
    os.utime(tmp_path / names["old"], (hour_ago, hour_ago))
    with pytest.warns(UserWarning, match=r"removed 2 temporary file\(s\) an interrupted write of .*m-0000.params"):
        removed = clear_stale_temps(out)
    assert sorted(os.path.basename(f) for f, _ in removed) == sorted([names["dead"], names["old"]])
    assert all(size == 10 for _, size in removed)
    assert sorted(os.listdir(tmp_path)) == sorted([names["live"], names["other"], names["recent"]])
    assert clear_stale_temps(out) == []
