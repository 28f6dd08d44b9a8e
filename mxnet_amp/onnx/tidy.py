"""The exported graph as other ONNX tools read it: node names, inference BatchNorms, and a
float32 export's casts that convert nothing (:func:`plain_float_casts`).

MXNet 1.9.1's converters leave most ONNX nodes unnamed. ONNX allows that, but graph tools
derive new names from node names: onnxconverter-common's ``convert_float_to_float16`` then
writes two nodes of one name and its output fails to load, and onnxsim or a profiler
reports nodes nobody can find in the model. :func:`name_nodes` names every node, uniquely,
after the MXNet node it comes from.

MXNet's BatchNorm converter writes ``momentum=0.9``. In ONNX's BatchNormalization 9 (opsets
9 to 13) ``momentum`` only feeds the running statistics a training node (more than one
output) returns; a single-output node normalises with the running statistics it is given.
onnx's ``ReferenceEvaluator`` (1.14 to 1.23 at least) reads any momentum, the schema's
default 0.9 when the attribute is absent, as training and normalises with the batch's
statistics blended in (densenet121: 0.29 off where the inference result is 7e-4 off).
:func:`inference_batchnorms` writes ``momentum=1.0`` on every single-output
BatchNormalization: the spec's result is unchanged (momentum plays no part), onnxruntime and
TensorRT ignore it, and ReferenceEvaluator's blend ``mean * 1 + batch_mean * 0`` is the
running statistics (for a batch of finite values).
"""
from __future__ import annotations

from typing import Any, Iterable, Iterator, Mapping, Sequence

__all__ = ["name_nodes", "inference_batchnorms", "plain_float_casts"]

_FLOAT, _BOOL = 1, 9


def _all_nodes(graph: Any) -> Iterator[Any]:
    """Every node of ``graph`` and of the subgraphs its nodes hold (Loop, If), in order."""
    for node in graph.node:
        yield node
        for attribute in node.attribute:
            for sub in (*attribute.graphs, *([attribute.g] if attribute.HasField("g") else [])):
                yield from _all_nodes(sub)


def _owner(tensor: str, mxnet_names: frozenset[str]) -> str | None:
    """The longest MXNet node name ``tensor`` starts with (MXNet's converters name their
    intermediate tensors ``<node>_<what>``: ``fc_gemm``, ``fc_orig_shape``)."""
    for end in range(len(tensor), 0, -1):
        if tensor[:end] in mxnet_names:
            return tensor[:end]
    return None


def name_nodes(graph: Any, mxnet_names: Iterable[str]) -> int:
    """Give every node of ONNX ``graph`` (a ``GraphProto``, changed in place) a name of its
    own, after the MXNet node it comes from.

    A node MXNet named (a Cast is named after the tensor it makes) keeps its name. An
    unnamed node takes the name of its first output when that starts with an MXNet node's
    name (``fc_gemm``, ``conv1``); otherwise ``<node>/<output>``, ``<node>`` the MXNet node
    whose converter wrote it (the last one found before it: a converter's nodes are
    contiguous). A name taken already gets ``_1``, ``_2``... (first come, first kept).

    Parameters
    ----------
    graph : onnx.GraphProto
    mxnet_names : iterable of str
        Names of the MXNet nodes the graph was converted from.

    Returns
    -------
    int
        How many nodes were named or renamed.
    """
    names = frozenset(mxnet_names)
    nodes = list(_all_nodes(graph))
    taken: set[str] = set()
    count, owner = 0, ""
    for node in nodes:
        tensor = next((o for o in node.output if o), "")
        found = _owner(tensor, names) if tensor else None
        owner = found or owner
        wanted = node.name or (tensor if found else f"{owner}/{tensor or node.op_type}" if owner
                               else tensor or node.op_type)
        name, k = wanted, 0
        while name in taken:
            k += 1
            name = f"{wanted}_{k}"
        taken.add(name)
        if name != node.name:
            node.name = name
            count += 1
    return count


def inference_batchnorms(graph: Any) -> list[str]:
    """Write ``momentum=1.0`` on every single-output ``BatchNormalization`` of ``graph`` (and
    drop a ``training_mode=0``), in place; returns the names of the nodes changed."""
    from onnx import helper
    changed = []
    for node in _all_nodes(graph):
        if node.op_type != "BatchNormalization" or len([o for o in node.output if o]) != 1:
            continue
        kept = [a for a in node.attribute if a.name not in ("momentum", "training_mode")]
        momentum = [a.f for a in node.attribute if a.name == "momentum"]
        if momentum == [1.0] and len(kept) == len(node.attribute) - 1:
            continue
        del node.attribute[:]
        node.attribute.extend([*kept, helper.make_attribute("momentum", 1.0)])
        changed.append(node.name)
    return changed


def plain_float_casts(model: Any, weights: Mapping[str, tuple[int, Sequence[int]]] | None = None) -> list[str]:
    """Write each ``Cast`` to float32 that is no conversion in a form float16 converters
    can retype, in place: a Cast whose input is float32 already becomes an ``Identity``, one
    of a bool becomes ``Where(x, 1, 0)``; both exact. Returns the node names changed.

    onnxconverter-common's ``convert_float_to_float16`` retypes every float32 tensor of a
    graph as float16 but leaves each Cast's ``to``: a Cast to float32 inside the graph then
    makes a float32 tensor typed float16, and onnxruntime refuses the file. MXNet's
    converters write such casts (``_greater_scalar``: Greater, then a Cast of its bool; the
    casts of ``_contrib_box_decode``, of a float32 model's own ``amp_multicast``).

    ``weights``: ``name -> (ONNX type, shape)`` of initializers the proto does not hold
    (streamed into the file after it), for the type inference that finds each cast's input.
    """
    import numpy as np
    from onnx import helper, numpy_helper, shape_inference
    graph = model.graph
    typed = type(model)()
    typed.CopyFrom(model)
    held = {t.name for t in graph.initializer}
    typed.graph.input.extend(helper.make_tensor_value_info(name, code, list(shape))
                             for name, (code, shape) in (weights or {}).items() if name not in held)
    inferred = shape_inference.infer_shapes(typed)
    types = {i.name: i.type.tensor_type.elem_type
             for i in (*inferred.graph.input, *inferred.graph.output, *inferred.graph.value_info)}
    types.update({t.name: t.data_type for t in graph.initializer})
    changed: list[str] = []
    nodes = []
    for node in graph.node:
        to = next((a.i for a in node.attribute if a.name == "to"), None)
        source = types.get(node.input[0]) if node.input else None
        if node.op_type != "Cast" or to != _FLOAT or source not in (_FLOAT, _BOOL):
            nodes.append(node)
            continue
        if source == _FLOAT:
            nodes.append(helper.make_node("Identity", list(node.input), list(node.output), name=node.name))
        else:
            one, zero = (numpy_helper.from_array(np.array(v, "float32"), f"{node.output[0]}_{w}")
                         for v, w in ((1.0, "one"), (0.0, "zero")))
            graph.initializer.extend([one, zero])
            nodes.append(helper.make_node("Where", [node.input[0], one.name, zero.name], list(node.output),
                                          name=node.name))
        changed.append(node.name)
    del graph.node[:]
    graph.node.extend(nodes)
    return changed
