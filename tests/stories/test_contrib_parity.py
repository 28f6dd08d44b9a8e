"""A contrib caller's script gives contrib's low precision op set: node by node, for the
same lists, and the result binds with the params a contrib caller binds (issue 21).

Each case is a call written as ``mx.contrib.amp`` documents it (positional or keyword;
with or without each list argument, ``excluded_sym_names``, ``cast_optional_params``),
made on three nets (a Symbol-API conv/BN/FC net, a small transformer block, a gluoncv
zoo net) to both implementations. "The same lists": a contrib call that omits a list
uses contrib's default for it, so ours is given that same default, explicitly (our own
shipped lists differ from contrib's on purpose, see docs/lists.md), and
``widest_dtype_ops`` = contrib's widest list (contrib's converters take none).

What is compared, and the exact rule: each op node's *compute dtype* (its first float
input's dtype, else its first float output's; :func:`helpers.op_compute_dtypes`) by node
name, amp casts left out. The casts themselves are not compared: by design ours never
chains casts, reuses one cast per tensor and dtype, and places multicasts where inputs
really differ, so the cast nodes differ while every op computes in the same dtype.

``fold_batchnorm=False`` is passed to our ``convert_model`` / ``convert_hybrid_block``:
folding BatchNorm into the convolution before it (our default where params are given,
issue 26) removes BatchNorm nodes contrib keeps, so there would be nothing to compare
them with.
"""
from __future__ import annotations

import functools
import inspect

import mxnet as mx
import numpy as np
import pytest
from mxnet.contrib import amp as contrib

import mxnet_amp as amp
from mxnet_amp.ir.dtypes import dtype_of_code
from mxnet_amp.mx.params import cast_array

from helpers import graph_of, op_compute_dtypes, small_model

DTYPES = ["float16", "bfloat16"]


def _contrib_dtype(dtype: str):
    return contrib.amp.bfloat16 if dtype == "bfloat16" else "float16"


def _contrib_lists(dtype: str) -> dict:
    """contrib's default lists, as keywords of our converters."""
    d = _contrib_dtype(dtype)
    return {"target_dtype_ops": list(contrib.list_lp16_ops(d)),
            "fp32_ops": list(contrib.list_fp32_ops(d)),
            "conditional_fp32_ops": list(contrib.list_conditional_fp32_ops(d)),
            "widest_dtype_ops": list(contrib.list_widest_type_cast(d))}


def _same_lists(fn, args: tuple, kwargs: dict, dtype: str) -> dict:
    """Our keywords for the call ``fn(*args, **kwargs)`` of contrib: the list arguments it
    omits, as contrib's defaults."""
    given = inspect.signature(fn).bind(*args, **kwargs).arguments
    return {k: v for k, v in _contrib_lists(dtype).items() if given.get(k) is None}


def _lists_of(fn, args: tuple, kwargs: dict, same: dict) -> dict:
    """The four lists of a call: given, else as ``same`` fills them in."""
    given = inspect.signature(fn).bind(*args, **kwargs).arguments
    return {k: given.get(k) if given.get(k) is not None else same[k]
            for k in ("target_dtype_ops", "fp32_ops", "conditional_fp32_ops", "widest_dtype_ops")}


def _transformer():
    """One pre-softmax-attention encoder block (batch 2, 6 tokens, width 16)."""
    x = mx.sym.var("data")
    q = mx.sym.FullyConnected(x, num_hidden=16, flatten=False, name="q")
    k = mx.sym.FullyConnected(x, num_hidden=16, flatten=False, name="k")
    v = mx.sym.FullyConnected(x, num_hidden=16, flatten=False, name="v")
    scores = mx.sym.batch_dot(q, k, transpose_b=True, name="scores")
    att = mx.sym.softmax(scores * 0.25, axis=-1, name="att")
    ctx = mx.sym.batch_dot(att, v, name="ctx")
    proj = mx.sym.FullyConnected(ctx, num_hidden=16, flatten=False, name="proj")
    h = mx.sym.LayerNorm(mx.sym.elemwise_add(proj, x, name="res1"), name="ln1")
    ff = mx.sym.FullyConnected(h, num_hidden=32, flatten=False, name="ff1")
    ff = mx.sym.LeakyReLU(ff, act_type="gelu", name="gelu")
    ff = mx.sym.FullyConnected(ff, num_hidden=16, flatten=False, name="ff2")
    sym = mx.sym.LayerNorm(mx.sym.elemwise_add(ff, h, name="res2"), name="ln2")
    arg_shapes, _, _ = sym.infer_shape(data=(2, 6, 16))
    rng = np.random.default_rng(0)
    args = {n: mx.nd.array(rng.standard_normal(s).astype("float32") * 0.2)
            for n, s in zip(sym.list_arguments(), arg_shapes) if n != "data"}
    return sym, args, {}, (2, 6, 16)


