"""Small helpers the tests share: graph inspection and running converted models on CPU."""
from __future__ import annotations

import numpy as np
import mxnet as mx

from mxnet_amp.graph import Graph
from mxnet_amp.io import graph_from_symbol


def graph_of(sym) -> Graph:
    return graph_from_symbol(sym)


def nodes_by_op(sym, op):
    return [n for n in graph_of(sym).nodes if n.op == op]


def producer(graph: Graph, node, k: int = 0):
    """The node feeding input ``k`` of ``node``."""
    return graph.nodes[node.inputs[k].node]


def node(graph: Graph, name: str):
    return graph.nodes[graph.index_of(name)]


def casts_into(graph: Graph, name: str) -> list[str]:
    """dtype of each amp_cast that feeds node ``name`` directly ('-' for uncast inputs)."""
    n = node(graph, name)
    out = []
    for e in n.inputs:
        src = graph.nodes[e.node]
        out.append(src.attrs["dtype"] if src.op == "amp_cast" else
                   ("multicast" if src.op == "amp_multicast" else "-"))
    return out


def run(sym, arg_params, aux_params, inputs: dict):
    """Forward ``sym`` on CPU; returns the outputs as float32 numpy arrays."""
    args = {**arg_params, **{k: mx.nd.array(v) for k, v in inputs.items()}}
    exe = sym.bind(mx.cpu(), args, aux_states=dict(aux_params), grad_req="null")
    return [o.astype("float32").asnumpy() for o in exe.forward(is_train=False)]


def init_params(sym, shapes: dict, seed: int = 0, scale: float = 0.5):
    """Random arg/aux params for ``sym`` given input shapes (variance kept near 1)."""
    rng = np.random.RandomState(seed)
    arg_shapes, _, aux_shapes = sym.infer_shape(**shapes)
    args, auxs = {}, {}
    for name, shape in zip(sym.list_arguments(), arg_shapes):
        if name in shapes:
            continue
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        args[name] = mx.nd.array(rng.randn(*shape) * scale / np.sqrt(fan_in))
    for name, shape in zip(sym.list_auxiliary_states(), aux_shapes):
        auxs[name] = mx.nd.array(np.abs(rng.randn(*shape)) + (0.5 if "var" in name else 0))
    return args, auxs


def rel_error(out, ref) -> float:
    """max |out - ref| relative to max |ref|."""
    return float(np.abs(out - ref).max() / (np.abs(ref).max() + 1e-30))
