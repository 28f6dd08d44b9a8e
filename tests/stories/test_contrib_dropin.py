"""What a caller of ``mx.contrib.amp`` gets unchanged (issue 21, items 1-5 and 16's crash).

1. ``convert_symbol`` without params binds with the caller's float32 params.
2. A given op list replaces the shipped one (contrib's *override*); ``overrides='move'``
   is the additive form.
3. Inputs declared float16/bfloat16 are read as declared (MXNet 1.9.1's own
   ``test_fp16_casting`` / ``test_bf16_casting`` graphs).
4. ``list_loss_output_functions`` and ``list_lp16_use_fp32_params`` exist.
5. Unused params warn; ``strict_params=True`` raises.
"""
from __future__ import annotations

import warnings

import mxnet as mx
import numpy as np
import pytest
from mxnet.contrib import amp as contrib

import mxnet_amp as amp
from mxnet_amp.errors import ListError, ParamError, UnknownOpError
from mxnet_amp.mx.hardware import HardwareWarning
from mxnet_amp.mx.registry import infer_types

from helpers import op_compute_dtypes, run, small_model

DTYPES = ["float16", "bfloat16"]
LOW = {"float16", "bfloat16"}


def _contrib_dtype(dtype):
    return contrib.amp.bfloat16 if dtype == "bfloat16" else "float16"


def _low_ops(sym) -> set[str]:
    return {k for k, d in op_compute_dtypes(sym, ["data"]).items() if d in LOW}


# --------------------------------------------------------------------------- 1. no params


def _exported_gluon_net(folder):
    """A Gluon conv/BN/dense net as HybridBlock.export() writes it: its weights carry
    ``__dtype__`` (float32), so convert_symbol tells them from the input ``data``."""
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Conv2D(4, 3, padding=1), mx.gluon.nn.BatchNorm(),
            mx.gluon.nn.Activation("relu"), mx.gluon.nn.Dense(5))
    net.initialize(mx.init.Xavier())
    net.hybridize()
    x = mx.nd.random.uniform(-1, 1, (2, 3, 8, 8))
    net(x)
    net.export(str(folder / "net"))
    sym, args, auxs = mx.model.load_checkpoint(str(folder / "net"), 0)
    assert sym.attr_dict()[sym.list_arguments()[1]]["__dtype__"] == "0"
    return sym, args, auxs, x


@pytest.mark.parametrize("dtype", DTYPES)
def test_convert_symbol_binds_with_the_callers_float32_params(dtype, native_bf16, tmp_path):
    """Item 1: the default keeps every weight float32 (cast in the graph), as contrib's;
    cast_optional_params=True (the old default) tagged them low and MXNet then refused
    the caller's float32 params ("requires uniform type")."""
    sym, args, auxs, x = _exported_gluon_net(tmp_path)
    new = amp.convert_symbol(sym, dtype)
    exe = new.bind(mx.cpu(), {**args, "data": x}, aux_states=auxs, grad_req="null")
    assert {a.dtype for a in exe.arg_arrays} == {np.float32}
    assert len(_low_ops(new)) >= 2 and _low_ops(new) == _low_ops(contrib.convert_symbol(sym, dtype))
    if dtype == "bfloat16" and native_bf16:
        ref = run(sym, args, auxs, {"data": x.asnumpy()})[0]
        out = run(new, args, auxs, {"data": x.asnumpy()})[0]
        assert np.abs(out - ref).max() < 0.05 * np.abs(ref).max()


@pytest.mark.parametrize("dtype", DTYPES)
def test_convert_symbol_cast_optional_params_tags_weights_the_caller_casts(dtype):
    """Item 1, explicit True: as contrib, the weights only low precision ops read are
    tagged low precision; cast as tagged (contrib's convert_model does it), they bind.
    (Without data_names every untagged variable is an input, in both: nothing to tag.)"""
    sym, args, auxs = small_model()
    ours = amp.convert_symbol(sym, dtype, cast_optional_params=True, data_names=["data"])
    theirs = contrib.convert_symbol(sym, dtype, cast_optional_params=True, data_names=["data"])

    def tagged_low(s):
        attrs = s.attr_dict()
        return sorted(n for n in s.list_arguments() + s.list_auxiliary_states()
                      if attrs.get(n, {}).get("__dtype__") not in (None, "0", "-1"))
    assert tagged_low(ours) == tagged_low(theirs) == [
        "conv1_bias", "conv1_weight", "conv2_bias", "conv2_weight", "fc_bias", "fc_weight"]
    _, cargs, cauxs = contrib.convert_model(sym, {k: v.copy() for k, v in args.items()},
                                            {k: v.copy() for k, v in auxs.items()}, dtype,
                                            cast_optional_params=True)
    exe = ours.bind(mx.cpu(), {**cargs, "data": mx.nd.ones((2, 3, 8, 8))}, aux_states=cauxs,
                    grad_req="null")
    assert exe.arg_dict["fc_weight"].dtype == cargs["fc_weight"].dtype != np.float32


