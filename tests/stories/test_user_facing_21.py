"""What a new user saw (issue 21, items 9, 10, 12-15): warnings said late or lost, titles
and notes that misled, raw MXNet errors on sample inputs, a temporary file left by SIGTERM,
exclusions that exclude nothing, and bad flags named by the wrong name or none.

Each test failed before the fix it guards.
"""
from __future__ import annotations

import dataclasses
import glob
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import mxnet as mx
import numpy as np
import pytest

import mxnet_amp as amp
from mxnet_amp.cli.main import main
from mxnet_amp.errors import CheckpointError

from helpers import saved_small_model, small_model

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cli(capsys, argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def error_line(err: str) -> str:
    """The one ``mxnet-amp: error:`` line of ``err`` (asserts there is exactly one line
    besides warnings and notes)."""
    lines = [line for line in err.strip().splitlines()
             if not line.startswith(("mxnet-amp: warning", "mxnet-amp: note"))]
    assert len(lines) == 1 and lines[0].startswith("mxnet-amp: error: "), err
    return lines[0]


@pytest.fixture()
def ckpt(tmp_path):
    return saved_small_model(tmp_path, "m")


@pytest.fixture()
def opless(tmp_path):
    """A checkpoint whose symbol is one variable: converting it warns ("no operators")."""
    from mxnet_amp.mx.io import save_checkpoint
    prefix = str(tmp_path / "v")
    save_checkpoint(prefix, 0, mx.sym.var("data"), {}, {})
    return prefix


# ----------------------------------------------------------------------------- 9: warnings

def test_warnings_are_printed_before_anything_is_written(opless, tmp_path, capsys):
    code, _, err = cli(capsys, ["convert", opless, "--target-dtype", "bf16", "-q",
                                "--report", tmp_path / "r.json"])
    assert code == 0, err
    lines = err.splitlines()
    warned = [k for k, line in enumerate(lines) if "warning: the symbol has no operators" in line]
    wrote = [k for k, line in enumerate(lines) if ": wrote " in line]
    assert len(warned) == 1 and wrote and warned[0] < min(wrote), err


def test_warnings_are_not_lost_when_the_command_then_fails(opless, tmp_path, capsys, monkeypatch):
    import mxnet_amp.checkpoint as checkpoint

    def full(*args, **kwargs):
        raise CheckpointError("cannot write: disk full")
    monkeypatch.setattr(checkpoint, "save_checkpoint", full)
    code, _, err = cli(capsys, ["convert", opless, "--target-dtype", "bf16", "-q"])
    assert code == 2
    assert "warning: the symbol has no operators" in err
    assert "disk full" in error_line(err)


# ----------------------------------------------------------------------------- 10: what is shown

def test_picture_title_says_how_many_nodes_compute_in_which_dtype():
    from mxnet_amp.convert import convert_model_full
    from mxnet_amp.report.picture import collapse, node_dtypes
    from mxnet_amp.options import OpLists, make_options
    sym, args, auxs = small_model()
    *_, conversion = convert_model_full(sym, args, auxs,
                                        make_options("bfloat16", OpLists(excluded_sym_names=["fc", "conv2"])))
    graph, dtypes = conversion.graph, node_dtypes(conversion)
    ops = [i for i, n in enumerate(graph.nodes) if not n.is_variable and n.op not in ("amp_cast", "amp_multicast")]
    n32 = sum(dtypes[i] == "float32" for i in ops)
    n16 = sum(dtypes[i] == "bfloat16" for i in ops)
    assert n32 >= 2 and n16 >= 2
    title = collapse(conversion, title="m").title
    assert f"{len(ops)} op nodes: {n16} bfloat16, {n32} float32" in title, title
    assert "mixed precision" not in title


def test_long_reasons_are_wrapped_at_words_not_cut():
    from mxnet_amp.report.model import FP32Node, build_report
    from mxnet_amp.report.pages import format_table
    from mxnet_amp.convert import convert_model_full
    from mxnet_amp.options import make_options
    sym, args, auxs = small_model()
    *_, conversion = convert_model_full(sym, args, auxs, make_options("bfloat16"))
    words = [f"word{k:03d}" for k in range(60)]
    reason = "auto: " + " ".join(words)
    report = dataclasses.replace(build_report(conversion), fp32_nodes=(FP32Node("fc", "FullyConnected", reason),))
    table = format_table(report)
    assert "…" not in table.split("Nodes kept in float32")[1]
    shown = re.findall(r"word\d{3}", table)
    assert shown == words      # every word, whole, in order
    assert max(len(line) for line in table.splitlines()) <= 120


def test_fp16_demo_html_says_each_note_once(tmp_path, capsys):
    page = tmp_path / "d.html"
    code, _, err = cli(capsys, ["demo", "--model", "mobilenet0.25", "--target-dtype", "float16",
                                "--size", "16", "--batch", "1", "--runs", "1", "-q",
                                "--html", page])
    assert code == 0, err
    notes = re.findall(r"<li>(.*?)</li>", page.read_text())
    assert len(notes) == len(set(notes))
    # the machine cannot run float16 (MXNet has no CPU kernels): said once, not twice
    assert sum("float16" in n and "kernels" in n for n in notes) == 1, notes
    assert any("checked by emulation" in n for n in notes), notes


@pytest.mark.parametrize("argv", [["convert", "x"], ["frobnicate"], ["auto", "x", "--tolerance", "abc"],
                                  ["demo", "--bogus"], ["inspect"], []])
def test_usage_errors_are_one_line(capsys, argv):
    code, out, err = cli(capsys, argv)
    assert code == 2 and out == ""
    line = error_line(err)
    assert "usage:" not in err and "--help" in line


# ----------------------------------------------------------------------------- 14: variables excluded

@pytest.mark.parametrize("name, reader", [("conv1_weight", "conv1 (Convolution)"),
                                          ("data", "conv1 (Convolution)"),
                                          ("bn1_moving_var", "bn1 (BatchNorm)")])
def test_excluding_a_variable_names_the_ops_that_read_it(ckpt, tmp_path, capsys, name, reader):
    code, _, err = cli(capsys, ["convert", ckpt, "--target-dtype", "bf16", "--exclude", name,
                                "--out", tmp_path / "o"])
    line = error_line(err)
    assert code == 2 and name in line and reader in line and "--exclude" in line, line
    assert not glob.glob(str(tmp_path / "o*"))


def test_api_excluded_variable_is_a_graph_error_naming_its_readers():
    from mxnet_amp.errors import GraphError
    sym, args, auxs = small_model()
    with pytest.raises(GraphError, match=r"conv1_weight is read by conv1 \(Convolution\)"):
        amp.convert_model(sym, args, auxs, "float16", excluded_sym_names=["conv1_weight", "fc"])
    # a node of the graph that is an op is still a valid exclusion
    amp.convert_model(sym, args, auxs, "float16", excluded_sym_names=["conv1", "fc"])


# ----------------------------------------------------------------------------- 13: SIGTERM, SIGHUP

# saves a checkpoint whose params file (~245 MB) takes a while to write; the test signals it
# once the temporary params file has data, i.e. mid-write
_SAVER = textwrap.dedent("""
    import sys
    import mxnet as mx
    from mxnet_amp.mx.io import save_checkpoint
    n = 60000
    sym = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=n, name="fc")
    args = {"fc_weight": mx.nd.full((n, 1024), 7.0), "fc_bias": mx.nd.full((n,), 7.0)}
    args["fc_weight"].wait_to_read()
    print("ready", flush=True)
    save_checkpoint(sys.argv[1], 0, sym, args, {})
    print("done", flush=True)
""")


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGHUP"])
def test_termination_signal_mid_write_leaves_no_temporary_file(tmp_path, signame):
    signum = getattr(signal, signame, None)
    if signum is None:
        pytest.skip(f"no {signame} on this platform")
    prefix = str(tmp_path / "big")
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-c", _SAVER, prefix], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, env=env, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        deadline, sent = time.time() + 120, False
        while time.time() < deadline and proc.poll() is None and not sent:
            if any(os.path.getsize(t) > 0 for t in glob.glob(str(tmp_path / ".big-0000.params.*.tmp"))):
                os.kill(proc.pid, signum)
                sent = True
            time.sleep(0.0005)
        assert sent, "the save finished before the signal; make the params larger"
        assert proc.wait(timeout=120) == -signum     # it still ends by the signal
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    assert os.listdir(tmp_path) == []                # no temporary file, no partial output


def test_signal_handlers_are_restored_after_a_write(tmp_path):
    from mxnet_amp.files.atomic import atomic_write
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    seen = {}

    def write(tmp):
        seen.update({s: signal.getsignal(s) for s in before})
        with open(tmp, "w") as f:
            f.write("x")
    atomic_write(tmp_path / "a.txt", write)
    assert all(seen[s] != before[s] for s in before)     # handled during the write
    assert {s: signal.getsignal(s) for s in before} == before


def test_write_from_a_thread_leaves_handlers_alone(tmp_path):
    import threading
    from mxnet_amp.files.atomic import atomic_write
    errors = []

    def work():
        try:
            atomic_write(tmp_path / "t.txt", lambda tmp: open(tmp, "w").close())
        except BaseException as err:   # noqa: BLE001 - the thread reports whatever it met
            errors.append(err)
    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert errors == [] and os.listdir(tmp_path) == ["t.txt"]


def test_a_previous_handler_that_returns_gets_the_signal_and_a_typed_error(tmp_path):
    from mxnet_amp.files.atomic import atomic_write
    got = []
    old = signal.signal(signal.SIGTERM, lambda signum, frame: got.append(signum))
    try:
        def write(tmp):
            with open(tmp, "w") as f:
                f.write("partial")
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.5)   # the handler runs at the next bytecode; never gets here whole
        with pytest.raises(CheckpointError, match="SIGTERM"):
            atomic_write(tmp_path / "a.txt", write)
    finally:
        signal.signal(signal.SIGTERM, old)
    assert got == [signal.SIGTERM] and os.listdir(tmp_path) == []


