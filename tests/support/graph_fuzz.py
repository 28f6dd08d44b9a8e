"""Random mutations of real symbol JSONs, and a worker that converts each in a subprocess.

Used by tests/stories/test_graph_fuzz.py. The models (:func:`base_models`) are small real ones: a
residual conv net with BatchNorm, an MLP ending in SoftmaxOutput, a split + LSTM (RNN op) +
foreach model, a Gluon block and the model zoo's mobilenet0.25 (random weights). :func:`mutations` makes a fixed list of
``(model, description, json text)`` from a seed; ``python graph_fuzz.py CASES OUT FOLDER START STOP`` converts
each case through the checkpoint path (the symbol file is parsed by mxnet-amp before MXNet
sees it) and writes ``start i`` / ``ok i`` / ``typed i`` / ``raw i ...`` lines to OUT as it
goes, so a case that kills the process is the one started and never finished.
"""
from __future__ import annotations

import copy
import json
import os
import random
import sys

GARBAGE = ["", "abc", "-1", "0", "1", "3", "-3", "1e9", "99999999999999999999", "(0, 0)",
           "(-1, 2)", "()", "(1,2,3,4,5,6,7,8)", "None", "True", "[1,2", "nan", "inf", "0.5",
           "float16", "int8", "bogus"]
DTYPE_CODES = [-7, -1, 0, 1, 2, 3, 4, 5, 6, 7, 12, 13, 99, "abc", "1.5"]


def base_models(folder: str) -> dict[str, str]:
    """Save the models as checkpoints ``folder/NAME`` (epoch 0); ``{name: symbol JSON}``."""
    import mxnet as mx
    import numpy as np
    from mxnet_amp.mx.io import save_checkpoint
    models = {}

    def save(name, sym, shapes, seed=0):
        arg_shapes, _, aux_shapes = sym.infer_shape(**shapes)
        rng = np.random.default_rng(seed)
        args = {n: mx.nd.array(rng.standard_normal(s).astype("float32") * 0.3)
                for n, s in zip(sym.list_arguments(), arg_shapes) if n not in shapes}
        auxs = {n: mx.nd.array(np.abs(rng.standard_normal(s)).astype("float32") + 0.5)
                for n, s in zip(sym.list_auxiliary_states(), aux_shapes)}
        save_checkpoint(os.path.join(folder, name), 0, sym, args, auxs)
        models[name] = sym.tojson()

    d = mx.sym.var("data")
    c1 = mx.sym.Convolution(d, num_filter=4, kernel=(3, 3), pad=(1, 1), name="conv1")
    b1 = mx.sym.BatchNorm(c1, name="bn1")
    r1 = mx.sym.Activation(b1, act_type="relu", name="relu1")
    c2 = mx.sym.Convolution(r1, num_filter=4, kernel=(1, 1), no_bias=True, name="conv2")
    b2 = mx.sym.BatchNorm(c2, fix_gamma=False, name="bn2")
    add = mx.sym.elemwise_add(b2, r1, name="add")
    pool = mx.sym.Pooling(add, kernel=(2, 2), stride=(2, 2), pool_type="max", name="pool")
    fc = mx.sym.FullyConnected(mx.sym.flatten(pool, name="flat"), num_hidden=5, name="fc")
    save("resnetish", mx.sym.softmax(fc, name="prob"), {"data": (2, 3, 8, 8)})

    h = mx.sym.FullyConnected(d, num_hidden=8, name="fc1")
    h = mx.sym.Activation(h, act_type="tanh", name="tanh1")
    h = mx.sym.Dropout(h, p=0.1, name="drop")
    h = mx.sym.FullyConnected(h, num_hidden=3, name="fc2")
    save("mlp", mx.sym.SoftmaxOutput(h, name="softmax"),
         {"data": (4, 6), "softmax_label": (4,)})

    parts = mx.sym.SliceChannel(d, num_outputs=2, axis=2, name="split")
    rnn = mx.sym.RNN(mx.sym.concat(parts[0], parts[1], dim=2, name="cat"),
                     mx.sym.var("rnn_params"), mx.sym.var("rnn_h"), mx.sym.var("rnn_c"),
                     state_size=4, num_layers=1, mode="lstm", state_outputs=True, name="rnn")

    def body(x, states):
        y = mx.sym.FullyConnected(x, num_hidden=4, flatten=False, name="body_fc")
        return y, [states[0] + y]
    outs, last = mx.sym.contrib.foreach(body, rnn[0], [mx.sym.var("acc")], name="loop")
    save("rnn_split", mx.sym.Group([outs, last[0], rnn[1]]),
         {"data": (5, 2, 4), "rnn_h": (1, 2, 4), "rnn_c": (1, 2, 4), "acc": (2, 4)})

    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Conv2D(4, 3, padding=1), mx.gluon.nn.BatchNorm(),
            mx.gluon.nn.Activation("relu"), mx.gluon.nn.GlobalAvgPool2D(),
            mx.gluon.nn.Dense(3))
    net.initialize(mx.init.Xavier())
    net.hybridize()
    net(mx.nd.ones((1, 3, 8, 8)))
    save("gluon_block", net(mx.sym.var("data")), {"data": (1, 3, 8, 8)})

    zoo = mx.gluon.model_zoo.vision.get_model("mobilenet0.25", pretrained=False)
    zoo.initialize(mx.init.Xavier())
    zoo.hybridize()
    zoo(mx.nd.ones((1, 3, 32, 32)))
    save("zoo_mobilenet0.25", zoo(mx.sym.var("data")), {"data": (1, 3, 32, 32)})
    return models


