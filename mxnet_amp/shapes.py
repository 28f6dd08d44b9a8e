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
"""
from __future__ import annotations

import numbers
import re
import warnings
from typing import TYPE_CHECKING, Mapping, Sequence

from .errors import InputShapeError, ParamError, error_text
from .gcpause import gc_paused
from .graph import Entry, Graph, Node
from .passes.kernel import Outputs, Rewriter

if TYPE_CHECKING:   # mxnet itself is imported where it runs
    from mxnet.symbol import Symbol

__all__ = ["check_param_shapes"]

# ops whose output has their first input's shape: a model input's rank shows through them
_SHAPE_KEEPING = frozenset({
    "BatchNorm", "Activation", "relu", "sigmoid", "tanh", "LeakyReLU", "Dropout", "_copy",
    "identity", "_mul_scalar", "_div_scalar", "_plus_scalar", "_minus_scalar",
    "_rminus_scalar", "_rdiv_scalar", "Cast", "amp_cast", "clip", "InstanceNorm"})
# elementwise ops over same-shaped inputs: the output has the first input's shape too
_SAME_SHAPE_INPUTS = frozenset({
    "elemwise_add", "elemwise_sub", "elemwise_mul", "elemwise_div", "_plus", "_minus", "_mul",
    "_div", "_Plus", "_Minus", "_Mul", "_Div", "add_n", "ElementWiseSum"})
_FALSE = ("false", "0")
# what MXNet says when two shapes really contradict each other (SHAPE_ASSIGN_CHECK, a bias,
# an elementwise or concat input)
_CONTRADICTION = re.compile(r"Shape inconsistent|Unexpected shape|Incompatible (attr|input shape)")
# a shape function that stopped on an unknown dimension, in a way _cut knows how to go past
_STOPPED = re.compile(r"Error in operator ([^:\s]+):.*(must be known|exceeds input \(-1)")
_MAX_CUTS = 8
# the spatial size tried first where the params leave it unknown (any size that a model's
# strides and kernels take would do; an ImageNet one is the likeliest)
_TYPICAL_SIZE = 224
_UNTRIED = object()   # a check not run yet (None: run, nothing wrong)


def _unknown() -> int:
    import mxnet as mx
    return -1 if mx.util.is_np_shape() else 0


def _ints(text: str | None) -> tuple[int, ...]:
    return tuple(int(v) for v in re.findall(r"-?\d+", text or ""))


def _reader_guess(node: Node, given: Mapping[str, tuple],
                  graph: Graph) -> tuple[tuple[int, ...], bool] | None:
    """``(shape, rank_is_certain)`` a reader proves of its data input, or None."""
    attrs = node.attrs
    w = given.get(graph.nodes[node.inputs[1].node].name) if len(node.inputs) > 1 else None
    unknown = _unknown()
    if node.op in ("Convolution", "Deconvolution") and w is not None:
        kernel = _ints(attrs.get("kernel"))
        if not kernel or len(w) != len(kernel) + 2 or not attrs.get("layout", "NC").startswith("NC"):
            return None
        groups = (_ints(attrs.get("num_group")) or (1,))[0]
        channels = w[1] * groups if node.op == "Convolution" else w[0]
        return (unknown, channels) + (unknown,) * len(kernel), True
    if node.op == "FullyConnected" and w is not None and len(w) == 2:
        if attrs.get("flatten", "True").lower() in _FALSE:
            return None
        return (unknown, w[1]), False   # any rank flattens to (batch, in_units)
    return None


def _guess_input_shapes(graph: Graph, data: list[str], given: Mapping[str, tuple]) -> dict:
    """Partial shapes of the model inputs ``data`` that their readers prove (see module)."""
    consumers = graph.consumers()
    guesses = {}
    for name in data:
        try:
            start = graph.index_of(name)
        except KeyError:
            continue
        certain: set[tuple[int, ...]] = set()
        loose: set[tuple[int, ...]] = set()
        other = False
        stack, seen = [start], {start}
        while stack:
            for j, pos in consumers[stack.pop()]:
                node = graph.nodes[j]
                if pos == 0 and node.op in _SHAPE_KEEPING:
                    if j not in seen:
                        seen.add(j)
                        stack.append(j)
                    continue
                found = _reader_guess(node, given, graph) if pos == 0 else None
                if found is None:
                    other = True
                else:
                    (certain if found[1] else loose).add(found[0])
        if len(certain) == 1:
            guesses[name] = next(iter(certain))
        elif not certain and not other and len(loose) == 1:
            guesses[name] = next(iter(loose))
    return guesses


def _input_names(sym: Symbol) -> list[str]:
    """``sym``'s arguments, then its aux states (each list costs a walk of the graph in MXNet:
    callers keep it)."""
    return list(sym.list_arguments()) + list(sym.list_auxiliary_states())


def _infer(sym: Symbol, shapes: Mapping[str, tuple], names: list[str] | None = None) -> dict:
    """``{input name: shape}`` by MXNet's partial inference (unknown dims as reported);
    raises MXNetError on a contradiction. ``names``: :func:`_input_names` of ``sym``."""
    if names is None:
        names = _input_names(sym)
    wanted = set(names)
    known = {k: v for k, v in shapes.items() if k in wanted}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # partial inference warns about unknown shapes
        args, _, auxs = sym.infer_shape_partial(**known)
    return dict(zip(names, [tuple(s) if s is not None else None for s in list(args) + list(auxs)]))


def _pooled_shape(graph: Graph, node: Node, shapes: Mapping[str, tuple]) -> tuple | None:
    """What a ``Pooling`` over an input of unknown size gives: its input's batch and
    channels (inferred from above it), the rest unknown."""
    import mxnet as mx
    from .io import graph_to_symbol
    if not node.attrs.get("layout", "NC").startswith("NC"):
        return None
    above = graph_to_symbol(Graph(graph.nodes, node.inputs[:1], graph.attrs))
    names = set(above.list_arguments() + above.list_auxiliary_states())
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _, (shape,), _ = above.infer_shape_partial(**{k: v for k, v in shapes.items() if k in names})
    except (mx.base.MXNetError, ValueError):
        return None
    if not shape or len(shape) < 3:
        return None
    unknown = _unknown()
    return (shape[0], shape[1]) + (unknown,) * (len(shape) - 2)


def _cut(graph: Graph, name: str, given: Mapping[str, tuple],
         shapes: Mapping[str, tuple]) -> tuple[Graph, dict[str, tuple]] | None:
    """``(graph, input shapes)`` letting inference go on past node ``name``, whose shape
    function stopped on an unknown dimension; None when it cannot.

    A flattening ``FullyConnected`` reads a new input of shape ``(batch, in_units)`` (its
    weight tells), so that it and its readers stay checked; any other node becomes an
    input of unknown shape. What the node read becomes an output, so it stays checked too.
    """
    try:
        i = graph.index_of(name)
    except KeyError:
        return None
    node = graph.nodes[i]
    if node.is_variable or graph.num_used_outputs()[i] != 1:
        return None
    guess = _reader_guess(node, given, graph) if node.op == "FullyConnected" else None
    cut_name = name + "__shape_check_cut"
    if guess is None:
        shape = _pooled_shape(graph, node, shapes) if node.op == "Pooling" else None
        return (_ShapeCut(graph, {i: cut_name}, as_input=True).run(i),
                {cut_name: shape} if shape else {})
    return _fresh_inputs(graph, {i: cut_name}), {cut_name: guess[0]}


class _ShapeCut(Rewriter):
    """Cuts for shape inference (see :func:`_cut`): node ``i`` of ``readers`` becomes a
    variable ``readers[i]`` (``as_input``), or reads its first input from a new variable
    ``readers[i]`` inserted just before it; what it read becomes an output either way."""

    name = "shape_check_cut"

    def __init__(self, graph: Graph, readers: Mapping[int, str], as_input: bool = False) -> None:
        super().__init__(graph)
        self.readers, self.as_input = readers, as_input
        self.read: list[Entry] = []

    def rewrite_node(self, i: int, node: Node) -> Outputs:
        name = self.readers.get(i)
        if name is None:
            return super().rewrite_node(i, node)
        inputs = self.inputs(node)
        self.read.extend(inputs if self.as_input else inputs[:1])
        variable = self.emit(Node("null", name, (), {}, (), {}))
        if self.as_input:
            return variable
        return self.emit(node._replace(inputs=(Entry(variable, 0, 0),) + inputs[1:]))

    def heads(self) -> list[Entry]:
        return super().heads() + self.read


def _fresh_inputs(graph: Graph, readers: Mapping[int, str]) -> Graph:
    """``graph`` where node ``i`` of ``readers`` reads its first input from a new variable
    ``readers[i]`` (inserted just before it); what it read before becomes an output."""
    # nodes before the first reader keep their index and are shared (a cut near the
    # output of a 100k-node graph then rebuilds only what follows it)
    return _ShapeCut(graph, readers).run(min(readers))


class _PoolsAsCopies(Rewriter):
    name = "pools_as_copies"

    def rewrite_node(self, i: int, node: Node) -> Outputs:
        if _windowed_pool(node):
            return self.emit(Node("_copy", node.name, self.inputs(node)[:1], {}, (), {}))
        return super().rewrite_node(i, node)


def _pools_as_copies(graph: Graph) -> Graph:
    """``graph`` with each windowed ``Pooling`` (NC layout) made a copy of its input.

    While the spatial size is unknown a pooling's output is its input's batch and channels
    with unknown spatial dimensions, which a copy gives too; MXNet's own Pooling shape
    function instead stops on the unknown size (each stop costs a rebuilt graph)."""
    first = next((i for i, node in enumerate(graph.nodes) if _windowed_pool(node)), None)
    return graph if first is None else _PoolsAsCopies(graph).run(first)


def _windowed_pool(node: Node) -> bool:
    return (node.op == "Pooling" and node.attrs.get("global_pool", "False").lower() in _FALSE
            and node.attrs.get("layout", "NC").startswith("NC") and bool(node.inputs))


def _quick_graph(graph: Graph, given: Mapping[str, tuple], pools: bool = True) -> tuple[Graph, dict]:
    """``(graph, input shapes)`` for inference while the spatial size is not the real one,
    built at once: windowed poolings as copies (``pools``), and each flattening
    ``FullyConnected`` that reads a convolution or pooling map through shape-keeping ops
    cut as :func:`_cut` does (its ``in_units`` depend on the real spatial size)."""
    readers, shapes = {}, {}
    for i, node in enumerate(graph.nodes):
        guess = _reader_guess(node, given, graph) if node.op == "FullyConnected" else None
        if guess is None:
            continue
        src = graph.nodes[node.inputs[0].node]
        while (src.op in _SHAPE_KEEPING or src.op in _SAME_SHAPE_INPUTS
               or src.op in ("Flatten", "flatten")) and src.inputs:
            src = graph.nodes[src.inputs[0].node]
        if src.op in ("Convolution", "Deconvolution") or _windowed_pool(src):
            readers[i] = node.name + "__shape_check_cut"
            shapes[readers[i]] = guess[0]
    quick = _pools_as_copies(graph) if pools else graph
    return (_fresh_inputs(quick, readers) if readers else quick), shapes


class _Checker:
    """Shape inference on a graph, going past nodes whose shape function stops on an
    unknown dimension (see :func:`_cut`); the cuts are kept for later calls."""

    def __init__(self, graph: Graph, sym: Symbol | None, given: Mapping[str, tuple], *, strict: bool = False,
                 cut_shapes: Mapping[str, tuple] | None = None,
                 names: list[str] | None = None) -> None:
        # strict: the input shapes are all known, so every failure is a contradiction;
        # sym: graph's symbol, None to build it when first needed; names: its input names
        self.graph, self._sym, self.given, self.strict = graph, sym, given, strict
        self.cut_shapes: dict = dict(cut_shapes or {})
        self._names = names if sym is not None else None

    @property
    def sym(self):
        if self._sym is None:
            from .io import graph_to_symbol
            self._sym = graph_to_symbol(self.graph)
            self._names = None
        return self._sym

    @property
    def names(self) -> list[str]:
        """:func:`_input_names` of :attr:`sym`, listed once per symbol."""
        if self._names is None:
            self._names = _input_names(self.sym)
        return self._names

    def infer(self, shapes: Mapping[str, tuple]) -> dict | None:
        """Inferred shapes; None when nothing can be told (a shape function failed in a
        way that is no contradiction and cannot be gone past, or too many cuts). Raises
        MXNetError only for a contradiction."""
        import mxnet as mx
        for _ in range(_MAX_CUTS):
            try:
                return _infer(self.sym, {**self.cut_shapes, **shapes}, self.names)
            except mx.base.MXNetError as err:
                if self.strict:
                    raise
                text = error_text(err)
                stopped = _STOPPED.search(text)
                cut = (_cut(self.graph, stopped.group(1), self.given, {**self.cut_shapes, **shapes})
                       if stopped else None)
                if cut is None:
                    if _CONTRADICTION.search(text):
                        raise
                    return None
                self.graph, more = cut
                self.cut_shapes.update(more)
                self._sym = self._names = None
        return None

    def consistent(self, shapes: Mapping[str, tuple]) -> bool:
        import mxnet as mx
        try:
            self.infer(shapes)
        except mx.base.MXNetError:
            return False
        return True

    def first_breaking(self, base: Mapping[str, tuple], order: list[str],
                       shapes: Mapping[str, tuple]) -> int:
        """Smallest ``k`` such that ``base`` plus the shapes of ``order[:k + 1]`` contradict
        the graph (adding shapes only adds constraints, so a binary search finds it)."""
        lo, hi = 0, len(order)   # prefix lo is consistent, prefix hi is not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.consistent({**base, **{k: shapes[k] for k in order[:mid]}}):
                lo = mid
            else:
                hi = mid
        return hi - 1


def _show(shape: tuple | None) -> str:
    if shape is None:
        return "another shape"
    unknown = _unknown()
    dims = ["?" if d == unknown or d < 0 else str(d) for d in shape]
    return "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"


def _fits(want: tuple | None, have: tuple, unknown: int) -> bool:
    """Whether ``have`` is a shape ``want`` allows (``unknown``: :func:`_unknown`)."""
    if not want or want == have:
        return True   # unknown rank (nothing to compare) or the very shape
    return len(want) == len(have) and all(w == unknown or w < 0 or w == h for w, h in zip(want, have))


def _readers(graph: Graph, name: str) -> str:
    try:
        i = graph.index_of(name)
    except KeyError:
        return "no node"
    users = sorted({f"{graph.nodes[j].name!r} ({graph.nodes[j].op})" for j, _ in graph.consumers()[i]})
    return ", ".join(users) or "no node"


def _param_error(graph: Graph, name: str, have: Sequence[int], want: tuple | None, context: str,
                 blame: str = "") -> ParamError:
    # input_shapes: the given input shapes may be what is wrong
    return ParamError(f"param {name!r} has shape {tuple(have)} but the symbol expects "
                      f"{_show(want)} there{context} (read by {_readers(graph, name)}){blame}",
                      param=name, found=tuple(have), expected=want, input_shapes=bool(context))


def input_shapes(data_shapes: Mapping | Sequence | None, shapes_from: str = "data_shapes") -> dict[str, tuple[int, ...]]:
    """``data_shapes`` as ``{name: shape}``: a mapping, or the ``[(name, shape), ...]`` /
    ``DataDesc`` list ``Module.bind`` takes; :class:`InputShapeError` naming ``shapes_from``
    and the input for anything else, or a shape that is not positive integers."""
    if not data_shapes:
        return {}
    items = data_shapes.items() if isinstance(data_shapes, Mapping) else data_shapes
    known = {}
    for item in items:
        try:
            name, shape = item[0], item[1]   # a DataDesc is a (name, shape, ...) tuple
            shape = tuple(shape)
        except (TypeError, IndexError, KeyError):
            raise InputShapeError(f"{shapes_from}: expected {{name: shape}} or [(name, shape), "
                                  f"...] as Module.bind takes, got {item!r}") from None
        if not shape or not all(isinstance(d, numbers.Integral) and not isinstance(d, bool)
                                and int(d) > 0 for d in shape):
            raise InputShapeError(f"{shapes_from}: the shape of {name!r} must be a tuple of "
                                  f"positive integers, got {item[1]!r}")
        known[str(name)] = tuple(int(d) for d in shape)
    return known


def check_param_shapes(sym: Symbol, arg_params: Mapping, aux_params: Mapping,
                       data_shapes: Mapping[str, Sequence[int]] | None = None, *,
                       graph: Graph | None = None, shapes_from: str = "data_shapes",
                       input_names: list[str] | None = None) -> None:
    """Raise :class:`ParamError` when a param's shape contradicts the symbol.

    First the params are checked against each other (model inputs get the partial shapes
    their readers prove, see the module doc); then, when ``data_shapes`` are given, against
    those. The error names the param, its shape, the shape the symbol expects there (``?``
    for a dimension that cannot be told) and the nodes that read it. Names neither in the
    symbol nor in the params are left to :func:`mxnet_amp.params.check_params`.

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
        from .io import graph_from_symbol
        graph = graph_from_symbol(sym)
    inputs = list(input_names) if input_names is not None else _input_names(sym)
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
    checker = _Checker(graph, sym, given, strict=True, names=inputs)
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
    guesses = _guess_input_shapes(graph, data, given)
    if _concat_reads_unknown(graph, [d for d in data if d not in guesses]):
        return   # MXNet's partial inference would blame a param wrongly (_concat_reads_unknown)
    exact = _Checker(graph, sym, given, names=inputs)
    if not guesses:
        _check_against(exact, graph, {}, order, given, "", "")
        return
    sized = _sized(guesses, _TYPICAL_SIZE)
    whole = _Checker(graph, sym, given, strict=True, names=inputs)
    doubt = _doubt_at(whole, sized, given, order)
    if doubt is None:
        return
    # where a layer pins the input size, the contradiction names the size it wants
    hint = _size_hint(doubt, _TYPICAL_SIZE)
    size_doubt = _UNTRIED
    if hint is None and _CONTRADICTION.search(doubt):
        size_doubt = _doubt_at(whole, sized, {}, [])   # the size alone: its message may name one
        hint = _size_hint(size_doubt or "", _TYPICAL_SIZE)
    if hint is not None and _doubt_at(whole, _sized(guesses, hint), given, order) is None:
        return
    fast_graph, cut_shapes = _quick_graph(graph, given, pools=False)
    if fast_graph is not graph:
        # the typical size may contradict the graph whatever the params (a layer reads the
        # real spatial size); if not, the graph with cuts checks the params without their
        # FullyConnected layers' input sizes (those depend on the real size)
        if size_doubt is _UNTRIED:
            size_doubt = _doubt_at(whole, sized, {}, [])
        if size_doubt is None:
            fast = _Checker(fast_graph, None, given, strict=True, cut_shapes=cut_shapes, names=inputs)
            try:
                if _check_against(fast, graph, sized, order, given, "", ""):
                    return
            except ParamError:
                pass
    quick_graph, cut_shapes = _quick_graph(graph, given)
    quick = _Checker(quick_graph, sym if quick_graph is graph else None, given, cut_shapes=cut_shapes,
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
    unknown = _unknown()
    return {k: tuple(size if d == unknown and i > 1 else d for i, d in enumerate(v))
            for k, v in guesses.items()}


def _doubt_at(checker: _Checker, sized: Mapping, given: Mapping, order: list[str]) -> str | None:
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
    unknown = _unknown()
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
        dims = _ints(m.group(1))
        sizes.update(dims[2:] if len(dims) > 2 else dims)
    sizes = {d for d in sizes if d > 0 and d != tried}
    return sizes.pop() if len(sizes) == 1 else None


def _check_against(checker: _Checker, graph: Graph, base: Mapping, order: list[str],
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
        raise _param_error(graph, name, given[name], expected.get(name), context, blame + why) from None
    # MXNet takes some given shapes as they come (aux states; BatchNorm's gamma is
    # overwritten): compare what it inferred around them
    unknown = _unknown()
    for name in order:
        want = (inferred or {}).get(name)
        if not _fits(want, given[name], unknown):
            raise _param_error(graph, name, given[name], want, context, blame)
    return inferred is not None

