"""Zoo models built offline (random init) for the end-to-end tests."""
from __future__ import annotations

import mxnet as mx
import numpy as np

from helpers import load_tool

# name -> (builder, input shape); input sizes are the smallest each net accepts comfortably
def _vision(name):
    from mxnet.gluon.model_zoo import vision
    return lambda: vision.get_model(name)


def _gluoncv(name, **kwargs):
    def build():
        import gluoncv
        try:
            return gluoncv.model_zoo.get_model(name, pretrained=False, pretrained_base=False, **kwargs)
        except TypeError:
            return gluoncv.model_zoo.get_model(name, pretrained=False, **kwargs)
    return build


MODELS = {
    "resnet18_v1": (_vision("resnet18_v1"), (1, 3, 64, 64)),
    "mobilenetv2_1.0": (_vision("mobilenetv2_1.0"), (1, 3, 64, 64)),
    "resnet50_v1": (_vision("resnet50_v1"), (1, 3, 64, 64)),
    "shufflenet_v2": (_gluoncv("shufflenet_v2"), (1, 3, 96, 96)),
    "densenet121": (_gluoncv("densenet121"), (1, 3, 224, 224)),
    "deeplab_resnet50_ade": (_gluoncv("deeplab_resnet50_ade", height=96, width=96), (1, 3, 96, 96)),
    "psp_resnet50_ade": (_gluoncv("psp_resnet50_ade", height=96, width=96), (1, 3, 96, 96)),
    "inceptionv3": (_vision("inceptionv3"), (1, 3, 299, 299)),
}


def build(name: str, seed: int = 0):
    """``(net, x)``: an initialised, hybridized net that has run once on ``x``."""
    maker, shape = MODELS[name]
    mx.random.seed(seed)
    net = maker()
    # Xavier keeps activations O(1) through depth, as trained weights do; MXNet's default
    # uniform(0.07) init shrinks them towards float16's underflow range
    net.initialize(mx.init.Xavier(magnitude=2.0))
    net.hybridize()
    x = mx.nd.random.uniform(-1, 1, shape=shape)
    net(x)
    return net, x


def symbol_model(name: str, seed: int = 0):
    """``(sym, args, auxs, x)``: :func:`build`'s net as the symbol and params a checkpoint
    holds, with its input as numpy."""
    net, x = build(name, seed)
    sym = net._cached_graph[1]
    params = {p.name: p.data() for p in net.collect_params().values()}
    return (sym, {k: params[k] for k in sym.list_arguments() if k in params},
            {k: params[k] for k in sym.list_auxiliary_states()}, x.asnumpy())


def output_bits(outs):
    """The float32 outputs as their uint32 bit patterns, for bit-for-bit comparisons."""
    return [np.ascontiguousarray(o, dtype=np.float32).view(np.uint32) for o in outs]


def checkpoint(name: str, folder, seed: int = 0):
    """Export ``name`` to ``folder``; returns ``(prefix, x)``."""
    net, x = build(name, seed)
    prefix = str(folder / name)
    net.export(prefix)
    return prefix, x


def calibrated(name: str):
    """A zoo net as a trained one looks to folding: random gamma and beta, running statistics
    calibrated to what each BatchNorm's input really has (tools/zoo_sweep.py):
    ``(net, sym, args, auxs, x)`` with a batch of 4 inputs."""
    net, x = build(name)
    rng = np.random.default_rng(0)
    for pname, param in net.collect_params().items():
        if pname.endswith("gamma"):
            param.set_data(mx.nd.array(rng.uniform(0.5, 1.5, param.shape)))
        elif pname.endswith("beta"):
            param.set_data(mx.nd.array(rng.normal(0, 0.2, param.shape)))
    load_tool("zoo_sweep").calibrate_batchnorm(net, x.shape)
    net(x)
    sym = net._cached_graph[1]
    params = {p.name: p.data() for p in net.collect_params().values()}
    args = {k: params[k] for k in sym.list_arguments() if k in params}
    auxs = {k: params[k] for k in sym.list_auxiliary_states()}
    return net, sym, args, auxs, mx.nd.random.uniform(-1, 1, shape=(4,) + x.shape[1:])
