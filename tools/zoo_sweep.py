"""Sweep the gluoncv model zoo: build each model offline, convert it to bfloat16, run it.

For every name in ``gluoncv.model_zoo.get_model_list()``:

1. build it offline (``pretrained=False``, ``pretrained_base=False`` and, for video nets,
   ``use_kinetics_pretrain=False`` where accepted, the classes a ``*_custom`` model needs,
   a segmentation net's crop size set to its input;
   gluoncv's 2D action recognisers, whose zoo functions download their base or trip over
   uninitialised params, from their classes), random init; a model that cannot be built
   without downloads is recorded "not buildable offline" with the reason;
2. run it in float32 on a small input suited to its family (the first of a few sizes that
   the network accepts; a fresh net for each size tried);
3. export it (``HybridBlock.export`` to a temp prefix, ``mx.model.load_checkpoint``), as a
   user with a checkpoint would, and convert it with :func:`mxnet_amp.convert_model`;
4. run the converted model with bfloat16 numerics emulated (:mod:`mxnet_amp.emulation`;
   also natively where this CPU runs bf16 matrix ops) and compare with float32;
5. run the converted graph with its casts stripped, which must give the float32 outputs
   to float32 roundoff (``structure_err`` <= ``STRUCTURE_TOL``): whatever the precision
   does, the pass must not have lost, rewired or changed an op;
6. note whether ``mx.contrib.amp.convert_model`` converts it too, for comparison.

Weights are random (He-normal, BatchNorm at identity: activations stay O(1), where
gluon's default Uniform(0.07) lets them grow to 1e4..1e26 and turns sigmoids into steps).
Where that fp32 model is non-finite (box decoding exponentiates large activations in some
SSD, YOLOv3 and Faster R-CNN nets), it is rebuilt with BatchNorm statistics calibrated on
a random batch (normalised activations, as in a trained net; ``bn_calibrated_because`` in
the record); ``--calibrate-bn`` does so for every model. Measured, calibration does not
make the chaotic nets below less sensitive and makes some (yolo3) more so, so it is not
the default.

A model *passes* when it converts, the converted graph type-checks and runs, the graph
without casts reproduces float32 (step 5), no output is non-finite where float32 is
finite, and every checked float output is within ``--tol`` (default 0.1) of float32,
measured as ``max|bf16 - fp32| / max|fp32|`` per output.
bfloat16 keeps 8 significant bits (unit roundoff 2^-9); through 50-300 random-init
layers that accumulates to 0.2-5% of the output's range, while real breakage (a lost
op, a wrong dtype path, overflow) shows as O(1) errors or non-finite values. Some deep
random-init nets are chaotic (SE-ResNeXt-101, SENet-154, DLA-34 CenterNets): any
perturbation grows layer by layer (measured: 0.4% after the first stage of
SE-ResNeXt-101, 50% at its output), so the output error says how chaotic the random
net is, not how good the conversion is. There a model above the tolerance also passes
when its error is at most ``SENSITIVITY_FACTOR`` (4) times the error of the same fp32
model run on input and weights merely rounded to the target dtype, the perturbation any
deployment in that dtype starts from; both numbers are recorded (``max_rel_err``,
``sensitivity_err``; and, for comparison, the error of mx.contrib.amp's model of the same
net, emulated the same way: ``contrib_max_rel_err``), and step 5 still has to hold. A
model so chaotic that rounding only input and weights changes its outputs by half or more
is ``inconclusive``.
Outputs downstream of top-k / NMS / comparisons / box decoding are only checked for
finiteness (random-init scores tie, so rounding picks other boxes, and decoding
exponentiates the regressions); the dense tensors feeding those ops are compared instead.
A model whose fp32 output is already non-finite is recorded ``fp32_nonfinite``.

Each model runs in a process of its own with a per-model timeout; ``--jobs`` of them run
at once, each with its share of the cores.
Models are run cheapest first (by a name heuristic) so that a wall-clock budget skips
the heaviest ones, each recorded with the reason.

Usage::

    nice -n 10 python tools/zoo_sweep.py --jobs 2 --timeout 300 --budget 4500 \
        --json docs/zoo_sweep.json --md docs/zoo_sweep.md
    python tools/zoo_sweep.py --models resnet18_v1 ssd_300_mobilenet0.25_voc   # a subset
    python tools/zoo_sweep.py --json docs/zoo_sweep.json --resume   # only models not in the JSON
    python tools/zoo_sweep.py --report-from docs/zoo_sweep.json --md docs/zoo_sweep.md
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import select
import subprocess
import sys
import tempfile
import time
import warnings
from typing import Any, Iterable, Sequence

__all__ = ["family_of", "input_shapes", "sweep_one", "run_sweep", "write_markdown",
           "cost_rank", "TOLERANCE"]

TOLERANCE = 0.1  # max |bf16 - fp32| / max |fp32| per output (see the module doc)
# ... or at most this many times the error of rounding only the input and the weights
SENSITIVITY_FACTOR = 4.0
# the converted graph without its casts against the fp32 model: float32 roundoff
STRUCTURE_TOL = 1e-4



def INIT():
    """The random init: He-normal, so activations stay O(1) through deep stacks (the
    default Uniform(0.07) lets them grow to 1e4..1e26, where a sigmoid is a step function
    and exp() of a box regression overflows; that measures the init, not the precision)."""
    import mxnet as mx
    import numpy as np

    class HeNormal(mx.init.Initializer):
        # gluon hands every param without its own init to _init_weight: dispatch by name
        def _init_weight(self, name, arr):
            name = str(name)
            if len(arr.shape) >= 2 and name.endswith("weight"):
                fan_in = int(np.prod(arr.shape[1:]))
                arr[:] = mx.nd.random.normal(0, float(np.sqrt(2.0 / fan_in)), shape=arr.shape)
            elif name.endswith(("gamma", "running_var", "moving_var")):
                arr[:] = 1.0
            elif name.endswith(("beta", "bias", "running_mean", "moving_mean")):
                arr[:] = 0.0
            else:  # odd params (SSD's L2 norm scale, anchors' offsets): as gluon's default
                arr[:] = mx.nd.random.uniform(-0.07, 0.07, shape=arr.shape)

        _init_default = _init_weight
    return HeNormal()


def _initialize(net) -> None:
    """Random-init every param of a fresh ``net`` with :func:`INIT` (models that set their
    own initializers, or initialize themselves, are re-initialized the same way)."""
    import mxnet as mx
    for p in net.collect_params().values():
        p.init = None
    net.initialize(INIT(), ctx=mx.cpu(), force_reinit=True)


def _batchnorms(block) -> list:
    """Every BatchNorm-like layer under ``block`` (gluon's BatchNorm and its subclasses:
    SyncBatchNorm, gluoncv's BatchNormCudnnOff, ...)."""
    from mxnet.gluon import nn
    found, stack = [], [block]
    while stack:
        b = stack.pop()
        if isinstance(b, nn.BatchNorm):
            found.append(b)
        stack.extend(b._children.values())
    return found


def _batchnorms_in(sym) -> bool:
    return any(n.endswith("_moving_var") or n.endswith("_running_var") for n in sym.list_auxiliary_states())


def calibrate_batchnorm(net, shape: tuple[int, ...], batch: int = 4) -> int:
    """Set every BatchNorm's running mean and variance to the statistics its input has on a
    batch of ``batch`` random inputs of ``shape``, as training leaves them; returns how
    many layers were calibrated.

    With BatchNorm at identity a deep random-init net is not normalised: activations can
    grow large enough for a detector's box decoding to overflow in float32. Calibrated,
    every BN output is zero-mean unit-variance as in a trained model. (Measured, it does not
    make the chaotic nets less sensitive to rounding; see the module doc.) One recorded
    train-mode forward and backward with momentum 0 (and frozen layers unfrozen) writes the
    batch statistics, since MXNet updates them in the backward pass; the graph is then
    rebuilt with the layers' own settings, so the exported model is the model as built.
    ``net`` must have run once in predict mode (its graph traced for inference)."""
    import mxnet as mx
    import numpy as np
    from mxnet import autograd
    bns = _batchnorms(net)
    if not bns:
        return 0
    saved = [dict(b._kwargs) for b in bns]
    for b in bns:
        b._kwargs.update(momentum=0.0, use_global_stats=False)
    try:
        for n in dict.fromkeys((batch, shape[0])):  # a net with a fixed batch: its own size
            x_cal = mx.nd.random.uniform(-1, 1, shape=(n,) + tuple(shape[1:]))
            try:
                # trace for inference first: in train mode gluoncv's detectors trace their
                # training branch; the cached graph then runs with is_train=True below
                net._clear_cached_op()
                net(x_cal)
                # MXNet updates the running statistics in BatchNorm's backward pass
                with autograd.record(train_mode=True):
                    outs = net(x_cal)
                outs = [o for o in (outs if isinstance(outs, (list, tuple)) else [outs])
                        if np.dtype(o.dtype).kind == "f"]
                autograd.backward(outs, [mx.nd.ones_like(o) for o in outs])
                mx.nd.waitall()
                break
            except mx.MXNetError:
                if n == shape[0]:
                    raise
    finally:
        for b, kwargs in zip(bns, saved):
            b._kwargs.clear()
            b._kwargs.update(kwargs)
        net._clear_cached_op()
    net(x_cal[:shape[0]])  # re-trace with the layers' own settings, for export
    mx.nd.waitall()
    return len(bns)


_VIDEO_3D = ("c3d", "i3d", "p3d", "r2plus1d", "slowfast")
_VIDEO_2D = ("kinetics400", "ucf101", "hmdb51", "sthsthv2", "kinetics700")


def family_of(name: str) -> str:
    """A coarse family name for grouping the report."""
    rules = [("int8", "int8 (quantized)"), ("ssd_", "detection/ssd"), ("yolo3", "detection/yolo3"),
             ("faster_rcnn", "detection/rcnn"), ("mask_rcnn", "detection/rcnn"),
             ("doublehead_rcnn", "detection/rcnn"), ("center_net", "detection/centernet"),
             ("fcn_", "segmentation"), ("psp_", "segmentation"), ("deeplab", "segmentation"),
             ("icnet", "segmentation"), ("fastscnn", "segmentation"), ("danet", "segmentation"),
             ("simple_pose", "pose"), ("mobile_pose", "pose"), ("alpha_pose", "pose"),
             ("siamrpn", "tracking"), ("monodepth2", "depth"), ("cifar_", "classification/cifar")]
    for key, fam in rules:
        if key in name:
            return fam
    if any(k in name for k in _VIDEO_3D) or "_f16s4_" in name:
        return "action/3d"
    if any(k in name for k in _VIDEO_2D):
        return "action/2d"
    return "classification/imagenet"


def input_shapes(name: str) -> list[tuple[int, ...]]:
    """Input shapes to try for ``name``, smallest first."""
    fam = family_of(name)
    if fam == "action/3d":
        if "slowfast" in name:
            # slow + fast pathway frames are stacked along time (4x16: 4 + 32, 8x8: 8 + 32)
            return [(1, 3, t, 64, 64) for t in (36, 40, 48, 80)]
        if "f16s4" in name:
            return [(1, 3, 16, 64, 64), (1, 3, 16, 112, 112)]
        return [(1, 3, 8, 64, 64), (1, 3, 16, 112, 112), (1, 3, 32, 112, 112)]
    if fam == "classification/cifar":
        return [(1, 3, 32, 32)]
    if fam == "depth":  # monodepth2: sizes divisible by 32; its pose net takes two frames
        channels = 6 if "posenet" in name else 3
        return [(1, channels, 96, 320), (1, channels, 192, 640)]
    if "inception" in name or "googlenet" in name:
        return [(1, 3, 128, 128), (1, 3, 224, 224), (1, 3, 299, 299)]
    if fam.startswith("detection") or fam == "segmentation":
        return [(1, 3, 128, 128), (1, 3, 256, 256), (1, 3, 300, 300), (1, 3, 512, 512)]
    return [(1, 3, 64, 64), (1, 3, 128, 128), (1, 3, 224, 224), (1, 3, 299, 299)]


_HEAVY = re.compile(r"(\d{3})|resnest|senet|nasnet|_64x4d|32x4d|16x64d|wideresnet|densenet161|"
                    r"densenet201|vgg19|vgg16|hrnet_w(4|6)|xception71|residualattentionnet(2|4)")


def cost_rank(name: str) -> float:
    """A rough cost estimate from the name (higher is slower); only orders the sweep."""
    fam = family_of(name)
    cost = {"classification/cifar": 0.5, "classification/imagenet": 1, "pose": 1.5,
            "action/2d": 2, "detection/ssd": 3, "detection/yolo3": 3, "detection/centernet": 3,
            "segmentation": 4, "detection/rcnn": 5, "action/3d": 6}.get(fam, 1)
    for depth in re.findall(r"(?:resnet|resnest|residualattentionnet|hrnet_w|darknet|dla)(\d+)", name):
        cost *= max(1.0, int(depth) / 30)
    if _HEAVY.search(name):
        cost *= 1.5
    return cost


# gluoncv's action recognisers on 2D backbones ignore or trip over pretrained_base=False
# (the ResNet ones download the base anyway; the others call reset_ctx on uninitialised
# params): build their classes directly, as the zoo functions do
_ACTION_2D = re.compile(r"^(inceptionv1|inceptionv3|vgg16|resnet(\d+)_v1b)_(kinetics400|ucf101|hmdb51|sthsthv2|custom)$")
_ACTION_CLASSES = {"kinetics400": 400, "ucf101": 101, "hmdb51": 51, "sthsthv2": 174, "custom": 400}


def _build_action_2d(match):
    from gluoncv.model_zoo.action_recognition import (actionrec_inceptionv1, actionrec_inceptionv3,
                                                      actionrec_resnetv1b, actionrec_vgg16)
    base, depth, dataset = match.groups()
    nclass = _ACTION_CLASSES[dataset]
    if depth:
        return actionrec_resnetv1b.ActionRecResNetV1b(depth=int(depth), nclass=nclass, pretrained_base=False)
    cls = {"inceptionv1": actionrec_inceptionv1.ActionRecInceptionV1,
           "inceptionv3": actionrec_inceptionv3.ActionRecInceptionV3,
           "vgg16": actionrec_vgg16.ActionRecVGG16}[base]
    return cls(nclass=nclass, pretrained_base=False)


def _get_model(name: str, shape: tuple[int, ...] | None = None):
    """``name`` built offline for inputs of ``shape``: no pretrained weights or base, the
    classes a ``*_custom`` model needs, a segmentation net's crop size set to the input."""
    from gluoncv import model_zoo
    match = _ACTION_2D.match(name)
    if match:
        return _build_action_2d(match)
    kwargs: dict[str, Any] = {"pretrained_base": False}
    if "custom" in name:
        kwargs["classes"] = [f"class{i}" for i in range(20)]
    if family_of(name) == "action/3d":  # fine-tuned video nets start from Kinetics weights
        kwargs["use_kinetics_pretrain"] = False
    if family_of(name) == "segmentation" and shape is not None:
        kwargs.update(height=shape[-2], width=shape[-1])
    while True:
        try:
            return model_zoo.get_model(name, pretrained=False, **kwargs)
        except (TypeError, Warning) as err:
            # a builder without that keyword: a TypeError naming it, or (darknet53) a
            # Warning raised as an error, "should only accept kwargs ...": drop it
            unknown = [k for k in kwargs if k in str(err)]
            if isinstance(err, Warning) and not unknown and "pretrained_base" in kwargs:
                unknown = ["pretrained_base"]
            if not unknown or "missing" in str(err):
                raise
            for k in unknown:
                del kwargs[k]


def _first_line(err: BaseException) -> str:
    from mxnet_amp.errors import error_text
    return f"{type(err).__name__}: {error_text(err, 300)}"


def _fp32_forward(name: str):
    """Build, init and run ``name`` on the first input shape it accepts; ``(net, shape, x)``.
    Each shape gets a fresh net: a failed first call leaves deferred params half inferred."""
    import mxnet as mx
    errors = []
    for shape in input_shapes(name):
        try:
            x = mx.nd.random.uniform(-1, 1, shape=shape, ctx=mx.cpu())
            try:
                net = _get_model(name, shape)
                _initialize(net)
                net.hybridize()
                net(x)
            except ValueError as err:
                if "Deferred initialization failed" not in str(err):
                    raise
                net = _with_unused_params_initialised(name, shape, x)
            mx.nd.waitall()
            return net, shape, x
        except Exception as err:  # noqa: BLE001 - a shape the net rejects; try the next
            errors.append(f"{shape}: {_first_line(err)}")
            if "missing 1 required positional argument" in str(err):
                break  # the net takes several inputs; no shape will do
    raise RuntimeError("no input shape worked: " + " | ".join(errors))


def _with_unused_params_initialised(name: str, shape: tuple[int, ...], x):
    """``name`` built, run once imperatively, then hybridized and run again.

    Some nets hold params their forward never uses (monodepth2's encoder keeps ResNet's
    classifier, a custom Mask R-CNN an unused FPN level): the hybridized first call cannot
    infer their shapes and fails. Run imperatively, only used params get shapes; the unused
    ones get a placeholder size for their unknown dims (export leaves them out)."""
    net = _get_model(name, shape)
    _initialize(net)
    net(x)
    for p in net.collect_params().values():
        if p._deferred_init:
            p.shape = tuple(d or 1 for d in p.shape)
            p._finish_deferred_init()
    net.hybridize()
    net(x)
    return net


@contextlib.contextmanager
def _subgraph_backend(name: str | None):
    """Binds inside use MXNet's graph partitioning backend ``name`` (None: the default,
    oneDNN fusion on CPU); MXNet reads ``MXNET_SUBGRAPH_BACKEND`` at each bind."""
    before = os.environ.get("MXNET_SUBGRAPH_BACKEND")
    if name is None:
        os.environ.pop("MXNET_SUBGRAPH_BACKEND", None)
    else:
        os.environ["MXNET_SUBGRAPH_BACKEND"] = name
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("MXNET_SUBGRAPH_BACKEND", None)
        else:
            os.environ["MXNET_SUBGRAPH_BACKEND"] = before


def _bind_forward(sym, args, auxs, data, backend: str | None = "NONE"):
    """Outputs of ``sym`` bound on the CPU, as float32 numpy arrays. By default without
    oneDNN graph fusion: a fused conv+relu reports the relu's values as the conv's output,
    and the sweep reads internal outputs."""
    import mxnet as mx
    import numpy as np
    with _subgraph_backend(backend):
        ex = sym.bind(mx.cpu(), args={**args, **data}, aux_states=dict(auxs), grad_req="null")
        outs = ex.forward(is_train=False)
        # a bf16 output (native run) has MXNet's structured stand-in dtype; widen it first
        return [o.asnumpy() if np.dtype(o.dtype).names is None else
                o.astype("float32").asnumpy() for o in outs]


def _copies(params: dict) -> dict:
    return {k: v.copy() for k, v in params.items()}


def round_np(values, dtype: str):
    """``values`` (float32 numpy) rounded to ``dtype`` as ``amp_cast`` does it on this
    machine (:mod:`mxnet_amp.emulation`'s rounding), returned as float32."""
    import numpy as np

    from mxnet_amp.emulation import _bf16_round_np
    values = np.ascontiguousarray(values, dtype=np.float32)
    if dtype == "float16":
        return values.astype(np.float16).astype(np.float32)
    return _bf16_round_np(values)


def _widened(params: dict) -> dict:
    """``params`` with low precision arrays cast to float32."""
    from mxnet_amp.dtypes import LOW_PRECISION
    from mxnet_amp.params import array_dtype, cast_array
    return {k: (cast_array(v, "float32") if array_dtype(v) in LOW_PRECISION else v)
            for k, v in params.items()}


def strip_casts(sym):
    """``sym`` without its ``amp_cast`` / ``amp_multicast`` nodes: each consumer and output
    reads the cast's input (output ``k`` of a multicast: its input ``k``). That is the
    converted graph computing entirely in float32; it must reproduce the float32 model to
    float32 roundoff, whatever the model's sensitivity, or the pass lost, rewired or
    changed an op. (MXNet's own ``tojson(remove_amp_cast=True)`` keeps the casts that are
    graph outputs.)"""
    from mxnet_amp.graph import Entry, GraphBuilder
    from mxnet_amp.io import graph_from_symbol, graph_to_symbol
    g = graph_from_symbol(sym)
    builder = GraphBuilder()
    new_index: list[int | tuple[Entry, ...]] = []  # a node's new index, or a cast's inputs

    def moved(e: Entry) -> Entry:
        where = new_index[e.node]
        return where[e.index] if isinstance(where, tuple) else Entry(where, e.index)

    for node in g.nodes:
        inputs = tuple(moved(e) for e in node.inputs)
        new_index.append(inputs if node.op in ("amp_cast", "amp_multicast")
                         else builder.add(node.replace(inputs=inputs)))
    return graph_to_symbol(builder.build([moved(h) for h in g.heads], g.attrs))


# ops whose output order or selection changes discretely under any rounding
ORDERING_OPS = frozenset({"topk", "sort", "argsort", "_contrib_box_nms", "_contrib_box_non_maximum_suppression",
                          "_contrib_MultiProposal", "_contrib_Proposal", "_contrib_MultiBoxDetection",
                          "argmax", "argmin"})
# ops that amplify input rounding without bound: box decoding takes exp() of the box
# regressions, which random init makes huge (1e26 boxes seen); compared at their inputs
AMPLIFYING_OPS = frozenset({"_contrib_box_decode"})
# comparisons make discrete masks (score thresholds, max-pool peak picking) that flip on ties
COMPARISON_OPS = frozenset({"broadcast_equal", "_equal", "_equal_scalar", "broadcast_greater",
                            "_greater", "_greater_scalar", "broadcast_lesser", "_lesser",
                            "_lesser_scalar", "broadcast_greater_equal", "_greater_equal",
                            "_greater_equal_scalar", "broadcast_lesser_equal", "_lesser_equal",
                            "_lesser_equal_scalar", "broadcast_not_equal", "_not_equal",
                            "_not_equal_scalar"})
BOUNDARY_OPS = ORDERING_OPS | AMPLIFYING_OPS | COMPARISON_OPS


def _upstream(graph, start: Iterable[int]) -> set[int]:
    seen, stack = set(), list(start)
    while stack:
        i = stack.pop()
        if i not in seen:
            seen.add(i)
            stack.extend(e.node for e in graph.nodes[i].inputs)
    return seen


def checked_entries(graph):
    """``(heads to compare, heads past a boundary op, extra entries to compare)``.

    A head downstream of top-k / NMS / argmax (:data:`ORDERING_OPS`), a comparison
    (:data:`COMPARISON_OPS`) or box decoding (:data:`AMPLIFYING_OPS`) is only checked for
    finiteness: with random weights scores tie, so rounding flips masks and picks other
    boxes, and decoding exponentiates huge random regressions.
    Instead the float inputs of the first such ops on each path (the dense scores and box
    regressions) are compared."""
    boundary = [i for i, n in enumerate(graph.nodes) if n.op in BOUNDARY_OPS]
    first = [i for i in boundary
             if not any(graph.nodes[j].op in BOUNDARY_OPS
                        for j in _upstream(graph, [e.node for e in graph.nodes[i].inputs]))]
    dense, after = [], []
    for k, head in enumerate(graph.heads):
        up = _upstream(graph, [head.node])
        (after if any(i in up for i in boundary) else dense).append(k)
    extra = []
    for i in first:
        for e in graph.nodes[i].inputs:
            if e not in extra and not graph.nodes[e.node].is_variable:
                extra.append(e)
    return dense, after, extra


def _with_heads(sym, entries_by_name):
    """``sym`` with extra outputs: ``(node name, output index)`` pairs, looked up by name."""
    from mxnet_amp.graph import Entry, Graph
    from mxnet_amp.io import graph_from_symbol, graph_to_symbol
    g = graph_from_symbol(sym)
    index = {n.name: i for i, n in enumerate(g.nodes)}
    heads = list(g.heads)
    for name, k in entries_by_name:
        # an emulated low precision output is the rounded copy beside the node
        rounded = f"{name}{f'_out{k}' if k else ''}_round_float32"
        heads.append(Entry(index[rounded]) if rounded in index else Entry(index[name], k))
    return graph_to_symbol(Graph(g.nodes, tuple(heads), g.attrs))


def compare(ref: Sequence, got: Sequence) -> dict:
    """Per-output error of ``got`` against ``ref`` (numpy arrays): the largest
    ``max|got - ref| / max|ref|`` over float outputs, and the outputs that are non-finite
    where ``ref`` is finite."""
    import numpy as np
    errs, new_nonfinite = [], []
    for k, (r, g) in enumerate(zip(ref, got)):
        r = np.asarray(r)
        g = np.asarray(g)
        if r.shape != g.shape:
            return {"error": f"output {k}: shape {g.shape} != fp32 shape {r.shape}"}
        if not np.issubdtype(r.dtype, np.floating):
            continue
        r = r.astype(np.float64)
        g = g.astype(np.float64)
        fin = np.isfinite(r)
        if (fin & ~np.isfinite(g)).any():
            new_nonfinite.append(k)
        rf, gf = r[fin], np.where(np.isfinite(g), g, 0.0)[fin]
        scale = float(np.abs(rf).max()) if rf.size else 0.0
        err = float(np.abs(rf - gf).max()) / scale if scale > 0 else float(np.abs(gf).max() if gf.size else 0.0)
        errs.append(err)
    return {"max_rel_err": max(errs) if errs else 0.0, "per_output_err": errs,
            "nonfinite_outputs": new_nonfinite}


def sweep_one(name: str, target_dtype: str = "bfloat16", tol: float = TOLERANCE,
              native: bool | None = None, calibrate_bn: bool = False) -> dict[str, Any]:
    """Build, convert and run one zoo model; a JSON-able record of what happened.
    ``calibrate_bn``: :func:`calibrate_batchnorm` before export (by default only when the
    fp32 model is non-finite without; see the module doc)."""
    import mxnet as mx

    import mxnet_amp
    from mxnet_amp.convert import convert_model_full
    from mxnet_amp.emulation import emulate_model
    from mxnet_amp.hardware import bf16_runs_natively
    import numpy as np
    rec: dict[str, Any] = {"model": name, "family": family_of(name), "target_dtype": target_dtype}
    mx.random.seed(0)  # the same random weights and input on every run
    np.random.seed(0)
    t0 = time.time()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            net, shape, x = _fp32_forward(name)
            calibrated = calibrate_batchnorm(net, shape) if calibrate_bn else 0
    except Exception as err:  # noqa: BLE001 - recorded as not buildable
        rec.update(status="not_buildable", reason=_first_line(err), build_s=round(time.time() - t0, 2))
        return rec
    rec["input_shape"] = list(shape)
    rec["calibrated_batchnorms"] = calibrated
    rec["params_m"] = round(sum(int(p.data().size) for p in net.collect_params().values()
                                if p._data is not None) / 1e6, 2)
    rec["build_s"] = round(time.time() - t0, 2)
    try:  # the Gluon adapter path, conversion only (no run)
        from mxnet_amp.gluon import convert_hybrid_block
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            convert_hybrid_block(net, target_dtype=target_dtype)
        rec["gluon_adapter"] = "ok"
    except Exception as err:  # noqa: BLE001
        rec["gluon_adapter"] = "error: " + _first_line(err)[:200]
    with tempfile.TemporaryDirectory(prefix="zoo_sweep_") as tmp:
        try:
            net.export(os.path.join(tmp, "m"))
            sym, args, auxs = mx.model.load_checkpoint(os.path.join(tmp, "m"), 0)
        except Exception as err:  # noqa: BLE001
            rec.update(status="not_buildable", reason="export failed: " + _first_line(err))
            return rec
    del net
    data_names = [n for n in sym.list_arguments() if n not in args]
    if data_names != ["data"]:
        rec.update(status="not_buildable", reason=f"takes inputs {data_names}, the sweep feeds one image")
        return rec
    data = {"data": x}
    t1 = time.time()
    try:
        ref = _bind_forward(sym, args, auxs, data)
    except Exception as err:  # noqa: BLE001
        rec.update(status="not_buildable", reason="exported fp32 symbol does not run: " + _first_line(err))
        return rec
    rec["fp32_run_s"] = round(time.time() - t1, 2)
    if not all(np.isfinite(r).all() for r in ref if np.issubdtype(r.dtype, np.floating)):
        if not calibrate_bn and calibrated == 0 and _batchnorms_in(sym):
            # with BatchNorm at identity, box decoding exponentiates huge activations:
            # normalised as in a trained model, the same random net stays finite
            del sym, args, auxs
            rec = sweep_one(name, target_dtype, tol, native, calibrate_bn=True)
            rec["bn_calibrated_because"] = "fp32 non-finite with BatchNorm at identity"
            return rec
        rec.update(status="fp32_nonfinite",
                   reason="the random-init fp32 model itself gives non-finite outputs; nothing to compare")
        return rec
    t2 = time.time()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            # weights stay float32 (cast in the graph): the structure check below runs the
            # cast-stripped graph on them and must reproduce fp32 exactly; the low precision
            # numerics are the same as with weights stored converted
            csym, cargs, cauxs, conv = convert_model_full(sym, args, auxs, target_dtype=target_dtype,
                                                          cast_optional_params=False)
        rec["warnings"] = sorted({str(w.message)[:200] for w in caught})
    except mxnet_amp.AMPError as err:
        rec.update(status="fail", reason="convert: " + _first_line(err))
        return rec
    except Exception as err:  # noqa: BLE001 - an untyped error is a bug worth reporting
        rec.update(status="fail", reason="convert (untyped error): " + _first_line(err))
        return rec
    rec["convert_s"] = round(time.time() - t2, 2)
    rec["casts"] = conv.result.casts
    rec["multicasts"] = conv.result.multicasts
    rec["fallbacks"] = len(conv.result.fallbacks)
    rec["low_precision_nodes"] = sum(1 for d in conv.result.node_dtypes.values() if d == target_dtype)
    rec["op_nodes"] = len(conv.result.node_dtypes)
    from mxnet_amp.io import graph_from_symbol
    g32 = graph_from_symbol(sym)
    dense, after, extra = checked_entries(g32)
    extra_names = [(g32.nodes[e.node].name, e.index) for e in extra]
    n_heads = len(g32.heads)
    checked = dense + list(range(n_heads, n_heads + len(extra)))
    t3 = time.time()
    try:
        if extra:
            ref = _bind_forward(_with_heads(sym, extra_names), args, auxs, data)
        esym, eargs, eauxs = emulate_model(csym, cargs, cauxs)
        got = _bind_forward(_with_heads(esym, extra_names) if extra else esym, eargs, eauxs, data)
    except Exception as err:  # noqa: BLE001
        rec.update(status="fail", reason="emulated run: " + _first_line(err))
        return rec
    rec["emulated_run_s"] = round(time.time() - t3, 2)
    try:
        wsym = strip_casts(csym)
        wide = _bind_forward(_with_heads(wsym, extra_names) if extra else wsym,
                             _widened(cargs), _widened(cauxs), data)
        rec["structure_err"] = compare([ref[k] for k in checked], [wide[k] for k in checked])["max_rel_err"]
    except Exception as err:  # noqa: BLE001
        rec.update(status="fail", reason="converted graph without its casts: " + _first_line(err))
        return rec
    cmp = compare([ref[k] for k in checked], [got[k] for k in checked])
    if "error" in cmp:
        rec.update(status="fail", reason=cmp["error"])
        return rec
    post = compare([ref[k] for k in after], [got[k] for k in after])
    nonfinite = sorted({checked[k] for k in cmp["nonfinite_outputs"]}
                       | {after[k] for k in post.get("nonfinite_outputs", [])})
    rec.update(max_rel_err=cmp["max_rel_err"], nonfinite_outputs=nonfinite,
               outputs_after_ordering=after, pre_ordering_tensors=[f"{n}:{k}" for n, k in extra_names],
               after_ordering_err=post.get("max_rel_err"))
    cmp["nonfinite_outputs"] = nonfinite
    if dense and (native if native is not None else bf16_runs_natively()):
        # native bfloat16: unfused (what the emulation models), and with MXNet's default
        # oneDNN fusion (what a user gets); recorded, the pass criterion is the emulation's.
        # On copies of the params: the fp32 runs above had oneDNN reorder the shared fp32
        # arrays in place, and MXNet 1.9.1 then fails bf16 grouped convolutions reading
        # them ("could not create a primitive descriptor for a reorder primitive")
        for key, backend in (("native", "NONE"), ("native_fused", None)):
            try:
                nref = _bind_forward(csym, _copies(cargs), _copies(cauxs), data, backend)[:n_heads]
                ncmp = compare([ref[k] for k in dense], [nref[k] for k in dense])
                rec[f"{key}_max_rel_err"] = ncmp.get("max_rel_err")
                rec[f"{key}_nonfinite_outputs"] = ncmp.get("nonfinite_outputs")
            except Exception as err:  # noqa: BLE001
                rec[key] = "error: " + _first_line(err)
    contrib_model = None
    try:
        from mxnet.contrib import amp as contrib_amp
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            contrib_model = contrib_amp.convert_model(sym, args, auxs, target_dtype=target_dtype)
        rec["contrib_amp"] = "ok"
    except Exception as err:  # noqa: BLE001
        rec["contrib_amp"] = "error: " + _first_line(err)[:160]
    sens = None
    if cmp["max_rel_err"] > tol and not cmp["nonfinite_outputs"] and contrib_model is not None:
        # the peer's model of the same net, emulated the same way: is the error the net's?
        try:
            pe = emulate_model(*contrib_model)
            pgot = _bind_forward(_with_heads(pe[0], extra_names) if extra else pe[0], pe[1], pe[2], data)
            rec["contrib_max_rel_err"] = compare([ref[k] for k in checked],
                                                 [pgot[k] for k in checked])["max_rel_err"]
        except Exception as err:  # noqa: BLE001 - recorded, not the pass criterion
            rec["contrib_emulated"] = "error: " + _first_line(err)
    if cmp["max_rel_err"] > tol and not cmp["nonfinite_outputs"]:
        # how sensitive is this random-init model to bf16-sized perturbations at all?
        # fp32 compute on the input and weights rounded to the target dtype
        try:
            rargs = {k: mx.nd.array(round_np(v.asnumpy(), target_dtype)) for k, v in args.items()}
            rdata = {"data": mx.nd.array(round_np(x.asnumpy(), target_dtype))}
            pref = _bind_forward(_with_heads(sym, extra_names) if extra else sym, rargs, auxs, rdata)
            sens = compare([ref[k] for k in checked], [pref[k] for k in checked])["max_rel_err"]
        except Exception as err:  # noqa: BLE001
            rec["sensitivity"] = "error: " + _first_line(err)
        rec["sensitivity_err"] = sens
    within = cmp["max_rel_err"] <= tol or (sens is not None and cmp["max_rel_err"] <= SENSITIVITY_FACTOR * sens)
    same_graph = rec["structure_err"] <= STRUCTURE_TOL
    ok = not cmp["nonfinite_outputs"] and within and same_graph
    rec["status"] = "pass" if ok else "fail"
    if not ok:
        rec["reason"] = (f"non-finite outputs {cmp['nonfinite_outputs']} where fp32 is finite"
                         if cmp["nonfinite_outputs"] else
                         f"the converted graph without its casts differs from fp32 by "
                         f"{rec['structure_err']:.3g} (> {STRUCTURE_TOL}): the pass changed the computation"
                         if not same_graph else
                         f"max rel error {cmp['max_rel_err']:.3g} > tolerance {tol} and > "
                         f"{SENSITIVITY_FACTOR} x the error of rounding only input and weights "
                         f"({sens if sens is None else f'{sens:.3g}'})")
    elif cmp["max_rel_err"] > tol:
        rec["note"] = (f"error {cmp['max_rel_err']:.3g} > {tol}, but rounding only the input and "
                       f"weights to {target_dtype} already gives {sens:.3g}: the random-init model "
                       "is that sensitive")
    rec["total_s"] = round(time.time() - t0, 2)
    return mark_inconclusive(rec)


def mark_inconclusive(rec: dict) -> dict:
    """Re-label a pass that measured nothing as ``inconclusive``: outputs identical to fp32
    although the model computes in low precision (saturated random-init outputs), or a model
    so chaotic that rounding only its input and weights already changes outputs by half."""
    if rec.get("status") != "pass":
        return rec
    if rec.get("max_rel_err") == 0.0 and rec.get("low_precision_nodes", 0) > 0:
        why = "outputs identical to fp32 although it computes in low precision: saturated"
    elif (rec.get("sensitivity_err") or 0) >= 0.5:
        why = (f"rounding only input and weights already changes the outputs by "
               f"{rec['sensitivity_err']:.2g}: a chaotic random-init model, nothing measured")
    else:
        return rec
    return {**rec, "status": "inconclusive", "reason": why}


# --------------------------------------------------------------------------- worker / driver

def _worker(name: str, target_dtype: str, tol: float, calibrate_bn: bool) -> None:
    """Sweep ``name``; write its JSON record as one line on stdout."""
    out = sys.stdout
    sys.stdout = sys.stderr  # library prints must not corrupt the record
    try:
        rec = sweep_one(name, target_dtype, tol, calibrate_bn=calibrate_bn)
    except BaseException as err:  # noqa: BLE001 - a record, not a traceback
        rec = {"model": name, "family": family_of(name), "status": "fail",
               "reason": "sweep crashed: " + _first_line(err)}
    out.write(json.dumps(rec) + "\n")
    out.flush()


class _Worker:
    """A worker process sweeping one model, asynchronously: one process per model, as in
    a long-lived one, state MXNet kept from earlier models made later ones crash or go
    non-finite (each of them alone is fine)."""

    def __init__(self, name: str, timeout: float, target_dtype: str, tol: float, nice: int,
                 threads: int, calibrate_bn: bool):
        env = dict(os.environ)
        env["OMP_NUM_THREADS"] = str(threads)
        env.pop("MXNET_SUBGRAPH_BACKEND", None)  # chosen per bind (_subgraph_backend)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [_repo_root(), env.get("PYTHONPATH")]))
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", name,
               "--target-dtype", target_dtype, "--tol", str(tol)] + (["--calibrate-bn"] if calibrate_bn else [])
        self.model, self.started = name, time.time()
        self.deadline = self.started + timeout
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env, text=True,
                                     preexec_fn=(lambda: os.nice(nice)) if nice else None)

    def result(self) -> dict:
        """The model's record (call once the process's stdout is readable)."""
        line = self.proc.stdout.readline()
        return json.loads(line) if line else {"model": self.model, "family": family_of(self.model),
                                              "status": "fail",
                                              "reason": "worker died (crash or out of memory)"}

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()


