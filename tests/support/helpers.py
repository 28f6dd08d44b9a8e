"""Small helpers the tests share: graph inspection and running converted models on CPU."""
from __future__ import annotations

import numpy as np
import mxnet as mx

from mxnet_amp.ir.graph import Graph
from mxnet_amp.mx.io import graph_from_symbol


def graph_of(sym) -> Graph:
    return graph_from_symbol(sym)


def nodes_by_op(sym, op):
    return [n for n in graph_of(sym).nodes if n.op == op]


def producer(graph: Graph, node, k: int = 0):
    """The node feeding input ``k`` of ``node``."""
    return graph.nodes[node.inputs[k].node]


def node(graph: Graph, name: str):
    return graph.nodes[graph.index_of(name)]


def casts_into(graph: Graph, name: str) -> list[str]:
    """dtype of each amp_cast that feeds node ``name`` directly ('-' for uncast inputs)."""
    n = node(graph, name)
    out = []
    for e in n.inputs:
        src = graph.nodes[e.node]
        out.append(src.attrs["dtype"] if src.op == "amp_cast" else
                   ("multicast" if src.op == "amp_multicast" else "-"))
    return out


def run(sym, arg_params, aux_params, inputs: dict):
    """Forward ``sym`` on CPU; returns the outputs as float32 numpy arrays."""
    args = {**arg_params, **{k: mx.nd.array(v) for k, v in inputs.items()}}
    exe = sym.bind(mx.cpu(), args, aux_states=dict(aux_params), grad_req="null")
    return [o.astype("float32").asnumpy() for o in exe.forward(is_train=False)]


def run_low(sym, arg_params, aux_params, inputs: dict, mode: str):
    """Forward a converted model the way this CPU can (``mode``, the ``bf16_mode`` fixture):
    ``'native'`` runs it as it is; ``'emulated'`` checks the bind (MXNet's type and shape
    inference of every output, and ``bind`` with the params as stored) and runs
    :func:`mxnet_amp.emulate_model`'s float32 graph, whose outputs must have the inferred
    shapes. Returns the outputs as float32 numpy arrays."""
    if mode == "native":
        return run(sym, arg_params, aux_params, inputs)
    assert mode == "emulated", mode
    import mxnet_amp as amp
    given = {k: np.asarray(v) for k, v in inputs.items()}
    _, out_types, _ = sym.infer_type(**{k: v.dtype for k, v in given.items()})
    _, out_shapes, _ = sym.infer_shape(**{k: v.shape for k, v in given.items()})
    assert out_types and all(t is not None for t in out_types), out_types
    args = {**arg_params, **{k: mx.nd.array(v, dtype=v.dtype) for k, v in given.items()}}
    sym.bind(mx.cpu(), args, aux_states=dict(aux_params), grad_req="null")   # binds: no kernel runs
    outs = run(*amp.emulate_model(sym, arg_params, aux_params), given)
    assert [o.shape for o in outs] == [tuple(s) for s in out_shapes]
    return outs


def init_params(sym, shapes: dict, seed: int = 0, scale: float = 0.5):
    """Random arg/aux params for ``sym`` given input shapes (variance kept near 1)."""
    rng = np.random.RandomState(seed)
    arg_shapes, _, aux_shapes = sym.infer_shape(**shapes)
    args, auxs = {}, {}
    for name, shape in zip(sym.list_arguments(), arg_shapes):
        if name in shapes:
            continue
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        args[name] = mx.nd.array(rng.randn(*shape) * scale / np.sqrt(fan_in))
    for name, shape in zip(sym.list_auxiliary_states(), aux_shapes):
        auxs[name] = mx.nd.array(np.abs(rng.randn(*shape)) + (0.5 if "var" in name else 0))
    return args, auxs


def rel_error(out, ref) -> float:
    """max |out - ref| relative to max |ref|."""
    return float(np.abs(out - ref).max() / (np.abs(ref).max() + 1e-30))


def fc_sin_fc():
    """data -> fc1 -> sin -> fc2 (every op follows fc1's dtype). Not relu: MXNet's oneDNN
    fusion of FC+relu is wrong when the FC's output is also a graph output."""
    x = mx.sym.var("data")
    h = mx.sym.sin(mx.sym.FullyConnected(x, num_hidden=6, name="fc1"), name="s")
    return mx.sym.FullyConnected(h, num_hidden=3, name="fc2")


def small_model(seed=0):
    """A model using each category once: conv -> bn -> relu -> conv -> add(residual) -> pool -> flatten -> fc -> softmax."""
    d = mx.sym.var("data")
    c1 = mx.sym.Convolution(d, num_filter=4, kernel=(3, 3), pad=(1, 1), name="conv1")
    b1 = mx.sym.BatchNorm(c1, name="bn1")
    r1 = mx.sym.Activation(b1, act_type="relu", name="relu1")
    c2 = mx.sym.Convolution(r1, num_filter=4, kernel=(1, 1), name="conv2")
    add = mx.sym.elemwise_add(c2, r1, name="add")
    pool = mx.sym.Pooling(add, kernel=(2, 2), stride=(2, 2), pool_type="max", name="pool")
    fc = mx.sym.FullyConnected(mx.sym.flatten(pool, name="flat"), num_hidden=5, name="fc")
    sym = mx.sym.softmax(fc, name="prob")
    arg_shapes, _, aux_shapes = sym.infer_shape(data=(2, 3, 8, 8))
    rng = np.random.default_rng(seed)
    args = {n: mx.nd.array(rng.standard_normal(s).astype("float32") * 0.3)
            for n, s in zip(sym.list_arguments(), arg_shapes) if n != "data"}
    auxs = {n: mx.nd.array(np.abs(rng.standard_normal(s)).astype("float32") + 0.5)
            for n, s in zip(sym.list_auxiliary_states(), aux_shapes)}
    return sym, args, auxs


