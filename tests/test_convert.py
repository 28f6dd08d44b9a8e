"""Golden structural tests of the cast-insertion pass, one rule each.

Each test builds a small graph, converts it, and checks where casts go, how many and of
which dtype. The categories a test relies on are named through overrides, so the tests
check the pass, not today's contents of the list files.
"""
import json

import mxnet as mx
import numpy as np
import pytest

import mxnet_amp as amp
from mxnet_amp.errors import AlreadyConvertedError, GraphError, UnknownOpError
from mxnet_amp.ir.graph import Entry
from mxnet_amp.mx.io import graph_from_symbol, symbol_json

from helpers import (casts_into, graph_of, init_params, node, nodes_by_op, producer, rel_error, run,
                     run_low)

# every pass these tests run is checked by verify_graph

DTYPES = ["float16", "bfloat16"]


def type_checks(sym, **input_dtypes):
    """MXNet's own type inference accepts ``sym``; returns its output dtypes."""
    known = {name: "float32" for name in sym.list_arguments()}
    known.update(input_dtypes)
    _, outs, _ = sym.infer_type(**known)
    assert outs is not None and all(o is not None for o in outs)
    return [np.dtype(o).name for o in outs]


@pytest.mark.parametrize("dtype", DTYPES)
def test_target_op_inputs_cast_and_output_back_to_fp32(dtype):
    """Rule: a target op computes in the target dtype; model outputs come back float32.

        data -> FC -> out        ==>   data -> cast(lp) -> FC -> cast(fp32) -> out
    """
    x = mx.sym.var("data")
    sym = mx.sym.FullyConnected(x, num_hidden=4, name="fc")
    out = amp.convert_symbol(sym, target_dtype=dtype, target_dtype_ops=["FullyConnected"])
    g = graph_of(out)
    assert casts_into(g, "fc") == [dtype, dtype, dtype]      # data, weight, bias
    head = g.nodes[g.heads[0].node]
    assert head.op == "amp_cast" and head.attrs["dtype"] == "float32"
    assert producer(g, head).name == "fc"
    assert type_checks(out) == ["float32"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_shared_input_two_target_consumers_one_cast(dtype):
    """Rule: at most one cast per (tensor, dtype): two FCs reading data share one cast."""
    x = mx.sym.var("data")
    a = mx.sym.FullyConnected(x, num_hidden=4, name="fc_a")
    b = mx.sym.FullyConnected(x, num_hidden=4, name="fc_b")
    sym = mx.sym.elemwise_add(a, b, name="add")
    out = amp.convert_symbol(sym, target_dtype=dtype, target_dtype_ops=["FullyConnected"],
                             widest_dtype_ops=["elemwise_add"])
    g = graph_of(out)
    data_casts = [n for n in g.nodes if n.op == "amp_cast" and producer(g, n).name == "data"]
    assert len(data_casts) == 1
    assert producer(g, node(g, "fc_a")).name == producer(g, node(g, "fc_b")).name == data_casts[0].name
    # both inputs of add are already low precision: no multicast
    assert nodes_by_op(out, "amp_multicast") == []
    type_checks(out)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fc_first", [True, False])
def test_widest_op_over_fp32_and_low_precision_gets_one_multicast(dtype, fc_first):
    """Rule: a widest op with an fp32 and a low precision input gets one amp_multicast,
    whatever the input order (mx.contrib.amp fails on elemwise_add(FC(x), sin(x)))."""
    x = mx.sym.var("data")
    fc = mx.sym.FullyConnected(x, num_hidden=4, name="fc")
    s = mx.sym.sin(mx.sym.slice_axis(x, axis=1, begin=0, end=4), name="sin")
    sym = mx.sym.elemwise_add(fc, s, name="add") if fc_first else mx.sym.elemwise_add(s, fc, name="add")
    out = amp.convert_symbol(sym, target_dtype=dtype, target_dtype_ops=["FullyConnected"],
                             fp32_ops=["sin"], widest_dtype_ops=["elemwise_add"])
    g = graph_of(out)
    multicasts = nodes_by_op(out, "amp_multicast")
    assert len(multicasts) == 1 and multicasts[0].attrs["num_outputs"] == "2"
    assert casts_into(g, "add") == ["multicast", "multicast"]
    assert type_checks(out, data="float32") == ["float32"]
    assert out.infer_shape(data=(2, 8))[1] == [(2, 4)]


@pytest.mark.parametrize("dtype", DTYPES)
def test_widest_op_with_agreeing_inputs_gets_no_multicast(dtype):
    x = mx.sym.var("data")
    sym = mx.sym.elemwise_add(mx.sym.exp(x, name="e1"), mx.sym.log(x, name="l1"), name="add")
    out = amp.convert_symbol(sym, target_dtype=dtype, fp32_ops=["exp", "log"],
                             widest_dtype_ops=["elemwise_add"])
    assert nodes_by_op(out, "amp_multicast") == [] and nodes_by_op(out, "amp_cast") == []


@pytest.mark.parametrize("dtype", DTYPES)
def test_fp32_op_after_target_op_gets_fp32_cast(dtype):
    """Rule: fp32 ops compute in float32: a low precision input is cast up."""
    x = mx.sym.var("data")
    sym = mx.sym.softmax(mx.sym.FullyConnected(x, num_hidden=4, name="fc"), name="sm")
    out = amp.convert_symbol(sym, target_dtype=dtype, target_dtype_ops=["FullyConnected"],
                             fp32_ops=["softmax"])
    g = graph_of(out)
    assert casts_into(g, "sm") == ["float32"]
    # the head is softmax itself, already float32: no extra output cast
    assert g.nodes[g.heads[0].node].name == "sm"


@pytest.mark.parametrize("dtype", DTYPES)
def test_conditional_softrelu_stays_fp32_relu_follows(dtype):
    """Rule: conditional ops are fp32 for the listed attribute values, else follow."""
    x = mx.sym.var("data")
    fc = mx.sym.FullyConnected(x, num_hidden=4, name="fc")
    soft = mx.sym.Activation(fc, act_type="softrelu", name="soft")
    relu = mx.sym.Activation(fc, act_type="relu", name="relu")
    sym = mx.sym.Group([soft, relu])
    cond = [("Activation", "act_type", ["softrelu"])]
    out = amp.convert_symbol(sym, target_dtype=dtype, target_dtype_ops=["FullyConnected"],
                             conditional_fp32_ops=cond)
    g = graph_of(out)
    assert casts_into(g, "soft") == ["float32"]
    assert casts_into(g, "relu") == ["-"]          # follows fc: runs in low precision
    heads = [g.nodes[e.node] for e in g.heads]
    assert heads[0].name == "soft"
    assert heads[1].op == "amp_cast" and producer(g, heads[1]).name == "relu"
    assert type_checks(out) == ["float32", "float32"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_embedding_indices_never_cast(dtype):
    """Rule: index inputs (Embedding's data) are never cast; the weight follows the op."""
    tokens = mx.sym.var("data")
    emb = mx.sym.Embedding(tokens, input_dim=5000, output_dim=8, name="emb")
    sym = mx.sym.FullyConnected(emb, num_hidden=4, flatten=False, name="fc")
    out = amp.convert_symbol(sym, target_dtype=dtype, target_dtype_ops=["FullyConnected", "Embedding"])
    g = graph_of(out)
    emb_node = node(g, "emb")
    assert producer(g, emb_node, 0).name == "data"            # indices uncast
    assert casts_into(g, "emb")[1] == dtype                     # weight cast
    # indices beyond 2048 survive (they would not in float16)
    args, auxs = init_params(out, {"data": (1, 3)})
    ref_args = {k: v for k, v in args.items()}
    ids = np.array([[4097, 2049, 7]], dtype="float32")
    from mxnet_amp.emulation import emulate_model
    es, ea, ex = emulate_model(out, args, auxs)
    got = run(es, ea, ex, {"data": ids})[0]
    want = run(sym, ref_args, {}, {"data": ids})[0]
    assert rel_error(got, want) < 2e-2


@pytest.mark.parametrize("dtype", DTYPES)
def test_int_tensors_never_cast(dtype):
    """Rule: integer tensors (shape_array, argmax indices -> one_hot) are never cast."""
    x = mx.sym.var("data")
    fc = mx.sym.FullyConnected(x, num_hidden=4, name="fc")
    shape = mx.sym.shape_array(fc, name="shape")              # int64
    idx = mx.sym.argmax(fc, axis=1, name="am")
    oh = mx.sym.one_hot(idx, depth=4, name="oh")
    sym = mx.sym.Group([mx.sym.elemwise_mul(fc, oh, name="mul"), shape])
    out = amp.convert_symbol(sym, target_dtype=dtype, target_dtype_ops=["FullyConnected"],
                             widest_dtype_ops=["elemwise_mul"])
    g = graph_of(out)
    for n in nodes_by_op(out, "amp_cast"):
        assert producer(g, n).name not in ("shape",)
    assert g.nodes[g.heads[1].node].name == "shape"            # int output untouched
    assert type_checks(out)[1] == "int64"
    # one_hot reads argmax's indices uncast
    assert producer(g, node(g, "oh")).name == "am"


@pytest.mark.parametrize("dtype", DTYPES)
def test_grouped_two_output_symbol(dtype):
    """A Group of two heads: each low precision head is cast back to float32."""
    x = mx.sym.var("data")
    fc = mx.sym.FullyConnected(x, num_hidden=4, name="fc")
    sym = mx.sym.Group([fc, mx.sym.exp(fc, name="ex")])
    out = amp.convert_symbol(sym, target_dtype=dtype, target_dtype_ops=["FullyConnected"],
                             fp32_ops=["exp"])
    g = graph_of(out)
    assert len(out.list_outputs()) == 2
    assert [producer(g, g.nodes[e.node]).name if g.nodes[e.node].op == "amp_cast" else g.nodes[e.node].name
            for e in g.heads] == ["fc", "ex"]
    # fc's output is cast to float32 once, shared by exp and the head
    fp32_casts = [n for n in nodes_by_op(out, "amp_cast") if n.attrs["dtype"] == "float32"]
    assert len(fp32_casts) == 1
    assert type_checks(out) == ["float32", "float32"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_multi_output_node_outputs_cast_separately(dtype):
    """SliceChannel's outputs: each feeding a target op gets its own cast; a widest op
    (Concat) reads an existing low precision cast of an fp32 input instead of widening."""
    x = mx.sym.var("data")
    parts = mx.sym.split(x, num_outputs=2, axis=1, name="split")
    a = mx.sym.FullyConnected(parts[0], num_hidden=3, name="fa")
    b = mx.sym.FullyConnected(parts[1], num_hidden=3, name="fb")
    sym = mx.sym.Concat(a, b, parts[1], dim=1, name="cat")
    out = amp.convert_symbol(sym, target_dtype=dtype, target_dtype_ops=["FullyConnected"],
                             widest_dtype_ops=["Concat"])
    g = graph_of(out)
    fa_src = producer(g, node(g, "fa"))
    fb_src = producer(g, node(g, "fb"))
    assert fa_src.op == fb_src.op == "amp_cast"
    assert node(g, "fa").inputs[0] != node(g, "fb").inputs[0]
    assert [e.output for e in fa_src.inputs] == [0] and [e.output for e in fb_src.inputs] == [1]
    # concat over two low precision inputs and split's second output, which is already cast
    # to low precision for fb: that cast is reused, no multicast and no second cast
    assert nodes_by_op(out, "amp_multicast") == []
    assert node(g, "cat").inputs[2] == node(g, "fb").inputs[0]
    assert casts_into(g, "cat") == ["-", "-", dtype]
    assert out.infer_shape(data=(2, 8))[1] == [(2, 10)]
    type_checks(out)


@pytest.mark.parametrize("dtype", DTYPES)
def test_follow_op_with_mixed_inputs_falls_back_to_widest(dtype):
    """A *follow* op MXNet rejects with mixed dtypes (Concat) is unified, never left
    broken ("Non-uniform data type in Concat" in mx.contrib.amp)."""
    x = mx.sym.var("data")
    fc = mx.sym.FullyConnected(x, num_hidden=8, name="fc")
    sym = mx.sym.Concat(fc, mx.sym.exp(x, name="ex"), dim=1, name="cat")
    policy = amp.load_policy(dtype, target_dtype_ops=["FullyConnected"], fp32_ops=["exp"])
    import dataclasses
    policy = dataclasses.replace(policy, widest=policy.widest - {"Concat"}, follow=policy.follow | {"Concat"})
    from mxnet_amp.convert import convert_graph
    from mxnet_amp.options import ConvertOptions, make_options
    conv = convert_graph(graph_from_symbol(sym), ConvertOptions(policy))
    assert [n.op for n in conv.graph.nodes].count("amp_multicast") == 1
    from mxnet_amp.mx.io import graph_to_symbol
    type_checks(graph_to_symbol(conv.graph))


@pytest.mark.parametrize("dtype", DTYPES)
def test_excluded_node_runs_fp32(dtype):
    x = mx.sym.var("data")
    a = mx.sym.FullyConnected(x, num_hidden=4, name="keep")
    b = mx.sym.FullyConnected(a, num_hidden=4, name="conv_me")
    out = amp.convert_symbol(b, target_dtype=dtype, target_dtype_ops=["FullyConnected"],
                             excluded_sym_names=["keep"])
    g = graph_of(out)
    assert casts_into(g, "keep") == ["-", "-", "-"]
    assert casts_into(g, "conv_me") == [dtype, dtype, dtype]
    with pytest.raises(GraphError, match="nope"):
        amp.convert_symbol(b, target_dtype=dtype, excluded_sym_names=["nope"])


def test_each_node_carries_its_decision_and_the_conversion_its_exclusions():
    """The pass records each node's category and why; the Conversion, the exclusions."""
    from mxnet_amp.convert import convert_graph
    from mxnet_amp.options import ConvertOptions, OpLists, make_options
    from mxnet_amp.policy import Category
    x = mx.sym.var("data")
    a = mx.sym.FullyConnected(x, num_hidden=4, name="keep")
    b = mx.sym.FullyConnected(a, num_hidden=4, name="fc")
    c = mx.sym.Activation(b, act_type="softrelu", name="soft")
    d = mx.sym.Activation(c, act_type="relu", name="relu")
    conv = convert_graph(graph_of(d), make_options("float16", OpLists(conditional_fp32_ops=[("Activation", "act_type", ["softrelu"])], excluded_sym_names=["keep"])))
    decisions = conv.result.decisions
    assert dict(conv.fp32_nodes) == {"keep": "excluded by name (excluded_sym_names / --exclude)"}
    assert decisions["keep"] == (Category.FP32, "excluded by name (excluded_sym_names / --exclude)")
    assert decisions["fc"].category is Category.TARGET
    assert decisions["fc"].reason.startswith("target list: FullyConnected")
    assert decisions["soft"] == (Category.FP32, "conditional fp32: Activation with act_type=softrelu")
    assert decisions["relu"].category is Category.FOLLOW and "Activation" in decisions["relu"].reason
    assert conv.result.categories["fc"] is Category.TARGET
    # each tensor's dtype: fc computes in float16, the output is cast back to float32
    fc = conv.graph.index_of("fc")
    assert conv.result.tensor_dtypes[Entry(fc)] == "float16"
    assert conv.result.tensor_dtypes[conv.graph.heads[0]] == "float32"


def test_unknown_op_in_override_is_an_error():
    x = mx.sym.var("data")
    with pytest.raises(UnknownOpError, match="FullyConected"):
        amp.convert_symbol(mx.sym.relu(x), target_dtype_ops=["FullyConected", "relu"])


@pytest.mark.parametrize("dtype", DTYPES)
def test_input_symbol_is_not_modified_and_converting_twice_is_refused(dtype):
    x = mx.sym.var("data")
    sym = mx.sym.softmax(mx.sym.FullyConnected(x, num_hidden=4, name="fc"))
    before = symbol_json(sym)
    out = amp.convert_symbol(sym, target_dtype=dtype)
    assert symbol_json(sym) == before
    assert symbol_json(out) != before
    with pytest.raises(AlreadyConvertedError, match="amp_cast"):
        amp.convert_symbol(out, target_dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_no_cast_chains_and_no_duplicate_casts_on_a_zoo_net(dtype):
    from mxnet.gluon.model_zoo import vision
    net = vision.mobilenet_v2_0_25()
    net.initialize()
    sym = net(mx.sym.var("data"))
    out = amp.convert_symbol(sym, target_dtype=dtype)
    g = graph_of(out)
    seen = set()
    for n in g.nodes:
        if n.op in ("amp_cast", "amp_multicast"):
            for e in n.inputs:
                assert g.nodes[e.node].op not in ("amp_cast", "amp_multicast"), n.name
            if n.op == "amp_cast":
                key = (n.inputs[0], n.attrs["dtype"])
                assert key not in seen, n.name
                seen.add(key)
    # every original node keeps its name, so param names still match
    original = {n.name for n in graph_of(sym).nodes}
    assert original <= {n.name for n in g.nodes}
    assert set(sym.list_arguments()) == set(out.list_arguments())


@pytest.mark.parametrize("dtype", DTYPES)
def test_foreach_body_is_converted_inside(dtype):
    """Ops with subgraphs: the _foreach body is converted, fp32 at its boundary."""
    data = mx.sym.var("data")        # (T, N, C)
    state = mx.sym.var("state")      # (N, H)
    w = mx.sym.var("w")

    def step(x, states):
        h = mx.sym.FullyConnected(mx.sym.concat(x, states[0], dim=1), weight=w,
                                  num_hidden=6, no_bias=True, name="cell_fc")
        h = mx.sym.tanh(h)
        return h, [h]

    outs, _ = mx.sym.contrib.foreach(step, data, [state])
    sym = mx.sym.sum(outs, axis=0, name="total")
    out = amp.convert_symbol(sym, target_dtype=dtype, target_dtype_ops=["FullyConnected"],
                             data_names=["data", "state", "w"])
    g = graph_of(out)
    loop = [n for n in g.nodes if n.subgraphs]
    assert len(loop) == 1
    body_ops = [n.op for n in loop[0].subgraphs[0].nodes]
    assert "amp_cast" in body_ops                 # the FC inside runs in low precision
    assert type_checks(out, data="float32", state="float32", w="float32") == ["float32"]
    shapes = dict(data=(3, 2, 4), state=(2, 6), w=(6, 10))
    assert out.infer_shape(**shapes)[1] == [(2, 6)]
    rng = np.random.RandomState(0)
    inputs = {k: rng.randn(*s).astype("float32") * 0.5 for k, s in shapes.items()}
    from mxnet_amp.emulation import emulate_model
    es, ea, ex = emulate_model(out, {}, {})
    got = run(es, ea, ex, inputs)[0]
    want = run(sym, {}, {}, inputs)[0]
    assert rel_error(got, want) < 3e-2


@pytest.mark.parametrize("dtype", DTYPES)
def test_cast_optional_params_stores_weights_low_only_when_every_consumer_is_low(dtype):
    x = mx.sym.var("data")
    w = mx.sym.var("shared_weight")
    fc = mx.sym.FullyConnected(x, weight=w, num_hidden=4, no_bias=True, name="fc")
    # the same weight also read by an fp32 op: it must stay stored in float32
    sym = mx.sym.Group([fc, mx.sym.exp(w, name="wexp"),
                        mx.sym.FullyConnected(x, num_hidden=4, name="fc2")])
    args, auxs = init_params(sym, {"data": (2, 8)})
    before = {k: v.asnumpy().copy() for k, v in args.items()}
    out, new_args, new_aux = amp.convert_model(sym, args, auxs, target_dtype=dtype,
                                               target_dtype_ops=["FullyConnected"],
                                               fp32_ops=["exp"], cast_optional_params=True)
    from mxnet_amp.ir.dtypes import array_dtype
    assert array_dtype(new_args["shared_weight"]) == "float32"
    assert array_dtype(new_args["fc2_weight"]) == dtype
    assert array_dtype(new_args["fc2_bias"]) == dtype
    # the default stores them so too; fp32 storage with the flag off
    _, default_args, _ = amp.convert_model(sym, args, auxs, target_dtype=dtype,
                                           target_dtype_ops=["FullyConnected"], fp32_ops=["exp"])
    assert {k: array_dtype(v) for k, v in default_args.items()} == \
        {k: array_dtype(v) for k, v in new_args.items()}
    _, plain_args, _ = amp.convert_model(sym, args, auxs, target_dtype=dtype,
                                         target_dtype_ops=["FullyConnected"], fp32_ops=["exp"],
                                         cast_optional_params=False)
    assert {array_dtype(v) for v in plain_args.values()} == {"float32"}
    # inputs untouched
    assert set(args) == set(before)
    for k, v in args.items():
        assert array_dtype(v) == "float32" and np.array_equal(v.asnumpy(), before[k])


@pytest.mark.parametrize("dtype", DTYPES)
def test_cond_and_while_loop_bodies_type_check(dtype):
    """_cond and _while_loop: bodies converted with a float32 interface; results close to fp32."""
    x = mx.sym.var("data")
    w = mx.sym.var("w")
    pred = mx.sym.sum(x) > 0

    def then_func():
        return mx.sym.FullyConnected(x, weight=w, num_hidden=3, no_bias=True, name="then_fc")

    def else_func():
        return mx.sym.exp(mx.sym.slice_axis(x, axis=1, begin=0, end=3), name="else_exp")

    cond_out = mx.sym.contrib.cond(pred, then_func, else_func)

    def loop_cond(i, acc):
        return i < 3

    def loop_body(i, acc):
        nxt = mx.sym.FullyConnected(acc, weight=w, num_hidden=3, no_bias=True, name="loop_fc")
        return nxt, [i + 1, mx.sym.tanh(nxt)]

    outs, states = mx.sym.contrib.while_loop(loop_cond, loop_body,
                                             [mx.sym.zeros((1,)), mx.sym.slice_axis(x, axis=1, begin=0, end=3)],
                                             max_iterations=5)
    sym = mx.sym.Group([cond_out, states[1]])
    out = amp.convert_symbol(sym, target_dtype=dtype, target_dtype_ops=["FullyConnected"],
                             data_names=["data", "w"])
    g = graph_of(out)
    bodies = [sub for n in g.nodes for sub in n.subgraphs]
    assert any(any(b.op == "amp_cast" for b in sub.nodes) for sub in bodies)
    assert type_checks(out, data="float32", w="float32") == ["float32", "float32"]
    shapes = dict(data=(2, 3), w=(3, 3))
    rng = np.random.RandomState(1)
    inputs = {k: rng.randn(*s).astype("float32") * 0.5 for k, s in shapes.items()}
    from mxnet_amp.emulation import emulate_model
    es, ea, ex = emulate_model(out, {}, {})
    got = run(es, ea, ex, inputs)
    want = run(sym, {}, {}, inputs)
    for a, b in zip(got, want):
        assert rel_error(a, b) < 3e-2


def test_non_ascii_names_convert(bf16_mode):
    """MXNet's JSON reader knows no \\u escapes: names are written as they are (run natively
    where this CPU runs bfloat16, else bound and emulated: the test id says which)."""
    data = mx.sym.var("données")
    sym = mx.sym.FullyConnected(data, num_hidden=3, name="couche_é")
    args = {"couche_é_weight": mx.nd.ones((3, 4)), "couche_é_bias": mx.nd.zeros((3,))}
    csym, cargs, _ = amp.convert_model(sym, args, {}, target_dtype="bfloat16")
    assert "couche_é" in [n.name for n in graph_from_symbol(csym).nodes]
    assert sorted(cargs) == sorted(args)
    out = run_low(csym, cargs, {}, {"données": np.ones((2, 4), "float32")}, bf16_mode)
    assert np.allclose(out[0], 4.0)


def _post_ln_residual_stack(layers: int = 4, units: int = 64):
    """A BERT-style post-LayerNorm residual stack: x = LN(x + FC(GELU(FC(x)))) per layer."""
    x = mx.sym.LayerNorm(mx.sym.var("data"), axis=-1, name="ln_in")
    for i in range(layers):
        h = mx.sym.FullyConnected(x, num_hidden=2 * units, flatten=False, name=f"ffn{i}a")
        h = mx.sym.LeakyReLU(h, act_type="gelu", name=f"gelu{i}")
        h = mx.sym.FullyConnected(h, num_hidden=units, flatten=False, name=f"ffn{i}b")
        x = mx.sym.LayerNorm(mx.sym.elemwise_add(h, x, name=f"res{i}"), axis=-1, name=f"ln{i}")
    return x


@pytest.mark.parametrize("dtype", DTYPES)
def test_residual_add_widens_instead_of_reusing_the_fc_cast(dtype):
    """A residual add of a low precision FC output and the float32 LayerNorm output that the
    next FC reads through a low precision cast computes in float32 (one multicast): reusing
    that cast would round the residual stream at every layer (lists' [reuse_casts]: only
    joins reuse)."""
    sym = _post_ln_residual_stack(layers=1)
    out = amp.convert_symbol(sym, target_dtype=dtype)
    g = graph_of(out)
    res = node(g, "res0")
    assert casts_into(g, "res0") == ["multicast", "multicast"]
    ln_in_cast = producer(g, node(g, "ffn0a"))
    assert ln_in_cast.op == "amp_cast" and ln_in_cast.attrs["dtype"] == dtype
    assert all(g.nodes[e.node].op == "amp_multicast" for e in res.inputs)
    mc = producer(g, res)
    assert [g.nodes[e.node].name for e in mc.inputs] == ["ffn0b", "ln_in"]
    type_checks(out)


def test_bf16_residual_stack_error_no_worse_than_contrib():
    """bfloat16 numerics of a post-LN residual stack (emulated, so on any CPU): within 10% of
    mx.contrib.amp's model, which adds in float32. Reusing the FC's bfloat16 cast of the
    residual stream measured 2.5x contrib's error on a BERT-style encoder."""
    sym = _post_ln_residual_stack(layers=4)
    shape = (4, 16, 64)
    args, auxs = init_params(sym, {"data": shape}, seed=3, scale=1.0)
    x = np.random.RandomState(0).randn(*shape).astype("float32")
    ref = run(sym, args, auxs, {"data": x})[0]
    from mxnet.contrib import amp as contrib_amp

    def err(converted):
        es, ea, ex = amp.emulate_model(*converted)
        return rel_error(run(es, ea, ex, {"data": x})[0], ref)
    ours = err(amp.convert_model(sym, args, auxs, target_dtype="bfloat16"))
    theirs = err(contrib_amp.convert_model(sym, dict(args), dict(auxs), target_dtype="bfloat16"))
    assert 0 < ours <= 1.1 * theirs


def test_bf16_hard_swish_chain_error_no_worse_than_contrib():
    """MobileNetV3's hard-swish, x * clip(x + 3, 0, 6) / 6, between convolutions, emulated as
    MXNet's CPU runs it natively (``rounding='mxnet-cpu'``: generic kernels truncate): the
    scalar ops and the product compute in float32 (bfloat16 list), so the error is no worse
    than mx.contrib.amp's, which keeps them in float32 too."""
    x = mx.sym.var("data")
    for i in range(4):
        x = mx.sym.Convolution(x, num_filter=16, kernel=(3, 3), pad=(1, 1), name=f"conv{i}")
        gate = mx.sym.clip(x + 3.0, 0, 6) / 6.0
        x = x * gate
    shape = (2, 16, 12, 12)
    args, auxs = init_params(x, {"data": shape}, seed=1, scale=1.5)
    data = np.random.RandomState(0).uniform(-3, 3, shape).astype("float32")
    ref = run(x, args, auxs, {"data": data})[0]
    from mxnet.contrib import amp as contrib_amp

    def err(converted):
        es, ea, ex = amp.emulate_model(*converted, rounding="mxnet-cpu")
        return rel_error(run(es, ea, ex, {"data": data})[0], ref)
    ours = err(amp.convert_model(x, args, auxs, target_dtype="bfloat16"))
    theirs = err(contrib_amp.convert_model(x, dict(args), dict(auxs), target_dtype="bfloat16"))
    assert 0 < ours <= 1.1 * theirs


def test_an_op_that_retypes_an_input_gets_inputs_of_one_dtype():
    """BilinearResize2D(mode='like')'s type function overwrites its ``like`` input's dtype with
    the data's instead of checking it: fed bfloat16 data and a float32 ``like`` that another
    op also reads, the whole graph failed to type-check (gluoncv's hrnet_w18_small_v1_s)."""
    x = mx.sym.var("data")
    conv = mx.sym.Convolution(x, num_filter=4, kernel=(3, 3), pad=(1, 1), name="conv")
    other = mx.sym.broadcast_add(x, x, name="badd")        # float32 in bfloat16 models
    resized = mx.sym.contrib.BilinearResize2D(conv, other, mode="like", name="resize")
    sym = mx.sym.broadcast_add(resized, other, name="out")
    shapes = dict(zip(sym.list_arguments(), sym.infer_shape(data=(1, 4, 8, 8))[0]))
    rng = np.random.RandomState(0)
    args = {k: mx.nd.array(rng.randn(*s)) for k, s in shapes.items() if k != "data"}
    csym, cargs, _ = amp.convert_model(sym, args, {}, target_dtype="bfloat16")
    # MXNet types the whole converted graph: both inputs of the resize share a dtype
    _, out_types, _ = csym.infer_type(data=np.float32)
    assert np.dtype(out_types[0]) == np.float32
    nodes = {n["name"]: n for n in json.loads(csym.tojson(remove_amp_cast=False))["nodes"]}
    assert "resize" in nodes


def test_the_conversion_is_a_pass_list_and_its_errors_name_their_place():
    from mxnet_amp.convert import convert_graph
    from mxnet_amp.options import make_options
    from mxnet_amp.pipeline import conversion_passes
    names = [p.name for p in conversion_passes("bfloat16", {}, {}, "float32")]
    assert names == ["slow_kernels", "insert_casts", "insert_fusion_barriers", "tag_param_dtypes"]
    fc = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=4, name="fc")
    converted = amp.convert_symbol(fc, target_dtype="bfloat16")
    # low precision params accepted, the cast pass itself refuses a converted graph: the
    # error keeps its type and words, and a note says where in the pass list it came from
    with pytest.raises(AlreadyConvertedError) as info:
        convert_graph(graph_of(converted), make_options("bfloat16"), data_names=["data"],
                      accept_low_precision_params=True)
    assert "converted to mixed precision already" in str(info.value)
    assert "in pass insert_casts, after [slow_kernels]" in info.value.__notes__
