"""The cheaper emulation gives today's bits (issue 41, item 8): no round trip after an op
that only selects its inputs' values (relu, max pooling, reshapes, concat, slices), and an
emulated model's weight roundings done once per model load (``round_weights_once``, what
every pass over ``eval_data`` runs) instead of at every batch.

The reference is the straightforward emulation: every low precision tensor rounded by its
own round trip, weights rounded in the graph at every run (the pass with the selecting-op
rule off). Outputs must match bit for bit, NaN and the sign of zero included."""
import pickle

import mxnet as mx
import numpy as np
import pytest

from mxnet_amp.auto.workers import ModelBlob, run_model
from mxnet_amp.convert import convert_model_full
from mxnet_amp.emulation import emulate_conversion, emulate_model, round_weights_once
from mxnet_amp.options import make_options
from mxnet_amp.passes import emulate as emulate_pass

pytestmark = pytest.mark.filterwarnings("ignore:type inference leaves")


def _selecting_net():
    """Every kind of selecting op after low precision producers, beside ops that are not
    (avg pooling, sigmoid, leaky relu), with values that reach float16's limits."""
    d = mx.sym.var("data")
    c = mx.sym.Convolution(d, kernel=(3, 3), pad=(1, 1), num_filter=8, name="conv")
    r = mx.sym.Activation(c, act_type="relu", name="relu")
    mp = mx.sym.Pooling(r, kernel=(2, 2), stride=(2, 2), pool_type="max", name="maxpool")
    ap = mx.sym.Pooling(c, kernel=(2, 2), stride=(2, 2), pool_type="avg", name="avgpool")
    cat = mx.sym.concat(mp, ap, dim=1, name="cat")
    t = mx.sym.transpose(cat, axes=(0, 2, 3, 1), name="tr")
    parts = mx.sym.split(t, num_outputs=2, axis=3, name="split")
    m = mx.sym.broadcast_maximum(parts[0], parts[1], name="maxim")
    s = mx.sym.slice_axis(m, axis=1, begin=0, end=3, name="sl")
    f = mx.sym.flatten(s, name="flat")
    h = mx.sym.FullyConnected(f, num_hidden=16, name="fc1")
    h = mx.sym.LeakyReLU(mx.sym.relu(h, name="relu2"), slope=0.1, name="leaky")
    out = mx.sym.FullyConnected(mx.sym.sigmoid(h, name="sig"), num_hidden=5, name="fc2")
    rng = np.random.RandomState(3)
    shapes = dict(zip(out.list_arguments(), out.infer_shape(data=(4, 3, 12, 12))[0]))
    args = {k: mx.nd.array(rng.randn(*v) * 0.5) for k, v in shapes.items() if k != "data"}
    x = rng.randn(4, 3, 12, 12).astype(np.float32) * 3
    x[0, 0, :2, :2] = [[7e4, -7e4], [1e-8, -1e-8]]   # overflow to +-inf, flush to +-0
    return out, args, {}, x


def _zoo(name):
    import zoo
    return zoo.symbol_model(name)


def _bits(outs):
    import zoo
    return zoo.output_bits(outs)


def _in_graph(sym, args, auxs, x):
    """Run an emulated model as the one-batch checks do: a CachedOp, weights rounded in
    the graph."""
    values = {**args, **auxs, "data": mx.nd.array(x)}
    return run_model(mx.nd.CachedOp(sym), sym.list_inputs(), values)


def _amp_casts(sym):
    return sum(1 for n in sym.get_internals().list_outputs() if "round" in n and n.endswith("_output"))


CASES = [("selecting", "float16", "auto"), ("selecting", "float16", "fused"),
         ("selecting", "bfloat16", "auto"), ("resnet18_v1", "float16", "auto"),
         ("mobilenetv2_1.0", "float16", "auto"), ("resnet18_v1", "bfloat16", "auto")]


