"""mxnet_amp.cli.demo (cli/demo): a zoo network with random weights converted and run."""
import json

import pytest

from mxnet_amp.cli.main import build_parser
from mxnet_amp.cli.demo import run_demo
from mxnet_amp.errors import CLIError


def _args(*argv):
    return build_parser().parse_args(["demo", *argv])


def test_run_demo_refuses_sizes_and_counts_that_cannot_run():
    """--size under 16, --batch 0 and --runs 0 are a CLIError before anything is built."""
    for argv in (["--size", "8"], ["--batch", "0"], ["--runs", "0"]):
        with pytest.raises(CLIError, match="demo needs --size >= 16"):
            run_demo(_args(*argv))


def test_an_unknown_model_name_is_a_cli_error():
    """A name in neither MXNet's nor gluoncv's zoo is a CLIError naming it."""
    with pytest.raises(CLIError, match="no_such_net"):
        run_demo(_args("--model", "no_such_net", "--size", "32", "--runs", "1"))


def test_a_small_demo_writes_a_report_with_its_accuracy(tmp_path, capsys):
    """mobilenet0.25 at 32 px: the report names the model and dtype, records casts and a
    relative error under 0.1 between float32 and the low precision run."""
    report = tmp_path / "demo.json"
    code = run_demo(_args("--model", "mobilenet0.25", "--size", "32", "--batch", "1", "--runs", "1",
                          "--report", str(report), "--quiet"))
    assert code == 0
    data = json.loads(report.read_text())
    assert data["model"] == "mobilenet0.25" and data["target_dtype"] == "bfloat16"
    assert data["casts"] > 0 and 0 <= data["extra"]["relative_max_error"] < 0.1
    assert data["extra"]["input"] == "1x3x32x32"
    assert f"wrote {report}" in capsys.readouterr().err
