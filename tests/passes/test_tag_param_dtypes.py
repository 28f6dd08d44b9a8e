"""mxnet_amp.passes.tag_param_dtypes: variables tagged with the __dtype__ of their params."""
import mxnet as mx

from mxnet_amp.ir.dtypes import MX_CODE
from mxnet_amp.mx.io import graph_from_symbol
from mxnet_amp.passes.tag_param_dtypes import tag_param_dtypes


def _graph():
    return graph_from_symbol(mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=2, name="fc"))


def test_named_variables_get_their_dtype_code():
    """fc_weight stored in bfloat16 is tagged with MXNet's bfloat16 code; data is left alone."""
    tagged = tag_param_dtypes(_graph(), {"fc_weight": "bfloat16", "fc_bias": "float32"})
    attrs = {n.name: dict(n.attrs) for n in tagged.nodes}
    assert attrs["fc_weight"]["__dtype__"] == str(MX_CODE["bfloat16"])
    assert attrs["fc_bias"]["__dtype__"] == str(MX_CODE["float32"])
    assert "__dtype__" not in attrs["data"]


def test_a_graph_already_tagged_right_is_returned_as_is():
    """A second run with the same dtypes changes nothing: the same graph object comes back."""
    once = tag_param_dtypes(_graph(), {"fc_weight": "float16"})
    assert tag_param_dtypes(once, {"fc_weight": "float16"}) is once


def test_the_input_graph_is_not_modified_and_mxnet_reads_the_tags():
    """The original keeps no tag; in the tagged graph MXNet's type inference takes the
    weight's dtype from its tag (float16), with nothing else given."""
    import numpy as np

    from mxnet_amp.mx.io import graph_to_symbol
    g = _graph()
    tagged = tag_param_dtypes(g, {"fc_weight": "float16", "fc_bias": "float16"})
    assert "__dtype__" not in g.nodes[g.index_of("fc_weight")].attrs
    sym = graph_to_symbol(tagged)
    arg_types = dict(zip(sym.list_arguments(), sym.infer_type_partial()[0]))
    assert arg_types["fc_weight"] == np.float16


def test_golden_each_named_variable_gets_its_dtype_code():
    """Rule: every variable named gets ``__dtype__`` = MXNet's code of its dtype (other
    attributes kept, an existing tag rewritten); ops and unnamed variables are untouched."""
    from golden import assert_graph, graph, op, var
    given = graph(var("x"), var("w", __dtype__="0", __shape__="(4, 3)"), var("b"),
                  op("fc", "FullyConnected", "x", "w", "b", num_hidden="4"), heads=["fc"])
    expected = graph(var("x"), var("w", __dtype__="2", __shape__="(4, 3)"), var("b", __dtype__="12"),
                     op("fc", "FullyConnected", "x", "w", "b", num_hidden="4"), heads=["fc"])
    assert_graph(tag_param_dtypes(given, {"w": "float16", "b": "bfloat16", "fc": "float16"}), expected)
    assert tag_param_dtypes(expected, {"w": "float16", "b": "bfloat16"}) is expected
