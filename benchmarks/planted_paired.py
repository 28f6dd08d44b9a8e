"""Planted culprits, third family (issue 41's independent generator, rebuilt here from its
description, not from its code): **paired channels, where float16 rounding of large weights
destroys a small signal**; no tensor leaves float16's range; each culprit is fixed by keeping
that one layer in float32. Optionally overflow culprits beside them.

A graph of N op nodes is a sequence of blocks on a signal ``h`` of width 16 (|values| ~ 1,
kept so by orthogonal maps ``Q``):

* ``paired`` block: ``P = FC(h, [L R + D; L R])`` with ``R`` a random orthogonal map and
  ``L = 1024``: its two halves, sliced apart and subtracted, give ``D h``; a FullyConnected
  beside it adds ``S h``, so ``h' = (D + S) h = Q h``. The **culprit** carries half the
  signal in the pairing, ``D = S = Q / 2``: float16 rounds weights of ~256 to a spacing of
  0.25 and outputs of ~1000 to 0.5, and ``D`` (~0.1 per weight) is lost, ~half the block's
  output. The **look-alike** has the same large weights, ``D = 0, S = Q``: both halves are
  the same rows, rounded alike, and their difference stays exactly 0: harmless.
* ``overflow`` block (``overflow=`` count): ``FC(16 h, 2**14 Q) * 2**-18``: weights up to
  ~1.2e4 (in range), products ``2**18 Q h`` beyond 65504 in float32 wherever ``|Q h| >
  0.25`` (range culprits, found without an execution).
* ``plain``: ``FC(h, Q)``.

``'dag'`` graphs give every block a second path (the lower half of its output recomputed
from its input by a FullyConnected of the block's map, joined by a Concat). The culprits are
the paired FullyConnected layers ``pair{i}`` (accuracy) and ``big{i}`` (overflow); keeping
one in float32 makes its slices and subtraction (or scaling) float32 too.
"""
from __future__ import annotations

import numpy as np

from _planted import BATCH, WIDTH, Net, block_count, check_shape, orthogonal as _orthogonal, plan
from planted_culprits import Planted

LARGE = 1024.0
BIG = 2.0 ** 18
_OPS = {"paired": 6, "overflow": 3, "plain": 1}
_LOOKALIKES = ("paired", "plain", "paired", "plain", "paired")


class _Net(Net):
    def fc(self, x, name: str, weight: np.ndarray, bias: None = None):
        return self.dense(x, name, weight, no_bias=True)

    def paired(self, h, i: int, culprit: bool):
        q, r = _orthogonal(self.rng, WIDTH), _orthogonal(self.rng, WIDTH)
        d, s = (q / 2, q / 2) if culprit else (np.zeros_like(q), q)
        p = self.fc(h, f"pair{i}", np.concatenate([LARGE * r + d, LARGE * r]))
        a = self.op(self.sym.slice_axis, p, axis=1, begin=0, end=WIDTH, name=f"pair{i}_a")
        b = self.op(self.sym.slice_axis, p, axis=1, begin=WIDTH, end=2 * WIDTH, name=f"pair{i}_b")
        diff = self.op(self.sym.elemwise_sub, a, b, name=f"pair{i}_diff")
        side = self.fc(h, f"pair{i}_side", s)
        return self.op(self.sym.elemwise_add, diff, side, name=f"pair{i}_sum"), f"pair{i}", q

    def overflow(self, h, i: int, culprit: bool):
        q = _orthogonal(self.rng, WIDTH)
        x = self.op(self.sym._internal._mul_scalar, h, scalar=16.0, name=f"big{i}_in")
        y = self.fc(x, f"big{i}", BIG / 16 * q)
        return (self.op(self.sym._internal._mul_scalar, y, scalar=1.0 / BIG, name=f"big{i}_scaled"),
                f"big{i}", q)

    def plain(self, h, i: int, culprit: bool):
        q = _orthogonal(self.rng, WIDTH)
        return self.fc(h, f"fc{i}", q), f"fc{i}", q


def planted_paired(n: int, k: int, shape: str = "chain", seed: int = 0, overflow: int = 0) -> Planted:
    """A ``shape`` graph (``'chain'`` or ``'dag'``) of exactly ``n`` op nodes with ``k``
    paired-channel accuracy culprits and ``overflow`` overflow culprits at random blocks
    (``seed``); ``culprits`` lists both kinds (the accuracy ones first)."""
    extra = check_shape(shape)
    net = _Net(seed)
    blocks = block_count(n, k + overflow, _LOOKALIKES, _OPS, extra)
    at = net.rng.choice(np.arange(blocks), size=k + overflow, replace=False).tolist()
    kinds = {b: ("paired" if j < k else "overflow") for j, b in enumerate(at)}
    h, made = net.build(plan(blocks, kinds, _LOOKALIKES, _OPS, extra, n), shape)
    sym, args, sample, _ = net.finish(h, n)
    culprits = [(name, kind) for name, kind, culprit in made if culprit]
    return Planted(sym, args, sample, tuple([name for name, kind in culprits if kind == "paired"]
                                            + [name for name, kind in culprits if kind != "paired"]),
                   net.ops)
