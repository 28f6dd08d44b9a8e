"""mxnet_amp.bucketing: a BucketingModule converted, every bucket key in low precision."""
import mxnet as mx
import numpy as np
import pytest

from mxnet_amp.bucketing import convert_bucketing_module
from mxnet_amp.errors import ArgumentError, ParamError
from mxnet_amp.ir.dtypes import array_dtype

VOCAB, HIDDEN, BATCH = 10, 8, 2


def _sym_gen(seq_len):
    """tokens -> Embedding -> FullyConnected per step (flattened); bucket key = sequence length."""
    data = mx.sym.var("data")
    embed = mx.sym.Embedding(data, input_dim=VOCAB, output_dim=HIDDEN, name="embed")
    out = mx.sym.FullyConnected(mx.sym.reshape(embed, (-1, HIDDEN)), num_hidden=4, name="fc")
    return out, ("data",), None


def _module():
    mod = mx.mod.BucketingModule(_sym_gen, default_bucket_key=5, context=mx.cpu())
    mod.bind([mx.io.DataDesc("data", (BATCH, 5))], None, for_training=False)
    mx.random.seed(0)
    mod.init_params(mx.init.Xavier())
    return mod


def _run(mod, seq_len):
    tokens = np.random.RandomState(seq_len).randint(0, VOCAB, (BATCH, seq_len))
    batch = mx.io.DataBatch([mx.nd.array(tokens)], bucket_key=seq_len,
                            provide_data=[mx.io.DataDesc("data", (BATCH, seq_len))])
    mod.forward(batch, is_train=False)
    return mod.get_outputs()[0].astype("float32").asnumpy()


def test_every_bucket_key_gets_the_converted_symbol():
    """The new module's sym_gen converts any bucket key (here 3, not the default 5): its
    FullyConnected reads bfloat16 casts; the weights are stored in bfloat16, the original's
    params untouched."""
    mod = _module()
    new = convert_bucketing_module(mod, "bfloat16")
    assert array_dtype(new.get_params()[0]["fc_weight"]) == "bfloat16"
    assert array_dtype(mod.get_params()[0]["fc_weight"]) == "float32"
    sym, data_names, _ = new._sym_gen(3)
    assert data_names == ("data",)
    assert '"dtype": "bfloat16"' in sym.tojson(remove_amp_cast=False)


def test_converted_module_runs_each_bucket_close_to_float32(native_bf16):
    """Bound and run, the default and another bucket key agree with float32 to bf16 rounding."""
    if not native_bf16:
        pytest.skip("this CPU's oneDNN runs no bf16 FullyConnected")
    mod = _module()
    new = convert_bucketing_module(mod, "bfloat16")
    new.bind([mx.io.DataDesc("data", (BATCH, 5))], None, for_training=False)
    for seq_len in (5, 3):
        ref, out = _run(mod, seq_len), _run(new, seq_len)
        assert np.abs(out - ref).max() <= 2e-2 * np.abs(ref).max()


def test_an_uninitialised_module_is_a_param_error():
    """Params not initialised: a ParamError saying to init or load them first."""
    mod = mx.mod.BucketingModule(_sym_gen, default_bucket_key=5, context=mx.cpu())
    with pytest.raises(ParamError, match="not initialised"):
        convert_bucketing_module(mod)


def test_something_else_is_an_argument_error():
    """A plain Module is not a BucketingModule: an ArgumentError naming its type."""
    with pytest.raises(ArgumentError, match="Module"):
        convert_bucketing_module(mx.mod.Module(_sym_gen(3)[0], data_names=["data"], label_names=None))
