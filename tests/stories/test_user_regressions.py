"""Regressions from trying mxnet-amp as a demanding new MXNet user would: calls written for
``mx.contrib.amp``, odd arguments and paths, blocks that cannot be traced.

Each test failed before the fix it guards.
"""
from __future__ import annotations

import inspect

import mxnet as mx
import numpy as np
import pytest
from mxnet.gluon import nn

import mxnet_amp as amp
from mxnet_amp.ir.dtypes import array_dtype

from helpers import graph_of, init_params


def _small_model():
    """data -> FullyConnected fc1 -> relu -> FullyConnected fc2, with random params."""
    data = mx.sym.var("data")
    fc1 = mx.sym.FullyConnected(data, num_hidden=8, name="fc1")
    out = mx.sym.FullyConnected(mx.sym.relu(fc1, name="relu1"), num_hidden=3, name="fc2")
    args, auxs = init_params(out, {"data": (2, 4)})
    return out, args, auxs


def _positional(fn) -> list[str]:
    return [p.name for p in inspect.signature(fn).parameters.values()
            if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]


@pytest.mark.parametrize("name", ["convert_symbol", "convert_model", "convert_hybrid_block",
                                  "convert_bucketing_module"])
def test_positional_parameters_are_those_of_contrib(name):
    """A call written for ``mx.contrib.amp`` passes arguments by position: each must land in
    the parameter of the same meaning (our own extra options are keyword-only)."""
    from mxnet.contrib.amp import amp as contrib
    ours, theirs = _positional(getattr(amp, name)), _positional(getattr(contrib, name))
    assert ours == theirs


def test_contrib_style_positional_call_keeps_its_meaning():
    """``convert_model(sym, args, auxs, dtype, None, None, None, ['fc1'], False)`` excludes
    fc1 and keeps every weight float32, as in contrib (it used to raise TypeError: the
    exclusion list landed in conditional_fp32_ops and False in excluded_sym_names)."""
    sym, args, auxs = _small_model()
    new_sym, new_args, _ = amp.convert_model(sym, args, auxs, "float16", None, None, None,
                                             ["fc1"], False)
    assert {array_dtype(v) for v in new_args.values()} == {"float32"}
    fcs = {n.name: n for n in graph_of(new_sym).nodes if n.op == "FullyConnected"}
    graph = graph_of(new_sym)
    fed = {name: {graph.nodes[e.node].attrs.get("dtype", "-") for e in node.inputs}
           for name, node in fcs.items()}
    assert "float16" not in fed["fc1"] and "float16" in fed["fc2"]


def test_contrib_style_positional_block_call_takes_ctx():
    """``convert_hybrid_block(net, dtype, None, None, None, None, ctx, cast_optional_params)``
    as contrib spells it: ctx is the seventh argument."""
    net = nn.Dense(3, in_units=4)
    net.initialize()
    net16 = amp.convert_hybrid_block(net, "bfloat16", None, None, None, None, mx.cpu(), False)
    assert {p.list_ctx()[0] for p in net16.collect_params().values()} == {mx.cpu()}
    assert {array_dtype(p.data()) for p in net16.collect_params().values()} == {"float32"}


def _converted_block():
    net = nn.Dense(3, in_units=4)
    net.initialize()
    return amp.convert_hybrid_block(net, target_dtype="bfloat16")


@pytest.mark.parametrize("how", ["export", "export_block", "save_checkpoint"])
def test_saving_into_a_missing_folder_is_an_output_path_error(tmp_path, how):
    """``net16.export('no/such/dir/m')`` raised a bare FileNotFoundError naming a hidden
    temporary file (``.m-0000.params.x1y2.tmp``) the user never asked for."""
    net16 = _converted_block()
    prefix = str(tmp_path / "missing" / "m")
    with pytest.raises(amp.errors.OutputPathError, match=r"m-0000\.params.*does not exist"):
        if how == "export":
            net16.export(prefix)
        elif how == "export_block":
            amp.export_block(net16, prefix)
        else:
            from mxnet_amp.gluon.model import block_model
            sym, args, auxs, _ = block_model(net16)
            amp.save_checkpoint(prefix, 0, sym, args, auxs)
    assert list(tmp_path.iterdir()) == []


