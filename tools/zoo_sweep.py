"""Sweep the gluoncv model zoo: build each model offline, convert it to bfloat16, run it.

For every name in ``gluoncv.model_zoo.get_model_list()``:

1. build it offline (``pretrained=False``, ``pretrained_base=False`` where accepted, random
   init); a model that cannot be built without downloads is recorded "not buildable
   offline" with the reason;
2. run it in float32 on a small input suited to its family (the first of a few sizes that
   the network accepts);
3. export it (``HybridBlock.export`` to a temp prefix, ``mx.model.load_checkpoint``), as a
   user with a checkpoint would, and convert it with :func:`mxnet_amp.convert_model`;
4. run the converted model with bfloat16 numerics emulated (:mod:`mxnet_amp.emulation`;
   also natively where this CPU runs bf16 matrix ops) and compare with float32;
5. note whether ``mx.contrib.amp.convert_model`` converts it too, for comparison.

Weights are random (He-normal, BatchNorm at identity: activations stay O(1), where
gluon's default Uniform(0.07) lets them grow to 1e4..1e26 and turns sigmoids into steps).

A model *passes* when it converts, the converted graph type-checks and runs, no output
is non-finite where float32 is finite, and every checked float output is within ``--tol``
(default 0.1) of float32, measured as ``max|bf16 - fp32| / max|fp32|`` per output.
bfloat16 keeps 8 significant bits (unit roundoff 2^-9); through 50-300 random-init
layers that accumulates to 0.2-5% of the output's range, while real breakage (a lost
op, a wrong dtype path, overflow) shows as O(1) errors or non-finite values. Some deep
random-init nets are chaotic (SE-ResNeXt-101, SENet-154, DLA-34 CenterNets): there a
model above the tolerance also passes when its error is at most ``SENSITIVITY_FACTOR``
(4) times the error of the same fp32 model run on input and weights merely rounded to
the target dtype, the perturbation any deployment in that dtype starts from; both
numbers are recorded (``max_rel_err``, ``sensitivity_err``).
Outputs downstream of top-k / NMS / comparisons / box decoding are only checked for
finiteness (random-init scores tie, so rounding picks other boxes, and decoding
exponentiates the regressions); the dense tensors feeding those ops are compared instead.
A model whose fp32 output is already non-finite is recorded ``fp32_nonfinite``.

Each model runs in a worker process with a per-model timeout; the worker is restarted
after a timeout or crash. Models are run cheapest first (by a name heuristic) so that a
wall-clock budget skips the heaviest ones, each recorded with the reason.

Usage::

    nice -n 10 python tools/zoo_sweep.py --budget 2100 --timeout 120 \
        --json docs/zoo_sweep.json --md docs/zoo_sweep.md
    python tools/zoo_sweep.py --models resnet18_v1 ssd_300_mobilenet0.25_voc   # a subset
"""
from __future__ import annotations

import argparse
import json
import os
import re
import select
import subprocess
import sys
import tempfile
import time
import warnings
from typing import Any, Iterable, Sequence

__all__ = ["family_of", "input_shapes", "sweep_one", "run_sweep", "write_markdown",
           "cost_rank", "TOLERANCE"]

TOLERANCE = 0.1  # max |bf16 - fp32| / max |fp32| per output (see the module doc)
# ... or at most this many times the error of rounding only the input and the weights
SENSITIVITY_FACTOR = 4.0



def INIT():
    """The random init: He-normal, so activations stay O(1) through deep stacks (the
    default Uniform(0.07) lets them grow to 1e4..1e26, where a sigmoid is a step function
    and exp() of a box regression overflows; that measures the init, not the precision)."""
    import mxnet as mx
    import numpy as np

    class HeNormal(mx.init.Initializer):
        # gluon hands every param without its own init to _init_weight: dispatch by name
        def _init_weight(self, name, arr):
            name = str(name)
            if len(arr.shape) >= 2 and name.endswith("weight"):
                fan_in = int(np.prod(arr.shape[1:]))
                arr[:] = mx.nd.random.normal(0, float(np.sqrt(2.0 / fan_in)), shape=arr.shape)
            elif name.endswith(("gamma", "running_var", "moving_var")):
                arr[:] = 1.0
            elif name.endswith(("beta", "bias", "running_mean", "moving_mean")):
                arr[:] = 0.0
            else:  # odd params (SSD's L2 norm scale, anchors' offsets): as gluon's default
                arr[:] = mx.nd.random.uniform(-0.07, 0.07, shape=arr.shape)

        _init_default = _init_weight
    return HeNormal()


def _initialize(net) -> None:
    """Random-init every param of a fresh ``net`` with :func:`INIT` (models that set their
    own initializers, or initialize themselves, are re-initialized the same way)."""
    import mxnet as mx
    for p in net.collect_params().values():
        p.init = None
    net.initialize(INIT(), ctx=mx.cpu(), force_reinit=True)


_VIDEO_3D = ("c3d", "i3d", "p3d", "r2plus1d", "slowfast")
_VIDEO_2D = ("kinetics400", "ucf101", "hmdb51", "sthsthv2", "kinetics700")


