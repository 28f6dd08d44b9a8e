"""What the live MXNet build knows: registered op names, op input names, and type inference.

These read MXNet's C API directly: ``Symbol.infer_type_partial`` returns nothing at all
when inference is incomplete, and the pass needs the partial answer.
"""
from __future__ import annotations

import ctypes
from array import array
from functools import lru_cache
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Mapping, NamedTuple

from ..errors import GraphError, InferenceFailed, error_text
from ..ir.dtypes import MX_CODE, MX_NAME

if TYPE_CHECKING:   # mxnet itself is imported where it runs
    from mxnet.symbol import Symbol

__all__ = ["registry_op_names", "list_op_names", "mxnet_op_names", "OWN_OP_PREFIX", "op_signature", "OpSignature", "InferredTypes", "op_input_names",
           "infer_types", "check_attrs"]

# the prefix of the ops mxnet-amp's compiled rounding kernels register (kernels/round.cc)
OWN_OP_PREFIX = "mxnet_amp_"


def _lib() -> Any:
    from mxnet.base import _LIB
    return _LIB


class OpSignature(NamedTuple):
    """What the registry says of one op name."""

    name: str                     # the operator's own name (an alias names another op)
    inputs: tuple[str, ...]       # NDArray input names, in order
    params: Mapping[str, str]     # attribute name -> MXNet's type string
    variadic: bool                # takes a list of inputs (Concat, add_n)


def list_op_names() -> list[str]:
    """Every operator name registered right now (aliases included); not cached, so it sees
    ops a plugin library loaded since."""
    from mxnet.base import check_call, py_str
    size = ctypes.c_uint()
    names = ctypes.POINTER(ctypes.c_char_p)()
    check_call(_lib().MXListAllOpNames(ctypes.byref(size), ctypes.byref(names)))
    return [py_str(names[i]) for i in range(size.value)]  # copied: MXNet reuses the buffer


def mxnet_op_names() -> list[str]:
    """The registered names that are MXNet's own: :func:`list_op_names` less the ops
    mxnet-amp's compiled kernels register once loaded (``OWN_OP_PREFIX``, and the
    ``_backward_`` ops MXNet registers beside them), so tables of
    MXNet's operators do not depend on whether this process loaded them."""
    return [name for name in list_op_names()
            if not name.removeprefix("_backward_").startswith(OWN_OP_PREFIX)]


@lru_cache(maxsize=None)
def registry_op_names() -> frozenset[str]:
    """Every operator name MXNet has registered (aliases included); cached."""
    return frozenset(list_op_names())


@lru_cache(maxsize=None)
def op_signature(op: str) -> OpSignature:
    """The registry's description of ``op``: its own name, inputs and attributes."""
    from mxnet.base import check_call, py_str
    handle = ctypes.c_void_p()
    check_call(_lib().NNGetOpHandle(op.encode(), ctypes.byref(handle)))
    name, desc = ctypes.c_char_p(), ctypes.c_char_p()
    num_args = ctypes.c_uint()
    arg_names = ctypes.POINTER(ctypes.c_char_p)()
    arg_types = ctypes.POINTER(ctypes.c_char_p)()
    arg_descs = ctypes.POINTER(ctypes.c_char_p)()
    key_var_num_args = ctypes.c_char_p()
    ret_type = ctypes.c_char_p()
    check_call(_lib().MXSymbolGetAtomicSymbolInfo(
        handle, ctypes.byref(name), ctypes.byref(desc), ctypes.byref(num_args),
        ctypes.byref(arg_names), ctypes.byref(arg_types), ctypes.byref(arg_descs),
        ctypes.byref(key_var_num_args), ctypes.byref(ret_type)))
    inputs, params, variadic = [], {}, False
    for i in range(num_args.value):
        arg, kind = py_str(arg_names[i]), py_str(arg_types[i])
        if kind.startswith("NDArray-or-Symbol"):
            inputs.append(arg)
            variadic = variadic or kind.startswith("NDArray-or-Symbol[]")
        else:
            params[arg] = kind
    return OpSignature(py_str(name.value), tuple(inputs), MappingProxyType(params), variadic)


