"""Every bad value of every parameter of the public API is a typed error (issue 33).

docs/api.md: "AMPError and subclasses: every error the package raises on bad input". Each
public function of ``mxnet_amp.__all__`` is called with a good baseline and one parameter
replaced by a bad value (a wrong type, a wrong string, a negative number, None where none is
allowed); the call must raise an :class:`AMPError` whose message names the parameter.
"""
from __future__ import annotations

import math
import os
import tempfile
import warnings

import mxnet as mx
import numpy as np
import pytest
from mxnet.gluon import nn

import mxnet_amp as amp
from mxnet_amp.errors import AMPError


def _mlp():
    data = mx.sym.var("data")
    out = mx.sym.FullyConnected(mx.sym.relu(mx.sym.FullyConnected(data, num_hidden=6, name="fc1"), name="act"),
                                num_hidden=3, name="fc2")
    rng = np.random.RandomState(0)
    args = {"fc1_weight": (6, 4), "fc1_bias": (6,), "fc2_weight": (3, 6), "fc2_bias": (3,)}
    return out, {k: mx.nd.array(rng.randn(*s).astype(np.float32) * 0.3) for k, s in args.items()}


SYM, ARGS = _mlp()
SAMPLE = {"data": np.random.RandomState(1).randn(4, 4).astype(np.float32)}


def _net():
    net = nn.HybridSequential()
    net.add(nn.Dense(3, in_units=4))
    net.initialize()
    return net


class _DictBlock(nn.HybridBlock):
    """A block whose forward returns a dict: no symbol to convert."""

    def __init__(self):
        super().__init__()
        with self.name_scope():
            self.dense = nn.Dense(3, in_units=4)

    def hybrid_forward(self, F, x):
        return {"out": self.dense(x)}


def _dict_block():
    block = _DictBlock()
    block.initialize()
    return block


def _gpu():
    return mx.gpu(0)


NOT_BOOL = ["no", 2, None]
NOT_NAMES = [3, "Convolution", [3], ["NoSuchOp"]]
NOT_SYMBOL_NAMES = [3, [3], {"a": 1}]


# parameter -> bad values; one row per public-function parameter that takes user input
BAD = {
    "sym": [None, "model.json", 3],
    "arg_params": ["x", [1, 2], {"fc1_weight": np.zeros((6, 4), np.float32)}],
    "aux_params": ["x", [1, 2]],
    "target_dtype": ["float8", 3, None, "int8"],
    "target_dtype_ops": NOT_NAMES,
    "fp32_ops": NOT_NAMES,
    "widest_dtype_ops": NOT_NAMES,
    "follow_ops": NOT_NAMES,
    "conditional_fp32_ops": ["Activation", [("Activation",)], [3], [("NoSuchOp", "act_type", ["relu"])]],
    "excluded_sym_names": [3, [3], ["no_such_node"]],
    "data_names": NOT_SYMBOL_NAMES + [["no_such_input"]],
    "input_names": [3, [3]],
    "cast_optional_params": NOT_BOOL,
    "fold_batchnorm": NOT_BOOL,
    "strict_params": NOT_BOOL,
    "write": NOT_BOOL,
    "quiet": NOT_BOOL,
    "copy_params": NOT_BOOL,
    "restore_casts": NOT_BOOL,
    "progress": ["yes", 2],
    "overrides": ["bogus", 3, None],
    "data_shapes": ["x", {"data": "ab"}, {"data": (-1, 4)}, {"nodata": (2, 4)}],
    "shapes_from": [3],
    "ctx": ["cpu", 3, _gpu],
    "hybridize": ["no_such_backend", 3],
    "epoch": [-1, "a", 1.5, None],
    "out_epoch": [-1, "a", 1.5],
    "prefix": [3, None, "/no/such/folder/model"],
    "out_prefix": [3],
    "path": [3, None],
    "input_dtypes": ["x", {"data": "float99"}, {"no_such_input": "float32"}],
    "stored_dtypes": ["x", {"fc1_weight": "float99"}],
    "rounding": ["up", 3, None],
    "bias_rounding": ["up", 3, None],
    "sample_inputs": [None, "bfloat16", {"data": np.zeros((0, 4), np.float32)}, {"data": "abc"}],
    "rtol": [-1.0, "a", math.nan],
    "atol": [-1.0, "a", math.inf],
    "tolerance": [0, -1.0, "a", math.nan],
    "validate": [3, "yes"],
    "execution": ["fast", 3, None],
    "underflow_fraction": [0, -1, 2, "a", None],
    "max_executions": [0, 1, -5, "a", 2.5],
    "search": ["random", 3, None],
    "metric": [3, "accuracy"],
    "max_drop": [-1.0, "a", math.nan],
    "drop": ["percent", 3],
    "block": [None, 3, nn.Block, _dict_block],
    "bucketing_mod": [None, 3],
    "guard_weight_range": NOT_BOOL,
    "input_shapes": [None, "data", {"data": (0, 4)}, {"data": "ab"}],
    "opset": [11, "13", None],
    "dynamic_batch": NOT_BOOL,
    "output_names": [3, [3]],
    "external_data": ["yes", 2],
    "external_threshold": [-1, "a", 2.5],
    "tune": [3, 2.5, ["a"]],
    "eval_data": [3, "/no/such.rec"],
    "workers": [0, -1, "a", 2.5],
    "client": [3, "x"],
    "metric_inputs": [3, "x"],
    "attribution_samples": [0, -1, "a", 2.5],
    "fused_for": ["gpu", 3],
}


