"""The emulation's helper pass expose_outputs on its own: every used op output becomes a head,
values unchanged."""
import numpy as np

from mxnet_amp.ir.verify import verify_graph
from mxnet_amp.mx.io import graph_from_symbol, graph_to_symbol
from mxnet_amp.passes.expose_outputs import expose_outputs

from helpers import fc_sin_fc, init_params, run


def test_expose_outputs_makes_every_used_op_output_a_head_and_keeps_values():
    sym = fc_sin_fc()
    graph = graph_from_symbol(sym)
    exposed, keys = expose_outputs(graph)
    verify_graph(exposed)
    ops = [i for i, n in enumerate(graph.nodes) if not n.is_variable]
    assert [k[0] for k in keys] == ops                  # fc1, s, fc2 (fc2 also the head)
    args, auxs = init_params(sym, {"data": (2, 5)})
    x = np.random.RandomState(0).randn(2, 5).astype("float32")
    outs = run(graph_to_symbol(exposed), args, auxs, {"data": x})
    np.testing.assert_array_equal(outs[-1], run(sym, args, auxs, {"data": x})[0])
    assert graph.heads == graph_from_symbol(sym).heads  # the input graph is unchanged


def test_golden_every_used_op_output_becomes_a_head():
    """Rule: the heads become every used output of every op node, in node order (a node's
    outputs in order), then the old heads not among them; nodes are untouched."""
    from golden import assert_graph, graph, op, var
    given = graph(var("x"), op("split", "SliceChannel", "x", num_outputs="2"),
                  op("a", "sin", ("split", 1)), op("b", "cos", "a"), heads=["b", "x"])
    expected = graph(var("x"), op("split", "SliceChannel", "x", num_outputs="2"),
                     op("a", "sin", ("split", 1)), op("b", "cos", "a"),
                     heads=[("split", 0), ("split", 1), "a", "b", "x"])
    got, keys = expose_outputs(given)
    assert_graph(got, expected)
    assert keys == [(1, 0), (1, 1), (2, 0), (3, 0), (0, 0)]
