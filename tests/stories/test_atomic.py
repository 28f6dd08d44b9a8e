"""Nothing lost: inputs are never modified, and files appear under their final name only
when complete, even when the writing process is killed (SIGKILL) mid-write."""
from __future__ import annotations

import glob
import hashlib
import os
import signal
import subprocess
import sys
import textwrap
import time

import mxnet as mx
import numpy as np
import pytest

import mxnet_amp as amp
from mxnet_amp.checkpoint import convert_checkpoint
from mxnet_amp.errors import CheckpointError
from mxnet_amp.files.atomic import atomic_write
from mxnet_amp.mx.io import load_checkpoint, save_checkpoint

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _model(hidden=6, seed=0):
    rng = np.random.RandomState(seed)
    data = mx.sym.var("data")
    h = mx.sym.Convolution(data, num_filter=hidden, kernel=(3, 3), pad=(1, 1), name="conv")
    h = mx.sym.BatchNorm(h, name="bn")
    h = mx.sym.Activation(h, act_type="relu", name="act")
    out = mx.sym.FullyConnected(h, num_hidden=3, name="fc")
    a = lambda *s: mx.nd.array(rng.randn(*s).astype(np.float32) * 0.3)  # noqa: E731
    args = {"conv_weight": a(hidden, 3, 3, 3), "conv_bias": a(hidden), "bn_gamma": a(hidden),
            "bn_beta": a(hidden), "fc_weight": a(3, hidden * 16), "fc_bias": a(3)}
    auxs = {"bn_moving_mean": a(hidden), "bn_moving_var": mx.nd.abs(a(hidden)) + 0.5}
    return out, args, auxs


def _snapshot(params):
    return {k: (v.dtype, v.shape, v.asnumpy().tobytes()) for k, v in params.items()}


def _sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


# ----------------------------------------------------------------------------- inputs unchanged

@pytest.mark.parametrize("target", ["float16", "bfloat16"])
@pytest.mark.parametrize("optional", [False, True])
def test_convert_model_leaves_symbol_and_dicts_alone(target, optional):
    sym, args, auxs = _model()
    json_before = sym.tojson(remove_amp_cast=False)
    ids = {k: id(v) for k, v in {**args, **auxs}.items()}
    snap_args, snap_auxs = _snapshot(args), _snapshot(auxs)
    csym, cargs, cauxs = amp.convert_model(sym, args, auxs, target_dtype=target,
                                           cast_optional_params=optional)
    assert sym.tojson(remove_amp_cast=False) == json_before
    assert _snapshot(args) == snap_args and _snapshot(auxs) == snap_auxs
    assert {k: id(v) for k, v in {**args, **auxs}.items()} == ids
    assert cargs is not args and cauxs is not auxs
    if optional:  # some weights now in low precision: new arrays, the originals untouched
        low = [k for k, v in cargs.items() if np.dtype(v.dtype) != np.float32]
        assert low and all(args[k].dtype == np.float32 for k in low)


def test_convert_hybrid_block_leaves_the_block_alone():
    from mxnet import gluon
    from mxnet_amp.gluon.adapter import convert_hybrid_block
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Conv2D(4, 3, padding=1), gluon.nn.BatchNorm(), gluon.nn.Activation("relu"),
            gluon.nn.Dense(3))
    net.initialize(mx.init.Xavier())
    x = mx.nd.random.uniform(shape=(1, 3, 8, 8))
    ref = net(x).asnumpy()
    params = {p.name: p.data().asnumpy().copy() for p in net.collect_params().values()}
    dtypes = {p.name: p.dtype for p in net.collect_params().values()}
    converted = convert_hybrid_block(net, target_dtype="bfloat16", cast_optional_params=True)
    assert converted is not net
    assert not net._active  # not hybridized behind the caller's back
    for p in net.collect_params().values():
        assert p.dtype == dtypes[p.name]
        assert np.array_equal(p.data().asnumpy(), params[p.name]), p.name
    np.testing.assert_array_equal(net(x).asnumpy(), ref)


def test_convert_checkpoint_leaves_input_files_alone(tmp_path):
    sym, args, auxs = _model()
    prefix = str(tmp_path / "fp32")
    save_checkpoint(prefix, 1, sym, args, auxs)
    files = sorted(glob.glob(prefix + "*"))
    hashes = {f: _sha(f) for f in files}
    convert_checkpoint(prefix, 1, str(tmp_path / "bf16"), target_dtype="bfloat16")
    assert {f: _sha(f) for f in files} == hashes
    with pytest.raises(CheckpointError, match="overwrite"):
        convert_checkpoint(prefix, 1, prefix, target_dtype="bfloat16")
    assert {f: _sha(f) for f in files} == hashes
    sym2, args2, auxs2 = load_checkpoint(str(tmp_path / "bf16"), 1)
    assert any(n == "amp_cast" for n in (x["op"] for x in __import__("json").loads(
        sym2.tojson(remove_amp_cast=False))["nodes"]))


# ----------------------------------------------------------------------------- atomic_write

