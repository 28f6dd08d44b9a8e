"""Export a converted (mixed precision) model to ONNX with every decision kept.

MXNet's own exporter (``mx.onnx``, opsets 12 and 13) converts the graph, with converters for
``amp_cast`` / ``amp_multicast`` added through its registration decorator
(:mod:`mxnet_amp.onnx.converters`): each cast becomes an ONNX ``Cast`` where the conversion
put it. The weights reach the exporter as typed graph inputs only and are written here in
their stored dtypes (:mod:`mxnet_amp.onnx.weights`), inline or, past the 2 GB protobuf
limit, in an external data file. A bfloat16 model is exported relabelled float16 and
relabelled back (:mod:`mxnet_amp.onnx.retype`). The result passes ``onnx.checker``'s full
check and ONNX's strict shape inference before its files take their names.
"""
from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from ..errors import ArgumentError, OnnxExportError, OnnxMissingError
from ..files.atomic import atomic_writes
from ..files.paths import check_outputs
from ..ir.dtypes import array_dtype
from ..ir.graph import CAST_OPS, Graph
from ..mx.arguments import (check_bool, check_dtype_map, check_int, check_names, check_optional_bool, check_path,
                            check_symbol, param_dict)
from ..mx.io import graph_from_symbol
from ..passes.relabel_dtype import dtypes_named
from .constants import match_constant_dtypes
from .converters import OPSETS, converter_table, onnx_dtype
from .exporter import ExportInputs, exporter_graphs, mxnet_output_name, mxnet_output_order, onnx_output_names
from .retype import retype_float16_as_bfloat16, widen_where_onnx_lacks_dtype
from .tidy import inference_batchnorms, name_nodes, plain_float_casts
from .weights import EXTERNAL_DATA_THRESHOLD, WeightPlan, plan_weights

__all__ = ["export_onnx", "OnnxExport", "DEFAULT_OPSET", "check_exportable"]

# opset 13: the newest MXNet 1.9.1 converts to (its opset-13 converters cover the ops whose
# ONNX form changed, Softmax and the reductions among them); onnxruntime and TensorRT run it
DEFAULT_OPSET = 13
_BATCH = "batch"


@dataclass(frozen=True)
class OnnxExport:
    """What :func:`export_onnx` wrote.

    Attributes
    ----------
    path, data_path : str, str or None
        The model file; the external data file (None: the weights are inline).
    opset : int
    dtype : str or None
        The model's low precision dtype (None: a float32 model).
    model_bytes, data_bytes : int
        File sizes.
    cast_nodes : int
        ONNX ``Cast`` nodes in the graph.
    amp_cast_nodes, amp_casts : int, int
        The model's ``amp_cast`` / ``amp_multicast`` nodes, and the ``Cast`` nodes they became
        (a multicast becomes one per input).
    inputs, outputs : tuple of str
        Graph input and output names, in the file's order: the outputs as
        ``mx.onnx.export_model`` orders the float32 model's (by the node that makes each,
        not by ``list_outputs()``).
    symbol_outputs : tuple of str
        The output names in ``sym.list_outputs()`` order:
        ``session.run(list(record.symbol_outputs), feed)`` returns what MXNet's executor does.
    dynamic_batch : bool
    widened : tuple of (str, str)
        ``(node, ONNX op)`` of each node whose ONNX op takes no tensor of the model's low
        precision dtype at the opset (for bfloat16: Conv, MaxPool...; for float16: Range),
        computed in float32 between casts (its inputs and outputs keep that dtype).
    constants : tuple of (str, str)
        ``(node, constant)``: float32 constants MXNet's converters made beside a low
        precision input, written in that dtype (:mod:`mxnet_amp.onnx.constants`).
    seconds : float
        Wall time of the export.
    """

    path: str
    data_path: str | None
    opset: int
    dtype: str | None
    model_bytes: int
    data_bytes: int
    cast_nodes: int
    amp_cast_nodes: int
    amp_casts: int
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    symbol_outputs: tuple[str, ...]
    dynamic_batch: bool
    widened: tuple[tuple[str, str], ...]
    constants: tuple[tuple[str, str], ...]
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        """The record as JSON-able values (the report's ``onnx`` entry)."""
        return {k: (list(map(list, v)) if k in ("widened", "constants") else
                    list(v) if isinstance(v, tuple) else v)
                for k, v in dataclasses.asdict(self).items()}

    def describe(self) -> str:
        """The export, as the report's lines."""
        files = f"{self.path} ({_size(self.model_bytes)})"
        if self.data_path:
            files += f" + external data {self.data_path} ({_size(self.data_bytes)})"
        return "\n".join([
            f"ONNX export: {files}, opset {self.opset}, {self.dtype or 'float32'}"
            f"{', dynamic batch' if self.dynamic_batch else ''}",
            f"  casts: {self.amp_cast_nodes} amp_cast/amp_multicast node(s) -> {self.amp_casts} "
            f"ONNX Cast node(s); {self.cast_nodes} Cast node(s) in all",
            f"  inputs: {', '.join(self.inputs)}; outputs: {', '.join(self.outputs)}",
            *([f"  {len(self.widened)} node(s) whose ONNX op takes no {self.dtype} at opset "
               f"{self.opset} compute in float32 between casts (tensors stay {self.dtype}): "
               + ", ".join(f"{n} ({op})" for n, op in self.widened[:8])
               + (" ..." if len(self.widened) > 8 else "")] if self.widened else []),
            *([f"  {len(self.constants)} float32 constant(s) of MXNet's converters beside a "
               f"{self.dtype} input written in {self.dtype}"] if self.constants else []),
            "  checked: onnx.checker (full check) and strict shape inference pass",
        ])


