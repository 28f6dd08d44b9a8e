"""Planted accuracy culprits, second family: structured inputs, folded BatchNorms and weights
of large dynamic range, and long accumulations, with harmless look-alikes beside them.

Built independently of ``benchmarks/planted_culprits.py`` (whose culprits all compute
``(Q h + 2048) - 2048`` right after one FullyConnected): here a graph of N op nodes is a
sequence of *blocks* on a signal ``h`` of width 16 (|values| ~ 1, kept so by orthogonal
maps), each block one of

* ``paired`` (structured channels): ``P = FC(h, [A; B], bias [C; C])`` with ``C = 2048``,
  its halves sliced apart and subtracted, ``h' = FC(h, Q) + (P[:16] - P[16:])``. The
  *look-alike* has ``A = B = R`` (paired channels: the difference is 0, and low precision
  rounds both halves alike, so it stays 0: harmless); the *culprit* has ``A = R, B = 0``
  (the difference is ``R h``, carried through float16's spacing of 2 at 2048: lost). A
  gain taken with random-sign perturbations reads both alike (it breaks the pairing);
  only the culprit's rounding reaches the output.
* ``batchnorm`` (a folded BatchNorm whose large bias cancels the product):
  ``BatchNorm(FC([h, M], [Q, 1]))`` with running mean ``M``: ``Q h`` in float32; folded
  (the default), the FullyConnected computes ``Q h + M`` and its bias ``-M``. The culprit
  has ``M = 2048`` (the product rounded in float16 before the bias, as float16 GPU kernels
  add it, loses ``Q h``); the look-alike ``M = 0``. No tensor leaves float16's range.
* ``dynamic`` (weights of large dynamic range): ``FC([h; h], [Q + L S, -L S])`` with ``S``
  random signs: ``Q h`` in float32. The culprit has ``L = 2048`` (its weights span 2**-3 to
  2**11; rounded to float16 ``Q + L S`` loses ``Q``); the look-alike ``L = 0``, ``[Q/2, Q/2]``.
* ``accumulation`` (a long accumulation): ``FC(tile(h, m), [Q/m + A_1, ..., Q/m + A_m])``,
  a dot over an axis of ``16 m = 2048`` values with ``A_j = -A_{j + m/2}`` random signs of
  size 8: ``Q h`` in float32, carried in slivers ``Q/m`` (~2e-3) spread over the whole axis.
  The culprit's slivers ride on the pattern: float16's spacing at 8 is 2**-7, so each is
  rounded away (or to a whole spacing), and their sum over 2048 terms, the answer, loses
  ~0.4 of ``Q`` (max norm); the look-alike has ``A = 0``: each sliver rounds to 2**-12 of
  itself and the sum keeps ``Q h``. No single weight or product matters: the length does
  (with ``m = 2`` the same pattern loses 0.006 of ``Q``, with ``m = 16`` 0.05).
* ``plain``: ``FC(h, Q)``.

``'chain'`` graphs are the blocks in sequence; ``'dag'`` graphs give every block a second
path: the lower half of its output recomputed from its input by the block's float32 map
(a FullyConnected beside it, joined by a Concat), the upper half sliced from the block. k blocks are
culprits (the four kinds in turn), the others look-alikes and plain layers. Each culprit
is one node: the FullyConnected named in ``culprits``; keeping it in float32 makes what
reads it float32 too (slices, subtraction, BatchNorm folded into it), and its output is
right. Used by ``benchmarks/auto_attribution.py`` and the tests.
"""
from __future__ import annotations

import numpy as np

from _planted import BATCH, WIDTH, Net, block_count, check_shape, orthogonal as _orthogonal, plan
from planted_culprits import Planted

LARGE = 2048.0
KINDS = ("paired", "batchnorm", "dynamic", "accumulation")
_LOOKALIKES = ("paired", "plain", "paired", "batchnorm", "paired", "dynamic", "accumulation")
# op nodes per block, for sizing the graph
_OPS = {"paired": 6, "batchnorm": 6, "dynamic": 2, "accumulation": 2, "plain": 1}
# the long accumulation: the signal tiled TILES times (an axis of 16 * TILES values), and
# the size of the zero-sum pattern its slivers ride on in the culprit
TILES = 128
PATTERN = 8.0


