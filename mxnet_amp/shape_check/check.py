"""Check params' shapes against the symbol before anything is converted or written.

MXNet's shape inference checks a weight only once the shape of the data reaching its op is
known, so without data shapes it checks almost nothing. Where the caller gives none, each
model input gets what its first readers prove about it (rank and channel count from a
``Convolution`` weight, ``(batch, in_units)`` when only flattening ``FullyConnected`` layers
read it), every other dimension unknown, and windowed poolings are read as copies (with an
unknown spatial size, a pooling keeps batch and channels and nothing else is known). A
``FullyConnected`` whose input size is unknown reads a new input of the size its weight
gives, so that the layers after it are checked too.

Only a contradiction MXNet reports as such (``Shape inconsistent``, ``Unexpected shape``,
``Incompatible attr``) counts, and only once a search has pinned it on one param; a shape
function that cannot cope with unknown dimensions otherwise ends the check without a
verdict. With the data shapes known, every failure counts. On a healthy model the check is
one or two inference calls.

This module is the check itself (which inferences to run, and whom a contradiction blames);
:mod:`mxnet_amp.shape_check.guess` reads what the params prove about the inputs,
:mod:`mxnet_amp.shape_check.cuts` rewrites the graph past a stopped shape function (through the
pass kernel), :mod:`mxnet_amp.shape_check.infer` runs MXNet's inference with those cuts, and
:mod:`mxnet_amp.shape_check.messages` reads the caller's input shapes and words the errors.
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Mapping, Sequence

from ..errors import InputShapeError, ParamError, error_text
from ..ir.gcpause import gc_paused
from ..ir.graph import Graph, attr_ints
from ..mx.io import graph_from_symbol
from .cuts import graph_with_cuts
from .guess import guess_input_shapes, unknown_dim
from .infer import CONTRADICTION, Checker, symbol_input_names
from .messages import input_shapes, param_error

if TYPE_CHECKING:   # mxnet itself is imported where it runs
    from mxnet.symbol import Symbol

__all__ = ["check_param_shapes"]

# the spatial size tried first where the params leave it unknown (any size that a model's
# strides and kernels take would do; an ImageNet one is the likeliest)
_TYPICAL_SIZE = 224
_UNTRIED = object()   # a check not run yet (None: run, nothing wrong)


def _fits(want: tuple | None, have: tuple, unknown: int) -> bool:
    """Whether ``have`` is a shape ``want`` allows (``unknown``: :func:`unknown_dim`)."""
    if not want or want == have:
        return True   # unknown rank (nothing to compare) or the very shape
    return len(want) == len(have) and all(w == unknown or w < 0 or w == h for w, h in zip(want, have))


def check_param_shapes(sym: Symbol, arg_params: Mapping, aux_params: Mapping,
                       data_shapes: Mapping[str, Sequence[int]] | None = None, *,
                       graph: Graph | None = None, shapes_from: str = "data_shapes",
                       input_names: list[str] | None = None) -> None:
    """Raise :class:`ParamError` when a param's shape contradicts the symbol.

    First the params are checked against each other (model inputs get the partial shapes
    their readers prove, see the module doc); then, when ``data_shapes`` are given, against
    those. The error names the param, its shape, the shape the symbol expects there (``?``
    for a dimension that cannot be told) and the nodes that read it. Names neither in the
    symbol nor in the params are left to :func:`mxnet_amp.mx.params.check_params`.

    Parameters
    ----------
    sym : Symbol
    arg_params, aux_params : dict of str to NDArray (or anything with ``.shape``)
    data_shapes : dict of str to tuple, optional
        Shapes of model inputs (batch included).
    graph : Graph, optional
        ``sym``'s graph when the caller has it already.
    shapes_from : str
        How errors call ``data_shapes`` (``'sample_inputs'``, a command line flag).
    input_names : list of str, optional
        ``sym.list_arguments() + sym.list_auxiliary_states()`` when the caller has them
        (MXNet walks the whole graph for each list).

    Raises
    ------
    ParamError
        A param's shape contradicts the symbol (and ``data_shapes``); its ``param``,
        ``found`` and ``expected`` attributes hold the name and both shapes.
    InputShapeError
        ``data_shapes`` contradict the symbol whatever the params.
    """
    with gc_paused():
        _check_param_shapes(sym, arg_params, aux_params, data_shapes, graph, shapes_from,
                            input_names)


def _check_param_shapes(sym: Symbol, arg_params: Mapping, aux_params: Mapping,
                        data_shapes: Mapping[str, Sequence[int]] | None, graph: Graph | None,
                        shapes_from: str, input_names: list[str] | None = None) -> None:
    import mxnet as mx
    if graph is None:
        graph = graph_from_symbol(sym)
    inputs = list(input_names) if input_names is not None else symbol_input_names(sym)
    names = set(inputs)
    given = {k: tuple(v.shape) for k, v in {**arg_params, **aux_params}.items() if k in names}
    order = [k for k in inputs if k in given]
    data = [k for k in inputs if k not in given]
    known = input_shapes(data_shapes, shapes_from)
    if not known:
        _check_params_alone(graph, sym, given, order, data, inputs)
        return
    wrong = sorted(set(known) - set(data))
    if wrong:
        raise InputShapeError(f"{shapes_from} name {wrong}, which are not model inputs of the "
                              f"symbol (its inputs without params: {data[:20]})")
    checker = Checker(graph, sym, given, strict=True, names=inputs)
    try:
        checker.infer(known)
    except mx.base.MXNetError as err:
        known_names = list(known)
        k = checker.first_breaking({}, known_names, known)
        raise InputShapeError(f"input {known_names[k]!r} of shape {known[known_names[k]]} ({shapes_from}) "
                              f"does not fit the symbol: {error_text(err)}") from None
    try:
        _check_against(checker, graph, known, order, given,
                       f" with the input shapes {known} ({shapes_from})",
                       f"; either the param or {shapes_from} is wrong")
    except ParamError:
        # the params may contradict each other whatever the input: say so if they do
        _check_params_alone(graph, sym, given, order, data, inputs)
        raise


def _check_params_alone(graph: Graph, sym: Symbol, given: Mapping, order: list[str], data: list[str],
                        inputs: list[str]) -> None:
    """The params against each other, the model inputs given what their readers prove.

    First with a typical spatial size in place of the unknown one: one inference on the
    symbol as it is, with the params (poolings work), which finds nothing wrong in a healthy
    model. Where the typical size contradicts the symbol and MXNet's message names one other
    spatial size, that size is tried the same way. Any doubt (a contradiction, or a shape
    function that cannot take the size) is settled with the spatial size unknown, where only
    the channels and ranks the params prove are compared, and a contradiction must hold on
    the exact graph too.
    """
    import mxnet as mx
    guesses = guess_input_shapes(graph, data, given)
    if _concat_reads_unknown(graph, [d for d in data if d not in guesses]):
        return   # MXNet's partial inference would blame a param wrongly (_concat_reads_unknown)
    exact = Checker(graph, sym, given, names=inputs)
    if not guesses:
        _check_against(exact, graph, {}, order, given, "", "")
        return
    sized = _sized(guesses, _TYPICAL_SIZE)
    whole = Checker(graph, sym, given, strict=True, names=inputs)
    doubt = _doubt_at(whole, sized, given, order)
    if doubt is None:
        return
    # where a layer pins the input size, the contradiction names the size it wants
    hint = _size_hint(doubt, _TYPICAL_SIZE)
    size_doubt = _UNTRIED
    if hint is None and CONTRADICTION.search(doubt):
        size_doubt = _doubt_at(whole, sized, {}, [])   # the size alone: its message may name one
        hint = _size_hint(size_doubt or "", _TYPICAL_SIZE)
    if hint is not None and _doubt_at(whole, _sized(guesses, hint), given, order) is None:
        return
    fast_graph, cut_shapes = graph_with_cuts(graph, given, pools=False)
    if fast_graph is not graph:
        # the typical size may contradict the graph whatever the params (a layer reads the
        # real spatial size); if not, the graph with cuts checks the params without their
        # FullyConnected layers' input sizes (those depend on the real size)
        if size_doubt is _UNTRIED:
            size_doubt = _doubt_at(whole, sized, {}, [])
        if size_doubt is None:
            fast = Checker(fast_graph, None, given, strict=True, cut_shapes=cut_shapes, names=inputs)
            try:
                if _check_against(fast, graph, sized, order, given, "", ""):
                    return
            except ParamError:
                pass
    quick_graph, cut_shapes = graph_with_cuts(graph, given)
    quick = Checker(quick_graph, sym if quick_graph is graph else None, given, cut_shapes=cut_shapes,
                     names=inputs)
    try:
        _check_against(quick, graph, guesses, order, given, "", "")
    except ParamError:
        # only an error the exact graph confirms is one (a pooling is a copy only while the
        # spatial size is unknown)
        try:
            exact.infer(guesses)
        except mx.base.MXNetError:
            return
        _check_against(exact, graph, guesses, order, given, "", "")


# ops whose partial shape inference in MXNet 1.9.1 takes an input of unknown shape as empty:
# Concat(x1 unknown, y of width 8) is inferred of width 8, so a FullyConnected reading it
# "contradicts" its own right weight (8, 16)
_CONCAT_OPS = frozenset({"Concat", "concat", "_npi_concatenate", "_rnn_param_concat"})


def _concat_reads_unknown(graph: Graph, unknown_inputs: Sequence[str]) -> bool:
    """Whether a Concat reads (through any ops) a model input whose shape nothing proves:
    the params cannot then be checked without the input shapes (false contradictions)."""
    if not unknown_inputs:
        return False
    where = {n.name: i for i, n in enumerate(graph.nodes) if n.is_variable}
    consumers = graph.consumers()
    stack = [where[n] for n in unknown_inputs if n in where]
    seen = set(stack)
    while stack:
        i = stack.pop()
        if graph.nodes[i].op in _CONCAT_OPS:
            return True
        for j, _ in consumers[i]:
            if j not in seen:
                seen.add(j)
                stack.append(j)
    return False


def _sized(guesses: Mapping[str, tuple], size: int) -> dict:
    """``guesses`` with ``size`` for each unknown spatial dimension."""
    unknown = unknown_dim()
    return {k: tuple(size if d == unknown and i > 1 else d for i, d in enumerate(v))
            for k, v in guesses.items()}


def _doubt_at(checker: Checker, sized: Mapping, given: Mapping, order: list[str]) -> str | None:
    """None when the params fit the whole symbol with the model inputs ``sized`` (one
    inference: nothing is wrong, whatever the real input size); else why not (MXNet's
    message, or a param's shape it does not fit), which blames nothing by itself: the size
    is only a guess."""
    import mxnet as mx
    try:
        inferred = checker.infer({**sized, **given})
    except mx.base.MXNetError as err:
        return error_text(err)
    if inferred is None:   # nothing can be told: no doubt to report
        return None
    unknown = unknown_dim()
    for name in order:
        if not _fits(inferred.get(name), given[name], unknown):
            return f"param {name!r} does not fit"
    return None


# a shape in MXNet's messages: "expected [-1,16,224,224], got [-1,16,224,8]",
# "Provided = [8,8], inferred shape=(8,224)"
_SHAPE_IN_TEXT = re.compile(r"[\[(](-?\d+(?:,\s*-?\d+)+)[\])]")


def _size_hint(text: str, tried: int) -> int | None:
    """The one size other than ``tried`` that the shapes in an MXNet message name (a map's
    from its third dimension on, a weight matrix's all), or None: where a layer pins the
    input size, its contradiction says which size it wants."""
    sizes: set[int] = set()
    for m in _SHAPE_IN_TEXT.finditer(text):
        dims = attr_ints(m.group(1))
        sizes.update(dims[2:] if len(dims) > 2 else dims)
    sizes = {d for d in sizes if d > 0 and d != tried}
    return sizes.pop() if len(sizes) == 1 else None


def _check_against(checker: Checker, graph: Graph, base: Mapping, order: list[str],
                   given: Mapping, context: str, blame: str) -> bool:
    """The params ``given`` (in ``order``) against ``base`` input shapes; ParamError.
    True when the inference went through (nothing found wrong); False when it could not
    tell or pin a contradiction on one param."""
    import mxnet as mx
    try:
        inferred = checker.infer({**base, **given})
    except mx.base.MXNetError:
        if checker.strict and not checker.consistent(base):
            return False   # the input shapes alone fail: no param is to blame
        k = checker.first_breaking(base, order, given)
        name = order[k]
        before = {**base, **{n: given[n] for n in order[:k]}}
        # the verdict stands only when the search pinned it on this one param (cuts made
        # on the way change the graph)
        try:
            expected = checker.infer(before) or {}
        except mx.base.MXNetError:
            return False
        try:
            checker.infer({**before, name: given[name]})
        except mx.base.MXNetError as err:
            why = f" (MXNet: {error_text(err, 300)})"
        else:
            return False
        raise param_error(graph, name, given[name], expected.get(name), context, blame + why) from None
    # MXNet takes some given shapes as they come (aux states; BatchNorm's gamma is
    # overwritten): compare what it inferred around them
    unknown = unknown_dim()
    for name in order:
        want = (inferred or {}).get(name)
        if not _fits(want, given[name], unknown):
            raise param_error(graph, name, given[name], want, context, blame)
    return inferred is not None