# --------------------------------------------------------------------------- 2. lists replace


@pytest.mark.parametrize("dtype", DTYPES)
def test_target_dtype_ops_replaces_the_shipped_list(dtype):
    """Item 2: only FullyConnected in low precision (contrib's meaning), 2 low weights."""
    sym, args, auxs = small_model()
    new = amp.convert_symbol(sym, dtype, target_dtype_ops=["FullyConnected"])
    assert _low_ops(new) == {"fc"} == _low_ops(
        contrib.convert_symbol(sym, dtype, target_dtype_ops=["FullyConnected"]))
    _, new_args, _ = amp.convert_model(sym, args, auxs, dtype, ["FullyConnected"],
                                       cast_optional_params=True, fold_batchnorm=False)
    assert sorted(k for k, v in new_args.items() if v.dtype != np.float32) == ["fc_bias", "fc_weight"]
    # the additive form: FullyConnected on top of the shipped target ops
    moved = amp.convert_symbol(sym, dtype, target_dtype_ops=["FullyConnected"], overrides="move")
    assert {"conv1", "conv2", "fc"} <= _low_ops(moved)


def _fc_exp_fc():
    d = mx.sym.var("data")
    fc = mx.sym.FullyConnected(d, num_hidden=4, name="fc")
    e = mx.sym.exp(fc, name="e")
    return mx.sym.FullyConnected(e, num_hidden=3, name="fc2")


def test_fp32_ops_replaces_the_shipped_list():
    """Item 2: fp32_ops=['softmax'] leaves exp (shipped fp32 for float16) in no list: it
    runs in its input's dtype, as in contrib; 'move' keeps exp float32."""
    sym = _fc_exp_fc()
    assert "e" not in _low_ops(amp.convert_symbol(sym))
    replaced = amp.convert_symbol(sym, fp32_ops=["softmax"])
    assert _low_ops(replaced) == {"fc", "e", "fc2"} == _low_ops(
        contrib.convert_symbol(sym, fp32_ops=["softmax"]))
    assert "e" not in _low_ops(amp.convert_symbol(sym, fp32_ops=["softmax"], overrides="move"))


def test_widest_and_conditional_lists_replace_too():
    """Item 2: an empty widest list makes elemwise_add follow; an empty conditional list
    drops bfloat16's Activation(softsign) condition (it follows)."""
    policy = amp.load_policy("bfloat16", widest_dtype_ops=[], conditional_fp32_ops=[])
    assert not policy.widest and not policy.conditional
    assert policy.decide("elemwise_add", {}).value == "follow"
    assert policy.decide("Activation", {"act_type": "softsign"}).value == "follow"
    shipped = amp.load_policy("bfloat16")
    assert shipped.decide("Activation", {"act_type": "softsign"}).value == "fp32"
    moved = amp.load_policy("bfloat16", widest_dtype_ops=[], overrides="move")
    assert moved.widest == shipped.widest


def test_list_errors_still_name_the_op_and_mode():
    with pytest.raises(UnknownOpError, match="NoSuchOp"):
        amp.convert_symbol(small_model()[0], target_dtype_ops=["NoSuchOp"])
    with pytest.raises(ListError, match="overrides must be"):
        amp.convert_symbol(small_model()[0], overrides="add")
    with pytest.raises(ListError, match="two overrides"):
        amp.load_policy("float16", target_dtype_ops=["exp"], fp32_ops=["exp"])


# --------------------------------------------------------------------------- 3. lp16 inputs


