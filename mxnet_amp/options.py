"""What a conversion is asked to do, built once where a public converter is called.

The public converters keep the ``mx.contrib.amp`` keywords (``target_dtype``,
``target_dtype_ops``, ``fp32_ops``, ``conditional_fp32_ops``, ``excluded_sym_names``,
``cast_optional_params``, ...). Each calls :func:`make_options` once and hands the
:class:`ConvertOptions` it returns down; nothing below the public edge takes the keywords.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence

from .errors import ArgumentError, GraphError
from .mx.arguments import check_bool, check_names
from .policy import OpPolicy, Reason, slow_kernel_nodes
from .policy_load import load_policy
from .tune.tuning import Tuning, make_tuning

if TYPE_CHECKING:
    from .ir.graph import Graph

__all__ = ["ConvertOptions", "OpLists", "make_options", "EXCLUDED_REASON"]

# the reason of a node the caller keeps in float32 by name (what marks it the user's)
EXCLUDED_REASON = Reason("excluded by name (excluded_sym_names / --exclude)", "user exclusion")


@dataclass(frozen=True)
class ConvertOptions:
    """The op policy and the per-call choices of one conversion (immutable).

    Attributes
    ----------
    policy : OpPolicy
        The op categories, user overrides applied (:func:`mxnet_amp.load_policy`).
    fp32_nodes : mapping of str to str
        Node names that compute in float32 whatever their op, each with its reason: the
        caller's exclusions (:data:`EXCLUDED_REASON`), the nodes automatic mode keeps, the
        readers of weights float16 cannot hold, the nodes of a ``[[slow_kernel]]`` shape
        (:meth:`with_slow_kernels`, at the start of the conversion) or timed slower in low
        precision (``tune=``), kernels MXNet cannot run in low precision. The one way a node
        is kept float32 by name; the reasons reach the report as they are.
    cast_optional_params : bool
        Store weights whose every consumer runs in low precision in low precision.
    fold_batchnorm : bool
        Fold inference BatchNorms into the op before them first (models with params only;
        on by default: see :func:`mxnet_amp.convert_model`).
    strict_params : bool
        Params the symbol does not read are an error (:class:`~mxnet_amp.errors.ParamError`)
        instead of a warning naming them.
    guard_weight_range : bool
        float16 only: keep the readers of a weight float16 cannot hold (inf, or mostly
        flushed to 0: :mod:`mxnet_amp.passes.weight_range`) in float32; False converts them anyway,
        with a warning naming the weight.
    tuning : Tuning or None
        Time each low precision kernel on this machine first (``tune=``,
        :mod:`mxnet_amp.tune.timing`); None: the lists decide alone.
    timed_nodes : frozenset of str
        The nodes whose kernels ``tune=`` timed (:func:`mxnet_amp.tune.timing.with_timings`): their
        timings replace the ``[[slow_kernel]]`` rule (those timed slower are in
        :attr:`fp32_nodes`, with both times as their reason).
    """

    policy: OpPolicy
    fp32_nodes: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    cast_optional_params: bool = True
    fold_batchnorm: bool = True
    strict_params: bool = False
    guard_weight_range: bool = True
    tuning: Tuning | None = None
    timed_nodes: frozenset[str] = frozenset()

    @property
    def target_dtype(self) -> str:
        """The low precision dtype, ``'float16'`` or ``'bfloat16'``."""
        return self.policy.target_dtype

    @property
    def excluded(self) -> frozenset[str]:
        """The names of :attr:`fp32_nodes` (every node kept float32 by name, for any reason)."""
        return frozenset(self.fp32_nodes)

    def excluding(self, names: Iterable[str]) -> ConvertOptions:
        """These options with ``names`` (instead of :attr:`fp32_nodes`) the caller's
        exclusions."""
        return self.keeping(dict.fromkeys(names, EXCLUDED_REASON))

    def keeping(self, fp32_nodes: Mapping[str, str]) -> ConvertOptions:
        """These options with ``fp32_nodes`` (name -> reason) instead of :attr:`fp32_nodes`."""
        return replace(self, fp32_nodes=MappingProxyType(dict(fp32_nodes)))

    def with_slow_kernels(self, graph: Graph) -> ConvertOptions:
        """These options with the nodes of ``graph`` that meet a ``[[slow_kernel]]`` rule
        (:func:`~mxnet_amp.policy.slow_kernel_nodes`, :attr:`timed_nodes` left to their
        timings) added to :attr:`fp32_nodes`, under the reasons already there."""
        found = slow_kernel_nodes(graph, self.policy, self.timed_nodes)
        return self.keeping({**found, **self.fp32_nodes}) if found else self

    def keeping_only(self, names: Iterable[str]) -> ConvertOptions:
        """These options with only the :attr:`fp32_nodes` among ``names`` (a graph's nodes)."""
        present = set(names)
        return self.keeping({k: why for k, why in self.fp32_nodes.items() if k in present})

    def check_excluded(self, graph: Graph) -> None:
        """:class:`~mxnet_amp.errors.GraphError` naming the excluded names that are no node
        of ``graph`` (a typo would otherwise keep nothing in float32, silently)."""
        missing = sorted(self.excluded - {n.name for n in graph.nodes})
        if missing:
            raise GraphError(f"excluded_sym_names {missing} name no node of the symbol")
        # a variable (weight or input) computes nothing: excluding it would keep nothing in
        # float32, silently; its readers are what the user means
        index = {n.name: i for i, n in enumerate(graph.nodes) if n.is_variable}
        variables = sorted(self.excluded & set(index))
        if variables:
            readers = {name: [f"{n.name} ({n.op})" for n in graph.nodes
                              if any(e.node == index[name] for e in n.inputs)]
                       for name in variables}
            said = "; ".join(f"{name} is read by {', '.join(r) or 'no op'}"
                             for name, r in readers.items())
            raise GraphError(f"excluded_sym_names {variables} name variables (weights or "
                             f"inputs), not op nodes: exclude the ops that read them instead "
                             f"({said})")


@dataclass(frozen=True)
class OpLists:
    """The ``mx.contrib.amp`` keyword block of every public converter, as one value: the op
    lists (each replacing the shipped one as contrib's do, or, with ``overrides='move'``,
    moving only the ops named; ``follow_ops`` adds) and the node names kept float32
    (``excluded_sym_names``; a string is one name). Read by :func:`make_options`."""

    target_dtype_ops: Sequence[str] | None = None
    fp32_ops: Sequence[str] | None = None
    widest_dtype_ops: Sequence[str] | None = None
    conditional_fp32_ops: Sequence[tuple[str, str, Sequence[str]]] | None = None
    follow_ops: Sequence[str] | None = None
    excluded_sym_names: Sequence[str] | None = None
    overrides: str = "replace"


_NO_LISTS = OpLists()


def make_options(target_dtype: str = "float16", lists: OpLists = _NO_LISTS, *,
                 cast_optional_params: bool = True, fold_batchnorm: bool = True,
                 strict_params: bool = False, guard_weight_range: bool = True,
                 tune: object = None) -> ConvertOptions:
    """The :class:`ConvertOptions` of the public converters' keywords (the lists read once).

    Parameters
    ----------
    target_dtype : str
        As in :func:`mxnet_amp.load_policy`.
    lists : OpLists, optional
        The contrib keyword block: the op lists, as in :func:`mxnet_amp.load_policy` (a given
        list replaces the shipped one unless ``overrides='move'``), and
        ``excluded_sym_names``, node names that run in float32 whatever their op (checked
        against the graph when it is converted).
    cast_optional_params, fold_batchnorm, strict_params, guard_weight_range : bool
        As in :func:`mxnet_amp.convert_model`.
    tune : None, bool, str or Tuning
        As in :func:`mxnet_amp.convert_model` (:func:`mxnet_amp.tune.tuning.make_tuning`).

    Returns
    -------
    ConvertOptions

    Raises
    ------
    TargetDtypeError, UnknownOpError, ListError
        As :func:`mxnet_amp.load_policy`.
    ArgumentError
        A flag that is not a bool (``fold_batchnorm='no'`` would fold), or
        ``excluded_sym_names`` that is not a list of names.
    TuneError
        ``tune`` with float16, or a ``tune`` value of another type.
    """
    cast_optional_params, fold_batchnorm, strict_params, guard_weight_range = (
        check_bool(value, name) for name, value in (
            ("cast_optional_params", cast_optional_params), ("fold_batchnorm", fold_batchnorm),
            ("strict_params", strict_params), ("guard_weight_range", guard_weight_range)))
    if not isinstance(lists, OpLists):
        raise ArgumentError(f"lists must be an OpLists, got {type(lists).__name__}")
    excluded = dict.fromkeys(check_names(lists.excluded_sym_names, "excluded_sym_names") or (),
                             EXCLUDED_REASON)
    policy = load_policy(target_dtype, lists.target_dtype_ops, lists.fp32_ops, lists.widest_dtype_ops,
                         lists.conditional_fp32_ops, lists.follow_ops, lists.overrides)
    return ConvertOptions(policy, fp32_nodes=MappingProxyType(excluded),
                          cast_optional_params=cast_optional_params, fold_batchnorm=fold_batchnorm,
                          strict_params=strict_params, guard_weight_range=guard_weight_range,
                          tuning=make_tuning(tune, policy.target_dtype))
