"""Recognise a converted model saved without its casts, and restore them.

``mx.model.save_checkpoint``, ``HybridBlock.export`` of a plain ``SymbolBlock`` and
``Symbol.save`` / ``tojson`` drop every ``amp_cast`` / ``amp_multicast`` unless given
``remove_amp_cast=False``. What is left of a converted model is the float32 graph with
float16/bfloat16 weights: MXNet cannot bind it, since the low precision weights now meet
float32 activations ("This layer requires uniform type").

The params say where the casts went: converting the stripped graph again, with the low
precision weights read as float32 (exact) and the same target dtype, stores exactly those
weights in low precision when the model was converted with the default options, and then
gives the graph the converter produced, node for node. A weight stored float32 that the
conversion would store in low precision marks a node the original conversion kept in
float32 (``excluded_sym_names``): its readers are kept float32 and the conversion is
redone. When the dtypes still do not match (other op lists, ``cast_optional_params=False``
with some weights cast, another converter), :class:`StrippedCastsError` says how the
checkpoint came about and how to save it with its casts.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

from .convert import convert_graph
from .errors import InferenceFailed, StrippedCastsError
from .ir.dtypes import LOW_PRECISION, dtype_of_code
from .ir.graph import Graph
from .mx.registry import infer_types
from .options import OpLists, make_options
from .passes.strip_casts import strip_casts

if TYPE_CHECKING:
    from mxnet.symbol import Symbol

    from .record import Conversion

__all__ = ["stripped_dtype", "restore_casts", "stripped_message"]

# rounds of "keep the readers of a float32 weight in float32"; each round can only add
# nodes, and one is enough for a model converted with excluded_sym_names
_MAX_ROUNDS = 3


def stripped_dtype(graph: Graph, sym: Symbol, params: Mapping[str, str],
                   input_dtypes: Mapping[str, str] | None = None) -> str | None:
    """The low precision dtype of a converted model whose casts were stripped, else None.

    ``params``: each weight's stored dtype; ``input_dtypes``: the model inputs' (default
    their ``__dtype__`` attribute, else float32). Such a model holds no amp_cast to low
    precision, has float16/bfloat16 weights, and does not type-check with float32 inputs
    (a model cast to float16 throughout, inputs declared so, type-checks: it is no such
    model)."""
    if any(n.op == "amp_cast" and n.attrs.get("dtype") in LOW_PRECISION for n in graph.nodes):
        return None
    low = sorted({d for d in params.values() if d in LOW_PRECISION})
    if not low:
        return None
    known = {**(input_dtypes or {}), **params}
    for n in graph.variables():
        if n.name not in known:
            known[n.name] = dtype_of_code(n.attrs.get("__dtype__")) or "float32"
    try:
        infer_types(sym, known)
    except InferenceFailed:
        return low[0] if len(low) == 1 else "/".join(low)
    return None


def stripped_message(where: str, params: Mapping[str, str], dtype: str) -> str:
    """What happened to a stripped checkpoint (``where``: its files) and how to save it."""
    low = sorted(k for k, d in params.items() if d in LOW_PRECISION)
    shown = ", ".join(low[:5]) + (f" and {len(low) - 5} more" if len(low) > 5 else "")
    return (f"{where}: a {dtype} mixed precision model saved without its amp casts: params "
            f"{shown} are {dtype} but the symbol holds no amp_cast, so MXNet cannot bind it "
            "(\"This layer requires uniform type\"). mx.model.save_checkpoint, "
            "HybridBlock.export and Symbol.save drop amp casts unless given "
            "remove_amp_cast=False; save converted models with mxnet_amp.save_checkpoint (or "
            "pass remove_amp_cast=False). mxnet_amp.load_checkpoint(prefix, epoch) restores the "
            "casts of a model converted with the default options")


def restore_casts(graph: Graph, params: Mapping[str, str], dtype: str,
                  where: str) -> Conversion:
    """The conversion of the stripped ``graph`` whose weights get exactly the dtypes
    ``params`` says they are stored in (module doc); :class:`StrippedCastsError` when none
    does. ``dtype`` is :func:`stripped_dtype`'s answer, ``where`` names the files."""
    if dtype not in LOW_PRECISION:
        raise StrippedCastsError(stripped_message(where, params, dtype)
                                 + "; it holds both float16 and bfloat16 params, which no "
                                 "conversion gives")
    graph = strip_casts(graph)   # MXNet keeps the casts that are graph outputs
    data_names = [n.name for n in graph.variables() if n.name not in params]
    as_float32 = {k: "float32" if d in LOW_PRECISION else d for k, d in params.items()}
    consumers = graph.consumers()
    index = {n.name: i for i, n in enumerate(graph.nodes)}
    excluded: set[str] = set()
    for _ in range(_MAX_ROUNDS):
        options = make_options(dtype, OpLists(excluded_sym_names=sorted(excluded)), fold_batchnorm=False)
        conversion = convert_graph(graph, options, data_names=data_names, param_dtypes=as_float32)
        got = conversion.variable_dtypes
        wrong = sorted(k for k, d in params.items() if got.get(k, d) != d)
        if not wrong:   # the params as they are stored are the model's (reports: before)
            return conversion.with_given(params)
        # a weight kept float32 that the conversion stores low: its readers were excluded
        readers = {graph.nodes[c].name for k in wrong if params[k] == "float32"
                   for c, _ in consumers[index[k]]}
        if readers <= excluded:
            break
        excluded |= readers
    detail = ", ".join(f"{k} ({params[k]}, restored as {got.get(k)})" for k in wrong[:5])
    raise StrippedCastsError(stripped_message(where, params, dtype)
                             + f"; this one's casts cannot be restored exactly: re-converting "
                             f"stores other dtypes for {detail}. Convert the original float32 "
                             "model again and save it with mxnet_amp.save_checkpoint")
