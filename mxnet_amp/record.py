"""The records a conversion returns, that its readers (report, picture, emulation, CLI) use.

:class:`Conversion` is the full outcome of one conversion, :class:`ParamRecord` what it
decided for one param; the cast pass's own record is
:class:`~mxnet_amp.passes.insert_casts.CastResult` (``Conversion.result``).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Callable, Mapping

from .ir.dtypes import array_dtype, array_nbytes
from .ir.graph import Graph
from .mx.params import recast_params
from .passes.insert_casts import CastResult
from .policy import OpPolicy

__all__ = ["Conversion", "ParamRecord", "input_figures", "stored_why"]


@dataclass(frozen=True)
class ParamRecord:
    """What a conversion decided for one param (a weight or auxiliary state).

    Attributes
    ----------
    given : str
        Its dtype as given: its array's, else its ``__dtype__`` attribute's, else float32
        (what a report calls "before").
    stored : str
        The dtype the conversion stores it in: ``given``, or the low precision dtype every
        reader wants under ``cast_optional_params``; its ``__dtype__`` tag in the converted
        graph.
    bound : str or None
        The dtype MXNet's type inference gives it in the converted symbol, the dtype its
        array is recast to (:meth:`Conversion.recast`); equal to ``stored`` where decided
        (checked), None where inference leaves it undecided or the symbol does not read it
        (its array is then kept as it is).
    why : str
        Why it is stored so.
    """

    given: str
    stored: str
    bound: str | None
    why: str


@dataclass(frozen=True, kw_only=True)   # built by keyword: many fields, several optional
class Conversion:
    """The full outcome of a conversion: the new graph and everything decided on the way."""

    graph: Graph
    original: Graph
    result: CastResult
    policy: OpPolicy
    data_names: tuple[str, ...]
    # each param's dtypes: the one record of them (param_dtypes, arg_dtypes, aux_dtypes and
    # input_param_dtypes below are views of it)
    params: Mapping[str, ParamRecord]
    # each model input's dtype by MXNet's type inference (None: undecided)
    input_dtypes: Mapping[str, str | None]
    # the converted symbol's list_arguments() and list_auxiliary_states(), in order
    arguments: tuple[str, ...] = ()
    auxiliary_states: tuple[str, ...] = ()
    # the converted graph as an mx.sym.Symbol (built once; MXNet symbols are immutable)
    symbol: Any = None
    # (BatchNorm name, producer name) of each BatchNorm folded away before conversion
    folded_batchnorms: tuple[tuple[str, str], ...] = ()
    # (BatchNorm name, why it was kept) of each BatchNorm folding left in the graph
    kept_batchnorms: tuple[tuple[str, str], ...] = ()
    # the model as given, before folding: {'op_nodes', 'params', 'param_bytes', 'by_dtype'} (None when
    # no params were given; ``original`` is the graph converted, folded where folding ran)
    input_figures: Mapping[str, Any] | None = None
    # node name -> why it computes in float32 whatever its op: what the cast pass was given
    # (ConvertOptions.fp32_nodes, with the conversion's own additions)
    fp32_nodes: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    # (Convolution name, its readers behind an identity amp_cast) where MXNet's oneDNN
    # fusion would hand other readers the fused output (passes/fusion_barriers.py)
    fusion_barriers: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # what tune= timed and chose (mxnet_amp.tune.timing.TuneRecord); None without tune
    tuning: Any = None

    @property
    def param_dtypes(self) -> dict[str, str]:
        """Each param's stored dtype (:attr:`ParamRecord.stored`)."""
        return {k: r.stored for k, r in self.params.items()}

    @property
    def input_param_dtypes(self) -> dict[str, str]:
        """Each param's dtype as given (:attr:`ParamRecord.given`)."""
        return {k: r.given for k, r in self.params.items()}

    def _bound(self, name: str) -> str | None:
        record = self.params.get(name)
        return record.bound if record is not None else self.input_dtypes.get(name)

    @property
    def arg_dtypes(self) -> dict[str, str | None]:
        """Each argument of the converted symbol (model inputs and weights) -> its dtype by
        type inference (None: undecided, it stays as stored)."""
        return {k: self._bound(k) for k in self.arguments}

    @property
    def aux_dtypes(self) -> dict[str, str | None]:
        """Each auxiliary state of the converted symbol -> its dtype by type inference."""
        return {k: self._bound(k) for k in self.auxiliary_states}

    @property
    def variable_dtypes(self) -> dict[str, str | None]:
        """:attr:`arg_dtypes` and :attr:`aux_dtypes` in one mapping."""
        return {**self.arg_dtypes, **self.aux_dtypes}

    def with_given(self, given: Mapping[str, str]) -> Conversion:
        """This conversion with the params' dtypes as given replaced by ``given`` (a model
        whose stored params are the converted ones: its report's "before")."""
        params = {k: replace(r, given=given.get(k, r.given)) for k, r in self.params.items()}
        return replace(self, params=MappingProxyType(params))

    def recast(self, arg_params: Mapping, aux_params: Mapping, *, current: Mapping[str, str] | None = None,
               sequential: bool = False, in_place: bool = False,
               each: Callable[[str, Any, Any], None] | None = None) -> tuple[dict, dict]:
        """The arg and aux params cast to their :attr:`ParamRecord.bound` dtypes (arrays
        already right, and params the record lacks, kept): every caller's one way to cast
        params to a conversion's dtypes (:func:`mxnet_amp.mx.params.recast_params`, which
        says what ``current``, ``sequential``, ``in_place`` and ``each`` do)."""
        return (recast_params(arg_params, self.arg_dtypes, current, sequential, in_place=in_place, each=each),
                recast_params(aux_params, self.aux_dtypes, current, sequential, in_place=in_place, each=each))


def input_figures(graph: Graph, arg_params: Mapping, aux_params: Mapping) -> dict:
    """Op nodes, param count and bytes (in total and per dtype) of a model as given: the
    report's "before" when folding changed the graph."""
    by_dtype: dict[str, dict[str, int]] = {}
    for v in [*arg_params.values(), *aux_params.values()]:
        slot = by_dtype.setdefault(array_dtype(v), {"count": 0, "bytes": 0})
        slot["count"] += 1
        slot["bytes"] += array_nbytes(v)
    return {"op_nodes": sum(1 for n in graph.nodes if not n.is_variable),
            "params": sum(s["count"] for s in by_dtype.values()),
            "param_bytes": sum(s["bytes"] for s in by_dtype.values()), "by_dtype": by_dtype}


def stored_why(given: str, stored: str) -> str:
    """:attr:`ParamRecord.why` of a param given in ``given`` and stored in ``stored``."""
    if given == stored:
        return "stored as given"
    return f"every reader computes in {stored}: stored so (cast_optional_params)"