def _conv_bn_fc():
    sym, args, auxs = small_model()
    return sym, args, auxs, (2, 3, 8, 8)


# the Symbol-API nets; the zoo net is converted as the Gluon block it is
NETS = {"conv_bn_fc": _conv_bn_fc, "transformer": _transformer}
EXCLUDE = object()   # stands for: the net's first and last layer (see _for_net)

# (label, positional arguments after (sym[, args, auxs]) and target_dtype, keywords)
CALLS = [
    ("defaults", (), {}),
    ("target_dtype_ops positional", (["FullyConnected"],), {}),
    ("target_dtype_ops keyword", (), {"target_dtype_ops": ["FullyConnected", "Convolution"]}),
    ("fp32_ops", (), {"fp32_ops": ["softmax"]}),
    ("conditional_fp32_ops", (), {"conditional_fp32_ops": [("Activation", "act_type", ["relu"])]}),
    ("all three lists positional", (["FullyConnected"], ["softmax"], []), {}),
    ("excluded_sym_names", (), {"excluded_sym_names": EXCLUDE}),
    ("cast_optional_params", (), {"cast_optional_params": True}),
]


def _contrib(fn, *args, **kwargs):
    """contrib's result, or None where contrib's conversion fails its own type check: a
    list that leaves LayerNorm in no list makes it follow the low precision residual add
    contrib builds (see :func:`_widened_on_purpose`) and meet its float32 gamma."""
    try:
        return fn(*args, **kwargs)
    except mx.base.MXNetError as err:
        assert "Incompatible attr" in str(err), err
        return None


def _for_net(sym, kwargs: dict) -> dict:
    """The call's keywords for the net ``sym``: :data:`EXCLUDE` becomes the names of its
    first and last Convolution / FullyConnected (our converters refuse names no node has)."""
    if kwargs.get("excluded_sym_names") is EXCLUDE:
        layers = [n.name for n in graph_of(sym).nodes if n.op in ("Convolution", "FullyConnected")]
        return {**kwargs, "excluded_sym_names": [layers[0], layers[-1]]}
    return kwargs


def _copies(params: dict) -> dict:
    return {k: v.copy() for k, v in params.items()}


def _tagged_params(sym, params: dict) -> dict:
    """``params`` cast to the dtype each variable's ``__dtype__`` tag says (what a contrib
    caller of convert_symbol(cast_optional_params=True) does before binding)."""
    attrs = sym.attr_dict()
    out = {}
    for name, value in params.items():
        want = dtype_of_code(attrs.get(name, {}).get("__dtype__"))
        out[name] = cast_array(value, want) if want not in (None, "float32") else value
    return out


def _binds(sym, args: dict, auxs: dict, shape) -> None:
    """``sym`` binds (MXNet's type inference accepts the params as given) and, where it can
    run, runs."""
    exe = sym.bind(mx.cpu(), {**args, "data": mx.nd.ones(shape)}, aux_states=dict(auxs),
                   grad_req="null")
    dtypes = {exe.arg_dict[k].dtype for k in args}
    assert all(exe.arg_dict[k].dtype == v.dtype for k, v in args.items()), dtypes


def _widened_on_purpose(our_sym, name: str, dtype: str, widest: set) -> bool:
    """The one intended difference: a *widest* op (elementwise arithmetic) with a low
    precision input and a float32 one. contrib reads the float32 operand through the low
    precision cast it made for another consumer (a residual add beside the
    FullyConnected that reads the same tensor) and computes in low precision; ours
    widens to float32 unless the op only copies values (the lists' ``[reuse_casts]``:
    joins), which measured half the error on a BERT-style block (lists/*.toml)."""
    graph = graph_of(our_sym)
    node = graph.nodes[graph.index_of(name)]
    reuse = amp.load_policy(dtype).reuse_casts
    if node.op not in widest or node.op in reuse:
        return False
    computes = op_compute_dtypes(our_sym, ["data"])
    sources = set()
    for e in node.inputs:   # through our casts to what each operand is before them
        while graph.nodes[e.node].op in ("amp_cast", "amp_multicast"):
            cast = graph.nodes[e.node]
            e = cast.inputs[e.output if cast.op == "amp_multicast" else 0]
        source = graph.nodes[e.node]
        sources.add(source.is_variable or computes.get(source.name) == "float32")
    return sources == {True, False}


