"""A bfloat16 model partitioned ahead of time by MXNet's oneDNN backend, for checkpoints whose
loaders run no generic bf16 kernel where a fused one exists.

MXNet 1.9.1 fuses oneDNN subgraphs (conv + BatchNorm + ReLU / clip / sum, FullyConnected +
activation) at bind time in ``Module`` / ``simple_bind`` / the C predict API
(``MXNET_SUBGRAPH_BACKEND`` defaults to ``MKLDNN``), but Gluon's ``SymbolBlock.imports`` +
``hybridize()`` runs the generic kernels unless given ``backend='MKLDNN'``: there MXNet's
generic bf16 ``clip`` (relu6) made mobilenetv2_1.0 2.2-2.4x slower than fp32. A graph written
partitioned (``Symbol.optimize_for('MKLDNN')``: ``_sg_mkldnn_conv`` nodes, each holding its
original ops as a subgraph and reading the same params by the same names) runs those fused;
the bind-time pass finds nothing left to fuse in them (its selectors match the original op
names, not ``_sg_mkldnn_*``). Fused nodes that only replace oneDNN kernels are written back as
their ops (:func:`keep_fused_where_generic`): a plain ``hybridize()`` pays each fused node's
set-up at every call.

The fused nodes have no GPU kernel, so a float16 model (GPU only) is refused.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from ..errors import FusionError, error_text
from ..ir.dtypes import dtype_of_code
from ..ir.graph import Entry, Graph, GraphBuilder
from ..warn import warn_user
from .hardware import HardwareWarning, native_note, runs_where

if TYPE_CHECKING:   # mxnet itself is imported where it runs
    from mxnet.symbol import Symbol

__all__ = ["FUSED_FOR", "check_fused_for", "fuse_for_cpu", "is_fused", "graph_low_dtypes",
           "generic_kernel_ops", "SlowLoadWarning", "warn_saved"]

FUSED_FOR = ("cpu",)
FUSED_OP_PREFIX = "_sg_mkldnn_"


def check_fused_for(fused_for: object) -> str | None:
    """``fused_for`` as given when it is None or ``'cpu'``; :class:`FusionError` otherwise."""
    if fused_for is None or fused_for in FUSED_FOR:
        return fused_for
    raise FusionError(f"fused_for={fused_for!r}: the one target is 'cpu' (MXNet's oneDNN "
                      "backend); None saves the graph unpartitioned")


def graph_low_dtypes(graph: Graph) -> set[str]:
    """The low precision dtypes ``graph`` computes in: its casts' targets and its variables'
    ``__dtype__`` tags (what a conversion writes)."""
    found: set[str] = set()
    for node in graph.walk():
        if node.op == "amp_cast":
            found.add(str(node.attrs.get("dtype")))
        elif node.is_variable:
            found.add(str(dtype_of_code(node.attrs.get("__dtype__"))))
    return found & {"float16", "bfloat16"}


def is_fused(graph: Graph) -> bool:
    """True when ``graph`` already holds nodes of MXNet's oneDNN partitioning."""
    return any(n.op.startswith(FUSED_OP_PREFIX) for n in graph.nodes)


