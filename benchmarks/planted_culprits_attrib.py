"""Planted accuracy culprits, third family: absorption and cancellation done by ops other
than a FullyConnected followed by a subtraction, with harmless look-alikes of each.

Built apart from ``benchmarks/planted_culprits.py`` (``(Q h + 2048) - 2048`` after one
FullyConnected) and ``benchmarks/planted_culprits_structured.py`` (paired channels, folded
BatchNorms, wide-range weights, long accumulations). A graph is a sequence of *blocks* on a
signal ``h`` of width 16 (|values| ~ 1), each one of

* ``residual`` (a small residual added to a large stream): ``s = a + L`` with ``a = FC(h, Q)``
  and ``L = FC(h, 0, bias B)`` (exactly ``B``, integers times 2048), then ``s - L``. The
  culprit is the *addition* (``res{i}_add``, an ``elemwise_add``): float16's spacing at
  2048-6144 is 2-4, the sum loses ``a``; kept float32, the subtraction reads it in float32
  too (widest) and the signal is whole. Look-alike: ``B`` of small integers times 2**-4
  (the sum rounds as ``a`` alone would: at N = 5000 a look-alike of integers times 4,
  spacing 2**-7, put 0.87 of error in the outputs with no culprit in low precision).
* ``near_one`` (a division by a near-zero difference): ``a = FC(h, eps Q, bias 1)``, then
  ``(a - 1) / eps``. Nothing is large (``|a| < 1.01``): with ``eps = 2**-11`` the signal sits
  in the last bits float16 keeps near 1 (spacing 2**-11 below 1, 2**-10 above) and ``a - 1``
  is mostly rounding. Culprit: the FullyConnected ``near{i}``. Look-alike ``eps = 1``.
* ``softmax`` (attention logits riding on a large shift): ``l = FC(h, Q, bias C)``, then
  ``log_softmax(l) - mean(log_softmax(l))`` = ``Q h - mean(Q h)``: the softmax ignores ``C``,
  no subtraction of it anywhere. With ``C = 2048`` the logits' rounding (spacing 2) is all
  that is left. Culprit: the FullyConnected ``attn{i}`` (the softmax family is float32
  anyway). Look-alike ``C = 0``.
* ``conv_norm`` (a layer whose bias dwarfs its signal, removed by a normalisation): a 1x1
  ``Convolution`` (weight ``Q``, bias ``C``) on ``h`` as an image, then ``LayerNorm`` over the
  channels (float32 by the lists), which removes the common ``C``. Culprit: the Convolution
  ``conv{i}`` with ``C = 2048``; look-alike ``C = 0``.
* ``plain``: ``FC(h, Q)``.

``Q`` is a random orthogonal map each time. ``'chain'`` graphs are the blocks in sequence;
``'dag'`` graphs give every block a second path: the output's lower half computed from the
block's input by another orthogonal map (a FullyConnected beside the block, joined by a
Concat), the upper half sliced from the block. No tensor leaves float16's range (the
largest is ~6150) and none underflows; each culprit is fixed by keeping that one node in
float32. Used by ``benchmarks/attribution_hit_rate.py`` and the property test
(tests/auto/test_attribution_property.py).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from _planted import BATCH, WIDTH, Net, block_count, check_shape, \
    orthogonal as _orthogonal, plan
from planted_culprits import Planted

LARGE = 2048.0
KINDS = ("residual", "near_one", "softmax", "conv_norm")
_LOOKALIKES = ("plain", "residual", "near_one", "softmax", "conv_norm")
_OPS = {"residual": 4, "near_one": 3, "softmax": 4, "conv_norm": 4, "plain": 1}
NEAR_EPS = 2.0 ** -11


class _Blocks(Net):
    def fc(self, x, name: str, weight: np.ndarray, bias: np.ndarray | float = 0.0):
        return self.dense(x, name, weight, bias)

    def residual(self, h, i: int, culprit: bool):
        ints = self.rng.randint(1, 4, WIDTH).astype(np.float32)
        a = self.fc(h, f"res{i}_small", _orthogonal(self.rng, WIDTH))
        large = self.fc(h, f"res{i}_large", np.zeros((WIDTH, WIDTH), np.float32),
                        ints * (LARGE if culprit else 0.0625))
        s = self.op(self.sym.elemwise_add, a, large, name=f"res{i}_add")
        return self.op(self.sym.elemwise_sub, s, large, name=f"res{i}_sub"), f"res{i}_add", None

    def near_one(self, h, i: int, culprit: bool):
        eps = NEAR_EPS if culprit else 1.0
        a = self.fc(h, f"near{i}", eps * _orthogonal(self.rng, WIDTH), 1.0)
        d = self.op(self.sym._internal._minus_scalar, a, scalar=1.0, name=f"near{i}_diff")
        return self.op(self.sym._internal._div_scalar, d, scalar=eps, name=f"near{i}_scaled"), \
            f"near{i}", None

    def softmax(self, h, i: int, culprit: bool):
        logits = self.fc(h, f"attn{i}", _orthogonal(self.rng, WIDTH), LARGE if culprit else 0.0)
        y = self.op(self.sym.log_softmax, logits, axis=-1, name=f"attn{i}_logp")
        m = self.op(self.sym.mean, y, axis=1, keepdims=True, name=f"attn{i}_mean")
        return self.op(self.sym.broadcast_sub, y, m, name=f"attn{i}_centred"), f"attn{i}", None

    def conv_norm(self, h, i: int, culprit: bool):
        x = self.op(self.sym.reshape, h, shape=(0, WIDTH, 1, 1), name=f"conv{i}_image")
        self.args[f"conv{i}_weight"] = _orthogonal(self.rng, WIDTH).reshape(WIDTH, WIDTH, 1, 1)
        self.args[f"conv{i}_bias"] = np.full(WIDTH, LARGE if culprit else 0.0, np.float32)
        c = self.op(self.sym.Convolution, x, kernel=(1, 1), num_filter=WIDTH, name=f"conv{i}")
        self.args[f"conv{i}_norm_gamma"] = np.ones(WIDTH, np.float32)
        self.args[f"conv{i}_norm_beta"] = np.zeros(WIDTH, np.float32)
        n = self.op(self.sym.LayerNorm, c, axis=1, name=f"conv{i}_norm")
        return self.op(self.sym.reshape, n, shape=(0, -1), name=f"conv{i}_flat"), f"conv{i}", None

    def plain(self, h, i: int, culprit: bool):
        return self.fc(h, f"fc{i}", _orthogonal(self.rng, WIDTH)), f"fc{i}", None


def compose(blocks: Sequence[tuple[str, bool]], shape: str = "chain", seed: int = 0,
            n: int | None = None) -> Planted:
    """A graph of the given blocks in order (``(kind, culprit)``: a kind of ``KINDS`` or
    ``'plain'``; a culprit of it, or its look-alike), padded with identities to ``n`` op
    nodes when given; the output reshaped to 3-D (the error bound alone judges). In a DAG
    the second path around each block draws its own orthogonal map."""
    check_shape(shape)
    net = _Blocks(seed)
    # a plain layer has no culprit form
    h, made = net.build([(kind, culprit and kind != "plain") for kind, culprit in blocks], shape)
    sym, args, sample, auxs = net.finish(h, n)
    return Planted(sym, args, sample, tuple(name for name, _, culprit in made if culprit),
                   net.ops, auxs)


def planted_attrib(n: int, k: int, shape: str = "chain", seed: int = 0) -> Planted:
    """A ``shape`` graph of about ``n`` op nodes (exactly, padded with identities) with
    ``k`` culprits of the kinds in ``KINDS``, in turn, at random blocks (``seed``); the
    other blocks are look-alikes of each kind and plain layers, in turn."""
    rng = np.random.RandomState(seed)
    extra = check_shape(shape)
    count = block_count(n, k, _LOOKALIKES, _OPS, extra)
    at = sorted(rng.choice(np.arange(count), size=k, replace=False).tolist())
    kinds = {b: KINDS[j % len(KINDS)] for j, b in enumerate(at)}
    return compose(plan(count, kinds, _LOOKALIKES, _OPS, extra, n, skip=True), shape, seed, n)
