"""The emulation's helper pass fold_param_casts on its own: weights read already rounded, and
prune."""
import mxnet as mx

import mxnet_amp as amp
from mxnet_amp.io import graph_from_symbol
from mxnet_amp.passes.emulate import emulate_graph
from mxnet_amp.passes.fold_param_casts import fold_param_casts, prune
from mxnet_amp.verify import verify_graph

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
    from mxnet_amp.graph import Graph
    one_head = Graph(graph.nodes, graph.heads[:1], graph.attrs)
    pruned = prune(one_head)
    verify_graph(pruned)
    assert "unused" not in {n.name for n in pruned.nodes}
    assert {n.name for n in pruned.nodes} == {n.name for n in graph_from_symbol(fc_sin_fc()).nodes}
