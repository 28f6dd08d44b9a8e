"""Measured propagation (mxnet_amp/auto/propagation.py): the injected graph, and the norm of
the outputs' change each error makes, against the exact linear answer."""
from types import SimpleNamespace

import mxnet as mx
import numpy as np

from mxnet_amp.auto.propagation import PROBES, injected, propagated
from mxnet_amp.io import graph_from_symbol


def _net(out_width: int, batch: int = 2):
    """data (batch, 3) -> fc1 (6) -> halves a, b -> a - b -> fc2 (out_width)."""
    rng = np.random.RandomState(0)
    data = mx.sym.var("data")
    p = mx.sym.FullyConnected(data, num_hidden=6, name="fc1")
    a = mx.sym.slice_axis(p, axis=1, begin=0, end=3, name="a")
    b = mx.sym.slice_axis(p, axis=1, begin=3, end=6, name="b")
    d = mx.sym.elemwise_sub(a, b, name="d")
    out = mx.sym.FullyConnected(d, num_hidden=out_width, name="fc2")
    params = {"fc1_weight": rng.randn(6, 3), "fc1_bias": rng.randn(6),
              "fc2_weight": rng.randn(out_width, 3), "fc2_bias": rng.randn(out_width)}
    params = {k: mx.nd.array(v.astype(np.float32)) for k, v in params.items()}
    x = rng.uniform(-1, 1, (batch, 3)).astype(np.float32)
    runs = SimpleNamespace(ctx=mx.cpu(), arg_params=params, aux_params={},
                           inputs={"data": mx.nd.array(x)})
    graph = graph_from_symbol(out)
    ref = out.eval(ctx=mx.cpu(), data=mx.nd.array(x), **params)[0].asnumpy()
    return graph, runs, ref, params["fc2_weight"].asnumpy()


def test_injected_adds_one_variable_per_point_and_reads_it_downstream():
    graph, _, _, _ = _net(4)
    i = graph.index_of("fc1")
    new, variables = injected(graph, {(i, 0): (2, 6)}, [(e.node, e.output) for e in graph.heads])
    assert len(new.nodes) == len(graph.nodes) + 3 and list(variables) == [(i, 0)]
    plus = [n for n in new.nodes if n.op == "elemwise_add"]
    shaped = new.nodes[plus[0].inputs[1].node]
    assert len(plus) == 1 and shaped.op == "reshape" and shaped.attrs["shape"] == "(2, 6)"
    assert new.nodes[shaped.inputs[0].node].name == variables[(i, 0)]
    plus_index = new.index_of(plus[0].name)
    # both slices read the sum, not fc1 itself
    for name in ("a", "b"):
        assert new.nodes[new.index_of(name)].inputs[0].node == plus_index


def test_measured_change_is_exact_with_the_basis_and_sees_cancellation():
    """8 output elements (at most PROBES): the standard basis gives the exact norm of
    ``J e`` (here ``e @ W2^T`` through the difference of the halves), weighted by the
    output's scale. An error equal on both halves of fc1 cancels in ``a - b``: measured 0;
    on one half only it goes through whole."""
    graph, runs, ref, w2 = _net(4)
    i, d = graph.index_of("fc1"), graph.index_of("d")
    rng = np.random.RandomState(1)
    half = rng.randn(2, 3).astype(np.float32)
    errors = {"paired": ((i, 0), np.concatenate([half, half], 1)),
              "one_side": ((i, 0), np.concatenate([half, 0 * half], 1)),
              "d": ((d, 0), half)}
    got = propagated(runs, graph, errors, [(e.node, e.output) for e in graph.heads], [ref])
    weight = 1.0 / (np.abs(ref).max() * np.sqrt(ref.size))
    exact = np.linalg.norm(half @ w2.T) * weight
    assert got["paired"] < 1e-6 * exact
    np.testing.assert_allclose(got["one_side"], exact, rtol=1e-5)
    np.testing.assert_allclose(got["d"], exact, rtol=1e-5)


def test_random_directions_estimate_the_norm_when_the_outputs_are_many():
    """64 output elements (> PROBES): random sign directions; the estimate is within the
    Hutchinson spread of the exact norm, and deterministic (seeded)."""
    graph, runs, ref, w2 = _net(8, batch=8)
    assert ref.size > PROBES
    d = graph.index_of("d")
    rng = np.random.RandomState(2)
    errors = {f"e{j}": ((d, 0), rng.randn(8, 3).astype(np.float32)) for j in range(6)}
    heads = [(e.node, e.output) for e in graph.heads]
    got = propagated(runs, graph, errors, heads, [ref])
    weight = 1.0 / (np.abs(ref).max() * np.sqrt(ref.size))
    for name, (_, err) in errors.items():
        exact = np.linalg.norm(err @ w2.T) * weight
        assert 0.5 * exact < got[name] < 1.6 * exact
    assert propagated(runs, graph, errors, heads, [ref]) == got
