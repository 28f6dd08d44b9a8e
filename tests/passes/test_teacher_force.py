"""The teacher-forcing pass (passes/teacher_force.py) on its own: which nodes are copied,
what each copy reads, and that running it gives each node's own low precision error."""
import mxnet as mx
import numpy as np

from mxnet_amp.convert import convert_model_full
from mxnet_amp.emulation import round_numpy
from mxnet_amp.ir.verify import verify_graph
from mxnet_amp.mx.io import graph_from_symbol, graph_to_symbol
from mxnet_amp.options import make_options
from mxnet_amp.passes.emulate import emulate_graph
from mxnet_amp.passes.expose_outputs import expose_outputs
from mxnet_amp.passes.teacher_force import teacher_force

from helpers import fc_sin_fc, init_params, run


def _converted():
    sym = fc_sin_fc()   # every op in float16
    args, auxs = init_params(sym, {"data": (2, 5)})
    _, _, _, conv = convert_model_full(sym, args, auxs, make_options("float16"),
                                       cast_params=False)
    return sym, args, auxs, conv


def test_every_low_node_is_copied_once_reading_new_variables_and_perturbed_copies_follow():
    sym, args, auxs, conv = _converted()
    original = graph_from_symbol(sym)
    low = [n for n in ("fc1", "s", "fc2") if conv.result.node_dtypes[n] == "float16"]
    assert low == ["fc1", "s", "fc2"]
    fg = teacher_force(conv.graph, original, low, conv.result.tensor_dtypes, conv.result.inserted_casts)
    verify_graph(fg.graph)
    assert [o for o in fg.outputs if o[0] == "forced"] == [("forced", n, 0) for n in low]
    # fc1 reads the model input (through its cast); s and fc2 read fed reference tensors
    assert sorted(fg.reference_feeds.values()) == [("fc1", 0), ("s", 0)]
    # fc1 holds its output in float16 already: fed unrounded, declared float16 (its rounding
    # is fc1's own error, not s's)
    assert {fg.var_dtypes[v] for v, t in fg.reference_feeds.items()} == {"float16"}
    # s and fc2 read an op's output: each gets a float32 copy on perturbed inputs
    assert [o[1] for o in fg.outputs if o[0] == "perturbed"] == ["s", "fc2"]
    assert set(fg.param_aliases.values()) == {"fc2_weight", "fc2_bias"}


def test_forced_copy_gives_each_node_its_own_low_precision_error():
    """fc2 fed the exact float32 value of s: its output is float16's rounding of the
    float32 product of the rounded inputs, nothing accumulated before it."""
    sym, args, auxs, conv = _converted()
    original = graph_from_symbol(sym)
    fg = teacher_force(conv.graph, original, ["fc2"], conv.result.tensor_dtypes,
                      conv.result.inserted_casts)
    x = np.random.RandomState(1).randn(2, 5).astype("float32")
    probe, keys = expose_outputs(original)
    ref = dict(zip(keys, run(graph_to_symbol(probe), args, auxs, {"data": x})))
    s_ref = ref[(original.index_of("s"), 0)]
    feeds = {v: s_ref for v in fg.reference_feeds}
    feeds.update({v: args[p].asnumpy() for v, p in fg.param_aliases.items()})
    feeds.update({v: s_ref for v in fg.perturbed_feeds})
    weights = {k: round_numpy(v.asnumpy(), "float16") for k, v in args.items()
               if k.startswith("fc2")}
    var_dtypes = {**conv.arg_dtypes, **fg.var_dtypes}
    out = run(graph_to_symbol(emulate_graph(fg.graph, var_dtypes)),
              {k: mx.nd.array(v) for k, v in weights.items()}, {},
              {"data": x, **feeds})
    forced = out[[o[0] for o in fg.outputs].index("forced")]
    # s is fed unrounded and not rounded again (declared float16: its producer rounds it)
    expect = round_numpy(s_ref @ weights["fc2_weight"].T + weights["fc2_bias"], "float16")
    np.testing.assert_allclose(forced, expect, rtol=1e-3, atol=1e-6)
    assert not np.array_equal(forced, ref[(original.index_of("fc2"), 0)])


def test_golden_forced_copies_read_reference_feeds_and_perturbed_copies_perturbed_ones():
    """Rule: each forced node is copied reading its variables as they are, the casts the
    conversion put before it (copied once) and, for an op input, a new variable
    ``<producer>_out<k>_reference`` declared in the producer's dtype; then every op reading
    another op's output gets a float32 copy ``<op>_perturbed`` reading
    ``<producer>_out<k>_perturbed`` and its weights through float32 aliases ``<w>_float32``.
    The heads are the forced copies' outputs, then the perturbed ones'.

        original: fc2(fc1(x, w1), w2);  converted: cast(fc2(fc1(cast(x, f16), w1), w2), f32)
    """
    from golden import assert_graph, cast, graph, op, var
    from mxnet_amp.ir.graph import Entry
    original = graph(var("x"), var("w1"), op("fc1", "FullyConnected", "x", "w1", num_hidden="3"),
                     var("w2"), op("fc2", "FullyConnected", "fc1", "w2", num_hidden="2"), heads=["fc2"])
    converted = graph(var("x"), var("w1"), cast("x_amp_cast_float16", "x", "float16"),
                      op("fc1", "FullyConnected", "x_amp_cast_float16", "w1", num_hidden="3"),
                      var("w2"), op("fc2", "FullyConnected", "fc1", "w2", num_hidden="2"),
                      cast("fc2_amp_cast_float32", "fc2", "float32"), heads=["fc2_amp_cast_float32"])
    expected = graph(var("x"), cast("x_amp_cast_float16", "x", "float16"), var("w1"),
                     op("fc1", "FullyConnected", "x_amp_cast_float16", "w1", num_hidden="3"),
                     var("fc1_out0_reference"), var("w2"),
                     op("fc2", "FullyConnected", "fc1_out0_reference", "w2", num_hidden="2"),
                     var("fc1_out0_perturbed"), var("w2_float32"),
                     op("fc2_perturbed", "FullyConnected", "fc1_out0_perturbed", "w2_float32", num_hidden="2"),
                     heads=["fc1", "fc2", "fc2_perturbed"])
    forced = teacher_force(converted, original, {"fc1", "fc2"}, {Entry(3): "float16"}, {2, 6})
    assert_graph(forced.graph, expected)
    assert forced.var_dtypes == {"fc1_out0_reference": "float16", "fc1_out0_perturbed": "float32",
                                 "w2_float32": "float32"}
    assert forced.reference_feeds == {"fc1_out0_reference": ("fc1", 0)}
    assert forced.perturbed_feeds == {"fc1_out0_perturbed": ("fc1", 0)}
    assert forced.param_aliases == {"w2_float32": "w2"}
    assert forced.outputs == [("forced", "fc1", 0), ("forced", "fc2", 0), ("perturbed", "fc2", 0)]


def test_no_probes_gives_the_forced_copies_only():
    """``probes=0``: the forced copies alone, no perturbed copy and no float32 alias."""
    sym, args, auxs, conv = _converted()
    original = graph_from_symbol(sym)
    fg = teacher_force(conv.graph, original, ["fc1", "s", "fc2"], conv.result.tensor_dtypes,
                       conv.result.inserted_casts, probes=0)
    verify_graph(fg.graph)
    assert [o[0] for o in fg.outputs] == ["forced"] * 3
    assert not fg.perturbed_feeds and not fg.param_aliases
