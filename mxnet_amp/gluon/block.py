"""The ``SymbolBlock`` that :func:`mxnet_amp.convert_hybrid_block` returns.

MXNet 1.9.1's ``HybridBlock.export`` drops every ``amp_cast`` / ``amp_multicast`` unless
called with ``remove_amp_cast=False``, so the ordinary ``net16.export(prefix)`` of a
converted block would write a graph that computes something else. This subclass keeps the
casts by default. It imports mxnet, so :mod:`mxnet_amp.gluon.adapter` loads it only when a block is
built (``import mxnet_amp`` does not import mxnet).

The converter hybridizes the block with a subgraph backend (oneDNN's fused kernels on a CPU,
``backend='MKLDNN'``), which MXNet applies to the cached graph at the first forward pass.
MXNet 1.9.1 then *replaces* the block's ``_cached_graph`` by the partitioned graph, and a
``SymbolBlock`` keeps it through ``hybridize()``: ``export()``, a symbolic call, a second
``hybridize()`` (partitioning the partitioned graph) and a conversion would all read fused
nodes no other MXNet loads. This class keeps its own graph as ``_cached_graph`` and holds the
partitioned one apart (:attr:`AMPSymbolBlock.optimized_symbol`).
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from mxnet import gluon

from ..errors import AMPError
from ..ir.dtypes import dtype_of_code
from ..ir.graph import CAST_OPS
from ..mx.fused import graph_low_dtypes
from ..mx.hardware import refuse_not_native, warn_amx_off
from ..mx.io import graph_from_symbol
from ..passes.infer_dtypes import infer_dtypes
from .model import export_block

if TYPE_CHECKING:
    from mxnet.gluon import ParameterDict
    from mxnet.ndarray import NDArray
    from mxnet.symbol import Symbol

__all__ = ["AMPSymbolBlock"]

_KEEP = object()   # hybridize() called without backend=: keep the block's default backend


class AMPSymbolBlock(gluon.SymbolBlock):
    """A ``SymbolBlock`` whose :meth:`export` keeps amp casts.

    Everything else is ``SymbolBlock``'s. The exported pair loads back with
    ``SymbolBlock.imports(json, input_names, params)`` (which returns a plain
    ``SymbolBlock``) or :func:`mxnet_amp.load_checkpoint`.

    :meth:`hybridize` without ``backend=`` keeps the backend the converter chose
    (:attr:`default_backend`); ``hybridize(backend=None)`` runs MXNet's generic kernels.
    """

    _cached_graph: Any   # SymbolBlock's (inputs, outputs) pair, as MXNet sets it

    def __init__(self, outputs: Symbol | list, inputs: Symbol | list,
                 params: ParameterDict | None = None) -> None:
        super().__init__(outputs, inputs, params)
        self._amp_graph: Any = self._cached_graph  # the graph as converted, never partitioned
        self._amp_optimized: Any = None                 # the partitioned graph the cached op runs
        self.default_backend: str | None = None
        self._amp_low_dtype: str | None = None          # set at the first run
        self._amp_ran = False                           # a call on arrays passed the check

    @property
    def optimized_symbol(self) -> Symbol | None:
        """The graph the cached op runs after the backend partitioned it (fused nodes such as
        ``_sg_mkldnn_conv``); None before the first forward pass or without a backend."""
        return self._amp_optimized

    def hybridize(self, active: bool = True, backend: str | None | object = _KEEP,
                  **kwargs: object) -> None:
        """``HybridBlock.hybridize``, except that leaving ``backend`` out keeps
        :attr:`default_backend` (``'MKLDNN'`` as the converter returns the block on a CPU
        with oneDNN); ``backend=None`` turns the subgraph backend off, a name picks another.
        The other keywords (``static_alloc``, ``static_shape``, ...) are MXNet's."""
        super().hybridize(active, self.default_backend if backend is _KEEP else backend, **kwargs)

    def _build_cache(self, *args: Any) -> None:
        # MXNet builds the cached op from the partitioned graph and leaves that graph in
        # _cached_graph; keep it apart and put the converted graph back
        if self._amp_low_dtype is None:   # the first run: what the block computes in
            low = graph_low_dtypes(graph_from_symbol(self._amp_graph[1]))
            self._amp_low_dtype = "bfloat16" if "bfloat16" in low else "float32"
            warn_amx_off(self._amp_low_dtype, "a converted block's first run")
        super()._build_cache(*args)
        cached: Any = self._cached_graph
        self._amp_optimized = cached[1] if self._backend else None
        self._cached_graph = self._amp_graph

    def _clear_cached_op(self) -> None:
        super()._clear_cached_op()
        if hasattr(self, "_amp_graph"):
            self._cached_graph = self._amp_graph
            self._amp_optimized = None
            # what the next _build_cache lists, so that MXNet's own export() finds the params
            # before a forward pass rebuilds the cached op (hybridize() cleared it)
            data = {s.name: i for i, s in enumerate(self._amp_graph[0])}
            params = self.collect_params()
            self._cached_op_args = [(True, data[n]) if n in data else (False, params[n])
                                    for n in self._amp_graph[1].list_inputs()]

    def forward(self, x: NDArray | list | tuple, *args: NDArray) -> NDArray | list:
        """Run the block on arrays in its source block's input structure.

        ``SymbolBlock.forward`` insists on an array first; a block converted from one whose
        first input is nested (``net([a, b], y)``) keeps that structure, so a nested first
        input goes to the cached op as it is."""
        if not self._amp_ran:
            self._refuse_unrunnable(x, *args)
        if isinstance(x, (list, tuple)):
            from mxnet.gluon.block import _flatten
            first = _flatten(x, "input")[0][0]
            with first.ctx:
                return self._call_cached_op(x, *args)
        return super().forward(x, *args)

    def _refuse_unrunnable(self, *args: Any) -> None:
        """:class:`~mxnet_amp.errors.HardwareError` (:func:`~mxnet_amp.mx.hardware.native_note`'s
        text) when the block computes in bfloat16, is called on CPU arrays, and this CPU's
        oneDNN runs no bfloat16: said before MXNet's "could not create a primitive descriptor
        iterator", which would come only at the first read of an output (the engine runs the
        graph later). A symbolic call is not checked."""
        if not _on_cpu(args):
            return
        if _computes_in_bfloat16(self._amp_graph[1]):
            refuse_not_native("bfloat16", "this block computes in bfloat16 and is called on "
                                          "CPU arrays")
        self._amp_ran = True

    def export(self, path: str | os.PathLike, epoch: int = 0,
               remove_amp_cast: bool = False, *, fused_for: str | None = None
               ) -> tuple[str, str] | None:
        """Write ``path-symbol.json`` and ``path-%04d.params``, amp casts kept.

        Parameters
        ----------
        path : str or PathLike
            The file prefix.
        epoch : int, default 0
            The epoch number in the params file name.
        remove_amp_cast : bool, default False
            True writes what ``HybridBlock.export`` writes by default: the graph without its
            casts (which computes something else than this block).
        fused_for : {None, 'cpu'}, default None
            ``'cpu'``: the graph written already partitioned by MXNet's oneDNN backend where
            that removes a generic bf16 kernel, for ``SymbolBlock.imports`` + a plain
            ``hybridize()`` (see :func:`mxnet_amp.save_checkpoint`).

        Returns
        -------
        (str, str) or None
            The symbol and params file paths (None with ``remove_amp_cast=True``, as
            ``HybridBlock.export`` returns nothing).
        """
        if remove_amp_cast:
            super().export(os.fspath(path), epoch, remove_amp_cast=True)
            return None
        return export_block(self, path, epoch, fused_for=fused_for)


def _computes_in_bfloat16(sym: Symbol) -> bool:
    """True when an op of ``sym`` other than a cast computes in bfloat16 (MXNet's type
    inference, per node); an emulating graph's rounding casts alone (``emulate_block``) run
    on any CPU."""
    graph = graph_from_symbol(sym)
    if "bfloat16" not in graph_low_dtypes(graph):
        return False
    var = {n.name: dtype_of_code(n.attrs.get("__dtype__")) or "float32"
           for n in graph.nodes if n.is_variable}
    try:
        dtypes = infer_dtypes(graph, var)
    except AMPError:   # MXNet cannot type it here: its bfloat16 casts decide
        return True
    return any("bfloat16" in dtypes[i] for i, n in enumerate(graph.nodes)
               if not n.is_variable and n.op not in CAST_OPS)


def _on_cpu(args: tuple) -> bool:
    """True when the first array among a call's (nested) arguments is on a CPU; False on a
    GPU and for a symbolic call (no array)."""
    from mxnet.ndarray import NDArray
    todo = list(args)
    while todo:
        a = todo.pop(0)
        if isinstance(a, NDArray):
            return bool(a.ctx.device_type == "cpu")
        if isinstance(a, (list, tuple)):
            todo[:0] = list(a)
    return False
