"""The mxnet-amp command line, run in-process (main returns the exit code) and as a subprocess."""
import json
import os
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest

from mxnet_amp.cli.auto_command import parse_input_spec
from mxnet_amp.cli.main import main
from mxnet_amp.errors import CLIError
from mxnet_amp.ir.dtypes import dtype_name
from mxnet_amp.mx.io import load_checkpoint, symbol_json

from helpers import saved_small_model

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture()
def ckpt(tmp_path):
    return saved_small_model(tmp_path, "small", 3)


def nodes_of(prefix):
    with open(prefix + "-symbol.json") as f:
        return json.load(f)["nodes"]


def run(capsys, argv):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_convert_writes_a_loadable_checkpoint_and_a_matching_report(ckpt, tmp_path, capsys):
    out = str(tmp_path / "small16")
    rep, svg, page = (str(tmp_path / n) for n in ("r.json", "g.svg", "p.html"))
    code, stdout, err = run(capsys, ["convert", ckpt, "--epoch", "3", "--target-dtype", "float16",
                                     "--out", out, "--exclude", "conv2", "--report", rep,
                                     "--graph", svg, "--html", page])
    assert code == 0, err
    sym, args, auxs = load_checkpoint(out, 3)
    nodes = json.loads(symbol_json(sym))["nodes"]
    casts = [n for n in nodes if n["op"] == "amp_cast"]
    assert casts, "the written symbol lost its amp_cast nodes"
    report = json.load(open(rep))
    assert report["casts"] == len(casts)
    assert report["casts_by_dtype"] == dict(Counter(n["attrs"]["dtype"] for n in casts))
    assert report["multicasts"] == sum(1 for n in nodes if n["op"] == "amp_multicast")
    op_nodes = [n for n in nodes if n["op"] not in ("null", "amp_cast", "amp_multicast")]
    # bn1 folded into conv1 by default (bn2 kept: conv2 is excluded); the input had 9
    assert report["total_nodes"] == len(op_nodes) == 8
    assert report["batchnorm_folding"]["names"] == ["bn1"]
    assert report["input_model"]["op_nodes"] == 9
    assert sum(report["nodes_by_dtype"].values()) == len(op_nodes)
    # node dtypes: MXNet's own inference on the written graph
    internals = sym.get_internals()
    _, types, _ = internals.infer_type(data="float32", **{k: v.dtype for k, v in args.items()})
    dtype_of = {name[:-7]: dtype_name(t) for name, t in zip(internals.list_outputs(), types)
                if name.endswith("_output")}
    counted = Counter(dtype_of[n["name"]] for n in op_nodes)
    assert report["nodes_by_dtype"] == dict(counted)
    assert dtype_of["conv2"] == "float32" and dtype_of["conv1"] == "float16"
    assert {"name": "conv2", "op": "Convolution",
            "reason": "excluded by name (excluded_sym_names / --exclude)"} in report["fp32_nodes"]
    nbytes = sum(int(np.prod(v.shape)) * np.dtype(v.dtype).itemsize
                 for v in {**args, **auxs}.values())
    assert report["params_after"]["bytes"] == nbytes
    assert report["params_after"]["count"] == len(args) + len(auxs)
    # the terminal table and the pictures
    assert "mxnet-amp conversion to float16: small" in stdout and "Convolution" in stdout
    assert open(svg).read().lstrip().startswith("<svg")
    html = open(page).read()
    assert "<svg" in html and "<table>" in html
    assert f"wrote {out}-symbol.json" in err


def test_cast_optional_params_stores_float16_weights(ckpt, tmp_path, capsys):
    out = str(tmp_path / "opt")
    rep = str(tmp_path / "r.json")
    code, _, err = run(capsys, ["convert", ckpt, "--epoch", "3", "--target-dtype", "float16",
                                "--out", out, "--cast-optional-params", "--report", rep, "-q"])
    assert code == 0, err
    _, args, auxs = load_checkpoint(out, 3)
    halves = [k for k, v in args.items() if v.dtype == np.float16]
    assert "conv1_weight" in halves and "fc_weight" in halves
    report = json.load(open(rep))
    assert report["params_after"]["by_dtype"]["float16"]["count"] == len(halves)
    assert report["params_after"]["bytes"] < report["params_before"]["bytes"]
    # "before" is the checkpoint as given (BatchNorm params included, folded or not)
    _, in_args, in_auxs = load_checkpoint(ckpt, 3)
    before = sum(int(np.prod(v.shape)) * 4 for v in {**in_args, **in_auxs}.values())
    assert report["params_before"]["bytes"] == before


