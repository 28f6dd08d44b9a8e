"""mxnet_amp.report.picture (report/picture): a conversion's graph read as boxes and edges."""
import mxnet as mx

from mxnet_amp.convert import convert_graph
from mxnet_amp.mx.io import graph_from_symbol
from mxnet_amp.options import make_options
from mxnet_amp.report.picture import collapse, fp32_islands, node_dtypes


def _conversion(blocks: int = 1, target: str = "float16"):
    """data -> [fc -> softmax -> fc ...] repeated: FullyConnected in the target dtype,
    softmax kept in float32 by the shipped lists."""
    h = mx.sym.var("data")
    for k in range(blocks):
        h = mx.sym.FullyConnected(h, num_hidden=4, name=f"stage{k}_fc")
        h = mx.sym.softmax(h, name=f"stage{k}_softmax")
    return convert_graph(graph_from_symbol(h), make_options(target), data_names=["data"])


def test_node_dtypes_follow_the_pass_decisions():
    """The FullyConnected computes in float16, the softmax in float32, the input is float32."""
    conv = _conversion()
    names = [n.name for n in conv.graph.nodes]
    dtypes = dict(zip(names, node_dtypes(conv)))
    assert dtypes["stage0_fc"] == "float16"
    assert dtypes["stage0_softmax"] == "float32"
    assert dtypes["data"] == "float32"


def test_a_small_graph_is_drawn_node_by_node():
    """Under detail_limit each drawn node (ops, casts, the input) is a box; edges join boxes."""
    conv = _conversion()
    pic = collapse(conv)
    assert not pic.collapsed
    kinds = sorted(b.kind for b in pic.boxes)
    assert "input" in kinds and "cast" in kinds and kinds.count("op") == 2
    assert all(0 <= s < len(pic.boxes) and 0 <= d < len(pic.boxes) for s, d, _ in pic.edges)


def test_a_large_graph_is_collapsed_to_few_boxes():
    """With detail_limit=4 the 12-stage graph collapses to fewer boxes than drawn nodes."""
    conv = _conversion(blocks=12)
    pic = collapse(conv, detail_limit=4, max_boxes=6)
    drawn = sum(1 for n in conv.graph.nodes if not n.is_variable) + 1
    assert pic.collapsed and len(pic.boxes) < drawn


def test_fp32_islands_are_the_float32_ops_beside_low_precision():
    """The softmax between two float16 FullyConnected layers is a float32 island."""
    conv = _conversion(blocks=2)
    islands = fp32_islands(conv.graph, node_dtypes(conv), "float16")
    assert {conv.graph.nodes[i].name for i in islands} >= {"stage0_softmax"}
    assert all(conv.graph.nodes[i].op != "FullyConnected" for i in islands)
