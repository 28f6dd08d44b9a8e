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

from planted_culprits import Planted

WIDTH = 16
BATCH = 4
LARGE = 1024.0
BIG = 2.0 ** 18
_OPS = {"paired": 6, "overflow": 3, "plain": 1}
_LOOKALIKES = ("paired", "plain", "paired", "plain", "paired")


def _orthogonal(rng: np.random.RandomState, n: int) -> np.ndarray:
    q, r = np.linalg.qr(rng.randn(n, n))
    return (q * np.sign(np.diag(r))).astype(np.float32)


class _Net:
    def __init__(self, seed: int) -> None:
        import mxnet as mx
        self.sym, self.rng = mx.sym, np.random.RandomState(seed)
        self.args: dict = {}
        self.ops = 0

    def op(self, fn, *args, **kwargs):
        self.ops += 1
        return fn(*args, **kwargs)

    def fc(self, x, name: str, weight: np.ndarray):
        self.args[f"{name}_weight"] = weight.astype(np.float32)
        return self.op(self.sym.FullyConnected, x, num_hidden=weight.shape[0], name=name,
                       no_bias=True)

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
    if shape not in ("chain", "dag"):
        raise ValueError(f"shape must be 'chain' or 'dag', got {shape!r}")
    net = _Net(seed)
    extra = 0 if shape == "chain" else 3
    per_block = sum(_OPS[kind] + extra for kind in _LOOKALIKES) / len(_LOOKALIKES)
    blocks = max(k + overflow + 1, int((n - 1) / per_block))
    at = net.rng.choice(np.arange(blocks), size=k + overflow, replace=False).tolist()
    kinds = {b: ("paired" if j < k else "overflow") for j, b in enumerate(at)}
    accuracy: list[str] = []
    ranges: list[str] = []
    h = net.sym.var("data")
    for i in range(blocks):
        kind = kinds.get(i, _LOOKALIKES[i % len(_LOOKALIKES)])
        reserved = sum(_OPS[kinds[j]] + extra for j in kinds if j > i)
        if i not in kinds and _OPS[kind] + extra > n - 1 - net.ops - reserved:
            kind = "plain"
        out, name, linear = getattr(net, kind)(h, i, i in kinds)
        if i in kinds:
            (accuracy if kind == "paired" else ranges).append(name)
        if shape == "dag":
            top = net.op(net.sym.slice_axis, out, axis=1, begin=0, end=WIDTH // 2,
                         name=f"path{i}_top")
            low = net.fc(h, f"path{i}_low", linear[WIDTH // 2:])
            out = net.op(net.sym.Concat, top, low, dim=1, name=f"path{i}_join")
        h = out
    for i in range(n - 1 - net.ops):   # exactly n op nodes: copies (exact in float16)
        h = net.op(net.sym.identity, h, name=f"copy{i}")
    out = net.op(net.sym.reshape, h, shape=(0, 4, -1), name="out")
    sample = net.rng.uniform(-1, 1, (BATCH, WIDTH)).astype(np.float32)
    import mxnet as mx
    args = {name: mx.nd.array(v) for name, v in net.args.items()}
    return Planted(out, args, sample, tuple(accuracy + ranges), net.ops)
