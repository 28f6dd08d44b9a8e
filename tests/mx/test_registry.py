"""mxnet_amp.mx.registry: what MXNet's operator registry says, read through its C API."""
import mxnet as mx
import pytest

from mxnet_amp.mx.registry import (InferenceFailed, infer_types, list_op_names, op_input_names,
                                   op_signature, registry_op_names)


def test_registry_lists_ops_and_aliases():
    """Known ops and their aliases are registered; a made-up name is not."""
    names = registry_op_names()
    assert {"FullyConnected", "Convolution", "amp_cast", "amp_multicast"} <= names
    assert "not_an_op" not in names
    assert set(list_op_names()) == set(names)


def test_op_signature_separates_inputs_from_attributes():
    """FullyConnected's NDArray inputs come in order; num_hidden is an attribute; Concat is variadic."""
    sig = op_signature("FullyConnected")
    assert sig.inputs == ("data", "weight", "bias")
    assert "num_hidden" in sig.params and not sig.variadic
    assert op_signature("Concat").variadic


def test_op_input_names_is_empty_for_a_variadic_op():
    """A variadic op's inputs have no fixed names; BatchNorm lists its aux states too."""
    assert op_input_names("Concat") == ()
    assert op_input_names("BatchNorm")[:3] == ("data", "gamma", "beta")


def test_infer_types_fills_in_what_mxnet_can_tell():
    """Giving the data dtype lets MXNet type the weight and the output."""
    sym = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=3, name="fc")
    args, outs, auxs = infer_types(sym, {"data": "float16"})
    assert args == ["float16", "float16", "float16"]
    assert outs == ["float16"] and auxs == []


def test_infer_types_raises_inference_failed_on_a_clash():
    """Contradicting dtypes (data float16, weight float32) are an InferenceFailed with MXNet's reason."""
    sym = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=3, name="fc")
    with pytest.raises(InferenceFailed):
        infer_types(sym, {"data": "float16", "fc_weight": "float32"})


@pytest.mark.parametrize("attr, value, match", [
    ("num_filter", "-3", r"num_filter = '-3' is not a non-negative integer"),
    ("kernel", "(0, 0)", r"kernel = '\(0, 0\)': each dimension must be a positive integer"),
    ("stride", "(1, -1)", r"stride = '\(1, -1\)'"),
])
def test_attributes_that_can_never_run_are_refused_naming_the_node(attr, value, match):
    """``num_filter "-3"`` or ``kernel "(0, 0)"`` were converted with exit 0 (newcomer audit,
    #42): reading the graph is a GraphError naming the file, the node and the attribute."""
    import json

    import mxnet as mx

    from mxnet_amp.errors import GraphError
    from mxnet_amp.mx.io import graph_from_json
    sym = mx.sym.Convolution(mx.sym.var("data"), kernel=(3, 3), num_filter=4, name="conv")
    obj = json.loads(sym.tojson())
    obj["nodes"][-1]["attrs"][attr] = value
    with pytest.raises(GraphError, match="m-symbol.json: node 'conv' .*" + match):
        graph_from_json(json.dumps(obj), where="m-symbol.json")
    good = mx.sym.Pooling(mx.sym.var("data"), kernel=(1, 1), global_pool=True, pool_type="avg")
    graph_from_json(good.tojson())
    graph_from_json(sym.tojson())


def test_mxnet_op_names_leave_out_the_ops_our_kernels_register():
    """The op tables (docs/ops.md, the list checks) read MXNet's registry: once the compiled
    rounding kernels load, their ops are registered too and must not change those tables."""
    from mxnet_amp.kernels.build import ROUND_BIAS_OP, ROUND_OP, kernel_state
    from mxnet_amp.mx.registry import OWN_OP_PREFIX, list_op_names, mxnet_op_names
    assert ROUND_OP.startswith(OWN_OP_PREFIX) and ROUND_BIAS_OP.startswith(OWN_OP_PREFIX)
    if not kernel_state().loaded:
        pytest.skip(f"kernels not loaded here: {kernel_state().reason}")
    assert {ROUND_OP, ROUND_BIAS_OP} <= set(list_op_names())
    ours = set(mxnet_op_names())
    assert not {ROUND_OP, ROUND_BIAS_OP} & ours
    own = {ROUND_OP, ROUND_BIAS_OP}
    assert set(list_op_names()) - ours == own | {f"_backward_{op}" for op in own}
