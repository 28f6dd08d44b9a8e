"""Fusion barriers (passes/fusion_barriers.py): MXNet 1.9.1's oneDNN conv fusion hands every
reader of a shared convolution output the fused op's output; a bfloat16 conversion puts an
identity ``amp_cast`` in front of the fusable readers so every deploy path computes the model.

The MXNet bug and the fix are shown on float32 graphs (oneDNN fuses float32 on every x86 CPU,
so these run everywhere); the converted bfloat16 model runs natively where the CPU can.
"""
from __future__ import annotations

import json

import mxnet as mx
import numpy as np
import pytest

import mxnet_amp as amp
from mxnet_amp.convert import convert_model_full
from mxnet_amp.mx.hardware import bf16_runs_natively
from mxnet_amp.mx.io import graph_from_symbol, graph_to_symbol
from mxnet_amp.options import make_options
from mxnet_amp.passes.fusion_barriers import BARRIER_SUFFIX, guarded_readers, insert_fusion_barriers
from mxnet_amp.passes.strip_casts import strip_casts
from mxnet_amp.report.model import build_report
from mxnet_amp.report.pages import format_table

from helpers import init_params, rel_error, run

SHAPE = (2, 8, 8, 8)


def _conv(x, name):
    return mx.sym.Convolution(x, num_filter=8, kernel=(3, 3), pad=(1, 1), name=name)


def _relu_and_raw():
    """relu(conv) + conv: the conv's output read by a fusable op and by another."""
    c = _conv(mx.sym.var("data"), "c0")
    return mx.sym.elemwise_add(mx.sym.Activation(c, act_type="relu", name="r") * 1.0, c, name="out")


def _bn_and_head():
    """[BatchNorm(conv), conv]: the conv's output is also a model output."""
    c = _conv(mx.sym.var("data"), "c0")
    return mx.sym.Group([mx.sym.BatchNorm(c, fix_gamma=False, name="bn"), c])


def _stem_like_cifar_v2():
    """gluoncv's cifar_resnet v2 stem: conv -> (BatchNorm -> relu -> conv) + conv."""
    c0 = _conv(mx.sym.var("data"), "c0")
    r = mx.sym.Activation(mx.sym.BatchNorm(c0, fix_gamma=False, name="bn"), act_type="relu")
    return mx.sym.elemwise_add(_conv(r, "c1"), c0, name="plus")


def _model(sym, seed=0):
    args, auxs = init_params(sym, {"data": SHAPE}, seed=seed, scale=1.0)
    x = np.random.RandomState(seed + 1).randn(*SHAPE).astype("float32")
    return args, auxs, {"data": x}


def _both_paths(monkeypatch, sym, args, auxs, inputs):
    """(unfused outputs, fused outputs): MXNet's default oneDNN subgraph backend or none."""
    monkeypatch.setenv("MXNET_SUBGRAPH_BACKEND", "NONE")
    plain = run(sym, args, auxs, inputs)
    monkeypatch.delenv("MXNET_SUBGRAPH_BACKEND")
    return plain, run(sym, args, auxs, inputs)


def _worst(a, b):
    return max(rel_error(x, y) for x, y in zip(a, b))


def _fc_gelu_and_head():
    """[gelu(FC), FC]: a FullyConnected output that is also a model output."""
    f = mx.sym.FullyConnected(mx.sym.flatten(mx.sym.var("data")), num_hidden=8, name="c0")
    return mx.sym.Group([mx.sym.LeakyReLU(f, act_type="gelu"), f])


@pytest.mark.parametrize("build", [_relu_and_raw, _bn_and_head, _stem_like_cifar_v2, _fc_gelu_and_head])
def test_mxnet_fusion_misconnects_a_shared_conv_and_the_barrier_fixes_it(monkeypatch, build):
    sym = build()
    args, auxs, inputs = _model(sym)
    plain, fused = _both_paths(monkeypatch, sym, args, auxs, inputs)
    # the MXNet 1.9.1 bug this pass exists for, in float32
    assert _worst(plain, fused) > 0.05
    guarded = insert_fusion_barriers(graph_from_symbol(sym), {})
    assert guarded.changed and [c for c, _ in guarded.decided.guarded] == ["c0"]
    gsym = graph_to_symbol(guarded.graph)
    gplain, gfused = _both_paths(monkeypatch, gsym, args, auxs, inputs)
    assert _worst(gplain, plain) < 1e-6      # the barrier is an identity
    assert _worst(gfused, plain) < 1e-5      # and the fused path now computes the model