def family_of(name: str) -> str:
    """A coarse family name for grouping the report."""
    rules = [("int8", "int8 (quantized)"), ("ssd_", "detection/ssd"), ("yolo3", "detection/yolo3"),
             ("faster_rcnn", "detection/rcnn"), ("mask_rcnn", "detection/rcnn"),
             ("doublehead_rcnn", "detection/rcnn"), ("center_net", "detection/centernet"),
             ("fcn_", "segmentation"), ("psp_", "segmentation"), ("deeplab", "segmentation"),
             ("icnet", "segmentation"), ("fastscnn", "segmentation"), ("danet", "segmentation"),
             ("simple_pose", "pose"), ("mobile_pose", "pose"), ("alpha_pose", "pose"),
             ("siamrpn", "tracking"), ("monodepth2", "depth"), ("cifar_", "classification/cifar")]
    for key, fam in rules:
        if key in name:
            return fam
    if any(k in name for k in _VIDEO_3D) or "_f16s4_" in name:
        return "action/3d"
    if any(k in name for k in _VIDEO_2D):
        return "action/2d"
    return "classification/imagenet"


def input_shapes(name: str) -> list[tuple[int, ...]]:
    """Input shapes to try for ``name``, smallest first."""
    fam = family_of(name)
    if fam == "action/3d":
        if "slowfast" in name:
            # slow + fast pathway frames are stacked along time (4x16: 4 + 32, 8x8: 8 + 32)
            return [(1, 3, t, 64, 64) for t in (36, 40, 48, 80)]
        if "f16s4" in name:
            return [(1, 3, 16, 64, 64), (1, 3, 16, 112, 112)]
        return [(1, 3, 8, 64, 64), (1, 3, 16, 112, 112), (1, 3, 32, 112, 112)]
    if fam == "classification/cifar":
        return [(1, 3, 32, 32)]
    if fam == "depth":
        return [(1, 3, 64, 64), (1, 6, 64, 64), (1, 3, 192, 640)]
    if "inception" in name or "googlenet" in name:
        return [(1, 3, 128, 128), (1, 3, 224, 224), (1, 3, 299, 299)]
    if fam.startswith("detection") or fam == "segmentation":
        return [(1, 3, 128, 128), (1, 3, 256, 256), (1, 3, 512, 512)]
    return [(1, 3, 64, 64), (1, 3, 128, 128), (1, 3, 224, 224), (1, 3, 299, 299)]


_HEAVY = re.compile(r"(\d{3})|resnest|senet|nasnet|_64x4d|32x4d|16x64d|wideresnet|densenet161|"
                    r"densenet201|vgg19|vgg16|hrnet_w(4|6)|xception71|residualattentionnet(2|4)")


def cost_rank(name: str) -> float:
    """A rough cost estimate from the name (higher is slower); only orders the sweep."""
    fam = family_of(name)
    cost = {"classification/cifar": 0.5, "classification/imagenet": 1, "pose": 1.5,
            "action/2d": 2, "detection/ssd": 3, "detection/yolo3": 3, "detection/centernet": 3,
            "segmentation": 4, "detection/rcnn": 5, "action/3d": 6}.get(fam, 1)
    for depth in re.findall(r"(?:resnet|resnest|residualattentionnet|hrnet_w|darknet|dla)(\d+)", name):
        cost *= max(1.0, int(depth) / 30)
    if _HEAVY.search(name):
        cost *= 1.5
    return cost


def _get_model(name: str):
    from gluoncv import model_zoo
    try:
        return model_zoo.get_model(name, pretrained=False, pretrained_base=False)
    except TypeError as err:
        if "pretrained_base" not in str(err):
            raise
        return model_zoo.get_model(name, pretrained=False)


def _first_line(err: BaseException) -> str:
    text = str(err).strip().split("\n")[0] or type(err).__name__
    return f"{type(err).__name__}: {text[:300]}"


def _fp32_forward(net, name: str):
    """Run ``net`` on the first input shape it accepts; ``(shape, x)``."""
    import mxnet as mx
    errors = []
    for shape in input_shapes(name):
        x = mx.nd.random.uniform(-1, 1, shape=shape, ctx=mx.cpu())
        try:
            out = net(x)
            mx.nd.waitall()
            del out
            return shape, x
        except Exception as err:  # noqa: BLE001 - a shape the net rejects; try the next
            errors.append(f"{shape}: {_first_line(err)}")
    raise RuntimeError("no input shape worked: " + " | ".join(errors))


def _bind_forward(sym, args, auxs, data):
    import mxnet as mx
    ex = sym.bind(mx.cpu(), args={**args, **data}, aux_states=dict(auxs), grad_req="null")
    outs = ex.forward(is_train=False)
    import numpy as np
    # a bf16 output (native run) has MXNet's structured stand-in dtype; widen it first
    return [o.asnumpy() if np.dtype(o.dtype).names is None else
            o.astype("float32").asnumpy() for o in outs]


def round_np(values, dtype: str):
    """``values`` (float32 numpy) rounded to nearest even in ``dtype``, returned as float32."""
    import numpy as np
    values = np.ascontiguousarray(values, dtype=np.float32)
    if dtype == "float16":
        return values.astype(np.float16).astype(np.float32)
    bits = values.view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32)


