"""Validation-driven automatic mixed precision: convert, measure, keep in float32 what breaks.

:func:`auto_convert_model` converts a model with the shipped op lists and then checks the
result on sample inputs against the float32 model, keeping in float32 the nodes whose low
precision breaks it. The work is driven by one instrumented float32 run:

1. **Reference run** (one model execution). The float32 graph is bound once with every op
   output as a graph output, which gives the reference outputs and, for each tensor, the
   largest magnitude and the share of nonzero values the target dtype would flush to zero.
2. **Range culprits** (no execution). A tensor whose float32 values exceed the target
   dtype's range (65504 for float16), or hold inf/nan, becomes inf wherever the converted
   graph holds it in low precision; one whose values mostly flush to zero loses them. For
   every such tensor the nodes *holding* it in low precision are kept in float32: its
   producer when it computes in low precision, and each consumer that reads it through a
   cast to low precision (a target op). Converting is cheap, so this repeats on the converted graph
   until no flagged tensor is held in low precision anywhere.
3. **Converted check** (one execution). The converted model runs on the same inputs (natively
   where this machine can, else through :mod:`mxnet_amp.emulation`) and is compared with the
   reference: by default each output's error relative to its scale,
   ``max|out - ref| / max|ref| <= tolerance``, and the same top-1 class on every row of a
   classifier-shaped output (:func:`check_outputs`); or ``allclose`` with ``rtol``/``atol``,
   or the caller's ``validate``. A model that converts cleanly is done here: two executions.
4. **Accuracy search**, only when the ranges do not explain a failed check. Over the
   candidate low precision nodes (ordered by how much of their output falls in the
   dtype's subnormal range, then topologically) a binary search finds the shortest prefix
   whose exclusion validates; its last node is a culprit. Repeating on the prefix before
   it finds each of ``k`` culprits in ``ceil(log2 N) + 1`` executions: ``O(k log N)``.
   The search never returns a configuration it has not seen validate, and shrinks what
   validated to a 1-minimal set (:mod:`mxnet_amp.auto.culprits.shrink`: each kept node
   returned alone to low precision fails, measured). In all, ``k`` accuracy culprits among
   ``N`` low precision nodes cost at most ``3 + k * (ceil(log2 N) + 1) + k`` executions
   (+ 2 for the attribution's run and validation before it); ``2 + k + 1`` and the
   attribution's run when its picks are the culprits.

Every model execution is counted in the report (:class:`AutoReport`).
"""
from __future__ import annotations

from .api import auto_convert, auto_convert_block, auto_convert_model, auto_settings
from .measure import check_outputs, default_scale_tolerance, default_tolerances, tensor_range
from .records import (DTYPE_LIMITS, AutoReport, AutoSettings, DtypeLimits, KeptNode, OutputCheck,
                      SearchStep, TensorRange)

__all__ = ["auto_convert_model", "auto_convert_block", "AutoReport", "KeptNode", "SearchStep",
           "TensorRange", "OutputCheck", "DTYPE_LIMITS", "check_outputs",
           "default_scale_tolerance", "default_tolerances", "AutoSettings", "auto_settings",
           "auto_convert", "tensor_range", "DtypeLimits"]