# ----------------------------------------------------------------------------- 15: a folder refusing files

def test_report_folder_refusing_files_fails_before_the_checkpoint(ckpt, tmp_path, capsys):
    """/sys passes os.access(W_OK) as root, yet refuses any new file."""
    if not os.path.isdir("/sys") or not os.access("/sys", os.W_OK):
        pytest.skip("needs a /sys that claims to be writable")
    code, _, err = cli(capsys, ["convert", ckpt, "--target-dtype", "bf16", "--out", tmp_path / "o",
                                "--report", "/sys/mxnet-amp-r.json"])
    line = error_line(err)
    assert code == 2 and "/sys/mxnet-amp-r.json" in line and ".tmp" not in line, line
    assert not glob.glob(str(tmp_path / "o*"))


def test_a_refused_temporary_file_is_named_by_the_path_asked_for(tmp_path, monkeypatch):
    """Past the up-front check (a folder that changes under us), the error still names the
    output, not its temporary file."""
    import tempfile
    from mxnet_amp.errors import OutputPathError
    from mxnet_amp.files.atomic import atomic_write
    import mxnet_amp.files.atomic as atomic   # atomic_writes looks check_writable up there
    monkeypatch.setattr(atomic, "check_writable", lambda outputs: None)

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(tmp_path / ".r.json.abc.tmp"))
    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    with pytest.raises(OutputPathError, match=r"cannot write .*r\.json: Permission denied") as err:
        atomic_write(tmp_path / "r.json", lambda tmp: None)
    assert ".tmp" not in str(err.value)