def _compare(contrib_sym, our_sym, data_names, dtype: str, lists: dict) -> set[str]:
    """Node by node: the same compute dtype, except for the intended difference
    (:func:`_widened_on_purpose`) and the ops in no list of the call that read its
    float32 results (they follow their inputs in both; ours are float32 there). Returns
    the variables those nodes read (their params' dtypes differ accordingly)."""
    ours = op_compute_dtypes(our_sym, data_names)
    try:
        theirs = op_compute_dtypes(contrib_sym, data_names)
    except mx.base.MXNetError as err:
        # contrib's own result does not type-check (an op in no list follows the low
        # precision residual add and meets its float32-tagged weights): nothing to compare
        # with; ours binds (checked by the caller)
        assert "Incompatible attr" in str(err)
        return {n.name for n in graph_of(our_sym).variables()}
    assert set(ours) == set(theirs)
    listed = {op for key in ("target_dtype_ops", "fp32_ops", "widest_dtype_ops") for op in lists[key]}
    listed |= {c[0] for c in lists["conditional_fp32_ops"]}
    widest = set(lists["widest_dtype_ops"])
    graph = graph_of(our_sym)
    allowed: set[str] = set()
    for node in graph.nodes:
        name = node.name
        if name not in theirs or theirs[name] == ours[name] or ours[name] != "float32":
            continue
        inputs = {graph.nodes[e.node].name for e in node.inputs}
        if (_widened_on_purpose(our_sym, name, dtype, widest)
                or (node.op not in listed and inputs & allowed)):
            allowed.add(name)
    differ = {k: (theirs[k], ours[k]) for k in theirs if theirs[k] != ours[k] and k not in allowed}
    assert differ == {}, f"(contrib, ours) compute dtypes differ: {differ}"
    assert any(d != "float32" for d in ours.values()), "nothing ran in low precision"
    return {graph.nodes[e.node].name for node in graph.nodes if node.name in allowed
            for e in node.inputs if graph.nodes[e.node].is_variable}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("net", sorted(NETS))
@pytest.mark.parametrize("label,args,kwargs", CALLS, ids=[c[0] for c in CALLS])
def test_convert_symbol_call_as_contrib(net, label, args, kwargs, dtype):
    sym, params, auxs, shape = NETS[net]()
    kwargs = _for_net(sym, kwargs)
    theirs = _contrib(contrib.convert_symbol, sym, dtype, *args, **kwargs)
    same = _same_lists(contrib.convert_symbol, (sym, dtype, *args), kwargs, dtype)
    ours = amp.convert_symbol(sym, dtype, *args, **kwargs, **same)
    if theirs is not None:
        _compare(theirs, ours, ["data"], dtype,
                 _lists_of(contrib.convert_symbol, (sym, dtype, *args), kwargs, same))
    # the params a contrib caller binds: their own float32 ones, cast per the tags when
    # cast_optional_params asked for tags
    _binds(ours, _tagged_params(ours, params), _tagged_params(ours, auxs), shape)
    if not kwargs.get("cast_optional_params"):
        _binds(ours, params, auxs, shape)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("net", sorted(NETS))
@pytest.mark.parametrize("label,args,kwargs", CALLS, ids=[c[0] for c in CALLS])
def test_convert_model_call_as_contrib(net, label, args, kwargs, dtype):
    sym, params, auxs, shape = NETS[net]()
    kwargs = _for_net(sym, kwargs)
    tsym, targs, tauxs = contrib.convert_model(sym, _copies(params), _copies(auxs), dtype, *args,
                                               **kwargs)
    same = _same_lists(contrib.convert_model, (sym, params, auxs, dtype, *args), kwargs, dtype)
    osym, oargs, oauxs = amp.convert_model(sym, params, auxs, dtype, *args, **kwargs, **same,
                                           fold_batchnorm=False)
    lists = _lists_of(contrib.convert_model, (sym, params, auxs, dtype, *args), kwargs, same)
    differ = _compare(tsym, osym, ["data"], dtype, lists)
    _binds(osym, oargs, oauxs, shape)
    if "cast_optional_params" not in kwargs:
        # our default stores low precision weights (README "Differences"); contrib's
        # default, asked for, returns what contrib returns: every param float32
        osym, oargs, oauxs = amp.convert_model(sym, params, auxs, dtype, *args, **kwargs, **same,
                                               fold_batchnorm=False, cast_optional_params=False)
        differ = _compare(tsym, osym, ["data"], dtype, lists)
    # contrib's params are ours (same dtypes, weights stored low where contrib stores
    # them low), and bind ours; but for the weights of the nodes that differ on purpose
    for theirs, ours_ in ((targs, oargs), (tauxs, oauxs)):
        assert ({k: v.dtype for k, v in ours_.items() if k not in differ}
                == {k: v.dtype for k, v in theirs.items() if k not in differ})
    if not differ:
        _binds(osym, targs, tauxs, shape)


