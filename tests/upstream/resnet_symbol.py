"""The imagenet ResNet symbol of MXNet's ``example/image-classification/symbols/resnet.py``.

MXNet's AMP tests download the ``imagenet1k-resnet-18`` checkpoint, a Module-API model
built by that script. Nothing can be downloaded here, so this module builds a symbol of the
same architecture, with the same node and param names (``bn_data``, ``conv0``,
``stage{i}_unit{j}_{bn1,relu1,conv1,bn2,relu2,conv2,sc}``, ``bn1``, ``pool1``, ``fc1``,
``softmax``), and gives it random weights. Like that checkpoint's JSON, its weight variables
carry no ``__dtype__`` attribute. The script's current version also puts an ``identity`` node
(``id``) before ``bn_data``; it is left out here (a no-op that conversion leaves in float32
like its input). Written from the architecture description, not copied.
"""
from __future__ import annotations

import numpy as np
import mxnet as mx

_EPS = 2e-5
_MOMENTUM = 0.9


def _bn(x, name: str, fix_gamma: bool = False):
    return mx.sym.BatchNorm(x, fix_gamma=fix_gamma, eps=_EPS, momentum=_MOMENTUM, name=name)


def _conv(x, channels: int, kernel: int, stride: int, name: str):
    pad = kernel // 2  # 3 for the 7x7 stem, 1 for 3x3, 0 for the 1x1 shortcuts
    return mx.sym.Convolution(x, num_filter=channels, kernel=(kernel, kernel),
                              stride=(stride, stride), pad=(pad, pad), no_bias=True,
                              workspace=256, name=name)


def _basic_unit(x, channels: int, stride: int, same_shape: bool, name: str):
    """Pre-activation basic block (two 3x3 convolutions), as resnet.py builds for 18/34 layers."""
    pre = mx.sym.Activation(_bn(x, name + "_bn1"), act_type="relu", name=name + "_relu1")
    y = _conv(pre, channels, 3, stride, name + "_conv1")
    y = mx.sym.Activation(_bn(y, name + "_bn2"), act_type="relu", name=name + "_relu2")
    y = _conv(y, channels, 3, 1, name + "_conv2")
    # the projection shortcut reads the activated input, the identity one the raw input
    shortcut = x if same_shape else _conv(pre, channels, 1, stride, name + "_sc")
    return y + shortcut


def imagenet_resnet(num_layers: int = 18, num_classes: int = 1000):
    """The imagenet (224x224 input) pre-activation ResNet symbol ending in ``SoftmaxOutput``."""
    units = {18: [2, 2, 2, 2], 34: [3, 4, 6, 3]}[num_layers]
    widths = [64, 128, 256, 512]
    body = _bn(mx.sym.var("data"), "bn_data", fix_gamma=True)
    body = _conv(body, 64, 7, 2, "conv0")
    body = mx.sym.Activation(_bn(body, "bn0"), act_type="relu", name="relu0")
    body = mx.sym.Pooling(body, kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type="max")
    for stage, (count, width) in enumerate(zip(units, widths), start=1):
        for unit in range(1, count + 1):
            stride = 2 if stage > 1 and unit == 1 else 1
            body = _basic_unit(body, width, stride, unit > 1, f"stage{stage}_unit{unit}")
    body = mx.sym.Activation(_bn(body, "bn1"), act_type="relu", name="relu1")
    body = mx.sym.Pooling(body, global_pool=True, kernel=(7, 7), pool_type="avg", name="pool1")
    fc = mx.sym.FullyConnected(mx.sym.Flatten(body), num_hidden=num_classes, name="fc1")
    return mx.sym.SoftmaxOutput(fc, name="softmax")


def random_params(sym, data_shape=(1, 3, 224, 224), seed: int = 0):
    """He-initialised weights and BatchNorm statistics near identity for ``sym``.

    Running statistics are drawn so that activations keep a moderate scale through the
    network (a random net with identity BatchNorm grows activations layer after layer, which
    float16 would overflow where a trained net does not).
    """
    rng = np.random.RandomState(seed)
    arg_shapes, _, aux_shapes = sym.infer_shape(data=data_shape, softmax_label=data_shape[:1])
    args = {}
    for name, shape in zip(sym.list_arguments(), arg_shapes):
        if name in ("data", "softmax_label"):
            continue
        if name.endswith("_weight"):
            fan_in = int(np.prod(shape[1:]))
            value = rng.randn(*shape) * np.sqrt(2.0 / fan_in)
        elif name.endswith("_gamma"):
            value = 1.0 + 0.1 * rng.randn(*shape)
        else:  # betas and biases
            value = 0.1 * rng.randn(*shape)
        args[name] = mx.nd.array(value.astype("float32"))
    auxs = {}
    for name, shape in zip(sym.list_auxiliary_states(), aux_shapes):
        value = 0.1 * rng.randn(*shape) if name.endswith("_mean") else 1.0 + np.abs(rng.randn(*shape))
        auxs[name] = mx.nd.array(value.astype("float32"))
    return args, auxs