def _size(n: int) -> str:
    return f"{n / 2 ** 20:.1f} MiB" if n >= 2 ** 20 else f"{n} B"


def export_onnx(sym: Any, arg_params: Mapping[str, Any], aux_params: Mapping[str, Any],
                input_shapes: Mapping[str, Sequence[int]], path: str | os.PathLike, *,
                opset: int = DEFAULT_OPSET, dynamic_batch: bool = False,
                input_dtypes: Mapping[str, str] | None = None, output_names: Sequence[str] | None = None,
                external_data: bool | None = None, external_threshold: int = EXTERNAL_DATA_THRESHOLD,
                protect: Sequence[str | os.PathLike] = ()) -> OnnxExport:
    """Export a (converted) MXNet model to an ONNX file.

    Parameters
    ----------
    sym : Symbol
        The model, its ``amp_cast`` / ``amp_multicast`` kept (``convert_model``'s output).
    arg_params, aux_params : dict of str to NDArray
        Written in their own dtypes (float16, bfloat16, float32...).
    input_shapes : mapping of str to tuple of int
        Shape of each model input (every argument without a param).
    path : str or path
        The ``.onnx`` file (external data: ``PATH.data`` beside it), written atomically.
    opset : {12, 13}, default 13
    dynamic_batch : bool, default False
        Leave the first dimension of each input free (``batch``).
    input_dtypes : mapping of str to str, optional
        Dtype of model inputs (default float32, as conversions leave them).
    output_names : sequence of str, optional
        ONNX output names in ``sym.list_outputs()`` order (default: MXNet's exporter's names
        of the float32 model's heads); the file orders them as ``mx.onnx.export_model`` does.
    external_data : bool or None, default None
        Weights in ``PATH.data``: None decides by ``external_threshold`` (bytes of weights).
    protect : sequence of paths
        Files the outputs must not overwrite (the input checkpoint).

    Returns
    -------
    OnnxExport

    Raises
    ------
    OnnxExportError
        Nodes MXNet's exporter cannot convert (all named, before any work); both low dtypes.
    ArgumentError, OnnxMissingError, InputShapeError, OverwriteError, OutputPathError
    """
    started = time.perf_counter()
    path, params = _checked_arguments(sym, arg_params, aux_params, input_shapes, path, opset, dynamic_batch,
                                      input_dtypes, output_names, external_data, external_threshold)
    _import_onnx()
    graph = graph_from_symbol(sym)
    dtype = _low_dtype(graph, params)
    _refuse_unexportable(graph, opset)
    exported = ExportInputs(sym, graph, params, input_shapes, input_dtypes or {})
    plan = plan_weights(exported.params, exported.weights, f"{os.path.basename(path)}.data", external_data, external_threshold)
    data_path = path + ".data" if plan.location else None
    _check_paths(path, data_path, protect)
    proto, repaired = exporter_graphs(exported, graph, dtype, opset, dynamic_batch)
    outputs = _outputs(sym, graph, output_names)
    done = _finish(proto, plan, outputs, exported.data, dtype, opset, dynamic_batch, repaired)
    _tidy(done.model, graph, dtype, exported)
    _write(done.model, plan, path, data_path)
    return _record(done.model, graph, path, data_path, opset, dtype, dynamic_batch, done.widened,
                   done.constants, time.perf_counter() - started, tuple(outputs.names))


