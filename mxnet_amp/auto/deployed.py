"""Validate what will run: how the automatic mode's checks run a converted model so that
their figure is the written model's.

MXNet binds a model (``Module``, ``simple_bind``, the C predict API,
``hybridize(backend='MKLDNN')``) through its oneDNN subgraph backend, which fuses each
Convolution with the BatchNorm, sum and activation reading it into one kernel in the
convolution's dtype: a BatchNorm left unfolded is folded *in bfloat16* there. An op by op
run (a ``CachedOp``, as ``SymbolBlock`` without a backend runs) does not fuse: measured on
resnet50_v1 converted to bfloat16 with ``fold_batchnorm=False``, 0.0045 op by op where the
written model gives 0.062 through ``Module``. So where the hardware runs the dtype, the
checks bind the converted model as ``Module`` does (:func:`forward_bound`; over
``eval_data=``, each :class:`~mxnet_amp.auto.workers.ModelBlob` marked ``fused`` keeps one
executor from :func:`bind_fused` per batch shape, wherever it runs); where they
emulate it, the BatchNorms such a deployment would fuse into a low precision convolution
are named (:func:`fusable_batchnorms`) and the report says that the check did not model
that fusion.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from ..files.interrupts import interruptible
from ..ir.dtypes import LOW_PRECISION
from ..ir.graph import Graph

if TYPE_CHECKING:
    from mxnet import Context
    from mxnet.symbol import Symbol

    from ..record import Conversion

# the ops oneDNN's convolution fusion folds into a convolution it reads (BatchNorm first)
_FUSED_NORMS = frozenset({"BatchNorm", "_contrib_SyncBatchNorm"})
_FUSED_CONVS = frozenset({"Convolution"})


def binds_fused(target_dtype: str, ctx: Context, execution: str) -> bool:
    """Whether the written model runs through MXNet's oneDNN fusions where the checks run
    it natively: bfloat16 on a CPU, the subgraph backend on (MXNet reads
    ``MXNET_SUBGRAPH_BACKEND`` at each bind; ``NONE`` turns it off)."""
    backend = os.environ.get("MXNET_SUBGRAPH_BACKEND", "MKLDNN").upper()
    return (execution == "native" and target_dtype == "bfloat16" and ctx.device_type == "cpu"
            and backend not in ("NONE", ""))


def bind_fused(sym: Symbol, values: Mapping, ctx: Context) -> Any:
    """``sym`` bound through MXNet's graph executor as ``Module`` and ``simple_bind`` bind it
    (the subgraph backend's fusions applied), for inference; ``values``: every argument and
    auxiliary state by name. The executor reads its inputs from those arrays, so it runs
    again on new data given to ``forward`` (the fused kernels fold their weights once)."""
    args = {n: values[n] for n in sym.list_arguments()}
    auxs = {n: values[n] for n in sym.list_auxiliary_states()}
    return sym.bind(ctx, args, aux_states=auxs, grad_req="null")


def float32_outputs(outs: Sequence) -> list[np.ndarray]:
    """MXNet outputs as float32 numpy arrays."""
    # waiting for a run (seconds on a large model or batch) is one C call: on a helper
    # thread, so that Ctrl-C acts at once (the copies after it are quick)
    interruptible(_wait_for, outs)
    return [o.asnumpy() if o.dtype == np.float32 else o.astype("float32").asnumpy()
            for o in outs]


def _wait_for(outs: Sequence) -> None:
    for out in outs:
        out.wait_to_read()


def forward_bound(sym: Symbol, values: Mapping, ctx: Context) -> list[np.ndarray]:
    """One execution of ``sym`` bound as ``Module`` binds it (:func:`bind_fused`), float32
    outputs. ``values``: every argument and auxiliary state by name."""
    import mxnet as mx
    executor = bind_fused(sym, values, ctx)
    result = float32_outputs(executor.forward(is_train=False))
    del executor
    mx.nd.waitall()
    return result


def fusable_batchnorms(conversion: Conversion) -> list[str]:
    """The BatchNorms of the converted graph that read a low precision Convolution's output
    directly: oneDNN's fusion folds each into that convolution in its dtype."""
    graph: Graph = conversion.graph
    dtypes = conversion.result.node_dtypes
    return [n.name for n in graph.nodes
            if n.op in _FUSED_NORMS and n.inputs
            and graph.nodes[n.inputs[0].node].op in _FUSED_CONVS
            and dtypes.get(graph.nodes[n.inputs[0].node].name) in LOW_PRECISION]


def unmodelled_note(conversion: Conversion) -> str | None:
    """The report's note when the checks ran emulated (or op by op) a bfloat16 model whose
    BatchNorms MXNet would fuse into bfloat16 convolutions at bind time; None when there
    are none."""
    names = fusable_batchnorms(conversion)
    if not names:
        return None
    shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
    return (f"not validated as it will run fused: {len(names)} BatchNorms read a bfloat16 "
            f"convolution directly ({shown}); MXNet's oneDNN backend (Module, simple_bind, "
            "hybridize(backend='MKLDNN')) folds each into its convolution in bfloat16 at bind "
            "time, which these checks did not run; fold them (fold_batchnorm=True, the "
            "default) or check on a CPU with native bfloat16")


def deployment_note(target_dtype: str, ctx: Context, bound: bool,
                    conversion: Conversion, bind_error: str | None = None,
                    over_data: bool = False) -> str | None:
    """What the report says about the path the checks ran: bound as ``Module`` binds it
    (``over_data``: the checks over ``eval_data=`` too), or (bfloat16 on a CPU, not bound)
    :func:`unmodelled_note`, with why binding failed where it did (``bind_error``); None
    where nothing differs."""
    if bound:
        return ("the checks bound the converted model as Module does (MXNet's oneDNN subgraph "
                "fusions applied: the path the written model runs)"
                + ("; so did every check over eval_data, each batch through the fused executor "
                   "in this process, each worker process or Dask worker" if over_data else ""))
    if target_dtype == "bfloat16" and ctx.device_type == "cpu":
        note = unmodelled_note(conversion)
        if bind_error:
            note = (f"MXNet's executor could not bind the converted model ({bind_error}); the "
                    "checks ran it op by op" + (f"; {note}" if note else ""))
        return note
    return None
