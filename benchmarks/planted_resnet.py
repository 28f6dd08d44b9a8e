"""resnet50_v1 with two planted float16 culprits, for ``benchmarks/auto_scale.py --planted``.

The gluon model zoo's resnet50_v1 (``pretrained=False``, Xavier init, fixed seed), its
BatchNorm statistics calibrated on a batch of the benchmark's images (each layer on what
reaches it once the layers before are calibrated: a random-init net is chaotic otherwise),
then two culprits planted so that the float32 model's top-1 stays what it was:

* **overflow** (``output``, the last FullyConnected): weights and bias times ``2**16``. The
  logits scale by ``2**16`` (top-1 unchanged) and reach ~1e5, beyond float16's 65504: in
  float16 the largest become inf, their ties and the garbage after them change the top-1.
  Kept float32, nothing reads its output in float16 (it is the model's output).
* **accuracy** (paired channels, the last bottleneck's third convolution ``conv3``): the
  block's second convolution computes channel ``2k + 1`` with the weights of channel ``2k``
  (so the two are equal: built before the calibration, their BatchNorm statistics made equal),
  and ``conv3`` reads the pair with weights ``w + L`` and ``w' - L`` (``L`` = ``2**14`` times
  the layer's weight spread): in float32 the ``L`` terms cancel and ``conv3`` computes
  ``(w + w') x``, as before; float16 stores ``w + L`` (~460) to a spacing of 0.25, ~9 weight
  spreads, so the small signal ``w + w'`` (~1.4 spreads) is lost in the rounding.
  Kept float32, ``conv3`` reads the (equal, equally rounded) pair and cancels ``L`` again.
  No tensor leaves float16's range (the search's range step flags only ``output``).

Labels are the float32 model's own top-1 (:func:`label_rec`), so float32 scores ~1.0 (0.992
in the search's own float32 pass over 256 images: docs/benchmarks.md) and a float16 model's
accuracy is the share of samples whose top-1 it keeps.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np

__all__ = ["OVERFLOW_SCALE", "PAIR_SCALE", "Planted", "build", "label_rec", "top1"]

OVERFLOW_SCALE = 2.0 ** 16   # the output layer's weights and bias: logits ~1e5
PAIR_SCALE = 2.0 ** 14       # the paired weights' large part, in units of conv3's weight spread


@dataclass
class Planted:
    """The planted model as a checkpoint and the names of its culprits (symbol node names)."""

    sym: Any
    args: dict
    auxs: dict
    overflow: str          # the output FullyConnected
    accuracy: str          # the paired convolution
    # (sym, args, auxs) before the two plantings (the duplicates made, calibrated)
    base: tuple | None

    @property
    def culprits(self) -> list[str]:
        """Both culprits' node names."""
        return sorted([self.overflow, self.accuracy])


def _calibrate(net: Any, x: np.ndarray) -> int:
    """Each BatchNorm's running statistics := its input's batch statistics on ``x``, layer
    after layer in one imperative forward (a pre-forward hook sets them before the layer
    normalises); returns how many layers."""
    import mxnet as mx
    from mxnet import autograd
    from mxnet.gluon import nn

    bns: list = []

    def walk(block: Any) -> None:
        if isinstance(block, nn.BatchNorm):
            bns.append(block)
        for child in block._children.values():
            walk(child)
    walk(net)

    def set_stats(block: Any, inputs: Any) -> None:
        data = inputs[0]
        mean = data.mean(axis=(0, 2, 3))
        var = ((data - mean.reshape((1, -1, 1, 1))) ** 2).mean(axis=(0, 2, 3))
        block.running_mean.set_data(mean)
        block.running_var.set_data(var)

    hooks = [bn.register_forward_pre_hook(set_stats) for bn in bns]
    with autograd.predict_mode():
        net(mx.nd.array(x))
    for h in hooks:
        h.detach()
    return len(bns)


