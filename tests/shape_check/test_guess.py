"""mxnet_amp.shape_check.guess (shape_check/guess): what the params prove about a model's inputs."""
import mxnet as mx

from mxnet_amp.mx.io import graph_from_symbol
from mxnet_amp.shape_check.guess import guess_input_shapes, unknown_dim, windowed_pool


def test_a_convolution_weight_proves_rank_and_channels_through_shape_keeping_ops():
    """data -> BatchNorm -> Convolution(weight 8x3x3x3): data is (?, 3, ?, ?)."""
    x = mx.sym.var("data")
    sym = mx.sym.Convolution(mx.sym.BatchNorm(x, name="bn"), num_filter=8, kernel=(3, 3), name="conv")
    g = graph_from_symbol(sym)
    u = unknown_dim()
    assert guess_input_shapes(g, ["data"], {"conv_weight": (8, 3, 3, 3)}) == {"data": (u, 3, u, u)}


def test_a_flattening_fully_connected_proves_batch_and_features():
    """A flattening FullyConnected with weight (4, 10) gives (?, 10); with flatten=False nothing."""
    g = graph_from_symbol(mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=4, name="fc"))
    assert guess_input_shapes(g, ["data"], {"fc_weight": (4, 10)}) == {"data": (unknown_dim(), 10)}
    g2 = graph_from_symbol(mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=4, flatten=False, name="fc"))
    assert guess_input_shapes(g2, ["data"], {"fc_weight": (4, 10)}) == {}


def test_readers_that_disagree_prove_nothing():
    """Two convolutions reading data with 3 and 5 input channels: no guess is made."""
    x = mx.sym.var("data")
    a = mx.sym.Convolution(x, num_filter=2, kernel=(1, 1), name="a")
    b = mx.sym.Convolution(x, num_filter=2, kernel=(1, 1), name="b")
    g = graph_from_symbol(mx.sym.Group([a, b]))
    assert guess_input_shapes(g, ["data"], {"a_weight": (2, 3, 1, 1), "b_weight": (2, 5, 1, 1)}) == {}


def test_windowed_pool_excludes_global_pooling():
    """A 2x2 max pool is windowed; a global pool is not; a relu is no pool."""
    x = mx.sym.var("data")
    g = graph_from_symbol(mx.sym.Group([
        mx.sym.Pooling(x, kernel=(2, 2), pool_type="max", name="win"),
        mx.sym.Pooling(x, kernel=(1, 1), global_pool=True, pool_type="avg", name="glob"),
        mx.sym.relu(x, name="r")]))
    found = {n.name: windowed_pool(n) for n in g.nodes if not n.is_variable}
    assert found == {"win": True, "glob": False, "r": False}
