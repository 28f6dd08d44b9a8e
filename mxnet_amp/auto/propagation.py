"""Measured propagation (step 4 of :mod:`mxnet_amp.auto`): how much of each node's actual
local error reaches the judged outputs, for every node at once.

A node's error ``e`` (its low precision output from exact inputs, minus the float32 one:
:mod:`mxnet_amp.auto.attribution`) changes the outputs by ``J e`` to first order, ``J`` the
float32 graph's Jacobian from that tensor to the outputs. Its norm is measured, not
estimated from per-op gains multiplied along paths: the float32 graph gets an added zero
``z`` at every node output that carries an error (``y + z``), is run once recording for
autograd (in inference mode: BatchNorm's running statistics, no dropout), and every
backward pass from an output direction ``v`` gives ``v^T J`` at each ``z`` at once; its dot
product with the node's own error is ``v^T J e``. Over the standard basis of the outputs
(when they hold at most ``PROBES`` elements) the squares add up to ``|J e|^2`` exactly; over
``PROBES`` random sign vectors their mean does in expectation (Hutchinson's estimator: the
norm within about 0.7-1.3 of the true one, whatever the graph). Cancellations downstream
(paired channels subtracted, a shift a softmax ignores) are measured as they happen: the
error is the node's own, with the structure rounding gave it.

First order is not enough where an error is as large as the signal it rides on and meets
non-linear ops on its way (on the 5000-node DAGs of benchmarks/planted_culprits_attrib.py,
culprits ~800 LayerNorms and softmax centrings before the outputs read 100x too small and
ranked past 200th). :func:`pushed` measures the rest without linearising: for the nodes
the attribution picks (the largest by ``J e``, then the largest errors: the terms a first
order reading drops grow with ``|e|^2``), the float32 graph runs with just that node's
error added to its output, ``y + e``, and the outputs' change is read directly (copies of
the sample batch side by side, one forward pass for many nodes).

Each output's direction is weighted by ``1 / (max|ref| sqrt(size))`` so that the norm reads
as a share of that output's scale per element (the check's units, up to max against root
mean square); elements where the float32 reference is not finite are not judged.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from ..ir.graph import Entry, Graph, GraphBuilder, Node
from ..mx.io import graph_to_symbol

if TYPE_CHECKING:
    from .runner import Runs

__all__ = ["PROBES", "PUSHED", "injected", "output_weights", "propagated", "push_limit", "pushed"]

# output directions per measurement: the standard basis where the outputs hold at most this
# many elements (exact), else this many random sign vectors (each a backward pass; the
# norms then within ~0.7-1.3 of the exact ones at the 5-95% quantiles)
PROBES = 16
_SEED = 0
_FLOOR = 6.1e-5   # float16's smallest normal: the scale of an all-zero output
# nodes whose error is pushed through the float32 graph itself (:func:`pushed`), at most
PUSHED = 64
# copies of the sample batch one pushing forward pass holds at most: input elements in all
_TILED_ELEMENTS = 1 << 20
# and all the pushes together (a large sample batch: fewer nodes pushed, at least 8)
_PUSHED_ELEMENTS = 1 << 24
# copies side by side with no error added further than this from the reference (in the
# push's units: float32's own rounding differs with the batch size, measured 2e-5 on a
# 400-node DAG) mean axis 0 is no batch axis; a control copy that differs at all from the
# same copy in a pass with no error means an op mixes the copies: one pass per node then
_NOT_A_BATCH = 1e-3


def injected(original: Graph, shapes: Mapping[tuple[int, int], tuple[int, ...]],
             heads: Sequence[tuple[int, int]]) -> tuple[Graph, dict[tuple[int, int], str]]:
    """``original`` with ``y + reshape(z, y.shape)`` in place of each tensor ``y`` of
    ``shapes`` (``(node, output)`` key -> its shape), ``z`` a new flat variable, and ``heads``
    (keys) as its outputs. Returns the graph and each point's variable name."""
    builder = GraphBuilder()
    builder.names.update(n.name for n in original.nodes)
    new: dict[tuple[int, int], Entry] = {}
    variables: dict[tuple[int, int], str] = {}
    used = original.num_used_outputs()
    for i, node in enumerate(original.nodes):
        ins = tuple(new[(e.node, e.output)] for e in node.inputs)
        idx = builder.add(node.replace(inputs=ins))
        for k in range(max(used[i], 1)):
            new[(i, k)] = Entry(idx, k)
            if (i, k) in shapes and not node.is_variable:
                # z is flat (its gradient is read without a reshape per backward pass)
                name = variables[(i, k)] = builder.fresh_name(f"{node.name}_out{k}_injected")
                z = builder.add(Node("null", name))
                shaped = builder.add(Node("reshape", builder.fresh_name(f"{name}_shaped"),
                                          (Entry(z),), {"shape": str(tuple(shapes[(i, k)]))}))
                new[(i, k)] = Entry(builder.add(Node(
                    "elemwise_add", builder.fresh_name(f"{node.name}_out{k}_plus"),
                    (Entry(idx, k), Entry(shaped)))))
    return builder.build([new[h] for h in heads], original.attrs), variables


