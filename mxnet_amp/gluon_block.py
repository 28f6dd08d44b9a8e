"""The ``SymbolBlock`` that :func:`mxnet_amp.convert_hybrid_block` returns.

MXNet 1.9.1's ``HybridBlock.export`` drops every ``amp_cast`` / ``amp_multicast`` unless
called with ``remove_amp_cast=False``, so the ordinary ``net16.export(prefix)`` of a
converted block would write a graph that computes something else. This subclass keeps the
casts by default. It imports mxnet, so :mod:`mxnet_amp.gluon` loads it only when a block is
built (``import mxnet_amp`` does not import mxnet).
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING

from mxnet import gluon

if TYPE_CHECKING:
    from mxnet.ndarray import NDArray

__all__ = ["AMPSymbolBlock"]


class AMPSymbolBlock(gluon.SymbolBlock):
    """A ``SymbolBlock`` whose :meth:`export` keeps amp casts.

    Everything else is ``SymbolBlock``'s. The exported pair loads back with
    ``SymbolBlock.imports(json, input_names, params)`` (which returns a plain
    ``SymbolBlock``) or :func:`mxnet_amp.load_checkpoint`.
    """

    def forward(self, x: NDArray | list | tuple, *args: NDArray) -> NDArray | list:
        """Run the block on arrays in its source block's input structure.

        ``SymbolBlock.forward`` insists on an array first; a block converted from one whose
        first input is nested (``net([a, b], y)``) keeps that structure, so a nested first
        input goes to the cached op as it is."""
        if isinstance(x, (list, tuple)):
            from mxnet.gluon.block import _flatten
            first = _flatten(x, "input")[0][0]
            with first.ctx:
                return self._call_cached_op(x, *args)
        return super().forward(x, *args)

    def export(self, path: str | os.PathLike, epoch: int = 0,
               remove_amp_cast: bool = False) -> tuple[str, str] | None:
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

        Returns
        -------
        (str, str) or None
            The symbol and params file paths (None with ``remove_amp_cast=True``, as
            ``HybridBlock.export`` returns nothing).
        """
        if remove_amp_cast:
            super().export(os.fspath(path), epoch, remove_amp_cast=True)
            return None
        from .block_model import export_block
        return export_block(self, path, epoch)
