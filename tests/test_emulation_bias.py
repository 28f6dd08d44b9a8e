"""float16 emulation of MXNet's GPU bias step: FullyConnected, Convolution and Deconvolution
write their product to the float16 output, then add the bias in a second kernel, so the
product is rounded before the bias is added and the sum is rounded again
(``emulate_model(..., bias_rounding='auto')``, the default for float16).

The inputs are small integers and the weights multiples of 1/256, so every product is exact
in float32 whatever the accumulation order: the emulated outputs must equal the numpy
references bit for bit."""
import mxnet as mx
import numpy as np
import pytest

from mxnet_amp.convert import convert_model_full
from mxnet_amp.emulation import emulate_model
from mxnet_amp.mx.io import graph_from_symbol
from mxnet_amp.options import make_options

pytestmark = [pytest.mark.filterwarnings("ignore:type inference leaves"),
              pytest.mark.usefixtures("verified_passes")]

F32 = np.float32


def r16(a):
    with np.errstate(over="ignore"):
        return np.asarray(a, dtype=F32).astype(np.float16).astype(F32)


def two_step(product, bias):
    """The GPU's float16 result: product rounded, bias added, sum rounded."""
    return r16(r16(product) + r16(bias))


def one_step(product, bias):
    """Compute in float32, round once (``bias_rounding='fused'``)."""
    return r16(product + r16(bias))


def emulated_run(sym, args, x, target_dtype="float16", **emulate_kw):
    csym, cargs, cauxs, _ = convert_model_full(sym, args, {}, make_options(target_dtype))
    esym, eargs, eauxs = emulate_model(csym, cargs, cauxs, **emulate_kw)
    exe = esym.bind(mx.cpu(), {**eargs, "data": mx.nd.array(x)}, aux_states=eauxs, grad_req="null")
    return exe.forward(is_train=False)[0].asnumpy()


def exact_values(rng, shape):
    """Integers in [-8, 8]."""
    return rng.randint(-8, 9, size=shape).astype(F32)


def exact_weights(rng, shape):
    """Multiples of 1/256 in (-1, 1): a sum of a few hundred products with integers needs
    up to 20 bits, more than float16's 11 and fewer than float32's 24."""
    return (rng.randint(-255, 256, size=shape) / 256).astype(F32)


def biases(rng, n):
    """Biases with digits below a float16 product's last place, so the two ways differ."""
    return (rng.randint(-64, 64, size=n) + rng.uniform(-1, 1, size=n)).astype(F32)


def assert_two_step(got, product, bias, fused):
    assert (r16(product) != product).any()      # float16 cannot hold every product
    np.testing.assert_array_equal(got, two_step(product, bias))
    np.testing.assert_array_equal(fused, one_step(product, bias))
    differ = np.mean(got != fused)
    assert 0 < differ < 1, differ      # the two roundings differ on some elements only


def test_fully_connected_rounds_the_product_before_the_bias():
    rng = np.random.RandomState(0)
    x, w, b = exact_values(rng, (16, 24)), exact_weights(rng, (32, 24)), biases(rng, 32)
    sym = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=32, name="fc")
    args = {"fc_weight": mx.nd.array(w), "fc_bias": mx.nd.array(b)}
    product = x.astype(np.float64) @ w.T.astype(np.float64)
    got = emulated_run(sym, args, x)
    fused = emulated_run(sym, args, x, bias_rounding="fused")
    assert_two_step(got, product, b, fused)
    np.testing.assert_array_equal(emulated_run(sym, args, x, bias_rounding="separate"), got)


def conv2d(x, w):
    """numpy NCHW convolution, stride 1, no padding (float64)."""
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    out = np.zeros((n, o, h - kh + 1, wd - kw + 1))
    for i in range(kh):
        for j in range(kw):
            patch = x[:, :, i:i + h - kh + 1, j:j + wd - kw + 1].astype(np.float64)
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j].astype(np.float64))
    return out