@functools.lru_cache(maxsize=None)
def _block(net: str):
    """The net as a Gluon block: gluoncv's own HybridBlock (hybridized and run once) for the
    zoo net, a SymbolBlock for the others (built once: converting does not modify it)."""
    if net == "resnet18_v1":
        pytest.importorskip("gluoncv")
        from gluoncv.model_zoo import get_model
        mx.random.seed(0)
        block = get_model("resnet18_v1", pretrained=False)
        block.initialize(mx.init.Xavier())
        block.hybridize()
        block(mx.nd.ones((1, 3, 64, 64)))
        return block
    sym, args, auxs, _ = NETS[net]()
    block = mx.gluon.SymbolBlock(sym, mx.sym.var("data"))
    block.collect_params().load_dict({**args, **auxs}, ctx=mx.cpu())
    return block


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("net", sorted(NETS) + ["resnet18_v1"])
@pytest.mark.parametrize("label,args,kwargs", CALLS, ids=[c[0] for c in CALLS])
def test_convert_hybrid_block_call_as_contrib(net, label, args, kwargs, dtype):
    block = _block(net)
    kwargs = {**_for_net(block._cached_graph[1], kwargs), "ctx": mx.cpu()}   # contrib: gpu(0)
    theirs = _contrib(contrib.convert_hybrid_block, block, dtype, *args, **kwargs)
    same = _same_lists(contrib.convert_hybrid_block, (block, dtype, *args), kwargs, dtype)
    ours = amp.convert_hybrid_block(block, dtype, *args, **{
        "cast_optional_params": False, **kwargs, **same, "fold_batchnorm": False})
    names = [s.name for s in ours._cached_graph[0]]
    lists = _lists_of(contrib.convert_hybrid_block, (block, dtype, *args), kwargs, same)
    differ = _compare(theirs._cached_graph[1], ours._cached_graph[1], names, dtype, lists)
    # the same params, in the same dtypes (the weights of nodes that differ on purpose aside)
    assert ({k: p.dtype for k, p in ours.collect_params().items() if k not in differ}
            == {k: p.dtype for k, p in theirs.collect_params().items() if k not in differ})


# --------------------------------------------------------------------------- MXNet's casting test

def _bound_dtypes(sym) -> dict[str, str]:
    """Each argument's dtype as ``simple_bind`` allocates it (bfloat16 by name)."""
    exe = sym.simple_bind(ctx=mx.cpu(), grad_req="null", **{n: (1, 2) for n in sym.list_arguments()})
    return {n: ("bfloat16" if a.dtype == contrib.amp.bfloat16 else np.dtype(a.dtype).name)
            for n, a in zip(sym.list_arguments(), exe.arg_arrays)}


@pytest.mark.parametrize("dtype", DTYPES)
def test_multicast_of_a_float32_and_a_low_precision_variable_matches_contrib(dtype):
    """MXNet 1.9.1's test_fp16_casting / test_bf16_casting: ``amp_multicast`` of a variable
    declared float32 and one declared in the target dtype, ``cast_optional_params=True``.
    Without data_names both are weights (each declares a dtype): contrib stores the float32
    one in low precision, read only beside a low precision one, and so does ours. Given
    data_names, ours keeps a named input as the caller gives it (contrib makes every named
    input float32, even one declared low precision: README "Differences")."""
    data = mx.sym.var("data", dtype="float32")
    data2 = mx.sym.var("data2", dtype=_contrib_dtype(dtype))
    sym = mx.sym.amp_multicast(data, data2, num_outputs=2)
    theirs = _bound_dtypes(contrib.convert_symbol(sym, target_dtype=dtype, cast_optional_params=True))
    ours = _bound_dtypes(amp.convert_symbol(sym, target_dtype=dtype, cast_optional_params=True))
    assert theirs == ours == {"data": dtype, "data2": dtype}
    named = _bound_dtypes(amp.convert_symbol(sym, target_dtype=dtype, cast_optional_params=True,
                                             data_names=["data"]))
    assert named == {"data": "float32", "data2": dtype}
    assert named == _bound_dtypes(contrib.convert_symbol(sym, target_dtype=dtype, cast_optional_params=True,
                                                         data_names=["data"]))
    # without cast_optional_params nothing is stored anew: each variable as declared
    kept = _bound_dtypes(amp.convert_symbol(sym, target_dtype=dtype))
    assert kept == {"data": "float32", "data2": dtype}
