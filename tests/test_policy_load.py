"""mxnet_amp.policy_load: the list files read and validated, and the user's overrides placed
with the reasons reports show."""
import pytest

from mxnet_amp.errors import ArgumentError, ListError
from mxnet_amp.policy import Category
from mxnet_amp.policy_load import _base_policy, lists_dir, load_policy


def write_list(folder, body, dtype="float16"):
    """``folder/<dtype>.toml`` holding ``body``; returns the folder as _base_policy takes it."""
    (folder / f"{dtype}.toml").write_text(body)
    return str(folder)


def test_without_overrides_the_shipped_policy_is_read_once():
    """Two calls without overrides return the same cached policy, read from lists_dir()."""
    assert load_policy("float16") is load_policy("fp16")
    assert load_policy("bfloat16") is not load_policy("float16")
    assert load_policy("bfloat16").target_dtype == "bfloat16"
    assert (lists_dir() / "float16.toml").is_file()


def test_overrides_give_the_reasons_reports_show():
    """A named op says which list named it; an op a replaced list dropped says the list replaced it."""
    policy = load_policy("float16", target_dtype_ops=["FullyConnected"], fp32_ops=["relu"])
    assert policy.reasons["FullyConnected"] == "named in the target list passed"
    assert policy.reasons["relu"] == "named in the fp32 list passed"
    assert policy.reasons["Convolution"] == "the target list passed replaces the shipped one, which held it"
    moved = load_policy("float16", follow_ops=["Convolution"], overrides="move")
    assert "Convolution" in moved.follow and "FullyConnected" in moved.target
    assert moved.reasons["Convolution"] == "named in the follow list passed"


def test_op_lists_must_be_lists_of_names():
    """A bare string or a non-string entry is an ArgumentError naming the parameter."""
    with pytest.raises(ArgumentError, match=r"fp32_ops must be a list.*write \['softmax'\]"):
        load_policy("float16", fp32_ops="softmax")
    with pytest.raises(ArgumentError, match="target_dtype_ops .* got 3"):
        load_policy("float16", target_dtype_ops=["FullyConnected", 3])
    with pytest.raises(ArgumentError, match="conditional_fp32_ops entries"):
        load_policy("float16", conditional_fp32_ops=[("Activation", "act_type")])


def test_a_condition_that_can_never_hold_is_refused():
    """An attribute the op lacks, or a value outside its choices, is a ListError naming the valid ones."""
    with pytest.raises(ListError, match="Activation has no attribute 'mode'"):
        load_policy("float16", conditional_fp32_ops=[("Activation", "mode", ["x"])])
    with pytest.raises(ListError, match="act_type never takes 'swish'.*'softrelu'"):
        load_policy("float16", conditional_fp32_ops=[("Activation", "act_type", ["swish"])])
    # one value given as a string is read as a list of one
    policy = load_policy("float16", conditional_fp32_ops=[("Activation", "act_type", "softrelu")])
    assert policy.decide("Activation", {"act_type": "softrelu"}) is Category.FP32


def test_a_malformed_list_file_is_a_list_error(tmp_path):
    """A file for another dtype, an op in two groups and a group without its reason are each refused."""
    (tmp_path / "a").mkdir()
    wrong = write_list(tmp_path / "a", 'target_dtype = "bfloat16"\n')
    with pytest.raises(ListError, match="expected 'float16'"):
        _base_policy("float16", wrong)
    twice = write_list(tmp_path, 'target_dtype = "float16"\n'
                       '[[group]]\ncategory = "target"\nreason = "r"\nops = ["relu"]\n'
                       '[[group]]\ncategory = "fp32"\nreason = "r"\nops = ["relu"]\n')
    with pytest.raises(ListError, match="'relu' is listed twice"):
        _base_policy("float16", twice)
    (tmp_path / "b").mkdir()
    unreasoned = write_list(tmp_path / "b", 'target_dtype = "float16"\n'
                            '[[group]]\ncategory = "target"\nreason = ""\nops = ["relu"]\n')
    with pytest.raises(ListError, match="reason must not be empty"):
        _base_policy("float16", unreasoned)
