"""One record of each param's dtypes (``Conversion.params``: given, stored, bound, why) and
one way to recast the arrays to them (``Conversion.recast``), whoever recasts: the older
maps (``param_dtypes``, ``arg_dtypes``, ``aux_dtypes``, ``input_param_dtypes``) are views."""
import mxnet as mx
import numpy as np

from mxnet_amp.convert import convert_model_full
from mxnet_amp.ir.dtypes import array_dtype
from mxnet_amp.options import make_options
from mxnet_amp.record import ParamRecord

from helpers import init_params


def _model():
    """fc1 (float16) -> softmax (float32) -> fc2 (float16), and a BatchNorm kept (no
    folding) whose params only a float32-computing op reads."""
    x = mx.sym.var("data")
    h = mx.sym.FullyConnected(x, num_hidden=6, name="fc1")
    h = mx.sym.softmax(h, name="sm")
    h = mx.sym.FullyConnected(h, num_hidden=4, name="fc2")
    return mx.sym.BatchNorm(h, name="bn")


def _converted():
    sym = _model()
    args, auxs = init_params(sym, {"data": (2, 5)})
    options = make_options("float16", fold_batchnorm=False)
    return (sym, args, auxs) + tuple(convert_model_full(sym, args, auxs, options, cast_params=False))


def test_each_param_has_one_record_and_the_old_maps_are_views_of_it():
    sym, args, auxs, _, _, _, conv = _converted()
    low = conv.params["fc1_weight"]
    assert low == ParamRecord("float32", "float16", "float16", low.why) and "cast_optional_params" in low.why
    kept = conv.params["bn_moving_var"]
    assert kept == ParamRecord("float32", "float32", "float32", "stored as given")
    assert set(conv.params) == set(args) | set(auxs)
    assert conv.param_dtypes == {k: r.stored for k, r in conv.params.items()}
    assert conv.input_param_dtypes == {k: "float32" for k in conv.params}
    assert conv.arg_dtypes == {"data": "float32", **{k: conv.params[k].bound for k in args}}
    assert list(conv.arg_dtypes) == sym.list_arguments()
    assert conv.aux_dtypes == {k: conv.params[k].bound for k in auxs}
    assert conv.variable_dtypes == {**conv.arg_dtypes, **conv.aux_dtypes}


def test_recast_gives_the_same_arrays_in_place_and_not():
    _, args, auxs, _, new_args, new_auxs, conv = _converted()
    assert all(array_dtype(v) == "float32" for v in new_args.values())   # cast_params=False
    cast_args, cast_auxs = conv.recast(new_args, new_auxs)
    assert {k: array_dtype(v) for k, v in {**cast_args, **cast_auxs}.items()} == conv.param_dtypes
    assert all(array_dtype(v) == "float32" for v in new_args.values())   # inputs untouched
    seen = []
    in_args, in_auxs = dict(new_args), dict(new_auxs)
    out_args, out_auxs = conv.recast(in_args, in_auxs, in_place=True,
                                     each=lambda name, before, after: seen.append(name))
    assert out_args is in_args and out_auxs is in_auxs
    assert seen == list(new_args) + list(new_auxs)
    for k, v in {**cast_args, **cast_auxs}.items():
        got = {**out_args, **out_auxs}[k]
        assert array_dtype(got) == array_dtype(v)
        np.testing.assert_array_equal(got.astype("float32").asnumpy(), v.astype("float32").asnumpy())
