"""Every node the returned model keeps in float32, and why: one list from one source.

A node is kept float32 by name for one of several reasons, all of them entries of the
conversion's ``fp32_nodes`` (node name -> reason text; :mod:`mxnet_amp.options`): the
automatic mode's search, the caller's exclusions, the weight-range guard
(:mod:`mxnet_amp.passes.weight_range`), the ``[[slow_kernel]]`` rule, tune's timings
(:mod:`mxnet_amp.tune.timing`) and the bfloat16 reshapes oneDNN cannot run
(:mod:`mxnet_amp.passes.onednn_reshapes`). :func:`all_kept` reads that mapping of the
returned model's conversion, so the report's ``kept_fp32``, its summary, its JSON and its
page list every one of them, each with its source (:func:`fp32_source`) and reason.
"""
from __future__ import annotations

from typing import Mapping, Sequence

from ..options import EXCLUDED_REASON
from ..passes.onednn_reshapes import BLOCKED_RESHAPE_REASON
from ..record import Conversion
from ..tune.timing import TUNED_PREFIX
from .records import KeptNode

__all__ = ["all_kept", "fp32_source", "SOURCES"]

# KeptNode.reason of the float32 nodes the conversion keeps by itself, by source
SOURCES = ("user", "weight range", "slow kernel", "tuned", "oneDNN reshape", "conversion")
# what the search's own reasons start with (records.kept_reasons)
_AUTO_PREFIX = "auto: "
# weight_range: "weight <name> is out of float16 range: ..." / "... underflows float16: ..."
_WEIGHT_RANGE = (" is out of float16 range", " underflows float16")


def fp32_source(reason: str) -> str:
    """The source of one ``fp32_nodes`` reason text (one of :data:`SOURCES`;
    ``'conversion'`` for a reason none of the known producers writes)."""
    if reason == EXCLUDED_REASON:
        return "user"
    if reason.startswith("weight ") and any(w in reason for w in _WEIGHT_RANGE):
        return "weight range"
    if reason.startswith("slow kernel: "):
        return "slow kernel"
    if reason.startswith(TUNED_PREFIX):
        return "tuned"
    if reason == BLOCKED_RESHAPE_REASON:
        return "oneDNN reshape"
    return "conversion"


def all_kept(searched: Sequence[KeptNode], conversion: Conversion | None) -> tuple[KeptNode, ...]:
    """Every node ``conversion`` keeps float32 by name, in graph order: the search's own
    :class:`KeptNode` where it kept the node (``searched``), else one whose ``reason`` is the
    entry's source and whose ``detail`` is its reason text. Nodes of loop/cond bodies come
    last, by name. Without a conversion, ``searched`` as it is."""
    if conversion is None:
        return tuple(searched)
    fp32: Mapping[str, str] = conversion.fp32_nodes
    by_name = {k.name: k for k in searched}
    ops = {n.name: n.op for n in conversion.original.nodes if not n.is_variable}
    order = [n for n in ops if n in fp32] + sorted(n for n in fp32 if n not in ops)
    kept = []
    for name in order:
        reason = fp32[name]
        if name in by_name:
            kept.append(by_name.pop(name))
        elif not reason.startswith(_AUTO_PREFIX):
            source = fp32_source(reason)
            # the reason without the source's own prefix, which the report shows beside it
            for prefix in ("slow kernel: ", TUNED_PREFIX):
                if reason.startswith(prefix) and source in prefix:
                    reason = reason[len(prefix):]
            kept.append(KeptNode(name, ops.get(name, "?"), source, detail=reason))
    # a search's node the conversion does not name (none expected) is not dropped
    return tuple(kept) + tuple(by_name.values())