def fold_param_rounding(esym, eargs: dict):
    """``(sym, args)`` with every ``cast(cast(weight, low), float32)`` pair of an emulated
    model replaced by a weight holding the rounded values (rounded once, in numpy).

    Numerically the same model; it only saves MXNet's slow bfloat16 amp_cast kernel
    (about 0.3 us per element on this CPU) from re-rounding every weight in the run.
    The numpy rounding is checked against ``amp_cast`` on each folded weight's first values.
    """
    import mxnet as mx
    import numpy as np

    from mxnet_amp.graph import Graph, Node
    from mxnet_amp.io import graph_from_symbol, graph_to_symbol
    from mxnet_amp.params import cast_array
    g = graph_from_symbol(esym)
    nodes = list(g.nodes)
    args = dict(eargs)
    for i, node in enumerate(g.nodes):
        if node.op != "amp_cast" or node.attrs.get("dtype") != "float32":
            continue
        j = node.inputs[0].node
        low = g.nodes[j]
        if low.op != "amp_cast" or low.attrs.get("dtype") not in ("float16", "bfloat16"):
            continue
        src = g.nodes[low.inputs[0].node]
        if not src.is_variable or src.name not in eargs:
            continue
        values = eargs[src.name].asnumpy()
        rounded = round_np(values, low.attrs["dtype"])
        probe = values.reshape(-1)[:256]
        check = cast_array(cast_array(mx.nd.array(probe), low.attrs["dtype"]), "float32").asnumpy()
        if not np.array_equal(check, rounded.reshape(-1)[:256]):
            raise AssertionError(f"numpy {low.attrs['dtype']} rounding differs from amp_cast "
                                 f"on {src.name}")
        nodes[i] = Node("null", node.name)
        args[node.name] = mx.nd.array(rounded, dtype="float32")
    sym = graph_to_symbol(Graph(tuple(nodes), g.heads, g.attrs))
    used = set(sym.list_arguments())
    return sym, {k: v for k, v in args.items() if k in used}


def emulate_fast(sym, arg_params: dict, aux_params: dict):
    """:func:`mxnet_amp.emulation.emulate_model`, with weights rounded in numpy.

    Same graph (``emulate_graph``) and same values; only the one-off rounding of the
    weights is done by :func:`fold_param_rounding` instead of MXNet's bfloat16 amp_cast,
    which dominates the sweep's time otherwise."""
    from mxnet_amp.dtypes import LOW_PRECISION
    from mxnet_amp.emulation import emulate_graph
    from mxnet_amp.io import graph_from_symbol, graph_to_symbol
    from mxnet_amp.params import array_dtype, cast_array
    graph = graph_from_symbol(sym)
    var_dtypes = {k: array_dtype(v) for k, v in {**arg_params, **aux_params}.items()}
    for n in graph.variables():
        var_dtypes.setdefault(n.name, "float32")

    def widen(params):
        return {k: (cast_array(v, "float32") if array_dtype(v) in LOW_PRECISION else v)
                for k, v in params.items()}
    esym, eargs = fold_param_rounding(graph_to_symbol(emulate_graph(graph, var_dtypes)),
                                      widen(arg_params))
    auxs = set(esym.list_auxiliary_states())
    return esym, eargs, {k: v for k, v in widen(aux_params).items() if k in auxs}


# ops whose output order or selection changes discretely under any rounding
ORDERING_OPS = frozenset({"topk", "sort", "argsort", "_contrib_box_nms", "_contrib_box_non_maximum_suppression",
                          "_contrib_MultiProposal", "_contrib_Proposal", "_contrib_MultiBoxDetection",
                          "argmax", "argmin"})
# ops that amplify input rounding without bound: box decoding takes exp() of the box
# regressions, which random init makes huge (1e26 boxes seen); compared at their inputs
AMPLIFYING_OPS = frozenset({"_contrib_box_decode"})
# comparisons make discrete masks (score thresholds, max-pool peak picking) that flip on ties
COMPARISON_OPS = frozenset({"broadcast_equal", "_equal", "_equal_scalar", "broadcast_greater",
                            "_greater", "_greater_scalar", "broadcast_lesser", "_lesser",
                            "_lesser_scalar", "broadcast_greater_equal", "_greater_equal",
                            "_greater_equal_scalar", "broadcast_lesser_equal", "_lesser_equal",
                            "_lesser_equal_scalar", "broadcast_not_equal", "_not_equal",
                            "_not_equal_scalar"})
BOUNDARY_OPS = ORDERING_OPS | AMPLIFYING_OPS | COMPARISON_OPS


def _upstream(graph, start: Iterable[int]) -> set[int]:
    seen, stack = set(), list(start)
    while stack:
        i = stack.pop()
        if i not in seen:
            seen.add(i)
            stack.extend(e.node for e in graph.nodes[i].inputs)
    return seen


