"""mxnet_amp.files.progress: the byte and stage bars on stderr and what advances them."""
import threading
import time

from mxnet_amp.files.progress import byte_bar, preread, stage_bar, watch_growth


def test_byte_bar_is_hidden_when_disabled_and_shown_when_enabled():
    """enabled=False hides the bar, True shows it whatever stderr is."""
    with byte_bar("writing", 10, False) as bar:
        assert bar.disable
    with byte_bar("writing", 10, True) as bar:
        assert not bar.disable and bar.total == 10 and bar.unit == "B"


def test_stage_bar_stays_hidden_off_a_terminal():
    """Under pytest stderr is no terminal: a stage bar never shows, even when asked."""
    with stage_bar("calibrating", None, True) as bar:
        assert bar.disable


def test_preread_advances_the_bar_by_the_bytes_read(tmp_path):
    """preread reads the whole file once, counting every byte on the bar."""
    path = tmp_path / "params"
    path.write_bytes(b"x" * 12345)
    with byte_bar("reading", 12345, True) as bar:
        preread(str(path), bar)
        assert bar.n == 12345


def test_watch_growth_follows_a_file_as_it_is_written(tmp_path):
    """While the block runs, the bar follows the size the file grows to; the poller stops after."""
    path = tmp_path / "growing"
    before = threading.active_count()
    with byte_bar("writing", 300, True) as bar:
        with watch_growth(str(path), bar, interval=0.01):
            for _ in range(3):
                with open(path, "ab") as f:
                    f.write(b"y" * 100)
                time.sleep(0.1)
        assert bar.n == 300
    assert threading.active_count() == before
