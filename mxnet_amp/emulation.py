"""Run a low precision model on any CPU with the low precision numerics simulated.

MXNet cannot execute float16 on a CPU, and bfloat16 matrix ops only on CPUs with avx512.
:func:`emulate_model` turns a converted model into a float32 one that holds, at every
tensor the converted graph keeps in low precision, exactly the value that dtype can hold:
each such tensor is rounded by a round trip ``amp_cast(amp_cast(x, low), float32)``, which
MXNet runs on any CPU. Rounding is to nearest even; values beyond the dtype's range become
±inf (65504 for float16) and tiny ones flush to subnormals or zero as the dtype has them.
The ops themselves compute in float32 with float32 accumulation, as GPU tensor cores do.

Not modelled: kernels that accumulate in low precision internally (some fp16 reductions),
fused-kernel rounding differences, and low precision intermediate values *inside* one op
(e.g. softmax's exponentials when softmax itself runs in fp16).
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

from .dtypes import LOW_PRECISION, MX_CODE
from .graph import Entry, Graph, GraphBuilder, Node
from .io import graph_from_symbol, graph_to_symbol
from .params import array_dtype, cast_array
from .passes.infer_dtypes import infer_dtypes

__all__ = ["emulate_graph", "emulate_model", "round_array"]


def _cast(name: str, src: Entry, dtype: str) -> Node:
    return Node("amp_cast", name, (src,), MappingProxyType({"dtype": dtype}))


def emulate_graph(graph: Graph, var_dtypes: Mapping[str, str]) -> Graph:
    """The float32 graph that simulates ``graph``'s low precision tensors (see module doc).

    ``var_dtypes``: the dtype each variable has in the converted model (model inputs and
    stored weights); low precision weights become float32 variables holding rounded values.
    """
    dtypes = infer_dtypes(graph, var_dtypes)
    used = graph.num_used_outputs()
    builder = GraphBuilder()
    builder.names.update(n.name for n in graph.nodes)
    env: list[list[Entry]] = []
    for i, node in enumerate(graph.nodes):
        if node.is_variable:
            if var_dtypes.get(node.name) in LOW_PRECISION and "__dtype__" in node.attrs:
                node = node.replace(attrs=MappingProxyType({**node.attrs,
                                                            "__dtype__": str(MX_CODE["float32"])}))
            env.append([Entry(builder.add(node))])
            continue
        inputs = tuple(env[e.node][e.index] for e in node.inputs)
        if node.op in ("amp_cast", "Cast", "cast") and node.attrs.get("dtype") in LOW_PRECISION:
            low = node.attrs["dtype"]
            # keep the node's name on the float32 result so names stay stable
            first = builder.add(_cast(builder.fresh_name(node.name + "_to_" + low), inputs[0], low))
            env.append([Entry(builder.add(_cast(node.name, Entry(first), "float32")))])
            continue
        idx = builder.add(node.replace(inputs=inputs) if inputs != node.inputs else node)
        outs = []
        for k in range(used[i]):
            e = Entry(idx, k)
            low = dtypes[i][k] if k < len(dtypes[i]) else None
            if low in LOW_PRECISION:
                base = node.name + (f"_out{k}" if k else "")
                to_low = builder.add(_cast(builder.fresh_name(f"{base}_round_{low}"), e, low))
                e = Entry(builder.add(_cast(builder.fresh_name(f"{base}_round_float32"),
                                            Entry(to_low), "float32")))
            outs.append(e)
        env.append(outs)
    heads = [env[e.node][e.index] for e in graph.heads]
    return builder.build(heads, graph.attrs)


def round_array(array, dtype: str):
    """``array`` rounded to ``dtype`` and returned as float32 (a new NDArray)."""
    return cast_array(cast_array(array, dtype), "float32")


def emulate_model(sym, arg_params: Mapping, aux_params: Mapping,
                  input_dtypes: Mapping[str, str] | None = None):
    """A float32 model that simulates the low precision model ``(sym, arg_params, aux_params)``.

    Parameters
    ----------
    sym : Symbol
        A converted (mixed precision) symbol, casts included.
    arg_params, aux_params : dict of str to NDArray
        Its params in the dtypes the converted model stores them (low precision ones are
        rounded to that dtype already; they are returned as float32 copies).
    input_dtypes : dict, optional
        Dtypes of the model inputs (default float32).

    Returns
    -------
    (Symbol, dict, dict)
        Runs on any CPU; outputs equal what the low precision model computes up to what the
        module documentation lists as not modelled.
    """
    graph = graph_from_symbol(sym)
    var_dtypes = {k: array_dtype(v) for k, v in {**arg_params, **aux_params}.items()}
    for n in graph.variables():
        var_dtypes.setdefault(n.name, (input_dtypes or {}).get(n.name, "float32"))
    emulated = emulate_graph(graph, var_dtypes)

    def widen(params):
        return {k: (cast_array(v, "float32") if array_dtype(v) in LOW_PRECISION else v)
                for k, v in params.items()}
    return graph_to_symbol(emulated), widen(arg_params), widen(aux_params)