def deconv2d(x, w):
    """numpy NCHW transposed convolution, stride 1, no padding (float64); w is (in, out, kh, kw)."""
    n, c, h, wd = x.shape
    _, o, kh, kw = w.shape
    out = np.zeros((n, o, h + kh - 1, wd + kw - 1))
    for i in range(kh):
        for j in range(kw):
            out[:, :, i:i + h, j:j + wd] += np.einsum("nchw,co->nohw", x.astype(np.float64),
                                                      w[:, :, i, j].astype(np.float64))
    return out


def test_convolution_rounds_the_product_before_the_bias():
    rng = np.random.RandomState(1)
    x, w, b = exact_values(rng, (2, 8, 7, 7)), exact_weights(rng, (16, 8, 3, 3)), biases(rng, 16)
    sym = mx.sym.Convolution(mx.sym.var("data"), kernel=(3, 3), num_filter=16, name="conv")
    args = {"conv_weight": mx.nd.array(w), "conv_bias": mx.nd.array(b)}
    product = conv2d(x, w)
    got = emulated_run(sym, args, x)
    assert_two_step(got, product, b[None, :, None, None],
                    emulated_run(sym, args, x, bias_rounding="fused"))


def test_deconvolution_rounds_the_product_before_the_bias():
    rng = np.random.RandomState(2)
    x, w, b = exact_values(rng, (2, 8, 5, 5)), exact_weights(rng, (8, 12, 3, 3)), biases(rng, 12)
    sym = mx.sym.Deconvolution(mx.sym.var("data"), kernel=(3, 3), num_filter=12, no_bias=False,
                               name="deconv")
    args = {"deconv_weight": mx.nd.array(w), "deconv_bias": mx.nd.array(b)}
    product = deconv2d(x, w)
    got = emulated_run(sym, args, x)
    assert_two_step(got, product, b[None, :, None, None],
                    emulated_run(sym, args, x, bias_rounding="fused"))


def bias_nodes(sym, args):
    """The emulated graph's (Reshape shape attrs, broadcast_add count) for a float16 ``sym``."""
    csym, cargs, cauxs, _ = convert_model_full(sym, args, {}, make_options("float16"))
    graph = graph_from_symbol(emulate_model(csym, cargs, cauxs)[0])
    return ([n.attrs["shape"] for n in graph.nodes if n.op == "Reshape"],
            sum(n.op == "broadcast_add" for n in graph.nodes))


def test_the_bias_goes_on_the_channel_axis_of_the_layout():
    """Channel-first outputs get the bias reshaped to (1, C, 1, ...); channel-last ones
    (NHWC, which MXNet's CPU convolution cannot run) read it on the last axis as it is."""
    data = mx.sym.var("data")
    args = {"conv_weight": mx.nd.ones((6, 8, 3, 3)), "conv_bias": mx.nd.zeros(6)}
    nchw = mx.sym.Convolution(data, kernel=(3, 3), num_filter=6, name="conv")
    assert bias_nodes(nchw, args) == (["(1, -1, 1, 1)"], 1)
    ncdhw = mx.sym.Convolution(data, kernel=(3, 3, 3), num_filter=6, name="conv")
    assert bias_nodes(ncdhw, {**args, "conv_weight": mx.nd.ones((6, 8, 3, 3, 3))}) == (
        ["(1, -1, 1, 1, 1)"], 1)
    nhwc = mx.sym.Convolution(data, kernel=(3, 3), num_filter=6, layout="NHWC", name="conv")
    assert bias_nodes(nhwc, {**args, "conv_weight": mx.nd.ones((6, 3, 3, 8))}) == ([], 1)