# Shape attributes whose every dimension must be positive (a window, a step, a spacing)
_POSITIVE_SHAPES = ("kernel", "stride", "dilate")


def _attr_problem(op: str, attrs: Mapping[str, str]) -> str | None:
    """What is wrong with an ``op`` node's ``attrs`` that MXNet takes at load and fails on
    (or computes nonsense with) only at bind: a negative count the registry types
    non-negative (``num_filter "-3"``), a kernel, stride or dilation dimension below 1
    (``kernel "(0, 0)"``, which MXNet's own ``mx.sym.Pooling`` refuses). None when nothing is."""
    params = op_signature(op).params
    for key, value in attrs.items():
        kind = params.get(key, "")
        if kind.startswith(("int (non-negative)", "long (non-negative)")):
            if not value.strip().isdigit():
                return f"{key} = {value!r} is not a non-negative integer"
        elif kind.startswith("Shape(tuple)") and key in _POSITIVE_SHAPES:
            dims = value.strip().strip("()[]").replace(" ", "").rstrip(",")
            if dims and not all(d.isdigit() and int(d) > 0 for d in dims.split(",")):
                return f"{key} = {value!r}: each dimension must be a positive integer"
    return None


def check_attrs(nodes: Any, where: str) -> None:
    """:class:`GraphError` naming the first node of ``nodes`` (a graph's, loop bodies aside)
    whose attributes can never run (:func:`_attr_problem`), and ``where`` (the file)."""
    known = registry_op_names()
    for node in nodes:
        if node.op != "null" and node.op in known and node.attrs:
            problem = _attr_problem(node.op, node.attrs)
            if problem:
                raise GraphError(f"{where}: node {node.name!r} ({node.op}): {problem}")


def op_input_names(op: str) -> tuple[str, ...]:
    """Names of the NDArray inputs of ``op`` in order, as its ``mx.sym`` signature lists them.

    A variadic op (``Concat``, ``add_n``) gives ``()``: its inputs have no fixed names.
    """
    sig = op_signature(op)
    return () if sig.variadic else sig.inputs


class InferredTypes(NamedTuple):
    """What :func:`infer_types` returns (unpacks as ``(args, outs, auxs)``, the order of
    MXNet's ``infer_type``): dtype names, ``None`` where MXNet could not tell."""

    args: list[str | None]
    outs: list[str | None]
    auxs: list[str | None]


def infer_types(sym: Symbol, known: Mapping[str, str]) -> InferredTypes:
    """Partial type inference on ``sym`` given dtype names for some inputs.

    Returns the dtype names of its arguments, outputs and aux states, ``None`` where
    MXNet could not tell. Raises :class:`InferenceFailed` when MXNet rejects the dtypes.
    """
    from mxnet.base import c_array_buf, c_str_array
    keys = list(known)
    codes = array("i", [MX_CODE[known[k]] for k in keys])
    sizes = [ctypes.c_uint() for _ in range(3)]
    datas = [ctypes.POINTER(ctypes.c_int)() for _ in range(3)]
    complete = ctypes.c_int()
    ret = _lib().MXSymbolInferTypePartial(
        sym.handle, ctypes.c_uint(len(keys)), c_str_array(keys), c_array_buf(ctypes.c_int, codes),
        ctypes.byref(sizes[0]), ctypes.byref(datas[0]), ctypes.byref(sizes[1]),
        ctypes.byref(datas[1]), ctypes.byref(sizes[2]), ctypes.byref(datas[2]),
        ctypes.byref(complete))
    if ret != 0:
        from mxnet.base import py_str
        message = py_str(_lib().MXGetLastError())
        raise InferenceFailed(error_text(message))
    args, outs, auxs = ([MX_NAME.get(datas[j][i]) for i in range(sizes[j].value)] for j in range(3))
    return InferredTypes(args, outs, auxs)
