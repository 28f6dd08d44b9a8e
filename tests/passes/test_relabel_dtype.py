"""mxnet_amp.passes.relabel_dtype: one dtype named as another in dtype / __dtype__ attributes."""
from mxnet_amp.ir.dtypes import MX_CODE
from mxnet_amp.ir.graph import Entry, GraphBuilder, Node, cast_node
from mxnet_amp.passes.relabel_dtype import dtypes_named, relabel_dtype
from mxnet_amp.passes.tag_param_dtypes import tag_param_dtypes


def _bf16_graph():
    """data -> amp_cast bf16 -> fc with a weight tagged bfloat16."""
    b = GraphBuilder()
    data = b.add(Node("null", "data", ()))
    low = b.add(cast_node("c", Entry(data), "bfloat16"))
    w = b.add(Node("null", "fc_weight", ()))
    fc = b.add(Node("FullyConnected", "fc", (Entry(low), Entry(w)), {"num_hidden": "2", "no_bias": "True"}))
    return tag_param_dtypes(b.build([Entry(fc)]), {"fc_weight": "bfloat16"})


def test_casts_and_tags_are_relabelled():
    """The cast's dtype and the weight's __dtype__ code both name float16 afterwards."""
    g = relabel_dtype(_bf16_graph(), "bfloat16", "float16")
    assert g.nodes[g.index_of("c")].attrs["dtype"] == "float16"
    assert g.nodes[g.index_of("fc_weight")].attrs["__dtype__"] == str(MX_CODE["float16"])
    assert dtypes_named(g) == {"float16"}


def test_dtypes_named_reads_both_attributes():
    """dtypes_named lists the cast's dtype and the tag's dtype."""
    assert dtypes_named(_bf16_graph()) == {"bfloat16"}


def test_a_graph_without_the_old_dtype_is_returned_as_is():
    """Nothing names float64: the same graph object comes back."""
    g = _bf16_graph()
    assert relabel_dtype(g, "float64", "float32") is g


def test_golden_one_dtype_is_renamed_in_every_attribute_naming_it():
    """Rule: ``dtype=old`` becomes ``dtype=new`` and ``__dtype__`` old's code becomes new's
    code, on every node; other dtypes and attributes stay."""
    from golden import assert_graph, cast, graph, op, var
    given = graph(var("x"), var("w", __dtype__="12"), cast("x16", "x", "bfloat16"),
                  op("fc", "FullyConnected", "x16", "w", num_hidden="2"), cast("y", "fc", "float32"),
                  heads=["y"])
    expected = graph(var("x"), var("w", __dtype__="2"), cast("x16", "x", "float16"),
                     op("fc", "FullyConnected", "x16", "w", num_hidden="2"), cast("y", "fc", "float32"),
                     heads=["y"])
    assert_graph(relabel_dtype(given, "bfloat16", "float16"), expected)
    assert relabel_dtype(expected, "bfloat16", "float16") is expected
