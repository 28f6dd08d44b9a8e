"""Gluon models written against mx.np / mx.npx convert (their _npi_/_npx_ ops are listed)."""
import warnings

import mxnet as mx
import numpy as onp
import pytest

import mxnet_amp as amp
from mxnet_amp.mx.hardware import HardwareWarning
from mxnet_amp.mx.io import graph_from_symbol

from helpers import rel_error


def build_np_net():
    from mxnet.gluon import nn

    class Net(nn.HybridBlock):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2D(8, 3, padding=1, in_channels=3)
            self.dense = nn.Dense(16, in_units=8 * 8 * 8)
            self.ln = nn.LayerNorm(in_channels=16)
            self.out = nn.Dense(5, in_units=16)

        def hybrid_forward(self, F, x):
            h = F.npx.relu(self.conv(x))
            h = self.ln(self.dense(h))
            h = F.np.tanh(h) * 2 + F.np.exp(-h * h)
            return F.npx.softmax(self.out(h), axis=-1)

    net = Net()
    net.initialize(mx.init.Xavier())
    net.hybridize()
    return net


@pytest.fixture
def np_mode():
    from mxnet import npx
    npx.set_np()
    yield
    npx.reset_np()


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_numpy_interface_net_converts_and_matches_fp32(np_mode, dtype, native_bf16):
    from mxnet import np
    net = build_np_net()
    mx.random.seed(0)
    x = np.random.uniform(size=(2, 3, 8, 8))
    ref = net(x).asnumpy()
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # an unlisted op would warn
        warnings.simplefilter("ignore", HardwareWarning)   # where this machine cannot run it
        converted = amp.convert_block(net, target_dtype=dtype)
    sym = converted._cached_graph[1]
    graph = graph_from_symbol(sym)
    ops = {n.op for n in graph.nodes}
    assert any(op.startswith(("_npi_", "_npx_")) for op in ops)
    # the matrix ops read low precision casts; the normalisation and softmax run in fp32
    low = {graph.nodes[e.node].name for n in graph.nodes if n.op == "amp_cast"
           and n.attrs["dtype"] == dtype for e in n.inputs}
    assert low, "nothing was cast to low precision"
    policy = amp.load_policy(dtype)
    for n in graph.nodes:
        if n.op == "amp_cast" and n.attrs["dtype"] == dtype:
            consumers = [c for c in graph.nodes if any(graph.nodes[e.node] is n for e in c.inputs)]
            assert all(policy.category_of(c.op).value in ("target", "widest", "follow") for c in consumers)
    if dtype == "bfloat16" and native_bf16:
        out = converted(x).asnumpy()
    else:
        out = amp.emulate_block(converted)(x).asnumpy()
    assert onp.isfinite(out).all()
    assert rel_error(out, ref) < {"bfloat16": 5e-2, "float16": 1e-2}[dtype]
    # the source block still runs in fp32 and gives what it gave
    assert onp.array_equal(net(x).asnumpy(), ref)
