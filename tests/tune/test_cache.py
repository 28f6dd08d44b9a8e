"""mxnet_amp.tune.cache: the per-machine kernel timing file of tune=."""
import json

import pytest

from mxnet_amp.errors import TuneError
from mxnet_amp.tune.cache import CACHE_VERSION, TimingCache, machine_key
from mxnet_amp.tune.tuning import default_cache_path


def test_a_timing_put_and_saved_is_read_back(tmp_path):
    """put + save writes the file (its folder made); a new cache on it gets the timing back."""
    path = tmp_path / "sub" / "tune.json"
    cache = TimingCache(str(path))
    cache.put("m1", "conv|3x3", "bfloat16", 2.0, 1.0)
    cache.save()
    again = TimingCache(str(path))
    assert again.get("m1", "conv|3x3", "bfloat16") == (2.0, 1.0)
    assert json.loads(path.read_text())["version"] == CACHE_VERSION


def test_get_misses_another_machine_or_dtype():
    """A timing is only valid for its machine and its low precision dtype."""
    cache = TimingCache(None)
    cache.put("m1", "fc", "bfloat16", 2.0, 1.0)
    assert cache.get("m2", "fc", "bfloat16") is None
    assert cache.get("m1", "fc", "float16") is None
    cache.save()   # no path: nothing to write, no error


def test_an_unreadable_or_old_file_is_a_tune_error(tmp_path):
    """A file of another version, or not JSON, is a TuneError that names it."""
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"version": 1, "machines": {}}))
    with pytest.raises(TuneError, match="old.json"):
        TimingCache(str(old))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(TuneError, match="cannot read it"):
        TimingCache(str(bad))


def test_default_cache_path_honours_the_environment(monkeypatch):
    """$MXNET_AMP_TUNE_CACHE wins; otherwise $XDG_CACHE_HOME/mxnet_amp/tune.json."""
    monkeypatch.setenv("MXNET_AMP_TUNE_CACHE", "/tmp/x.json")
    assert default_cache_path() == "/tmp/x.json"
    monkeypatch.delenv("MXNET_AMP_TUNE_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", "/cache")
    assert default_cache_path() == "/cache/mxnet_amp/tune.json"


def test_machine_key_names_the_threads_and_isa_limit(monkeypatch):
    """Timings depend on threads and DNNL_MAX_CPU_ISA: both appear in the key."""
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    monkeypatch.setenv("DNNL_MAX_CPU_ISA", "AVX2")
    key = machine_key()
    assert key.endswith("| 3 threads") and "DNNL_MAX_CPU_ISA=AVX2" in key


def test_a_corrupt_cache_file_is_a_tune_error_naming_it(tmp_path):
    """A bad byte or absurd nesting is a TuneError naming the file (a RecursionError before)."""
    import pytest

    from mxnet_amp.errors import TuneError
    from mxnet_amp.tune.cache import TimingCache
    for k, body in enumerate([b'{"version": 3, "m\xe9": 1}', b"[" * 100000 + b"]" * 100000]):
        path = tmp_path / f"c{k}.json"
        path.write_bytes(body)
        with pytest.raises(TuneError, match=f"tune cache {path}: cannot read it"):
            TimingCache(str(path))
