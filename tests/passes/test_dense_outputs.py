"""mxnet_amp.passes.dense_outputs: which outputs a closeness check can judge."""
import mxnet as mx

from mxnet_amp.ir.graph import Entry
from mxnet_amp.mx.io import graph_from_symbol
from mxnet_amp.passes.dense_outputs import BOUNDARY_OPS, dense_outputs


def _scores():
    return mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=10, name="scores")


def test_a_graph_without_boundary_ops_is_all_dense():
    """No top-k, NMS, comparison or box decoding: every head is judged as it is."""
    g = graph_from_symbol(mx.sym.Group([_scores(), mx.sym.relu(_scores(), name="r")]))
    split = dense_outputs(g)
    assert split.dense == (0, 1) and split.after == () and split.feeds == () and split.ops == ()


def test_heads_after_topk_are_judged_at_the_scores_feeding_it():
    """    scores -> topk (head 0);  scores -> relu (head 1)
    head 0 is past a boundary op, head 1 dense; the feed judged instead is 'scores'."""
    s = _scores()
    g = graph_from_symbol(mx.sym.Group([mx.sym.topk(s, k=3, ret_typ="value", name="top"),
                                        mx.sym.relu(s, name="r")]))
    split = dense_outputs(g)
    assert split.dense == (1,) and split.after == (0,)
    assert split.feeds == (Entry(g.index_of("scores"), 0),) and split.ops == ("top",)


def test_only_the_first_boundary_op_on_a_path_gives_feeds():
    """topk after a comparison: the comparison is first, its inputs are the feeds; the
    topk (past it) adds none."""
    s = _scores()
    mask = mx.sym.broadcast_greater(s, mx.sym.zeros_like(s, name="zero"), name="gt")
    g = graph_from_symbol(mx.sym.topk(mask, k=2, name="top"))
    split = dense_outputs(g)
    assert split.ops == ("gt",)
    assert {g.nodes[e.node].name for e in split.feeds} == {"scores", "zero"}
    assert {"topk", "broadcast_greater", "_contrib_box_decode"} <= BOUNDARY_OPS
