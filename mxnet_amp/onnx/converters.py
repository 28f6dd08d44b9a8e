"""ONNX converters for the AMP cast ops, added to MXNet's own exporter (``mx.onnx``).

MXNet 1.9.1's exporter has no converter for ``amp_cast`` / ``amp_multicast``. It keeps its
converters in one table per opset (``MXNetGraph.registry_``), filled by its documented
decorator ``MXNetGraph.register(op, opset)``: the only way to add one. That table is process
state, so :func:`register_converters` fills it once (cached, so later calls do nothing) and
only under op names MXNet leaves empty: an ``mx.onnx.export_model`` call of anyone else in
the process converts what it did before, and a model with casts now exports.
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as np

from ..ir.dtypes import widest

__all__ = ["OPSETS", "register_converters", "converter_table", "onnx_dtype"]

# the opsets MXNet 1.9.1's exporter has converters for
OPSETS = (12, 13)

# ONNX's TensorProto codes of the dtypes a converted model holds
_ONNX_CODE = {"float32": 1, "uint8": 2, "int8": 3, "int32": 6, "int64": 7, "bool": 9,
              "float16": 10, "float64": 11, "bfloat16": 16}


def onnx_dtype(name: str) -> int:
    """ONNX's ``TensorProto`` code of dtype ``name``."""
    return _ONNX_CODE[name]


def converter_table() -> Callable[[str, int], bool]:
    """``has(op, opset)``: whether MXNet's exporter converts ``op`` at ``opset`` (it falls
    back to older opsets down to 12, as :meth:`MXNetGraph.convert_layer` does)."""
    from mxnet.onnx.mx2onnx import _export_onnx  # registers MXNet's converters too
    register_converters()
    registry = _export_onnx.MXNetGraph.registry_

    def has(op: str, opset: int) -> bool:
        return any(op in registry.get(v, {}) for v in range(opset, 11, -1))
    return has


@functools.lru_cache(maxsize=None)
def register_converters() -> None:
    """Add the cast converters to MXNet's exporter for each opset in :data:`OPSETS` (once)."""
    from mxnet.onnx.mx2onnx import _export_onnx
    graph = _export_onnx.MXNetGraph
    for opset in OPSETS:
        taken = graph.registry_.get(opset, {})
        for op, convert in (("amp_cast", _convert_amp_cast), ("amp_multicast", _convert_amp_multicast)):
            if op not in taken:
                graph.register(op, opset)(convert)


def _inputs(node: dict, kwargs: dict) -> tuple[str, list[tuple[str, np.dtype]]]:
    """The node's name and each input's ONNX tensor name and numpy dtype, as the exporter's
    ``outputs_lookup`` holds them."""
    lookup = kwargs["outputs_lookup"]
    return node["name"], [(lookup[i][o].name, lookup[i][o].dtype) for i, o, *_ in node["inputs"]]


def _convert_amp_cast(node: dict, **kwargs: Any) -> tuple[list, tuple[np.dtype]]:
    """``amp_cast(dtype=D)``: one ONNX ``Cast`` to D."""
    from onnx.helper import make_node
    name, inputs = _inputs(node, kwargs)
    dtype = node["attrs"]["dtype"]
    return ([make_node("Cast", [inputs[0][0]], [name], name=name, to=onnx_dtype(dtype))],
            (np.dtype(dtype),))


def _convert_amp_multicast(node: dict, **kwargs: Any) -> tuple[list, tuple[np.dtype, ...]]:
    """``amp_multicast``: each input cast to the widest float dtype among them (the
    narrowest with ``cast_narrow``), one ``Cast`` per input, outputs ``NAME0``, ``NAME1``..."""
    from onnx.helper import make_node
    name, inputs = _inputs(node, kwargs)
    names = [np.dtype(d).name for _, d in inputs]
    floats = [d for d in names if d in ("float16", "float32", "float64")]
    if node.get("attrs", {}).get("cast_narrow", "False") in ("True", "true", "1"):
        to = min(floats, key=lambda d: np.dtype(d).itemsize)
    else:
        to = widest(floats)
    nodes = [make_node("Cast", [tensor], [f"{name}{k}"], name=f"{name}{k}", to=onnx_dtype(to))
             for k, (tensor, _) in enumerate(inputs)]
    return nodes, tuple(np.dtype(to) for _ in inputs)
