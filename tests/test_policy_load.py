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
    with pytest.raises(ListError, match="group 0: reason must be a non-empty string, got ''"):
        _base_policy("float16", unreasoned)


SHIPPED_GROUP = '[[group]]\ncategory = "target"\nreason = "r"\nops = ["FullyConnected"]\n'


def _refused(tmp_path, name, body, match):
    """``body`` (after a float16 header) read by _base_policy is a ListError matching ``match``
    and naming the file."""
    folder = tmp_path / name
    folder.mkdir()
    where = write_list(folder, 'target_dtype = "float16"\n' + body)
    with pytest.raises(ListError, match=match) as info:
        _base_policy("float16", where)
    assert str(folder / "float16.toml") in str(info.value)
    return str(info.value)


def test_a_string_where_a_list_goes_is_refused_naming_table_and_key(tmp_path):
    """``values = "sum"`` would be read letter by letter (Pooling(sum) left unprotected),
    ``Embedding = "data"`` split into letters, ``ops = "RNN"`` called 'N' listed twice:
    each is a ListError naming the file, the table and the key (newcomer audit, #42)."""
    _refused(tmp_path, "values", '[[conditional]]\nop = "Pooling"\nattr = "pool_type"\n'
             'values = "sum"\nreason = "r"\n', r"conditional 0 \(op 'Pooling'\): values must be a list")
    _refused(tmp_path, "index", '[index_inputs]\nEmbedding = "data"\n',
             r"\[index_inputs\] Embedding must be a list of input names.*got 'data'")
    _refused(tmp_path, "ops", '[[group]]\ncategory = "target"\nreason = "r"\nops = "RNN"\n',
             r"group 0: ops must be a list of op names.*got 'RNN'.*write \['RNN'\]")
    _refused(tmp_path, "opnum", '[[group]]\ncategory = "target"\nreason = "r"\nops = ["RNN", 3]\n',
             r"group 0: ops must be a list of op names.*got 3 in it")
    _refused(tmp_path, "reason", '[[group]]\ncategory = "target"\nreason = 5\nops = ["RNN"]\n',
             r"group 0: reason must be a non-empty string, got 5")
    _refused(tmp_path, "reuse", SHIPPED_GROUP + '[reuse_casts]\nreason = "r"\nops = ["Concat", 1]\n',
             r"\[reuse_casts\]: ops must be a list of op names.*got 1 in it")
    _refused(tmp_path, "condop", '[[conditional]]\nop = ["Pooling"]\nattr = "pool_type"\n'
             'values = ["sum"]\nreason = "r"\n', r"conditional 0: op must be a non-empty string")
    _refused(tmp_path, "table", 'group = 3\n', r"group must be an array of tables \(\[\[group\]\]\), got 3")


def test_a_bad_pattern_is_a_list_error(tmp_path):
    """A ``[[pattern]]`` without its prefix, or with an unknown category, names the table and key
    (it was a raw KeyError: 'prefix')."""
    _refused(tmp_path, "noprefix", '[[pattern]]\ncategory = "follow"\nreason = "r"\n',
             r"pattern 0: prefix must be a non-empty string, got nothing")
    _refused(tmp_path, "badcat", '[[pattern]]\nprefix = "_backward_"\ncategory = "fast"\nreason = "r"\n',
             r"pattern 0: category must be one of target, fp32, widest, follow, got 'fast'")


def test_a_list_file_that_is_not_utf8_names_the_file(tmp_path):
    """A bad byte is a ListError naming the file, not a raw UnicodeDecodeError."""
    (tmp_path / "float16.toml").write_bytes(b'target_dtype = "float16"\n# caf\xe9\n')
    with pytest.raises(ListError, match=r"float16.toml: cannot read op list.*UTF-8"):
        _base_policy("float16", str(tmp_path))


def test_the_shipped_lists_still_load_with_the_checks():
    """The type checks accept both shipped files (Pooling(sum) stays protected in float16)."""
    policy = _base_policy("float16", str(lists_dir()))
    assert policy.decide("Pooling", {"pool_type": "sum"}) is Category.FP32
    assert policy.index_inputs["Embedding"] == ("data",)
    assert _base_policy("bfloat16", str(lists_dir())).target_dtype == "bfloat16"