@pytest.mark.parametrize("net,dtype,bias", CASES)
def test_the_cheaper_emulation_gives_the_bits_of_rounding_every_op(net, dtype, bias, monkeypatch):
    sym, args, auxs, x = _selecting_net() if net == "selecting" else _zoo(net)
    _, cargs, cauxs, conversion = convert_model_full(sym, args, auxs, make_options(dtype),
                                                     cast_params=False)
    esym, eargs, eauxs = emulate_conversion(conversion, cargs, cauxs)
    # the pass's per-op rule only; emulate_conversion reads the conversion's record
    if bias != "auto":
        esym, eargs, eauxs = emulate_model(conversion.symbol, cargs, cauxs, bias_rounding=bias,
                                           stored_dtypes={**conversion.arg_dtypes,
                                                          **conversion.aux_dtypes})
    # a worker's copy (unpickled) rounds the weights once as it loads
    blob = pickle.loads(pickle.dumps(ModelBlob("check", esym, {**eargs, **eauxs}, {"data": "float32"})))
    new = blob.run({"data": x})
    with monkeypatch.context() as m:
        m.setattr(emulate_pass, "_selects_values", lambda *a: False)
        if bias == "auto":
            rsym, rargs, rauxs = emulate_conversion(conversion, cargs, cauxs)
        else:
            rsym, rargs, rauxs = emulate_model(conversion.symbol, cargs, cauxs, bias_rounding=bias,
                                               stored_dtypes={**conversion.arg_dtypes,
                                                              **conversion.aux_dtypes})
    reference = _in_graph(rsym, rargs, rauxs, x)
    assert _amp_casts(esym) < _amp_casts(rsym)          # round trips were dropped
    assert blob.sym.list_inputs() != esym.list_inputs()  # the weights were rounded once
    for a, b in zip(_bits(new), _bits(reference)):
        np.testing.assert_array_equal(a, b)


def test_round_weights_once_rounds_each_weight_as_the_graph_did():
    """Each weight round trip becomes a variable holding the rounded weight (the same bits
    as the graph's round trip); the caller's dict is not modified; a model with no round
    trip comes back as it is."""
    sym, args, auxs, x = _selecting_net()
    _, cargs, cauxs, conversion = convert_model_full(sym, args, auxs, make_options("float16"),
                                                     cast_params=False)
    esym, eargs, _ = emulate_conversion(conversion, cargs, cauxs)
    given = dict(eargs)
    folded, params = round_weights_once(esym, eargs)
    assert eargs == given
    assert "conv_weight" in esym.list_inputs() and "conv_weight" not in folded.list_inputs()
    (name,) = [k for k in params if k.startswith("conv_weight")]
    expected = eargs["conv_weight"].astype("float16").astype("float32").asnumpy()
    np.testing.assert_array_equal(params[name].asnumpy().view(np.uint32), expected.view(np.uint32))
    assert set(params) == set(folded.list_inputs()) - {"data"}
    plain, same = round_weights_once(sym, args)
    assert plain is sym and same == args


def test_a_blob_in_the_calling_process_keeps_the_caller_arrays():
    """In the calling process a ModelBlob reads the caller's arrays as they are (no rounded
    copies beside them: the weights are rounded in the graph); its worker copy rounds them
    once. Both give the same bits."""
    sym, args, auxs, x = _selecting_net()
    _, cargs, cauxs, conversion = convert_model_full(sym, args, auxs, make_options("float16"),
                                                     cast_params=False)
    esym, eargs, eauxs = emulate_conversion(conversion, cargs, cauxs)
    here = ModelBlob("check", esym, {**eargs, **eauxs}, {"data": "float32"})
    worker = pickle.loads(pickle.dumps(here))
    outs_here, outs_worker = here.run({"data": x}), worker.run({"data": x})
    assert here.sym is esym and all(here.params[k] is v for k, v in eargs.items())
    assert set(worker.params) != set(eargs)
    for a, b in zip(_bits(outs_here), _bits(outs_worker)):
        np.testing.assert_array_equal(a, b)