def build(calibration: np.ndarray, seed: int = 0, keep_base: bool = False) -> Planted:
    """The planted resnet50_v1 (module doc) for images like ``calibration`` (N, 3, H, W),
    normalised as the benchmark feeds them. ``keep_base``: also the model before the two
    plantings (for the tests' "float32 unchanged")."""
    import mxnet as mx
    from mxnet.gluon.model_zoo import vision

    from mxnet_amp.gluon.model import block_model

    mx.random.seed(seed)
    np.random.seed(seed)
    net = vision.resnet50_v1(pretrained=False)
    net.initialize(mx.init.Xavier())
    net(mx.nd.zeros((1,) + calibration.shape[1:]))
    # the last bottleneck: conv1 bn relu conv2 bn relu conv3 bn
    body = net.features[7][2].body
    conv2, bn2, conv3 = body[3], body[4], body[6]
    w2 = conv2.weight.data().asnumpy()
    w2[1::2] = w2[0::2]                     # channel 2k + 1 computes as channel 2k
    conv2.weight.set_data(mx.nd.array(w2))
    _calibrate(net, calibration)
    for stat in (bn2.running_mean, bn2.running_var):    # equal to the bit, whatever the reduction
        v = stat.data().asnumpy()
        v[1::2] = v[0::2]
        stat.set_data(mx.nd.array(v))
    net.hybridize()
    net(mx.nd.array(calibration[:1]))

    def export() -> tuple:
        sym, args, auxs, _ = block_model(net, ["data"])
        return sym, {k: v.copy() for k, v in args.items()}, {k: v.copy() for k, v in auxs.items()}

    base = export() if keep_base else None
    # the pair side by side in the input channels: a convolution sums them in that order, so
    # +L x and -L x cancel before anything else joins the sum (L x ~ 1e2: float32 keeps the
    # small terms to ~1e-5); pairs a half apart left sums of ~1e4 whose rounding flipped top-1s
    w3 = conv3.weight.data().asnumpy().astype(np.float64)       # (2048, 512, 1, 1)
    large = PAIR_SCALE * float(w3.std())
    w3[:, 0::2] += large
    w3[:, 1::2] -= large
    conv3.weight.set_data(mx.nd.array(w3.astype(np.float32)))
    out = net.output
    out.weight.set_data(out.weight.data() * OVERFLOW_SCALE)
    out.bias.set_data(out.bias.data() * OVERFLOW_SCALE)
    sym, args, auxs = export()
    names = {n["name"] for n in __import__("json").loads(sym.tojson())["nodes"]}
    overflow, accuracy = out.name + "_fwd", conv3.name + "_fwd"
    assert overflow in names and accuracy in names, (overflow, accuracy)
    return Planted(sym, args, auxs, overflow, accuracy, base)


def top1(sym: Any, args: dict, auxs: dict, batches: Iterable[np.ndarray]) -> np.ndarray:
    """The model's top-1 on each row of ``batches`` (float32 executor, one batch at a time)."""
    import mxnet as mx
    out, exe, shape = [], None, None
    for x in batches:
        if exe is None or x.shape != shape:
            shape = x.shape
            exe = sym.simple_bind(mx.cpu(), grad_req="null", data=x.shape)
            exe.copy_params_from(args, auxs, allow_extra_params=True)
        exe.arg_dict["data"][:] = x
        out.append(exe.forward(is_train=False)[0].asnumpy().argmax(axis=1))
    return np.concatenate(out)


def label_rec(src: str, dst: str, labels: np.ndarray) -> None:
    """``src``'s records (``src + '.idx'`` its index, as ``auto_scale.write_rec`` writes)
    rewritten to ``dst`` (``dst + '.idx'``) with ``labels[i]`` as
    record ``i``'s label (the image bytes copied as they are)."""
    import mxnet as mx
    reader = mx.recordio.MXIndexedRecordIO(src + ".idx", src, "r")
    writer = mx.recordio.MXIndexedRecordIO(dst + ".idx", dst, "w")
    for i, label in enumerate(labels):
        header, img = mx.recordio.unpack(reader.read_idx(i))
        writer.write_idx(i, mx.recordio.pack(header._replace(label=float(label)), img))
    reader.close()
    writer.close()
