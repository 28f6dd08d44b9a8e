"""Reshapes MXNet's oneDNN cannot run in bfloat16 (passes/onednn_reshapes.py): a reshaped 5-d
bfloat16 tensor of a 3-d convolution / pooling cannot be widened to float32 (gluoncv's
non-local I3D nets failed to bind). The conversion reshapes such a tensor in float32, after
the cast. The plan is checked on every CPU; the bind where the CPU runs bfloat16."""
from __future__ import annotations

import mxnet as mx
import numpy as np
import pytest

from mxnet_amp.convert import convert_model_full
from mxnet_amp.emulation import emulate_model
from mxnet_amp.mx.io import graph_from_symbol, graph_to_symbol
from mxnet_amp.options import make_options
from mxnet_amp.passes.insert_casts import insert_casts
from mxnet_amp.passes.onednn_reshapes import BLOCKED_RESHAPE_REASON, blocked_reshapes

from helpers import init_params, rel_error, run

SHAPE_3D = (2, 8, 2, 6, 6)


def _net(kernel, reader="batch_dot", between=None):
    """conv -> Reshape (-> between) -> reader: the reshape feeds a float32 op (batch_dot, as
    in a non-local block) or a bfloat16 one (FullyConnected)."""
    c = mx.sym.Convolution(mx.sym.var("data"), num_filter=16, kernel=kernel, name="conv")
    r = mx.sym.Reshape(c, shape=(0, 0, -1), name="reshape")
    if between is not None:
        r = between(r)
    if reader == "batch_dot":
        return mx.sym.batch_dot(r, r, transpose_b=True, name="out")
    return mx.sym.FullyConnected(r, num_hidden=4, name="out")


def _convert(sym, shape):
    args, auxs = init_params(sym, {"data": shape}, scale=1.0)
    csym, cargs, cauxs, conv = convert_model_full(sym, args, auxs, make_options("bfloat16"))
    x = np.random.RandomState(1).randn(*shape).astype("float32")
    return (sym, args, auxs), (csym, cargs, cauxs), conv, {"data": x}


@pytest.mark.parametrize("between", [None, lambda r: mx.sym.Activation(r, act_type="relu")])
def test_a_reshaped_3d_conv_output_read_in_float32_is_reshaped_in_float32(between):
    _, _, conv, _ = _convert(_net((1, 1, 1), between=between), SHAPE_3D)
    assert conv.result.node_dtypes["conv"] == "bfloat16"
    assert conv.result.node_dtypes["reshape"] == "float32"
    assert conv.result.decisions["reshape"].reason == BLOCKED_RESHAPE_REASON
    # the widening cast reads the convolution now: one cast, before the reshape
    g = conv.graph
    reshape = next(n for n in g.nodes if n.name == "reshape")
    cast = g.nodes[reshape.inputs[0].node]
    assert cast.op == "amp_cast" and cast.attrs["dtype"] == "float32"
    assert g.nodes[cast.inputs[0].node].name == "conv"


@pytest.mark.parametrize("kernel, shape, reader", [((1, 1), (2, 8, 6, 6), "batch_dot"),   # 4-d: runs
                                                    ((1, 1, 1), SHAPE_3D, "fc")])      # bf16 reader
def test_other_reshapes_stay_in_bfloat16(kernel, shape, reader):
    _, _, conv, _ = _convert(_net(kernel, reader), shape)
    assert conv.result.node_dtypes["reshape"] == "bfloat16"
    assert blocked_reshapes(conv.result) == {}


@pytest.mark.parametrize("between", [None, lambda r: mx.sym.Activation(r, act_type="relu")])
@pytest.mark.parametrize("backend", ["NONE", None])
def test_the_converted_3d_net_runs_natively_where_the_first_plan_failed(monkeypatch, native_bf16,
                                                                        backend, between):
    if not native_bf16:
        pytest.skip("this CPU cannot execute bf16 natively")
    (sym, args, auxs), (csym, cargs, cauxs), conv, inputs = _convert(_net((1, 1, 1), between=between),
                                                                      SHAPE_3D)
    if backend:
        monkeypatch.setenv("MXNET_SUBGRAPH_BACKEND", backend)
    else:
        monkeypatch.delenv("MXNET_SUBGRAPH_BACKEND", raising=False)
    # the plain plan (reshape in bfloat16) is what MXNet cannot bind
    plain = insert_casts(graph_from_symbol(sym), conv.policy, data_dtypes={"data": "float32"},
                         param_dtypes={k: "float32" for k in args})
    assert blocked_reshapes(plain) == {"reshape": BLOCKED_RESHAPE_REASON}
    with pytest.raises(mx.base.MXNetError, match="reorder primitive"):
        run(graph_to_symbol(plain.graph), args, auxs, inputs)
    ref = run(sym, args, auxs, inputs)
    native = run(csym, cargs, cauxs, inputs)
    emulated = run(*emulate_model(csym, cargs, cauxs), inputs)
    assert 0 < rel_error(native[0], ref[0]) < 0.05
    assert rel_error(native[0], emulated[0]) < 0.02
