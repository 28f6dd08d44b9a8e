"""mxnet_amp.pipeline: the conversion's pass list, its run into a Conversion record, and the
steps before it (BatchNorm folding, weights float16 cannot hold)."""
import mxnet as mx
import numpy as np
import pytest

from mxnet_amp.errors import ParamError, PassOrderError
from mxnet_amp.ir.graph import CAST_OPS
from mxnet_amp.mx.io import graph_from_symbol
from mxnet_amp.options import make_options
from mxnet_amp.passes.kernel import PassResult, run_passes
from mxnet_amp.pipeline import (ORDER, CastRounds, FoldModel, GuardFusion, GuardWeightRange, Prepared,
                                SlowKernels, TagStoredDtypes, conversion_passes, convert_passes,
                                fold_model, prepare_passes, range_kept)

from helpers import small_model


def dtypes_of(sym, data_names=("data",)):
    """``(data dtypes, stored weight dtypes)`` as the conversion starts: everything float32."""
    graph = graph_from_symbol(sym)
    data = {n.name: "float32" for n in graph.variables() if n.name in data_names}
    stored = {n.name: "float32" for n in graph.variables() if n.name not in data_names}
    return graph, data, stored


def test_conversion_passes_come_in_order_each_reading_the_record_before():
    """The slow-kernel rule, the casts, the fusion guard, the dtype tags: each pass reads
    the record of the one before (the cast pass's stored dtypes reach the tags through its
    CastResult), and the caller's dict of stored dtypes is not written."""
    graph, data, stored = dtypes_of(small_model()[0])
    given = dict(stored)
    passes = conversion_passes("float16", data, stored, None)
    assert [type(p) for p in passes] == [SlowKernels, CastRounds, GuardFusion, TagStoredDtypes]
    run = run_passes(PassResult(graph, Prepared(make_options("float16")), False), passes, ORDER)
    assert run.names == ("slow_kernels", "insert_casts", "insert_fusion_barriers", "tag_param_dtypes")
    casts = run.result("insert_casts").decided
    assert casts.stored_dtypes["conv1_weight"] == "float16" and stored == given
    assert run.results[-1].decided is casts     # float16: no barriers, the same record on
    tags = {n.name: n.attrs.get("__dtype__") for n in run.graph.variables()}
    assert tags["conv1_weight"] == "2" and tags["bn1_gamma"] == "0"   # MXNet's dtype codes


def test_the_declared_order_is_checked_before_any_pass_runs():
    """A list that puts the tags before the casts is refused, naming both passes."""
    graph, data, stored = dtypes_of(small_model()[0])
    slow, casts, guard, tags = conversion_passes("float16", data, stored, None)
    with pytest.raises(PassOrderError, match="insert_casts must run before pass insert_fusion_barriers"):
        run_passes(PassResult(graph, Prepared(make_options("float16")), False), [slow, guard, casts, tags], ORDER)


def test_prepare_passes_fold_then_guard_the_weight_range():
    """Folding (where asked) then the float16 weight-range guard, each handing on a Prepared
    record: the folded params, then the options keeping the readers of a weight float16
    cannot hold."""
    sym, args, auxs = small_model()
    big = dict(args, fc_weight=mx.nd.array(np.full(args["fc_weight"].shape, 1e6, "float32")))
    options = make_options("float16")
    steps = prepare_passes(options)
    assert [type(p) for p in steps] == [FoldModel, GuardWeightRange]
    assert [type(p) for p in prepare_passes(make_options("float16", fold_batchnorm=False))] == [GuardWeightRange]
    run = run_passes(PassResult(graph_from_symbol(sym), Prepared(options, big, auxs), False), steps, ORDER)
    prepared = run.results[-1].decided
    assert prepared.folded == (("bn1", "conv1"),) and "bn1_gamma" not in prepared.arg_params
    assert list(prepared.options.fp32_nodes) == ["fc"] and "fc_weight" in prepared.options.fp32_nodes["fc"]
    assert options.fp32_nodes == {}     # the options given are not changed


