"""mxnet_amp.passes.insert_casts: casts put where the policy's categories meet."""
import mxnet as mx
import pytest

from mxnet_amp.errors import AlreadyConvertedError
from mxnet_amp.ir.graph import CAST_OPS
from mxnet_amp.ir.verify import verify_graph
from mxnet_amp.mx.io import graph_from_symbol
from mxnet_amp.passes.insert_casts import CAST, MULTICAST, insert_casts, refuse_converted
from mxnet_amp.policy import Category
from mxnet_amp.policy_load import load_policy


def _convert(sym, target="float16", output_dtype="float32"):
    g = graph_from_symbol(sym)
    params = {n.name: "float32" for n in g.variables() if n.name != "data"}
    return insert_casts(g, load_policy(target), data_dtypes={"data": "float32"},
                        param_dtypes=params, output_dtype=output_dtype)


def _fc_softmax():
    """data -> fc (target) -> softmax (fp32)."""
    fc = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=4, name="fc")
    return mx.sym.softmax(fc, name="prob")


def test_a_target_op_reads_casts_to_the_target_and_an_fp32_op_a_cast_back():
    """    data --cast f16--> fc --cast f32--> softmax
    fc's data, weight and bias are cast to float16; softmax reads fc through a float32 cast."""
    result = _convert(_fc_softmax())
    verify_graph(result.graph)
    g = result.graph
    fc = g.nodes[g.index_of("fc")]
    assert [g.nodes[e.node].op for e in fc.inputs] == ["amp_cast"] * 3
    assert {g.nodes[e.node].attrs["dtype"] for e in fc.inputs} == {"float16"}
    prob = g.nodes[g.index_of("prob")]
    back = g.nodes[prob.inputs[0].node]
    assert back.op == "amp_cast" and back.attrs["dtype"] == "float32"
    assert result.node_dtypes["fc"] == "float16" and result.node_dtypes["prob"] == "float32"


def test_decisions_record_each_nodes_category_and_reason():
    """fc ran as a target op and softmax as fp32, each with the list rule behind it."""
    result = _convert(_fc_softmax())
    assert result.decisions["fc"].category is Category.TARGET
    assert result.decisions["prob"].category is Category.FP32
    assert "softmax" in result.decisions["prob"].reason


def test_inserted_casts_name_every_cast_node_the_pass_added():
    """Every amp_cast in the output was put in by the pass and is recorded as a CAST."""
    result = _convert(_fc_softmax())
    casts = {i for i, n in enumerate(result.graph.nodes) if n.op in CAST_OPS}
    assert set(result.inserted_casts) == casts
    assert set(result.inserted_casts.values()) == {CAST}


def test_a_widest_op_unifies_its_inputs_with_one_multicast():
    """elemwise_add of a float16 fc and a float32 softmax: one amp_multicast joins them."""
    x = mx.sym.var("data")
    fc = mx.sym.FullyConnected(x, num_hidden=4, name="fc")
    sym = mx.sym.elemwise_add(fc, mx.sym.softmax(x, name="prob"), name="add")
    result = _convert(sym)
    g = result.graph
    add = g.nodes[g.index_of("add")]
    assert {g.nodes[e.node].op for e in add.inputs} == {"amp_multicast"}
    assert MULTICAST in result.inserted_casts.values()


def test_output_dtype_none_leaves_a_low_precision_output():
    """With output_dtype=None the float16 head is not cast back to float32."""
    sym = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=4, name="fc")
    kept = _convert(sym, output_dtype=None)
    assert kept.graph.nodes[kept.graph.heads[0].node].name == "fc"
    back = _convert(sym)
    assert back.graph.nodes[back.graph.heads[0].node].op == "amp_cast"


def test_a_converted_graph_is_refused():
    """A graph holding an amp_cast to low precision was converted already: AlreadyConvertedError."""
    result = _convert(_fc_softmax())
    with pytest.raises(AlreadyConvertedError, match="converted to mixed precision already"):
        refuse_converted(result.graph)
    refuse_converted(graph_from_symbol(_fc_softmax()))


def test_golden_target_follow_widest_and_fp32_ops_get_their_casts():
    """Rule (float16, weights stored float32): a target op reads its data and weights
    through one amp_cast each to float16 (``<input>_amp_cast_float16``, put in before it);
    a follow op runs in its input's dtype with no cast; a widest op's float inputs go through
    one ``<node>_amp_multicast`` to the widest of them; an fp32 op whose input is float32
    already gets no cast; a float32 output needs no cast back.

        fc(x, w, b) -> relu -> add(., y) -> softmax
    """
    from golden import assert_graph, cast, graph, op, var
    given = graph(var("x"), var("w"), var("b"), op("fc", "FullyConnected", "x", "w", "b", num_hidden="4"),
                  op("act", "relu", "fc"), var("y"), op("add", "elemwise_add", "act", "y"),
                  op("sm", "softmax", "add"), heads=["sm"])
    expected = graph(var("x"), var("w"), var("b"), cast("x_amp_cast_float16", "x", "float16"),
                     cast("w_amp_cast_float16", "w", "float16"), cast("b_amp_cast_float16", "b", "float16"),
                     op("fc", "FullyConnected", "x_amp_cast_float16", "w_amp_cast_float16",
                        "b_amp_cast_float16", num_hidden="4"),
                     op("act", "relu", "fc"), var("y"),
                     op("add_amp_multicast", "amp_multicast", "act", "y", num_outputs="2", cast_narrow="False"),
                     op("add", "elemwise_add", ("add_amp_multicast", 0), ("add_amp_multicast", 1)),
                     op("sm", "softmax", "add"), heads=["sm"])
    result = insert_casts(given, load_policy("float16"), data_dtypes={"x": "float32", "y": "float32"},
                          param_dtypes={"w": "float32", "b": "float32"})
    assert_graph(result.graph, expected)
    assert dict(result.node_dtypes) == {"fc": "float16", "act": "float16", "add": "float32", "sm": "float32"}
    assert sorted(result.inserted_casts.values()) == [CAST, CAST, CAST, MULTICAST]