def _checked_arguments(sym: Any, arg_params: Any, aux_params: Any, input_shapes: Any, path: Any,
                       opset: Any, dynamic_batch: Any, input_dtypes: Any, output_names: Any,
                       external_data: Any, external_threshold: Any) -> tuple[str, dict[str, Any]]:
    """The export's path and params (arg and aux together), each argument checked first: an
    :class:`~mxnet_amp.errors.ArgumentError` (or GraphError / ParamError) naming it."""
    check_symbol(sym)
    params = {**param_dict(arg_params, "arg_params"), **param_dict(aux_params, "aux_params")}
    if not isinstance(input_shapes, Mapping) or not all(
            isinstance(k, str) and isinstance(v, Sequence) and not isinstance(v, str)
            and all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in v)
            for k, v in input_shapes.items()):
        raise ArgumentError(f"input_shapes must be a dict of input name to a tuple of positive ints, "
                            f"got {input_shapes!r}")
    unshaped = [n for n in sym.list_arguments() if n not in params and n not in input_shapes]
    if arg_params is None and unshaped:
        # without params every weight reads as a model input: say what is missing, not the shapes
        raise ArgumentError(f"arg_params is None, so {', '.join(unshaped[:4])}"
                            f"{' ...' if len(unshaped) > 4 else ''} have no values; pass the "
                            "model's arg_params (and aux_params) as loaded with its symbol")
    check_path(path, "path")
    if check_int(opset, "opset") not in OPSETS:
        raise OnnxExportError([("(opset)", str(opset), "MXNet 1.9.1's exporter converts to opset "
                                f"{' or '.join(map(str, OPSETS))} only")], "cannot be exported")
    check_bool(dynamic_batch, "dynamic_batch")
    check_dtype_map(input_dtypes, "input_dtypes", [n for n in sym.list_arguments() if n not in params])
    check_names(output_names, "output_names")
    check_optional_bool(external_data, "external_data")
    check_int(external_threshold, "external_threshold")
    return os.fspath(path), params


def _import_onnx() -> None:
    try:
        import onnx  # noqa: F401
    except ImportError:
        raise OnnxMissingError("ONNX export needs the onnx package: pip install -e \".[onnx]\" "
                               "(onnx==1.14.1, the last with the onnx.mapping MXNet's exporter "
                               "reads)") from None


def _low_dtype(graph: Graph, params: Mapping[str, Any]) -> str | None:
    """float16, bfloat16 or None: the model's low precision dtype (one at most)."""
    found = (dtypes_named(graph) | {array_dtype(a) for a in params.values()}) & {"float16", "bfloat16"}
    if len(found) > 1:
        raise OnnxExportError([("(model)", "-", "holds both float16 and bfloat16 tensors; the "
                                "export supports one low precision dtype per model")])
    return found.pop() if found else None


def check_exportable(sym: Any, opset: int = DEFAULT_OPSET) -> None:
    """Raise :class:`OnnxExportError` naming every node of ``sym`` whose op MXNet's ONNX
    exporter has no converter for at ``opset`` (all of them, in one error)."""
    _import_onnx()
    _refuse_unexportable(graph_from_symbol(sym), opset)