def test_convert_passes_stores_weights_in_the_dtype_their_readers_want():
    """float16: the conv weights are stored float16, the BatchNorm's float32, and type inference agrees."""
    graph, data, stored = dtypes_of(small_model()[0])
    conversion = convert_passes(graph, make_options("float16"), ["data"], data, stored, None)
    final = conversion.param_dtypes
    assert final["conv1_weight"] == "float16" and final["fc_weight"] == "float16"
    assert final["bn1_gamma"] == "float32" and set(stored.values()) == {"float32"}
    record = conversion.params["conv1_weight"]
    assert (record.given, record.stored, record.bound) == ("float32", "float16", "float16")
    assert conversion.data_names == ("data",) and conversion.input_dtypes["data"] == "float32"
    assert any(n.op in CAST_OPS for n in conversion.graph.nodes)
    assert conversion.original is graph


def test_without_cast_optional_params_every_weight_stays_float32():
    """cast_optional_params off: weights keep float32 and are cast at each run instead."""
    graph, data, stored = dtypes_of(small_model()[0])
    conversion = convert_passes(graph, make_options("float16", cast_optional_params=False),
                                ["data"], data, stored, None)
    assert set(stored.values()) == {"float32"}
    assert {r.stored for r in conversion.params.values()} == {"float32"}


def test_an_int_weight_read_as_float_is_a_param_error_naming_it():
    """An int32 FullyConnected weight fails type inference: ParamError names the param and its reader."""
    sym = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=2, name="fc")
    graph, data, stored = dtypes_of(sym)
    stored["fc_weight"] = "int32"
    with pytest.raises(ParamError, match="param fc_weight is int32, but fc"):
        convert_passes(graph, make_options("float16", cast_optional_params=False), ["data"], data, stored, None)


def test_fold_model_folds_batchnorm_into_the_convolution():
    """bn1 folds into conv1: its params leave, conv1's weight is scaled, the inputs are untouched."""
    sym, args, auxs = small_model()
    graph = graph_from_symbol(sym)
    weight = args["conv1_weight"].asnumpy()
    model = fold_model(graph, args, auxs)
    new_graph, new_args, new_aux, folded, kept = (model.graph, model.arg_params, model.aux_params,
                                                  model.folded, model.kept)
    assert folded == (("bn1", "conv1"),) and kept == ()
    assert not any(n.op == "BatchNorm" for n in new_graph.nodes)
    assert new_aux == {} and "bn1_gamma" not in new_args
    assert isinstance(new_args["conv1_weight"], np.ndarray)   # numpy until written
    assert not np.allclose(new_args["conv1_weight"], weight)
    assert new_args["fc_weight"] is args["fc_weight"]   # unchanged arrays are shared
    assert "bn1_moving_mean" in auxs and "bn1_gamma" in args
    np.testing.assert_array_equal(args["conv1_weight"].asnumpy(), weight)
    again = fold_model(graph, args, auxs, keep={"bn1": "named"})
    assert again.folded == () and again.kept and again.kept[0][0] == "bn1"


def test_range_kept_keeps_readers_of_a_weight_float16_cannot_hold():
    """A weight of 1e6 keeps its reader float32 under float16, with a warning instead when the guard is off."""
    sym, args, auxs = small_model()
    graph = graph_from_symbol(sym)
    big = dict(args, fc_weight=mx.nd.array(np.full(args["fc_weight"].shape, 1e6, "float32")))
    assert range_kept(graph, args, auxs, make_options("float16")) == {}
    kept = range_kept(graph, big, auxs, make_options("float16"))
    assert list(kept) == ["fc"] and "fc_weight" in kept["fc"]
    with pytest.warns(UserWarning, match="guard_weight_range off"):
        assert range_kept(graph, big, auxs, make_options("float16", guard_weight_range=False)) == {}
    assert range_kept(graph, big, auxs, make_options("bfloat16")) == {}