def _casting_cases(lp):
    """MXNet 1.9.1's test_fp16_casting / test_bf16_casting graphs whose inputs are declared
    low precision and feed amp_multicast (out4, out5, out6 there), with its keywords and
    each argument's bound dtype (``'lp'``: the target dtype): MXNet's own assertion, and
    ours where they differ. Its out1-3, out7 and out8 hold an amp_cast to low precision,
    which marks a converted graph here (refused, README "Differences")."""
    data, data2 = mx.sym.var("data", dtype="float32"), mx.sym.var("data2", dtype=lp)
    yield (mx.sym.amp_multicast(data, data2, num_outputs=2), {},
           # no data_names: both are weights, and the float32 one, read only beside a low
           # precision one, is stored in low precision (MXNet's assertion; issue 33)
           {"data": "lp", "data2": "lp"})
    data, data2 = mx.sym.var("data", dtype="float32"), mx.sym.var("data2", dtype=lp)
    data3 = mx.sym.var("data3", dtype=lp)
    yield (mx.sym.amp_multicast(data, mx.sym.elemwise_add(data2, data3), num_outputs=2),
           {"target_dtype_ops": [], "fp32_ops": []}, {"data": "float32", "data2": "lp", "data3": "lp"})
    data, data2, data3 = mx.sym.var("data", dtype=lp), mx.sym.var("data2", dtype="float32"), mx.sym.var("data3")
    yield (mx.sym.amp_multicast(data, data2, data3, num_outputs=3),
           {"target_dtype_ops": [], "fp32_ops": []}, {"data": "lp", "data3": "float32"})


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", [0, 1, 2])
def test_inputs_declared_low_precision_are_read_as_declared(dtype, case):
    """Item 3 (six cases): refused before as 'params data2 are already float16'."""
    sym, kwargs, want = list(_casting_cases(_contrib_dtype(dtype)))[case]
    new = amp.convert_symbol(sym, target_dtype=dtype, cast_optional_params=True, **kwargs)
    exe = new.simple_bind(ctx=mx.cpu(), **{n: (1, 2) for n in sym.list_arguments()})
    got = {n: a.dtype for n, a in zip(new.list_arguments(), exe.arg_arrays)}
    for name, dt in want.items():
        assert np.dtype(got[name]) == np.dtype(_contrib_dtype(dtype) if dt == "lp" else dt), name
    if dtype == "bfloat16":   # no float16 kernels on a CPU
        for a in exe.arg_dict.values():
            a[:] = 1
        assert all(np.all(o.astype("float32").asnumpy() >= 1) for o in exe.forward(is_train=False))


def test_low_precision_params_given_as_arrays_are_still_refused():
    """Item 3 keeps the check where it means something: arrays given as params."""
    sym, args, auxs = small_model()
    args = {**args, "fc_weight": args["fc_weight"].astype("float16")}
    with pytest.raises(amp.AlreadyConvertedError, match="fc_weight"):
        amp.convert_model(sym, args, auxs)


# --------------------------------------------------------------------------- 4. list functions


def _one_node(op: str, num_inputs: int):
    """A symbol of one ``op`` node reading variables v0, v1, ... (any registered name)."""
    import json
    nodes = [{"op": "null", "name": f"v{k}", "inputs": []} for k in range(num_inputs)]
    nodes.append({"op": op, "name": "n", "inputs": [[k, 0, 0] for k in range(num_inputs)]})
    return mx.sym.load_json(json.dumps({"nodes": nodes, "arg_nodes": list(range(num_inputs)),
                                        "heads": [[num_inputs, 0, 0]]}))


@pytest.mark.parametrize("dtype", DTYPES)
def test_contrib_list_functions(dtype):
    """Item 4: contrib's answers (our lists' data), and each fp32 param really is float32
    when its op runs in bfloat16 (MXNet's type inference)."""
    cdt = _contrib_dtype(dtype)
    assert amp.list_loss_output_functions(dtype) == contrib.list_loss_output_functions(cdt)
    assert set(amp.list_loss_output_functions(dtype)) <= set(amp.list_fp32_ops(dtype))
    ours = amp.list_lp16_use_fp32_params(dtype)
    theirs = contrib.list_lp16_use_fp32_params(cdt)
    if theirs is None:
        assert ours is None
        return
    assert ours["BatchNorm"] == theirs["BatchNorm"]
    for op, inputs in ours.items():
        node = _one_node(op, len(inputs))
        arg_types, _, aux_types = infer_types(node, {"v0": "bfloat16"})
        types = dict(zip(node.list_arguments() + node.list_auxiliary_states(), arg_types + aux_types))
        for k, name in enumerate(inputs):
            assert (types[f"v{k}"] == "float32") == bool(name), (op, k, name, types)


# --------------------------------------------------------------------------- 5. extra params