# ----------------------------------------------------------------------------- 12: sample input dtypes

@pytest.mark.parametrize("dtype", ["float64", "int64", "bool"])
def test_auto_takes_numeric_npy_inputs_as_float32_and_says_so(ckpt, tmp_path, capsys, dtype):
    x = np.random.default_rng(0).standard_normal((2, 3, 8, 8)) * 3
    np.save(tmp_path / "x.npy", (x > 0) if dtype == "bool" else x.astype(dtype))
    code, _, err = cli(capsys, ["auto", ckpt, "--input", f"data:{tmp_path / 'x.npy'}", "-q",
                                "--out", tmp_path / "o"])
    assert code == 0, err
    assert f"warning: --input 'data' is {dtype}: cast to float32" in err
    assert os.path.isfile(tmp_path / "o-0000.params")


def test_npz_input_cast_is_said_of_inputs_npz(ckpt, tmp_path, capsys):
    np.savez(tmp_path / "x.npz", data=np.ones((2, 3, 8, 8)))
    code, _, err = cli(capsys, ["auto", ckpt, "--inputs-npz", tmp_path / "x.npz", "-q",
                                "--out", tmp_path / "o"])
    assert code == 0, err
    assert "warning: --inputs-npz 'data' is float64: cast to float32" in err


def test_api_sample_input_of_float64_is_cast_to_float32():
    sym, args, auxs = small_model()
    x = np.random.default_rng(0).standard_normal((2, 3, 8, 8))
    with pytest.warns(UserWarning, match="float64: cast to float32"):
        _, _, _, report = amp.auto_convert_model(sym, args, auxs, {"data": x}, "bfloat16",
                                                 execution="emulated")
    assert report.validated


@pytest.mark.parametrize("values, said", [(np.full((2, 3, 8, 8), "a"), "<U1 values"),
                                          (np.full((2, 3, 8, 8), np.nan, "float32"), "no finite value"),
                                          (np.full((2, 3, 8, 8), np.inf, "float64"), "no finite value")])
def test_unusable_sample_inputs_are_refused_naming_the_input(ckpt, tmp_path, capsys, values, said):
    np.save(tmp_path / "x.npy", values)
    code, _, err = cli(capsys, ["auto", ckpt, "--input", f"data:{tmp_path / 'x.npy'}", "-q",
                                "--out", tmp_path / "o"])
    line = error_line(err)
    assert code == 2 and "--input 'data'" in line and said in line, line
    assert not glob.glob(str(tmp_path / "o*"))


