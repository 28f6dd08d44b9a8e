"""Seams carry named records, not positions or string keys (issue 43, item 3), read from the source.

The rules:

* No function returns a tuple literal of more than 2 values. One shape is exempt: the MXNet
  model triple ``(symbol, arg_params, aux_params)``, annotated ``tuple[Symbol, dict, dict]``,
  which ``mx.model.load_checkpoint`` and ``mx.contrib.amp.convert_model`` return and drop-in
  callers unpack. Anything else of three or more values is a record (a frozen dataclass).
* A ``NamedTuple`` is a record when it is read by field: no code indexes what a function of
  the package returns by a constant position past the second (``runs.convert(base)[3]``, or
  ``hit = f(...)`` then ``hit[3]``). Unpacking a NamedTuple whole (``sym, args, auxs, conversion
  = convert_model_full(...)``) stays allowed: the public records keep it for their callers.
* ``ConversionReport`` has no ``extra`` mapping: what a command adds is a typed section.
"""
from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import mxnet_amp
from mxnet_amp.report.model import ConversionReport

PACKAGE = Path(mxnet_amp.__file__).resolve().parent
MODEL_TRIPLE = "tuple[Symbol, dict, dict]"


def _own_nodes(fn: ast.AST) -> list[ast.AST]:
    """The nodes of ``fn``'s body, nested functions, lambdas and classes left out."""
    out, stack = [], list(ast.iter_child_nodes(fn))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        out.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return out


def long_tuple_returns(tree: ast.AST, where: str) -> list[str]:
    """Functions of ``tree`` that return a tuple literal of more than 2 values (a starred
    element counts as many), the model triple aside."""
    found = []
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if fn.returns is not None and ast.unparse(fn.returns) == MODEL_TRIPLE:
            continue
        for node in _own_nodes(fn):
            if isinstance(node, ast.Return) and isinstance(node.value, ast.Tuple):
                elts = node.value.elts
                if len(elts) > 2 or any(isinstance(e, ast.Starred) for e in elts):
                    found.append(f"{where}:{node.lineno} {fn.name} returns {len(elts)} values")
    return found


def _callee(call: ast.Call) -> str | None:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def positional_reads(tree: ast.AST, where: str, defined: set[str]) -> list[str]:
    """Where the result of a call to a function in ``defined`` is indexed by a constant
    position past the second, directly or through a name it was assigned to."""
    found = []
    scopes = [n for n in ast.walk(tree) if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef))]
    for scope in scopes:
        nodes = _own_nodes(scope)
        results = {t.id for n in nodes if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call)
                   and _callee(n.value) in defined for t in n.targets if isinstance(t, ast.Name)}
        for node in nodes:
            if not (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant)
                    and type(node.slice.value) is int and node.slice.value >= 2):
                continue
            value = node.value
            if ((isinstance(value, ast.Call) and _callee(value) in defined)
                    or (isinstance(value, ast.Name) and value.id in results)):
                found.append(f"{where}:{node.lineno} {ast.unparse(node)}")
    return found


def _trees() -> list[tuple[str, ast.AST]]:
    return [(str(p.relative_to(PACKAGE)), ast.parse(p.read_text(encoding="utf-8")))
            for p in sorted(PACKAGE.rglob("*.py"))]


def test_no_function_returns_a_tuple_of_more_than_two_values():
    found = [f for where, tree in _trees() for f in long_tuple_returns(tree, where)]
    assert not found, "return a record (a frozen dataclass) instead:\n" + "\n".join(found)


def test_no_caller_reads_a_returned_value_by_its_position():
    trees = _trees()
    defined = {n.name for _, t in trees for n in ast.walk(t) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    found = [f for where, tree in trees for f in positional_reads(tree, where, defined)]
    assert not found, "read the record's field instead:\n" + "\n".join(found)


def test_the_conversion_report_has_typed_sections_and_no_extra_mapping():
    fields = {f.name for f in dataclasses.fields(ConversionReport)}
    assert "extra" not in fields and {"notes", "onnx", "demo", "auto"} <= fields


def test_the_rules_catch_what_they_name():
    """Each check finds its own example and passes the allowed forms (so a test that finds
    nothing in the package finds nothing because there is nothing)."""
    bad = ast.parse("def f():\n    return 1, 2, 3\n"
                    "def g():\n    return (*xs, 1)\n"
                    "def h() -> tuple[Symbol, dict, dict]:\n    return s, a, x\n"
                    "def k():\n    return a, b\n"
                    "def m():\n    r = f()\n    return [r[3], f()[2], f()[1], 'a:b'.partition(':')[2]]\n")
    assert [x.split()[1] for x in long_tuple_returns(bad, "t")] == ["f", "g"]
    assert sorted(x.split(" ", 1)[1] for x in positional_reads(bad, "t", {"f", "g", "h", "k", "m"})) \
        == ["f()[2]", "r[3]"]