def test_failed_write_leaves_no_file_and_no_temp(tmp_path):
    path = tmp_path / "out.bin"

    def write(tmp):
        with open(tmp, "wb") as f:
            f.write(b"half")
        raise RuntimeError("disk full")
    with pytest.raises(RuntimeError, match="disk full"):
        atomic_write(path, write)
    assert os.listdir(tmp_path) == []


def test_failed_write_keeps_the_previous_file(tmp_path):
    path = tmp_path / "out.bin"
    path.write_bytes(b"old complete contents")

    def write(tmp):
        with open(tmp, "wb") as f:
            f.write(b"new but")
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        atomic_write(path, write)
    assert path.read_bytes() == b"old complete contents"
    assert os.listdir(tmp_path) == ["out.bin"]


# ----------------------------------------------------------------------------- SIGKILL mid-write

# the child saves a checkpoint whose params file is large (so that its write takes a while),
# announces itself, and is killed by the test as soon as the temporary file has data in it
_CHILD = textwrap.dedent("""
    import sys
    import mxnet as mx, numpy as np
    from mxnet_amp.mx.io import save_checkpoint
    from mxnet_amp.checkpoint import convert_checkpoint
    mode, prefix, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if mode == "save":
        data = mx.sym.var("data")
        sym = mx.sym.FullyConnected(data, num_hidden=n, name="fc")
        args = {"fc_weight": mx.nd.full((n, 1024), 7.0), "fc_bias": mx.nd.full((n,), 7.0)}
        args["fc_weight"].wait_to_read()
        print("ready", flush=True)
        save_checkpoint(prefix, 0, sym, args, {})
    else:
        print("ready", flush=True)
        convert_checkpoint(prefix, 0, prefix + "-amp", target_dtype="bfloat16",
                           cast_optional_params=True)
    print("done", flush=True)
""")


def _kill_mid_write(args, watch_glob, timeout=120):
    """Start the child; SIGKILL it once a temp file matching ``watch_glob`` has data.
    Returns True when it was killed with the temp file present (i.e. mid-write)."""
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, env=env, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        deadline = time.time() + timeout
        while time.time() < deadline and proc.poll() is None:
            temps = [t for t in glob.glob(watch_glob) if os.path.getsize(t) > 0]
            if temps:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
                return True
            time.sleep(0.0005)
        return False
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def _params_temp(prefix):
    folder, base = os.path.split(prefix)
    return os.path.join(folder, f".{base}-0000.params.*.tmp")


def test_sigkill_during_first_save_leaves_nothing_under_the_final_name(tmp_path):
    prefix = str(tmp_path / "big")
    killed = _kill_mid_write(["save", prefix, "60000"], _params_temp(prefix))  # ~245 MB
    assert killed, "the save finished before the kill; make the params larger"
    assert not os.path.exists(prefix + "-0000.params")
    assert not os.path.exists(prefix + "-symbol.json")
    with pytest.raises(CheckpointError, match="not found"):
        load_checkpoint(prefix, 0)
    # what the killed process left is a hidden, partial temp file, never the checkpoint
    temps = glob.glob(_params_temp(prefix))
    assert temps and os.path.basename(temps[0]).startswith(".")


def test_sigkill_during_overwrite_keeps_the_previous_checkpoint(tmp_path):
    prefix = str(tmp_path / "big")
    data = mx.sym.var("data")
    old_sym = mx.sym.FullyConnected(data, num_hidden=8, name="fc")
    old = {"fc_weight": mx.nd.full((8, 1024), 3.0), "fc_bias": mx.nd.full((8,), 3.0)}
    save_checkpoint(prefix, 0, old_sym, old, {})
    hashes = {f: _sha(f) for f in glob.glob(prefix + "-*")}
    killed = _kill_mid_write(["save", prefix, "60000"], _params_temp(prefix))
    assert killed, "the save finished before the kill; make the params larger"
    assert {f: _sha(f) for f in glob.glob(prefix + "-*")} == hashes
    sym, args, auxs = load_checkpoint(prefix, 0)
    assert args["fc_weight"].shape == (8, 1024)
    assert float(args["fc_weight"].asnumpy().min()) == 3.0


def test_sigkill_during_convert_checkpoint_leaves_input_intact_and_no_output(tmp_path):
    prefix = str(tmp_path / "fp32")
    data = mx.sym.var("data")
    sym = mx.sym.FullyConnected(data, num_hidden=60000, name="fc")
    args = {"fc_weight": mx.nd.full((60000, 1024), 0.5), "fc_bias": mx.nd.full((60000,), 0.5)}
    save_checkpoint(prefix, 0, sym, args, {})
    del args
    hashes = {f: _sha(f) for f in glob.glob(prefix + "-*")}
    killed = _kill_mid_write(["convert", prefix, "0"], _params_temp(prefix + "-amp"))
    assert killed, "the conversion finished before the kill"
    assert {f: _sha(f) for f in glob.glob(prefix + "-0*") + glob.glob(prefix + "-s*")} == hashes
    assert not os.path.exists(prefix + "-amp-0000.params")
    assert not os.path.exists(prefix + "-amp-symbol.json")
    with pytest.raises(CheckpointError):
        load_checkpoint(prefix + "-amp", 0)
    load_checkpoint(prefix, 0)  # the input still loads