class _Builder(Net):
    def fc(self, x, name: str, weight: np.ndarray, bias: np.ndarray | None = None):
        return self.dense(x, name, weight, bias, no_bias=bias is None)

    def paired(self, h, i: int, culprit: bool):
        r = _orthogonal(self.rng, WIDTH)
        q = _orthogonal(self.rng, WIDTH)
        if culprit:
            r, q = r / np.sqrt(2), q / np.sqrt(2)
        weight = np.concatenate([r, np.zeros_like(r) if culprit else r])
        p = self.fc(h, f"pair{i}", weight, np.full(2 * WIDTH, LARGE, np.float32))
        a = self.op(self.sym.slice_axis, p, axis=1, begin=0, end=WIDTH, name=f"pair{i}_a")
        b = self.op(self.sym.slice_axis, p, axis=1, begin=WIDTH, end=2 * WIDTH, name=f"pair{i}_b")
        d = self.op(self.sym.elemwise_sub, a, b, name=f"pair{i}_diff")
        y = self.fc(h, f"pair{i}_q", q)
        out = self.op(self.sym.elemwise_add, y, d, name=f"pair{i}_sum")
        return out, f"pair{i}", q + (r if culprit else 0)

    def batchnorm(self, h, i: int, culprit: bool):
        mean = LARGE if culprit else 0.0
        first = self.op(self.sym.slice_axis, h, axis=1, begin=0, end=1, name=f"bn{i}_first")
        zero = self.op(self.sym._internal._mul_scalar, first, scalar=0.0, name=f"bn{i}_zero")
        const = self.op(self.sym._internal._plus_scalar, zero, scalar=mean, name=f"bn{i}_const")
        x = self.op(self.sym.Concat, h, const, dim=1, name=f"bn{i}_in")
        q = _orthogonal(self.rng, WIDTH)
        weight = np.concatenate([q, np.ones((WIDTH, 1), np.float32)], 1)
        y = self.fc(x, f"bn{i}_fc", weight)
        eps = 1e-3
        self.args[f"bn{i}_gamma"] = np.ones(WIDTH, np.float32)
        self.args[f"bn{i}_beta"] = np.zeros(WIDTH, np.float32)
        self.auxs[f"bn{i}_moving_mean"] = np.full(WIDTH, mean, np.float32)
        self.auxs[f"bn{i}_moving_var"] = np.full(WIDTH, 1.0 - eps, np.float32)
        out = self.op(self.sym.BatchNorm, y, eps=eps, fix_gamma=False, use_global_stats=True,
                      name=f"bn{i}")
        return out, f"bn{i}_fc", q

    def dynamic(self, h, i: int, culprit: bool):
        q = _orthogonal(self.rng, WIDTH)
        if culprit:
            signs = self.rng.choice([-LARGE, LARGE], size=(WIDTH, WIDTH)).astype(np.float32)
            weight = np.concatenate([q + signs, -signs], 1)
        else:
            weight = np.concatenate([q / 2, q / 2], 1)
        x = self.op(self.sym.Concat, h, h, dim=1, name=f"dyn{i}_in")
        return self.fc(x, f"dyn{i}", weight), f"dyn{i}", q

    def accumulation(self, h, i: int, culprit: bool):
        q = _orthogonal(self.rng, WIDTH)
        pattern = np.zeros((TILES, WIDTH, WIDTH), np.float32)
        if culprit:
            half = self.rng.choice([-PATTERN, PATTERN], size=(TILES // 2, WIDTH, WIDTH))
            pattern = np.concatenate([half, -half]).astype(np.float32)
        # column block j of the weight multiplies copy j of h: Q / TILES + A_j
        weight = np.concatenate(list(q / TILES + pattern), 1)
        x = self.op(self.sym.tile, h, reps=(1, TILES), name=f"long{i}_in")
        return self.fc(x, f"long{i}", weight), f"long{i}", q

    def plain(self, h, i: int, culprit: bool):
        q = _orthogonal(self.rng, WIDTH)
        return self.fc(h, f"fc{i}", q), f"fc{i}", q


def planted_structured(n: int, k: int, shape: str = "chain", seed: int = 0) -> Planted:
    """A ``shape`` graph (``'chain'`` or ``'dag'``) of about ``n`` op nodes (exactly, padded
    with identities) with ``k`` culprits of the kinds in ``KINDS``, in turn, at random
    blocks (``seed``). In a DAG the second path around each block recomputes the output's
    lower half from the block's input by the block's own float32 map, so the two paths
    together are that map (orthogonal: norms kept over thousands of blocks; a residual sum,
    even renormalised, let the signal or a culprit's error fade)."""
    extra = check_shape(shape)
    net = _Builder(seed)
    blocks = block_count(n, k, _LOOKALIKES, _OPS, extra)
    at = sorted(net.rng.choice(np.arange(blocks), size=k, replace=False).tolist())
    kinds = {b: KINDS[j % len(KINDS)] for j, b in enumerate(at)}
    h, made = net.build(plan(blocks, kinds, _LOOKALIKES, _OPS, extra, n), shape)
    sym, args, sample, auxs = net.finish(h, n)
    return Planted(sym, args, sample, tuple(name for name, _, culprit in made if culprit),
                   net.ops, auxs)
