"""The pass round_with_kernels on its own: the emulation's round trips and float16 bias steps
become the kernels' ops, golden graphs compared whole (the numerics: tests/test_emulation_kernels.py)."""
from golden import assert_graph, cast, graph, op, var

from mxnet_amp.ir.verify import verify_graph
from mxnet_amp.passes.round_kernels import RoundWithKernels, round_with_kernels


def _bias_step(low="float16", extra_reader=False):
    """The emulation's float16 conv bias step (passes/emulate.py ``_bias_step``):

        c = conv(x, w, zeros_like(b)); r = round(c)
        y = round(_identity_with_attr_like_rhs(broadcast_add(r, reshape(b)), r))
    """
    nodes = [var("x"), var("w"), var("b"), op("zb", "zeros_like", "b"),
             op("conv", "Convolution", "x", "w", "zb", kernel="(1, 1)", num_filter="2"),
             cast("conv_round_lo", "conv", low), cast("conv_round_float32", "conv_round_lo", "float32"),
             op("b_r", "Reshape", "b", shape="(1, -1, 1, 1)"),
             op("plus", "broadcast_add", "conv_round_float32", "b_r"),
             op("shaped", "_identity_with_attr_like_rhs", "plus", "conv_round_float32"),
             cast("sum_lo", "shaped", low), cast("sum_float32", "sum_lo", "float32"),
             op("relu", "Activation", "sum_float32", act_type="relu")]
    heads = ["relu"] + (["conv_round_float32"] if extra_reader else [])
    return graph(*nodes, heads=heads)


def test_golden_a_round_trip_becomes_one_kernel_op_named_as_its_outer_cast():
    """Rule: amp_cast(amp_cast(x, float16), float32) -> mxnet_amp_round(x; dtype=float16);
    bfloat16's says how this machine flushes a negative subnormal (flush_sign)."""
    for low, flush, attrs in (("float16", True, {"dtype": "float16"}),
                              ("bfloat16", True, {"dtype": "bfloat16", "flush_sign": "1"}),
                              ("bfloat16", False, {"dtype": "bfloat16", "flush_sign": "0"})):
        given = graph(var("x"), cast("x_lo", "x", low), cast("x_f32", "x_lo", "float32"),
                      op("s", "sigmoid", "x_f32"), heads=["s"])
        expected = graph(var("x"), op("x_f32", "mxnet_amp_round", "x", **attrs),
                         op("s", "sigmoid", "x_f32"), heads=["s"])
        result = RoundWithKernels(flush_sign=flush)(given)
        assert_graph(result.graph, expected)
        assert result.decided == 1 and result.changed
        verify_graph(result.graph, cast_chains=True)


def test_golden_a_float16_bias_step_becomes_one_fused_op():
    """Rule: the bias step's five ops after the product (round trip, broadcast_add, the shape
    tie, round trip) -> mxnet_amp_round_bias(product, reshaped bias), named as its last cast;
    the product's own round trip, read only by the step, goes too."""
    expected = graph(var("x"), var("w"), var("b"), op("zb", "zeros_like", "b"),
                     op("conv", "Convolution", "x", "w", "zb", kernel="(1, 1)", num_filter="2"),
                     op("b_r", "Reshape", "b", shape="(1, -1, 1, 1)"),
                     op("sum_float32", "mxnet_amp_round_bias", "conv", "b_r", dtype="float16"),
                     op("relu", "Activation", "sum_float32", act_type="relu"), heads=["relu"])
    result = RoundWithKernels()(_bias_step())
    assert_graph(result.graph, expected)
    assert result.decided == 1


def test_golden_a_rounded_product_read_elsewhere_keeps_the_step_apart():
    """A bias step whose rounded product is also an output is not fused: each round trip
    becomes a rounding op and the add stays MXNet's (the same bits either way)."""
    got = round_with_kernels(_bias_step(extra_reader=True))
    ops = [n.op for n in got.nodes]
    assert "mxnet_amp_round_bias" not in ops and ops.count("mxnet_amp_round") == 2
    assert "broadcast_add" in ops and "amp_cast" not in ops


def test_truncating_casts_and_lone_casts_stay_and_nothing_to_do_is_the_same_graph():
    """``Cast`` (rounding='mxnet-cpu' truncates to bfloat16) is no round trip of amp_cast's; a
    single cast to float32 (a float16 variable read exactly) is none; an inner cast read
    twice must stay. A graph with none of these comes back as the same object."""
    given = graph(var("x"), var("h", __dtype__="2"), op("x_bf", "Cast", "x", dtype="bfloat16"),
                  op("x_back", "Cast", "x_bf", dtype="float32"), cast("h32", "h", "float32"),
                  cast("x16", "x", "float16"), cast("x16_32", "x16", "float32"),
                  op("sum", "elemwise_add", "x_back", "h32"), op("both", "elemwise_add", "sum", "x16_32"),
                  heads=["both", "x16"])
    result = RoundWithKernels()(given)
    assert result.graph is given and not result.changed and result.decided == 0
