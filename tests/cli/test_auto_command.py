"""mxnet_amp.cli.auto_command: ``mxnet-amp auto``'s sample inputs, evaluation data and the
converted checkpoint it writes with its report."""
import json
import os

import numpy as np
import pytest

from mxnet_amp.cli.auto_command import cmd_auto, parse_input_spec
from mxnet_amp.cli.parser import command_parser
from mxnet_amp.errors import CLIError
from mxnet_amp.mx.io import load_checkpoint

from helpers import saved_small_model

COMMANDS = ("convert", "export-onnx", "inspect", "auto", "demo")


def parse(*argv):
    """The namespace ``mxnet-amp argv`` parses to."""
    return command_parser(dict.fromkeys(COMMANDS, lambda args: 0)).parse_args(list(argv))


@pytest.fixture()
def prefix(tmp_path):
    return saved_small_model(tmp_path, "m")


def test_parse_input_spec_refuses_a_missing_or_unreadable_npy(tmp_path):
    """A .npy value that is no file, or no array, is a CLIError naming the spec."""
    with pytest.raises(CLIError, match="file not found"):
        parse_input_spec(f"data:{tmp_path / 'none.npy'}")
    bad = tmp_path / "bad.npy"
    bad.write_bytes(b"not an array")
    with pytest.raises(CLIError, match="cannot read"):
        parse_input_spec(f"data:{bad}")


def test_cmd_auto_writes_the_checkpoint_and_its_auto_report(prefix, tmp_path, capsys):
    """auto on generated inputs writes PREFIX-amp and a report with its auto section."""
    report = tmp_path / "r.json"
    code = cmd_auto(parse("auto", prefix, "--input", "data:2x3x8x8", "--report", str(report), "-q"))
    assert code == 0
    sym, args, auxs = load_checkpoint(prefix + "-amp", 0)
    assert any(n["op"] == "amp_cast" for n in json.loads(sym.tojson(remove_amp_cast=False))["nodes"])
    written = json.loads(report.read_text())
    assert written["target_dtype"] == "float16" and written["extra"]["auto"]["executions"] == 2
    assert "wrote " + prefix + "-amp-symbol.json" in capsys.readouterr().err


def test_cmd_auto_needs_sample_inputs(prefix):
    """Without --input, --inputs-npz or --eval-data there is nothing to check: CLIError, nothing written."""
    with pytest.raises(CLIError, match="auto needs sample inputs"):
        cmd_auto(parse("auto", prefix))
    assert not os.path.exists(prefix + "-amp-symbol.json")


def test_cmd_auto_names_an_input_the_model_lacks_by_its_flag(prefix, tmp_path):
    """An --inputs-npz array named after no model input is refused, the flag and the real inputs named."""
    npz = tmp_path / "x.npz"
    np.savez(npz, image=np.zeros((2, 3, 8, 8), "float32"))
    with pytest.raises(CLIError, match=r"--inputs-npz names \['image'\].*\['data'\]"):
        cmd_auto(parse("auto", prefix, "--inputs-npz", str(npz)))


def test_cmd_auto_checks_eval_data_against_its_labels(prefix, tmp_path):
    """--labels alone, and labels whose rows differ from --eval-data's, are CLIErrors."""
    x, y = tmp_path / "x.npz", tmp_path / "y.npy"
    np.savez(x, data=np.zeros((4, 3, 8, 8), "float32"))
    np.save(y, np.zeros(3, "int64"))
    with pytest.raises(CLIError, match="--labels needs --eval-data"):
        cmd_auto(parse("auto", prefix, "--labels", str(y)))
    with pytest.raises(CLIError, match="has 3 rows"):
        cmd_auto(parse("auto", prefix, "--eval-data", str(x), "--labels", str(y)))


def test_cmd_auto_refuses_sample_inputs_that_cannot_fit_before_any_run(prefix, monkeypatch, tmp_path):
    """A huge --input is refused up front, naming the flag and the memory (it ran 18 s, then
    MXNet's "Failed to allocate CPU Memory"; newcomer audit, #42), as demo checks --batch."""
    import mxnet_amp.cli.auto_command as auto_command
    npy = tmp_path / "x.npy"
    np.save(npy, np.zeros((64, 3, 8, 8), "float32"))
    monkeypatch.setattr(auto_command, "available_memory", lambda: 1000)
    with pytest.raises(CLIError, match=r"--input: the model's tensors on these sample inputs take "
                       r"at least .* GiB .* 0.0 GiB is available"):
        cmd_auto(parse("auto", prefix, "--input", f"data:{npy}"))
    assert not os.path.exists(prefix + "-amp-symbol.json")
    with pytest.raises(CLIError, match=r"--input 'data:2000000000x16': drawing it takes 357.6 GiB"):
        cmd_auto(parse("auto", prefix, "--input", "data:2000000000x16"))
    monkeypatch.setattr(auto_command, "available_memory", lambda: 2**40)
    assert cmd_auto(parse("auto", prefix, "--input", "data:2x3x8x8", "-q")) == 0


def test_a_zero_std_rgb_is_refused_naming_the_flag(prefix, tmp_path):
    """``--std-rgb 0,0,0`` divides every pixel by 0: refused naming --std-rgb (the inf inputs
    were blamed on --input; newcomer audit, #42)."""
    rec = tmp_path / "val.rec"
    rec.write_bytes(b"")
    with pytest.raises(CLIError, match="--std-rgb 0,0,0: the channels are divided by these; none may be 0"):
        cmd_auto(parse("auto", prefix, "--eval-data", str(rec), "--data-shape", "3x8x8",
                       "--std-rgb", "0,0,0", "--workers", "1"))
