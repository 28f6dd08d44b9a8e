"""mxnet_amp.cli.checks: what the commands refuse before any work, and the flags turned into
the API's terms."""
import pytest

from mxnet_amp.cli.checks import check_before_work, check_prefix, in_cli_terms, options_of, out_prefix
from mxnet_amp.cli.parser import command_parser
from mxnet_amp.errors import AMPError, CLIError

from helpers import saved_small_model

COMMANDS = ("convert", "export-onnx", "inspect", "auto", "demo")


def parse(*argv):
    """The namespace ``mxnet-amp argv`` parses to."""
    return command_parser(dict.fromkeys(COMMANDS, lambda args: 0)).parse_args(list(argv))


def test_check_prefix_names_the_missing_file(tmp_path):
    """A saved checkpoint passes; another epoch's params file is named as not found."""
    prefix = saved_small_model(tmp_path, "m", 1)
    check_prefix(prefix, 1)
    with pytest.raises(CLIError, match=r"m-0002\.params"):
        check_prefix(prefix, 2)


def test_out_prefix_defaults_to_amp_only_for_writing_commands():
    """convert and auto write PREFIX-amp unless --out names another; inspect writes none."""
    assert out_prefix(parse("convert", "a/m", "--target-dtype", "float16")) == "a/m-amp"
    assert out_prefix(parse("convert", "a/m", "--target-dtype", "float16", "--out", "b")) == "b"
    assert out_prefix(parse("auto", "a/m")) == "a/m-amp"
    assert out_prefix(parse("inspect", "a/m")) is None


@pytest.mark.parametrize("argv, message", [
    (("convert", "m", "--target-dtype", "float16", "--epoch", "-1"), "--epoch must be at least 0"),
    (("auto", "m", "--max-executions", "1"), "--max-executions must be at least 2"),
    (("auto", "m", "--rtol", "nan"), "--rtol must be a finite number"),
    (("auto", "m", "--tolerance", "0"), "--tolerance must be a finite number > 0"),
    (("auto", "m", "--tolerance", "0.1", "--atol", "0.1"), "--tolerance and --atol"),
    (("auto", "m", "--input", "data:1x3", "--input", "data:2x3"), "gives 'data' twice"),
    (("convert", "m", "--target-dtype", "float16", "--fuse-cpu"), "--fuse-cpu"),
])
def test_check_before_work_refuses_bad_values_by_flag(argv, message):
    """Numbers out of range and contradicting flags are CLIErrors naming the flag."""
    with pytest.raises(CLIError, match=message):
        check_before_work(parse(*argv))


def test_check_before_work_refuses_an_output_over_the_input(tmp_path):
    """--out equal to the input prefix would overwrite the checkpoint read: refused, nothing written."""
    prefix = saved_small_model(tmp_path, "m")
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(AMPError, match="m-symbol.json"):
        check_before_work(parse("convert", prefix, "--target-dtype", "float16", "--out", prefix))
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    check_before_work(parse("convert", prefix, "--target-dtype", "float16", "--out", prefix + "2"))


def test_in_cli_terms_spells_api_names_as_flags():
    """Whole-word API argument names become flags; other words stay."""
    message = "excluded_sym_names names fc9; out_prefix and data_shapes too, not my_target_dtype_x"
    assert in_cli_terms(message) == "--exclude names fc9; --out and --input-shape too, not my_target_dtype_x"


def test_options_of_adds_the_flags_to_the_shipped_lists():
    """--fp32-ops moves one op and keeps the others' places; the switches reach the options."""
    options = options_of(parse("convert", "m", "--target-dtype", "bf16", "--fp32-ops", "FullyConnected",
                               "--exclude", "conv1", "--no-fold-bn", "--no-cast-optional-params"))
    assert options.target_dtype == "bfloat16"
    assert "FullyConnected" in options.policy.fp32 and "Convolution" in options.policy.target
    assert "conv1" in options.fp32_nodes
    assert options.fold_batchnorm is False and options.cast_optional_params is False
