"""Every graph entry [node, output, version] is checked against its producer before MXNet
sees the JSON (issue 33): an output index past the producer's outputs used to crash the
process inside MXNet's shape inference; a node reading a node that does not exist was
blamed on topological order."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import mxnet as mx
import pytest

from mxnet_amp.errors import GraphError
from mxnet_amp.mx.entries import output_count
from mxnet_amp.mx.io import graph_from_json

from helpers import saved_small_model, small_model

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _json():
    sym, _, _ = small_model()
    return json.loads(sym.tojson())


def _index(obj, name):
    return next(i for i, n in enumerate(obj["nodes"]) if n["name"] == name)


def test_reading_output_5_of_a_one_output_node_names_reader_producer_and_index():
    obj = _json()
    obj["nodes"][_index(obj, "conv2")]["inputs"][0][1] = 5   # conv2 reads relu1's output 5
    with pytest.raises(GraphError, match=r"node 'conv2' \(Convolution\) input 0 reads output 5 "
                                         r"of node \d+ 'relu1' \(Activation\), which has 1 output"):
        graph_from_json(json.dumps(obj))


def test_hidden_outputs_count_batchnorm_has_three():
    obj = _json()
    obj["nodes"][_index(obj, "relu1")]["inputs"][0][1] = 2   # bn1's var: a real output
    graph_from_json(json.dumps(obj))
    obj["nodes"][_index(obj, "relu1")]["inputs"][0][1] = 3
    with pytest.raises(GraphError, match="'bn1' \\(BatchNorm\\), which has 3 outputs"):
        graph_from_json(json.dumps(obj))


def test_a_head_past_its_producer_is_named():
    obj = _json()
    obj["heads"] = [[len(obj["nodes"]) - 1, 1, 0]]
    with pytest.raises(GraphError, match=r"graph output 0 \(heads\) reads output 1 of node"):
        graph_from_json(json.dumps(obj))


def test_a_missing_node_is_not_blamed_on_order():
    obj = _json()
    obj["nodes"][_index(obj, "fc")]["inputs"][0][0] = 999
    with pytest.raises(GraphError, match="reads node 999, which does not exist") as err:
        graph_from_json(json.dumps(obj))
    assert "topological" not in str(err.value)


@pytest.mark.parametrize("sym, count", [
    (lambda: mx.sym.SliceChannel(mx.sym.var("x"), num_outputs=4), 4),
    (lambda: mx.sym.BatchNorm(mx.sym.var("x"), output_mean_var=True), 3),
    (lambda: mx.sym.RNN(mx.sym.var("x"), mx.sym.var("p"), mx.sym.var("h"), mx.sym.var("c"),
                        state_size=4, num_layers=1, mode="lstm", state_outputs=True), 3),
    (lambda: mx.sym.Dropout(mx.sym.var("x")), 2),
])
def test_output_counts_are_mxnets(sym, count):
    graph = graph_from_json(sym().tojson())
    assert output_count(graph.nodes[-1]) == count


def test_foreach_output_count_from_its_body():
    def body(x, states):
        return [x * 2, x + 1], [states[0] + x]
    outs, last = mx.sym.contrib.foreach(body, mx.sym.var("d"), [mx.sym.var("s")])
    graph = graph_from_json(mx.sym.Group(outs + last).tojson())
    loop = next(n for n in graph.nodes if n.op == "_foreach")
    assert output_count(loop) == 3


def test_a_bad_entry_inside_a_loop_body_is_named():
    def body(x, states):
        y = x * 2
        return y, [states[0] + y]
    outs, last = mx.sym.contrib.foreach(body, mx.sym.var("d"), [mx.sym.var("s")])
    obj = json.loads(mx.sym.Group([outs] + last).tojson())
    loop = next(n for n in obj["nodes"] if n["op"] == "_foreach")
    body_graph = loop["subgraphs"][0]
    reader = next(n for n in body_graph["nodes"] if n["op"] != "null" and n["inputs"])
    reader["inputs"][0][1] = 4
    with pytest.raises(GraphError, match=r"subgraph of .*reads output 4 of node"):
        graph_from_json(json.dumps(obj))


@pytest.mark.parametrize("command", ["convert", "inspect"])
def test_cli_refuses_the_segfault_index_with_exit_2(tmp_path, command):
    prefix = saved_small_model(tmp_path, "m")
    obj = json.loads(open(prefix + "-symbol.json").read())
    obj["nodes"][_index(obj, "conv2")]["inputs"][0][1] = 5
    with open(prefix + "-symbol.json", "w") as f:
        json.dump(obj, f)
    env = {**os.environ, "PYTHONPATH": REPO}
    done = subprocess.run([sys.executable, "-m", "mxnet_amp", command, prefix, "--target-dtype",
                           "float16", "--out", str(tmp_path / "o")][:7 if command == "inspect" else 9],
                          capture_output=True, text=True, env=env, timeout=240)
    assert done.returncode == 2, (done.returncode, done.stderr[-500:])
    assert "reads output 5 of node" in done.stderr and "relu1" in done.stderr
    assert sorted(os.listdir(tmp_path)) == ["m-0000.params", "m-symbol.json"]