def _entry(rng: random.Random, n: int) -> list:
    return [rng.choice([rng.randrange(-2, n + 3), 999, rng.randrange(n)]),
            rng.choice([0, 0, 1, 2, 3, 5, -1, 100]), rng.choice([0, 0, 1, -1])]


def _mutate(obj: dict, rng: random.Random) -> str:
    """Mutate ``obj`` in place; returns what was done."""
    nodes = obj["nodes"]
    n = len(nodes)
    ops = [i for i, node in enumerate(nodes) if node["op"] != "null"]
    variables = [i for i, node in enumerate(nodes) if node["op"] == "null"]
    kind = rng.choice(["input", "input", "head", "attr", "attr", "attr", "attr_type", "op",
                       "drop", "dup", "swap", "dtype", "shape", "arg_nodes", "row_ptr", "inputs_type",
                       "heads_type", "body"])
    if kind == "input":
        i = rng.choice([i for i in ops if nodes[i]["inputs"]] or ops)
        if not nodes[i]["inputs"]:
            nodes[i]["inputs"] = [_entry(rng, n)]
        else:
            k = rng.randrange(len(nodes[i]["inputs"]))
            nodes[i]["inputs"][k] = _entry(rng, n)
        return f"node {nodes[i]['name']!r} input -> {nodes[i]['inputs']}"
    if kind == "head":
        k = rng.randrange(len(obj["heads"]))
        obj["heads"][k] = _entry(rng, n)
        return f"head {k} -> {obj['heads'][k]}"
    if kind == "heads_type":
        obj["heads"] = rng.choice([[], None, 5, [[0]], [["a", 0, 0]], [[1.5, 0, 0]], [[0, 0, 0, 0]]])
        return f"heads -> {obj['heads']!r}"
    if kind in ("attr", "attr_type"):
        i = rng.choice(ops)
        attrs = nodes[i].setdefault("attrs", {})
        if kind == "attr_type":
            nodes[i]["attrs"] = rng.choice([[1, 2], 7, "x", {"num_hidden": 3}, {"kernel": None}])
            return f"node {nodes[i]['name']!r} attrs -> {nodes[i]['attrs']!r}"
        key = rng.choice(sorted(attrs) + ["bogus_key", "num_outputs", "__dtype__"])
        if rng.random() < 0.15 and key in attrs:
            del attrs[key]
            return f"node {nodes[i]['name']!r} attr {key} deleted"
        attrs[key] = rng.choice(GARBAGE)
        return f"node {nodes[i]['name']!r} attr {key} -> {attrs[key]!r}"
    if kind == "op":
        i = rng.choice(ops)
        nodes[i]["op"] = rng.choice(["FullyConnected", "BatchNorm", "SliceChannel", "null",
                                     "amp_cast", "amp_multicast", "NoSuchOp", "_foreach",
                                     "Convolution", "RNN", "Cast", 5])
        return f"node {nodes[i]['name']!r} op -> {nodes[i]['op']!r}"
    if kind == "drop":
        i = rng.randrange(n)
        del nodes[i]
        return f"node {i} dropped"
    if kind == "dup":
        i = rng.randrange(n)
        nodes.insert(rng.randrange(n + 1), copy.deepcopy(nodes[i]))
        return f"node {i} duplicated"
    if kind == "swap":
        i, j = rng.randrange(n), rng.randrange(n)
        nodes[i], nodes[j] = nodes[j], nodes[i]
        return f"nodes {i} and {j} swapped"
    if kind in ("dtype", "shape"):
        i = rng.choice(variables)
        attrs = nodes[i].setdefault("attrs", {})
        if kind == "dtype":
            attrs["__dtype__"] = str(rng.choice(DTYPE_CODES))
        else:
            attrs["__shape__"] = rng.choice(GARBAGE)
        return f"variable {nodes[i]['name']!r} {kind} -> {attrs}"
    if kind == "arg_nodes":
        obj["arg_nodes"] = rng.choice([[], [999], [-1], list(range(n)), "x"])
        return f"arg_nodes -> {obj['arg_nodes']!r}"
    if kind == "row_ptr":
        obj["node_row_ptr"] = rng.choice([[], [0, 999], list(range(n + 5)), [-1] * n, "x"])
        return "node_row_ptr mutated"
    if kind == "inputs_type":
        i = rng.choice(ops)
        nodes[i]["inputs"] = rng.choice([[[0]], [[0, 0]], [["0", 0, 0]], [[0.0, 0, 0]], 3, [None]])
        return f"node {nodes[i]['name']!r} inputs -> {nodes[i]['inputs']!r}"
    # kind == "body": inside a loop body when the model has one, else an input again
    loops = [node for node in nodes if node.get("subgraphs")]
    if not loops:
        return _mutate(obj, rng)
    return "loop body: " + _mutate(rng.choice(loops)["subgraphs"][0], rng)