def checked_entries(graph):
    """``(heads to compare, heads past a boundary op, extra entries to compare)``.

    A head downstream of top-k / NMS / argmax (:data:`ORDERING_OPS`), a comparison
    (:data:`COMPARISON_OPS`) or box decoding (:data:`AMPLIFYING_OPS`) is only checked for
    finiteness: with random weights scores tie, so rounding flips masks and picks other
    boxes, and decoding exponentiates huge random regressions.
    Instead the float inputs of the first such ops on each path (the dense scores and box
    regressions) are compared."""
    boundary = [i for i, n in enumerate(graph.nodes) if n.op in BOUNDARY_OPS]
    first = [i for i in boundary
             if not any(graph.nodes[j].op in BOUNDARY_OPS
                        for j in _upstream(graph, [e.node for e in graph.nodes[i].inputs]))]
    dense, after = [], []
    for k, head in enumerate(graph.heads):
        up = _upstream(graph, [head.node])
        (after if any(i in up for i in boundary) else dense).append(k)
    extra = []
    for i in first:
        for e in graph.nodes[i].inputs:
            if e not in extra and not graph.nodes[e.node].is_variable:
                extra.append(e)
    return dense, after, extra


def _with_heads(sym, entries_by_name):
    """``sym`` with extra outputs: ``(node name, output index)`` pairs, looked up by name."""
    from mxnet_amp.graph import Entry, Graph
    from mxnet_amp.io import graph_from_symbol, graph_to_symbol
    g = graph_from_symbol(sym)
    index = {n.name: i for i, n in enumerate(g.nodes)}
    heads = list(g.heads)
    for name, k in entries_by_name:
        # an emulated low precision output is the rounded copy beside the node
        rounded = f"{name}{f'_out{k}' if k else ''}_round_float32"
        heads.append(Entry(index[rounded]) if rounded in index else Entry(index[name], k))
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


