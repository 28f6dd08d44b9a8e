"""Converted models saved the plain MXNet way (``mx.model.save_checkpoint``, ``export()`` of a
``SymbolBlock`` that is not ours, ``Symbol.save`` + ``nd.save``) lose their amp casts: MXNet
cannot bind what is left. ``mxnet_amp.load_checkpoint`` recognises such a checkpoint and
restores the casts, giving the converted graph back node for node."""
import re

import mxnet as mx
import numpy as np
import pytest

import mxnet_amp as amp
import mxnet_amp.cli.main as cli
from mxnet_amp.emulation import emulate_model
from mxnet_amp.errors import AlreadyConvertedError, StrippedCastsError
from mxnet_amp.mx.hardware import bf16_runs_natively
from mxnet_amp.mx.io import graph_from_symbol

pytestmark = [pytest.mark.filterwarnings("ignore:type inference leaves"),
              # SymbolBlock(sym, data) asks type inference with no input dtype given
              pytest.mark.filterwarnings("ignore:Cannot decide type")]

SHAPE = (2, 3, 8, 8)


def small_net():
    """conv (biased) -> BatchNorm -> relu -> pooling -> FullyConnected -> softmax."""
    rng = np.random.RandomState(0)
    h = mx.sym.Convolution(mx.sym.var("data"), kernel=(3, 3), num_filter=4, pad=(1, 1), name="conv")
    h = mx.sym.BatchNorm(h, fix_gamma=False, name="bn")
    h = mx.sym.Activation(h, act_type="relu", name="relu")
    h = mx.sym.Pooling(h, kernel=(2, 2), stride=(2, 2), pool_type="max", name="pool")
    h = mx.sym.FullyConnected(h, num_hidden=5, name="fc")
    sym = mx.sym.softmax(h, name="out")
    args = {"conv_weight": rng.randn(4, 3, 3, 3), "conv_bias": rng.randn(4),
            "bn_gamma": rng.uniform(0.5, 1.5, 4), "bn_beta": rng.randn(4),
            "fc_weight": rng.randn(5, 64) * 0.1, "fc_bias": rng.randn(5)}
    auxs = {"bn_moving_mean": rng.randn(4) * 0.1, "bn_moving_var": rng.uniform(0.5, 2, 4)}
    return (sym, {k: mx.nd.array(v) for k, v in args.items()},
            {k: mx.nd.array(v) for k, v in auxs.items()})


def save_plain(how, prefix, sym, args, auxs):
    """Save a converted model the way MXNet does by default: casts stripped."""
    if how == "save_checkpoint":
        mx.model.save_checkpoint(prefix, 0, sym, args, auxs)
    elif how == "export":
        block = mx.gluon.SymbolBlock(sym, mx.sym.var("data"))   # a plain SymbolBlock
        params = block.collect_params()
        for name, value in {**args, **auxs}.items():
            params[name].cast(value.dtype)
            params[name]._load_init(value, mx.cpu())
        # export() needs the cached graph a hybridized forward pass builds; a float16 pass
        # cannot run on a CPU, so build it without running (what a pass on a GPU does first)
        block.hybridize()
        block._build_cache(mx.nd.zeros(SHAPE))
        block.export(prefix, 0)
    else:
        sym.save(f"{prefix}-symbol.json")
        save = {f"arg:{k}": v for k, v in args.items()}
        save.update({f"aux:{k}": v for k, v in auxs.items()})
        mx.nd.save(f"{prefix}-0000.params", save)


def nodes(sym):
    return [(n.op, n.name, n.inputs, dict(n.attrs)) for n in graph_from_symbol(sym).nodes]


def outputs(sym, args, auxs, dtype, x):
    """The model's outputs: native bfloat16 where the CPU runs it, else emulated."""
    if dtype == "float16" or not bf16_runs_natively():
        sym, args, auxs = emulate_model(sym, args, auxs)
    block = mx.gluon.SymbolBlock(sym, mx.sym.var("data"))
    params = block.collect_params()
    for name, value in {**args, **auxs}.items():
        params[name].cast(value.dtype)
        params[name]._load_init(value, mx.cpu())
    return block(mx.nd.array(x)).asnumpy()


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("how", ["save_checkpoint", "export", "sym.save"])
def test_casts_are_restored_node_for_node(tmp_path, how, dtype):
    csym, cargs, cauxs = amp.convert_model(*small_net(), target_dtype=dtype)
    prefix = str(tmp_path / "m")
    save_plain(how, prefix, csym, cargs, cauxs)
    # what MXNet loads cannot be bound: the low precision weights meet float32 data
    plain, pargs, pauxs = mx.model.load_checkpoint(prefix, 0)
    assert "amp_cast" not in plain.tojson()
    with pytest.raises(mx.base.MXNetError, match="uniform type"):
        plain.infer_type(data="float32")

    sym, args, auxs = amp.load_checkpoint(prefix, 0)
    assert nodes(sym) == nodes(csym)
    assert {k: v.dtype for k, v in args.items()} == {k: v.dtype for k, v in cargs.items()}
    arg_types, _, aux_types = sym.infer_type(data="float32")
    assert arg_types is not None and aux_types is not None
    x = np.random.RandomState(1).randn(*SHAPE).astype(np.float32)
    np.testing.assert_array_equal(outputs(sym, args, auxs, dtype, x),
                                  outputs(csym, cargs, cauxs, dtype, x))


