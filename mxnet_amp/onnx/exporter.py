"""MXNet's exporter run on a converted graph: the inputs it is shown (data then weights, each
typed), the converted ONNX graph (a bfloat16 model relabelled float16, its float16 constants
repaired from a float32 export) and the output names it writes. The files and the checks are
:mod:`mxnet_amp.onnx.export`'s.
"""
from __future__ import annotations

import contextlib
import json
import re
from typing import Any, Iterator, Mapping, Sequence

from ..errors import InputShapeError, OnnxExportError
from ..ir.dtypes import array_dtype
from ..ir.graph import CAST_OPS, Entry, Graph, Node
from ..mx.io import graph_to_symbol
from ..mx.params import cast_array
from ..passes.relabel_dtype import relabel_dtype
from .constants import repair_float16_constants
from .converters import onnx_dtype, register_converters

__all__ = ["ExportInputs", "exporter_graphs", "onnx_output_names", "mxnet_output_order", "mxnet_output_name"]


class ExportInputs:
    """The exporter's view of the inputs: data inputs (shapes given) then weights, in the
    symbol's ``list_inputs`` order, each with its shape and dtype name."""

    def __init__(self, sym: Any, graph: Graph, params: Mapping[str, Any],
                 shapes: Mapping[str, Sequence[int]], dtypes: Mapping[str, str]) -> None:
        internals = sym.get_internals()
        # MXNet's exporter skips this one input (a loss's label), as it names it
        label = internals[len(internals) - 1].name + "_label"
        self.names = [n for n in sym.list_inputs() if n != label]
        self.data = [n for n in self.names if n not in params]
        self.weights = [n for n in self.names if n in params]
        unknown = sorted(set(shapes) - set(self.data) - {label})
        missing = [n for n in self.data if n not in shapes]
        if unknown or missing:
            raise InputShapeError(
                f"input shapes must name each model input ({', '.join(self.data)}): "
                + "; ".join(([f"missing {', '.join(missing)}"] if missing else [])
                            + ([f"not a model input: {', '.join(unknown)}"] if unknown else [])))
        self.shapes = {n: tuple(int(d) for d in shapes[n]) for n in self.data}
        self.shapes.update({n: tuple(params[n].shape) for n in self.weights})
        self.dtypes = {n: dtypes.get(n, "float32") for n in self.data}
        self.dtypes.update({n: array_dtype(params[n]) for n in self.weights})
        self.params = _fixed_gammas(graph, params)   # the arrays the file holds


