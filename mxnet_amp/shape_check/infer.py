"""Shape inference on a graph that goes past shape functions stopping on an unknown dimension.

:class:`Checker` runs MXNet's partial inference and, where a shape function stopped on an
unknown dimension, cuts the graph there (:func:`mxnet_amp.shape_check.cuts.cut_past`) and runs
again; only a contradiction MXNet reports as such (:data:`CONTRADICTION`) is raised.
"""
from __future__ import annotations

import re
import warnings
from typing import TYPE_CHECKING, Mapping

from ..errors import error_text
from ..ir.graph import Graph
from ..mx.io import graph_to_symbol
from .cuts import cut_past

if TYPE_CHECKING:   # mxnet itself is imported where it runs
    from mxnet.symbol import Symbol

__all__ = ["Checker", "CONTRADICTION", "symbol_input_names"]

# what MXNet says when two shapes really contradict each other (SHAPE_ASSIGN_CHECK, a bias,
# an elementwise or concat input)
CONTRADICTION = re.compile(r"Shape inconsistent|Unexpected shape|Incompatible (attr|input shape)")
# a shape function that stopped on an unknown dimension, in a way cut_past knows how to go past
_STOPPED = re.compile(r"Error in operator ([^:\s]+):.*(must be known|exceeds input \(-1)")
_MAX_CUTS = 8


def symbol_input_names(sym: Symbol) -> list[str]:
    """``sym``'s arguments, then its aux states (each list costs a walk of the graph in MXNet:
    callers keep it)."""
    return list(sym.list_arguments()) + list(sym.list_auxiliary_states())


def _infer(sym: Symbol, shapes: Mapping[str, tuple], names: list[str] | None = None) -> dict:
    """``{input name: shape}`` by MXNet's partial inference (unknown dims as reported);
    raises MXNetError on a contradiction. ``names``: :func:`symbol_input_names` of ``sym``."""
    if names is None:
        names = symbol_input_names(sym)
    wanted = set(names)
    known = {k: v for k, v in shapes.items() if k in wanted}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # partial inference warns about unknown shapes
        args, _, auxs = sym.infer_shape_partial(**known)
    return dict(zip(names, [tuple(s) if s is not None else None for s in list(args) + list(auxs)]))


class Checker:
    """Shape inference on a graph, going past nodes whose shape function stops on an
    unknown dimension (see :func:`cut_past`); the cuts are kept for later calls."""

    def __init__(self, graph: Graph, sym: Symbol | None, given: Mapping[str, tuple], *, strict: bool = False,
                 cut_shapes: Mapping[str, tuple] | None = None,
                 names: list[str] | None = None) -> None:
        # strict: the input shapes are all known, so every failure is a contradiction;
        # sym: graph's symbol, None to build it when first needed; names: its input names
        self.graph, self._sym, self.given, self.strict = graph, sym, given, strict
        self.cut_shapes: dict = dict(cut_shapes or {})
        self._names = names if sym is not None else None

    @property
    def sym(self) -> Symbol:
        """The graph as a symbol, built when first needed (and again after a cut)."""
        if self._sym is None:
            self._sym = graph_to_symbol(self.graph)
            self._names = None
        return self._sym

    @property
    def names(self) -> list[str]:
        """:func:`symbol_input_names` of :attr:`sym`, listed once per symbol."""
        if self._names is None:
            self._names = symbol_input_names(self.sym)
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
                cut = (cut_past(self.graph, stopped.group(1), self.given, {**self.cut_shapes, **shapes})
                       if stopped else None)
                if cut is None:
                    if CONTRADICTION.search(text):
                        raise
                    return None
                self.graph, more = cut
                self.cut_shapes.update(more)
                self._sym = self._names = None
        return None

    def consistent(self, shapes: Mapping[str, tuple]) -> bool:
        """Whether ``shapes`` contradict nothing in the graph."""
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
