"""Measured propagation (mxnet_amp/auto/propagation.py): the injected graph, the norm of
the outputs' change each error makes, against the exact linear answer, and the error pushed
through the graph itself against the exact non-linear one."""
from types import SimpleNamespace

import mxnet as mx
import numpy as np
import pytest

from mxnet_amp.auto import propagation
from mxnet_amp.auto.propagation import PROBES, injected, propagated, pushed
from mxnet_amp.mx.io import graph_from_symbol


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
    runs = SimpleNamespace(config=SimpleNamespace(ctx=mx.cpu(), arg_params=params, aux_params={},
                                                  inputs={"data": mx.nd.array(x)},
                                                  params=lambda: dict(params)))
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


def _kinked(mix_batch: bool = False, batch: int = 3):
    """data (batch, 4) -> fc (4) -> relu -> out; ``mix_batch``: the relu's output less its
    mean over the batch (an op that mixes the copies a push runs side by side)."""
    rng = np.random.RandomState(3)
    data = mx.sym.var("data")
    y = mx.sym.FullyConnected(data, num_hidden=4, name="fc")
    out = mx.sym.relu(y, name="act")
    if mix_batch:
        out = mx.sym.broadcast_sub(out, mx.sym.mean(out, axis=0, keepdims=True), name="centred")
    w = rng.randn(4, 4).astype(np.float32)
    params = {"fc_weight": mx.nd.array(w), "fc_bias": mx.nd.zeros(4)}
    x = rng.uniform(-1, 1, (batch, 4)).astype(np.float32)
    runs = SimpleNamespace(config=SimpleNamespace(ctx=mx.cpu(), arg_params=params, aux_params={},
                                                  inputs={"data": mx.nd.array(x)},
                                                  params=lambda: dict(params)))
    graph = graph_from_symbol(out)
    ref = out.eval(ctx=mx.cpu(), data=mx.nd.array(x), **params)[0].asnumpy()
    return graph, runs, ref, x @ w.T, out


def _exact(sym, y_ref, err, ref):
    """The weighted norm of the outputs' change with ``fc``'s output replaced by ``y + e``."""
    y = mx.sym.var("y")
    tail = sym.get_internals()
    # the graph after fc, fed y + e: relu (and the batch centring) of it
    net = mx.sym.relu(y) if "centred_output" not in tail.list_outputs() else \
        mx.sym.broadcast_sub(mx.sym.relu(y), mx.sym.mean(mx.sym.relu(y), axis=0, keepdims=True))
    moved = net.eval(ctx=mx.cpu(), y=mx.nd.array(y_ref + err))[0].asnumpy()
    weight = 1.0 / (np.abs(ref).max() * np.sqrt(ref.size))
    return float(np.linalg.norm((moved - ref) * weight))


def test_pushed_sees_an_error_cross_a_kink_the_linear_measure_misses():
    """fc's negative outputs: a relu's slope there is 0, so the linear measure reads an error
    that lifts them past 0 as nothing; pushed through the graph, it is the exact change. Two
    nodes' errors in one pass (side by side copies) are each measured alone."""
    graph, runs, ref, y_ref, sym = _kinked()
    i = graph.index_of("fc")
    heads = [(e.node, e.output) for e in graph.heads]
    lift = np.where(y_ref < 0, -2 * y_ref + 0.5, 0.0).astype(np.float32)   # negatives -> |y| + 0.5
    small = np.where(y_ref > 0, 0.01, 0.0).astype(np.float32)
    linear = propagated(runs, graph, {"lift": ((i, 0), lift)}, heads, [ref])
    assert linear["lift"] < 1e-6
    got = pushed(runs, graph, {"lift": [((i, 0), lift)], "small": [((i, 0), small)]}, heads, [ref])
    np.testing.assert_allclose(got["lift"], _exact(sym, y_ref, lift, ref), rtol=1e-5)
    np.testing.assert_allclose(got["small"], _exact(sym, y_ref, small, ref), rtol=1e-4)
    assert got["lift"] > 0.1


def test_pushed_runs_one_pass_per_node_where_the_copies_would_mix(monkeypatch):
    """An op over the batch axis (the outputs less their batch mean) mixes the copies side by
    side: the control copy is no longer the reference, and each node gets a pass of its own;
    the answers are still exact. With one copy a pass allowed, the same."""
    graph, runs, ref, y_ref, sym = _kinked(mix_batch=True)
    i = graph.index_of("fc")
    heads = [(e.node, e.output) for e in graph.heads]
    rng = np.random.RandomState(4)
    points = {f"e{j}": [((i, 0), rng.randn(*y_ref.shape).astype(np.float32))] for j in range(3)}
    got = pushed(runs, graph, points, heads, [ref])
    for name, [(_, err)] in points.items():
        np.testing.assert_allclose(got[name], _exact(sym, y_ref, err, ref), rtol=1e-4)
    monkeypatch.setattr(propagation, "_TILED_ELEMENTS", 1)
    assert pushed(runs, graph, points, heads, [ref]) == pytest.approx(got, rel=1e-5)


def test_pushed_reads_a_non_finite_output_as_infinite():
    graph, runs, ref, y_ref, _ = _kinked()
    i = graph.index_of("fc")
    err = np.zeros_like(y_ref, dtype=np.float32)
    err[0, 0] = np.inf
    heads = [(e.node, e.output) for e in graph.heads]
    got = pushed(runs, graph, {"bad": [((i, 0), err)], "none": [((i, 0), np.zeros_like(err))]},
                 heads, [ref])
    assert got == {"bad": np.inf, "none": 0.0}


def test_pushed_handles_an_output_without_a_batch_axis():
    """A batch of one beside an output that does not grow with it (an SSD's anchors,
    ``(1, A, 4)``, made from parameters): side by side copies cannot be split on it, so each
    node gets a pass of its own, and the answers are the exact ones (this raised an
    IndexError in the random SSD of benchmarks/auto_detectors.py)."""
    graph1, runs, ref, y_ref, sym = _kinked(batch=1)
    anchors = mx.sym.expand_dims(mx.sym.sum(mx.sym.var("fc_weight"), axis=0), axis=0, name="anchors")
    both = mx.sym.Group([sym, anchors])
    graph = graph_from_symbol(both)
    params = runs.config.params()
    anchor_ref = anchors.eval(ctx=mx.cpu(), fc_weight=params["fc_weight"])[0].asnumpy()
    assert anchor_ref.shape == (1, 4) and ref.shape[0] == 1
    i = graph.index_of("fc")
    heads = [(e.node, e.output) for e in graph.heads]
    rng = np.random.RandomState(5)
    points = {f"e{j}": [((i, 0), rng.randn(*y_ref.shape).astype(np.float32))] for j in range(3)}
    got = pushed(runs, graph, points, heads, [ref, anchor_ref])
    alone = pushed(runs, graph1, points, [(e.node, e.output) for e in graph1.heads], [ref])
    for name in points:
        # the anchors do not move, and each output is weighted by its own reference: the
        # change is the main output's alone
        assert np.isfinite(got[name]) and got[name] > 0
        assert got[name] == pytest.approx(alone[name], rel=1e-5)