def mutations(models: dict[str, str], count: int, seed: int) -> list[tuple[str, str, str]]:
    """``count`` ``(model, description, json)`` cases: 1 to 3 mutations each."""
    rng = random.Random(seed)
    names = sorted(models)
    cases = []
    for _ in range(count):
        name = rng.choice(names)
        obj = json.loads(models[name])
        done = []
        for _ in range(rng.choice([1, 1, 1, 2, 3])):
            try:
                done.append(_mutate(obj, rng))
            except (IndexError, ValueError, TypeError, KeyError, AttributeError):
                done.append("(mutation not applicable)")
        cases.append((name, "; ".join(done), json.dumps(obj)))
    return cases


def _run(cases_file: str, out_file: str, folder: str, start: int, stop: int) -> None:
    import mxnet_amp as amp
    from mxnet_amp.errors import AMPError
    with open(cases_file) as f:
        cases = json.load(f)
    work = os.path.join(folder, f"work{os.getpid()}")
    os.makedirs(work, exist_ok=True)
    with open(out_file, "a", buffering=1) as out:
        for i in range(start, stop):
            name, _, text = cases[i]
            prefix = os.path.join(work, "case")
            with open(prefix + "-symbol.json", "w") as f:
                f.write(text)
            src = os.path.join(folder, name + "-0000.params")
            if not os.path.exists(prefix + "-0000.params"):
                os.symlink(src, prefix + "-0000.params")
            elif os.readlink(prefix + "-0000.params") != src:
                os.unlink(prefix + "-0000.params")
                os.symlink(src, prefix + "-0000.params")
            out.write(f"start {i}\n")
            try:
                amp.convert_checkpoint(prefix, 0, write=False,
                                       target_dtype="float16" if i % 2 else "bfloat16")
                out.write(f"ok {i}\n")
            except AMPError as err:
                out.write(f"typed {i} {type(err).__name__}: {str(err)[:200]!r}\n")
            except Exception as err:  # noqa: BLE001 - what the test reports
                text = str(err).strip().splitlines()
                out.write(f"raw {i} {type(err).__name__}: {(text[-1] if text else '')[:300]}\n")


if __name__ == "__main__":
    _run(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