def test_a_conv_read_once_or_by_unfusable_ops_only_gets_no_barrier():
    d = mx.sym.var("data")
    single = mx.sym.Activation(_conv(d, "c0"), act_type="relu")      # fuses correctly
    c = _conv(d, "c1")
    unfusable = mx.sym.elemwise_mul(mx.sym.Pooling(c, kernel=(2, 2), pool_type="max"),
                                    mx.sym.Pooling(c, kernel=(2, 2), pool_type="avg"))
    fc = mx.sym.FullyConnected(d, num_hidden=4, name="fc")   # FC's fusion keeps fan-out right
    shared_fc = mx.sym.elemwise_add(mx.sym.Activation(fc, act_type="relu"), fc)
    for sym in (single, unfusable, shared_fc):
        graph = graph_from_symbol(sym)
        assert guarded_readers(graph) == {}
        result = insert_fusion_barriers(graph, {})
        assert not result.changed and result.graph is graph


def test_bfloat16_conversion_guards_and_reports_it_float16_does_not():
    sym = _stem_like_cifar_v2()
    args, auxs, _ = _model(sym)
    csym, cargs, cauxs, conv = convert_model_full(sym, args, auxs, make_options("bfloat16"))
    nodes = json.loads(csym.tojson(remove_amp_cast=False))["nodes"]
    barriers = [n for n in nodes if n["name"].endswith(BARRIER_SUFFIX)]
    assert len(barriers) == 1 and barriers[0]["op"] == "amp_cast"
    assert barriers[0]["attrs"]["dtype"] == "bfloat16"     # the conv computes in bfloat16
    reader = next(n for n in nodes if n["name"] == "bn")
    assert nodes[reader["inputs"][0][0]]["name"] == "c0" + BARRIER_SUFFIX
    assert conv.fusion_barriers == (("c0", ("bn", "plus")),)
    report = build_report(conv, args, auxs, cargs, cauxs)
    assert report.fusion_barriers == ("c0",) and report.to_dict()["fusion_barriers"] == ["c0"]
    assert "Fusion barriers" in format_table(report) and "c0" in format_table(report)
    assert report.casts == sum(1 for n in nodes if n["op"] == "amp_cast")   # barriers counted
    # the conversion's own count is the report's: both read the record of inserted casts
    assert conv.result.casts == report.casts and conv.result.multicasts == report.multicasts
    # float16 runs on GPUs, where MXNet fuses nothing of the kind
    _, _, _, conv16 = convert_model_full(sym, args, auxs, make_options("float16"))
    assert conv16.fusion_barriers == ()
    assert not any(n.name.endswith(BARRIER_SUFFIX) for n in conv16.graph.nodes)
    # the barrier changes no value: the graph without casts is the float32 model
    assert [n.op for n in strip_casts(conv.graph).nodes if n.op != "null"] == \
        [n.op for n in graph_from_symbol(sym).nodes if n.op != "null"]   # the BatchNorm is kept


@pytest.mark.skipif(not bf16_runs_natively(), reason="this CPU does not run bfloat16 natively")
def test_converted_bfloat16_model_is_right_on_the_fused_path(monkeypatch):
    sym = _stem_like_cifar_v2()
    args, auxs, inputs = _model(sym)
    monkeypatch.setenv("MXNET_SUBGRAPH_BACKEND", "NONE")
    ref = run(sym, args, auxs, inputs)
    csym, cargs, cauxs = amp.convert_model(sym, args, auxs, target_dtype="bfloat16")
    plain, fused = _both_paths(monkeypatch, csym, cargs, cauxs, inputs)
    emulated = run(*amp.emulate_model(csym, cargs, cauxs), inputs)
    assert _worst(fused, ref) <= 1.5 * _worst(emulated, ref) + 0.005
    assert _worst(plain, ref) <= 1.5 * _worst(emulated, ref) + 0.005


def test_golden_a_shared_convolution_output_reaches_its_fusable_reader_through_a_barrier():
    """Rule: a 2-d convolution read by a fusable op (Activation) and by another node gets
    an identity amp_cast to its own dtype, ``<conv>_fusion_barrier``, right after it; each
    fusable reader reads the barrier, a reader the fusion cannot take (sin) still reads the
    convolution.

        conv -> Activation(relu);  conv -> sin
    """
    from golden import assert_graph, cast, graph, op, var
    from mxnet_amp.ir.graph import Entry
    conv = {"kernel": "(3, 3)", "num_filter": "4", "no_bias": "True"}
    given = graph(var("x"), var("w"), op("conv", "Convolution", "x", "w", **conv),
                  op("act", "Activation", "conv", act_type="relu"), op("s", "sin", "conv"),
                  heads=["act", "s"])
    expected = graph(var("x"), var("w"), op("conv", "Convolution", "x", "w", **conv),
                     cast("conv_fusion_barrier", "conv", "bfloat16"),
                     op("act", "Activation", "conv_fusion_barrier", act_type="relu"),
                     op("s", "sin", "conv"), heads=["act", "s"])
    result = insert_fusion_barriers(given, {Entry(2): "bfloat16"})
    assert_graph(result.graph, expected)
    assert result.decided.guarded == (("conv", ("act",)),)
    assert dict(result.decided.barrier_dtypes) == {Entry(3): "bfloat16"}