def test_ops_without_bias_and_bfloat16_are_rounded_once():
    rng = np.random.RandomState(4)
    x, w, b = exact_values(rng, (16, 24)), exact_weights(rng, (32, 24)), biases(rng, 32)
    no_bias = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=32, no_bias=True, name="fc")
    args = {"fc_weight": mx.nd.array(w)}
    product = x.astype(np.float64) @ w.T.astype(np.float64)
    np.testing.assert_array_equal(emulated_run(no_bias, args, x), r16(product))
    csym, cargs, cauxs, _ = convert_model_full(no_bias, args, {}, make_options("float16"))
    ops = [n.op for n in graph_from_symbol(emulate_model(csym, cargs, cauxs)[0]).nodes]
    assert "broadcast_add" not in ops and "zeros_like" not in ops
    # bfloat16 runs on oneDNN, which adds the bias inside the primitive: one rounding
    biased = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=32, name="fc")
    bargs = {"fc_weight": mx.nd.array(w), "fc_bias": mx.nd.array(b)}
    auto = emulated_run(biased, bargs, x, "bfloat16")
    np.testing.assert_array_equal(auto, emulated_run(biased, bargs, x, "bfloat16", bias_rounding="fused"))
    assert not np.array_equal(auto, emulated_run(biased, bargs, x, "bfloat16",
                                                 bias_rounding="separate"))


def test_bias_rounding_is_checked():
    sym = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=2, name="fc")
    args = {"fc_weight": mx.nd.ones((2, 3)), "fc_bias": mx.nd.zeros(2)}
    csym, cargs, cauxs, _ = convert_model_full(sym, args, {}, make_options("float16"))
    with pytest.raises(ValueError, match="bias_rounding"):
        emulate_model(csym, cargs, cauxs, bias_rounding="gpu")


def test_automatic_mode_sees_the_bias_rounding():
    """The automatic mode's emulated checks judge the model as the GPU computes it: its
    figure is the error of the two-step rounding, not of the one-step one."""
    from mxnet_amp import auto_convert_model
    rng = np.random.RandomState(5)
    x, w, b = exact_values(rng, (16, 24)), exact_weights(rng, (32, 24)), biases(rng, 32)
    sym = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=32, name="fc")
    args = {"fc_weight": mx.nd.array(w), "fc_bias": mx.nd.array(b)}
    ref = (x.astype(np.float64) @ w.T.astype(np.float64) + b).astype(F32)
    *_, report = auto_convert_model(sym, args, {}, {"data": x}, "float16", quiet=True,
                                    execution="emulated")
    assert report.execution == "emulated" and not report.kept_fp32
    separate = np.abs(emulated_run(sym, args, x) - ref).max()
    fused = np.abs(emulated_run(sym, args, x, bias_rounding="fused") - ref).max()
    assert separate != fused
    assert report.max_abs_error == pytest.approx(separate, rel=1e-6)


def test_the_emulated_graph_infers_every_shape_from_the_input_shape():
    """Module.bind / simple_bind give only the input shapes: the bias's shape must still be
    inferred (the op reads a zero bias of its shape), and so must a shape only a consumer
    tells (a zero state whose batch size comes from the add after the layer)."""
    data = mx.sym.var("data")
    h = mx.sym.Convolution(data, kernel=(3, 3), num_filter=4, name="conv")
    h = mx.sym.FullyConnected(h, num_hidden=6, name="fc")
    state = mx.sym.zeros(shape=(0, 5))                  # batch size unknown, as LSTMCell's
    sym = h + mx.sym.FullyConnected(state, num_hidden=6, name="h2h")
    shapes = {"conv_weight": (4, 3, 3, 3), "conv_bias": (4,), "fc_weight": (6, 100),
              "fc_bias": (6,), "h2h_weight": (6, 5), "h2h_bias": (6,)}
    args = {k: mx.nd.ones(s) for k, s in shapes.items()}
    csym, cargs, cauxs, _ = convert_model_full(sym, args, {}, make_options("float16"))
    esym, eargs, _ = emulate_model(csym, cargs, cauxs)
    assert "broadcast_add" in [n.op for n in graph_from_symbol(esym).nodes]
    arg_shapes, out_shapes, _ = esym.infer_shape(data=(2, 3, 7, 7))
    got = dict(zip(esym.list_arguments(), arg_shapes))
    assert out_shapes == [(2, 6)]
    assert {k: got[k] for k in eargs} == {k: v.shape for k, v in eargs.items()}