def fuse_for_cpu(sym: Symbol, graph: Graph, what: str = "the model") -> Symbol:
    """``sym`` partitioned by MXNet's oneDNN backend, its amp casts kept (a new symbol).

    Parameters
    ----------
    sym : Symbol
        A converted (bfloat16) or float32 model.
    graph : Graph
        Its graph (:func:`mxnet_amp.mx.io.graph_from_symbol`), which the checks read.
    what : str
        How errors name the model (a file, say).

    Returns
    -------
    Symbol
        The partitioned graph (same arguments and aux states, by the same names).

    Raises
    ------
    FusionError
        ``sym`` computes in float16 (GPU only: the fused nodes have no GPU kernel), or this
        MXNet build has no oneDNN, or MXNet's partitioning fails.
    """
    import mxnet as mx
    if "float16" in graph_low_dtypes(graph):
        raise FusionError(f"{what} computes in float16, which MXNet runs only on a GPU: a "
                          "checkpoint fused for the CPU (oneDNN's _sg_mkldnn_* nodes) has no "
                          "GPU kernel. Save it unfused (fused_for=None); fuse a bfloat16 "
                          "conversion for CPU deployment")
    if not mx.runtime.Features().is_enabled("MKLDNN"):
        raise FusionError(f"cannot fuse {what} for the CPU: this MXNet build has no oneDNN "
                          "(MKLDNN) backend")
    if is_fused(graph):
        return sym
    try:
        # no args: with args MXNet 1.9.1 infers shapes first, and on the partial shapes a
        # model without its data shapes has, partitions nothing
        return sym.optimize_for("MKLDNN")
    except mx.base.MXNetError as err:
        raise FusionError(f"MXNet's oneDNN backend cannot partition {what}: "
                          f"{error_text(err)}") from None


# ops whose bfloat16 kernel outside a fused node is oneDNN's too (MXNet 1.9.1: convolution,
# inner product, batch norm, eltwise activations, sum); a fused node holding only these is
# written back unfused (see keep_fused_where_generic)
ONEDNN_BF16_OPS = frozenset({"Convolution", "FullyConnected", "BatchNorm", "Activation",
                             "elemwise_add", "_contrib_quantized_elemwise_add"})


def keep_fused_where_generic(graph: Graph) -> Graph:
    """``graph`` (partitioned by :func:`fuse_for_cpu`) with each fused node whose ops all have
    oneDNN bf16 kernels of their own put back as those ops.

    A plain ``hybridize()`` runs MXNet's dynamic CachedOp, which creates a fused node's state
    (its oneDNN primitive and reordered weights) again at every call; the unfused
    Convolution keeps its reordered weights across calls. So a fused node pays only where it
    replaces a generic bf16 kernel (relu6's ``clip``: 2.8-3.9x its fp32 time): resnet18 at
    64 px ran 72 ms fused against 7.3 ms unfused on plain ``hybridize()``. ``Module``,
    ``simple_bind`` and the C predict API fuse the put-back ops again at bind.
    """
    b = GraphBuilder()
    where: dict[tuple[int, int], Entry] = {}   # (old node, output) -> new entry

    def moved(e: Entry) -> Entry:
        return where.get((e.node, e.output), Entry(e.node, e.output, e.version))

    for i, node in enumerate(graph.nodes):
        inputs = tuple(moved(e) for e in node.inputs)
        if not (node.op.startswith(FUSED_OP_PREFIX) and len(node.subgraphs) == 1
                and _ops_of(node.subgraphs[0]) <= ONEDNN_BF16_OPS):
            where[(i, 0)] = Entry(b.add(node.replace(inputs=inputs)))
            for k in range(1, 8):   # a node's other outputs keep their index
                where[(i, k)] = Entry(where[(i, 0)].node, k)
            continue
        sub = node.subgraphs[0]
        inner: dict[int, Entry] = {}
        variables = [j for j, n in enumerate(sub.nodes) if n.is_variable]
        if len(variables) != len(inputs):
            raise FusionError(f"fused node {node.name!r}: {len(variables)} subgraph inputs for "
                              f"{len(inputs)} node inputs")
        for j, k in zip(variables, range(len(inputs))):
            inner[j] = inputs[k]
        for j, n in enumerate(sub.nodes):
            if not n.is_variable:
                ins = tuple(Entry(inner[e.node].node, inner[e.node].output if sub.nodes[e.node].is_variable
                                  else e.output) for e in n.inputs)
                inner[j] = Entry(b.add(n.replace(inputs=ins)))
        head = sub.heads[0]
        where[(i, 0)] = Entry(inner[head.node].node, head.output)
    return b.build([moved(e) for e in graph.heads], graph.attrs)


