"""Every entry point stores weights in low precision unless told cast_optional_params=False
(a deliberate difference from mx.contrib.amp, whose default keeps them float32)."""
from __future__ import annotations

import os

import mxnet as mx
import numpy as np
import pytest

import mxnet_amp as amp
from mxnet_amp.ir.dtypes import array_dtype

from helpers import gluoncv_resnet18, rel_error, run, small_model


def _weight_dtypes(params):
    return {k: array_dtype(v) for k, v in params.items()}


@pytest.fixture(scope="module")
def resnet18_checkpoint(tmp_path_factory):
    sym, args, auxs, x = gluoncv_resnet18()
    prefix = str(tmp_path_factory.mktemp("r18") / "resnet18")
    mx.model.save_checkpoint(prefix, 0, sym, args, auxs)
    return prefix, sym, args, auxs, x


def test_resnet18_checkpoint_half_the_size(resnet18_checkpoint):
    """convert_checkpoint's default: conv / dense weights in bfloat16, BatchNorm's in float32;
    the params file is about half the fp32 one."""
    prefix, sym, args, auxs, x = resnet18_checkpoint
    conv, new_args, new_auxs, sizes = amp.convert_checkpoint(prefix, 0, prefix + "-bf16",
                                                             target_dtype="bfloat16",
                                                             fold_batchnorm=False)
    dtypes = _weight_dtypes({**new_args, **new_auxs})
    assert all(d == "bfloat16" for k, d in dtypes.items() if k.endswith(("conv0_weight", "dense0_weight")))
    assert all(d == "float32" for k, d in dtypes.items() if "batchnorm" in k)
    ratio = os.path.getsize(prefix + "-bf16-0000.params") / os.path.getsize(prefix + "-0000.params")
    assert 0.48 < ratio < 0.52, ratio
    assert 0.48 < sizes["param_bytes_after"] / sizes["param_bytes_before"] < 0.52
    # the model as written computes what the float32-weight conversion computes
    s, a, b = amp.load_checkpoint(prefix + "-bf16", 0)
    plain = amp.convert_model(sym, args, auxs, target_dtype="bfloat16", cast_optional_params=False,
                              fold_batchnorm=False)
    assert _weight_dtypes(plain[1]) == {k: "float32" for k in args}
    xs = {"data": x.asnumpy()}
    np.testing.assert_array_equal(run(*amp.emulate_model(s, a, b), xs)[0],
                                  run(*amp.emulate_model(*plain), xs)[0])
    assert rel_error(run(*amp.emulate_model(s, a, b), xs)[0], run(sym, args, auxs, xs)[0]) < 5e-2


def _stored_low(params, dtype):
    return sorted(k for k, d in _weight_dtypes(params).items() if d == dtype)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_every_entry_point_defaults_to_low_precision_weights(dtype, tmp_path):
    """convert_model, convert_symbol, convert_block, auto_convert_model and the CLI agree:
    the weights only low precision ops read (conv1, conv2, fc) are stored in ``dtype``
    (convert_symbol, which has no params to cast, when asked: its default is contrib's)."""
    from mxnet.gluon import SymbolBlock
    from mxnet_amp.cli.main import main
    sym, args, auxs = small_model()
    want = ["conv1_bias", "conv1_weight", "conv2_bias", "conv2_weight", "fc_bias", "fc_weight"]
    _, new_args, new_auxs = amp.convert_model(sym, args, auxs, target_dtype=dtype)
    assert _stored_low({**new_args, **new_auxs}, dtype) == want
    # convert_symbol: the symbol expects those weights in dtype
    csym = amp.convert_symbol(sym, target_dtype=dtype, data_names=["data"], cast_optional_params=True)
    arg_types, _, _ = csym.infer_type(data="float32")
    typed = dict(zip(csym.list_arguments(), arg_types))
    assert sorted(k for k in want if np.dtype(typed[k]).itemsize == 2) == want
    # convert_block
    block = SymbolBlock(sym, mx.sym.var("data"))
    block.collect_params().load_dict({**args, **auxs}, ctx=mx.cpu())
    converted = amp.convert_block(block, target_dtype=dtype)
    assert _stored_low({k: p.data() for k, p in converted.collect_params().items()}, dtype) == want
    # auto_convert_model
    x = np.random.default_rng(0).uniform(-1, 1, (2, 3, 8, 8)).astype("float32")
    _, auto_args, auto_auxs, _ = amp.auto_convert_model(sym, args, auxs, {"data": x},
                                                        target_dtype=dtype, quiet=True)
    assert _stored_low({**auto_args, **auto_auxs}, dtype) == want
    # the CLI, and its --no-cast-optional-params
    prefix = str(tmp_path / "m")
    mx.model.save_checkpoint(prefix, 0, sym, args, auxs)
    for flag, expected in (([], want), (["--no-cast-optional-params"], [])):
        assert main(["convert", prefix, "--target-dtype", dtype, "--out", prefix + "-o", "-q", *flag]) == 0
        _, a, b = amp.load_checkpoint(prefix + "-o", 0)
        assert _stored_low({**a, **b}, dtype) == expected


def _two_rounds(conversion, data_names):
    """What a second insert_casts round over the stored dtypes gives."""
    from mxnet_amp.passes.insert_casts import insert_casts
    return insert_casts(conversion.original, conversion.policy,
                        data_dtypes={n: "float32" for n in data_names},
                        param_dtypes=conversion.param_dtypes)


@pytest.mark.parametrize("model", ["small", "resnet18", "shared_weight"])
def test_one_round_gives_what_two_rounds_give(model):
    """cast_optional_params skips the second cast-insertion round when the first is final:
    graph, node dtypes, casts and fallbacks are what the second round would give (the
    shared weight, wanted in two dtypes, is the case where round one is not final)."""
    from mxnet_amp.convert import convert_model_full
    from mxnet_amp.options import make_options
    if model == "small":
        sym, args, auxs = small_model()
    elif model == "resnet18":
        sym, args, auxs, _ = gluoncv_resnet18()
    else:
        x, w = mx.sym.var("data"), mx.sym.var("w")
        sym = mx.sym.Group([mx.sym.FullyConnected(x, w, num_hidden=4, no_bias=True, name="fc"),
                            mx.sym.exp(w, name="wexp")])
        from helpers import init_params
        args, auxs = init_params(sym, {"data": (2, 8)})
    for dtype in ("float16", "bfloat16"):
        _, _, _, conv = convert_model_full(sym, args, auxs, make_options(dtype))
        again = _two_rounds(conv, conv.data_names)
        assert again.graph == conv.result.graph   # before the __dtype__ tags
        assert dict(again.node_dtypes) == dict(conv.result.node_dtypes)
        assert dict(again.tensor_dtypes) == dict(conv.result.tensor_dtypes)
        assert (again.casts, again.multicasts, again.fallbacks) == \
            (conv.result.casts, conv.result.multicasts, conv.result.fallbacks)
