"""What the shape check says: the input shapes a caller gives, read and checked, and the
error naming a param whose shape contradicts the symbol."""
from __future__ import annotations

import numbers
from typing import Mapping, Sequence

from ..errors import InputShapeError, ParamError
from ..ir.graph import Graph
from .guess import unknown_dim

__all__ = ["input_shapes", "param_error"]


def _show(shape: tuple | None) -> str:
    if shape is None:
        return "another shape"
    unknown = unknown_dim()
    dims = ["?" if d == unknown or d < 0 else str(d) for d in shape]
    return "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"


def _readers(graph: Graph, name: str) -> str:
    try:
        i = graph.index_of(name)
    except KeyError:
        return "no node"
    users = sorted({f"{graph.nodes[j].name!r} ({graph.nodes[j].op})" for j, _ in graph.consumers()[i]})
    return ", ".join(users) or "no node"


def param_error(graph: Graph, name: str, have: Sequence[int], want: tuple | None, context: str,
                 blame: str = "") -> ParamError:
    """The error for param ``name`` of shape ``have`` where the symbol expects ``want``:
    the shapes, ``context`` (the input shapes checked against), the nodes reading it and
    ``blame`` (who may be wrong, MXNet's words)."""
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
