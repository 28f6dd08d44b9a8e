"""The automatic mode's records: dtype limits, tensor ranges, kept nodes, search steps,
output checks, settings and the :class:`AutoReport`."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Callable, Sequence

import numpy as np

from ..record import Conversion


# how the automatic mode looks for accuracy culprits (AutoSettings.search)
SEARCHES = ("attribution", "bisection")


@dataclass(frozen=True)
class DtypeLimits:
    """The range of a low precision dtype as rounding from float32 sees it."""

    max: float          # largest finite value; beyond it values overflow to inf
    zero_below: float   # |x| below it rounds to zero
    min_normal: float   # below it (and from zero_below) values are subnormal: fewer digits


DTYPE_LIMITS = {
    # 2**-25 itself ties to even, i.e. to zero: the first value kept is the next float32
    "float16": DtypeLimits(65504.0, float(np.nextafter(np.float32(2.0 ** -25), np.float32(1))),
                           2.0 ** -14),
    # MXNet's cast (as AVX512-BF16's) flushes what would be bfloat16 subnormals to zero
    "bfloat16": DtypeLimits((2 - 2 ** -7) * 2.0 ** 127, 2.0 ** -126, 2.0 ** -126),
}


@dataclass(frozen=True)
class TensorRange:
    """What one float32 tensor holds, seen from a low precision dtype."""

    max_abs: float      # largest |value| (inf/nan when the float32 run had them)
    flushed: float      # fraction of its nonzero values the dtype rounds to zero
    subnormal: float    # fraction of its nonzero values that become subnormal
    # largest finite |value| (None: as max_abs): what the dtype's range is compared with
    finite_max: float | None = None


@dataclass(frozen=True)
class KeptNode:
    """A node the auto mode kept in float32, and why.

    ``reason`` is ``'overflow'`` (``value``: the largest |value| of ``tensor`` in the float32
    run), ``'underflow'`` (``value``: the fraction of its nonzero values flushed to zero),
    ``'accuracy'`` (``value``: its measured contribution to the outputs' relative error when
    the attribution found it, or how much excluding it lowered the error in units of the
    tolerance when the bisection did), ``'metric'`` (the same, found under a user metric),
    ``'budget'`` (a candidate the accuracy
    search had not cleared when ``max_executions`` ran out; ``value`` None) or ``'user'``
    (named in excluded_sym_names); or kept by the conversion itself
    (:mod:`mxnet_amp.auto.kept`, ``detail``: its reason): ``'weight range'``,
    ``'slow kernel'``, ``'tuned'``, ``'oneDNN reshape'``.
    """

    name: str
    op: str
    reason: str
    value: float | None = None
    tensor: str | None = None   # the offending tensor (a node output) for range reasons
    # the reason in words, with units and what was compared
    # ("relative error 0.12 at outputs > tolerance 0.01", "overflow: max |x| 7.1e4 > 65504")
    detail: str | None = None

    def to_dict(self) -> dict:
        """A JSON-ready dict of the fields."""
        return asdict(self)


@dataclass(frozen=True)
class NodeError:
    """One low precision node's error, measured by the attribution run (teacher forcing).

    ``local_error``: the L2 norm of ``y - y_ref`` over its output when it computes in low
    precision from the exact float32 inputs; ``relative_local_error``: that over
    ``max|y_ref|``; ``contribution``: its measured share of the outputs' relative error
    (``max|out - ref| / max|ref|``, the default check's unit): that very error carried
    through the float32 graph to the outputs (by the graph's gradients; for the nodes with
    the largest errors, by running the graph with the error added,
    :func:`~mxnet_amp.auto.propagation.pushed`), all nodes' scaled together to the failed
    check's relative error.
    """

    name: str
    op: str
    local_error: float
    relative_local_error: float
    contribution: float

    def to_dict(self) -> dict:
        """A JSON-ready dict of the fields."""
        return asdict(self)


@dataclass(frozen=True)
class SearchStep:
    """One model execution of the auto mode."""

    # 'reference', 'reference data', 'check', 'attribution', 'validate', 'all-fp32', 'bisect',
    # 'shrink'
    kind: str
    excluded: int              # nodes kept in float32 in the executed configuration
    passed: bool | None        # None for the reference run
    tolerance_ratio: float | None
    max_abs_error: float | None
    relative_error: float | None = None   # max|out - ref| / max|ref| (OutputCheck)
    top1_flips: int | None = None

    def to_dict(self) -> dict:
        """A JSON-ready dict of the fields."""
        return asdict(self)


@dataclass(frozen=True)
class AutoReport:
    """What :func:`auto_convert_model` decided and measured.

    Attributes
    ----------
    target_dtype : str
    execution : {'native', 'emulated'}
        How the converted model ran for the checks: on the hardware in ``target_dtype``, or
        through :mod:`mxnet_amp.emulation` in float32 with low precision rounding.
    context : str
        The MXNet context the model ran on.
    kept_fp32 : tuple of KeptNode
        Every node kept float32 by name in the returned model (what ``excluded_sym_names``
        gets), in graph order, with its reason: the search's, the caller's, and those the
        conversion keeps itself (weight range, slow kernels, tune; :mod:`mxnet_amp.auto.kept`). Nodes that *follow* an excluded node's float32 output (relu
        after a float32 FullyConnected, say) compute in float32 too without being listed.
    executions : int
        Model executions (forward passes over the sample inputs), the reference included;
        with ``eval_data``, a pass over all of it counts one.
    validated : bool
        Whether the returned configuration passed the check.
    tolerance_ratio : float
        For the returned configuration, the error in units of the tolerance (``<= 1``
        passes the error bound; inf where an output is non-finite and the reference is
        not): ``max|out - ref| / max|ref|`` over ``tolerance`` for the ``'scale'`` criterion,
        ``max |out - ref| / (atol + rtol * |ref|)`` for ``'allclose'``.
    max_abs_error : float
        ``max |out - ref|`` over all outputs (finite values only).
    rtol, atol : float or None
        The allclose tolerances, when the check is ``'allclose'``; else None.
    op_nodes : int
        Op nodes in the float32 graph converted (after BatchNorm folding, when it ran).
    low_precision_nodes : int
        Op nodes computing in ``target_dtype`` in the returned model.
    criterion : {'scale', 'allclose', 'validate', 'metric'}
        What decided ``validated`` (:class:`OutputCheck`; ``'validate'``: the caller's
        function; ``'metric'``: the caller's metric, figures in ``metric``).
    tolerance : float or None
        The bound on ``max|out - ref| / max|ref|`` of the ``'scale'`` criterion.
    relative_error : float
        ``max|out - ref| / max|ref|`` of the returned model, the largest over the outputs
        (measured whatever the criterion).
    top1_flips, top1_rows : int
        Rows of ``(batch, classes)`` outputs whose top-1 class the returned model changed
        (near-ties aside, see :func:`check_outputs`), out of ``top1_rows``.
    steps : tuple of SearchStep
        One entry per execution, in order.
    notes : tuple of str
        Anything the caller should know (emulation used, search budget ran out...).
    reference_finite : bool
        False when the float32 reference outputs hold inf or nan on the sample inputs: the
        check then compared only the finite part, or nothing.
    attribution : tuple of NodeError
        When the attribution run happened (a check failed with no range culprit left), the
        low precision nodes by measured contribution at the outputs, largest first (at
        most 200).
    samples, batches : int or None
        With ``eval_data``: the samples and batches each configuration was judged on (None
        without: one batch of sample inputs).
    attribution_samples : int or None
        With ``eval_data``: how many of its first samples the instrumented reference (the
        ranges) and the attribution ran on (None: on the caller's ``sample_inputs``).
    workers : int
        The worker processes (or Dask workers) the passes over ``eval_data`` ran on.
    pass_seconds : tuple of float
        With ``eval_data``: the wall time of each pass over it, the float32 reference first.
    sample_evaluations : int or None
        With ``eval_data``: the samples run through a model over every pass (the float32
        reference's included): ``(passes) x samples`` (None without eval_data).
    minimality : str or None
        How the accuracy search's kept set was shown 1-minimal: each kept node returned
        alone to low precision, measured to fail (:mod:`mxnet_amp.auto.culprits.shrink`).
    """

    target_dtype: str
    execution: str
    context: str
    kept_fp32: tuple[KeptNode, ...]
    executions: int
    validated: bool
    tolerance_ratio: float
    max_abs_error: float
    rtol: float | None
    atol: float | None
    op_nodes: int
    low_precision_nodes: int
    criterion: str = "scale"
    tolerance: float | None = None
    relative_error: float = math.nan
    top1_flips: int = 0
    top1_rows: int = 0
    steps: tuple[SearchStep, ...] = ()
    notes: tuple[str, ...] = ()
    reference_finite: bool = True
    attribution: tuple[NodeError, ...] = ()
    # under a user metric: its figures for the returned model (name, reference, value, drop,
    # max_drop, criterion 'absolute'|'relative', passed)
    metric: dict | None = None
    # with eval_data: samples and batches judged per configuration, the batches the
    # reference ranges and the attribution ran on, the worker processes (or Dask workers)
    samples: int | None = None
    batches: int | None = None
    attribution_samples: int | None = None
    workers: int = 1
    # with eval_data: the wall seconds of each pass over it (the float32 reference first)
    pass_seconds: tuple[float, ...] = ()
    # how the accuracy nodes kept were shown 1-minimal ("1-minimal: each of the 3 kept nodes
    # fails alone (9 executions)"); None where no accuracy search ran
    minimality: str | None = None
    # with eval_data: samples run through a model over all passes (the reference's included)
    sample_evaluations: int | None = None
    # the Conversion record of the returned model (what the pass decided, node by node)
    conversion: Conversion | None = field(default=None, repr=False, compare=False)

    @property
    def excluded_sym_names(self) -> list[str]:
        """Names of every node kept in float32 (pass them to ``convert_model``)."""
        return [k.name for k in self.kept_fp32]

    def by_reason(self, reason: str) -> list[KeptNode]:
        """The kept nodes with ``reason``."""
        return [k for k in self.kept_fp32 if k.reason == reason]

    def to_dict(self) -> dict:
        """A JSON-ready dict (plain types only), nested records included."""
        d = asdict(replace(self, conversion=None))
        del d["conversion"]
        d["kept_fp32"] = [k.to_dict() for k in self.kept_fp32]
        d["steps"] = [s.to_dict() for s in self.steps]
        d["notes"] = list(self.notes)
        d["attribution"] = [a.to_dict() for a in self.attribution]
        return d

    def criterion_text(self) -> str:
        """The check and how the returned model measured against it, in words."""
        flips = (f", top-1 changed on {self.top1_flips} of {self.top1_rows} rows"
                 if self.top1_rows else "")
        scale = f"max|out-ref|/max|ref| {self.relative_error:.3g}"
        if self.criterion == "scale":
            return f"{scale} (tolerance {self.tolerance:g}){flips}"
        if self.criterion == "allclose":
            return (f"allclose(rtol={self.rtol:g}, atol={self.atol:g}): error "
                    f"{self.max_abs_error:.3g}, {self.tolerance_ratio:.3g} x tolerance; {scale}{flips}")
        if self.criterion == "metric" and self.metric:
            m = self.metric
            return (f"{m['name']} {m['value']:.4g} vs float32 {m['reference']:.4g}: drop "
                    f"{m['drop']:.3g} (allowed {m['max_drop']:g}, {m['criterion']}); {scale}{flips}")
        return f"validate(); {scale}{flips}"

    def summary(self) -> str:
        """A few human readable lines."""
        lines = [f"auto {self.target_dtype} ({self.execution}, {self.context}): "
                 f"{self.low_precision_nodes}/{self.op_nodes} op nodes in {self.target_dtype}, "
                 f"{len(self.kept_fp32)} kept in float32{kept_groups(self.kept_fp32)}, "
                 f"{self.executions} executions, "
                 f"{'validated' if self.validated else 'NOT validated'} "
                 f"({self.criterion_text()})"]
        if self.samples is not None:
            lines.append(f"  judged on {self.samples} samples ({self.batches} batches, "
                         f"{self.workers} worker{'s' if self.workers != 1 else ''}) per run; "
                         "ranges and attribution on " + (
                             f"its first {self.attribution_samples} samples"
                             if self.attribution_samples else "the sample inputs")
                         + (f"; {self.sample_evaluations} sample evaluations in all"
                            if self.sample_evaluations is not None else ""))
        for k in self.kept_fp32:
            lines.append(f"  {k.name} ({k.op}): {k.reason}: {kept_text(k)}")
        lines.extend(f"  note: {n}" for n in self.notes)
        return "\n".join(lines)


@dataclass(frozen=True)
class AutoSettings:
    """How the automatic mode judges a converted model and how far it searches.

    Built by :func:`auto_settings` (values checked, defaults filled in); the fields are the
    keywords of :func:`auto_convert_model` of the same names.
    """

    tolerance: float
    rtol: float | None = None
    atol: float | None = None
    validate: Callable[[list, list], bool] | None = None
    underflow_fraction: float = 0.1
    max_executions: int | None = None
    search: str = "attribution"

    @property
    def error_bound(self) -> float:
        """The bound a relative error is read against: ``rtol`` under allclose, else
        ``tolerance``."""
        return self.tolerance if self.rtol is None else self.rtol


@dataclass(frozen=True)
class OutputCheck:
    """Converted outputs against the float32 reference (:func:`check_outputs`).

    ``passed`` is the criterion's verdict: ``'scale'`` (the default) passes when every
    output's ``max|out - ref| / max|ref|`` is at most ``tolerance`` and no classifier-shaped
    output changes a top-1 prediction; ``'allclose'`` when ``|out - ref| <= atol + rtol |ref|``
    everywhere. Outputs non-finite where the reference is finite fail both; elements where
    the reference itself is inf or nan are not judged.
    """

    criterion: str          # 'scale' or 'allclose'
    passed: bool
    tolerance_ratio: float  # the error in units of the tolerance (<= 1 passes)
    max_abs_error: float    # max finite |out - ref| over all outputs
    relative_error: float   # max over outputs of max|out - ref| / max|ref|
    top1_flips: int         # rows of (batch, classes) outputs whose argmax changed, ties aside
    top1_rows: int          # rows of (batch, classes) outputs checked

    def to_dict(self) -> dict:
        """A JSON-ready dict of the fields."""
        return asdict(self)


def kept_reasons(kept: Sequence[KeptNode]) -> dict[str, str]:
    """Each node the search kept float32 -> its reason in the returned model's conversion
    (what a report shows); the caller's own exclusions keep theirs."""
    return {k.name: f"auto: {k.reason}: {kept_text(k)}" for k in kept if k.reason != "user"}


def kept_text(k: KeptNode) -> str:
    """Why ``k`` was kept in float32, in words with units (its ``detail`` when set)."""
    if k.detail:
        return k.detail
    on = f" of {k.tensor}" if k.tensor else ""
    if k.reason == "overflow" and k.value is not None:
        return f"max |x|{on} {k.value:.3g} beyond the dtype's range"
    if k.reason == "underflow" and k.value is not None:
        return f"{k.value:.0%} of the nonzero values{on} flush to zero"
    if k.reason == "user":
        return "named in excluded_sym_names"
    if k.reason == "budget":
        return "not cleared when max_executions ran out"
    return "" if k.value is None else f"{k.value:.3g}"


def kept_groups(kept: Sequence[KeptNode], shown: int = 3) -> str:
    """``' (accuracy: fc3; weight range: fc_big, fc_huge)'``: the kept nodes' names by
    reason, in order of first appearance, at most ``shown`` per reason ('' for none)."""
    groups: dict[str, list[str]] = {}
    for k in kept:
        groups.setdefault(k.reason, []).append(k.name)
    return "".join(["" if not groups else " (", "; ".join(
        f"{reason}: {', '.join(names[:shown])}" + (f" and {len(names) - shown} more"
                                                   if len(names) > shown else "")
        for reason, names in groups.items()), "" if not groups else ")"])