def test_inspect_writes_no_checkpoint(ckpt, tmp_path, capsys):
    before = sorted(os.listdir(tmp_path))
    code, stdout, err = run(capsys, ["inspect", ckpt, "--epoch", "3", "--target-dtype", "bfloat16"])
    assert code == 0, err
    assert sorted(os.listdir(tmp_path)) == before
    assert "mxnet-amp conversion to bfloat16" in stdout and "no checkpoint written" in stdout
    assert "amp_cast" in stdout


@pytest.mark.parametrize("argv, message", [
    (["convert", "{tmp}/nope", "--target-dtype", "float16"], "checkpoint file not found: {tmp}/nope-symbol.json"),
    (["convert", "{ckpt}", "--epoch", "3", "--target-dtype", "float16", "--fp32-ops", "NoSuchOp"],
     "unknown operator name(s) in --fp32-ops: NoSuchOp"),
    (["convert", "{ckpt}", "--epoch", "3", "--target-dtype", "float16", "--exclude", "nosuchnode"],
     "--exclude ['nosuchnode'] name no node"),
    (["convert", "{ckpt}", "--epoch", "7", "--target-dtype", "float16"], "{ckpt}-0007.params"),
    (["convert", "{ckpt}", "--epoch", "3", "--target-dtype", "float16", "--out", "{ckpt}"],
     "refusing to overwrite an input: the output symbol file (--out) {ckpt}-symbol.json is the "
     "input symbol file"),
    (["convert", "{ckpt}", "--epoch", "3", "--target-dtype", "float16", "--graph", "{tmp}/g.jpg"],
     "use a .svg, .png, .dot or .gv file name"),
    (["auto", "{ckpt}", "--epoch", "3", "--input", "data:1xAx8x8"], "bad --input 'data:1xAx8x8'"),
    (["auto", "{ckpt}", "--epoch", "3"], "auto needs sample inputs"),
    (["inspect", "{ckpt}", "--epoch", "3", "--report", "{tmp}/no/such/dir/r.json"],
     "folder {tmp}/no/such/dir does not exist"),
])
def test_errors_are_one_line_and_exit_2(ckpt, tmp_path, capsys, argv, message):
    argv = [a.format(tmp=tmp_path, ckpt=ckpt) for a in argv]
    code, stdout, err = run(capsys, argv)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mxnet-amp: error: ")
    assert message.format(tmp=tmp_path, ckpt=ckpt) in lines[0]
    assert "Traceback" not in err
    # nothing was written on the way to the error
    assert not any(name.startswith("small-amp") for name in os.listdir(tmp_path))


def test_converting_a_converted_checkpoint_is_an_error(ckpt, tmp_path, capsys):
    out = str(tmp_path / "once")
    assert main(["convert", ckpt, "--epoch", "3", "--target-dtype", "float16", "--out", out, "-q"]) == 0
    capsys.readouterr()
    code, _, err = run(capsys, ["convert", out, "--epoch", "3", "--target-dtype", "float16",
                                "--out", str(tmp_path / "twice")])
    assert code == 2 and "converted to mixed precision already" in err
    assert not os.path.exists(str(tmp_path / "twice") + "-symbol.json")


def test_debug_shows_the_exception(tmp_path):
    from mxnet_amp.errors import AMPError
    with pytest.raises(AMPError):
        main(["--debug", "convert", str(tmp_path / "nope"), "--target-dtype", "float16"])


@pytest.mark.parametrize("command", ["convert", "auto", "inspect", "demo"])
def test_help_for_each_command(capsys, command):
    code, out, _ = run(capsys, [command, "--help"])
    assert code == 0 and out.startswith(f"usage: mxnet-amp {command}")
    assert "--report" in out and "--graph" in out and "--html" in out


