"""The emulation's helper pass fold_param_casts on its own: weights read already rounded, and
prune."""
import mxnet as mx

import mxnet_amp as amp
from mxnet_amp.ir.verify import verify_graph
from mxnet_amp.mx.io import graph_from_symbol
from mxnet_amp.passes.emulate import emulate_graph
from mxnet_amp.passes.fold_param_casts import fold_param_casts, prune

from helpers import fc_sin_fc, init_params


def test_fold_param_casts_names_each_weight_rounding_and_prunes_the_casts():
    sym = fc_sin_fc()
    args, auxs = init_params(sym, {"data": (2, 5)})
    csym, cargs, cauxs = amp.convert_model(sym, args, auxs, target_dtype="bfloat16",
                                           cast_optional_params=False)
    emulated = emulate_graph(graph_from_symbol(csym), {})
    folded, sources = fold_param_casts(emulated, cargs)
    verify_graph(folded, cast_chains=True)   # the input's rounding round trip stays
    assert sorted(src for src, _ in sources.values()) == sorted(k for k in cargs if "weight" in k
                                                                or "bias" in k)
    assert {low for _, low in sources.values()} == {"bfloat16"}
    names = {n.name for n in folded.nodes}
    assert set(sources) <= names and not (set(cargs) & names)   # weights now read rounded
    assert len(folded.nodes) < len(emulated.nodes)


def test_prune_drops_only_what_no_head_reads():
    graph = graph_from_symbol(mx.sym.Group([fc_sin_fc(), mx.sym.var("unused") * 2]))
    from mxnet_amp.ir.graph import Graph
    one_head = Graph(graph.nodes, graph.heads[:1], graph.attrs)
    pruned = prune(one_head)
    verify_graph(pruned)
    assert "unused" not in {n.name for n in pruned.nodes}
    assert {n.name for n in pruned.nodes} == {n.name for n in graph_from_symbol(fc_sin_fc()).nodes}


def test_golden_a_weights_round_trip_becomes_a_variable_named_after_its_outer_cast():
    """Rule: amp_cast(amp_cast(w, float16), float32) of a param w becomes one variable named
    after the outer cast, with w's attributes less ``__dtype__``; the weight and its inner
    cast, read by nothing else, are pruned; an activation's round trip stays.

        fc(amp_cast(amp_cast(x, f16), f32), amp_cast(amp_cast(w, f16), f32))
    """
    from golden import assert_graph, cast, graph, op, var
    given = graph(var("x"), var("w", __dtype__="0", __shape__="(2, 3)"), cast("w16", "w", "float16"),
                  cast("w32", "w16", "float32"), cast("x16", "x", "float16"), cast("x32", "x16", "float32"),
                  op("fc", "FullyConnected", "x32", "w32", num_hidden="2", no_bias="True"), heads=["fc"])
    expected = graph(var("x"), var("w32", __shape__="(2, 3)"), cast("x16", "x", "float16"),
                     cast("x32", "x16", "float32"),
                     op("fc", "FullyConnected", "x32", "w32", num_hidden="2", no_bias="True"), heads=["fc"])
    got, rounded = fold_param_casts(given, {"w": None})
    assert_graph(got, expected)
    assert rounded == {"w32": ("w", "float16")}


def test_golden_prune_drops_what_no_head_depends_on():
    """Rule: every node no head reaches goes; the others keep their order."""
    from golden import assert_graph, graph, op, var
    given = graph(var("x"), var("unused"), op("a", "sin", "x"), op("b", "cos", "unused"),
                  op("c", "exp", "a"), heads=["c"])
    assert_graph(prune(given), graph(var("x"), op("a", "sin", "x"), op("c", "exp", "a"), heads=["c"]))
    kept = graph(var("x"), op("a", "sin", "x"), heads=["a"])
    assert prune(kept) is kept
