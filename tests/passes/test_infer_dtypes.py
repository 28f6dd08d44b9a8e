"""mxnet_amp.passes.infer_dtypes: each node's output dtypes, asked of MXNet op by op."""
import mxnet as mx
import pytest

from mxnet_amp.mx.io import graph_from_symbol
from mxnet_amp.mx.optypes import OpTypes
from mxnet_amp.mx.registry import InferenceFailed
from mxnet_amp.passes.infer_dtypes import infer_dtypes


def test_a_cast_changes_the_dtype_downstream():
    """data (f32) -> amp_cast f16 -> fc: the cast and fc give float16; fc's weight follows fc."""
    x = mx.sym.amp_cast(mx.sym.var("data"), dtype="float16", name="c")
    g = graph_from_symbol(mx.sym.FullyConnected(x, num_hidden=2, name="fc"))
    out = dict(zip([n.name for n in g.nodes], infer_dtypes(g, {"data": "float32"}, OpTypes({}))))
    assert out["data"] == ("float32",) and out["c"] == ("float16",)
    assert out["fc"] == ("float16",) and out["fc_weight"] == ("float16",)


def test_given_variable_dtypes_are_kept():
    """A weight given as float32 stays float32 even where nothing else decides it."""
    g = graph_from_symbol(mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=2, name="fc"))
    out = infer_dtypes(g, {"data": "float32", "fc_weight": "float32", "fc_bias": "float32"})
    assert all(d == ("float32",) for d in out)


def test_a_clash_names_the_node():
    """float16 data with a float32 weight: InferenceFailed naming the node and its op."""
    g = graph_from_symbol(mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=2, name="fc"))
    with pytest.raises(InferenceFailed, match="node 'fc' \\(FullyConnected\\)"):
        infer_dtypes(g, {"data": "float16", "fc_weight": "float32"}, OpTypes({}))


def test_golden_dtypes_flow_through_casts_and_the_graph_is_the_same_object():
    """Rule: each node's used outputs get MXNet's dtypes from its inputs' (a variable absent
    from var_dtypes takes what its reader asks: the weight of a float16 FullyConnected is
    float16); the pass changes no node, so its graph is its input itself."""
    from golden import cast, graph, op, var
    from mxnet_amp.passes.infer_dtypes import InferDtypes
    given = graph(var("x"), var("w"), cast("x16", "x", "float16"),
                  op("fc", "FullyConnected", "x16", "w", num_hidden="2", no_bias="True"),
                  cast("out", "fc", "float32"), heads=["out"])
    result = InferDtypes({"x": "float32"})(given)
    assert result.graph is given and not result.changed
    assert result.decided == [("float32",), ("float16",), ("float16",), ("float16",), ("float32",)]
