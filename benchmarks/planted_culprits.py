"""Planted accuracy culprits: graphs of N op nodes in which exactly k nodes break float16.

A *culprit* is a FullyConnected layer whose float32 result is ``Q h + 2048``, the next op
subtracting 2048 again (``_minus_scalar``): float32 keeps the signal ``Q h`` (|values| ~ 1),
float16's spacing at 2048 is 2, so rounding the layer's output loses it. The generator is
fair: no tensor leaves float16's range (the largest is ~2050 < 65504) and none underflows, so
the range checks cannot see the culprits; only their low precision result is wrong.

Every other layer is a FullyConnected with a random orthogonal weight (norm preserving, so
the signal neither dies nor explodes over thousands of layers, and every one of them adds a
genuine float16 rounding error the search must tell from the culprits). ``'chain'`` graphs
are one path; ``'dag'`` graphs split each layer in two branches (each FC computes half of an
orthogonal map from the whole input) joined by a Concat, culprits sitting in one branch.

Used by ``benchmarks/auto_attribution.py`` and the tests.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

WIDTH = 16
BATCH = 4
CANCELLED = 2048.0


@dataclass(frozen=True)
class Planted:
    """A planted-culprit model: symbol, params, one sample batch, and the culprit names."""

    sym: object
    arg_params: dict
    sample: np.ndarray
    culprits: tuple[str, ...]
    op_nodes: int
    aux_params: dict = field(default_factory=dict)


def _orthogonal(rng: np.random.RandomState, n: int) -> np.ndarray:
    q, r = np.linalg.qr(rng.randn(n, n))
    return (q * np.sign(np.diag(r))).astype(np.float32)


class _Net:
    def __init__(self, seed: int) -> None:
        import mxnet as mx
        self.mx, self.rng = mx, np.random.RandomState(seed)
        self.args: dict = {}
        self.ops = 0
        self.culprits: list[str] = []

    def fc(self, h, name: str, weight: np.ndarray, bias: float = 0.0):
        self.args[f"{name}_weight"] = weight
        self.args[f"{name}_bias"] = np.full(weight.shape[0], bias, dtype=np.float32)
        self.ops += 1
        return self.mx.sym.FullyConnected(h, num_hidden=weight.shape[0], name=name)

    def layer(self, h, name: str, weight: np.ndarray, culprit: bool):
        """``weight @ h``; a culprit computes it as ``(weight @ h + 2048) - 2048``."""
        if not culprit:
            return self.fc(h, name, weight)
        self.culprits.append(name)
        self.ops += 1
        return self.mx.sym._internal._minus_scalar(self.fc(h, name, weight, CANCELLED),
                                                   scalar=CANCELLED, name=f"{name}_shift")

    def chain_block(self, h, i: int, culprit: bool):
        return self.layer(h, f"fc{i}", _orthogonal(self.rng, WIDTH), culprit)

    def dag_block(self, h, i: int, culprit: bool):
        q = _orthogonal(self.rng, WIDTH)
        a = self.layer(h, f"fc{i}a", q[:WIDTH // 2], culprit)
        b = self.layer(h, f"fc{i}b", q[WIDTH // 2:], False)
        self.ops += 1
        return self.mx.sym.Concat(a, b, dim=1, name=f"cat{i}")


def planted(n: int, k: int, shape: str = "chain", seed: int = 0) -> Planted:
    """A ``shape`` graph (``'chain'`` or ``'dag'``) of about ``n`` op nodes with ``k``
    culprits at random layers (``seed``); the output is reshaped to 3-D (no top-1 check:
    the error bound alone judges)."""
    if shape not in ("chain", "dag"):
        raise ValueError(f"shape must be 'chain' or 'dag', got {shape!r}")
    net = _Net(seed)
    per_block = 1 if shape == "chain" else 3
    blocks = max(k + 1, (n - 1 - k) // per_block)   # 1: the final reshape; k: shift ops
    at = set(net.rng.choice(np.arange(blocks), size=k, replace=False).tolist())
    h = net.mx.sym.var("data")
    build = net.chain_block if shape == "chain" else net.dag_block
    for i in range(blocks):
        h = build(h, i, i in at)
    for i in range(n - 1 - net.ops):   # exactly n op nodes: copies (exact in float16)
        h = net.mx.sym.identity(h, name=f"copy{i}")
        net.ops += 1
    net.ops += 1
    out = net.mx.sym.reshape(h, shape=(0, 4, -1), name="out")
    sample = net.rng.uniform(-1, 1, (BATCH, WIDTH)).astype(np.float32)
    args = {k_: net.mx.nd.array(v) for k_, v in net.args.items()}
    return Planted(out, args, sample, tuple(net.culprits), net.ops)
