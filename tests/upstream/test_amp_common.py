"""Port of master's ``tests/python/amp/common.py`` (MXNet 2's shared AMP tests) to 1.9.1.

Two stored versions of the file were read: an earlier one (commit 1e1459740c4e) and the
latest, which adds ``test_amp_node_excluding`` and keeps fp32 ops with
``OptConstraint.disable_amp()``; both variants are ported. Master's tests take ``lp_dtype``;
here each is parametrized over float16 and bfloat16. They are written for MXNet 2's API
(numpy arrays, ``forward(self, x)``, ``amp.convert_hybrid_block(net, data_example, lp_dtype,
cast_params_offline=True)``, ``share_parameters``); in 1.9.1 they become
``hybrid_forward(self, F, x)`` blocks converted with ``mxnet_amp.convert_hybrid_block(net,
target_dtype=..., cast_optional_params=True)`` (1.9's name for casting params offline), and
param names come from block prefixes.

Master's ``check_amp_net_stats`` registers an op hook and runs the net, counting low
precision op outputs, casts to low precision and other casts. Here the same counts come from
MXNet's type inference on the converted graph (``net_stats``), for every dtype; where this
CPU runs the dtype (bfloat16 with avx512) the hook is also registered on the converted block
and its counts must agree. Master's ``test_amp_coverage`` is ported as ``test_amp_coverage``
of ``test_contrib_amp.py``, which includes its assert that the lists name only registered
ops.
"""
from __future__ import annotations

import ctypes

import numpy as np
import mxnet as mx
import pytest
from mxnet.gluon import nn

import mxnet_amp as amp
from mxnet_amp.gluon.model import block_model
from mxnet_amp.ir.dtypes import array_dtype, dtype_name

from .amp_utils import DTYPES, net_stats, nodes, runs_natively


def _hook_stats(net, lp_dtype: str, data: np.ndarray) -> tuple[int, int, int]:
    """Master's op-hook counting, on a block that runs natively."""
    counts = [0, 0, 0]
    # every op of the converted graph, as master's unfused block runs them: on the fused
    # oneDNN backend (the converted block's default on CPU) casts and FCs run inside
    # subgraph nodes the hook does not see
    net.hybridize(backend=None)

    def inspect_output(_tensor_name, op_name, handle):
        # the hook hands a new NDArray handle (as mx.monitor.Monitor takes it); wrap to read it
        tensor = mx.nd.NDArray(ctypes.cast(handle, mx.base.NDArrayHandle), writable=False)
        dtype = dtype_name(tensor.dtype)
        if op_name == b"amp_cast":
            counts[1 if dtype == lp_dtype else 2] += 1
        counts[0] += dtype == lp_dtype

    net.register_op_hook(inspect_output)
    net(mx.nd.array(data))
    mx.nd.waitall()
    return tuple(counts)


def check_amp_net_stats(lp_dtype: str, net, data: np.ndarray, lp16_tensors_num: int,
                        lp16_casts_num: int, other_casts_num: int) -> None:
    """Master's ``check_amp_net_stats``: counts of the converted block ``net`` on ``data``."""
    sym = block_model(net)[0]
    want = (lp16_tensors_num, lp16_casts_num, other_casts_num)
    assert net_stats(sym, lp_dtype) == want
    if runs_natively(lp_dtype):
        assert _hook_stats(net, lp_dtype, data) == want


def _uniform(*shape) -> np.ndarray:
    return np.random.RandomState(0).uniform(-1, 1, shape).astype("float32")


class _BasicNet(nn.HybridBlock):
    def __init__(self):
        super().__init__()
        with self.name_scope():
            self.fc1 = nn.Dense(4)
            self.fc2 = nn.Dense(4)

    def hybrid_forward(self, F, x):
        return self.fc2(self.fc1(x)).reshape((-1, 2, 2))


@pytest.mark.parametrize("lp_dtype", DTYPES)
def test_amp_basic_use(lp_dtype):
    """``test_amp_basic_use``: two Dense and a reshape, converted with defaults: the data and
    each weight and bias cast once to low precision, one cast of the output back; eight low
    precision tensors (five cast outputs, two FC outputs, the reshape)."""
    net = _BasicNet()
    net.initialize()
    data = _uniform(4, 4)
    ref = net(mx.nd.array(data)).asnumpy()
    # master's defaults: weights stay float32 and are cast in the graph (ours store them in
    # low precision by default, a documented difference)
    net = amp.convert_hybrid_block(net, target_dtype=lp_dtype, cast_optional_params=False)
    check_amp_net_stats(lp_dtype, net, data, lp16_tensors_num=1 + 3 + 3 + 1,
                        lp16_casts_num=1 + 2 + 2, other_casts_num=1)
    emulated = amp.emulate_block(net)(mx.nd.array(data)).asnumpy()
    np.testing.assert_allclose(emulated, ref, atol=0.05)


