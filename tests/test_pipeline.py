"""mxnet_amp.pipeline: the conversion's pass list, its run into a Conversion record, and the
steps before it (BatchNorm folding, weights float16 cannot hold)."""
import mxnet as mx
import numpy as np
import pytest

from mxnet_amp.errors import ParamError
from mxnet_amp.graph import CAST_OPS
from mxnet_amp.io import graph_from_symbol
from mxnet_amp.options import make_options
from mxnet_amp.pipeline import (CastRounds, GuardFusion, conversion_passes, convert_passes, fold_model,
                                range_kept)

from helpers import small_model


def dtypes_of(sym, data_names=("data",)):
    """``(data dtypes, stored weight dtypes)`` as the conversion starts: everything float32."""
    graph = graph_from_symbol(sym)
    data = {n.name: "float32" for n in graph.variables() if n.name in data_names}
    stored = {n.name: "float32" for n in graph.variables() if n.name not in data_names}
    return graph, data, stored


def test_conversion_passes_come_in_order_sharing_the_stored_dtypes():
    """Casts, then the fusion guard reading the cast rounds, then the dtype tags."""
    graph, data, stored = dtypes_of(small_model()[0])
    casts, guard, tags = conversion_passes(make_options("float16"), data, stored, None)
    assert isinstance(casts, CastRounds) and isinstance(guard, GuardFusion) and guard.casts is casts
    assert [p.name for p in (casts, guard)] == ["insert_casts", "insert_fusion_barriers"]
    assert casts.stored is stored


def test_convert_passes_stores_weights_in_the_dtype_their_readers_want():
    """float16: the conv weights are stored float16, the BatchNorm's float32, and type inference agrees."""
    graph, data, stored = dtypes_of(small_model()[0])
    conversion = convert_passes(graph, make_options("float16"), ["data"], data, stored, None)
    assert stored["conv1_weight"] == "float16" and stored["fc_weight"] == "float16"
    assert stored["bn1_gamma"] == "float32"
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
    new_graph, new_args, new_aux, folded, kept = fold_model(graph, args, auxs)
    assert folded == (("bn1", "conv1"),) and kept == ()
    assert not any(n.op == "BatchNorm" for n in new_graph.nodes)
    assert new_aux == {} and "bn1_gamma" not in new_args
    assert isinstance(new_args["conv1_weight"], np.ndarray)   # numpy until written
    assert not np.allclose(new_args["conv1_weight"], weight)
    assert new_args["fc_weight"] is args["fc_weight"]   # unchanged arrays are shared
    assert "bn1_moving_mean" in auxs and "bn1_gamma" in args
    np.testing.assert_array_equal(args["conv1_weight"].asnumpy(), weight)
    _, _, _, folded_kept, kept = fold_model(graph, args, auxs, keep={"bn1": "named"})
    assert folded_kept == () and kept and kept[0][0] == "bn1"


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
