"""Running graphs and judging outputs: comparisons, degenerate outputs, the structure check's
cast stripping, the tensors the sweep checks (and their names across a conversion)."""
from __future__ import annotations

from typing import Sequence

from mxnet_amp.ir.graph import ANY_CAST_OPS
from mxnet_amp.mx.hardware import environ_set
from mxnet_amp.passes.dense_outputs import dense_outputs


def _subgraph_backend(name: str | None):
    """Binds inside use MXNet's graph partitioning backend ``name`` (None: the default,
    oneDNN fusion on CPU); MXNet reads ``MXNET_SUBGRAPH_BACKEND`` at each bind."""
    return environ_set("MXNET_SUBGRAPH_BACKEND", name)


def _bind_forward(sym, args, auxs, data, backend: str | None = "NONE"):
    """Outputs of ``sym`` bound on the CPU, as float32 numpy arrays. By default without
    oneDNN graph fusion: a fused conv+relu reports the relu's values as the conv's output,
    and the sweep reads internal outputs."""
    import mxnet as mx
    import numpy as np
    with _subgraph_backend(backend):
        ex = sym.bind(mx.cpu(), args={**args, **data}, aux_states=dict(auxs), grad_req="null")
        outs = ex.forward(is_train=False)
        # a bf16 output (native run) has MXNet's structured stand-in dtype; widen it first
        return [o.asnumpy() if np.dtype(o.dtype).names is None else
                o.astype("float32").asnumpy() for o in outs]


def _copies(params: dict) -> dict:
    return {k: v.copy() for k, v in params.items()}


def _widened(params: dict) -> dict:
    """``params`` with low precision arrays cast to float32."""
    from mxnet_amp.ir.dtypes import LOW_PRECISION
    from mxnet_amp.ir.dtypes import array_dtype
    from mxnet_amp.mx.params import cast_array
    return {k: (cast_array(v, "float32") if array_dtype(v) in LOW_PRECISION else v)
            for k, v in params.items()}


def strip_casts(sym):
    """``sym`` without its ``amp_cast`` / ``amp_multicast`` nodes
    (:func:`mxnet_amp.passes.strip_casts.strip_casts`): the converted graph computing
    entirely in float32, which must reproduce the float32 model to float32 roundoff."""
    from mxnet_amp.mx.io import graph_from_symbol, graph_to_symbol
    from mxnet_amp.passes.strip_casts import strip_casts as strip
    return graph_to_symbol(strip(graph_from_symbol(sym)))


def checked_entries(graph):
    """``(heads to compare, heads past a boundary op, extra entries to compare)``, as lists
    (:func:`mxnet_amp.passes.dense_outputs.dense_outputs`, the automatic mode's own split).

    A head downstream of top-k / NMS / argmax, a comparison
    or box decoding (:data:`mxnet_amp.passes.dense_outputs.BOUNDARY_OPS`) is only checked for
    finiteness: with random weights scores tie, so rounding flips masks and picks other
    boxes, and decoding exponentiates huge random regressions.
    Instead the float inputs of the first such ops on each path (the dense scores and box
    regressions) are compared."""
    split = dense_outputs(graph)
    return list(split.dense), list(split.after), list(split.feeds)


def _named(graph, skip_casts: bool = True) -> dict[tuple[str, int], int]:
    """``(name, occurrence) -> node index``: gluon repeats names when a block runs twice
    (an FPN's shared head), so a name alone does not find a node; casts a conversion or an
    emulation inserted do not count."""
    seen: dict[str, int] = {}
    found = {}
    for i, n in enumerate(graph.nodes):
        if skip_casts and n.op in ANY_CAST_OPS:
            continue
        k = seen.get(n.name, 0)
        seen[n.name] = k + 1
        found[(n.name, k)] = i
    return found


def _with_heads(sym, entries):
    """``sym`` with extra outputs: ``(node name, occurrence, output index)`` triples (see
    :func:`_named`); for a low precision output of an emulated graph, its rounded copy."""
    from mxnet_amp.ir.graph import Entry, Graph
    from mxnet_amp.mx.io import graph_from_symbol, graph_to_symbol
    g = graph_from_symbol(sym)
    index = _named(g)
    # an emulated low precision output x is read through amp_cast(cast(x, low), float32)
    rounded = {}
    for j, n in enumerate(g.nodes):
        if n.op == "amp_cast" and n.attrs.get("dtype") == "float32":
            inner = g.nodes[n.inputs[0].node]
            if inner.op in ANY_CAST_OPS and inner.attrs.get("dtype") != "float32":
                rounded[(inner.inputs[0].node, inner.inputs[0].output)] = j
    heads = list(g.heads)
    for name, occurrence, k in entries:
        i = index[(name, occurrence)]
        heads.append(Entry(rounded[(i, k)]) if (i, k) in rounded else Entry(i, k))
    return graph_to_symbol(Graph(g.nodes, tuple(heads), g.attrs))


def compare(ref: Sequence, got: Sequence) -> dict:
    """Per-output error of ``got`` against ``ref`` (numpy arrays): the largest
    ``max|got - ref| / max|ref|`` over float outputs, and the outputs that are non-finite
    where ``ref`` is finite."""
    import numpy as np
    errs, new_nonfinite = [], []
    for k, (r, g) in enumerate(zip(ref, got)):
        r = np.asarray(r)
        g = np.asarray(g)
        if r.shape != g.shape:
            return {"error": f"output {k}: shape {g.shape} != fp32 shape {r.shape}"}
        if not np.issubdtype(r.dtype, np.floating):
            continue
        r = r.astype(np.float64)
        g = g.astype(np.float64)
        fin = np.isfinite(r)
        if (fin & ~np.isfinite(g)).any():
            new_nonfinite.append(k)
        rf, gf = r[fin], np.where(np.isfinite(g), g, 0.0)[fin]
        scale = float(np.abs(rf).max()) if rf.size else 0.0
        err = float(np.abs(rf - gf).max()) / scale if scale > 0 else float(np.abs(gf).max() if gf.size else 0.0)
        errs.append(err)
    return {"max_rel_err": max(errs) if errs else 0.0, "per_output_err": errs,
            "nonfinite_outputs": new_nonfinite}


def degenerate(ref) -> str | None:
    """Why the float32 output ``ref`` (numpy) measures nothing, or None: *vanished* (all
    ~0, or one constant value: every rounding error relative to it is 0 or meaningless) or
    *saturated* (nearly every element at the tensor's minimum or maximum, as sigmoids of
    huge random-init logits are: rounding cannot move them)."""
    import numpy as np
    r = np.asarray(ref, dtype=np.float64)
    r = r[np.isfinite(r)]
    if not r.size:
        return None
    top = float(np.abs(r).max())
    if top < 1e-30:
        return "vanished: all ~0"
    spread = float(r.max() - r.min())
    if r.size > 1 and spread <= 1e-6 * top:
        return f"vanished: constant {float(r.flat[0]):.3g}"
    if r.size >= 16:
        at_ends = np.mean((r <= r.min() + 1e-6 * spread) | (r >= r.max() - 1e-6 * spread))
        if at_ends >= 0.9:
            return f"saturated: {100 * at_ends:.0f}% of values at the minimum or maximum"
    return None