def test_api_all_nan_sample_input_is_an_input_value_error():
    from mxnet_amp.errors import InputValueError
    sym, args, auxs = small_model()
    with pytest.raises(InputValueError, match="sample_inputs 'data' holds no finite value"):
        amp.auto_convert_model(sym, args, auxs, mx.nd.full((2, 3, 8, 8), np.nan), "bfloat16")


# ----------------------------------------------------------------------------- 15: flags and inputs

@pytest.mark.parametrize("value", ["-1", "0", "nan", "inf"])
def test_bad_tolerance_is_named_by_its_flag(ckpt, tmp_path, capsys, value):
    code, _, err = cli(capsys, ["auto", ckpt, "--input", "data:2x3x8x8", f"--tolerance={value}",
                                "--out", tmp_path / "o"])
    line = error_line(err)
    assert code == 2 and "--tolerance must be a finite number > 0" in line, line
    assert "ValueError" not in line


def test_native_float16_is_refused_up_front(ckpt, tmp_path, capsys):
    code, _, err = cli(capsys, ["auto", ckpt, "--input", "data:2x3x8x8", "--execution", "native",
                                "--target-dtype", "fp16", "--out", tmp_path / "o"])
    line = error_line(err)
    assert code == 2 and "--execution native" in line and "--execution emulated" in line, line
    assert "MXNet:" not in line


def test_api_native_float16_on_cpu_is_a_target_dtype_error():
    from mxnet_amp.errors import TargetDtypeError
    sym, args, auxs = small_model()
    with pytest.raises(TargetDtypeError, match="execution='emulated'"):
        amp.auto_convert_model(sym, args, auxs, mx.nd.ones((2, 3, 8, 8)), "float16",
                               execution="native")


@pytest.mark.parametrize("arrays, said", [({"data": np.zeros((2, 3, 12, 12), "float32")}, "(5, 144)"),
                                          ({"dat": np.zeros((2, 3, 8, 8), "float32")}, "['dat']")])
def test_npz_inputs_are_blamed_on_inputs_npz(ckpt, tmp_path, capsys, arrays, said):
    np.savez(tmp_path / "x.npz", **arrays)
    code, _, err = cli(capsys, ["auto", ckpt, "--inputs-npz", tmp_path / "x.npz", "--out", tmp_path / "o"])
    line = error_line(err)
    assert code == 2 and "--inputs-npz" in line and said in line, line
    assert "--input " not in line and "--input)" not in line, line


def _symbol_api_classifier(prefix: str) -> None:
    """conv -> relu -> FC -> SoftmaxOutput, saved by mx.model.save_checkpoint (the label
    variable softmax_label is an argument without a param)."""
    data = mx.sym.var("data")
    x = mx.sym.Activation(mx.sym.Convolution(data, num_filter=4, kernel=(3, 3), name="conv0"),
                          act_type="relu", name="relu0")
    sym = mx.sym.SoftmaxOutput(mx.sym.FullyConnected(x, num_hidden=5, name="fc0"), name="softmax")
    arg_shapes, _, _ = sym.infer_shape(data=(2, 3, 8, 8))
    rng = np.random.default_rng(0)
    args = {n: mx.nd.array(rng.standard_normal(s) * 0.3) for n, s in zip(sym.list_arguments(), arg_shapes)
            if n not in ("data", "softmax_label")}
    mx.model.save_checkpoint(prefix, 0, sym, args, {})


def test_auto_on_a_symbol_api_classifier_needs_no_label_sample(tmp_path, capsys):
    prefix = str(tmp_path / "cls")
    _symbol_api_classifier(prefix)
    code, _, err = cli(capsys, ["auto", prefix, "--input", "data:2x3x8x8", "--target-dtype", "bf16",
                                "-q", "--out", tmp_path / "o"])
    assert code == 0, err
    sym, args, _ = amp.load_checkpoint(str(tmp_path / "o"), 0)
    assert "softmax_label" in sym.list_arguments() and "softmax_label" not in args


def test_api_loss_labels_need_no_sample_but_may_be_given():
    from mxnet_amp.auto.inputs import loss_labels
    from mxnet_amp.mx.io import graph_from_symbol
    data = mx.sym.var("data")
    fc = mx.sym.FullyConnected(data, num_hidden=3, name="fc")
    sym = mx.sym.LinearRegressionOutput(fc, name="reg")
    assert loss_labels(graph_from_symbol(sym)) == {"reg_label"}
    args = {"fc_weight": mx.nd.ones((3, 4)) * 0.1, "fc_bias": mx.nd.zeros((3,))}
    x = mx.nd.ones((2, 4))
    for given in (x, {"data": x}, {"data": x, "reg_label": mx.nd.zeros((2, 3))}):
        _, _, _, report = amp.auto_convert_model(sym, args, {}, given, "bfloat16", execution="emulated")
        assert report.validated
