"""Give the float32 constants MXNet's converters make the dtype of the tensor they meet.

Some of MXNet 1.9.1's converters write their constants in float32 whatever their input's
dtype (``LeakyReLU(act_type='gelu')``'s 1/sqrt(2), 1 and 1/2, the attention score scale of
``_contrib_interleaved_matmul_selfatt_qk``): next to a float16 input, an ``Add`` / ``Mul`` /
``Div`` then holds two dtypes, which ONNX forbids. MXNet's own op computes in its input's
dtype, so each such constant becomes a float16 copy (the one rounding a float16 kernel
makes of it), and a float32 scalar a converter computes from shapes (that attention scale)
is cast to float16 where it is read. Run on the exporter's graph before the weights join it: its initializers are
then the converters' constants only.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .retype import bfloat16_bits

__all__ = ["match_constant_dtypes", "repair_float16_constants"]

_FLOAT, _FLOAT16 = 1, 10
# ops whose low precision kernels in MXNet (cuDNN's and its own BatchNorm) read float32
# parameters beside float16 data and compute in float32: ONNX's schema (opset <= 13) wants
# one dtype for all, so the node computes in float32 between casts rather than its
# parameters (a variance, a mean) being rounded to float16
_FLOAT32_PARAMETER_OPS = frozenset({"BatchNormalization"})


def match_constant_dtypes(model: Any, opset: int) -> list[tuple[str, str]]:
    """Float32 tensors read beside a float16 tensor under one ONNX type constraint become
    float16, in place: a constant as a float16 copy, a computed tensor through a ``Cast``.

    Returns
    -------
    list of (str, str)
        ``(node, tensor)`` of each input so changed.
    """
    from onnx import defs, helper, numpy_helper, shape_inference
    graph = model.graph
    inferred = shape_inference.infer_shapes(model)
    types = {i.name: i.type.tensor_type.elem_type
             for i in (*inferred.graph.input, *inferred.graph.output, *inferred.graph.value_info)}
    constants = {t.name: t for t in graph.initializer}
    types.update({name: t.data_type for name, t in constants.items()})
    copies: dict[str, str] = {}
    changed: list[tuple[str, str]] = []
    nodes = []
    for node in graph.node:
        nodes.append(node)
        if not defs.has(node.op_type):
            continue
        if node.op_type in _FLOAT32_PARAMETER_OPS and {types.get(i) for i in node.input} >= {_FLOAT, _FLOAT16}:
            _compute_in_float32(node, nodes, types)
            continue
        schema = defs.get_schema(node.op_type, opset)
        for group in _same_type_inputs(schema, len(node.input)):
            found = {types.get(node.input[k]) for k in group}
            if not {_FLOAT, _FLOAT16} <= found:
                continue
            for k in group:
                name = node.input[k]
                if types.get(name) != _FLOAT:
                    continue
                if name not in copies and name not in constants:
                    copies[name] = f"{name}_float16"
                    nodes.insert(len(nodes) - 1, helper.make_node(
                        "Cast", [name], [copies[name]], name=copies[name], to=_FLOAT16))
                elif name not in copies:
                    copy = numpy_helper.from_array(
                        numpy_helper.to_array(constants[name]).astype(np.float16), name + "_float16")
                    graph.initializer.append(copy)
                    copies[name] = copy.name
                node.input[k] = copies[name]
                changed.append((node.name or node.output[0], name))
    del graph.node[:]
    graph.node.extend(nodes)
    return changed


def _compute_in_float32(node: Any, nodes: list, types: dict) -> None:
    """``node`` (the last of ``nodes``) reading its FLOAT16 inputs through casts to float32,
    its FLOAT16 outputs cast back under their names."""
    from onnx import helper
    for k, name in enumerate(node.input):
        if types.get(name) == _FLOAT16:
            wide = f"{name}_float32_for_{node.output[0]}"
            nodes.insert(len(nodes) - 1, helper.make_node("Cast", [name], [wide], name=wide, to=_FLOAT))
            node.input[k] = wide
    for k, name in enumerate(node.output):
        if types.get(name) == _FLOAT16:
            node.output[k] = f"{name}_float32"
            nodes.append(helper.make_node("Cast", [node.output[k]], [name], name=f"{name}_float16",
                                          to=_FLOAT16))


def _same_type_inputs(schema: Any, count: int) -> list[list[int]]:
    """Input positions grouped by the type parameter their formal input has."""
    groups: dict[str, list[int]] = {}
    params = {c.type_param_str for c in schema.type_constraints}
    for k in range(count):
        formal = schema.inputs[min(k, len(schema.inputs) - 1)] if schema.inputs else None
        if formal is not None and formal.type_str in params:
            groups.setdefault(formal.type_str, []).append(k)
    return [g for g in groups.values() if len(g) > 1]


def repair_float16_constants(graph: Any, reference: Any, as_bfloat16: bool = False) -> list[str]:
    """Each FLOAT16 constant of ONNX ``graph`` (initializers, ``Constant`` values) given the
    value of the same-named float32 constant of ``reference`` (the same model exported in
    float32), rounded to float16; in place. ``as_bfloat16``: the graph stands for a bfloat16
    one, and the constants get their bfloat16 words (rounded once, from float32), still
    labelled FLOAT16 until :func:`~mxnet_amp.onnx.retype.retype_float16_as_bfloat16` relabels
    them (given these names, it keeps their words). Returns the names repaired (an
    attribute's tensor as ``OUTPUT/ATTRIBUTE``)."""
    from onnx import numpy_helper
    wide = {t.name: t for t in reference.initializer}
    wide.update({f"{n.output[0]}/{a.name}": a.t for n in reference.node for a in n.attribute
                 if a.HasField("t")})
    tensors = [(t.name, t) for t in graph.initializer]
    tensors += [(f"{n.output[0]}/{a.name}", a.t) for n in graph.node for a in n.attribute
                if a.HasField("t")]
    repaired = []
    for key, tensor in tensors:
        source = wide.get(key)
        if tensor.data_type != _FLOAT16 or source is None or source.data_type != _FLOAT:
            continue
        values = numpy_helper.to_array(source)
        tensor.ClearField("int32_data")
        tensor.raw_data = (bfloat16_bits(values).astype("<u2") if as_bfloat16
                           else values.astype("<f2")).tobytes()
        repaired.append(key)
    return repaired