def test_unused_params_warn_by_default_and_raise_when_strict(tmp_path):
    sym, args, auxs = small_model()
    stale = {**args, "old_fc_weight": mx.nd.ones((2, 2))}
    with pytest.warns(UserWarning, match="old_fc_weight"):
        _, new_args, _ = amp.convert_model(sym, stale, auxs)
    assert new_args["old_fc_weight"] is stale["old_fc_weight"]   # returned as given
    with pytest.raises(ParamError, match="old_fc_weight.*strict_params"):
        amp.convert_model(sym, stale, auxs, strict_params=True)
    prefix = str(tmp_path / "m")
    mx.model.save_checkpoint(prefix, 0, sym, stale, auxs)
    with pytest.raises(ParamError, match="old_fc_weight"):
        amp.convert_checkpoint(prefix, 0, prefix + "-x", strict_params=True)
    assert not (tmp_path / "m-x-symbol.json").exists()
    with pytest.warns(UserWarning, match="old_fc_weight"):
        amp.convert_checkpoint(prefix, 0, prefix + "-x")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        warnings.simplefilter("ignore", HardwareWarning)   # float16 on a GPU-less machine says so
        amp.convert_model(sym, args, auxs)   # no warning without extras


# --------------------------------------------------------------------------- 16. None inputs


class _OptionalInput(mx.gluon.HybridBlock):
    """forward(x, y, mask=None), as gluonnlp's BERT (masked_positions=None)."""

    def __init__(self):
        super().__init__()
        with self.name_scope():
            self.dense = mx.gluon.nn.Dense(4, flatten=False)

    def __call__(self, x, y, mask=None):
        return super().__call__(x, y, mask)   # None passed on, as BERT passes it

    def hybrid_forward(self, F, x, y, mask=None):
        out = self.dense(x + y)
        return (out, F.sum(out, axis=-1)) if mask is None else (out * mask, out)


def test_block_called_with_a_none_input_converts(bf16_mode):
    """Item 16: its cached graph's input format is [0, 0, -1]; IndexError in _regroup
    before. Where this CPU runs bfloat16 the block itself is called; elsewhere its call is a
    HardwareError and its emulation (same inputs, same output structure) is called (the
    test id says which)."""
    net = _OptionalInput()
    net.initialize()
    net.hybridize()
    x, y = mx.nd.ones((2, 3, 5)), mx.nd.ones((2, 3, 5))
    ref = net(x, y)
    assert net._in_format == [0, 0, -1]
    new = amp.convert_hybrid_block(net, "bfloat16")
    emulating = amp.emulate_block(new)
    if bf16_mode == "emulated":
        with pytest.raises(amp.HardwareError, match="avx512"):
            new(x, y)
    runner = new if bf16_mode == "native" else emulating
    outs = runner(x, y)
    assert [o.shape for o in outs] == [r.shape for r in ref]
    assert [o.shape for o in runner(x, y, None)] == [r.shape for r in ref]
    emulated = emulating(x, y)
    assert np.abs(emulated[0].asnumpy() - ref[0].asnumpy()).max() < 0.05


def test_reasons_say_which_list_placed_an_op():
    """Reports read Decision.reason: an op the user's list placed is not explained by the
    shipped reason of a category it left."""
    policy = amp.load_policy("float16", target_dtype_ops=["FullyConnected"])
    assert policy.explain("FullyConnected", {}).reason == (
        "target list: FullyConnected (named in the target list passed)")
    conv = policy.explain("Convolution", {})
    assert conv.category.value == "follow" and "replaces the shipped one" in conv.reason
    assert "float32" in policy.explain("exp", {}).reason   # untouched: its shipped reason


def test_cli_strict_params_refuses_unused_params(tmp_path, capsys):
    """``--strict-params`` is the CLI's ``strict_params=True``: an unused param is a one-line
    error naming it and nothing is written; without it the conversion warns and writes."""
    from mxnet_amp.cli.main import main
    sym, args, auxs = small_model()
    prefix = str(tmp_path / "m")
    mx.model.save_checkpoint(prefix, 0, sym, {**args, "old_fc_weight": mx.nd.ones((2, 2))}, auxs)
    code = main(["convert", prefix, "--target-dtype", "bfloat16", "--strict-params",
                 "--out", prefix + "-x"])
    err = capsys.readouterr().err
    assert code != 0 and "old_fc_weight" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "m-x-symbol.json").exists()
    assert main(["convert", prefix, "--target-dtype", "bfloat16", "--out", prefix + "-x"]) == 0
    err = capsys.readouterr().err
    assert "warning" in err and "old_fc_weight" in err
    assert (tmp_path / "m-x-symbol.json").exists()
