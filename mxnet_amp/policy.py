"""Op categories as data: :class:`OpPolicy` says which category a node runs under and why.

A policy is read from ``lists/<dtype>.toml`` with the user's overrides applied by
:func:`mxnet_amp.policy_load.load_policy`; here are the records it builds and the
decisions (:meth:`OpPolicy.decide`, :meth:`OpPolicy.explain`) the cast pass asks of it.
The lists' ``[[slow_kernel]]`` rule names nodes, not ops: :func:`slow_kernel_nodes` maps a
graph's nodes that meet it to their reason, which the conversion adds to
:attr:`~mxnet_amp.options.ConvertOptions.fp32_nodes` (the one way a node is kept float32 by
name).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Iterable, Mapping, NamedTuple

from .ir.dtypes import dtype_name
from .warn import warn_user

if TYPE_CHECKING:
    from .ir.graph import Graph

__all__ = ["Category", "Decision", "OpPolicy", "SlowKernel", "SUPPORTED_TARGET_DTYPES",
           "check_target_dtype", "slow_kernel_nodes", "warn_unlisted", "Reason", "REASON_KINDS",
           "reason_kind"]

SUPPORTED_TARGET_DTYPES = ("float16", "bfloat16")


class Category(str, enum.Enum):
    """How the pass treats an op."""

    TARGET = "target"        # computes in the target dtype
    FP32 = "fp32"            # computes in float32
    WIDEST = "widest"        # float inputs unified to the widest among them (amp_multicast)
    FOLLOW = "follow"        # no casts: runs in the dtype its inputs have
    CONDITIONAL = "conditional"  # fp32 for listed attribute values, else follow


# what a node kept float32 by name was kept for: the kinds a report groups its reasons by
REASON_KINDS = ("user exclusion", "search", "weight range", "slow kernel", "tune",
                "onednn reshape")


class Reason(str):
    """Why a node computes in float32 whatever its op (a value of
    :attr:`~mxnet_amp.options.ConvertOptions.fp32_nodes`): the text itself (what reports
    print, unchanged) and its :attr:`kind`, one of :data:`REASON_KINDS`, which readers
    group by instead of matching the words."""

    kind: str

    def __new__(cls, text: str, kind: str) -> Reason:
        if kind not in REASON_KINDS:
            raise ValueError(f"reason kind must be one of {REASON_KINDS}, got {kind!r}")
        reason = super().__new__(cls, text)
        reason.kind = kind
        return reason

    def __getnewargs__(self) -> tuple[str, str]:   # type: ignore[override]
        return str(self), self.kind

    def __repr__(self) -> str:
        return f"Reason({str(self)!r}, {self.kind!r})"


def reason_kind(why: str) -> str | None:
    """The :attr:`Reason.kind` of a reason (None for plain text: a reason given by words
    alone)."""
    return why.kind if isinstance(why, Reason) else None


class Decision(NamedTuple):
    """The category one node runs under, and why (words a report can show as they are)."""

    category: Category
    reason: str


def check_target_dtype(target_dtype: object) -> str:
    """Normalise and check ``target_dtype``: ``'float16'`` (or ``'fp16'``, ``'half'``) or
    ``'bfloat16'`` (or ``'bf16'``), any case; returns the full name.

    Parameters
    ----------
    target_dtype : str or numpy dtype

    Returns
    -------
    str
        ``'float16'`` or ``'bfloat16'``.

    Raises
    ------
    TargetDtypeError
        Any other dtype.
    """
    try:
        name = dtype_name(target_dtype)
    except ValueError:
        name = str(target_dtype)
    if name not in SUPPORTED_TARGET_DTYPES:
        from .errors import TargetDtypeError
        raise TargetDtypeError(f"target_dtype must be 'float16' (fp16, half) or 'bfloat16' (bf16), "
                               f"got {target_dtype!r}")
    return name


@dataclass(frozen=True)
class SlowKernel:
    """Nodes of a target op that run in float32 because MXNet's low precision kernel for
    their shape is far slower than its float32 one (a list's ``[[slow_kernel]]`` table).

    The one shape kind so far is a depthwise convolution (``num_group == num_filter > 1``:
    one output channel per group) whose channel count is not a multiple of
    ``channels_not_multiple_of``.
    """

    op: str
    channels_not_multiple_of: int
    reason: str

    def matches(self, attrs: Mapping[str, str]) -> bool:
        """Whether a node of :attr:`op` with ``attrs`` has the slow shape."""
        try:
            groups, filters = int(attrs.get("num_group", "1")), int(attrs["num_filter"])
        except (KeyError, ValueError):
            return False
        return groups > 1 and groups == filters and groups % self.channels_not_multiple_of != 0

    def describe(self) -> str:
        """The shape in words, for reports."""
        return (f"depthwise {self.op} over a channel count not a multiple of "
                f"{self.channels_not_multiple_of}")

    def why(self) -> str:
        """The reason a node kept float32 by this rule gives (the report shows it as is)."""
        return f"slow kernel: {self.describe()} ({self.reason})"


@dataclass(frozen=True, kw_only=True)   # built by keyword: many fields, several optional
class OpPolicy:
    """The op categories for one target dtype, after user overrides."""

    target_dtype: str
    target: frozenset[str]
    fp32: frozenset[str]
    widest: frozenset[str]
    follow: frozenset[str]
    conditional: tuple[tuple[str, str, tuple[str, ...]], ...]
    patterns: tuple[tuple[str, Category], ...] = ()
    index_inputs: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    reasons: Mapping[str, str] = field(default_factory=dict)
    # widest ops that may read a low precision cast made for another consumer instead of
    # widening: joins that copy values, never arithmetic (the lists' [reuse_casts] table)
    reuse_casts: frozenset[str] = frozenset()
    # data the conversion does not read, for contrib's list functions: the output layers
    # contrib's training scales ([loss_outputs]) and, per op, the inputs that stay float32
    # when it runs in low precision ([fp32_params]; None where the file has no such table)
    loss_outputs: tuple[str, ...] = ()
    fp32_params: Mapping[str, tuple[str, ...]] | None = None
    # target op nodes whose shape MXNet's low precision kernel runs far slower
    # ([[slow_kernel]]): a rule on nodes, not ops, so decide() does not read it; the
    # conversion keeps the nodes that meet it float32 by name (slow_kernel_nodes)
    slow_kernels: tuple[SlowKernel, ...] = ()

    def category_of(self, op: str) -> Category | None:
        """The category ``op`` is listed in (or matched by a pattern); None when unlisted."""
        for category, ops in ((Category.TARGET, self.target), (Category.FP32, self.fp32),
                              (Category.WIDEST, self.widest), (Category.FOLLOW, self.follow)):
            if op in ops:
                return category
        if any(c[0] == op for c in self.conditional):
            return Category.CONDITIONAL
        for prefix, cat in self.patterns:
            if op.startswith(prefix):
                return cat
        return None

    @cached_property
    def _categories(self) -> dict[str, Category | None]:
        # filled as ops are met; a frozen policy never changes, so neither do answers
        return {}

    def decide(self, op: str, attrs: Mapping[str, str]) -> Category | None:
        """The category a node with ``op`` and ``attrs`` runs under (conditions resolved),
        unless it is kept float32 by name (``fp32_nodes``: the ``[[slow_kernel]]`` rule too)."""
        table = self._categories
        if op in table:
            cat = table[op]
        else:
            cat = table[op] = self.category_of(op)
        if cat is Category.CONDITIONAL:
            for cop, attr, values in self.conditional:
                if cop == op and attrs.get(attr) in values:
                    return Category.FP32
            return Category.FOLLOW
        return cat

    def slow_kernel(self, op: str, attrs: Mapping[str, str]) -> SlowKernel | None:
        """The ``[[slow_kernel]]`` rule a node of ``op`` with ``attrs`` meets, if any (a
        rule names target ops only)."""
        return next((k for k in self.slow_kernels if k.op == op and k.matches(attrs)), None)

    @cached_property
    def _explained(self) -> dict[str, Decision | None]:
        # explain()'s answer for each op whose answer does not depend on its attributes
        return {}

    def explain(self, op: str, attrs: Mapping[str, str]) -> Decision | None:
        """:meth:`decide`'s answer with the list rule behind it; None when ``op`` is unlisted."""
        if op in self._explained:
            return self._explained[op]
        decision = self._explain(op, attrs)
        if self._categories.get(op) is not Category.CONDITIONAL:
            self._explained[op] = decision
        return decision

    def _explain(self, op: str, attrs: Mapping[str, str]) -> Decision | None:
        cat = self.decide(op, attrs)
        if cat is None:
            return None
        if op in self._listed(cat):
            why = self.reasons.get(op, "")
            return Decision(cat, f"{cat.value} list: {op}" + (f" ({why})" if why else ""))
        if self.category_of(op) is Category.CONDITIONAL:
            for cop, attr, values in self.conditional:
                if cop == op and attrs.get(attr) in values:
                    return Decision(cat, f"conditional fp32: {op} with {attr}={attrs.get(attr)}")
            return Decision(cat, f"conditional op: {op} follows its inputs (no fp32 condition holds)")
        return Decision(cat, f"{cat.value} pattern matches {op}")

    def _listed(self, cat: Category) -> frozenset[str]:
        return {Category.TARGET: self.target, Category.FP32: self.fp32,
                Category.WIDEST: self.widest, Category.FOLLOW: self.follow}.get(cat, frozenset())


def slow_kernel_nodes(graph: Graph, policy: OpPolicy,
                      timed: Iterable[str] = ()) -> dict[str, str]:
    """The nodes of ``graph`` (loop/cond bodies included) that meet a ``[[slow_kernel]]`` rule
    of ``policy``, each with the rule's reason: what the conversion keeps float32 by name.

    Parameters
    ----------
    graph : Graph
        The graph the conversion converts (BatchNorms already folded).
    policy : OpPolicy
        Its ``slow_kernels`` are the rules; a node counts only if its op is a target op.
    timed : iterable of str
        Nodes whose kernels ``tune=`` timed: their timings decide instead (:mod:`mxnet_amp.tune.timing`).

    Returns
    -------
    dict of str to str
        Node name -> :meth:`SlowKernel.why`, in graph order.
    """
    skip = set(timed)
    found: dict[str, str] = {}
    if not policy.slow_kernels:
        return found
    for node in graph.walk():
        if node.is_variable or node.subgraphs or node.name in skip:
            continue
        rule = policy.slow_kernel(node.op, node.attrs)
        if rule is not None and policy.category_of(node.op) is Category.TARGET:
            found.setdefault(node.name, Reason(rule.why(), "slow kernel"))
    return found


def warn_unlisted(ops: Iterable[str], target_dtype: str) -> None:
    """Warn once about ops that no list classifies (they are kept in float32)."""
    ops = sorted(set(ops))
    if ops:
        warn_user(f"op(s) {', '.join(ops)} are in no {target_dtype} list; they run in float32. "
                  "Name them in follow_ops, or in target_dtype_ops / fp32_ops / widest_dtype_ops "
                  "with overrides='move' (a list alone replaces the shipped one), to choose.")