def _repo_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_sweep(models: Sequence[str], *, target_dtype: str = "bfloat16", tol: float = TOLERANCE,
              timeout: float = 120, budget: float | None = None, nice: int = 0, jobs: int = 1,
              json_path: str | None = None, progress: bool = True,
              done: dict[str, dict] | None = None, calibrate_bn: bool = False) -> list[dict]:
    """Sweep ``models`` (cheapest first) in ``jobs`` worker processes of ``cpu_count // jobs``
    threads each; the records, in list order. ``done``: records kept from an earlier run
    (those models are not run again)."""
    records: dict[str, dict] = dict(done or {})
    queue = [m for m in sorted(models, key=cost_rank) if m not in records]
    threads = max(1, (os.cpu_count() or 1) // jobs)
    start = time.time()
    workers: list[_Worker] = []

    def finish(worker: _Worker, rec: dict) -> None:
        rec["wall_s"] = round(time.time() - worker.started, 1)
        records[rec["model"]] = rec
        if progress:
            print(f"[{time.time() - start:6.0f}s] {rec['model']:45s} {rec['status']:13s} "
                  f"{rec.get('max_rel_err', '')!s:.8s} {rec.get('reason', '')[:90]}", flush=True)
        if json_path:
            _write_json(json_path, [records[m] for m in models if m in records], target_dtype, tol,
                        timeout)

    while queue or workers:
        left = None if budget is None else budget - (time.time() - start)
        if left is not None and left < 5:
            for name in queue:
                records[name] = {"model": name, "family": family_of(name), "status": "skipped",
                                 "reason": "sweep wall-clock budget spent (heaviest models run last)"}
            queue = []
        while queue and len(workers) < jobs:
            workers.append(_Worker(queue.pop(0), timeout if left is None else min(timeout, left),
                                   target_dtype, tol, nice, threads, calibrate_bn))
        if not workers:
            continue
        wait = max(0.0, min(w.deadline for w in workers) - time.time())
        ready, _, _ = select.select([w.proc.stdout for w in workers], [], [], wait)
        for worker in list(workers):
            if worker.proc.stdout in ready:
                rec = worker.result()
            elif time.time() >= worker.deadline:
                timed_out = worker.deadline - worker.started >= timeout
                rec = {"model": worker.model, "family": family_of(worker.model),
                       "status": "timeout" if timed_out else "skipped",
                       "reason": (f"over the per-model timeout of {timeout:g} s"
                                  if timed_out else "sweep wall-clock budget spent")}
            else:
                continue
            worker.kill()
            workers.remove(worker)
            finish(worker, rec)
    return [records[m] for m in models]


def _write_json(path: str, records: list[dict], target_dtype: str, tol: float,
                timeout: float) -> None:
    from mxnet_amp.io import atomic_write
    body = json.dumps({"target_dtype": target_dtype, "tolerance": tol, "timeout_s": timeout,
                       "records": records}, indent=1)

    def write(tmp):
        with open(tmp, "w") as f:
            f.write(body)
    atomic_write(path, write)


def summarize(records: Sequence[dict]) -> dict:
    """Counts by status, the pass rate over tested models, error percentiles."""
    import numpy as np
    counts: dict[str, int] = {}
    for r in records:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    tested = counts.get("pass", 0) + counts.get("fail", 0)
    nonfinite = [r["model"] for r in records if r.get("nonfinite_outputs")]
    errs = np.array([r["max_rel_err"] for r in records
                     if r.get("max_rel_err") is not None and r["status"] in ("pass", "fail")])
    pct = ({q: float(np.percentile(errs, q)) for q in (50, 90, 100)} if errs.size else {})
    return {"counts": counts, "tested": tested,
            "pass_rate": counts.get("pass", 0) / tested if tested else 0.0,
            "nonfinite_models": nonfinite, "err_percentiles": pct}


_STATUS_ORDER = ["pass", "fail", "inconclusive", "not_buildable", "fp32_nonfinite", "timeout", "skipped"]


def write_markdown(path: str, records: Sequence[dict], *, target_dtype: str, tol: float,
                   command: str, wall_s: float, timeout: float) -> None:
    """Write the sweep report ``path`` (markdown)."""
    import mxnet as mx

    from mxnet_amp.hardware import bf16_runs_natively
    from mxnet_amp.io import atomic_write
    s = summarize(records)
    c = s["counts"]
    converted = [r for r in records if "contrib_amp" in r]
    contrib_ok = sum(1 for r in converted if r["contrib_amp"] == "ok")
    gluon = [r for r in records if "gluon_adapter" in r]
    gluon_ok = sum(1 for r in gluon if r["gluon_adapter"] == "ok")
    pct = s["err_percentiles"]
    sensitive = [r for r in records if r["status"] == "pass" and r["max_rel_err"] > tol]
    recalibrated = [r["model"] for r in records if r.get("bn_calibrated_because")]
    downloads = sum(1 for r in records
                    if r["status"] == "not_buildable" and "ConnectionError" in r.get("reason", ""))
    lines = [
        f"# gluoncv model zoo sweep: {target_dtype} conversion",
        "",
        f"Latest full run: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"{wall_s / 60:.0f} min wall clock on a shared 2-core CPU, `{command}`.",
        f"MXNet {mx.__version__}, gluoncv {_gluoncv_version()}. Native bf16 on this CPU: "
        + ("yes (avx512_bf16): each model also runs natively, unfused and with oneDNN fusion "
           "(recorded below); the pass criterion uses the emulation (`mxnet_amp.emulation`: "
           "every tensor the converted graph holds in bf16 is rounded to bf16), which the "
           "unfused native run matches closely (docs/emulation_and_auto.md), and which runs "
           "on CPUs without bf16 too."
           if bf16_runs_natively() else
           "no (AVX2 only), so bf16 numerics are emulated (`mxnet_amp.emulation`: every tensor "
           "the converted graph holds in bf16 is rounded to bf16, ops compute in fp32)."),
        "The sweep itself is `tools/zoo_sweep.py`; its module docstring defines every check. "
        "Per-model records: `docs/zoo_sweep.json`. CI runs a fixed subset "
        "(`tests/test_zoo_sweep.py`); the whole zoo runs with `pytest -m slow`.",
        "",
        "Method: each model is built offline (`pretrained=False`, `pretrained_base=False`, and "
        "where gluoncv needs more to stay offline, what the tool's docstring lists), random "
        "weights (He-normal, BatchNorm at identity; BatchNorm calibrated on a random batch where "
        "that fp32 model is non-finite), run in fp32 on a small input for "
        "its family (the first of a few sizes it accepts), exported (`HybridBlock.export` + "
        f"`mx.model.load_checkpoint`), converted with `mxnet_amp.convert_model(target_dtype='{target_dtype}', "
        "cast_optional_params=False)` "
        "and run. *pass*: converts, type-checks, runs, the converted graph with its casts "
        f"stripped reproduces fp32 to {STRUCTURE_TOL:g} (no op lost or changed), no output "
        f"non-finite where fp32 is finite, and `max|{target_dtype} - fp32| / max|fp32|` <= {tol} "
        f"for every checked output, or (for chaotic deep random-init nets) at most "
        f"{SENSITIVITY_FACTOR:g}x the error that merely rounding the input and weights to "
        f"{target_dtype} causes in the fp32 model (both recorded). "
        "Outputs after top-k / NMS / comparisons / box decoding are only checked for "
        "finiteness; the dense tensors feeding those ops are compared instead (random-init "
        "scores tie, so any rounding selects other boxes).",
        "",
        "## Summary",
        "",
        f"- models in `gluoncv.model_zoo.get_model_list()`: {len(records)}",
        f"- tested (built offline and ran): **{s['tested']}**; **pass {c.get('pass', 0)}, "
        f"fail {c.get('fail', 0)} = {100 * s['pass_rate']:.1f}% pass** (target >= 95%)",
        f"- of the passes, {len(sensitive)} are above "
        f"the {tol} tolerance and pass on the sensitivity criterion (chaotic deep random-init "
        "nets; listed below with both errors); within the tolerance alone: "
        f"{c.get('pass', 0) - len(sensitive)} of {s['tested']}",
        f"- converted graph with its casts stripped equal to fp32 (max error <= {STRUCTURE_TOL:g}): "
        f"{sum(1 for r in records if r.get('structure_err') is not None and r['structure_err'] <= STRUCTURE_TOL)}"
        f" of the {sum(1 for r in records if r.get('structure_err') is not None)} models that converted and ran",
        f"- models with a non-finite output where fp32 is finite: **{len(s['nonfinite_models'])}**"
        + (f" ({', '.join(s['nonfinite_models'])})" if s["nonfinite_models"] else ""),
        f"- output error `max|bf16 - fp32| / max|fp32|` over tested models: median "
        f"{pct.get(50, float('nan')):.2g}, 90th percentile {pct.get(90, float('nan')):.2g}, "
        f"max {pct.get(100, float('nan')):.2g}",
        f"- not built: {c.get('not_buildable', 0)}, of which {downloads} download weights or a "
        "quantized graph even with `pretrained=False`; the others fail inside gluoncv or MXNet "
        "in float32 already, or take several inputs (reasons per model below)",
        f"- fp32 model itself non-finite with random weights (BatchNorm at identity, and again "
        f"with BatchNorm calibrated): {c.get('fp32_nonfinite', 0)}; finite only with BatchNorm "
        f"calibrated on a random batch, and swept so: {len(recalibrated)}"
        + (f" ({', '.join(recalibrated)})" if recalibrated else ""),
        f"- inconclusive (converted and ran, but the random-init outputs are saturated or chaotic, "
        f"so the comparison measures nothing; not counted as tested): {c.get('inconclusive', 0)}",
        f"- over the per-model timeout ({timeout:g} s): {c.get('timeout', 0)}; not reached within the "
        f"sweep's wall-clock budget (heaviest run last): {c.get('skipped', 0)}",
        *_native_summary(records),
        f"- for comparison, `mx.contrib.amp.convert_model(target_dtype='{target_dtype}')` "
        f"converts {contrib_ok} of the {len(converted)} models mxnet-amp converted "
        "(conversion only; its failures are listed below)",
        f"- the Gluon adapter `mxnet_amp.gluon.convert_hybrid_block` converts {gluon_ok} of the "
        f"{len(gluon)} buildable models (conversion only)",
        "",
    ]
    fams: dict[str, list[dict]] = {}
    for r in records:
        fams.setdefault(r.get("family", "?"), []).append(r)
    lines += ["## By family", "",
              "| family | models | pass | fail | not buildable / inconclusive | fp32 non-finite | timeout / skipped | worst rel err |",
              "|---|---|---|---|---|---|---|---|"]
    for fam in sorted(fams):
        rs = fams[fam]
        errs = [r["max_rel_err"] for r in rs
                if r.get("max_rel_err") is not None and r["status"] in ("pass", "fail")]
        n = lambda *st: sum(r["status"] in st for r in rs)  # noqa: E731
        lines.append(f"| {fam} | {len(rs)} | {n('pass')} | {n('fail')} | {n('not_buildable', 'inconclusive')} | "
                     f"{n('fp32_nonfinite')} | {n('timeout', 'skipped')} | "
                     f"{f'{max(errs):.2g}' if errs else '-'} |")
    fails = [r for r in records if r["status"] == "fail"]
    lines += ["", "## Failures", ""]
    if fails:
        lines += ["| model | reason | mx.contrib.amp's model, emulated the same way |", "|---|---|---|"]
        lines += [f"| {r['model']} | {_cell(r.get('reason', ''))} | "
                  f"{'' if r.get('contrib_max_rel_err') is None else format(r['contrib_max_rel_err'], '.3g')} |"
                  for r in fails]
    else:
        lines.append("None.")
    contrib_fail = [r for r in converted if r["contrib_amp"] != "ok"]
    if contrib_fail:
        lines += ["", "## Models mx.contrib.amp fails to convert (mxnet-amp converts them)", "",
                  "| model | mx.contrib.amp error |", "|---|---|"]
        lines += [f"| {r['model']} | {_cell(r['contrib_amp'])} |" for r in contrib_fail]
    gluon_fail = [r for r in gluon if r["gluon_adapter"] != "ok"]
    if gluon_fail:
        lines += ["", "## Gluon adapter failures", "", "| model | error |", "|---|---|"]
        lines += [f"| {r['model']} | {_cell(r['gluon_adapter'])} |" for r in gluon_fail]
    if sensitive:
        lines += ["", "## Passed on the sensitivity criterion", "",
                  "mx.contrib.amp's model of the same net, emulated the same way, for comparison "
                  "(blank: contrib cannot convert it).", "",
                  "| model | max rel err | error from rounding only input + weights | mx.contrib.amp's model |",
                  "|---|---|---|---|"]
        lines += [f"| {r['model']} | {r['max_rel_err']:.3g} | {r['sensitivity_err']:.3g} | "
                  f"{'' if r.get('contrib_max_rel_err') is None else format(r['contrib_max_rel_err'], '.3g')} |"
                  for r in sensitive]
    lines += ["", "## Per model", "",
              "| model | status | input | params (M) | casts | multicasts | bf16 ops | max rel err | native (unfused / fused) | contrib.amp | time (s) | note |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    order = {st: k for k, st in enumerate(_STATUS_ORDER)}
    for r in sorted(records, key=lambda r: (r.get("family", ""), order.get(r["status"], 9), r["model"])):
        err = r.get("max_rel_err")
        shape = "x".join(map(str, r["input_shape"])) if "input_shape" in r else ""
        lp = f"{r['low_precision_nodes']}/{r['op_nodes']}" if "op_nodes" in r else ""
        contrib = r.get("contrib_amp", "")
        contrib = "ok" if contrib == "ok" else ("error" if contrib else "")
        note = r.get("reason", "") if r["status"] != "pass" else r.get("note", "")
        lines.append(f"| {r['model']} | {r['status']} | {shape} | {r.get('params_m', '')} | "
                     f"{r.get('casts', '')} | {r.get('multicasts', '')} | {lp} | "
                     f"{'' if err is None else f'{err:.2e}'} | {_native_cell(r)} | {contrib} | {r.get('wall_s', '')} | "
                     f"{_cell(note)} |")
    text = "\n".join(lines) + "\n"

    def write(tmp):
        with open(tmp, "w") as f:
            f.write(text)
    atomic_write(path, write)


def _native_cell(rec: dict) -> str:
    cells = []
    for key in ("native", "native_fused"):
        err = rec.get(f"{key}_max_rel_err")
        cells.append(f"{err:.2e}" if err is not None else ("error" if key in rec else ""))
    return " / ".join(cells) if any(cells) else ""


def _native_summary(records: Sequence[dict]) -> list[str]:
    """Report lines on the native low precision runs (where this CPU has them)."""
    import numpy as np
    lines = []
    for key, what in (("native", "unfused (`MXNET_SUBGRAPH_BACKEND=NONE`), the numerics the "
                                  "emulation models"),
                      ("native_fused", "with MXNet's default oneDNN fusion, what a user gets")):
        ran = [r for r in records if f"{key}_max_rel_err" in r]
        failed = [r for r in records if str(r.get(key, "")).startswith("error")]
        if not ran and not failed:
            continue
        errs = np.array([r[f"{key}_max_rel_err"] for r in ran])
        nonfinite = [r["model"] for r in ran if r.get(f"{key}_nonfinite_outputs")]
        line = (f"- native bfloat16 run on this CPU, {what}: ran {len(ran)} of {len(ran) + len(failed)}"
                + (f"; output error median {np.median(errs):.2g}, 90th percentile "
                   f"{np.percentile(errs, 90):.2g}, max {errs.max():.2g}" if len(ran) else "")
                + f"; non-finite where fp32 is finite: {len(nonfinite)}"
                + (f" ({', '.join(nonfinite)})" if nonfinite else ""))
        if failed:
            line += f"; MXNet errors: {', '.join(sorted({r['model'] for r in failed}))}"
        lines.append(line)
    return lines


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")[:220]


def _gluoncv_version() -> str:
    try:
        import gluoncv
        return gluoncv.__version__
    except Exception:  # noqa: BLE001
        return "?"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", nargs="*", help="model names (default: the whole zoo)")
    p.add_argument("--target-dtype", default="bfloat16")
    p.add_argument("--tol", type=float, default=TOLERANCE)
    p.add_argument("--timeout", type=float, default=120, help="per-model seconds")
    p.add_argument("--budget", type=float, default=None, help="total wall-clock seconds")
    p.add_argument("--nice", type=int, default=0, help="niceness of the workers")
    p.add_argument("--jobs", type=int, default=1, help="models run at once (worker processes)")
    p.add_argument("--resume", action="store_true",
                   help="keep the records already in --json; run only the models missing there")
    p.add_argument("--json", default=None, help="write the records here")
    p.add_argument("--md", default=None, help="write the markdown report here")
    p.add_argument("--report-from", default=None, metavar="JSON",
                   help="only rewrite --md from a sweep's JSON (models missing from it: skipped)")
    p.add_argument("--wall", type=float, default=0.0, help="with --report-from: the run's seconds")
    p.add_argument("--command", default=None, help="with --report-from: the command that ran")
    p.add_argument("--calibrate-bn", action="store_true",
                   help="set BatchNorm statistics from a random batch before export")
    p.add_argument("--worker", metavar="MODEL", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        _worker(a.worker, a.target_dtype, a.tol, a.calibrate_bn)
        return 0
    if a.report_from:
        with open(a.report_from) as f:
            saved = json.load(f)
        from gluoncv import model_zoo
        by_name = {r["model"]: mark_inconclusive(r) for r in saved["records"]}
        records = [by_name.get(m) or {"model": m, "family": family_of(m), "status": "skipped",
                                      "reason": "sweep wall-clock budget spent (heaviest models run last)"}
                   for m in model_zoo.get_model_list()]
        write_markdown(a.md, records, target_dtype=saved["target_dtype"], tol=saved["tolerance"],
                       command=a.command or "python tools/zoo_sweep.py", wall_s=a.wall,
                       timeout=saved.get("timeout_s", a.timeout))
        print(json.dumps(summarize(records), indent=1))
        return 0
    if a.models:
        models = list(a.models)
    else:
        from gluoncv import model_zoo
        models = list(model_zoo.get_model_list())
    done = None
    if a.resume and a.json and os.path.exists(a.json):
        with open(a.json) as f:
            done = {r["model"]: r for r in json.load(f)["records"]
                    if r["status"] not in ("skipped",)}
    t = time.time()
    records = run_sweep(models, target_dtype=a.target_dtype, tol=a.tol, timeout=a.timeout,
                        budget=a.budget, nice=a.nice, jobs=a.jobs, json_path=a.json, done=done,
                        calibrate_bn=a.calibrate_bn)
    wall = time.time() - t
    if a.md:
        command = "python tools/zoo_sweep.py " + " ".join(argv if argv is not None else sys.argv[1:])
        write_markdown(a.md, records, target_dtype=a.target_dtype, tol=a.tol,
                       command=command, wall_s=wall, timeout=a.timeout)
    s = summarize(records)
    print(json.dumps(s, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
