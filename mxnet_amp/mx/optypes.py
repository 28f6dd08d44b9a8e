"""Ask MXNet's own type inference what one op does with given input dtypes.

The pass never guesses an op's dtype rules (BatchNorm keeps fp32 statistics under fp16
data, Embedding's output follows its weight, ``_zeros`` follows its ``dtype`` attribute…):
it builds a one-node graph and runs MXNet's ``FInferType`` on it. Answers are cached per
(op, attributes, input dtypes), so a graph of repeated blocks costs a few dozen probes.
"""
from __future__ import annotations

import json
from typing import Sequence, Union

from ..errors import error_text, InferenceFailed
from ..ir.graph import Node, node_alone_obj
from .registry import infer_types

__all__ = ["OpTypes"]


# answers depend only on the op, its attributes, the input dtypes and the MXNet build, so
# conversions in one process share them (a memo, like functools.lru_cache; bounded)
Dtypes = tuple[tuple[Union[str, None], ...], tuple[Union[str, None], ...]]
_SHARED: dict[tuple[object, ...], Dtypes | InferenceFailed] = {}
_SHARED_MAX = 200_000


class OpTypes:
    """A cache of single-op type inference results.

    Parameters
    ----------
    cache : dict, optional
        Where answers are kept; by default a memo shared by the conversions of a process.
    """

    __slots__ = ("_cache",)

    def __init__(self, cache: dict[tuple[object, ...], Dtypes | InferenceFailed] | None = None) -> None:
        if cache is None:
            if len(_SHARED) > _SHARED_MAX:
                _SHARED.clear()
            cache = _SHARED
        self._cache = cache

    def infer(self, node: Node, input_dtypes: Sequence[str | None],
              num_outputs: int) -> tuple[tuple[str | None, ...], tuple[str | None, ...]]:
        """Input and output dtypes MXNet infers for ``node`` given ``input_dtypes``.

        ``None`` in ``input_dtypes`` leaves an input for MXNet to decide (a weight, say).
        Returns ``(inputs, outputs)``, tuples of dtype names (``None`` = undecided).
        Raises :class:`InferenceFailed` when MXNet rejects the combination.
        """
        key = None
        if not node.subgraphs:
            key = (node.op, tuple(sorted(node.attrs.items())), tuple(input_dtypes), num_outputs)
            hit = self._cache.get(key)
            if hit is not None:
                if isinstance(hit, InferenceFailed):
                    raise hit
                return hit
        try:
            result = self._probe(node, input_dtypes, num_outputs)
        except InferenceFailed as err:
            if key is not None:
                self._cache[key] = err
            raise
        if key is not None:
            self._cache[key] = result
        return result

    def _probe(self, node: Node, input_dtypes: Sequence[str | None],
               num_outputs: int) -> tuple[tuple[str | None, ...], tuple[str | None, ...]]:
        import mxnet as mx
        n = len(input_dtypes)
        try:
            sym = mx.sym.load_json(json.dumps(node_alone_obj(node, n, num_outputs)))
        except mx.base.MXNetError as err:
            raise InferenceFailed(error_text(err)) from None
        known = {f"in{i}": d for i, d in enumerate(input_dtypes) if d is not None}
        args, outs, auxs = infer_types(sym, known)
        by_name = dict(zip(sym.list_arguments(), args))
        by_name.update(zip(sym.list_auxiliary_states(), auxs))
        inputs = tuple(by_name.get(f"in{i}", input_dtypes[i]) for i in range(n))
        return inputs, tuple(outs)
