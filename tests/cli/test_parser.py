"""mxnet_amp.cli.parser: the ``mxnet-amp`` subcommands, their shared options, the one-line
parse errors and ``NAME:SHAPE`` specs."""
import pytest

from mxnet_amp.cli.parser import command_parser, shape_spec
from mxnet_amp.errors import CLIError

COMMANDS = ("convert", "export-onnx", "inspect", "auto", "demo")


def parser():
    """The parser with each command's run returning a code that names it."""
    return command_parser({name: (lambda args, code=k: code) for k, name in enumerate(COMMANDS)})


def test_each_command_runs_its_own_function():
    """args.run is the function given for the command parsed."""
    p = parser()
    assert p.parse_args(["convert", "m", "--target-dtype", "float16"]).run(None) == 0
    assert p.parse_args(["export-onnx", "m", "-o", "m.onnx"]).run(None) == 1
    assert p.parse_args(["inspect", "m"]).run(None) == 2
    assert p.parse_args(["auto", "m"]).run(None) == 3
    assert p.parse_args(["demo"]).run(None) == 4


def test_convert_defaults_and_dtype_aliases():
    """bf16 reads as bfloat16; folding, weight casting and the range guard are on by default."""
    args = parser().parse_args(["convert", "m", "--target-dtype", "bf16", "--epoch", "2"])
    assert args.target_dtype == "bfloat16" and args.epoch == 2
    assert args.fold_bn and args.cast_optional_params and args.guard_weight_range
    assert args.out is None and args.tune is None and args.opset == 13
    off = parser().parse_args(["convert", "m", "--target-dtype", "fp16", "--no-fold-bn", "--tune"])
    assert off.target_dtype == "float16" and off.fold_bn is False and off.tune is True


def test_inspect_defaults_to_float16_but_convert_requires_a_dtype(capsys):
    """inspect needs no --target-dtype; convert without one is a one-line error, exit 2."""
    assert parser().parse_args(["inspect", "m"]).target_dtype == "float16"
    with pytest.raises(SystemExit) as exit_:
        parser().parse_args(["convert", "m"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "error:" in err and "--target-dtype" in err and "usage:" not in err


def test_a_wrong_dtype_names_the_accepted_ones(capsys):
    """--target-dtype float32 is refused with the choices and aliases named."""
    with pytest.raises(SystemExit):
        parser().parse_args(["inspect", "m", "--target-dtype", "float32"])
    assert "choose float16 or bfloat16" in capsys.readouterr().err


def test_shape_spec_parses_and_refuses_by_flag():
    """NAME:AxB gives (name, shape); a missing name, zero or text is a CLIError naming the flag."""
    assert shape_spec("data:1x3X8x8", "--input-shape") == ("data", (1, 3, 8, 8))
    for bad in ("1x3x8x8", ":1x3", "data:1x0", "data:axb", "data:"):
        with pytest.raises(CLIError, match="bad --input-shape"):
            shape_spec(bad, "--input-shape")
    with pytest.raises(CLIError, match="nor a .npy file"):
        shape_spec("data:big", "--input", "nor a .npy file")


def test_usage_puts_the_prefix_before_the_options():
    """convert's usage line starts 'convert PREFIX': after a many-valued option it would be read as a value."""
    sub = parser()._subparsers._group_actions[0].choices["convert"]
    assert " convert PREFIX " in sub.format_usage()


def test_a_prefix_read_as_an_option_value_is_named_in_the_error(capsys):
    """``convert --exclude fc1 PREFIX`` reads PREFIX as a second name: the error says so and
    where PREFIX goes (it said only that PREFIX is required; newcomer audit, #42)."""
    from mxnet_amp.cli.main import main
    assert main(["convert", "--target-dtype", "float16", "--exclude", "fc1", "model"]) == 2
    err = capsys.readouterr().err
    assert ("'model' was read as one more value of --exclude; put PREFIX right after the "
            "command (mxnet-amp convert PREFIX --exclude ...)") in err
    assert main(["inspect"]) == 2
    assert "the following arguments are required: PREFIX (see" in capsys.readouterr().err
    assert main(["inspect", "--fp32-ops", "relu", "m2", "--target-dtype", "bfloat16"]) == 2
    assert "'m2' was read as one more value of --fp32-ops" in capsys.readouterr().err
