"""The weights of an ONNX export: one initializer per param, in its stored dtype, inline or
in an external data file (ONNX's answer to protobuf's 2 GB limit on one message).

MXNet's exporter would copy every weight twice (``asnumpy`` of all, then a Python list of
each), past any memory for a multi-GB model and without bfloat16. Here the exporter sees the
weights as typed graph inputs only; this module writes their bytes, one param at a time.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from ..ir.dtypes import array_dtype, array_nbytes
from .converters import onnx_dtype

__all__ = ["EXTERNAL_DATA_THRESHOLD", "SMALL_TENSOR_BYTES", "WeightPlan", "plan_weights",
           "param_bytes", "external_tensor"]

# weights above this many bytes go to an external data file: protobuf refuses messages of
# 2 GiB, and the graph and the small tensors that stay inline need room beside them
EXTERNAL_DATA_THRESHOLD = 2 ** 31 - 2 ** 26
# tensors below this stay inline even in an external-data export (ONNX's own convention):
# shape inference reads the small constants (a Reshape's shape) from the model file
SMALL_TENSOR_BYTES = 1024


def param_bytes(array: Any) -> bytes:
    """The little-endian bytes of an NDArray in its own dtype (bfloat16: its 16-bit words)."""
    dtype = array_dtype(array)
    if dtype == "bfloat16":
        # numpy has no bfloat16: its float32 values are exact, their high halves are the bits
        words = array.astype("float32").asnumpy().view(np.uint32) >> 16
        return bytes(words.astype("<u2").tobytes())
    values = np.ascontiguousarray(array.asnumpy())
    return bytes(values.astype(np.dtype(dtype).newbyteorder("<"), copy=False).tobytes())


class WeightPlan:
    """Where each param's bytes go: at an offset of the external data file ``location`` (a
    name beside the model file), or inline. Inline tensors of 1 KB or more are ``streamed``:
    they are not in the model proto but appended to its file one at a time (protobuf
    merges a message written in parts: each part a ``ModelProto`` holding one initializer),
    so the proto never holds a copy of the weights."""

    def __init__(self, params: Mapping[str, Any], names: Sequence[str], location: str | None) -> None:
        self.params = params
        self.names = list(names)
        self.location = location
        self.offsets: dict[str, tuple[int, int]] = {}
        self.streamed: list[str] = []
        offset = 0
        for name in self.names:
            size = _nbytes(params[name])
            if location is not None and size >= SMALL_TENSOR_BYTES:
                self.offsets[name] = (offset, size)
                offset += size + (-size % 64)   # 64-byte aligned, as onnx's own writer
            elif size >= SMALL_TENSOR_BYTES:
                self.streamed.append(name)
        self.external_bytes = offset

    def initializers(self) -> Iterator[Any]:
        """One ``TensorProto`` per param not streamed: bytes inline (under 1 KB), or a
        reference into the data file."""
        for name in self.names:
            if name in self.offsets:
                yield external_tensor(self._tensor(name), self.location or "", *self.offsets[name])
            elif name not in self.streamed:
                tensor = self._tensor(name)
                tensor.raw_data = param_bytes(self.params[name])
                yield tensor

    def _tensor(self, name: str) -> Any:
        from onnx import TensorProto
        array = self.params[name]
        return TensorProto(name=name, data_type=onnx_dtype(array_dtype(array)), dims=list(array.shape))

    def model_writer(self, model: Any) -> Callable[[str], None]:
        """``write(path)``: the model file, the streamed tensors appended one at a time."""
        from onnx import GraphProto, ModelProto

        def write(path: str) -> None:
            with open(path, "wb") as f:
                f.write(model.SerializeToString())
                for name in self.streamed:
                    tensor = self._tensor(name)
                    tensor.raw_data = param_bytes(self.params[name])
                    f.write(ModelProto(graph=GraphProto(initializer=[tensor])).SerializeToString())
                    del tensor
        return write

    def skeleton(self, model: Any, data_file: str | None, sparse_file: str) -> Any:
        """A copy of ``model`` for the checks, small: external tensors read from
        ``data_file``, the streamed ones from ``sparse_file`` (a file of zeros as large as
        they are, made sparse: no disk, no memory)."""
        copy = type(model)()
        copy.CopyFrom(model)
        for tensor in copy.graph.initializer:
            for entry in tensor.external_data:
                if entry.key == "location" and data_file:
                    entry.value = os.path.basename(data_file)
        offset = 0
        for name in self.streamed:
            size = _nbytes(self.params[name])
            copy.graph.initializer.append(external_tensor(self._tensor(name), os.path.basename(sparse_file),
                                                          offset, size))
            offset += size
        with open(sparse_file, "wb") as f:
            f.truncate(offset)
        return copy

    def data_writer(self) -> Callable[[str], None]:
        """``write(path)``: the external data file, one param at a time."""
        def write(path: str) -> None:
            with open(path, "wb") as f:
                for name in self.names:
                    if name in self.offsets:
                        offset, size = self.offsets[name]
                        f.seek(offset)
                        f.write(param_bytes(self.params[name]))
                f.truncate(self.external_bytes)
        return write


def external_tensor(tensor: Any, location: str, offset: int, size: int) -> Any:
    """``tensor`` (no data) made a reference to ``size`` bytes at ``offset`` of ``location``."""
    from onnx import TensorProto
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(size))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    return tensor


def plan_weights(params: Mapping[str, Any], names: Sequence[str], data_location: str,
                 external: bool | None, threshold: int) -> WeightPlan:
    """The :class:`WeightPlan` of ``names``: external data when ``external`` is True, or
    when it is None and the weights come to more than ``threshold`` bytes."""
    if external is None:
        external = sum(_nbytes(params[n]) for n in names) > threshold
    return WeightPlan(params, names, data_location if external else None)


def _nbytes(array: Any) -> int:
    return array_nbytes(array)