def _call(name):
    """``(function, baseline kwargs)``: a call that works with every parameter good."""
    fn = getattr(amp, name)
    return fn, {
        "convert_symbol": lambda: dict(sym=SYM, target_dtype="bfloat16"),
        "convert_model": lambda: dict(sym=SYM, arg_params=ARGS, aux_params={}, target_dtype="bfloat16"),
        "emulate_model": lambda: dict(sym=SYM, arg_params=ARGS, aux_params={}),
        "emulate": lambda: dict(sym=SYM, arg_params=ARGS, aux_params={}),
        "convert_hybrid_block": lambda: dict(block=_net(), target_dtype="bfloat16"),
        "convert_block": lambda: dict(block=_net(), target_dtype="bfloat16"),
        "emulate_block": lambda: dict(block=_net()),
        "auto_convert_model": lambda: dict(sym=SYM, arg_params=ARGS, aux_params={}, sample_inputs=SAMPLE,
                                           target_dtype="bfloat16", quiet=True, execution="emulated"),
        "load_policy": lambda: dict(target_dtype="bfloat16"),
        "export_onnx": lambda: dict(sym=SYM, arg_params=ARGS, aux_params={}, input_shapes={"data": (2, 4)},
                                    path=os.path.join(tempfile.mkdtemp(), "m.onnx")),
        "auto_convert_block": lambda: dict(block=_net(), sample_inputs=SAMPLE["data"],
                                           target_dtype="bfloat16", quiet=True, execution="emulated"),
    }.get(name, lambda: {})()


# the parameters each function gets a bad value of (the rest of its signature is covered
# by another row: auto_convert_block passes **kwargs on to auto_convert_model)
PARAMS = {
    "convert_symbol": ["sym", "target_dtype", "target_dtype_ops", "fp32_ops", "conditional_fp32_ops",
                       "excluded_sym_names", "data_names", "cast_optional_params", "widest_dtype_ops",
                       "follow_ops", "overrides"],
    "convert_model": ["sym", "arg_params", "aux_params", "target_dtype", "fp32_ops", "target_dtype_ops",
                      "conditional_fp32_ops", "excluded_sym_names", "cast_optional_params",
                      "widest_dtype_ops", "data_names", "data_shapes", "fold_batchnorm", "follow_ops",
                      "overrides", "strict_params", "guard_weight_range", "tune"],
    "export_onnx": ["sym", "arg_params", "aux_params", "input_shapes", "path", "opset", "dynamic_batch",
                    "input_dtypes", "output_names", "external_data", "external_threshold"],
    "convert_hybrid_block": ["block", "target_dtype", "fp32_ops", "excluded_sym_names", "ctx",
                             "cast_optional_params", "input_names", "fold_batchnorm", "overrides",
                             "hybridize", "guard_weight_range", "data_shapes", "tune"],
    "convert_block": ["block", "ctx", "fold_batchnorm"],
    "emulate_block": ["block", "ctx"],
    "emulate_model": ["sym", "arg_params", "aux_params", "input_dtypes", "rounding", "copy_params",
                      "stored_dtypes", "bias_rounding"],
    "emulate": ["sym", "arg_params", "aux_params", "rounding", "bias_rounding"],
    "auto_convert_model": ["sym", "arg_params", "sample_inputs", "target_dtype", "rtol", "atol",
                           "validate", "tolerance", "ctx", "execution", "data_names",
                           "fold_batchnorm", "underflow_fraction", "max_executions", "quiet",
                           "strict_params", "search", "metric", "max_drop", "drop", "guard_weight_range",
                           "tune", "eval_data", "workers", "client", "metric_inputs", "attribution_samples"],
    "load_policy": ["target_dtype", "target_dtype_ops", "fp32_ops", "widest_dtype_ops", "follow_ops",
                    "conditional_fp32_ops", "overrides"],
    "auto_convert_block": ["block", "sample_inputs", "target_dtype", "rtol", "tolerance", "ctx",
                           "input_names", "fold_batchnorm", "quiet", "search"],
}
for _lister in [n for n in amp.__all__ if n.startswith("list_")]:
    PARAMS[_lister] = ["target_dtype"]