def sweep_one(name: str, target_dtype: str = "bfloat16", tol: float = TOLERANCE,
              native: bool | None = None) -> dict[str, Any]:
    """Build, convert and run one zoo model; a JSON-able record of what happened."""
    import mxnet as mx

    import mxnet_amp
    from mxnet_amp.convert import convert_model_full
    from mxnet_amp.hardware import bf16_runs_natively
    import numpy as np
    rec: dict[str, Any] = {"model": name, "family": family_of(name), "target_dtype": target_dtype}
    mx.random.seed(0)  # the same random weights and input on every run
    np.random.seed(0)
    t0 = time.time()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            net = _get_model(name)
            # He init keeps activations O(1) through the stack (BN is identity at init)
            _initialize(net)
            net.hybridize()
            shape, x = _fp32_forward(net, name)
    except Exception as err:  # noqa: BLE001 - recorded as not buildable
        rec.update(status="not_buildable", reason=_first_line(err), build_s=round(time.time() - t0, 2))
        return rec
    rec["input_shape"] = list(shape)
    rec["params_m"] = round(sum(int(p.data().size) for p in net.collect_params().values()
                                if p._data is not None) / 1e6, 2)
    rec["build_s"] = round(time.time() - t0, 2)
    try:  # the Gluon adapter path, conversion only (no run)
        from mxnet_amp.gluon import convert_hybrid_block
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            convert_hybrid_block(net, target_dtype=target_dtype)
        rec["gluon_adapter"] = "ok"
    except Exception as err:  # noqa: BLE001
        rec["gluon_adapter"] = "error: " + _first_line(err)[:200]
    with tempfile.TemporaryDirectory(prefix="zoo_sweep_") as tmp:
        try:
            net.export(os.path.join(tmp, "m"))
            sym, args, auxs = mx.model.load_checkpoint(os.path.join(tmp, "m"), 0)
        except Exception as err:  # noqa: BLE001
            rec.update(status="not_buildable", reason="export failed: " + _first_line(err))
            return rec
    del net
    data_names = [n for n in sym.list_arguments() if n not in args]
    if data_names != ["data"]:
        rec.update(status="not_buildable", reason=f"takes inputs {data_names}, the sweep feeds one image")
        return rec
    data = {"data": x}
    t1 = time.time()
    try:
        ref = _bind_forward(sym, args, auxs, data)
    except Exception as err:  # noqa: BLE001
        rec.update(status="not_buildable", reason="exported fp32 symbol does not run: " + _first_line(err))
        return rec
    rec["fp32_run_s"] = round(time.time() - t1, 2)
    if not all(np.isfinite(r).all() for r in ref if np.issubdtype(r.dtype, np.floating)):
        rec.update(status="fp32_nonfinite",
                   reason="the random-init fp32 model itself gives non-finite outputs; nothing to compare")
        return rec
    t2 = time.time()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            csym, cargs, cauxs, conv = convert_model_full(sym, args, auxs, target_dtype=target_dtype)
        rec["warnings"] = sorted({str(w.message)[:200] for w in caught})
    except mxnet_amp.AMPError as err:
        rec.update(status="fail", reason="convert: " + _first_line(err))
        return rec
    except Exception as err:  # noqa: BLE001 - an untyped error is a bug worth reporting
        rec.update(status="fail", reason="convert (untyped error): " + _first_line(err))
        return rec
    rec["convert_s"] = round(time.time() - t2, 2)
    rec["casts"] = conv.result.casts
    rec["multicasts"] = conv.result.multicasts
    rec["fallbacks"] = len(conv.result.fallbacks)
    rec["low_precision_nodes"] = sum(1 for d in conv.result.node_dtypes.values() if d == target_dtype)
    rec["op_nodes"] = len(conv.result.node_dtypes)
    from mxnet_amp.io import graph_from_symbol
    g32 = graph_from_symbol(sym)
    dense, after, extra = checked_entries(g32)
    extra_names = [(g32.nodes[e.node].name, e.index) for e in extra]
    n_heads = len(g32.heads)
    checked = dense + list(range(n_heads, n_heads + len(extra)))
    t3 = time.time()
    try:
        if extra:
            ref = _bind_forward(_with_heads(sym, extra_names), args, auxs, data)
        esym, eargs, eauxs = emulate_fast(csym, cargs, cauxs)
        got = _bind_forward(_with_heads(esym, extra_names) if extra else esym, eargs, eauxs, data)
    except Exception as err:  # noqa: BLE001
        rec.update(status="fail", reason="emulated run: " + _first_line(err))
        return rec
    rec["emulated_run_s"] = round(time.time() - t3, 2)
    cmp = compare([ref[k] for k in checked], [got[k] for k in checked])
    if "error" in cmp:
        rec.update(status="fail", reason=cmp["error"])
        return rec
    post = compare([ref[k] for k in after], [got[k] for k in after])
    nonfinite = sorted({checked[k] for k in cmp["nonfinite_outputs"]}
                       | {after[k] for k in post.get("nonfinite_outputs", [])})
    rec.update(max_rel_err=cmp["max_rel_err"], nonfinite_outputs=nonfinite,
               outputs_after_ordering=after, pre_ordering_tensors=[f"{n}:{k}" for n, k in extra_names],
               after_ordering_err=post.get("max_rel_err"))
    cmp["nonfinite_outputs"] = nonfinite
    if native if native is not None else bf16_runs_natively():
        try:
            nref = _bind_forward(csym, cargs, cauxs, data)[:n_heads]
            ncmp = compare([ref[k] for k in dense], [nref[k] for k in dense])
            rec["native_max_rel_err"] = ncmp.get("max_rel_err")
            rec["native_nonfinite_outputs"] = ncmp.get("nonfinite_outputs")
        except Exception as err:  # noqa: BLE001
            rec["native"] = "error: " + _first_line(err)
    try:
        from mxnet.contrib import amp as contrib_amp
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            contrib_amp.convert_model(sym, args, auxs, target_dtype=target_dtype)
        rec["contrib_amp"] = "ok"
    except Exception as err:  # noqa: BLE001
        rec["contrib_amp"] = "error: " + _first_line(err)[:160]
    sens = None
    if cmp["max_rel_err"] > tol and not cmp["nonfinite_outputs"]:
        # how sensitive is this random-init model to bf16-sized perturbations at all?
        # fp32 compute on the input and weights rounded to the target dtype
        try:
            rargs = {k: mx.nd.array(round_np(v.asnumpy(), target_dtype)) for k, v in args.items()}
            rdata = {"data": mx.nd.array(round_np(x.asnumpy(), target_dtype))}
            pref = _bind_forward(_with_heads(sym, extra_names) if extra else sym, rargs, auxs, rdata)
            sens = compare([ref[k] for k in checked], [pref[k] for k in checked])["max_rel_err"]
        except Exception as err:  # noqa: BLE001
            rec["sensitivity"] = "error: " + _first_line(err)
        rec["sensitivity_err"] = sens
    within = cmp["max_rel_err"] <= tol or (sens is not None and cmp["max_rel_err"] <= SENSITIVITY_FACTOR * sens)
    ok = not cmp["nonfinite_outputs"] and within
    rec["status"] = "pass" if ok else "fail"
    if not ok:
        rec["reason"] = (f"non-finite outputs {cmp['nonfinite_outputs']} where fp32 is finite"
                         if cmp["nonfinite_outputs"] else
                         f"max rel error {cmp['max_rel_err']:.3g} > tolerance {tol} and > "
                         f"{SENSITIVITY_FACTOR} x the error of rounding only input and weights "
                         f"({sens if sens is None else f'{sens:.3g}'})")
    elif cmp["max_rel_err"] > tol:
        rec["note"] = (f"error {cmp['max_rel_err']:.3g} > {tol}, but rounding only the input and "
                       f"weights to {target_dtype} already gives {sens:.3g}: the random-init model "
                       "is that sensitive")
    rec["total_s"] = round(time.time() - t0, 2)
    return mark_inconclusive(rec)


def mark_inconclusive(rec: dict) -> dict:
    """Re-label a pass that measured nothing as ``inconclusive``: outputs identical to fp32
    although the model computes in low precision (saturated random-init outputs), or a model
    so chaotic that rounding only its input and weights already changes outputs by half."""
    if rec.get("status") != "pass":
        return rec
    if rec.get("max_rel_err") == 0.0 and rec.get("low_precision_nodes", 0) > 0:
        why = "outputs identical to fp32 although it computes in low precision: saturated"
    elif (rec.get("sensitivity_err") or 0) >= 0.5:
        why = (f"rounding only input and weights already changes the outputs by "
               f"{rec['sensitivity_err']:.2g}: a chaotic random-init model, nothing measured")
    else:
        return rec
    return {**rec, "status": "inconclusive", "reason": why}


# --------------------------------------------------------------------------- worker / driver