def test_excluded_nodes_are_found_from_the_float32_weights(tmp_path):
    """A model converted with ``excluded_sym_names`` has that node's weights in float32:
    its casts are restored too."""
    csym, cargs, cauxs = amp.convert_model(*small_net(), target_dtype="float16",
                                           excluded_sym_names=["fc"])
    assert cargs["fc_weight"].dtype == np.float32 and cargs["conv_weight"].dtype == np.float16
    prefix = str(tmp_path / "m")
    save_plain("save_checkpoint", prefix, csym, cargs, cauxs)
    sym, _, _ = amp.load_checkpoint(prefix, 0)
    assert nodes(sym) == nodes(csym)


def test_restore_casts_false_and_unrestorable_raise_the_typed_error(tmp_path):
    # BatchNorm kept (not folded) so that its float32 gamma can be planted as float16 below
    csym, cargs, cauxs = amp.convert_model(*small_net(), target_dtype="float16",
                                           fold_batchnorm=False)
    prefix = str(tmp_path / "m")
    save_plain("save_checkpoint", prefix, csym, cargs, cauxs)
    with pytest.raises(StrippedCastsError, match="remove_amp_cast=False") as err:
        amp.load_checkpoint(prefix, 0, restore_casts=False)
    assert "fc_weight" in str(err.value) and "m-symbol.json" in str(err.value)
    # a float16 weight that no conversion stores so (its reader computes in float32)
    args = dict(cargs, bn_gamma=cargs["bn_gamma"].astype("float16"))
    save_plain("save_checkpoint", prefix + "2", csym, args, cauxs)
    with pytest.raises(StrippedCastsError, match="cannot be restored exactly.*bn_gamma"):
        amp.load_checkpoint(prefix + "2", 0)


def test_a_model_in_float16_throughout_is_loaded_as_it_is(tmp_path):
    """float16 weights with a float16 input type-check without casts: not a stripped model."""
    data = mx.sym.var("data", dtype="float16")
    sym = mx.sym.FullyConnected(data, num_hidden=3, name="fc")
    prefix = str(tmp_path / "h")
    mx.model.save_checkpoint(prefix, 0, sym, {"fc_weight": mx.nd.ones((3, 4), dtype="float16"),
                                              "fc_bias": mx.nd.zeros(3, dtype="float16")}, {})
    loaded, _, _ = amp.load_checkpoint(prefix, 0)
    assert nodes(loaded) == nodes(sym)


def test_converting_or_inspecting_it_says_what_happened(tmp_path, capsys):
    csym, cargs, cauxs = amp.convert_model(*small_net(), target_dtype="bfloat16")
    prefix = str(tmp_path / "m")
    save_plain("save_checkpoint", prefix, csym, cargs, cauxs)
    with pytest.raises(AlreadyConvertedError, match="load_checkpoint"):
        amp.convert_checkpoint(prefix, 0, target_dtype="float16")
    with pytest.raises(AlreadyConvertedError, match="load_checkpoint"):   # the Symbol API too
        amp.convert_model(*mx.model.load_checkpoint(prefix, 0), target_dtype="float16")
    with pytest.raises(StrippedCastsError, match="load_checkpoint"):
        emulate_model(*mx.model.load_checkpoint(prefix, 0))
    assert cli.main(["inspect", prefix, "--target-dtype", "float16"]) == 0
    out = capsys.readouterr().out
    assert "saved without its amp casts" in out
    assert re.search(r"restores its [1-9]\d* cast", out)


def test_a_folded_model_is_restored_without_folding_again(tmp_path):
    """BatchNorm folded before the conversion: the stripped graph has no BatchNorm, and the
    restoring conversion must not fold anything (the stored params are already folded)."""
    csym, cargs, cauxs = amp.convert_model(*small_net(), target_dtype="bfloat16",
                                           fold_batchnorm=True)
    assert "BatchNorm" not in {n.op for n in graph_from_symbol(csym).nodes}
    prefix = str(tmp_path / "m")
    save_plain("sym.save", prefix, csym, cargs, cauxs)
    sym, args, _ = amp.load_checkpoint(prefix, 0)
    assert nodes(sym) == nodes(csym)
    assert all(np.array_equal(args[k].asnumpy(), v.asnumpy()) for k, v in cargs.items())
