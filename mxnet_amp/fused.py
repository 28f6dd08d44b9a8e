"""A bfloat16 model partitioned ahead of time by MXNet's oneDNN backend, for checkpoints that
run fused whoever loads them.

MXNet 1.9.1 fuses oneDNN subgraphs (conv + BatchNorm + ReLU / clip / sum, FullyConnected +
activation) at bind time in ``Module`` / ``simple_bind`` / the C predict API
(``MXNET_SUBGRAPH_BACKEND`` defaults to ``MKLDNN``), but Gluon's ``SymbolBlock.imports`` +
``hybridize()`` runs the generic kernels unless given ``backend='MKLDNN'``: there MXNet's
generic bf16 kernels made mobilenetv2_1.0 2.2-2.4x slower than fp32. A graph written already
partitioned (``Symbol.optimize_for('MKLDNN')``: ``_sg_mkldnn_conv`` / ``_sg_mkldnn_fully_connected``
nodes, each holding its original ops as a subgraph and reading the same params by the same
names) runs the fused kernels on every loader; the bind-time pass finds nothing left to fuse in
it (its selectors match the original op names, not ``_sg_mkldnn_*``).

The fused nodes have no GPU kernel, so a float16 model (GPU only) is refused.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from .errors import FusionError, error_text
from .graph import Graph

if TYPE_CHECKING:   # mxnet itself is imported where it runs
    from mxnet.symbol import Symbol

__all__ = ["FUSED_FOR", "check_fused_for", "fuse_for_cpu", "is_fused", "graph_low_dtypes"]

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
    from .dtypes import dtype_of_code
    found: set[str] = set()
    stack = [graph]
    while stack:
        g = stack.pop()
        for node in g.nodes:
            if node.op == "amp_cast":
                found.add(str(node.attrs.get("dtype")))
            elif node.is_variable:
                found.add(str(dtype_of_code(node.attrs.get("__dtype__"))))
            stack.extend(node.subgraphs)
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
        Its graph (:func:`mxnet_amp.io.graph_from_symbol`), which the checks read.
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
