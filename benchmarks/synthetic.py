"""Synthetic fp32 CNN/MLP graphs of a chosen node count, built as symbol JSON.

Composing 100k nodes through ``mx.sym`` is slow and builds deep Python call chains; writing
the JSON node list directly and loading it once is linear and needs no recursion.
The graph is shape-valid (``NCHW`` = ``1 x 16 x 8 x 8`` throughout) and cycles through four
block kinds so every cast situation appears: residual conv/BN blocks (target ops, fp32
BatchNorm statistics), Concat branches (widest), FullyConnected + softmax gating (fp32 op
inside a low precision run) and pooling / sigmoid blocks (follow ops).
"""
from __future__ import annotations

import json

CHANNELS, SIDE = 16, 8


class _Builder:
    def __init__(self) -> None:
        self.nodes: list[dict] = []
        self.count = 0

    def var(self, name: str) -> int:
        self.nodes.append({"op": "null", "name": name, "inputs": []})
        return len(self.nodes) - 1

    def op(self, op: str, name: str, inputs: list[int], **attrs) -> int:
        self.nodes.append({"op": op, "name": name, "attrs": {k: str(v) for k, v in attrs.items()},
                           "inputs": [[i, 0, 0] for i in inputs]})
        return len(self.nodes) - 1

    def conv(self, x: int, name: str, kernel: int = 3, channels: int = CHANNELS) -> int:
        w, b = self.var(name + "_weight"), self.var(name + "_bias")
        pad = kernel // 2
        return self.op("Convolution", name, [x, w, b], kernel=f"({kernel}, {kernel})",
                       pad=f"({pad}, {pad})", num_filter=channels)

    def bn(self, x: int, name: str) -> int:
        ins = [x] + [self.var(f"{name}_{p}") for p in ("gamma", "beta", "moving_mean", "moving_var")]
        return self.op("BatchNorm", name, ins, fix_gamma="False")

    def json(self, head: int) -> str:
        return json.dumps({
            "nodes": self.nodes,
            "arg_nodes": [i for i, n in enumerate(self.nodes) if n["op"] == "null"],
            "heads": [[head, 0, 0]],
            "attrs": {"mxnet_version": ["int", 10901]},
        })


def _residual(g: _Builder, x: int, p: str) -> int:
    h = g.op("Activation", p + "relu1", [g.bn(g.conv(x, p + "conv1"), p + "bn1")], act_type="relu")
    h = g.bn(g.conv(h, p + "conv2"), p + "bn2")
    return g.op("Activation", p + "relu2", [g.op("elemwise_add", p + "add", [h, x])], act_type="relu")


def _concat(g: _Builder, x: int, p: str) -> int:
    a, b = g.conv(x, p + "branch1", kernel=1), g.conv(x, p + "branch3", kernel=3)
    c = g.op("Concat", p + "concat", [a, b], dim=1, num_args=2)
    h = g.bn(g.conv(c, p + "reduce", kernel=1), p + "bn")
    return g.op("Activation", p + "relu", [h], act_type="relu")


def _gate(g: _Builder, x: int, p: str) -> int:
    w, b = g.var(p + "fc_weight"), g.var(p + "fc_bias")
    h = g.op("FullyConnected", p + "fc", [x, w, b], num_hidden=SIDE, flatten="False")
    h = g.op("LeakyReLU", p + "gelu", [h], act_type="gelu")
    s = g.op("softmax", p + "softmax", [h], axis=-1)
    return g.op("elemwise_add", p + "add", [g.op("elemwise_mul", p + "mul", [x, s]), x])


def _pool(g: _Builder, x: int, p: str) -> int:
    h = g.op("Pooling", p + "pool", [x], kernel="(3, 3)", stride="(1, 1)", pad="(1, 1)", pool_type="max")
    s = g.op("Activation", p + "sigmoid", [h], act_type="sigmoid")
    return g.op("elemwise_mul", p + "mul", [h, s])


_BLOCKS = (_residual, _concat, _gate, _pool, _residual)


def synthetic_json(num_nodes: int) -> str:
    """Symbol JSON of a graph with at least ``num_nodes`` nodes (variables included),
    input ``data`` of shape ``(1, 16, 8, 8)``."""
    g = _Builder()
    x = g.var("data")
    k = 0
    while len(g.nodes) < num_nodes - 3:
        x = _BLOCKS[k % len(_BLOCKS)](g, x, f"b{k}_")
        k += 1
    w = g.var("head_weight")
    head = g.op("FullyConnected", "head", [x, w], num_hidden=10, no_bias="True")
    return g.json(head)


def synthetic_model(num_nodes: int):
    """``(sym, arg_params, aux_params)`` for :func:`synthetic_json` with small random weights."""
    import mxnet as mx
    import numpy as np
    sym = mx.sym.load_json(synthetic_json(num_nodes))
    arg_shapes, _, aux_shapes = sym.infer_shape(data=(1, CHANNELS, SIDE, SIDE))
    rng = np.random.default_rng(0)
    arg_params = {n: mx.nd.array(rng.normal(0, 0.05, s), dtype="float32")
                  for n, s in zip(sym.list_arguments(), arg_shapes) if n != "data"}
    aux_params = {n: mx.nd.ones(s) for n, s in zip(sym.list_auxiliary_states(), aux_shapes)}
    return sym, arg_params, aux_params
