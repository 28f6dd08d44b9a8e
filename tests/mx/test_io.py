"""mxnet_amp.mx.io: symbol JSON <-> Graph, and checkpoints that keep their amp casts."""
import json

import mxnet as mx
import numpy as np
import pytest

from mxnet_amp.errors import CheckpointError, GraphError
from mxnet_amp.mx.io import (graph_from_json, graph_from_symbol, graph_to_json, graph_to_symbol,
                             load_checkpoint, save_checkpoint, symbol_json)


def _cast_model():
    """data -> amp_cast(float16) -> fc: a converted-looking symbol with one cast."""
    x = mx.sym.amp_cast(mx.sym.var("data"), dtype="float16", name="data_cast")
    return mx.sym.FullyConnected(x, num_hidden=2, name="fc")


def test_json_round_trip_keeps_nodes_heads_and_casts():
    """A symbol's JSON parsed and written back gives the same nodes, heads and the amp_cast."""
    sym = _cast_model()
    g = graph_from_symbol(sym)
    assert [n.op for n in g.nodes] == ["null", "amp_cast", "null", "null", "FullyConnected"]
    again = graph_from_json(graph_to_json(g))
    assert again.nodes == g.nodes and again.heads == g.heads
    assert graph_to_symbol(g).list_arguments() == sym.list_arguments()


def test_malformed_json_is_a_graph_error_that_says_what_is_wrong():
    """Truncated text, a missing node list, an input reading a later node and missing heads
    are GraphErrors naming the problem."""
    with pytest.raises(GraphError, match="truncated"):
        graph_from_json('{"nodes": [')
    with pytest.raises(GraphError, match="no 'nodes' list"):
        graph_from_json("{}")
    later = {"nodes": [{"op": "relu", "name": "r", "inputs": [[1, 0, 0]]},
                       {"op": "null", "name": "x", "inputs": []}], "heads": [[0, 0, 0]]}
    with pytest.raises(GraphError, match="does not exist|does not come before"):
        graph_from_json(json.dumps(later))
    with pytest.raises(GraphError, match="no outputs"):
        graph_from_json(json.dumps({"nodes": [{"op": "null", "name": "x", "inputs": []}], "heads": []}))


def test_graph_to_json_writes_names_as_they_are():
    """Non-ASCII names are written as such, not as \\u escapes MXNet cannot read."""
    sym = mx.sym.relu(mx.sym.var("données"), name="relu")
    assert "données" in graph_to_json(graph_from_symbol(sym))
    assert "amp_cast" in symbol_json(_cast_model())


def test_save_and_load_checkpoint_keep_the_casts_and_params(tmp_path):
    """save_checkpoint keeps amp_cast (mx.model.save_checkpoint drops it); load_checkpoint
    gives back the symbol and the arg:/aux: params."""
    sym = _cast_model()
    args = {"fc_weight": mx.nd.ones((2, 3), dtype="float16"), "fc_bias": mx.nd.zeros((2,), dtype="float16")}
    prefix = str(tmp_path / "m")
    save_checkpoint(prefix, 3, sym, args, {})
    assert "amp_cast" in (tmp_path / "m-symbol.json").read_text()
    loaded, largs, lauxs = load_checkpoint(prefix, 3)
    assert "data_cast" in loaded.get_internals().list_outputs()[1]
    assert sorted(largs) == ["fc_bias", "fc_weight"] and lauxs == {}
    np.testing.assert_array_equal(largs["fc_weight"].asnumpy(), np.ones((2, 3)))


def test_load_checkpoint_names_a_missing_file(tmp_path):
    """A checkpoint without its params file is a CheckpointError naming that file."""
    (tmp_path / "m-symbol.json").write_text(symbol_json(_cast_model()))
    with pytest.raises(CheckpointError, match="m-0000.params"):
        load_checkpoint(str(tmp_path / "m"), 0)


def test_save_checkpoint_without_params_is_refused_before_writing(tmp_path):
    """``save_checkpoint(p, 0, sym, None, None)`` is an ArgumentError naming arg_params, and
    nothing is written (it wrote an empty params file no loader binds; newcomer audit, #42);
    {} stays a model without params, and aux None is fine where the model has no aux state."""
    from mxnet_amp.errors import ArgumentError
    from mxnet_amp.mx.io import save_checkpoint
    sym = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=2, name="fc")
    with pytest.raises(ArgumentError, match=r"arg_params is None: the model's params are needed"):
        save_checkpoint(str(tmp_path / "m"), 0, sym, None, None)
    bn = mx.sym.BatchNorm(mx.sym.var("data"), name="bn")
    with pytest.raises(ArgumentError, match=r"aux_params is None"):
        save_checkpoint(str(tmp_path / "b"), 0, bn, {"bn_gamma": mx.nd.ones(3), "bn_beta": mx.nd.zeros(3)}, None)
    assert list(tmp_path.iterdir()) == []
    save_checkpoint(str(tmp_path / "m"), 0, sym, {"fc_weight": mx.nd.ones((2, 3)), "fc_bias": mx.nd.zeros(2)}, None)
    assert (tmp_path / "m-0000.params").exists()


@pytest.mark.parametrize("body, match", [
    (b'{"nodes": [{"op": "null", "name": "d\xe9"}]}', r"a-symbol.json: not valid JSON \('utf-8' codec can't decode byte 0xe9 in position \d+"),
    (b"[" * 100000 + b"]" * 100000, r"a-symbol.json: JSON nested deeper than Python's parser goes"),
])
def test_a_corrupt_symbol_file_is_a_graph_error_naming_it(tmp_path, body, match):
    """A bad byte or absurd nesting in the symbol file is a GraphError naming the file (raw
    UnicodeDecodeError / RecursionError before; newcomer audit, #42)."""
    from mxnet_amp.mx.io import load_checkpoint
    sym = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=2, name="fc")
    mx.model.save_checkpoint(str(tmp_path / "a"), 0, sym, {"fc_weight": mx.nd.ones((2, 3)),
                                                           "fc_bias": mx.nd.zeros(2)}, {})
    (tmp_path / "a-symbol.json").write_bytes(body)
    with pytest.raises(GraphError, match=match):
        load_checkpoint(str(tmp_path / "a"), 0)
