"""What the ported tests share: graph structure, dtype counting and running on this CPU.

Upstream runs float16 models on a GPU and bfloat16 ones on an avx512 CPU. Here a model
runs natively when this CPU can (bfloat16 where ``bf16_runs_natively()``); otherwise it runs
through :func:`mxnet_amp.emulate_model`, which computes in float32 with every low
precision tensor rounded to its dtype (MXNet never runs float16 on a CPU).
"""
from __future__ import annotations

import json
import os

import numpy as np
import mxnet as mx

import mxnet_amp
from mxnet_amp.ir.dtypes import array_dtype, dtype_name
from mxnet_amp.mx.hardware import bf16_runs_natively
from mxnet_amp.mx.params import cast_array

DTYPES = ("float16", "bfloat16")
IMAGE = (1, 3, 224, 224)


def runs_natively(target_dtype: str) -> bool:
    """True when MXNet on this CPU executes ``target_dtype`` Convolution/FullyConnected.

    ``MXNET_AMP_TESTS_EMULATE=1`` takes the emulated path even where bfloat16 runs natively,
    to check on an avx512 machine what an avx2-only CPU runs.
    """
    if os.environ.get("MXNET_AMP_TESTS_EMULATE") == "1":
        return False
    return target_dtype == "bfloat16" and bf16_runs_natively()


def nodes(sym) -> list[dict]:
    """The nodes of ``sym``'s JSON, amp casts kept (1.9.1's ``tojson()`` drops them)."""
    return json.loads(sym.tojson(remove_amp_cast=False))["nodes"]


def structure(sym) -> list[tuple]:
    """``(op, cast dtype, input node indices)`` per node: the graph's wiring and casts.

    A stricter ``mxnet.test_utils.same_symbol_structure``: that one compares the ops of the
    JSON ``tojson()`` writes, which in 1.9.1 has lost every amp_cast, so it cannot see them.
    """
    out = []
    for node in nodes(sym):
        dtype = node.get("attrs", {}).get("dtype") if node["op"] == "amp_cast" else None
        out.append((node["op"], dtype and dtype_name(dtype), tuple(e[0] for e in node["inputs"])))
    return out


def count_ops(sym, op: str) -> int:
    return sum(1 for n in nodes(sym) if n["op"] == op)


def arg_dtypes_after_bind(sym, **shapes) -> dict:
    """The dtype of each argument and aux state ``simple_bind`` (no ``type_dict``) gives."""
    exe = sym.simple_bind(mx.cpu(), grad_req="null", **shapes)
    names = sym.list_arguments() + sym.list_auxiliary_states()
    return {n: array_dtype(a) for n, a in zip(names, exe.arg_arrays + exe.aux_arrays)}


def retype(params: dict, dtypes: dict) -> dict:
    """``params`` cast to ``dtypes`` (as upstream casts its weights to the bound dtypes)."""
    return {k: (cast_array(v, dtypes[k]) if array_dtype(v) != dtypes[k] else v)
            for k, v in params.items()}


def bound_module(sym, arg_params: dict, aux_params: dict):
    """A CPU ``Module`` of an imagenet model (``data``, ``softmax_label``) bound for inference,
    holding ``arg_params``/``aux_params`` (as upstream binds its converted resnet-18)."""
    mod = mx.mod.Module(sym, data_names=["data"], label_names=["softmax_label"], context=mx.cpu())
    mod.bind(data_shapes=[("data", IMAGE)], label_shapes=[("softmax_label", (1,))], for_training=False)
    mod.set_params(arg_params, aux_params)
    return mod


def runnable(sym, arg_params: dict, aux_params: dict, target_dtype: str):
    """``(sym, arg_params, aux_params)`` this CPU can run: the converted model itself where the
    CPU runs ``target_dtype``, else its :func:`mxnet_amp.emulate_model` emulation."""
    if runs_natively(target_dtype):
        return sym, arg_params, aux_params
    return mxnet_amp.emulate_model(sym, arg_params, aux_params)


def forward(sym, arg_params: dict, aux_params: dict, inputs: dict, target_dtype: str | None = None) -> list:
    """Run a model on this CPU; its outputs as float32 numpy arrays.

    A converted model (``target_dtype`` given) runs through :func:`runnable`.
    """
    if target_dtype is not None:
        sym, arg_params, aux_params = runnable(sym, arg_params, aux_params, target_dtype)
    args = {**arg_params, **{k: mx.nd.array(v) for k, v in inputs.items()}}
    args = {k: v for k, v in args.items() if k in set(sym.list_arguments())}
    exe = sym.bind(mx.cpu(), args, aux_states=dict(aux_params), grad_req="null")
    return [o.astype("float32").asnumpy() for o in exe.forward(is_train=False)]


def forward_fp32(sym, arg_params: dict, aux_params: dict, inputs: dict) -> list:
    """Run a float32 model on the CPU."""
    return forward(sym, arg_params, aux_params, inputs)


def assert_close_to_fp32(out, ref, target_dtype: str, tol: float | None = None) -> None:
    """Low precision ``out`` agrees with the float32 ``ref`` (max error relative to max |ref|).

    bfloat16 keeps 8 significant bits, float16 11: the tolerances leave room for the
    rounding of a few dozen layers, not for a wrong cast or a wrong dtype.
    """
    out, ref = np.asarray(out, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    assert out.shape == ref.shape
    assert np.isfinite(out).all(), "non-finite outputs"
    tol = tol if tol is not None else (0.02 if target_dtype == "float16" else 0.1)
    err = float(np.abs(out - ref).max() / (np.abs(ref).max() + 1e-30))
    assert err < tol, f"{target_dtype} output differs from float32 by {err:.3g} (> {tol})"


def internal_dtypes(sym, input_names=("data",)) -> list[tuple[str, str]]:
    """``(op, dtype)`` of every op output of ``sym``, from MXNet's type inference.

    The structural stand-in for the op hook of MXNet 2's AMP tests (which counts the dtypes
    of the tensors a forward pass produces): the same counts, without running the model.
    """
    internals = sym.get_internals()
    ops = {}
    for node in nodes(sym):
        if node["op"] != "null":
            ops[node["name"]] = node["op"]
    types = {k: "float32" for k in input_names}
    _, out_types, _ = internals.infer_type(**types)
    out = []
    for name, dtype in zip(internals.list_outputs(), out_types):
        base = name.rsplit("_output", 1)[0]
        if base in ops or name in ops:
            out.append((ops.get(base, ops.get(name)), dtype_name(dtype)))
    return out


def net_stats(sym, lp_dtype: str, input_names=("data",)) -> tuple[int, int, int]:
    """``(low precision tensors, casts to lp_dtype, other casts)`` among ``sym``'s op outputs."""
    lp_tensors = lp_casts = other_casts = 0
    for op, dtype in internal_dtypes(sym, input_names):
        lp_tensors += dtype == lp_dtype
        if op == "amp_cast":
            lp_casts += dtype == lp_dtype
            other_casts += dtype != lp_dtype
    return lp_tensors, lp_casts, other_casts