def saved_small_model(folder, name: str, epoch: int = 0) -> str:
    """:func:`small_model` saved as checkpoint ``folder/name``; returns the prefix."""
    from mxnet_amp.mx.io import save_checkpoint
    sym, args, auxs = small_model()
    prefix = str(folder / name)
    save_checkpoint(prefix, epoch, sym, args, auxs)
    return prefix


def load_tool(name: str):
    """The tool ``tools/<name>.py`` or, where ``tools/<name>/`` is a package, that package
    (registered in ``sys.modules`` under ``name``, so its relative imports resolve; tools/
    itself is not a package)."""
    import importlib.util
    import os
    import sys
    tools = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "tools")
    package = os.path.join(tools, name, "__init__.py")
    if os.path.exists(package):
        if name not in sys.modules:
            spec = importlib.util.spec_from_file_location(name, package,
                                                          submodule_search_locations=[os.path.dirname(package)])
            sys.modules[name] = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(sys.modules[name])
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, os.path.join(tools, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def gluoncv_resnet18(seed=0):
    """gluoncv resnet18_v1 (Xavier init) as ``(sym, arg_params, aux_params, x)``, x 1x3x64x64."""
    from gluoncv.model_zoo import get_model
    mx.random.seed(seed)
    net = get_model("resnet18_v1", pretrained=False)
    net.initialize(mx.init.Xavier())
    net.hybridize()
    x = mx.nd.random.uniform(shape=(1, 3, 64, 64))
    net(x)
    sym = net._cached_graph[1]
    params = {p.name: p.data() for p in net.collect_params().values()}
    args = {k: params[k] for k in sym.list_arguments() if k in params}
    auxs = {k: params[k] for k in sym.list_auxiliary_states()}
    return sym, args, auxs, x


def assert_dtype_tags(sym, arg_params, aux_params):
    """Every weight and aux variable of ``sym`` carries ``__dtype__`` = its param's dtype
    (what lets a converted symbol bind without a type_dict)."""
    from mxnet_amp.ir.dtypes import MX_CODE
    from mxnet_amp.ir.dtypes import array_dtype
    attrs = sym.attr_dict()
    wrong = {k: (attrs.get(k, {}).get("__dtype__"), array_dtype(v))
             for k, v in {**arg_params, **aux_params}.items()
             if attrs.get(k, {}).get("__dtype__") != str(MX_CODE[array_dtype(v)])}
    assert not wrong, f"__dtype__ tag vs param dtype: {wrong}"


class VerifiedPasses:
    """Counts the postcondition checks (:func:`mxnet_amp.ir.verify.verify_graph`) that the pass
    runner (:class:`mxnet_amp.passes.kernel.GraphPass`) makes: every pass checks its own
    output, so tests no longer wrap pass functions; this only observes that it happens."""

    def __init__(self, monkeypatch):
        import mxnet_amp.passes.kernel as kernel
        from mxnet_amp.ir.verify import verify_graph
        self.calls = 0

        def counted(graph, **kw):
            self.calls += 1
            return verify_graph(graph, **kw)

        monkeypatch.setattr(kernel, "verify_graph", counted)


def op_compute_dtypes(sym, data_names) -> dict:
    """Each op node's compute dtype in a converted ``sym``: the dtype of its first float
    input (its data input for every layer), else of its first float output; amp casts left
    out. Data inputs are float32, every other variable the dtype its ``__dtype__`` tag says
    (float32 without one): what the symbol binds with. By node name, so that two
    conversions of one graph compare node by node whatever casts each inserted."""
    from mxnet_amp.ir.dtypes import dtype_of_code, is_float
    from mxnet_amp.ir.graph import CAST_OPS
    from mxnet_amp.passes.infer_dtypes import infer_dtypes
    graph = graph_of(sym)
    var_dtypes = {n.name: ("float32" if n.name in data_names
                           else dtype_of_code(n.attrs.get("__dtype__")) or "float32")
                  for n in graph.variables()}
    outs = infer_dtypes(graph, var_dtypes)
    found = {}
    for i, node in enumerate(graph.nodes):
        if node.is_variable or node.op in CAST_OPS:
            continue
        ins = [outs[e.node][e.output] for e in node.inputs]
        floats = [d for d in ins if d is not None and is_float(d)]
        floats = floats or [d for d in outs[i] if d is not None and is_float(d)]
        found[node.name] = floats[0] if floats else None
    return found


# the planted-culprit graphs of benchmarks/ are judged at benchmarks/auto_attribution.py's
# tolerance (a 5000-layer chain's plain float16 rounding is ~0.03 with nothing wrong)
PLANTED_TOLERANCE = 0.1


def auto_planted(p, **kwargs):
    """The report of ``auto_convert_model`` on a planted-culprit model ``p`` (float16)."""
    from mxnet_amp.auto import auto_convert_model
    return auto_convert_model(p.sym, p.arg_params, p.aux_params, p.sample, "float16",
                              tolerance=PLANTED_TOLERANCE, quiet=True, **kwargs)[3]


def accuracy_culprits(report) -> list[str]:
    """The names auto kept in float32 for accuracy, sorted."""
    return sorted(k.name for k in report.by_reason("accuracy"))