def test_saving_onto_a_folder_is_an_output_path_error(tmp_path):
    """A params path that is a folder: refused before anything is written, naming it."""
    net16 = _converted_block()
    (tmp_path / "m-0000.params").mkdir()
    with pytest.raises(amp.errors.OutputPathError, match="is a folder"):
        net16.export(str(tmp_path / "m"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m-0000.params"]


def test_convert_checkpoint_of_a_missing_input_names_the_input(tmp_path):
    """``convert_checkpoint('wrong/dir/m', 0)`` said the *output* folder did not exist (the
    default output sits beside the input) instead of naming the missing input file."""
    prefix = str(tmp_path / "wrong" / "m")
    with pytest.raises(amp.errors.CheckpointError) as info:
        amp.convert_checkpoint(prefix, 0, target_dtype="bfloat16")
    assert not isinstance(info.value, amp.errors.OutputPathError)
    assert f"not found: {prefix}-symbol.json" in str(info.value)


def _symbol_json(sym) -> str:
    return sym.tojson(remove_amp_cast=False)


@pytest.mark.parametrize("fold", [False, True])
def test_excluded_sym_names_as_one_string_is_one_name(fold):
    """``excluded_sym_names='fc1'`` was read letter by letter ("excluded_sym_names ['1',
    'c', 'f'] name no node"); like ``data_names``, a string is one name."""
    sym, args, auxs = _small_model()
    listed = amp.convert_model(sym, args, auxs, excluded_sym_names=["fc1"], fold_batchnorm=fold)
    single = amp.convert_model(sym, args, auxs, excluded_sym_names="fc1", fold_batchnorm=fold)
    assert _symbol_json(single[0]) == _symbol_json(listed[0])
    assert _symbol_json(amp.convert_symbol(sym, excluded_sym_names="fc1")) == \
        _symbol_json(amp.convert_symbol(sym, excluded_sym_names=["fc1"]))


def test_auto_excluded_sym_names_as_one_string_is_one_name():
    sym, args, auxs = _small_model()
    x = np.random.RandomState(0).randn(2, 4).astype("float32")
    new_sym, *_ = amp.auto_convert_model(sym, args, auxs, {"data": x}, excluded_sym_names="fc1",
                                         quiet=True)
    graph = graph_of(new_sym)
    fc1 = graph.nodes[graph.index_of("fc1")]
    assert all(graph.nodes[e.node].attrs.get("dtype") != "float16" for e in fc1.inputs)


def test_numpy_param_values_are_a_param_error_naming_the_param():
    """numpy arrays as params raised ``AttributeError: 'numpy.ndarray' object has no
    attribute 'handle'`` from deep inside MXNet."""
    sym, args, auxs = _small_model()
    given = {**args, "fc1_weight": args["fc1_weight"].asnumpy()}
    with pytest.raises(amp.errors.ParamError, match=r"fc1_weight.*numpy\.ndarray.*mx\.nd\.array"):
        amp.convert_model(sym, given, auxs)


def test_params_keyed_as_in_a_params_file_say_so():
    """``mx.nd.load('m-0000.params')`` keys are ``arg:NAME`` / ``aux:NAME``; passed as they
    are, the error said the params lack every weight without saying why."""
    sym, args, auxs = _small_model()
    raw = {f"arg:{k}": v for k, v in args.items()}
    with pytest.raises(amp.errors.ParamError, match=r"'arg:fc1_weight'.*prefix"):
        amp.convert_model(sym, raw, auxs)


def test_aux_states_passed_in_arg_params_say_so():
    """BatchNorm moving stats in arg_params: the error names where they are."""
    data = mx.sym.var("data")
    sym = mx.sym.BatchNorm(mx.sym.FullyConnected(data, num_hidden=4, name="fc"), name="bn")
    args, auxs = init_params(sym, {"data": (2, 3)})
    with pytest.raises(amp.errors.ParamError, match=r"bn_moving_mean.*in arg_params.*aux_params"):
        amp.convert_model(sym, {**args, **auxs}, {})


@pytest.mark.parametrize("cond, named", [
    (("Activation", "act", ["softrelu"]), r"Activation.*no attribute 'act'.*act_type"),
    (("Activation", "act_type", ["soft_relu"]), r"'soft_relu'.*softrelu"),
    (("Pooling", "pool_type", ["Sum"]), r"'Sum'.*'sum'"),
])
def test_conditional_fp32_op_that_can_never_hold_is_named(cond, named):
    """A typo in a condition's attribute or value was accepted: the condition never held,
    and since the override replaces the op's shipped condition, the op silently lost its
    float32 protection."""
    with pytest.raises(amp.errors.ListError, match=named):
        amp.load_policy("float16", conditional_fp32_ops=[cond])


def test_conditional_fp32_op_without_values_is_named():
    """``('Activation', 'act_type', None)`` raised "'NoneType' object is not iterable"."""
    with pytest.raises(TypeError, match=r"conditional_fp32_ops.*\('Activation', 'act_type', None\)"):
        amp.load_policy("float16", conditional_fp32_ops=[("Activation", "act_type", None)])


def test_valid_conditional_fp32_ops_still_apply():
    p = amp.load_policy("float16", conditional_fp32_ops=[("Activation", "act_type", ["tanh"]),
                                                         ("Pooling", "global_pool", ["True"])])
    assert ("Activation", "act_type", ("tanh",)) in p.conditional
    assert ("Pooling", "global_pool", ("True",)) in p.conditional


class _ShapeUser(nn.HybridBlock):
    """Reads ``x.shape``: runs imperatively, cannot hybridize."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(3, in_units=4)

    def hybrid_forward(self, F, x):
        return self.fc(x.reshape((x.shape[0], -1)))


class _NumpyUser(nn.HybridBlock):
    """Calls ``asnumpy()``: runs imperatively, cannot hybridize."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(3, in_units=4)

    def hybrid_forward(self, F, x):
        return self.fc(x) * float(x.asnumpy().mean())


@pytest.mark.parametrize("cls", [_ShapeUser, _NumpyUser])
def test_block_that_cannot_be_traced_is_a_graph_error(cls):
    """Such a block raised a bare AttributeError ("'Symbol' object has no attribute
    'shape'") or MXNet's NotImplementedForSymbol from inside its own code."""
    net = cls()
    net.initialize()
    net(mx.nd.ones((2, 4)))   # runs fine imperatively
    with pytest.raises(amp.errors.GraphError, match=f"{cls.__name__}.*cannot be traced.*hybridiz"):
        amp.convert_hybrid_block(net, target_dtype="bfloat16")


def _conv_model():
    """A conv net whose classifier's weight shape depends on the input size."""
    data = mx.sym.var("data")
    conv = mx.sym.Convolution(data, num_filter=4, kernel=(3, 3), name="conv")
    out = mx.sym.FullyConnected(mx.sym.relu(conv), num_hidden=3, name="fc")
    args, auxs = init_params(out, {"data": (1, 3, 8, 8)})
    return out, args, auxs


@pytest.mark.parametrize("shapes", [
    [("data", (1, 3, 8, 8))],                      # Module.bind's data_shapes
    [mx.io.DataDesc("data", (1, 3, 8, 8))],        # mod.data_shapes / DataIter.provide_data
])
def test_data_shapes_in_module_form_are_taken(shapes):
    """``data_shapes`` as ``Module.bind`` takes them raised AttributeError ('list' object has
    no attribute 'items'); they now check the params as the dict form does."""
    sym, args, auxs = _conv_model()
    as_dict = amp.convert_model(sym, args, auxs, data_shapes={"data": (1, 3, 8, 8)})
    as_list = amp.convert_model(sym, args, auxs, data_shapes=shapes)
    assert _symbol_json(as_list[0]) == _symbol_json(as_dict[0])
    with pytest.raises(amp.errors.ParamError, match="fc_weight"):
        amp.convert_model(sym, args, auxs, data_shapes=[("data", (1, 3, 10, 10))])


@pytest.mark.parametrize("shapes", [{"data": "1x3x8x8"}, {"data": 8}, {"data": (1, 3, -8, 8)},
                                    [("data",)]])
def test_malformed_data_shapes_are_an_input_shape_error(shapes):
    """A shape that is not a tuple of positive ints raised a bare ValueError / TypeError."""
    sym, args, auxs = _conv_model()
    with pytest.raises(amp.errors.InputShapeError, match="data_shapes"):
        amp.convert_model(sym, args, auxs, data_shapes=shapes)


@pytest.mark.parametrize("name", ["init", "init_trainer", "scale_loss", "unscale"])
def test_contrib_training_api_says_it_is_not_provided(name):
    """Code ported from contrib calling ``amp.init()`` got a bare "module has no attribute";
    it now says why, and where training AMP is."""
    assert not hasattr(amp, name)
    with pytest.raises(AttributeError, match=f"'{name}'.*inference.*mx.contrib.amp"):
        getattr(amp, name)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        amp.nope


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_converted_block_holds_no_gradient_buffers(dtype):
    """The inference block allocated a gradient array beside every weight (grad_req
    'write'): as much memory again as its params. A user who fine-tunes turns them on."""
    net = nn.Dense(64, in_units=32)
    net.initialize()
    net16 = amp.convert_hybrid_block(net, target_dtype=dtype)
    params = list(net16.collect_params().values())
    assert all(p.grad_req == "null" and p._grad is None for p in params)
    net16.collect_params().setattr("grad_req", "write")
    assert all(p.grad().shape == p.data().shape for p in params)


def test_numpy_integer_epochs_are_epochs(tmp_path):
    """``export(prefix, np.int64(5))`` (an epoch from a numpy loop or array) was refused as
    "epoch must be a non-negative integer, got 5"; MXNet's own savers take it."""
    net16 = _converted_block()
    files = net16.export(str(tmp_path / "m"), np.int64(5))
    assert files[1].endswith("m-0005.params")
    _, args, _ = amp.load_checkpoint(str(tmp_path / "m"), np.int32(5))
    assert sorted(args) == sorted(net16.collect_params())
    with pytest.raises(amp.errors.CheckpointError, match="non-negative integer"):
        net16.export(str(tmp_path / "m"), np.int64(-1))
    with pytest.raises(amp.errors.CheckpointError, match="non-negative integer"):
        net16.export(str(tmp_path / "m"), 1.0)


def test_output_prefix_naming_a_folder_is_refused(tmp_path):
    """``mxnet-amp convert m --out out/`` (or ``export('out/')``) wrote ``out/-symbol.json``
    and ``out/-0000.params``: files named after nothing, that shell commands read as flags."""
    from mxnet_amp.cli.main import main
    net = nn.Dense(3, in_units=4)
    net.initialize()
    net.hybridize()
    net(mx.nd.ones((1, 4)))
    net.export(str(tmp_path / "m"))
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(amp.errors.CheckpointError, match="folder"):
        amp.convert_checkpoint(str(tmp_path / "m"), 0, str(out) + "/", target_dtype="bfloat16")
    with pytest.raises(amp.errors.CheckpointError, match="folder"):
        _converted_block().export(str(out) + "/")
    assert main(["convert", str(tmp_path / "m"), "--target-dtype", "bf16", "--out", f"{out}/",
                 "-q"]) == 2
    assert list(out.iterdir()) == []


class _PairInput(nn.HybridBlock):
    """``forward([a, b], y)``: a nested first input, as Gluon's hybridized call accepts."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(3, in_units=4)

    def hybrid_forward(self, F, pair, y):
        a, b = pair
        return self.fc(a + b), [y * 2, self.fc(y)]


def test_block_with_a_nested_first_input_is_callable_as_the_original():
    """The converted block kept the nested input structure but SymbolBlock.forward insists on
    an array first: called nested it raised AssertionError, called flat "argument structure
    does not match". Neither way ran."""
    net = _PairInput()
    net.initialize()
    net.hybridize()
    a, b, y = (mx.nd.array(np.random.RandomState(k).randn(2, 4)) for k in range(3))
    ref = net([a, b], y)
    emulated = amp.emulate_block(amp.convert_hybrid_block(net, target_dtype="float16"))
    for hybridized in (False, True):
        if hybridized:
            emulated.hybridize()
        out = emulated([a, b], y)
        assert len(out) == 2 and isinstance(out[1], list) and len(out[1]) == 2
        np.testing.assert_allclose(out[0].asnumpy(), ref[0].asnumpy(), rtol=1e-2, atol=1e-2)
        np.testing.assert_allclose(out[1][0].asnumpy(), ref[1][0].asnumpy())


@pytest.mark.parametrize("given, hint", [("model-symbol.json", "load_checkpoint"),
                                         (nn.Dense(3, in_units=4), "convert_hybrid_block")])
def test_symbol_argument_that_is_not_a_symbol_says_what_to_pass(given, hint):
    """A path or a Gluon block given as ``sym`` raised "'str' object has no attribute
    'tojson'"."""
    for call in (lambda: amp.convert_symbol(given), lambda: amp.convert_model(given, {}, {}),
                 lambda: amp.emulate_model(given, {}, {})):
        with pytest.raises(amp.errors.GraphError, match=f"Symbol.*{hint}"):
            call()


def test_concat_of_an_input_and_a_layer_is_no_param_error():
    """MXNet 1.9.1's partial shape inference takes an input of unknown shape as empty in a
    Concat: the shape check blamed the right (8, 16) weight of the FullyConnected after it
    (hypothesis found it: ParamError 'fc2_weight has shape (8, 16) but the symbol expects
    (8, 8)'). The model binds, so it converts."""
    import mxnet as mx
    import numpy as np
    import mxnet_amp as amp
    x0, x1 = mx.sym.var("x0"), mx.sym.var("x1")
    fc1 = mx.sym.FullyConnected(x0, num_hidden=8, name="fc1")
    out = mx.sym.FullyConnected(mx.sym.Concat(x1, fc1, dim=1), num_hidden=8, name="fc2")
    rng = np.random.RandomState(0)
    args = {k: mx.nd.array(rng.randn(*s).astype("float32") * 0.1)
            for k, s in [("fc1_weight", (8, 8)), ("fc1_bias", (8,)), ("fc2_weight", (8, 16)),
                         ("fc2_bias", (8,))]}
    csym, cargs, _ = amp.convert_model(out, args, {}, target_dtype="bfloat16")
    shapes = dict(zip(csym.list_arguments(), csym.infer_shape(x0=(2, 8), x1=(2, 8))[0]))
    assert shapes["fc2_weight"] == (8, 16) and cargs["fc2_weight"].shape == (8, 16)
