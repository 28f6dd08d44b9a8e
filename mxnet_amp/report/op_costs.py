"""What each op node of a converted graph costs, for the precision map's sizes.

:func:`op_costs` runs MXNet's partial shape inference once on the converted graph and
estimates each op node's floating point operations from the shapes: a ``Convolution`` or
``FullyConnected`` two per multiply-accumulate, a ``dot`` / ``batch_dot`` and the interleaved
attention products likewise, every other op one per element it reads or writes (whichever
is more). The model inputs' shapes are the
caller's; where none are given each input gets what its readers prove about it (channels
from a convolution weight, :func:`mxnet_amp.shape_check.guess.guess_input_shapes`), with a
batch of 1 and 224 for every other unknown dimension, and the result says so. When no shape
can be inferred at all, every op costs the same and the result says that too.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Sequence

from ..ir.graph import CAST_OPS, Graph, Node, attr_ints
from ..mx.io import graph_to_symbol
from ..shape_check.guess import guess_input_shapes

if TYPE_CHECKING:   # only annotations name it
    from ..record import Conversion

__all__ = ["Costs", "op_costs", "node_flops", "ASSUMED_DIM"]

ASSUMED_DIM = 224     # an input dimension nobody gave nor proved (an image side, a sequence length)
_MATMUL = frozenset({"dot", "batch_dot", "linalg_gemm2", "_npi_matmul"})
# MXNet's fused multi-head attention products (GluonNLP's BERT): queries, keys and values
# interleaved in one input
_ATTENTION = frozenset({"_contrib_interleaved_matmul_selfatt_qk", "_contrib_interleaved_matmul_selfatt_valatt",
                        "_contrib_interleaved_matmul_encdec_qk", "_contrib_interleaved_matmul_encdec_valatt"})
_TRUE = ("true", "1")


@dataclass(frozen=True)
class Costs:
    """Each node's estimated cost and what the numbers mean.

    Attributes
    ----------
    values : tuple of float or None
        Per node of the graph: its estimated FLOPs (None for variables, casts and op nodes
        whose shapes stayed unknown; 1.0 for every op when no shape was known).
    unit : str
        ``'FLOPs'``, or ``'op'`` when every op counts the same.
    basis : str
        How the numbers were found, in words (the input shapes used, given or assumed).
    """

    values: tuple[float | None, ...]
    unit: str
    basis: str


def _prod(shape: Sequence[int] | None) -> int:
    return math.prod(int(d) for d in shape or ())


def _known(shape: Sequence[int] | None) -> bool:
    return bool(shape) and all(int(d) > 0 for d in shape or ())


def node_flops(node: Node, out: Sequence[int] | None, ins: Sequence[Sequence[int] | None]) -> float | None:
    """The estimated floating point operations of ``node``, with ``out`` its first output's
    shape and ``ins`` its inputs' shapes (None or zeros where unknown); None when the shapes
    needed are unknown."""
    if not _known(out):
        return None
    n_out = _prod(out)
    op = node.op
    if op in ("Convolution", "Deconvolution", "FullyConnected") and len(ins) > 1 and _known(ins[1]):
        weight = tuple(ins[1] or ())
        if op == "Deconvolution":
            # every input element is spread over (out channels / groups) x kernel outputs
            data = ins[0]
            return 2.0 * _prod(data) * _prod(weight[1:]) if _known(data) else None
        return 2.0 * n_out * _prod(weight[1:])
    if op in _MATMUL and ins and _known(ins[0]):
        a = tuple(ins[0] or ())
        transposed = node.attrs.get("transpose_a", "False").lower() in _TRUE
        inner = a[-2] if transposed and len(a) > 1 else a[-1]
        return 2.0 * n_out * inner
    if op in _ATTENTION and ins and all(_known(s) for s in ins):
        return 2.0 * n_out * _attention_inner(op, node, ins)
    read = max((_prod(s) for s in ins if _known(s)), default=0)
    return float(max(n_out, read))


def _attention_inner(op: str, node: Node, ins: Sequence[Sequence[int] | None]) -> int:
    """The length of the products an interleaved attention op sums: a head's width for the
    scores (``qk``), the attended length for the weighted values (``valatt``)."""
    if op.endswith("valatt"):
        return int(tuple(ins[1] or ())[-1]) if len(ins) > 1 else 0
    heads = max(1, (attr_ints(node.attrs.get("heads")) or (1,))[0])
    width = int(tuple(ins[0] or ())[-1])
    return width // (3 * heads) if op.endswith("selfatt_qk") else width // heads


def _variable_shapes(graph: Graph) -> dict[str, tuple[int, ...]]:
    """The shapes the graph's variables carry (``__shape__``, as Gluon's export writes them)."""
    out = {}
    for node in graph.nodes:
        shape = attr_ints(node.attrs.get("__shape__")) if node.is_variable else ()
        if _known(shape):
            out[node.name] = shape
    return out


def _input_shapes(graph: Graph, data: Sequence[str], given: Mapping[str, tuple]) -> tuple[dict, list[str]]:
    """Every model input's shape: ``given``, else what its readers prove with the unknown
    dimensions assumed; and the inputs whose shape was assumed."""
    shapes = {k: tuple(v) for k, v in given.items()}
    missing = [n for n in data if n not in shapes]
    guessed = guess_input_shapes(graph, missing, _variable_shapes(graph)) if missing else {}
    consumers = graph.consumers() if missing else []
    for name in missing:
        shape = guessed.get(name) or _image_guess(graph, consumers, name)
        if shape:
            shapes[name] = tuple(1 if k == 0 else d if d > 0 else ASSUMED_DIM for k, d in enumerate(shape))
    return shapes, missing


def _image_guess(graph: Graph, consumers: Sequence[Sequence[tuple[int, int]]], name: str) -> tuple[int, ...]:
    """An input a convolution reads directly, its weight's shape unknown (a Gluon export
    of a deferred-init layer): ``(1, 3, 0, ...)``, an RGB image; ``()`` otherwise."""
    try:
        start = graph.index_of(name)
    except KeyError:
        return ()
    stack = [start]
    while stack:   # through the casts the conversion put in
        for j, pos in consumers[stack.pop()]:
            node = graph.nodes[j]
            kernel = attr_ints(node.attrs.get("kernel"))
            if node.op in CAST_OPS:
                stack.append(j)
            elif pos == 0 and node.op == "Convolution" and kernel and node.attrs.get("layout", "NC").startswith("NC"):
                return (1, 3) + (0,) * len(kernel)
    return ()


def _inferred(conversion: Conversion, shapes: Mapping[str, tuple]) -> dict[str, tuple[int, ...]]:
    """Output name (``node_output``, ``node_output1``, a variable's name) -> shape, by MXNet's
    partial inference over the whole graph; empty when MXNet refuses."""
    import mxnet as mx
    try:
        symbol = conversion.symbol if conversion.symbol is not None else graph_to_symbol(conversion.graph)
        internals = symbol.get_internals()
        args = set(internals.list_arguments())
        _, outs, _ = internals.infer_shape_partial(**{k: v for k, v in shapes.items() if k in args})
    except (mx.base.MXNetError, ValueError, TypeError):
        # a model MXNet's partial inference cannot walk: the map falls back to equal sizes
        return {}
    return {name: tuple(s) for name, s in zip(internals.list_outputs(), outs or ()) if s is not None}


def _entry_shape(inferred: Mapping[str, tuple], node: Node, output: int) -> tuple[int, ...] | None:
    if node.is_variable:
        return inferred.get(node.name)
    return inferred.get(f"{node.name}_output{output}") or (
        inferred.get(f"{node.name}_output") if output == 0 else None)


def _words(shapes: Mapping[str, tuple], data: Sequence[str], assumed: Sequence[str]) -> str:
    """``data 1x3x224x224 (assumed), mask 1x8``: the model inputs' shapes used."""
    return ", ".join(f"{k} {'x'.join(map(str, v))}{' (assumed)' if k in assumed else ''}"
                     for k, v in shapes.items() if k in data)


def op_costs(conversion: Conversion, input_shapes: Mapping[str, tuple] | None = None) -> Costs:
    """The estimated cost of each node of ``conversion.graph`` (see the module doc).

    Parameters
    ----------
    conversion : mxnet_amp.record.Conversion
    input_shapes : mapping of str to tuple of int, optional
        The model inputs' shapes; inputs not named are assumed (batch 1, 224 for unknown
        dimensions).

    Returns
    -------
    Costs
    """
    graph = conversion.graph
    shapes, assumed = _input_shapes(graph, conversion.data_names, input_shapes or {})
    inferred = _inferred(conversion, shapes) if shapes else {}
    values: list[float | None] = []
    for node in graph.nodes:
        if node.is_variable or node.op in CAST_OPS:
            values.append(None)
            continue
        ins = [_entry_shape(inferred, graph.nodes[e.node], e.output) for e in node.inputs]
        values.append(node_flops(node, _entry_shape(inferred, node, 0), ins))
    words = _words(shapes, conversion.data_names, assumed)
    if not any(v is not None for v in values):
        equal = tuple(None if n.is_variable or n.op in CAST_OPS else 1.0 for n in graph.nodes)
        why = f"MXNet's shape inference failed at input {words}" if shapes and not inferred else "no shapes known"
        return Costs(equal, "op", why + ": every op drawn the same size")
    return Costs(tuple(values), "FLOPs", f"estimated FLOPs at input {words}" if words else "estimated FLOPs")