def _worker(target_dtype: str, tol: float) -> None:
    """Read model names on stdin, write one JSON record per line on stdout."""
    out = sys.stdout
    sys.stdout = sys.stderr  # library prints must not corrupt the protocol
    for line in sys.stdin:
        name = line.strip()
        if not name:
            continue
        try:
            rec = sweep_one(name, target_dtype, tol)
        except BaseException as err:  # noqa: BLE001 - keep the worker alive
            rec = {"model": name, "family": family_of(name), "status": "fail",
                   "reason": "sweep crashed: " + _first_line(err)}
        out.write(json.dumps(rec) + "\n")
        out.flush()


class _Worker:
    def __init__(self, target_dtype: str, tol: float, nice: int):
        env = dict(os.environ)
        env.setdefault("OMP_NUM_THREADS", "2")
        # no oneDNN graph fusion: a fused conv+relu would report the relu's values as the
        # conv's output, and the sweep reads internal outputs of the fp32 graph
        env["MXNET_SUBGRAPH_BACKEND"] = "NONE"
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [_repo_root(), env.get("PYTHONPATH")]))
        cmd = [sys.executable, os.path.abspath(__file__), "--worker",
               "--target-dtype", target_dtype, "--tol", str(tol)]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env, text=True, bufsize=1,
                                     preexec_fn=(lambda: os.nice(nice)) if nice else None)

    def run(self, name: str, timeout: float) -> dict | None:
        self.proc.stdin.write(name + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            return None
        line = self.proc.stdout.readline()
        return json.loads(line) if line else {"model": name, "status": "fail",
                                              "reason": "worker died (crash or out of memory)"}

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()


def _repo_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_sweep(models: Sequence[str], *, target_dtype: str = "bfloat16", tol: float = TOLERANCE,
              timeout: float = 120, budget: float | None = None, nice: int = 0,
              json_path: str | None = None, progress: bool = True) -> list[dict]:
    """Sweep ``models`` (cheapest first) in a worker process; the records, in list order."""
    order = sorted(models, key=cost_rank)
    start = time.time()
    records: dict[str, dict] = {}
    worker = None
    for name in order:
        left = None if budget is None else budget - (time.time() - start)
        if left is not None and left < 5:
            records[name] = {"model": name, "family": family_of(name), "status": "skipped",
                             "reason": "sweep wall-clock budget spent (heaviest models run last)"}
            continue
        worker = worker or _Worker(target_dtype, tol, nice)
        limit = timeout if left is None else min(timeout, left)
        t = time.time()
        rec = worker.run(name, limit)
        if rec is None:
            worker.kill()
            worker = None
            rec = {"model": name, "family": family_of(name),
                   "status": "timeout" if limit == timeout else "skipped",
                   "reason": (f"over the per-model timeout of {timeout:.0f} s on this 2-core CPU"
                              if limit == timeout else "sweep wall-clock budget spent")}
        elif rec.get("reason") == "worker died (crash or out of memory)":
            worker.kill()
            worker = None
            rec["family"] = family_of(name)
        rec["wall_s"] = round(time.time() - t, 1)
        records[name] = rec
        if progress:
            print(f"[{time.time() - start:6.0f}s] {name:45s} {rec['status']:13s} "
                  f"{rec.get('max_rel_err', '')!s:.8s} {rec.get('reason', '')[:90]}", flush=True)
        if json_path:
            _write_json(json_path, [records[m] for m in models if m in records], target_dtype, tol)
    if worker is not None:
        worker.proc.stdin.close()
        worker.proc.wait(timeout=30)
    return [records[m] for m in models]


def _write_json(path: str, records: list[dict], target_dtype: str, tol: float) -> None:
    from mxnet_amp.io import atomic_write
    body = json.dumps({"target_dtype": target_dtype, "tolerance": tol, "records": records}, indent=1)

    def write(tmp):
        with open(tmp, "w") as f:
            f.write(body)
    atomic_write(path, write)


def summarize(records: Sequence[dict]) -> dict:
    """Counts by status, the pass rate over tested models, error percentiles."""
    import numpy as np
    counts: dict[str, int] = {}
    for r in records:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    tested = counts.get("pass", 0) + counts.get("fail", 0)
    nonfinite = [r["model"] for r in records if r.get("nonfinite_outputs")]
    errs = np.array([r["max_rel_err"] for r in records
                     if r.get("max_rel_err") is not None and r["status"] in ("pass", "fail")])
    pct = ({q: float(np.percentile(errs, q)) for q in (50, 90, 100)} if errs.size else {})
    return {"counts": counts, "tested": tested,
            "pass_rate": counts.get("pass", 0) / tested if tested else 0.0,
            "nonfinite_models": nonfinite, "err_percentiles": pct}


_STATUS_ORDER = ["pass", "fail", "inconclusive", "not_buildable", "fp32_nonfinite", "timeout", "skipped"]


def write_markdown(path: str, records: Sequence[dict], *, target_dtype: str, tol: float,
                   command: str, wall_s: float) -> None:
    """Write the sweep report ``path`` (markdown)."""
    import mxnet as mx

    from mxnet_amp.hardware import bf16_runs_natively
    from mxnet_amp.io import atomic_write
    s = summarize(records)
    c = s["counts"]
    converted = [r for r in records if "contrib_amp" in r]
    contrib_ok = sum(1 for r in converted if r["contrib_amp"] == "ok")
    gluon = [r for r in records if "gluon_adapter" in r]
    gluon_ok = sum(1 for r in gluon if r["gluon_adapter"] == "ok")
    pct = s["err_percentiles"]
    lines = [
        f"# gluoncv model zoo sweep: {target_dtype} conversion",
        "",
        f"Latest full run: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"{wall_s / 60:.0f} min wall clock on a shared 2-core CPU, `{command}`.",
        f"MXNet {mx.__version__}, gluoncv {_gluoncv_version()}. Native bf16 on this CPU: "
        + ("yes." if bf16_runs_natively() else
           "no (AVX2 only), so bf16 numerics are emulated (`mxnet_amp.emulation`: every tensor "
           "the converted graph holds in bf16 is rounded to bf16, ops compute in fp32)."),
        "The sweep itself is `tools/zoo_sweep.py`; its module docstring defines every check. "
        "Per-model records: `docs/zoo_sweep.json`. CI runs a fixed subset "
        "(`tests/test_zoo_sweep.py`); the whole zoo runs with `pytest -m slow`.",
        "",
        "Method: each model is built offline (`pretrained=False`, `pretrained_base=False`), "
        "random weights (He-normal, BatchNorm at identity), run in fp32 on a small input for "
        "its family (the first of a few sizes it accepts), exported (`HybridBlock.export` + "
        f"`mx.model.load_checkpoint`), converted with `mxnet_amp.convert_model(target_dtype='{target_dtype}')` "
        "and run. *pass*: converts, type-checks, runs, no output non-finite where fp32 is "
        f"finite, and `max|{target_dtype} - fp32| / max|fp32|` <= {tol} for every checked output, "
        f"or (for chaotic deep random-init nets) at most {SENSITIVITY_FACTOR:g}x the error that merely "
        f"rounding the input and weights to {target_dtype} causes in the fp32 model (both recorded). "
        "Outputs after top-k / NMS / comparisons / box decoding are only checked for "
        "finiteness; the dense tensors feeding those ops are compared instead (random-init "
        "scores tie, so any rounding selects other boxes).",
        "",
        "## Summary",
        "",
        f"- models in `gluoncv.model_zoo.get_model_list()`: {len(records)}",
        f"- tested (built offline and ran): **{s['tested']}**; **pass {c.get('pass', 0)}, "
        f"fail {c.get('fail', 0)} = {100 * s['pass_rate']:.1f}% pass** (target >= 95%)",
        f"- of the passes, {sum(1 for r in records if r['status'] == 'pass' and r.get('note'))} are above "
        f"the {tol} tolerance and pass on the sensitivity criterion (deep random-init SE / "
        "CenterNet / DANet models; listed below with both errors)",
        f"- models with a non-finite output where fp32 is finite: **{len(s['nonfinite_models'])}**"
        + (f" ({', '.join(s['nonfinite_models'])})" if s["nonfinite_models"] else ""),
        f"- output error `max|bf16 - fp32| / max|fp32|` over tested models: median "
        f"{pct.get(50, float('nan')):.2g}, 90th percentile {pct.get(90, float('nan')):.2g}, "
        f"max {pct.get(100, float('nan')):.2g}",
        f"- not buildable offline: {c.get('not_buildable', 0)} (downloads weights even with "
        "`pretrained=False`, needs several inputs, or rejects every small input size; reasons per model below)",
        f"- fp32 model itself non-finite with random weights: {c.get('fp32_nonfinite', 0)}",
        f"- inconclusive (converted and ran, but the random-init outputs are saturated or chaotic, "
        f"so the comparison measures nothing; not counted as tested): {c.get('inconclusive', 0)}",
        f"- over the per-model timeout (150 s): {c.get('timeout', 0)}; not reached within the "
        f"sweep's wall-clock budget (heaviest run last): {c.get('skipped', 0)}",
        f"- for comparison, `mx.contrib.amp.convert_model(target_dtype='{target_dtype}')` "
        f"converts {contrib_ok} of the {len(converted)} models mxnet-amp converted "
        "(conversion only; its failures are listed below)",
        f"- the Gluon adapter `mxnet_amp.gluon.convert_hybrid_block` converts {gluon_ok} of the "
        f"{len(gluon)} buildable models (conversion only)",
        "",
    ]
    fams: dict[str, list[dict]] = {}
    for r in records:
        fams.setdefault(r.get("family", "?"), []).append(r)
    lines += ["## By family", "",
              "| family | models | pass | fail | not buildable / inconclusive | fp32 non-finite | timeout / skipped | worst rel err |",
              "|---|---|---|---|---|---|---|---|"]
    for fam in sorted(fams):
        rs = fams[fam]
        errs = [r["max_rel_err"] for r in rs
                if r.get("max_rel_err") is not None and r["status"] in ("pass", "fail")]
        n = lambda *st: sum(r["status"] in st for r in rs)  # noqa: E731
        lines.append(f"| {fam} | {len(rs)} | {n('pass')} | {n('fail')} | {n('not_buildable', 'inconclusive')} | "
                     f"{n('fp32_nonfinite')} | {n('timeout', 'skipped')} | "
                     f"{f'{max(errs):.2g}' if errs else '-'} |")
    fails = [r for r in records if r["status"] == "fail"]
    lines += ["", "## Failures", ""]
    if fails:
        lines += ["| model | reason |", "|---|---|"]
        lines += [f"| {r['model']} | {_cell(r.get('reason', ''))} |" for r in fails]
    else:
        lines.append("None.")
    contrib_fail = [r for r in converted if r["contrib_amp"] != "ok"]
    if contrib_fail:
        lines += ["", "## Models mx.contrib.amp fails to convert (mxnet-amp converts them)", "",
                  "| model | mx.contrib.amp error |", "|---|---|"]
        lines += [f"| {r['model']} | {_cell(r['contrib_amp'])} |" for r in contrib_fail]
    gluon_fail = [r for r in gluon if r["gluon_adapter"] != "ok"]
    if gluon_fail:
        lines += ["", "## Gluon adapter failures", "", "| model | error |", "|---|---|"]
        lines += [f"| {r['model']} | {_cell(r['gluon_adapter'])} |" for r in gluon_fail]
    sensitive = [r for r in records if r["status"] == "pass" and r.get("note")]
    if sensitive:
        lines += ["", "## Passed on the sensitivity criterion", "",
                  "| model | max rel err | error from rounding only input + weights |", "|---|---|---|"]
        lines += [f"| {r['model']} | {r['max_rel_err']:.3g} | {r['sensitivity_err']:.3g} |"
                  for r in sensitive]
    lines += ["", "## Per model", "",
              "| model | status | input | params (M) | casts | multicasts | bf16 ops | max rel err | contrib.amp | time (s) | note |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    order = {st: k for k, st in enumerate(_STATUS_ORDER)}
    for r in sorted(records, key=lambda r: (r.get("family", ""), order.get(r["status"], 9), r["model"])):
        err = r.get("max_rel_err")
        shape = "x".join(map(str, r["input_shape"])) if "input_shape" in r else ""
        lp = f"{r['low_precision_nodes']}/{r['op_nodes']}" if "op_nodes" in r else ""
        contrib = r.get("contrib_amp", "")
        contrib = "ok" if contrib == "ok" else ("error" if contrib else "")
        note = r.get("reason", "") if r["status"] != "pass" else r.get("note", "")
        lines.append(f"| {r['model']} | {r['status']} | {shape} | {r.get('params_m', '')} | "
                     f"{r.get('casts', '')} | {r.get('multicasts', '')} | {lp} | "
                     f"{'' if err is None else f'{err:.2e}'} | {contrib} | {r.get('wall_s', '')} | "
                     f"{_cell(note)} |")
    text = "\n".join(lines) + "\n"

    def write(tmp):
        with open(tmp, "w") as f:
            f.write(text)
    atomic_write(path, write)


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")[:220]


def _gluoncv_version() -> str:
    try:
        import gluoncv
        return gluoncv.__version__
    except Exception:  # noqa: BLE001
        return "?"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", nargs="*", help="model names (default: the whole zoo)")
    p.add_argument("--target-dtype", default="bfloat16")
    p.add_argument("--tol", type=float, default=TOLERANCE)
    p.add_argument("--timeout", type=float, default=120, help="per-model seconds")
    p.add_argument("--budget", type=float, default=None, help="total wall-clock seconds")
    p.add_argument("--nice", type=int, default=0, help="niceness of the worker")
    p.add_argument("--json", default=None, help="write the records here")
    p.add_argument("--md", default=None, help="write the markdown report here")
    p.add_argument("--report-from", default=None, metavar="JSON",
                   help="only rewrite --md from a sweep's JSON (models missing from it: skipped)")
    p.add_argument("--wall", type=float, default=0.0, help="with --report-from: the run's seconds")
    p.add_argument("--command", default=None, help="with --report-from: the command that ran")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        _worker(a.target_dtype, a.tol)
        return 0
    if a.report_from:
        with open(a.report_from) as f:
            saved = json.load(f)
        from gluoncv import model_zoo
        by_name = {r["model"]: mark_inconclusive(r) for r in saved["records"]}
        records = [by_name.get(m) or {"model": m, "family": family_of(m), "status": "skipped",
                                      "reason": "sweep wall-clock budget spent (heaviest models run last)"}
                   for m in model_zoo.get_model_list()]
        write_markdown(a.md, records, target_dtype=saved["target_dtype"], tol=saved["tolerance"],
                       command=a.command or "python tools/zoo_sweep.py", wall_s=a.wall)
        print(json.dumps(summarize(records), indent=1))
        return 0
    if a.models:
        models = list(a.models)
    else:
        from gluoncv import model_zoo
        models = list(model_zoo.get_model_list())
    t = time.time()
    records = run_sweep(models, target_dtype=a.target_dtype, tol=a.tol, timeout=a.timeout,
                        budget=a.budget, nice=a.nice, json_path=a.json)
    wall = time.time() - t
    if a.md:
        command = "python tools/zoo_sweep.py " + " ".join(argv if argv is not None else sys.argv[1:])
        write_markdown(a.md, records, target_dtype=a.target_dtype, tol=a.tol,
                       command=command, wall_s=wall)
    s = summarize(records)
    print(json.dumps(s, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
