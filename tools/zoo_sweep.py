"""Sweep the gluoncv model zoo: build each model offline, convert it to float16 and to
bfloat16, run it, judge it.

For every name in ``gluoncv.model_zoo.get_model_list()`` (or ``--models``):

1. build it offline (``pretrained=False``, ``pretrained_base=False`` and, for video nets,
   ``use_kinetics_pretrain=False`` where accepted, the classes a ``*_custom`` model needs,
   a segmentation net's crop size set to its input;
   gluoncv's 2D action recognisers, whose zoo functions download their base or trip over
   uninitialised params, from their classes), random He-normal weights; a model that
   cannot be built without downloads is recorded "not buildable offline" with the reason;
2. run it in float32 on a small image-like input (:func:`sample_input`) suited to its
   family (the first of a few sizes that the network accepts);
3. set BatchNorm statistics (``--bn``): ``calibrated`` (default) sets each layer's running
   mean and variance from the activations that reach it on a batch of 4 sample inputs once
   every earlier layer is calibrated, one sequential forward pass
   (:func:`calibrate_batchnorm` for Gluon blocks, :func:`calibrate_graph_batchnorm` on the
   exported graph for BatchNorm ops inside SymbolBlocks, as detector backbones are), so every
   BatchNorm output is normalised as in a trained net; ``identity`` keeps the random-init
   statistics (mean 0, variance 1), under which deep nets reach activations of 1e6..1e15
   (calibrated only where the fp32 model is non-finite so);
4. export it (``HybridBlock.export``, ``mx.model.load_checkpoint``), as a user with a
   checkpoint would, and convert it with :func:`mxnet_amp.convert_model` to each of
   ``--dtypes`` (default float16 and bfloat16);
5. run the converted model with the low precision numerics emulated
   (:mod:`mxnet_amp.emulation`; MXNet runs no float16 on a CPU) and compare with float32;
   bfloat16 also natively where this CPU can (unfused and with oneDNN fusion), recording
   how far the emulation is from the native run with ``rounding='nearest'`` and
   ``'mxnet-cpu'`` (``native_vs_emulated``, ``native_vs_emulated_mxnet_cpu``);
6. run the converted graph with its casts stripped, which must give the float32 outputs
   to float32 roundoff (``structure_err`` <= ``STRUCTURE_TOL``): whatever the precision
   does, the pass must not have lost, rewired or changed an op;
7. convert it with ``mx.contrib.amp.convert_model`` too and run that model emulated the
   same way (``contrib_max_rel_err``), side by side.

A model *passes* in a dtype when it converts, the converted graph runs, the graph without
casts reproduces float32 (step 6), no output is non-finite where float32 is finite, and
every checked float output is within ``--tol`` (default 0.1) of float32, measured as
``max|lp - fp32| / max|fp32|`` per output: the strict tolerance, with no other way to pass.
A failing model also records ``sensitivity_err``: the error of the fp32 model run on input
and weights merely rounded to the dtype, the perturbation any deployment in that dtype
starts from. Random-init nets whose BatchNorm is calibrated are chaotic: centring every
layer's activations removes the common component that keeps an identity-BN net's outputs
stable, and a perturbation then grows layer by layer (measured on resnet50_v1d_0.86 in
bfloat16, i.i.d. noise input: 0.5% after the stem, 7% after stage 2, 50% after the last),
so such a failure
says how sensitive the random net is, not how good the conversion is; ``sensitivity_err``
and mx.contrib.amp's error beside it tell the two apart. A model so chaotic that rounding
only input and weights changes its outputs by half or more is ``inconclusive``. Where a
model fails, :func:`mxnet_amp.auto_convert_model` runs with the same criterion
(``validate=``, emulated, at most ``AUTO_MAX_EXECUTIONS`` executions) and records its
executions and the nodes it keeps in float32.

Degenerate outputs measure nothing and are left out: an fp32 output that vanished (all ~0,
or one constant) or is saturated (>= 90% of its values at its minimum or maximum), see
:func:`degenerate`; a model all of whose checked outputs are degenerate, or whose low
precision outputs equal fp32 exactly although it computes in low precision, is
``degenerate`` and not counted as tested.
Outputs downstream of top-k / NMS / comparisons / box decoding are only checked for
finiteness (random-init scores tie, so rounding picks other boxes, and decoding
exponentiates the regressions); the dense tensors feeding those ops are compared instead.
A model whose fp32 output is already non-finite is recorded ``fp32_nonfinite``.

Each model runs in a process of its own with a per-model timeout; ``--jobs`` of them run
at once, each with ``--threads`` threads (default its share of the cores). Models are run
cheapest first (by a name heuristic) so that a wall-clock budget skips the heaviest ones,
each recorded with the reason; each record notes the load average when it finished.

Usage::

    python tools/zoo_sweep.py --jobs 1 --threads 1 --timeout 400 --budget 4500 \
        --json docs/zoo_sweep.json --md docs/zoo_sweep.md      # the whole zoo, both dtypes
    python tools/zoo_sweep.py --models resnet18_v1 ssd_300_mobilenet0.25_voc   # a subset
    python tools/zoo_sweep.py --dtypes float16 --bn identity --models resnet101_v1
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
           "cost_rank", "degenerate", "calibrate_batchnorm", "calibrate_graph_batchnorm",
           "summarize", "per_dtype", "cause_of",
           "TOLERANCE", "DTYPES"]

TOLERANCE = 0.1  # max |lp - fp32| / max |fp32| per output (see the module doc)
DTYPES = ("float16", "bfloat16")
# auto mode's execution budget per failing model and dtype (bounds the sweep's time)
AUTO_MAX_EXECUTIONS = 24
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


def sample_input(shape: tuple[int, ...]):
    """A random image-like input of ``shape`` (N, C, [T,] H, W): a smooth random field (uniform
    noise on a grid 8x coarser, bilinearly upsampled) plus 10% fine noise, in about [-1, 1].

    Natural images vary most at coarse scales; i.i.d. pixel noise does not, and through a
    deep random net it averages out to features that barely differ between positions and
    samples, which calibrated BatchNorm then blows up (with rounding errors). Measured with
    calibrated BatchNorm: resnet50_v1d_0.86's bfloat16 error 0.32 on pixel noise, 0.055 on
    these inputs; resnet101_v1's float16 error 0.11 and 0.048."""
    import mxnet as mx
    n, c, *rest = shape
    h, w = rest[-2:]
    planes = n * c * int(np_prod(rest[:-2]))
    coarse = mx.nd.random.uniform(-1, 1, shape=(1, planes, max(2, h // 8), max(2, w // 8)))
    smooth = mx.nd.contrib.BilinearResize2D(coarse, height=h, width=w)
    fine = mx.nd.random.uniform(-0.1, 0.1, shape=(1, planes, h, w))
    return (smooth + fine).reshape(tuple(shape))


def np_prod(values) -> int:
    out = 1
    for v in values:
        out *= int(v)
    return out


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
    """Set every BatchNorm's running mean and variance to the statistics of its input on
    ``batch`` random inputs of ``shape``, layer after layer; returns how many layers were
    calibrated.

    With BatchNorm at identity a deep random-init net is not normalised: activations grow
    to 1e6..1e15 through deep stacks, beyond float16's range, where a trained net keeps them
    O(1). Calibrated, every BN output is zero-mean unit-variance per channel, as in a
    trained model. One forward pass in predict mode, run imperatively so that each
    BatchNorm's pre-forward hook sees its actual input: the hook sets the layer's statistics
    from that input before the layer normalises it, so each layer is calibrated on the
    activations that reach it once every earlier layer is calibrated (a sequential pass,
    without dropout or a detector's training branch). A net that cannot run imperatively
    falls back to train-mode batch statistics (:func:`_calibrate_batchnorm_train_mode`).
    ``net`` must have run once (its params initialised); it is hybridized again after."""
    import mxnet as mx
    from mxnet import autograd
    bns = _batchnorms(net)
    if not bns:
        return 0
    seen: set[int] = set()

    def set_stats(block, inputs):
        mean, var = _batch_stats(inputs[0], block._kwargs.get("axis", 1))
        block.running_mean.set_data(mean)
        block.running_var.set_data(var)
        seen.add(id(block))

    def forward(x):
        with autograd.predict_mode():
            net(x)

    net.hybridize(active=False)  # hooks fire only for blocks called imperatively
    handles = [b.register_forward_pre_hook(set_stats) for b in bns]
    try:
        x_cal = _on_sample_batch(shape, batch, forward)
    finally:
        for h in handles:
            h.detach()
        net.hybridize()
    net(x_cal[:shape[0]])  # re-trace for export
    mx.nd.waitall()
    return len(seen)


def _calibrate_batchnorm_train_mode(net, shape: tuple[int, ...], batch: int = 4) -> int:
    """:func:`calibrate_batchnorm` for nets that do not run imperatively: one recorded
    train-mode forward and backward with momentum 0 (and frozen layers unfrozen) writes the
    batch statistics, since MXNet updates them in the backward pass. Train mode also turns
    on dropout and a detector's training branch, so this is only the fallback; the graph
    is then rebuilt with the layers' own settings."""
    import mxnet as mx
    import numpy as np
    from mxnet import autograd
    bns = _batchnorms(net)
    if not bns:
        return 0
    saved = [dict(b._kwargs) for b in bns]
    for b in bns:
        b._kwargs.update(momentum=0.0, use_global_stats=False)
    def forward_backward(x):
        # trace for inference first: in train mode gluoncv's detectors trace their
        # training branch; the cached graph then runs with is_train=True below
        net._clear_cached_op()
        net(x)
        # MXNet updates the running statistics in BatchNorm's backward pass
        with autograd.record(train_mode=True):
            outs = net(x)
        outs = [o for o in (outs if isinstance(outs, (list, tuple)) else [outs])
                if np.dtype(o.dtype).kind == "f"]
        autograd.backward(outs, [mx.nd.ones_like(o) for o in outs])

    try:
        x_cal = _on_sample_batch(shape, batch, forward_backward)
    finally:
        for b, kwargs in zip(bns, saved):
            b._kwargs.clear()
            b._kwargs.update(kwargs)
        net._clear_cached_op()
    net(x_cal[:shape[0]])  # re-trace with the layers' own settings, for export
    mx.nd.waitall()
    return len(bns)


def calibrate_graph_batchnorm(sym, args: dict, auxs: dict, shape: tuple[int, ...],
                              batch: int = 4) -> tuple[dict, int]:
    """:func:`calibrate_batchnorm` for BatchNorm ops that are no Gluon ``BatchNorm`` block
    (inside a ``SymbolBlock``, as gluoncv's detectors hold their backbones): on the exported
    symbol, the ones still at identity (moving mean all 0, variance all 1) get the
    statistics of their input on ``batch`` random inputs of ``shape``. One pass over the
    graph in topological order, each op run imperatively, so each BatchNorm sees its input
    once every BatchNorm before it is calibrated. Returns new aux params and how many
    layers were calibrated (0: the same dict back)."""
    import ctypes

    from mxnet._ctypes.ndarray import _imperative_invoke
    from mxnet.base import _LIB, check_call

    from mxnet_amp.io import graph_from_symbol
    graph = graph_from_symbol(sym)

    def at_identity(node) -> bool:
        mean, var = (graph.nodes[e.node].name for e in node.inputs[3:5])
        return (mean in auxs and var in auxs and not auxs[mean].asnumpy().any()
                and bool((auxs[var].asnumpy() == 1).all()))
    todo = {i for i, n in enumerate(graph.nodes) if n.op == "BatchNorm" and len(n.inputs) == 5
            and at_identity(n)}
    if not todo:
        return auxs, 0
    new_auxs = dict(auxs)

    def forward(data):
        new_auxs.update(auxs)  # a retry with another batch size starts afresh
        values: list[list] = []
        for i, node in enumerate(graph.nodes):
            if node.is_variable:
                values.append([data if node.name == "data" else
                               args.get(node.name, new_auxs.get(node.name))])
                continue
            inputs = [values[e.node][e.index] for e in node.inputs]
            if i in todo:
                inputs[3], inputs[4] = _batch_stats(inputs[0], int(node.attrs.get("axis", 1)))
                new_auxs[graph.nodes[node.inputs[3].node].name] = inputs[3]
                new_auxs[graph.nodes[node.inputs[4].node].name] = inputs[4]
            handle = ctypes.c_void_p()
            check_call(_LIB.NNGetOpHandle(node.op.encode(), ctypes.byref(handle)))
            attrs = {k: v for k, v in node.attrs.items() if not k.startswith("__")}
            values.append(_imperative_invoke(handle.value, inputs, list(attrs), list(attrs.values()),
                                             None, False, True))
    _on_sample_batch(shape, batch, forward)
    return new_auxs, len(todo)


def _on_sample_batch(shape: tuple[int, ...], batch: int, run):
    """``run(x)`` on ``batch`` sample inputs of ``shape`` or, where MXNet rejects that batch
    size (a net with a fixed batch), on as many as ``shape`` has; returns the ``x`` used."""
    import mxnet as mx
    *first, own = dict.fromkeys((batch, shape[0]))
    for n in first:
        x = sample_input((n,) + tuple(shape[1:]))
        try:
            run(x)
            mx.nd.waitall()
            return x
        except mx.MXNetError:
            pass  # a net with a fixed batch size: its own
    x = sample_input((own,) + tuple(shape[1:]))
    run(x)
    mx.nd.waitall()
    return x


def _batch_stats(x, axis: int):
    """Per-channel (``axis``) mean and biased variance of ``x``."""
    axis %= x.ndim
    axes = tuple(i for i in range(x.ndim) if i != axis)
    mean = x.mean(axis=axes)
    centred = x - mean.reshape(tuple(-1 if i == axis else 1 for i in range(x.ndim)))
    return mean, (centred * centred).mean(axis=axes)


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
            x = sample_input(shape)
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


_CASTS = ("amp_cast", "amp_multicast", "Cast", "cast")


def _named(graph, skip_casts: bool = True) -> dict[tuple[str, int], int]:
    """``(name, occurrence) -> node index``: gluon repeats names when a block runs twice
    (an FPN's shared head), so a name alone does not find a node; casts a conversion or an
    emulation inserted do not count."""
    seen: dict[str, int] = {}
    found = {}
    for i, n in enumerate(graph.nodes):
        if skip_casts and n.op in _CASTS:
            continue
        k = seen.get(n.name, 0)
        seen[n.name] = k + 1
        found[(n.name, k)] = i
    return found


def _with_heads(sym, entries):
    """``sym`` with extra outputs: ``(node name, occurrence, output index)`` triples (see
    :func:`_named`); for a low precision output of an emulated graph, its rounded copy."""
    from mxnet_amp.graph import Entry, Graph
    from mxnet_amp.io import graph_from_symbol, graph_to_symbol
    g = graph_from_symbol(sym)
    index = _named(g)
    # an emulated low precision output x is read through amp_cast(cast(x, low), float32)
    rounded = {}
    for j, n in enumerate(g.nodes):
        if n.op == "amp_cast" and n.attrs.get("dtype") == "float32":
            inner = g.nodes[n.inputs[0].node]
            if inner.op in _CASTS and inner.attrs.get("dtype") != "float32":
                rounded[(inner.inputs[0].node, inner.inputs[0].index)] = j
    heads = list(g.heads)
    for name, occurrence, k in entries:
        i = index[(name, occurrence)]
        heads.append(Entry(rounded[(i, k)]) if (i, k) in rounded else Entry(i, k))
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


def degenerate(ref) -> str | None:
    """Why the float32 output ``ref`` (numpy) measures nothing, or None: *vanished* (all
    ~0, or one constant value: every rounding error relative to it is 0 or meaningless) or
    *saturated* (nearly every element at the tensor's minimum or maximum, as sigmoids of
    huge random-init logits are: rounding cannot move them)."""
    import numpy as np
    r = np.asarray(ref, dtype=np.float64)
    r = r[np.isfinite(r)]
    if not r.size:
        return None
    top = float(np.abs(r).max())
    if top < 1e-30:
        return "vanished: all ~0"
    spread = float(r.max() - r.min())
    if r.size > 1 and spread <= 1e-6 * top:
        return f"vanished: constant {float(r.flat[0]):.3g}"
    if r.size >= 16:
        at_ends = np.mean((r <= r.min() + 1e-6 * spread) | (r >= r.max() - 1e-6 * spread))
        if at_ends >= 0.9:
            return f"saturated: {100 * at_ends:.0f}% of values at the minimum or maximum"
    return None


class _Model:
    """One zoo model prepared for the sweep: built, BatchNorm set, exported, its float32
    reference computed on the outputs the sweep checks (see :func:`checked_entries`)."""

    def __init__(self, name: str, bn: str):
        import mxnet as mx
        import numpy as np
        self.rec: dict[str, Any] = {"model": name, "family": family_of(name), "bn": bn}
        mx.random.seed(0)  # the same random weights and input on every run
        np.random.seed(0)
        t0 = time.time()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            net, shape, self.x = _fp32_forward(name)
            calibrated = self._set_batchnorm(net, shape, bn)
        self.rec.update(input_shape=list(shape), calibrated_batchnorms=calibrated,
                        params_m=round(sum(int(p.data().size) for p in net.collect_params().values()
                                           if p._data is not None) / 1e6, 2))
        self.net = net
        self.rec["build_s"] = round(time.time() - t0, 2)

    def _set_batchnorm(self, net, shape, bn: str) -> int:
        if bn == "identity":
            return 0
        try:
            return calibrate_batchnorm(net, shape)
        except Exception as err:  # noqa: BLE001 - a net that only runs hybridized
            self.rec["bn_note"] = ("sequential calibration failed (" + _first_line(err)[:120]
                                   + "); train-mode batch statistics instead")
            return _calibrate_batchnorm_train_mode(net, shape)

    def export(self) -> None:
        """Export as a user with a checkpoint would, drop the net; the fp32 reference."""
        import mxnet as mx
        import numpy as np
        with tempfile.TemporaryDirectory(prefix="zoo_sweep_") as tmp:
            self.net.export(os.path.join(tmp, "m"))
            self.sym, self.args, self.auxs = mx.model.load_checkpoint(os.path.join(tmp, "m"), 0)
        self.data_names = [n for n in self.sym.list_arguments() if n not in self.args]
        if self.data_names != ["data"]:
            return
        self.rec["batchnorms_in_graph"] = sum(1 for n in self.sym.list_auxiliary_states()
                                              if n.endswith(("_running_var", "_moving_var")))
        if self.rec["bn"] == "calibrated":
            # BatchNorm ops no Gluon block holds (a detector's SymbolBlock backbone)
            try:
                self.auxs, n = calibrate_graph_batchnorm(self.sym, self.args, self.auxs,
                                                         tuple(self.rec["input_shape"]))
            except Exception as err:  # noqa: BLE001 - an op MXNet cannot run imperatively
                n = 0
                self.rec["bn_note"] = ("graph calibration failed (" + _first_line(err)[:120]
                                       + "); those BatchNorm layers stay at identity")
            self.rec["calibrated_batchnorms"] += n
            self.rec["calibrated_in_graph"] = n
        self.data = {"data": self.x}
        from mxnet_amp.io import graph_from_symbol
        g32 = graph_from_symbol(self.sym)
        self.n_heads = len(g32.heads)
        dense, self.after, extra = checked_entries(g32)
        where = {i: key for key, i in _named(g32).items()}
        self.extra_names = [(*where[e.node], e.index) for e in extra]
        t1 = time.time()
        ref = _bind_forward(self.probe(self.sym), self.args, self.auxs, self.data)
        self.rec["fp32_run_s"] = round(time.time() - t1, 2)
        floats = [k for k, r in enumerate(ref) if np.issubdtype(r.dtype, np.floating)]
        checked = [k for k in dense + list(range(self.n_heads, self.n_heads + len(extra))) if k in floats]
        self.dense = [k for k in dense if k in floats]
        self.finite = all(np.isfinite(ref[k]).all() for k in floats)
        why = {k: degenerate(ref[k]) for k in checked}
        self.degenerate = {k: w for k, w in why.items() if w}
        self.checked = [k for k in checked if k not in self.degenerate]
        self.ref = ref

    def probe(self, sym):
        """``sym`` with the pre-boundary tensors as extra outputs."""
        return _with_heads(sym, self.extra_names) if self.extra_names else sym

    def errors(self, got) -> dict:
        """``compare`` on the checked outputs, non-finite outputs over all outputs."""
        cmp = compare([self.ref[k] for k in self.checked], [got[k] for k in self.checked])
        if "error" in cmp:
            return cmp
        post = compare([self.ref[k] for k in self.after], [got[k] for k in self.after])
        nonfinite = sorted({self.checked[k] for k in cmp["nonfinite_outputs"]}
                           | {self.after[k] for k in post.get("nonfinite_outputs", [])})
        return {**cmp, "nonfinite_outputs": nonfinite, "after_ordering_err": post.get("max_rel_err")}


def sweep_one(name: str, dtypes: Sequence[str] = DTYPES, tol: float = TOLERANCE,
              native: bool | None = None, bn: str = "calibrated",
              auto_dtypes: Sequence[str] | None = None) -> dict[str, Any]:
    """Build one zoo model, convert it to each of ``dtypes``, run and judge it; a JSON-able
    record: the model's facts, and under each dtype name that dtype's record (``status``,
    errors, mx.contrib.amp's error, native runs, auto mode where it failed).

    ``bn``: ``'calibrated'`` (:func:`calibrate_batchnorm`, the default) or ``'identity'``
    (random-init BatchNorm statistics: mean 0, variance 1; a model that is then non-finite
    in float32 is calibrated after all, ``bn_calibrated_because``). ``native``: also run
    bfloat16 natively (default: where this CPU can). ``auto_dtypes``: where one of these
    dtypes (default: all) fails, run :func:`mxnet_amp.auto_convert_model` with the sweep's
    criterion and record what it keeps."""
    from mxnet_amp.hardware import bf16_runs_natively
    t0 = time.time()
    try:
        model = _Model(name, bn)
    except Exception as err:  # noqa: BLE001 - recorded as not buildable
        return _for_all(dtypes, {"model": name, "family": family_of(name), "bn": bn,
                                 "build_s": round(time.time() - t0, 2)},
                        status="not_buildable", reason=_first_line(err))
    rec = model.rec
    try:  # the Gluon adapter path, conversion only (no run)
        from mxnet_amp.gluon import convert_hybrid_block
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for dtype in dtypes:
                convert_hybrid_block(model.net, target_dtype=dtype)
        rec["gluon_adapter"] = "ok"
    except Exception as err:  # noqa: BLE001
        rec["gluon_adapter"] = "error: " + _first_line(err)[:200]
    try:
        model.export()
    except Exception as err:  # noqa: BLE001
        return _for_all(dtypes, rec, status="not_buildable", reason="export / fp32 run failed: " + _first_line(err))
    del model.net
    if model.data_names != ["data"]:
        return _for_all(dtypes, rec, status="not_buildable",
                        reason=f"takes inputs {model.data_names}, the sweep feeds one image")
    if not model.finite:
        if bn == "identity" and _batchnorms_in(model.sym):
            # with BatchNorm at identity, box decoding exponentiates huge activations:
            # normalised as in a trained model, the same random net stays finite
            del model
            rec = sweep_one(name, dtypes, tol, native, "calibrated", auto_dtypes)
            rec["bn_calibrated_because"] = "fp32 non-finite with BatchNorm at identity"
            return rec
        return _for_all(dtypes, rec, status="fp32_nonfinite",
                        reason="the random-init fp32 model itself gives non-finite outputs; nothing to compare")
    rec["degenerate_outputs"] = {str(k): w for k, w in model.degenerate.items()}
    rec["checked_outputs"] = len(model.checked)
    rec["pre_ordering_tensors"] = [f"{n}{f'#{o}' if o else ''}:{k}" for n, o, k in model.extra_names]
    native = bf16_runs_natively() if native is None else native
    for dtype in dtypes:
        t1 = time.time()
        rec[dtype] = _sweep_dtype(model, dtype, tol, native and dtype == "bfloat16",
                                  auto_dtypes is None or dtype in auto_dtypes)
        rec[dtype]["dtype_s"] = round(time.time() - t1, 2)
    rec["total_s"] = round(time.time() - t0, 2)
    return rec


def _for_all(dtypes: Sequence[str], rec: dict, **per_dtype) -> dict:
    """``rec`` with the same per-dtype record under every dtype (a model that never got
    as far as a conversion)."""
    return {**rec, **{d: dict(per_dtype) for d in dtypes}}


def _sweep_dtype(model: _Model, dtype: str, tol: float, native: bool, auto: bool) -> dict:
    """Convert ``model`` to ``dtype``, run it emulated (and natively), judge it."""
    import mxnet as mx

    import mxnet_amp
    from mxnet_amp.convert import convert_model_full
    from mxnet_amp.emulation import emulate_model
    from mxnet_amp.options import make_options
    rec: dict[str, Any] = {}
    sym, args, auxs, data = model.sym, model.args, model.auxs, model.data
    t = time.time()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            # weights stay float32 (cast in the graph): the structure check below runs the
            # cast-stripped graph on them and must reproduce fp32 exactly; the low precision
            # numerics are the same as with weights stored converted
            csym, cargs, cauxs, conv = convert_model_full(
                sym, args, auxs, make_options(dtype, cast_optional_params=False))
        rec["warnings"] = sorted({str(w.message)[:200] for w in caught})
    except mxnet_amp.AMPError as err:
        return {**rec, "status": "fail", "reason": "convert: " + _first_line(err)}
    except Exception as err:  # noqa: BLE001 - an untyped error is a bug worth reporting
        return {**rec, "status": "fail", "reason": "convert (untyped error): " + _first_line(err)}
    rec.update(convert_s=round(time.time() - t, 2), casts=conv.result.casts,
               multicasts=conv.result.multicasts, fallbacks=len(conv.result.fallbacks),
               low_precision_nodes=sum(1 for d in conv.result.node_dtypes.values() if d == dtype),
               op_nodes=len(conv.result.node_dtypes))
    t = time.time()
    try:
        esym, eargs, eauxs = emulate_model(csym, cargs, cauxs)
        got = _bind_forward(model.probe(esym), eargs, eauxs, data)
    except Exception as err:  # noqa: BLE001
        return {**rec, "status": "fail", "reason": "emulated run: " + _first_line(err)}
    rec["emulated_run_s"] = round(time.time() - t, 2)
    try:
        wide = _bind_forward(model.probe(strip_casts(csym)), _widened(cargs), _widened(cauxs), data)
        rec["structure_err"] = model.errors(wide)["max_rel_err"]
    except Exception as err:  # noqa: BLE001
        return {**rec, "status": "fail", "reason": "converted graph without its casts: " + _first_line(err)}
    cmp = model.errors(got)
    if "error" in cmp:
        return {**rec, "status": "fail", "reason": cmp["error"]}
    rec.update(max_rel_err=cmp["max_rel_err"], nonfinite_outputs=cmp["nonfinite_outputs"],
               after_ordering_err=cmp["after_ordering_err"])
    _contrib(model, dtype, rec)
    if native and model.dense:
        _native_runs(model, (csym, cargs, cauxs), got, rec)
    err = cmp["max_rel_err"]
    if rec["structure_err"] > STRUCTURE_TOL:
        rec.update(status="fail", reason=f"the converted graph without its casts differs from fp32 by "
                   f"{rec['structure_err']:.3g} (> {STRUCTURE_TOL}): the pass changed the computation")
        return rec
    if not model.checked:
        rec.update(status="degenerate", reason="every checked fp32 output is degenerate: "
                   + "; ".join(sorted(set(model.degenerate.values()))))
        return rec
    if not cmp["nonfinite_outputs"] and err <= tol:
        if err == 0.0 and rec["low_precision_nodes"] > 0:
            rec.update(status="degenerate", reason="saturated: outputs identical to fp32 although "
                       "it computes in low precision")
        else:
            rec["status"] = "pass"
        return rec
    if cmp["nonfinite_outputs"]:
        rec["reason"] = f"non-finite outputs {cmp['nonfinite_outputs']} where fp32 is finite"
    else:
        sens = _sensitivity(model, dtype, rec)
        if sens is not None and sens >= 0.5:
            rec.update(status="inconclusive", reason=f"rounding only input and weights already changes "
                       f"the outputs by {sens:.2g}: a chaotic random-init model, nothing measured")
            return rec
        rec["reason"] = (f"max rel error {err:.3g} > tolerance {tol}; rounding only input and weights "
                         f"to {dtype} gives {'?' if sens is None else f'{sens:.3g}'}")
    rec["status"] = "fail"
    if auto:
        _auto(model, dtype, tol, rec)
    return rec


def _contrib(model: _Model, dtype: str, rec: dict) -> None:
    """mx.contrib.amp's conversion of the same model, emulated the same way: its error."""
    from mxnet_amp.emulation import emulate_model
    try:
        from mxnet.contrib import amp as contrib_amp
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # on copies: contrib casts some params in the dicts it is given (measured: the
            # weights of deformable convolutions, to float16), which the next dtype would see
            converted = contrib_amp.convert_model(model.sym, _copies(model.args), _copies(model.auxs),
                                                  target_dtype=dtype)
        rec["contrib_amp"] = "ok"
    except Exception as err:  # noqa: BLE001
        rec["contrib_amp"] = "error: " + _first_line(err)[:160]
        return
    try:
        esym, eargs, eauxs = emulate_model(*converted)
        pgot = _bind_forward(model.probe(esym), eargs, eauxs, model.data)
        pcmp = model.errors(pgot)
        rec["contrib_max_rel_err"] = pcmp.get("max_rel_err")
        rec["contrib_nonfinite_outputs"] = pcmp.get("nonfinite_outputs")
    except Exception as err:  # noqa: BLE001 - recorded, not the pass criterion
        rec["contrib_emulated"] = "error: " + _first_line(err)


def _native_runs(model: _Model, converted, emulated_out, rec: dict) -> None:
    """bfloat16 run natively: unfused (``MXNET_SUBGRAPH_BACKEND=NONE``, the numerics the
    emulation models) and with oneDNN fusion (what a user gets); and the emulation's
    fidelity: unfused native against emulated, ``rounding='nearest'`` and ``'mxnet-cpu'``.
    On copies of the params: the fp32 runs had oneDNN reorder the shared arrays in place,
    and MXNet 1.9.1 then fails bf16 grouped convolutions reading them."""
    from mxnet_amp.emulation import emulate_model
    csym, cargs, cauxs = converted
    dense = model.dense
    for key, backend in (("native", "NONE"), ("native_fused", None)):
        try:
            nout = _bind_forward(csym, _copies(cargs), _copies(cauxs), model.data, backend)[:model.n_heads]
        except Exception as err:  # noqa: BLE001
            rec[key] = "error: " + _first_line(err)
            continue
        ncmp = compare([model.ref[k] for k in dense], [nout[k] for k in dense])
        rec[f"{key}_max_rel_err"] = ncmp.get("max_rel_err")
        rec[f"{key}_nonfinite_outputs"] = ncmp.get("nonfinite_outputs")
        if key != "native":
            continue
        try:
            tsym, targs, tauxs = emulate_model(csym, cargs, cauxs, rounding="mxnet-cpu")
            trunc = _bind_forward(tsym, targs, tauxs, model.data)
        except Exception as err:  # noqa: BLE001
            rec["emulated_mxnet_cpu"] = "error: " + _first_line(err)
            continue
        rec["emulated_mxnet_cpu_max_rel_err"] = compare([model.ref[k] for k in dense],
                                                        [trunc[k] for k in dense]).get("max_rel_err")
        rec["native_vs_emulated"] = _scaled_diff(model, nout, emulated_out)
        rec["native_vs_emulated_mxnet_cpu"] = _scaled_diff(model, nout, trunc)


def _scaled_diff(model: _Model, a, b) -> float:
    """``max |a - b| / max |fp32|`` over the dense outputs (finite elements)."""
    import numpy as np
    worst = 0.0
    for k in model.dense:
        r = np.asarray(model.ref[k], np.float64)
        fin = np.isfinite(r) & np.isfinite(a[k]) & np.isfinite(b[k])
        scale = float(np.abs(r[fin]).max()) if fin.any() else 0.0
        if scale > 0:
            worst = max(worst, float(np.abs(np.asarray(a[k], np.float64)[fin] - b[k][fin]).max()) / scale)
    return worst


def _sensitivity(model: _Model, dtype: str, rec: dict) -> float | None:
    """How far fp32 compute on the input and weights merely rounded to ``dtype`` moves the
    outputs: the perturbation any deployment in that dtype starts from."""
    import mxnet as mx
    try:
        rargs = {k: mx.nd.array(round_np(v.asnumpy(), dtype)) for k, v in model.args.items()}
        rdata = {"data": mx.nd.array(round_np(model.x.asnumpy(), dtype))}
        pref = _bind_forward(model.probe(model.sym), rargs, model.auxs, rdata)
        rec["sensitivity_err"] = model.errors(pref)["max_rel_err"]
    except Exception as err:  # noqa: BLE001
        rec["sensitivity"] = "error: " + _first_line(err)
    return rec.get("sensitivity_err")


def _auto(model: _Model, dtype: str, tol: float, rec: dict) -> None:
    """``auto_convert_model`` on the failing model with the sweep's own criterion (every
    checked tensor, the tensors before NMS / top-k included, within ``tol`` relative to its
    scale, nothing non-finite where fp32 is finite), emulated: how many executions it
    takes, what it keeps in float32. It converts the model with those tensors as extra
    outputs: auto mode judges outputs, and a detector's final ones are only checked for
    finiteness."""
    import numpy as np

    from mxnet_amp.auto import auto_convert_model
    checked = model.checked

    def validate(ref, out) -> bool:
        cmp = compare([ref[k] for k in checked], [out[k] for k in checked])
        finite = all(np.isfinite(o[np.isfinite(r)]).all() for r, o in zip(ref, out)
                     if np.issubdtype(np.asarray(r).dtype, np.floating))
        return "error" not in cmp and finite and cmp["max_rel_err"] <= tol
    t = time.time()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _, _, _, report = auto_convert_model(model.probe(model.sym), _copies(model.args),
                                                 _copies(model.auxs), model.data,
                                                 target_dtype=dtype, validate=validate,
                                                 execution="emulated", quiet=True,
                                                 max_executions=AUTO_MAX_EXECUTIONS)
        rec.update(auto_executions=report.executions, auto_validated=bool(report.validated),
                   auto_kept_fp32=[k.name for k in report.kept_fp32][:20],
                   auto_kept_count=len(report.kept_fp32),
                   auto_low_precision_nodes=report.low_precision_nodes, auto_s=round(time.time() - t, 1))
    except Exception as err:  # noqa: BLE001
        rec["auto"] = "error: " + _first_line(err)


# --------------------------------------------------------------------------- worker / driver

def _worker(name: str, dtypes: Sequence[str], tol: float, bn: str, auto_dtypes: Sequence[str]) -> None:
    """Sweep ``name``; write its JSON record as one line on stdout."""
    out = sys.stdout
    sys.stdout = sys.stderr  # library prints must not corrupt the record
    try:
        rec = sweep_one(name, dtypes, tol, bn=bn, auto_dtypes=auto_dtypes)
    except BaseException as err:  # noqa: BLE001 - a record, not a traceback
        rec = _for_all(dtypes, {"model": name, "family": family_of(name)}, status="fail",
                       reason="sweep crashed: " + _first_line(err))
    out.write(json.dumps(rec) + "\n")
    out.flush()


class _Worker:
    """A worker process sweeping one model, asynchronously: one process per model, as in
    a long-lived one, state MXNet kept from earlier models made later ones crash or go
    non-finite (each of them alone is fine)."""

    def __init__(self, name: str, timeout: float, dtypes: Sequence[str], tol: float, nice: int,
                 threads: int, bn: str, auto_dtypes: Sequence[str]):
        env = dict(os.environ)
        env["OMP_NUM_THREADS"] = str(threads)
        env.pop("MXNET_SUBGRAPH_BACKEND", None)  # chosen per bind (_subgraph_backend)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [_repo_root(), env.get("PYTHONPATH")]))
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", name,
               "--dtypes", *dtypes, "--tol", str(tol), "--bn", bn, "--auto-dtypes", *auto_dtypes]
        self.model, self.dtypes, self.started = name, tuple(dtypes), time.time()
        self.deadline = self.started + timeout
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env, text=True,
                                     preexec_fn=(lambda: os.nice(nice)) if nice else None)

    def result(self) -> dict:
        """The model's record (call once the process's stdout is readable)."""
        line = self.proc.stdout.readline()
        return json.loads(line) if line else _for_all(
            self.dtypes, {"model": self.model, "family": family_of(self.model)}, status="fail",
            reason="worker died (crash or out of memory)")

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()


def _repo_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _load_avg() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def run_sweep(models: Sequence[str], *, dtypes: Sequence[str] = DTYPES, tol: float = TOLERANCE,
              timeout: float = 120, budget: float | None = None, nice: int = 0, jobs: int = 1,
              json_path: str | None = None, progress: bool = True,
              done: dict[str, dict] | None = None, bn: str = "calibrated",
              threads: int | None = None, auto_dtypes: Sequence[str] | None = None) -> list[dict]:
    """Sweep ``models`` (cheapest first) in ``jobs`` worker processes of ``threads`` threads
    each (default ``cpu_count // jobs``); the records, in list order. ``done``: records kept from an earlier run
    (those models are not run again). Each record notes the 1-minute load average when its
    model finished (``load_avg``), to read its timings by."""
    records: dict[str, dict] = dict(done or {})
    queue = [m for m in sorted(models, key=cost_rank) if m not in records]
    threads = threads or max(1, (os.cpu_count() or 1) // jobs)
    auto_dtypes = tuple(dtypes if auto_dtypes is None else auto_dtypes)
    start = time.time()
    workers: list[_Worker] = []

    def finish(worker: _Worker, rec: dict) -> None:
        rec["wall_s"] = round(time.time() - worker.started, 1)
        rec["load_avg"] = _load_avg()
        rec["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        records[rec["model"]] = rec
        if progress:
            cells = "  ".join(f"{d}: {rec[d]['status']} {rec[d].get('max_rel_err', '')!s:.8s}"
                              for d in dtypes if d in rec)
            print(f"[{time.time() - start:6.0f}s] {rec['model']:45s} {cells}  "
                  f"{next((rec[d].get('reason', '') for d in dtypes if rec.get(d, {}).get('reason')), '')[:80]}",
                  flush=True)
        if json_path:
            _write_json(json_path, [records[m] for m in models if m in records], dtypes, tol, timeout, bn)

    while queue or workers:
        left = None if budget is None else budget - (time.time() - start)
        if left is not None and left < 5:
            for name in queue:
                records[name] = _for_all(dtypes, {"model": name, "family": family_of(name)},
                                         status="skipped",
                                         reason="sweep wall-clock budget spent (heaviest models run last)")
            queue = []
        while queue and len(workers) < jobs:
            workers.append(_Worker(queue.pop(0), timeout if left is None else min(timeout, left),
                                   dtypes, tol, nice, threads, bn, auto_dtypes))
        if not workers:
            continue
        wait = max(0.0, min(w.deadline for w in workers) - time.time())
        ready, _, _ = select.select([w.proc.stdout for w in workers], [], [], wait)
        for worker in list(workers):
            if worker.proc.stdout in ready:
                rec = worker.result()
            elif time.time() >= worker.deadline:
                timed_out = worker.deadline - worker.started >= timeout
                rec = _for_all(dtypes, {"model": worker.model, "family": family_of(worker.model)},
                               status="timeout" if timed_out else "skipped",
                               reason=(f"over the per-model timeout of {timeout:g} s"
                                       if timed_out else "sweep wall-clock budget spent"))
            else:
                continue
            worker.kill()
            workers.remove(worker)
            finish(worker, rec)
    return [records[m] for m in models]


def _write_json(path: str, records: list[dict], dtypes: Sequence[str], tol: float,
                timeout: float, bn: str) -> None:
    from mxnet_amp.io import atomic_write
    body = json.dumps({"dtypes": list(dtypes), "tolerance": tol, "timeout_s": timeout, "bn": bn,
                       "records": records}, indent=1)

    def write(tmp):
        with open(tmp, "w") as f:
            f.write(body)
    atomic_write(path, write)


def per_dtype(records: Sequence[dict], dtype: str) -> list[dict]:
    """One flat record per model for ``dtype``: the model's facts plus that dtype's record."""
    flat = []
    for r in records:
        common = {k: v for k, v in r.items() if not isinstance(v, dict) or k == "degenerate_outputs"}
        flat.append({**common, **r.get(dtype, {"status": "skipped", "reason": "not run in this dtype"})})
    return flat


def summarize(records: Sequence[dict], dtype: str, tol: float = TOLERANCE) -> dict:
    """For ``dtype``: counts by status, the pass rate over tested models (pass + fail),
    the non-finite models, error percentiles."""
    import numpy as np
    flat = per_dtype(records, dtype)
    counts: dict[str, int] = {}
    for r in flat:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    tested = counts.get("pass", 0) + counts.get("fail", 0)
    nonfinite = [r["model"] for r in flat if r.get("nonfinite_outputs")]
    errs = np.array([r["max_rel_err"] for r in flat
                     if r.get("max_rel_err") is not None and r["status"] in ("pass", "fail")])
    pct = ({q: float(np.percentile(errs, q)) for q in (50, 90, 100)} if errs.size else {})
    return {"dtype": dtype, "counts": counts, "tested": tested,
            "pass_rate": counts.get("pass", 0) / tested if tested else 0.0,
            "nonfinite_models": nonfinite, "err_percentiles": pct,
            "failures": [r["model"] for r in flat if r["status"] == "fail"]}


_STATUS_ORDER = ["pass", "fail", "degenerate", "inconclusive", "not_buildable", "fp32_nonfinite",
                 "timeout", "skipped"]


def _fmt(value, spec: str = ".2g") -> str:
    return "" if value is None else format(value, spec)


def write_markdown(path: str, records: Sequence[dict], *, dtypes: Sequence[str], tol: float,
                   command: str, wall_s: float, timeout: float, bn: str,
                   preamble: Sequence[str] = ()) -> None:
    """Write the sweep report ``path`` (markdown): per dtype a summary, the failures with
    their causes, degenerate models; emulation fidelity; one row per model."""
    import mxnet as mx

    from mxnet_amp.hardware import bf16_runs_natively
    from mxnet_amp.io import atomic_write
    loads = [r["load_avg"] for r in records if r.get("load_avg") is not None]
    ran = [r for r in records if r.get(dtypes[0], {}).get("status") != "skipped"]
    lines = [
        f"# gluoncv model zoo sweep: {' and '.join(dtypes)} conversion",
        "",
        f"Run: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {wall_s / 60:.0f} min wall clock, "
        f"{len(ran)} models, `{command}`."
        + (f" Load average while it ran (1 min, at each model's end; 2 cores shared with other "
           f"work): median {sorted(loads)[len(loads) // 2]:.1f}, max {max(loads):.1f}." if loads else ""),
        f"MXNet {mx.__version__}, gluoncv {_gluoncv_version()}. Native bf16 on this CPU: "
        + ("yes (avx512_bf16)" if bf16_runs_natively() else "no (AVX2 only)")
        + ". MXNet runs no float16 on a CPU: float16 is judged through the emulation "
          "(`mxnet_amp.emulation`: every tensor the converted graph holds in low precision is "
          "rounded to that dtype, ops compute in fp32), and so is bfloat16, which also runs "
          "natively where the CPU can (recorded, with the emulation's fidelity).",
        *preamble,
        "",
        "Method (`tools/zoo_sweep.py`, whose module docstring defines every check): each model "
        "is built offline, random He-normal weights, BatchNorm "
        + ("statistics calibrated layer by layer on a batch of 4 random inputs (one forward "
           "pass; each layer's mean and variance from the activations that reach it once the "
           "earlier layers are calibrated), so every BatchNorm output is normalised as in a "
           "trained net" if bn == "calibrated" else
           "at identity (mean 0, variance 1; calibrated only where fp32 is non-finite so)")
        + ", run in fp32 on a small input for its family, exported (`HybridBlock.export` + "
        "`mx.model.load_checkpoint`), converted with `mxnet_amp.convert_model(target_dtype=..., cast_optional_params=False)` "
        "and run emulated. *pass*: converts, runs, the converted graph with its casts stripped "
        f"reproduces fp32 to {STRUCTURE_TOL:g} (no op lost or changed), no output non-finite "
        f"where fp32 is finite, and `max|lp - fp32| / max|fp32|` <= **{tol}** for every checked "
        "output (the strict tolerance; no other way to pass). Outputs after top-k / NMS / "
        "comparisons / box decoding are only checked for finiteness; the dense tensors feeding "
        "those ops are compared instead. *degenerate*: every checked fp32 output vanished (all "
        "~0 or constant) or is saturated (>= 90% of values at its min or max), or the low "
        "precision output equals fp32 exactly: nothing measured, not counted as tested; a "
        "model with some degenerate outputs is judged on the others. *inconclusive*: rounding "
        "only input and weights already moves the outputs by >= 0.5 (chaotic random net). "
        "mx.contrib.amp's model of the same net, emulated the same way, is run beside ours. "
        "Where a model fails, `mxnet_amp.auto_convert_model` runs with the same criterion "
        "(`validate=`, emulated) and its executions are recorded.",
        "",
    ]
    for dtype in dtypes:
        lines += _dtype_section(records, dtype, tol, timeout)
    if "bfloat16" in dtypes:
        lines += _fidelity_section(per_dtype(records, "bfloat16"))
    lines += _per_model_table(records, dtypes)
    text = "\n".join(lines) + "\n"

    def write(tmp):
        with open(tmp, "w") as f:
            f.write(text)
    atomic_write(path, write)


# a failure whose error is at most this many times the error of rounding only the input and
# weights is the random net's own sensitivity (the earlier sweeps' pass criterion)
SENSITIVITY_FACTOR = 4.0
# ... and one where mx.contrib.amp's model of the same net does this much better is ours
CONTRIB_BETTER = 0.5


def cause_of(rec: dict) -> str:
    """A failed record's cause, in a few words: ``'non-finite'``, ``'graph changed'``,
    ``'error'``, ``'sensitivity'`` (the error is within :data:`SENSITIVITY_FACTOR` times what
    rounding only input and weights gives, and mx.contrib.amp does no better), or
    ``'conversion'`` (above the tolerance otherwise: worth a look)."""
    if rec.get("nonfinite_outputs"):
        return "non-finite"
    if rec.get("structure_err") is not None and rec["structure_err"] > STRUCTURE_TOL:
        return "graph changed"
    if rec.get("max_rel_err") is None:
        return "error"
    sens, contrib = rec.get("sensitivity_err"), rec.get("contrib_max_rel_err")
    if contrib is not None and contrib < CONTRIB_BETTER * rec["max_rel_err"]:
        return "conversion"
    if sens is not None and rec["max_rel_err"] <= SENSITIVITY_FACTOR * sens:
        return "sensitivity"
    return "conversion"


def _dtype_section(records: Sequence[dict], dtype: str, tol: float, timeout: float) -> list[str]:
    s = summarize(records, dtype, tol)
    c = s["counts"]
    flat = per_dtype(records, dtype)
    pct = s["err_percentiles"]
    both = [r for r in flat if r["status"] in ("pass", "fail") and r.get("contrib_max_rel_err") is not None]
    contrib_within = sum(1 for r in both if r["contrib_max_rel_err"] <= tol
                         and not r.get("contrib_nonfinite_outputs"))
    contrib_nonfinite = [r["model"] for r in both if r.get("contrib_nonfinite_outputs")]
    converted = [r for r in flat if "contrib_amp" in r]
    partial = [r for r in flat if r["status"] in ("pass", "fail") and r.get("degenerate_outputs")]
    causes: dict[str, int] = {}
    for r in flat:
        if r["status"] == "fail":
            causes[cause_of(r)] = causes.get(cause_of(r), 0) + 1
    lines = [
        f"## {dtype}", "",
        f"- tested (built offline, converted, ran, not degenerate): **{s['tested']}**; "
        f"**within the strict tolerance {tol}: {c.get('pass', 0)} = {100 * s['pass_rate']:.1f}%** "
        f"(target >= 98%); fail {c.get('fail', 0)}",
        f"- failures by cause: " + (", ".join(f"{k} {v}" for k, v in sorted(causes.items())) or "none")
        + f" (*sensitivity*: error <= {SENSITIVITY_FACTOR:g}x what rounding only input and weights "
        f"to {dtype} gives, and mx.contrib.amp no better than {1 / CONTRIB_BETTER:g}x ours: the random "
        "net's own sensitivity; *conversion*: anything else above the tolerance)",
        f"- within the tolerance or the random net's sensitivity: "
        f"{c.get('pass', 0) + causes.get('sensitivity', 0)} of {s['tested']}",
        f"- non-finite output where fp32 is finite: **{len(s['nonfinite_models'])}**"
        + (f" ({', '.join(s['nonfinite_models'])})" if s["nonfinite_models"] else ""),
        f"- error `max|{dtype} - fp32| / max|fp32|` over tested models: median "
        f"{pct.get(50, float('nan')):.2g}, 90th percentile {pct.get(90, float('nan')):.2g}, "
        f"max {pct.get(100, float('nan')):.2g}",
        f"- mx.contrib.amp's model of the same nets, emulated the same way: converts "
        f"{sum(1 for r in converted if r['contrib_amp'] == 'ok')} of {len(converted)}; of the "
        f"{len(both)} tested models it converts, {contrib_within} within the tolerance"
        + (f"; non-finite: {len(contrib_nonfinite)} ({', '.join(contrib_nonfinite)})" if contrib_nonfinite else
           "; non-finite: 0"),
        f"- degenerate (not counted): {c.get('degenerate', 0)}; models judged on their other outputs "
        f"because some outputs are degenerate: {len(partial)}; inconclusive (chaotic): "
        f"{c.get('inconclusive', 0)}",
        f"- not built: {c.get('not_buildable', 0)}; fp32 itself non-finite: {c.get('fp32_nonfinite', 0)}; "
        f"over the per-model timeout ({timeout:g} s): {c.get('timeout', 0)}; not run: {c.get('skipped', 0)}",
        "",
        "| family | models | pass | fail | degenerate / inconclusive | not buildable / fp32 non-finite | timeout / not run | worst err | worst contrib err |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    fams: dict[str, list[dict]] = {}
    for r in flat:
        fams.setdefault(r.get("family", "?"), []).append(r)
    for fam in sorted(fams):
        rs = fams[fam]
        n = lambda *st: sum(r["status"] in st for r in rs)  # noqa: E731
        errs = [r["max_rel_err"] for r in rs if r["status"] in ("pass", "fail")
                and r.get("max_rel_err") is not None]
        cerrs = [r["contrib_max_rel_err"] for r in rs if r["status"] in ("pass", "fail")
                 and r.get("contrib_max_rel_err") is not None]
        lines.append(f"| {fam} | {len(rs)} | {n('pass')} | {n('fail')} | {n('degenerate', 'inconclusive')} | "
                     f"{n('not_buildable', 'fp32_nonfinite')} | {n('timeout', 'skipped')} | "
                     f"{_fmt(max(errs) if errs else None)} | {_fmt(max(cerrs) if cerrs else None)} |")
    fails = [r for r in flat if r["status"] == "fail"]
    lines += ["", f"### {dtype}: failures, with their cause", ""]
    if fails:
        lines += ["| model | cause | detail | rounding only input + weights | mx.contrib.amp's error | "
                  "auto_convert_model (same criterion) |",
                  "|---|---|---|---|---|---|"]
        for r in fails:
            spent = r.get("auto_executions", 0) >= AUTO_MAX_EXECUTIONS
            auto = (f"{'fixed' if r['auto_validated'] else 'not fixed'}: {r['auto_executions']} executions"
                    f"{' (the budget: undecided nodes stay fp32)' if spent else ''}, "
                    f"{r['auto_kept_count']} nodes kept in fp32 ({', '.join(r['auto_kept_fp32'][:4])}"
                    f"{', ...' if r['auto_kept_count'] > 4 else ''}), {r['auto_low_precision_nodes']}/"
                    f"{r.get('op_nodes', '?')} in {dtype}"
                    if "auto_executions" in r else r.get("auto", "not run (--auto-dtypes)"))
            contrib = _contrib_cell(r)
            lines.append(f"| {r['model']} | {cause_of(r)} | {_cell(r.get('reason', ''))} | "
                         f"{_fmt(r.get('sensitivity_err'), '.3g')} | {contrib} | {_cell(auto)} |")
    else:
        lines.append("None.")
    odd = [r for r in flat if r["status"] in ("degenerate", "inconclusive", "not_buildable",
                                              "fp32_nonfinite", "timeout")]
    if odd:
        lines += ["", f"### {dtype}: not tested (degenerate, inconclusive, not built, timeout)", "",
                  "| model | status | reason |", "|---|---|---|"]
        lines += [f"| {r['model']} | {r['status']} | {_cell(r.get('reason', ''))} |" for r in odd]
    if partial:
        lines += ["", f"### {dtype}: degenerate outputs left out of the comparison", "",
                  "| model | outputs left out (index: why) | judged on |", "|---|---|---|"]
        lines += [f"| {r['model']} | {_cell('; '.join(f'{k}: {w}' for k, w in r['degenerate_outputs'].items()))} | "
                  f"{r.get('checked_outputs', '?')} other outputs |" for r in partial]
    return lines + [""]


def _fidelity_section(flat: Sequence[dict]) -> list[str]:
    """The emulation against native bfloat16 (unfused), per model."""
    import numpy as np
    ran = [r for r in flat if r.get("native_vs_emulated") is not None]
    if not ran:
        return []
    near = np.array([r["native_vs_emulated"] for r in ran])
    trunc = np.array([r["native_vs_emulated_mxnet_cpu"] for r in ran])
    ratio = np.array([r["native_max_rel_err"] / max(r["max_rel_err"], 1e-12) for r in ran])
    failed = sorted({r["model"] for r in flat if str(r.get("native", "")).startswith("error")})
    lines = [
        "## Emulation fidelity: emulated against native bfloat16 (unfused)", "",
        f"{len(ran)} models ran natively (`MXNET_SUBGRAPH_BACKEND=NONE`)"
        + (f"; MXNet errors natively: {', '.join(failed)}" if failed else "") + ". "
        "`max|native - emulated| / max|fp32|` over the dense outputs: with the default "
        "`rounding='nearest'` median "
        f"{np.median(near):.2g}, max {near.max():.2g}; with `rounding='mxnet-cpu'` (ops outside "
        "oneDNN truncate to bfloat16, as MXNet 1.9.1's CPU kernels do) median "
        f"{np.median(trunc):.2g}, max {trunc.max():.2g}. Native error / emulated error: median "
        f"{np.median(ratio):.2g}, max {ratio.max():.2g}. The native error with oneDNN fusion "
        "(what a user gets by default) is in the per-model table.", "",
        "Worst ten by native/emulated error ratio:", "",
        "| model | emulated err | native err | ratio | emulated (mxnet-cpu) err | native - emulated | native - emulated (mxnet-cpu) |",
        "|---|---|---|---|---|---|---|",
    ]
    order = np.argsort(-ratio)[:10]
    for i in order:
        r = ran[i]
        lines.append(f"| {r['model']} | {r['max_rel_err']:.3g} | {r['native_max_rel_err']:.3g} | "
                     f"{ratio[i]:.2g} | {_fmt(r.get('emulated_mxnet_cpu_max_rel_err'), '.3g')} | "
                     f"{r['native_vs_emulated']:.3g} | {r['native_vs_emulated_mxnet_cpu']:.3g} |")
    return lines + [""]


def _per_model_table(records: Sequence[dict], dtypes: Sequence[str]) -> list[str]:
    head = "| model | family | input | BatchNorm layers calibrated / in graph | time (s) |"
    rule = "|---|---|---|---|---|"
    for d in dtypes:
        short = {"float16": "fp16", "bfloat16": "bf16"}.get(d, d)
        head += f" {short} status | {short} err | {short} contrib err | {short} lp ops |"
        rule += "---|---|---|---|"
    if "bfloat16" in dtypes:
        head += " bf16 native (unfused / fused) |"
        rule += "---|"
    lines = ["## Per model", "", head, rule]
    for r in sorted(records, key=lambda r: (r.get("family", ""), r["model"])):
        if r.get(dtypes[0], {}).get("status") == "skipped":
            continue
        shape = "x".join(map(str, r["input_shape"])) if "input_shape" in r else ""
        bns = (f"{r['calibrated_batchnorms']}/{r['batchnorms_in_graph']}" if "batchnorms_in_graph" in r
               else r.get("calibrated_batchnorms", ""))
        row = f"| {r['model']} | {r.get('family', '')} | {shape} | {bns} | {r.get('wall_s', '')} |"
        for d in dtypes:
            x = r.get(d, {})
            lp = f"{x['low_precision_nodes']}/{x['op_nodes']}" if "op_nodes" in x else ""
            contrib = _contrib_cell(x, ".2e", detail=False)
            row += f" {x.get('status', '')} | {_fmt(x.get('max_rel_err'), '.2e')} | {contrib} | {lp} |"
        if "bfloat16" in dtypes:
            x = r.get("bfloat16", {})
            row += f" {_native_cell(x)} |"
        lines.append(row)
    return lines


def _contrib_cell(rec: dict, spec: str = ".3g", detail: bool = True) -> str:
    """mx.contrib.amp's error on a model, or why there is none."""
    if str(rec.get("contrib_amp", "")).startswith("error"):
        return "cannot convert" + (f" ({_cell(rec['contrib_amp'][7:])[:100]})" if detail else "")
    if rec.get("contrib_max_rel_err") is None and "contrib_emulated" in rec:
        return "its model does not run" + (f" ({_cell(rec['contrib_emulated'][7:])[:100]})" if detail else "")
    return _fmt(rec.get("contrib_max_rel_err"), spec) + (" (non-finite)" if rec.get("contrib_nonfinite_outputs") else "")


def _native_cell(rec: dict) -> str:
    cells = []
    for key in ("native", "native_fused"):
        err = rec.get(f"{key}_max_rel_err")
        cells.append(f"{err:.2e}" if err is not None else ("error" if key in rec else ""))
    return " / ".join(cells) if any(cells) else ""


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")[:240]


def _gluoncv_version() -> str:
    try:
        import gluoncv
        return gluoncv.__version__
    except Exception:  # noqa: BLE001
        return "?"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", nargs="*", help="model names (default: the whole zoo)")
    p.add_argument("--dtypes", nargs="+", default=list(DTYPES), choices=list(DTYPES))
    p.add_argument("--bn", choices=("calibrated", "identity"), default="calibrated",
                   help="BatchNorm statistics: calibrated layer by layer on sample inputs "
                        "(default), or random-init identity")
    p.add_argument("--tol", type=float, default=TOLERANCE)
    p.add_argument("--auto-dtypes", nargs="*", default=None, choices=list(DTYPES),
                   help="dtypes whose failures auto_convert_model tries to fix (default: all; "
                        "none: give the flag alone)")
    p.add_argument("--timeout", type=float, default=300, help="per-model seconds")
    p.add_argument("--budget", type=float, default=None, help="total wall-clock seconds")
    p.add_argument("--nice", type=int, default=0, help="niceness of the workers")
    p.add_argument("--jobs", type=int, default=1, help="models run at once (worker processes)")
    p.add_argument("--threads", type=int, default=None,
                   help="OMP threads per worker (default: cores / jobs)")
    p.add_argument("--resume", action="store_true",
                   help="keep the records already in --json; run only the models missing there")
    p.add_argument("--json", default=None, help="write the records here")
    p.add_argument("--md", default=None, help="write the markdown report here")
    p.add_argument("--report-from", default=None, metavar="JSON",
                   help="only rewrite --md from a sweep's JSON (its models only)")
    p.add_argument("--wall", type=float, default=0.0, help="with --report-from: the run's seconds")
    p.add_argument("--command", default=None, help="with --report-from: the command that ran")
    p.add_argument("--note", action="append", default=[],
                   help="with --report-from: a line for the report's preamble")
    p.add_argument("--worker", metavar="MODEL", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        _worker(a.worker, a.dtypes, a.tol, a.bn, a.dtypes if a.auto_dtypes is None else a.auto_dtypes)
        return 0
    if a.report_from:
        with open(a.report_from) as f:
            saved = json.load(f)
        write_markdown(a.md, saved["records"], dtypes=saved["dtypes"], tol=saved["tolerance"],
                       command=a.command or "python tools/zoo_sweep.py", wall_s=a.wall,
                       timeout=saved.get("timeout_s", a.timeout), bn=saved.get("bn", "calibrated"),
                       preamble=a.note)
        print(json.dumps([summarize(saved["records"], d, saved["tolerance"]) for d in saved["dtypes"]], indent=1))
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
                    if r.get(a.dtypes[0], {}).get("status") not in ("skipped", None)}
        # a resumed run keeps the earlier models the JSON holds beyond this run's list
        models = [m for m in done if m not in models] + models
    t = time.time()
    records = run_sweep(models, dtypes=a.dtypes, tol=a.tol, timeout=a.timeout, budget=a.budget,
                        nice=a.nice, jobs=a.jobs, json_path=a.json, done=done, bn=a.bn,
                        threads=a.threads, auto_dtypes=a.auto_dtypes)
    wall = time.time() - t
    if a.md:
        command = "python tools/zoo_sweep.py " + " ".join(argv if argv is not None else sys.argv[1:])
        write_markdown(a.md, records, dtypes=a.dtypes, tol=a.tol, command=command, wall_s=wall,
                       timeout=a.timeout, bn=a.bn)
    print(json.dumps([summarize(records, d, a.tol) for d in a.dtypes], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