def _refuse_unexportable(graph: Graph, opset: int) -> None:
    """Every node whose op has no converter in MXNet's exporter, named, in one error."""
    has = converter_table()
    missing = [(n.name, n.op, f"MXNet's ONNX exporter has no converter for {n.op} at opset {opset}")
               for n in graph.nodes if not n.is_variable and not has(n.op, opset)]
    if missing:
        raise OnnxExportError(missing)


@dataclass(frozen=True)
class _Outputs:
    """The graph outputs: ``exported[k]`` (the exporter's name of ``list_outputs()[k]``) is
    written as ``names[k]``, the file's outputs in ``order`` (positions k)."""

    exported: Sequence[str]
    names: Sequence[str]
    order: Sequence[int]


def _outputs(sym: Any, graph: Graph, output_names: Sequence[str] | None) -> _Outputs:
    """The exporter's output names, the names given (or the float32 model's) and MXNet's order."""
    return _Outputs([mxnet_output_name(n) for n in sym.list_outputs()],
                    onnx_output_names(graph) if output_names is None else list(output_names),
                    mxnet_output_order(graph))


@dataclass(frozen=True)
class _Finished:
    """The ``ModelProto``, the nodes widened to float32 and the constants written in the low
    precision dtype (each ``(name, op)``)."""

    model: Any
    widened: list[tuple[str, str]]
    constants: list[tuple[str, str]]


def _finish(proto: Any, plan: WeightPlan, outputs: _Outputs, data: Sequence[str], dtype: str | None,
            opset: int, dynamic_batch: bool, repaired: frozenset[str]) -> _Finished:
    """The ``ModelProto`` and the nodes widened to float32: weights as
    initializers (no longer graph inputs), the outputs renamed and in MXNet's exporter's
    order, bfloat16 relabelled, the batch dimension named."""
    from onnx import helper
    model = helper.make_model(proto, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="mxnet-amp")
    graph = model.graph
    low_constants = match_constant_dtypes(model, opset)
    widened = widen_where_onnx_lacks_dtype(model, opset, dtype) if dtype else []
    # graph inputs: the data only (MXNet's converters list some of their constants there
    # too, which onnxruntime then cannot fold); constants no node reads are dropped
    constants = {t.name for t in graph.initializer}
    inputs = [i for i in graph.input if i.name not in set(plan.names) | constants]
    del graph.input[:]
    graph.input.extend(inputs)
    read = {name for node in graph.node for name in node.input} | {o.name for o in graph.output}
    kept = [t for t in graph.initializer if t.name in read]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    if dtype == "bfloat16":
        retype_float16_as_bfloat16(graph, repaired)
    graph.initializer.extend(plan.initializers())
    _rename_outputs(graph, outputs)
    if dynamic_batch:
        for info in graph.input:
            if info.name in data:
                info.type.tensor_type.shape.dim[0].dim_param = _BATCH
    return _Finished(model, widened, low_constants)


def _tidy(model: Any, graph: Graph, dtype: str | None, exported: ExportInputs) -> None:
    """The file as other ONNX tools read it (:mod:`mxnet_amp.onnx.tidy`): every node named
    after its MXNet node, BatchNorms read as inference by every runtime; in a float32 export
    (what float16 converters such as onnxconverter-common read), the casts to float32 that
    convert no float in a form they can retype. A low precision export keeps every cast of
    the conversion a ``Cast``."""
    name_nodes(model.graph, [n.name for n in graph.nodes if not n.is_variable])
    inference_batchnorms(model.graph)
    if dtype is None:
        plain_float_casts(model, {n: (onnx_dtype(exported.dtypes[n]), exported.shapes[n])
                                  for n in exported.weights})