def output_weights(references: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Per output, the weight of each element: ``1 / (max|ref| sqrt(size))`` where the
    reference is finite, 0 where it is not (not judged)."""
    out = []
    for ref in references:
        finite = np.isfinite(ref)
        scale = max(float(np.abs(ref[finite]).max(initial=0.0)), _FLOOR)
        out.append(np.where(finite, 1.0 / (scale * math.sqrt(max(int(finite.sum()), 1))), 0.0))
    return out


def _directions(weights: Sequence[np.ndarray]) -> list[list[np.ndarray]]:
    """The output directions: the weighted standard basis, or ``PROBES`` weighted random
    sign vectors scaled by ``1 / sqrt(PROBES)`` (their squares then add up to the norm)."""
    sizes = [w.size for w in weights]
    total = sum(sizes)
    if total <= PROBES:
        basis = []
        for o, w in enumerate(weights):
            for j in range(w.size):
                parts = [np.zeros(x.shape, np.float32) for x in weights]
                parts[o].flat[j] = w.flat[j]
                basis.append(parts)
        return basis
    rng = np.random.RandomState(_SEED)
    return [[(w * rng.choice([-1.0, 1.0], size=w.shape) / math.sqrt(PROBES)).astype(np.float32)
             for w in weights] for _ in range(PROBES)]


def propagated(runs: Runs, original: Graph, errors: Mapping[str, tuple[tuple[int, int], np.ndarray]],
               heads: Sequence[tuple[int, int]], references: Sequence[np.ndarray]
               ) -> dict[str, float]:
    """Node -> the norm of the outputs' change its error makes (module doc), in units of the
    outputs' scale per element.

    ``errors``: node -> (the original tensor its error sits on, the error: finite arrays of
    that tensor's shape); ``heads``: the judged tensors' keys, ``references`` their float32
    values. One recorded forward pass of the float32 graph on ``runs``' inputs and params,
    and one backward pass per output direction."""
    import mxnet as mx

    shapes = {key: tuple(err.shape) for key, err in errors.values()}
    graph, variables = injected(original, shapes, heads)
    sym = graph_to_symbol(graph)
    values = {k: v.as_in_context(runs.config.ctx) for k, v in runs.config.params().items()}
    values.update(runs.config.inputs)
    zs = {}
    for key, name in variables.items():
        zs[key] = values[name] = mx.nd.zeros((int(np.prod(shapes[key], dtype=np.int64)),),
                                             ctx=runs.config.ctx)
        zs[key].attach_grad()
    names = sym.list_inputs()
    op = mx.nd.CachedOp(sym)
    with mx.autograd.record(train_mode=False):
        outs = op(*[values[n] for n in names])
    outs = [outs] if isinstance(outs, mx.nd.NDArray) else list(outs)
    # every gradient read at once, one after another (one copy out per backward pass, not
    # one per point: ~2500 small copies per pass took longer than the pass)
    keys = sorted(zs)
    starts = np.cumsum([0] + [int(np.prod(shapes[key], dtype=np.int64)) for key in keys])
    at = {key: (int(starts[j]), int(starts[j + 1])) for j, key in enumerate(keys)}
    flat = {name: (at[key], err.astype(np.float64).ravel()) for name, (key, err) in errors.items()}
    sq = dict.fromkeys(errors, 0.0)
    for parts in _directions(output_weights(references)):
        mx.autograd.backward(outs, [mx.nd.array(p, ctx=runs.config.ctx) for p in parts],
                             retain_graph=True)
        grad = mx.nd.concat(*[zs[key].grad for key in keys], dim=0).asnumpy().astype(np.float64)
        for name, ((start, end), err) in flat.items():
            sq[name] += float(np.dot(grad[start:end], err)) ** 2
    return {name: math.sqrt(v) for name, v in sq.items()}


def pushed(runs: Runs, original: Graph,
           points: Mapping[str, Sequence[tuple[tuple[int, int], np.ndarray]]],
           heads: Sequence[tuple[int, int]], references: Sequence[np.ndarray]
           ) -> dict[str, float]:
    """Node -> the norm of the outputs' change when its error alone is added to its output
    and the float32 graph runs on from there: the error pushed through the graph itself, not
    through its Jacobian (in the units of :func:`propagated`; inf where the outputs turn
    non-finite where the reference is not).

    The linear measure is exact to first order only: an error as large as the signal it
    rides on, met by ~800 normalisations (a LayerNorm divides by a standard deviation the
    error itself changes; a softmax saturates), reaches the outputs through terms in
    ``|e|^2`` and beyond that ``J e`` does not hold. Here each node's ``points`` (the
    original tensors its error sits on, and the errors) are added, ``y + e``, in one copy of
    the sample batch, the others zero; copies of the batch side by side (concatenated on
    axis 0, at most ``2**20`` input elements a pass) run in one forward pass, beside a control
    copy with no error, which every copy's outputs are compared with. Where the control
    copy is not the reference (an op mixing the batch axis, or inputs without one), each
    node gets a pass of its own, beside an untouched one."""
    import mxnet as mx

    names = list(points)
    if not names:
        return {}
    keys = sorted({key for name in names for key, _ in points[name]})
    shapes = {key: tuple(err.shape) for name in names for key, err in points[name]}
    weights = output_weights(references)
    params = {k: v.as_in_context(runs.config.ctx) for k, v in runs.config.params().items()}
    batch = _batch(runs.config.inputs, shapes, references)
    width = 1
    if batch:
        per_copy = sum(int(np.prod(v.shape, dtype=np.int64)) for v in runs.config.inputs.values())
        width = max(1, min(len(names) + 1, _TILED_ELEMENTS // max(per_copy, 1)))
    if width > 1:
        result = _push_tiled(runs, original, points, names, keys, shapes, heads, references,
                             weights, params, batch, width)
        if result is not None:
            return result
    # one pass per node (and one untouched), the batch as it is
    graph, variables = injected(original, shapes, heads)
    sym = graph_to_symbol(graph)
    op, inputs = mx.nd.CachedOp(sym), sym.list_inputs()
    values = dict(params)
    values.update(runs.config.inputs)

    def run(errors: Mapping[tuple[int, int], np.ndarray]) -> list[np.ndarray]:
        for key, name in variables.items():
            err = errors.get(key)
            values[name] = mx.nd.array(err.ravel() if err is not None else
                                       np.zeros(int(np.prod(shapes[key], dtype=np.int64)),
                                                np.float32), ctx=runs.config.ctx)
        return _outputs(op(*[values[n] for n in inputs]))

    control = run({})
    return {name: _norm(run(dict(points[name])), control, weights) for name in names}


def push_limit(inputs: Mapping) -> int:
    """How many nodes' errors to push on these sample inputs: :data:`PUSHED`, fewer (at least
    8) where their copies would exceed ``2**24`` input elements in all (resnet50's 8 images
    at 224 px: 13 nodes, one forward pass each)."""
    per_copy = sum(int(np.prod(v.shape, dtype=np.int64)) for v in inputs.values())
    return max(8, min(PUSHED, _PUSHED_ELEMENTS // max(per_copy, 1)))


def _batch(inputs: Mapping, shapes: Mapping[tuple[int, int], tuple[int, ...]],
           references: Sequence[np.ndarray]) -> int:
    """The batch size every input, error and judged output shares on axis 0 (0: none)."""
    sizes = {v.shape[0] if len(v.shape) else -1 for v in inputs.values()}
    sizes |= {s[0] if s else -1 for s in shapes.values()}
    sizes |= {r.shape[0] if r.ndim else -1 for r in references}
    return sizes.pop() if len(sizes) == 1 and min(sizes) > 0 else 0


def _outputs(outs: Any) -> list[np.ndarray]:
    """A CachedOp's outputs (one NDArray or a list) as numpy arrays."""
    import mxnet as mx
    if isinstance(outs, mx.nd.NDArray):
        outs = [outs]
    return [o.asnumpy() for o in outs]