def _ops_of(graph: Graph) -> set[str]:
    return {n.op for n in graph.nodes if not n.is_variable}


class SlowLoadWarning(UserWarning):
    """A bfloat16 model saved unfused holds ops that run MXNet's generic bfloat16 kernel
    unless oneDNN fuses them (:func:`generic_kernel_ops`): ``SymbolBlock.imports`` + a plain
    ``hybridize()`` runs it slower than float32."""


def generic_kernel_ops(graph: Graph, partitioned: Callable[[], Graph]) -> dict[str, int]:
    """The ops of a bfloat16 model that run a generic kernel unless fused, with how many of
    their nodes oneDNN's partitioning would fuse: what :func:`keep_fused_where_generic`
    keeps fused (``clip`` after a convolution: relu6), counted from MXNet's own partitioning
    (``Symbol.optimize_for('MKLDNN')``). Empty for a float32/float16 model, a graph fused
    already, or an MXNet without oneDNN.

    Parameters
    ----------
    graph : Graph
        The model as it will be saved.
    partitioned : callable
        Gives the graph MXNet's oneDNN backend partitions it into (``graph_from_symbol``
        of :func:`fuse_for_cpu`'s symbol; called only for a bfloat16 graph not fused yet).

    Returns
    -------
    dict of str to int
        Op name -> number of its nodes (inside fused nodes), sorted by name.
    """
    if "bfloat16" not in graph_low_dtypes(graph) or is_fused(graph):
        return {}
    try:
        fused = keep_fused_where_generic(partitioned())
    except FusionError:   # no oneDNN, or MXNet cannot partition it: nothing to say
        return {}
    counts: dict[str, int] = {}
    for node in fused.nodes:
        if node.op.startswith(FUSED_OP_PREFIX) and len(node.subgraphs) == 1:
            for op in _ops_of(node.subgraphs[0]) - ONEDNN_BF16_OPS:
                counts[op] = counts.get(op, 0) + 1
    return dict(sorted(counts.items()))


def warn_saved(graph: Graph, partitioned: Callable[[], Graph], prefix: str,
               fused_for: str | None) -> None:
    """What a user saving ``sym`` as ``prefix`` should know, as warnings at the caller's line:
    where a low precision model runs when this machine cannot run it
    (:class:`~mxnet_amp.mx.hardware.HardwareWarning`), and how to load a bfloat16 model fast
    when saved unfused with ops that run a generic kernel unless fused
    (:class:`SlowLoadWarning`).

    Parameters
    ----------
    graph : Graph
        The model as given to the save (before any fusing).
    partitioned : callable
        As for :func:`generic_kernel_ops`.
    prefix : str
        The checkpoint prefix, to name it.
    fused_for : {None, 'cpu'}
        The save's ``fused_for``.
    """
    low = graph_low_dtypes(graph)
    for dtype in sorted(low):
        if native_note(dtype) is not None:
            warn_user(f"the {dtype} model saved as {prefix} runs on {runs_where(dtype)}; this "
                      f"machine cannot execute it (mxnet_amp.emulate_model checks its numerics "
                      "here)", HardwareWarning)
    if fused_for is not None:
        return
    ops = generic_kernel_ops(graph, partitioned)
    if ops:
        listed = ", ".join(f"{op} ({n} node{'s' if n > 1 else ''})" for op, n in ops.items())
        warn_user(f"the bfloat16 model saved as {prefix} runs MXNet's generic bfloat16 kernel "
                  f"for {listed} unless oneDNN fuses it into the convolution before: loaded "
                  "with SymbolBlock.imports + a plain hybridize() it runs slower than float32. "
                  "Load it with hybridize(backend='MKLDNN', static_alloc=True, "
                  "static_shape=True), or save it with fused_for='cpu' (mxnet-amp convert "
                  "--fuse-cpu) for a plain hybridize(); Module, simple_bind and the C predict "
                  "API fuse at bind", SlowLoadWarning)
