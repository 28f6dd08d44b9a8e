"""The sample inputs of automatic mode: which model inputs need one, and each as an NDArray
the model can take (float32 unless the symbol declares another dtype), checked first."""
from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from ..errors import GraphError, InputShapeError, InputValueError
from ..ir.dtypes import dtype_of_code, np_dtype
from ..mx.registry import op_input_names
from ..warn import warn_user

if TYPE_CHECKING:   # mxnet itself is imported where it runs
    from mxnet import Context
    from mxnet.symbol import Symbol

    from ..ir.graph import Graph

__all__ = ["LOSS_OUTPUT_OPS", "loss_labels", "sample_inputs"]

# Symbol-API output layers (contrib's list_loss_output_functions, SVMOutput, the deprecated
# Softmax alias): at inference they pass their data through (or apply softmax to it) and
# never read their 'label' input, which only training's backward pass uses
LOSS_OUTPUT_OPS = frozenset({
    "SoftmaxOutput", "Softmax", "SVMOutput", "LinearRegressionOutput", "LogisticRegressionOutput",
    "MAERegressionOutput", "_sparse_LinearRegressionOutput", "_sparse_LogisticRegressionOutput",
    "_sparse_MAERegressionOutput"})


def loss_labels(graph: Graph) -> frozenset[str]:
    """Variables read only as the ``label`` input of a loss output op (``softmax_label``):
    inference never reads them, so no sample is asked for."""
    only_label: dict[int, bool] = {}
    for node in graph.nodes:
        names = op_input_names(node.op) if node.op in LOSS_OUTPUT_OPS else ()
        for k, e in enumerate(node.inputs):
            is_label = k < len(names) and names[k] == "label"
            only_label[e.node] = only_label.get(e.node, True) and is_label
    return frozenset(graph.nodes[i].name for i, only in only_label.items()
                     if only and graph.nodes[i].is_variable)


def sample_inputs(given: Any, data_names: Sequence[str], ctx: Context, sym: Symbol,
                  graph: Graph) -> dict:
    """``{name: NDArray on ctx}`` for every model input, from what the caller gave.

    Loss labels (:func:`loss_labels`) need no sample: zeros of the shape the others imply
    stand in. numpy values are made float32, as ``mx.nd.array`` does (a note says so when
    that changes their dtype), or the dtype the symbol declares for that input.

    Raises
    ------
    GraphError
        A model input without a sample, or a sample for no model input.
    InputValueError
        A sample of non-numbers (strings, objects), or of no finite value.
    """
    labels = [n for n in data_names if n in loss_labels(graph)]
    needed = [n for n in data_names if n not in labels]
    given = _by_name(given, needed)
    missing = [n for n in needed if n not in given]
    extra = sorted(set(given) - set(data_names))
    if missing or extra:
        raise GraphError(f"sample_inputs must give exactly the model inputs {needed}"
                         + (f"; missing {missing}" if missing else "")
                         + (f"; not inputs of the model: {extra}" if extra else ""))
    declared = {n.name: dtype_of_code(n.attrs.get("__dtype__")) for n in graph.nodes if n.is_variable}
    out = {name: _as_input(name, given[name], declared.get(name), ctx) for name in given}
    out.update(_label_zeros([n for n in labels if n not in given], sym, out, ctx))
    return {name: out[name] for name in data_names}


def _by_name(given: Any, names: list[str]) -> dict:
    if given is None or isinstance(given, (str, bytes)):
        # a dtype given positionally lands here: auto_convert_model(sym, args, auxs, "bfloat16")
        hint = (f"; {given!r} looks like target_dtype, given in sample_inputs' place: pass "
                f"target_dtype={given!r} by keyword" if isinstance(given, str) else "")
        raise InputValueError(f"sample_inputs is {given!r}: give one batch of model inputs (an "
                              "array, a list of arrays in input order, or a dict of input name "
                              f"to array){hint}")
    if isinstance(given, Mapping):
        return dict(given)
    if isinstance(given, (list, tuple)):
        if len(given) != len(names):
            raise GraphError(f"sample_inputs holds {len(given)} arrays but the model "
                             f"has {len(names)} inputs {names}")
        return dict(zip(names, given))
    if len(names) == 1:
        return {names[0]: given}
    raise GraphError(f"the model has inputs {names}: pass sample_inputs as a dict of name to array")


def _as_input(name: str, value: Any, declared: str | None, ctx: Context) -> Any:
    """``value`` as an NDArray on ``ctx`` (never the caller's own array), checked."""
    import mxnet as mx
    shape = getattr(value, "shape", None)
    if shape is not None and 0 in tuple(shape):
        raise InputShapeError(f"sample_inputs {name!r} has shape {tuple(shape)}: an empty batch; "
                              "give at least one sample (the checks compare outputs on it)")
    if isinstance(value, mx.nd.NDArray):
        arr = value.copyto(ctx)
        _check_finite(name, arr.asnumpy() if np.dtype(arr.dtype).kind == "f" else None)
        return arr
    values = np.asarray(value)
    if values.dtype.kind not in "biuf":
        raise InputValueError(f"sample_inputs {name!r} holds {values.dtype} values: a model "
                              "input takes numbers (float32; integers and booleans are cast "
                              "to float32)")
    want = declared or "float32"
    if values.dtype != np.dtype(want) and declared is None:
        # MXNet binds an undeclared input as float32: a float64 or int64 sample would meet
        # float32 weights ("requires uniform type")
        warn_user(f"sample_inputs {name!r} is {values.dtype}: cast to float32, as "
                  "mx.nd.array does (the model's inputs are float32)")
    _check_finite(name, values if values.dtype.kind == "f" else None)
    return mx.nd.array(values, ctx=ctx, dtype=np_dtype(want))


def _check_finite(name: str, values: np.ndarray | None) -> None:
    if values is not None and values.size and not np.isfinite(values).any():
        raise InputValueError(f"sample_inputs {name!r} holds no finite value (all nan or "
                              "inf): the float32 and converted models cannot be compared on "
                              "it; give representative values")


def _label_zeros(labels: list[str], sym: Symbol, inputs: dict, ctx: Context) -> dict:
    """Zeros for the loss labels, shaped as the given inputs imply (never read)."""
    import mxnet as mx
    if not labels:
        return {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # partial inference warns about what it cannot tell
        arg_shapes, _, _ = sym.infer_shape_partial(**{k: v.shape for k, v in inputs.items()})
    shapes = dict(zip(sym.list_arguments(), arg_shapes or ()))
    unknown = [n for n in labels if not shapes.get(n) or 0 in shapes[n]]
    if unknown:
        raise GraphError(f"cannot infer the shape of the loss labels {unknown} from the sample "
                         "inputs: give them in sample_inputs too (their values are not used)")
    return {n: mx.nd.zeros(shapes[n], ctx=ctx) for n in labels}