def _norm(outs: Sequence[np.ndarray], control: Sequence[np.ndarray],
          weights: Sequence[np.ndarray]) -> float:
    """The weighted norm of ``outs - control`` (inf where ``outs`` is not finite and the
    control is)."""
    total = 0.0
    for out, ctl, w in zip(outs, control, weights):
        judged = w > 0
        if not np.isfinite(out[judged]).all():
            return math.inf
        diff = np.where(judged, out.astype(np.float64) - ctl, 0.0) * w
        total += float(np.dot(diff.ravel(), diff.ravel()))
    return math.sqrt(total)


def _push_tiled(runs: Runs, original: Graph,
                points: Mapping[str, Sequence[tuple[tuple[int, int], np.ndarray]]],
                names: list[str], keys: list[tuple[int, int]],
                shapes: Mapping[tuple[int, int], tuple[int, ...]], heads: Sequence[tuple[int, int]],
                references: Sequence[np.ndarray], weights: Sequence[np.ndarray], params: dict,
                batch: int, width: int) -> dict[str, float] | None:
    """:func:`pushed` with ``width`` copies of the batch a pass: ``width - 1`` nodes' errors
    and the control copy last. A first pass with no error gives each copy's float32 outputs
    at this batch size: None where its last copy is not the reference (axis 0 is no batch
    axis), or where a pass's control copy is not that copy bit for bit (an op mixes the
    copies: one copy's error reached another)."""
    import mxnet as mx

    tiled = {key: (batch * width,) + tuple(shape[1:]) for key, shape in shapes.items()}
    graph, variables = injected(original, tiled, heads)
    sym = graph_to_symbol(graph)
    op = mx.nd.CachedOp(sym)
    values = dict(params)
    values.update({k: mx.nd.concat(*([v] * width), dim=0) for k, v in runs.config.inputs.items()})
    per = {key: int(np.prod(shapes[key], dtype=np.int64)) for key in keys}

    def run(group: Sequence[str]) -> list[list[np.ndarray]] | None:
        flat = {key: np.zeros(per[key] * width, np.float32) for key in keys}
        for j, name in enumerate(group):
            for key, err in points[name]:
                flat[key][j * per[key]:(j + 1) * per[key]] = err.ravel()
        for key, name in variables.items():
            values[name] = mx.nd.array(flat[key], ctx=runs.config.ctx)
        outs = _outputs(op(*[values[n] for n in sym.list_inputs()]))
        # an output that does not grow with the copies (an SSD's anchors, (1, A, 4)) has
        # no batch axis to split: the caller pushes one node a pass instead
        if any(o.ndim == 0 or o.shape[0] != batch * width for o in outs):
            return None
        return [[o[j * batch:(j + 1) * batch] for o in outs] for j in range(width)]

    first = run(())
    if first is None:
        return None
    untouched = first[width - 1]
    if _norm(untouched, references, weights) > _NOT_A_BATCH:
        return None
    result: dict[str, float] = {}
    for start in range(0, len(names), width - 1):
        group = names[start:start + width - 1]
        rows = run(group)
        if rows is None:
            return None
        control = rows[width - 1]
        if any(not np.array_equal(c, u, equal_nan=True) for c, u in zip(control, untouched)):
            return None
        for j, name in enumerate(group):
            result[name] = _norm(rows[j], control, weights)
    return result