def _fixed_gammas(graph: Graph, params: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` with the gamma of each ``BatchNorm(fix_gamma=True)`` (MXNet's default) as
    ones: MXNet's op reads 1 there whatever the array holds, while MXNet 1.9.1's converter
    writes the array as the ONNX scale (measured: 0.27 off on a symbol-API BatchNorm).
    Only a gamma no other node reads is replaced (a new array; the caller's is untouched)."""
    import mxnet as mx
    readers: dict[str, list[Node]] = {}
    for node in graph.nodes:
        for entry in node.inputs:
            source = graph.nodes[entry.node]
            if source.is_variable:
                readers.setdefault(source.name, []).append(node)
    fixed = {}
    for name, nodes in readers.items():
        if name in params and all(n.op == "BatchNorm" and graph.nodes[n.inputs[1].node].name == name
                                  and str(n.attrs.get("fix_gamma", "True")).lower() in ("true", "1")
                                  for n in nodes):
            ones = mx.nd.ones(params[name].shape, dtype="float32")
            dtype = array_dtype(params[name])
            fixed[name] = ones if dtype == "float32" else cast_array(ones, dtype)
    return {**params, **fixed}


def _mxnet_graph(inputs: ExportInputs, graph: Graph, relabel: Mapping[str, str], opset: int,
                 dynamic_batch: bool) -> Any:
    """MXNet's exporter run on the model, every input (weights too) a typed graph input, each
    dtype in ``relabel`` shown to the exporter as the dtype it maps to."""
    from mxnet.onnx.mx2onnx._export_onnx import MXNetGraph
    register_converters()
    shown = graph
    for old, new in relabel.items():
        shown = relabel_dtype(shown, old, new)
    types = [onnx_dtype(relabel.get(inputs.dtypes[n], inputs.dtypes[n])) for n in inputs.names]
    shapes = [inputs.shapes[n] for n in inputs.names]
    dynamic = [((None,) + s[1:]) if n in inputs.data else s for n, s in zip(inputs.names, shapes)]
    try:
        with _graph_checked_at(opset):
            return MXNetGraph().create_onnx_graph_proto(
                _casts_kept_symbol(shown), {}, shapes, types, opset_version=opset,
                dynamic=dynamic_batch, dynamic_input_shapes=dynamic if dynamic_batch else None)
    except Exception as err:  # a converter's own failure: name the node it was converting
        node = _failing_node(err)
        what = "MXNet's converter" if node else "MXNet's exporter"
        raise OnnxExportError([(node.get("name", "(graph)"), node.get("op", "-"),
                                f"{what} failed: {type(err).__name__}: {err}")]) from err


def exporter_graphs(inputs: ExportInputs, graph: Graph, dtype: str | None, opset: int,
                     dynamic_batch: bool) -> tuple[Any, frozenset[str]]:
    """The exporter's graph and the constants repaired (for bfloat16: holding bfloat16
    words, rounded once from float32), its float16 constants made right: MXNet writes them as the bits
    of a float16 read as a number (``np.float16(v).view(np.uint16)`` passed to onnx's
    ``make_tensor``, which since onnx 1.13 converts values itself: a clip at 6 clips at
    17920), so each takes its value from a float32 export of the same graph instead."""
    if dtype is None:
        return _mxnet_graph(inputs, graph, {}, opset, dynamic_batch), frozenset()
    # MXNet's exporter knows no bfloat16: a bfloat16 model is exported relabelled float16
    proto = _mxnet_graph(inputs, graph, {"bfloat16": "float16"}, opset, dynamic_batch)
    wide = _mxnet_graph(inputs, graph, {dtype: "float32"}, opset, dynamic_batch)
    repaired = repair_float16_constants(proto, wide, as_bfloat16=dtype == "bfloat16")
    return proto, frozenset(repaired)


@contextlib.contextmanager
def _graph_checked_at(opset: int) -> Iterator[None]:
    """MXNet's exporter ends with ``onnx.checker.check_graph(graph)``, which checks against
    onnx's default context: the newest opset the onnx package knows (19 for onnx 1.14), not
    the one exported. An opset-13 ReduceMean (its ``axes`` an attribute until opset 18: every
    LayerNorm) then fails that check although it is right. The default context is set to
    the exported opset for the call, and restored after."""
    from onnx import checker
    before = checker.DEFAULT_CONTEXT.opset_imports
    checker.DEFAULT_CONTEXT.opset_imports = {"": opset}
    try:
        yield
    finally:
        checker.DEFAULT_CONTEXT.opset_imports = before


def _failing_node(err: BaseException) -> dict:
    """The MXNet JSON node ``MXNetGraph.convert_layer`` was converting when ``err`` rose."""
    tb = err.__traceback__
    node: dict = {}
    while tb is not None:
        if tb.tb_frame.f_code.co_name == "convert_layer":
            node = tb.tb_frame.f_locals.get("node", node)
        tb = tb.tb_next
    return node


def _casts_kept_symbol(graph: Graph) -> Any:
    """A Symbol of ``graph`` whose ``tojson()`` keeps the amp casts: MXNet's exporter reads
    the graph through ``tojson()``, which drops casts by default (``remove_amp_cast``)."""
    import mxnet as mx

    class CastsKeptSymbol(mx.sym.Symbol):
        def tojson(self, remove_amp_cast: bool = False) -> str:
            return str(super().tojson(remove_amp_cast=False))

    sym = graph_to_symbol(graph)
    kept = CastsKeptSymbol(sym.handle)
    sym.handle = None   # the handle changes owner: freed once, by ``kept``
    return kept


def onnx_output_names(graph: Graph) -> list[str]:
    """The float32 model's output names as MXNet's exporter writes them: each head followed
    through the casts a conversion puts before it (dtype only: the tensor is the same)."""
    return [name for name, _ in _float32_heads(graph)]


def mxnet_output_order(graph: Graph) -> list[int]:
    """Positions of ``graph``'s heads (``list_outputs()`` order) in the order MXNet's
    exporter writes the float32 model's outputs: by the node that makes each (heads
    followed through the conversion's casts), one node's outputs by name
    (``MXNetGraph.create_onnx_graph_proto`` collects them node by node and sorts each
    node's). ``mx.onnx.export_model`` writes ``Group([b, a])`` with ``b = FC(a)`` as
    ``a, b``: a converted model's file lists them as the float32 model's does."""
    heads = _float32_heads(graph)
    return sorted(range(len(heads)), key=lambda k: (heads[k][1], heads[k][0], k))


def _float32_heads(graph: Graph) -> list[tuple[str, int]]:
    """``(MXNet exporter's output name, node position)`` of each head, followed through casts."""
    import mxnet as mx
    heads = []
    for head in graph.heads:
        while graph.nodes[head.node].op in CAST_OPS:
            node = graph.nodes[head.node]
            head = node.inputs[head.output if node.op == "amp_multicast" else 0]
        heads.append(Entry(head.node, head.output))
    sym = graph_to_symbol(Graph(graph.nodes, tuple(heads), graph.attrs))
    assert isinstance(sym, mx.sym.Symbol)
    # the exporter walks the nodes of ``tojson()``: NNVM's depth-first order from the heads
    position = {node["name"]: k for k, node in enumerate(json.loads(sym.tojson())["nodes"])}
    return [(mxnet_output_name(n), position.get(graph.nodes[h.node].name, h.node))
            for n, h in zip(sym.list_outputs(), heads)]


def mxnet_output_name(name: str) -> str:
    """MXNet's exporter's name for a symbol output (``MXNetGraph.get_outputs``' rule)."""
    for suffix, end in (("_state_output", "1"), ("_statecell_output", "2"), ("_output", "")):
        if name.endswith(suffix):
            return name[:-len(suffix)] + end
    if re.search(".*_output[0-9]$", name):
        return name[:-len("_output0")] + name[-1]
    return name