class _OfflineNet(nn.HybridBlock):
    def __init__(self):
        super().__init__()
        with self.name_scope():
            self.lp16_op1 = nn.Conv2D(4, 3, prefix="lp16_op1_")
            self.lp16_op2 = nn.Conv2DTranspose(4, 3, prefix="lp16_op2_")
            self.fp32_op = nn.Dense(4, prefix="fp32_op_")

    def hybrid_forward(self, F, x):
        x = self.lp16_op2(self.lp16_op1(x))
        return self.fp32_op(x.reshape((0, -1)))


def _fc_node_names(net) -> list[str]:
    """Names of the FullyConnected nodes of a (hybridized, run) block's graph."""
    return [n["name"] for n in nodes(block_model(net)[0]) if n["op"] == "FullyConnected"]


@pytest.mark.parametrize("keep_fp32", ["fp32_ops", "excluded_sym_names"])
@pytest.mark.parametrize("lp_dtype", DTYPES)
def test_amp_offline_casting(lp_dtype, keep_fp32):
    """``test_amp_offline_casting``: Conv2D and Conv2DTranspose in low precision, the Dense
    in fp32, params cast offline: only the data is cast to low precision and the reshaped
    deconvolution output back; every param but the fp32 op's is stored in low precision.
    An earlier master keeps the Dense in fp32 with ``fp32_ops=['FullyConnected']`` (and
    ``target_dtype_ops=['Convolution']``); the latest wraps it in
    ``OptConstraint.disable_amp()``, which 1.9.1 lacks: its 1.9 equivalent is naming the
    node in ``excluded_sym_names``. Both are run."""
    net = _OfflineNet()
    net.initialize()
    data = _uniform(4, 3, 16, 16)
    net(mx.nd.array(data))  # master passes data_example to convert_hybrid_block for this
    net.hybridize()
    net(mx.nd.array(data))
    if keep_fp32 == "fp32_ops":
        options = dict(target_dtype_ops=["Convolution"], fp32_ops=["FullyConnected"])
    else:
        options = dict(excluded_sym_names=_fc_node_names(net))
    lp_net = amp.convert_hybrid_block(net, target_dtype=lp_dtype, cast_optional_params=True, **options)
    check_amp_net_stats(lp_dtype, lp_net, data, lp16_tensors_num=4, lp16_casts_num=1,
                        other_casts_num=1)
    for name, param in lp_net.collect_params().items():
        assert array_dtype(param.data()) == ("float32" if "fp32_op" in name else lp_dtype), name


class _SharedNet(nn.HybridBlock):
    """Master's net sharing params: both FCs read one weight, the fp32 Conv1D reads the
    second FC's bias. Declared as explicit params (1.9 Gluon has no ``share_parameters``)."""

    def __init__(self, size: int = 4):
        super().__init__(prefix="sharednet_")
        self.size = size
        with self.name_scope():
            self.w_shared = self.params.get("lp16_op1_weight", shape=(size, size))
            self.b1 = self.params.get("lp16_op1_bias", shape=(size,))
            self.b_shared = self.params.get("lp16_op2_bias", shape=(size,))
            self.conv_w = self.params.get("fp32_op_weight", shape=(size, 1, 3))

    def hybrid_forward(self, F, x, w_shared, b1, b_shared, conv_w):
        x = F.FullyConnected(x, w_shared, b1, num_hidden=self.size, name="lp16_op1")
        x1 = F.FullyConnected(x, w_shared, b_shared, num_hidden=self.size, name="lp16_op2")
        x2 = F.Convolution(F.expand_dims(x, axis=1), conv_w, b_shared, kernel=(3,),
                           num_filter=self.size, name="fp32_op")
        return F.concat(x1, F.flatten(x2), dim=1)


@pytest.mark.deliberate_difference(
    reason="a param read by a float32 op stays float32 with cast_optional_params (README, "
           "Params), and widest ops unify inputs with amp_multicast (docs/lists.md); MXNet 2 "
           "stores the shared bias in low precision and casts it back for the fp32 op")
