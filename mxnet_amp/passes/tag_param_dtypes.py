"""Tag weight and aux variables with the ``__dtype__`` of the params that go with the graph.

MXNet binds a symbol (``simple_bind`` without ``type_dict``, ``Module.bind``, the C
predictor, ``SymbolBlock.imports``) with each variable's dtype taken from its
``__dtype__`` attribute, else float32 or whatever type inference decides. A weight stored
in low precision, or one read only by an ``amp_cast`` (whose input dtype inference cannot
decide), binds only when the attribute says what the param holds. Symbol-API checkpoints
carry no ``__dtype__`` at all, so the attribute is written for every weight here, not just
rewritten where it was.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

from ..ir.dtypes import MX_CODE
from ..ir.graph import Graph, Node
from .kernel import GraphPass, PassResult

__all__ = ["tag_param_dtypes", "TagParamDtypes"]


class TagParamDtypes(GraphPass[None]):
    """:func:`tag_param_dtypes` as a pass, for the variables named in ``dtypes``."""

    name = "tag_param_dtypes"

    def __init__(self, dtypes: Mapping[str, str], *, verify: bool = True) -> None:
        super().__init__(verify=verify)
        self.dtypes = dtypes

    def call(self, graph: Graph) -> PassResult[None]:
        """Run the pass on ``graph`` (see the class)."""
        new = _tagged(graph, self.dtypes)
        return PassResult(new, None, new is not graph)


def tag_param_dtypes(graph: Graph, dtypes: Mapping[str, str]) -> Graph:
    """``graph`` with each variable named in ``dtypes`` tagged ``__dtype__`` = its code.

    Parameters
    ----------
    graph : Graph
        Not modified; loop/cond bodies are left alone (their variables are not params).
    dtypes : mapping of str to str
        Variable name -> dtype name of the param that will be bound to it.

    Returns
    -------
    Graph
        A new graph (``graph`` itself when every tag is already right).
    """
    return TagParamDtypes(dtypes)(graph).graph


def _tagged(graph: Graph, dtypes: Mapping[str, str]) -> Graph:
    codes = {name: str(code) for name, code in MX_CODE.items()}
    nodes = list(graph.nodes)
    changed = False
    for i, node in enumerate(nodes):
        dtype = dtypes.get(node.name) if node.op == "null" else None
        if dtype is None:
            continue
        code = codes[dtype]
        if node.attrs.get("__dtype__") != code:
            # a 100k-node graph has ~50k weights: built directly, not through replace()
            nodes[i] = Node(node.op, node.name, node.inputs,
                            MappingProxyType({**node.attrs, "__dtype__": code}),
                            node.subgraphs, node.extra)
            changed = True
    return Graph(tuple(nodes), graph.heads, graph.attrs) if changed else graph
