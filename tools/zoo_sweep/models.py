"""Building gluoncv zoo models offline with random weights, and calibrating their BatchNorm."""
from __future__ import annotations

import re
from typing import Any

from .common import _first_line


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

    from mxnet_amp.mx.io import graph_from_symbol
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
            inputs = [values[e.node][e.output] for e in node.inputs]
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
