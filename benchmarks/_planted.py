"""The block loop the planted-culprit generators share (``planted_culprits_structured.py``,
``planted_paired.py``, ``planted_culprits_attrib.py``): a graph is a sequence of blocks on a
signal ``h`` of width 16, some of them culprits, the rest look-alikes or plain layers.

What is the same in all three lives here: how many blocks fit ``n`` op nodes and which
kind each block is (the culprits' kinds reserved first, a look-alike that no longer fits
made plain, :func:`plan`), the DAG's second path around every block (its output's lower
half recomputed from the block's input by a FullyConnected beside it, joined by a Concat),
the identity padding to exactly ``n`` op nodes, the output reshaped to 3-D, the sample batch,
and the params turned into NDArrays (:meth:`Net.finish`). What each block computes is the
generator's own (a subclass of :class:`Net` with one method per kind).
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

WIDTH = 16
BATCH = 4
# op nodes the DAG's second path adds to a block: slice, FullyConnected, Concat
DAG_OPS = 3


def orthogonal(rng: np.random.RandomState, n: int) -> np.ndarray:
    """A random orthogonal ``n x n`` map (float32)."""
    q, r = np.linalg.qr(rng.randn(n, n))
    return (q * np.sign(np.diag(r))).astype(np.float32)


def check_shape(shape: str) -> int:
    """The op nodes the shape adds per block (ValueError for anything but chain or dag)."""
    if shape not in ("chain", "dag"):
        raise ValueError(f"shape must be 'chain' or 'dag', got {shape!r}")
    return DAG_OPS if shape == "dag" else 0


def block_count(n: int, culprits: int, lookalikes: Sequence[str], ops: Mapping[str, int],
                extra: int) -> int:
    """Blocks for about ``n`` op nodes at the look-alikes' mean size (at least one more than
    the culprits)."""
    per_block = sum(ops[kind] + extra for kind in lookalikes) / len(lookalikes)
    return max(culprits + 1, int((n - 1) / per_block))


def plan(count: int, kinds: Mapping[int, str], lookalikes: Sequence[str], ops: Mapping[str, int],
         extra: int, n: int, skip: bool = False) -> list[tuple[str, bool]]:
    """``(kind, culprit)`` of each block: block ``i`` is a culprit of ``kinds[i]``, else the
    look-alike ``lookalikes[i % len]``, made ``'plain'`` where it does not fit the op nodes
    left once the later culprits are reserved; ``skip``: a block that does not fit even then
    is left out (the culprits after it still come, so N grows past ``n`` for large k)."""
    blocks: list[tuple[str, bool]] = []
    used = 0
    for i in range(count):
        kind = kinds.get(i, lookalikes[i % len(lookalikes)])
        left = n - 1 - used - sum(ops[kinds[j]] + extra for j in kinds if j > i)
        if i not in kinds and ops[kind] + extra > left:
            kind = "plain"
        if skip and i not in kinds and ops[kind] + extra > left:
            continue
        blocks.append((kind, i in kinds))
        used += ops[kind] + extra
    return blocks


class Net:
    """A graph under construction: ``sym`` (mx.sym), ``rng`` (seeded), the params and the op
    count. Subclasses add one method per block kind, ``kind(h, i, culprit) -> (out, name,
    linear)``: the block's output, its culprit node's name, and the float32 map it computes
    (None: the DAG's second path draws its own)."""

    def __init__(self, seed: int) -> None:
        import mxnet as mx
        self.sym, self.rng = mx.sym, np.random.RandomState(seed)
        self.args: dict = {}
        self.auxs: dict = {}
        self.ops = 0

    def op(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)``, counted as one op node."""
        self.ops += 1
        return fn(*args, **kwargs)

    def dense(self, x: Any, name: str, weight: np.ndarray, bias: Any = None, **attrs: Any) -> Any:
        """A FullyConnected of ``weight`` (and ``bias``, a scalar broadcast or an array; None:
        no bias param), ``attrs`` passed on as given."""
        self.args[f"{name}_weight"] = np.asarray(weight, np.float32)
        if bias is not None:
            self.args[f"{name}_bias"] = np.broadcast_to(np.float32(bias), (weight.shape[0],)).copy() \
                if np.ndim(bias) == 0 else np.asarray(bias, np.float32)
        return self.op(self.sym.FullyConnected, x, num_hidden=weight.shape[0], name=name, **attrs)

    def fc(self, x: Any, name: str, weight: np.ndarray, bias: Any = None) -> Any:
        """The generator's dense layer (here :meth:`dense` as it is); the DAG's second path
        uses it too."""
        return self.dense(x, name, weight, bias)

    def second_path(self, h: Any, out: Any, i: int, linear: np.ndarray | None) -> Any:
        """The DAG's path around block ``i``: its output's upper half, then the lower half
        computed from its input ``h`` by ``linear``'s lower rows (None: a fresh orthogonal
        map's)."""
        top = self.op(self.sym.slice_axis, out, axis=1, begin=0, end=WIDTH // 2, name=f"path{i}_top")
        low_map = orthogonal(self.rng, WIDTH) if linear is None else linear
        low = self.fc(h, f"path{i}_low", low_map[WIDTH // 2:])
        return self.op(self.sym.Concat, top, low, dim=1, name=f"path{i}_join")

    def build(self, blocks: Sequence[tuple[str, bool]], shape: str) -> tuple[Any, list[tuple[str, str, bool]]]:
        """The blocks in order from the input ``data`` (each with its second path in a DAG):
        the last output and ``(culprit node name, kind, culprit)`` of each block."""
        h = self.sym.var("data")
        made = []
        for i, (kind, culprit) in enumerate(blocks):
            out, name, linear = getattr(self, kind)(h, i, culprit)
            made.append((name, kind, culprit))
            h = self.second_path(h, out, i, linear) if shape == "dag" else out
        return h, made

    def finish(self, h: Any, n: int | None) -> tuple[Any, dict, np.ndarray, dict]:
        """Identity copies (exact in float16) up to ``n`` op nodes (None: none), the output
        reshaped to 3-D, then the sample batch: ``(sym, arg NDArrays, sample, aux NDArrays)``."""
        import mxnet as mx
        for i in range((n or 0) - 1 - self.ops):
            h = self.op(self.sym.identity, h, name=f"copy{i}")
        out = self.op(self.sym.reshape, h, shape=(0, 4, -1), name="out")
        sample = self.rng.uniform(-1, 1, (BATCH, WIDTH)).astype(np.float32)
        args = {k: mx.nd.array(v) for k, v in self.args.items()}
        auxs = {k: mx.nd.array(v) for k, v in self.auxs.items()}
        return out, args, sample, auxs
