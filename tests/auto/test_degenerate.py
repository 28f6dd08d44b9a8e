"""mxnet_amp.auto.degenerate: a float32 reference its own params make non-finite."""
import mxnet as mx
import numpy as np

from mxnet_amp.auto.degenerate import batchnorms, degenerate_params, nonfinite_origins
from mxnet_amp.mx.io import graph_from_symbol


def _bn_graph(fix_gamma=True):
    """data -> BatchNorm bn -> relu r."""
    bn = mx.sym.BatchNorm(mx.sym.var("data"), fix_gamma=fix_gamma, name="bn")
    return graph_from_symbol(mx.sym.relu(bn, name="r"))


def _bn_params(var):
    return {"bn_gamma": mx.nd.ones((2,)), "bn_beta": mx.nd.zeros((2,)),
            "bn_moving_mean": mx.nd.zeros((2,)), "bn_moving_var": mx.nd.array(var)}


def test_a_negative_running_variance_is_named_with_its_entries():
    """moving_var + eps <= 0 makes float32 nan: the BatchNorm is named with the bad entry."""
    g = _bn_graph()
    found = degenerate_params(g, _bn_params([1.0, -5.0]), batchnorms(g))
    assert list(found) == ["bn"]
    assert "bn_moving_var has 1 of 2 entries" in found["bn"] and "[1]=-5" in found["bn"]


def test_healthy_params_and_an_ignored_gamma_are_not_degenerate():
    """Positive variances pass; a nan gamma under fix_gamma (read as 1) is ignored, without
    fix_gamma it is named."""
    g = _bn_graph()
    params = _bn_params([1.0, 2.0])
    assert degenerate_params(g, params, ["bn"]) == {}
    params["bn_gamma"] = mx.nd.array([np.nan, 1.0])
    assert degenerate_params(g, params, ["bn"]) == {}
    g2 = _bn_graph(fix_gamma=False)
    assert "bn_gamma" in degenerate_params(g2, params, ["bn"])["bn"]


def test_nonfinite_origins_are_where_nan_starts():
    """bn's output is nan from finite inputs; relu's nan comes from bn: only bn is an origin."""
    g = _bn_graph()
    bn, r, data = g.index_of("bn"), g.index_of("r"), g.index_of("data")
    tensors = {(data, 0): np.ones(2), (bn, 0): np.array([np.nan, 1.0]), (r, 0): np.array([np.nan, 1.0])}
    assert nonfinite_origins(g, tensors) == ["bn"]
    assert nonfinite_origins(g, {(bn, 0): np.ones(2)}) == []
    assert batchnorms(g) == ["bn"]
