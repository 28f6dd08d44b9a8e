"""mxnet_amp.checkpoint: converting a checkpoint on disk, and loading one converted before."""
import mxnet as mx
import numpy as np
import pytest

from mxnet_amp.checkpoint import checkpoint_outputs, convert_checkpoint, load_checkpoint
from mxnet_amp.errors import OutputPathError, OverwriteError, StrippedCastsError
from mxnet_amp.ir.dtypes import array_dtype
from mxnet_amp.mx.io import save_checkpoint


def _fp32_checkpoint(folder) -> str:
    """data -> fc1 -> sin -> fc2, float32, saved as folder/m (epoch 0)."""
    x = mx.sym.var("data")
    sym = mx.sym.FullyConnected(mx.sym.sin(mx.sym.FullyConnected(x, num_hidden=6, name="fc1")),
                                num_hidden=3, name="fc2")
    rng = np.random.default_rng(0)
    shapes = dict(zip(sym.list_arguments(), sym.infer_shape(data=(2, 5))[0]))
    args = {k: mx.nd.array(rng.standard_normal(s) * 0.3) for k, s in shapes.items() if k != "data"}
    prefix = str(folder / "m")
    save_checkpoint(prefix, 0, sym, args, {})
    return prefix


def test_convert_checkpoint_writes_the_amp_files_and_counts_bytes(tmp_path):
    """The default output is PREFIX-amp; weights are stored in the target dtype, halving the bytes."""
    prefix = _fp32_checkpoint(tmp_path)
    _, args, auxs, sizes = convert_checkpoint(prefix, target_dtype="bfloat16")
    assert (tmp_path / "m-amp-symbol.json").is_file() and (tmp_path / "m-amp-0000.params").is_file()
    assert {array_dtype(v) for v in args.values()} == {"bfloat16"}
    assert sizes["param_bytes_after"] * 2 == sizes["param_bytes_before"]


def test_write_false_converts_without_writing(tmp_path):
    """write=False (what inspect does) returns the conversion and leaves the folder as it was."""
    prefix = _fp32_checkpoint(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    conversion, args, _, _ = convert_checkpoint(prefix, write=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert conversion.result.node_dtypes["fc1"] == "float16"
    assert array_dtype(args["fc1_weight"]) == "float16"


def test_an_output_that_is_the_input_is_refused_before_reading(tmp_path):
    """out_prefix equal to the input prefix and epoch is an OverwriteError; '-' is refused."""
    prefix = _fp32_checkpoint(tmp_path)
    with pytest.raises(OverwriteError, match="refusing to overwrite an input"):
        convert_checkpoint(prefix, out_prefix=prefix)
    with pytest.raises(OutputPathError, match="standard stream"):
        checkpoint_outputs("-", 0)


def test_load_checkpoint_restores_the_casts_a_plain_save_dropped(tmp_path):
    """A converted model saved by mx.model.save_checkpoint (casts dropped) loads with its
    casts back; restore_casts=False makes it a StrippedCastsError."""
    prefix = _fp32_checkpoint(tmp_path)
    convert_checkpoint(prefix, target_dtype="bfloat16")
    sym, args, auxs = mx.model.load_checkpoint(prefix + "-amp", 0)
    mx.model.save_checkpoint(str(tmp_path / "plain"), 0, sym, args, auxs)   # drops amp_cast
    loaded, _, _ = load_checkpoint(str(tmp_path / "plain"), 0)
    assert "amp_cast" in loaded.tojson(remove_amp_cast=False)
    with pytest.raises(StrippedCastsError):
        load_checkpoint(str(tmp_path / "plain"), 0, restore_casts=False)