CASES = [(fn, param, value) for fn, params in PARAMS.items() for param in params
         for value in BAD[param]]


def _label(value):
    return getattr(value, "__name__", None) or repr(value)[:30]


# the words a message may name a parameter by, besides its own name
ALIASES = {"sym": ["symbol", "Symbol"], "block": ["block", "Block"], "arg_params": ["arg_params", "params"],
           "sample_inputs": ["sample"], "ctx": ["ctx", "context", "GPU"],
           "metric": ["metric"], "data_shapes": ["data_shapes", "data"],
           "prefix": ["prefix", "checkpoint file not found"]}


@pytest.mark.parametrize("fn, param, value", CASES,
                         ids=[f"{f}-{p}-{_label(v)}" for f, p, v in CASES])
def test_bad_value_is_a_typed_error_naming_the_parameter(fn, param, value):
    if value is _gpu and mx.context.num_gpus() > 0:
        pytest.skip("a GPU build: mx.gpu() is a good ctx")
    if value is _gpu or value is _dict_block:
        value = value()
    elif value is nn.Block:
        value = nn.Block()
    func, kwargs = _call(fn)
    kwargs[param] = value
    if param == "max_drop":
        kwargs["metric"] = lambda outs: 1.0
    if param in ("metric", "drop"):
        kwargs["max_drop"] = 0.1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(AMPError) as info:
            func(**kwargs)
    message = str(info.value)
    assert any(word in message for word in [param, *ALIASES.get(param, [])]), message


CHECKPOINT_PARAMS = {
    "convert_checkpoint": ["prefix", "epoch", "out_prefix", "out_epoch", "target_dtype", "fp32_ops",
                           "excluded_sym_names", "data_names", "cast_optional_params", "fold_batchnorm",
                           "data_shapes", "write", "progress", "overrides", "strict_params",
                           "guard_weight_range", "fused_for"],
    "load_checkpoint": ["prefix", "epoch", "restore_casts", "progress"],
    "save_checkpoint": ["epoch", "sym", "arg_params", "aux_params", "progress", "fused_for"],
}
CHECKPOINT_CASES = [(fn, param, value) for fn, params in CHECKPOINT_PARAMS.items()
                    for param in params for value in BAD[param]
                    # a missing folder is checked by tests/stories/test_data_safety.py for outputs
                    if not (fn == "save_checkpoint" and param == "prefix")]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    prefix = str(tmp_path_factory.mktemp("bad_args") / "mlp")
    amp.save_checkpoint(prefix, 0, SYM, ARGS, {})
    return prefix


@pytest.mark.parametrize("fn, param, value", CHECKPOINT_CASES,
                         ids=[f"{f}-{p}-{_label(v)}" for f, p, v in CHECKPOINT_CASES])
def test_bad_checkpoint_value_is_a_typed_error_naming_the_parameter(fn, param, value, checkpoint, tmp_path):
    out = str(tmp_path / "out")
    kwargs = {"convert_checkpoint": dict(prefix=checkpoint, epoch=0, out_prefix=out, target_dtype="bfloat16"),
              "load_checkpoint": dict(prefix=checkpoint, epoch=0),
              "save_checkpoint": dict(prefix=out, epoch=0, sym=SYM, arg_params=ARGS, aux_params={})}[fn]
    kwargs[param] = value
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(AMPError) as info:
            getattr(amp, fn)(**kwargs)
    message = str(info.value)
    assert any(word in message for word in [param, *ALIASES.get(param, [])]), message


def test_export_block_bad_values(tmp_path):
    for block, path, epoch in [(None, str(tmp_path / "m"), 0), (_net(), 3, 0), (_net(), str(tmp_path / "m"), -1),
                               (nn.Block(), str(tmp_path / "m"), 0)]:
        with pytest.raises(AMPError):
            amp.export_block(block, path, epoch)


def test_bucketing_module_bad_values():
    for bad in [None, 3, SYM]:
        with pytest.raises(AMPError, match="bucketing_mod|BucketingModule"):
            amp.convert_bucketing_module(bad, "bfloat16")


def test_every_public_function_is_driven_with_bad_values():
    """The tables above reach every function of ``mxnet_amp.__all__``."""
    import inspect
    covered = set(PARAMS) | set(CHECKPOINT_PARAMS) | {"export_block", "convert_bucketing_module"}
    functions = {n for n in amp.__all__ if inspect.isfunction(getattr(amp, n))}
    assert functions - covered == set()