@pytest.mark.parametrize("lp_dtype", DTYPES)
def test_amp_offline_casting_shared_params(lp_dtype):
    """``test_amp_offline_casting_shared_params``: FullyConnected in low precision, the
    Convolution in fp32, params cast offline, one weight shared by the two FCs and one bias
    shared by an FC and the Convolution. The shared FC weight is stored in low precision;
    the bias shared with the fp32 Convolution stays float32 and is cast once for its FC
    (master stores it in low precision, counting a second cast back to float32), and the
    concat of the low precision FC and the fp32 branch is unified by an amp_multicast.
    Low precision tensors: the data and bias casts, both FC outputs, the expand_dims."""
    net = _SharedNet()
    net.initialize()
    data = _uniform(4, 4)
    ref = net(mx.nd.array(data)).asnumpy()
    lp_net = amp.convert_hybrid_block(net, target_dtype=lp_dtype, target_dtype_ops=["FullyConnected"],
                                      fp32_ops=["Convolution"], cast_optional_params=True)
    check_amp_net_stats(lp_dtype, lp_net, data, lp16_tensors_num=5, lp16_casts_num=2,
                        other_casts_num=1)
    dtypes = {name: array_dtype(p.data()) for name, p in lp_net.collect_params().items()}
    assert dtypes == {"sharednet_lp16_op1_weight": lp_dtype, "sharednet_lp16_op1_bias": lp_dtype,
                      "sharednet_lp16_op2_bias": "float32", "sharednet_fp32_op_weight": "float32"}
    np.testing.assert_allclose(amp.emulate_block(lp_net)(mx.nd.array(data)).asnumpy(), ref, atol=0.05)


class _OrderNet(nn.HybridBlock):
    def __init__(self, follow_first: bool):
        super().__init__()
        self.follow_first = follow_first
        with self.name_scope():
            self.dense = nn.Dense(4)

    def hybrid_forward(self, F, x):
        x = 2 ** x
        if self.follow_first:
            return F.flatten(x), self.dense(x)
        return self.dense(x), F.flatten(x)


@pytest.mark.deliberate_difference(
    reason="a follow op reads its input as produced (float32 here); MXNet 2 runs it on the "
           "low precision copy made for the Dense, hence its counts (3, 1, 2)")
@pytest.mark.parametrize("lp_dtype", DTYPES)
def test_lp16_fp32_ops_order_independence(lp_dtype):
    """``test_lp16_fp32_ops_order_independence``: a follow op (``flatten``) and a low
    precision op (``Dense``) read the same fp32 tensor (``2 ** x``, fp32 in both lists); the
    conversion must not depend on which comes first in the graph. Here: one cast of
    ``2 ** x`` to low precision for the Dense (whose params are stored in low precision), the
    Dense output cast back; flatten runs in float32 on the original."""
    data = _uniform(4, 16)
    stats = []
    for follow_first in (False, True):
        net = _OrderNet(follow_first)
        net.initialize()
        net(mx.nd.array(data))
        lp_net = amp.convert_hybrid_block(net, target_dtype=lp_dtype, cast_optional_params=True)
        check_amp_net_stats(lp_dtype, lp_net, data, lp16_tensors_num=2, lp16_casts_num=1,
                            other_casts_num=1)
        stats.append(net_stats(block_model(lp_net)[0], lp_dtype))
    assert stats[0] == stats[1]


@pytest.mark.parametrize("lp_dtype", DTYPES)
def test_amp_node_excluding(lp_dtype):
    """``test_amp_node_excluding`` (latest master): two FCs sharing data, weight and bias.
    Master excludes ``fc1`` with a node attribute (``__opt_constraint__``, which 1.9.1 does
    not have), then both with ``excluded_sym_names=['fc1', 'fc2']``; here ``fc1`` is excluded
    with ``excluded_sym_names=['fc1']``, then both. One excluded: the data, weight and bias
    cast once each for fc2, its output cast back; both excluded: no cast at all."""
    data = mx.sym.var("data", dtype="float32")
    weight, bias = mx.sym.var("weights"), mx.sym.var("bias")
    fc1 = mx.sym.FullyConnected(data, weight, bias, num_hidden=4, name="fc1")
    fc2 = mx.sym.FullyConnected(data, weight, bias, num_hidden=4, name="fc2")
    net = mx.gluon.SymbolBlock(mx.sym.Group([fc1, fc2]), [data])
    net.initialize()
    example = _uniform(4, 16)
    net(mx.nd.array(example))
    one = amp.convert_hybrid_block(net, target_dtype=lp_dtype, excluded_sym_names=["fc1"])
    check_amp_net_stats(lp_dtype, one, example, lp16_tensors_num=4, lp16_casts_num=3,
                        other_casts_num=1)
    both = amp.convert_hybrid_block(net, target_dtype=lp_dtype, excluded_sym_names=["fc1", "fc2"])
    check_amp_net_stats(lp_dtype, both, example, lp16_tensors_num=0, lp16_casts_num=0,
                        other_casts_num=0)
