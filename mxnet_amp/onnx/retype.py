"""Label the FLOAT16 of an exported ONNX graph BFLOAT16: the second half of a bfloat16 export.

The exporter converted the model relabelled bfloat16 -> float16
(:mod:`mxnet_amp.passes.relabel_dtype`); each FLOAT16 in its graph stands for a bfloat16
tensor: the ``to`` of each ``Cast``, the element type of each input, output and value info,
and the constants MXNet's converters made in the dtype of their input (re-rounded from their
float16 values to bfloat16). The weights are written as bfloat16 from their own bits.
"""
from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["retype_float16_as_bfloat16", "bfloat16_bits"]

_FLOAT16, _BFLOAT16 = 10, 16
# attributes that hold an element type (Cast's ``to``; EyeLike's, RandomNormal's ``dtype``)
_TYPE_ATTRIBUTES = ("to", "dtype")


def bfloat16_bits(values: np.ndarray) -> np.ndarray:
    """Float values as bfloat16 words (uint16), rounded to nearest even; NaN stays NaN."""
    words = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((words + 0x7FFF + ((words >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(np.asarray(values, dtype=np.float32))
    return np.where(nan, np.uint16(0x7FC0), rounded)


def _retype_tensor(tensor: Any, words: bool = False) -> None:
    """A FLOAT16 ``TensorProto`` as BFLOAT16, in place: its values re-rounded, or (``words``)
    its raw data kept, bfloat16 words already."""
    from onnx import numpy_helper
    if tensor.data_type != _FLOAT16:
        return
    if words:
        tensor.data_type = _BFLOAT16
        return
    values = numpy_helper.to_array(tensor).astype(np.float32)
    tensor.ClearField("int32_data")
    tensor.data_type = _BFLOAT16
    tensor.raw_data = bfloat16_bits(values).astype("<u2").tobytes()


def _retype_type(type_proto: Any) -> None:
    if type_proto.HasField("tensor_type") and type_proto.tensor_type.elem_type == _FLOAT16:
        type_proto.tensor_type.elem_type = _BFLOAT16


def retype_float16_as_bfloat16(graph: Any, words: frozenset[str] = frozenset()) -> int:
    """Relabel every FLOAT16 of ONNX ``graph`` (a ``GraphProto``, changed in place) BFLOAT16.

    Parameters
    ----------
    graph : onnx.GraphProto
        The exporter's graph, before the weights are added.
    words : frozenset of str
        Constants (initializer names, ``OUTPUT/ATTRIBUTE``) whose raw data holds bfloat16
        words already (:func:`~mxnet_amp.onnx.constants.repair_float16_constants`).

    Returns
    -------
    int
        How many node attributes and constants were relabelled.
    """
    count = 0
    for tensor in graph.initializer:
        count += tensor.data_type == _FLOAT16
        _retype_tensor(tensor, tensor.name in words)
    for info in (*graph.input, *graph.output, *graph.value_info):
        _retype_type(info.type)
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.name in _TYPE_ATTRIBUTES and attribute.i == _FLOAT16:
                attribute.i = _BFLOAT16
                count += 1
            if attribute.HasField("t") and attribute.t.data_type == _FLOAT16:
                _retype_tensor(attribute.t, f"{node.output[0]}/{attribute.name}" in words)
                count += 1
            for sub in attribute.graphs:
                count += retype_float16_as_bfloat16(sub, words)
            if attribute.HasField("g"):
                count += retype_float16_as_bfloat16(attribute.g, words)
    return count


def widen_where_onnx_lacks_dtype(model: Any, opset: int, dtype: str = "bfloat16") -> list[tuple[str, str]]:
    """Compute in float32 each node whose ONNX op takes no ``dtype`` at ``opset``, in place.

    ``model`` is the exporter's graph, its low precision tensors labelled FLOAT16: a float16
    export, or the float16 stand-in of a bfloat16 one (before
    :func:`retype_float16_as_bfloat16`). Where the op's schema takes no ``tensor(dtype)``
    for a FLOAT16 input (ONNX's Conv at opsets 12 and 13 for bfloat16; Range, which MXNet's
    converter writes for ``arange_like`` of a float16 tensor, for float16), each such input
    is cast to float32 and each FLOAT16 output cast back: the tensors between nodes keep the
    dtype the conversion decided, and the op computes in float32 (as oneDNN's bf16 kernels
    accumulate; for an index range, exactly).

    Returns
    -------
    list of (str, str)
        ``(node name, op type)`` of each node widened so.
    """
    from onnx import defs, helper, shape_inference
    inferred = shape_inference.infer_shapes(model)
    types = {i.name: i.type.tensor_type.elem_type
             for i in (*inferred.graph.input, *inferred.graph.output, *inferred.graph.value_info)}
    types.update({t.name: t.data_type for t in model.graph.initializer})
    nodes, widened = [], []
    for node in model.graph.node:
        low_in = [k for k, name in enumerate(node.input) if types.get(name) == _FLOAT16]
        schema = defs.get_schema(node.op_type, opset)
        if node.op_type == "Cast" or not low_in or all(_takes(schema, k, dtype) for k in low_in):
            nodes.append(node)
            continue
        widened.append((node.name or node.output[0], node.op_type))
        # an output typed like a low input is low too (shape inference gives no type to the
        # output of a node whose input type its schema refuses)
        low_params = {_formal(schema.inputs, k).type_str for k in low_in}
        for k in low_in:
            wide = f"{node.input[k]}_float32_for_{node.output[0]}"
            nodes.append(helper.make_node("Cast", [node.input[k]], [wide], name=wide, to=1))
            node.input[k] = wide
        back = []
        for k, name in enumerate(node.output):
            if types.get(name, _FLOAT16 if _formal(schema.outputs, k).type_str in low_params else None) == _FLOAT16:
                node.output[k] = f"{name}_float32"
                back.append(helper.make_node("Cast", [node.output[k]], [name], name=f"{name}_{dtype}",
                                             to=_FLOAT16))
        nodes.extend([node, *back])
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return widened


def _formal(formals: Any, k: int) -> Any:
    """The formal parameter of position ``k`` (a variadic last one stands for the rest)."""
    return formals[min(k, len(formals) - 1)]


def _takes(schema: Any, k: int, dtype: str) -> bool:
    formal = _formal(schema.inputs, k)
    allowed = {c.type_param_str: c.allowed_type_strs for c in schema.type_constraints}
    return f"tensor({dtype})" in allowed.get(formal.type_str, [formal.type_str])