def _rename_outputs(proto: Any, outputs: _Outputs) -> None:
    """Graph outputs in ``outputs.order``, output ``k`` (the exporter's ``exported[k]``)
    renamed ``names[k]``; a tensor inside the graph that already has that name (the float16
    tensor a head cast reads, say) is renamed ``NAME_inner``."""
    exported, names = outputs.exported, outputs.names
    if len(exported) != len(names):
        raise OnnxExportError([("(outputs)", "-", f"{len(names)} output name(s) given for "
                                f"{len(exported)} model output(s)")])
    taken = {t for node in proto.node for t in (*node.input, *node.output)}
    taken |= {i.name for i in proto.input} | {t.name for t in proto.initializer}
    renames = {old: new for old, new in zip(exported, names) if old != new}
    for new in list(renames.values()):
        if new in taken and new not in renames:
            inner = new + "_inner"
            while inner in taken:
                inner += "_"
            renames[new] = inner
    for node in proto.node:
        node.output[:] = [renames.get(o, o) for o in node.output]
        node.input[:] = [renames.get(i, i) for i in node.input]
    for info in (*proto.input, *proto.value_info):
        info.name = renames.get(info.name, info.name)
    by_name = {info.name: info for info in proto.output}
    infos = [by_name[old] for old in exported]
    for info, name in zip(infos, names):
        info.name = name
    del proto.output[:]
    proto.output.extend(infos[k] for k in outputs.order)


def _check_paths(path: str, data_path: str | None, protect: Sequence[str | os.PathLike]) -> None:
    check_outputs([("input file", p) for p in protect],
                  [("ONNX model", path), ("ONNX external data", data_path)])


def _check(model_path: str) -> None:
    """``onnx.checker`` (full check) and strict shape inference on the file at ``model_path``."""
    import onnx
    try:
        onnx.checker.check_model(model_path, full_check=True)
        onnx.shape_inference.infer_shapes_path(model_path, model_path + ".shapes", strict_mode=True)
    except Exception as err:
        raise OnnxExportError([("(model)", "-", f"the exported graph fails ONNX's checks: {err}")]) from err
    finally:
        if os.path.exists(model_path + ".shapes"):
            os.unlink(model_path + ".shapes")


def _write(model: Any, plan: WeightPlan, path: str, data_path: str | None) -> None:
    """Both files written atomically (:func:`mxnet_amp.files.atomic.atomic_writes`), the model checked
    on disk before either file takes its name. The checks read a small skeleton of the
    model beside it (:meth:`WeightPlan.skeleton`): ONNX's checker loads a whole model file,
    which would be one more copy of the weights."""
    written: dict[str, str] = {}

    def write_data(tmp: str) -> None:
        plan.data_writer()(tmp)
        written["data"] = tmp

    def write_model(tmp: str) -> None:
        plan.model_writer(model)(tmp)
        check, sparse = tmp + ".check", tmp + ".check.data"
        try:
            skeleton = plan.skeleton(model, written.get("data"), sparse)
            with open(check, "wb") as f:
                f.write(skeleton.SerializeToString())
            _check(check)
        finally:
            for leftover in (check, sparse):
                if os.path.exists(leftover):
                    os.unlink(leftover)
    files = ([(data_path, write_data)] if data_path else []) + [(path, write_model)]
    atomic_writes(files)


def _record(model: Any, graph: Graph, path: str, data_path: str | None, opset: int,
            dtype: str | None, dynamic_batch: bool, widened: list[tuple[str, str]],
            constants: list[tuple[str, str]], seconds: float, symbol_outputs: tuple[str, ...]) -> OnnxExport:
    amp_nodes = [n for n in graph.nodes if n.op in CAST_OPS]
    amp_casts = sum(len(n.inputs) if n.op == "amp_multicast" else 1 for n in amp_nodes)
    weights = {t.name for t in model.graph.initializer}
    return OnnxExport(
        path=path, data_path=data_path, opset=opset, dtype=dtype,
        model_bytes=os.path.getsize(path),
        data_bytes=os.path.getsize(data_path) if data_path else 0,
        cast_nodes=sum(n.op_type == "Cast" for n in model.graph.node),
        amp_cast_nodes=len(amp_nodes), amp_casts=amp_casts,
        inputs=tuple(i.name for i in model.graph.input if i.name not in weights),
        outputs=tuple(o.name for o in model.graph.output), symbol_outputs=symbol_outputs,
        dynamic_batch=dynamic_batch,
        widened=tuple(widened), constants=tuple(constants), seconds=seconds)