def test_usage_errors_exit_2(capsys):
    code, _, err = run(capsys, ["convert", "x"])      # --target-dtype is required
    assert code == 2 and "--target-dtype" in err
    code, _, err = run(capsys, ["frobnicate"])
    assert code == 2 and "invalid choice" in err


def test_input_specs(tmp_path):
    name, x = parse_input_spec("data:2x3x4x4", seed=1)
    assert name == "data" and x.shape == (2, 3, 4, 4) and x.dtype == np.float32
    np.testing.assert_array_equal(x, parse_input_spec("data:2x3x4x4", seed=1)[1])
    path = tmp_path / "x.npy"
    np.save(path, np.arange(6, dtype="float32").reshape(2, 3))
    name, y = parse_input_spec(f"img:{path}")
    assert name == "img" and y.tolist() == [[0, 1, 2], [3, 4, 5]]
    for bad in ("data", "data:", "data:0x3", "data:axb", f"data:{tmp_path}/missing.npy"):
        with pytest.raises(CLIError):
            parse_input_spec(bad)


def test_auto_writes_a_checkpoint(ckpt, tmp_path, capsys):
    pytest.importorskip("mxnet_amp.auto")
    out = str(tmp_path / "auto")
    rep = str(tmp_path / "r.json")
    npz = tmp_path / "in.npz"
    np.savez(npz, data=np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype("float32"))
    code, stdout, err = run(capsys, ["auto", ckpt, "--epoch", "3", "--target-dtype", "bfloat16",
                                     "--inputs-npz", str(npz), "--out", out, "--report", rep,
                                     "--tolerance", "0.08"])
    assert code == 0, err
    sym, args, auxs = load_checkpoint(out, 3)
    nodes = json.loads(symbol_json(sym))["nodes"]
    report = json.load(open(rep))
    assert report["casts"] == sum(1 for n in nodes if n["op"] == "amp_cast") > 0
    auto = report["extra"]["auto"]
    assert auto["target_dtype"] == "bfloat16" and auto["executions"] >= 2
    assert "auto bfloat16" in stdout
    # the summary states the check and the model's figures against it
    assert auto["criterion"] == "scale" and auto["tolerance"] == 0.08
    assert f"max|out-ref|/max|ref| {auto['relative_error']:.3g} (tolerance 0.08)" in stdout
    # every node automatic mode kept in float32 is float32 in the report, with its reason
    fp32 = {n["name"]: n["reason"] for n in report["fp32_nodes"]}
    for kept in auto["kept_fp32"]:
        assert kept["name"] in fp32


def test_module_runs_as_a_subprocess(ckpt, tmp_path):
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    rep = str(tmp_path / "r.json")
    done = subprocess.run([sys.executable, "-m", "mxnet_amp", "inspect", ckpt, "--epoch", "3",
                           "--target-dtype", "float16", "--report", rep, "-q"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.load(open(rep))["target_dtype"] == "float16"
    done = subprocess.run([sys.executable, "-m", "mxnet_amp", "inspect", str(tmp_path / "none")],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip() == f"mxnet-amp: error: checkpoint file not found: {tmp_path}/none-symbol.json"


@pytest.mark.native_bf16   # native: the speed-up; elsewhere the emulation sentence
def test_demo(tmp_path, capsys):
    rep = str(tmp_path / "demo.json")
    code, stdout, err = run(capsys, ["demo", "--size", "32", "--batch", "2", "--runs", "2",
                                     "--report", rep])
    assert code == 0, err
    report = json.load(open(rep))
    assert report["model"] == "resnet18_v1" and report["target_dtype"] == "bfloat16"
    assert report["casts"] > 0
    extra = report["extra"]
    assert 0 <= extra["relative_max_error"] < 0.1
    if extra["native"]:
        assert extra["speedup"] > 0 and "speed-up x" in stdout
    else:
        assert "speedup" not in extra
        assert "Native bfloat16 is unavailable on this CPU" in stdout
        assert "its speed was not measured" in stdout
