"""Read the op lists: load ``lists/<dtype>.toml``, validate it, apply user overrides.

A list file holds ``[[group]]`` tables (category, reason, ops), ``[[conditional]]`` tables
(op, attr, values, reason), ``[[slow_kernel]]`` tables (target ops, the shapes MXNet's low
precision kernel is too slow for, reason), ``[[pattern]]`` tables (name prefix, category,
reason) and an ``[index_inputs]`` table. ``docs/ops.md`` describes the format and every
op's category. The result is an :class:`~mxnet_amp.policy.OpPolicy`.
"""
from __future__ import annotations

import tomllib
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Iterable, Mapping, Sequence

from .errors import ArgumentError, ListError, UnknownOpError
from .mx.registry import op_signature, registry_op_names
from .policy import Category, OpPolicy, SlowKernel, check_target_dtype

__all__ = ["load_policy", "lists_dir", "OVERRIDE_MODES"]


def lists_dir() -> Path:
    """Folder holding the list files: inside the installed package, else the source tree."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "lists", here.parent / "lists"):
        if (candidate / "float16.toml").is_file():
            return candidate
    raise ListError(f"op list files not found beside {here} (looked in {here / 'lists'} and "
                    f"{here.parent / 'lists'}); the installation is incomplete")


def _read(path: Path) -> dict:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except UnicodeDecodeError as err:
        raise ListError(f"{path}: cannot read op list: byte {err.object[err.start:err.start + 1]!r} "
                        f"at offset {err.start} is not UTF-8 (TOML files are UTF-8)") from None
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise ListError(f"{path}: cannot read op list: {err}") from None


_NOTHING = object()


def _text(path: Path, where: str, table: Mapping, key: str) -> str:
    """``table[key]``, a non-empty string; :class:`ListError` naming the file, the table
    (``where``) and the key otherwise (a list or number would be read as something else)."""
    value = table.get(key, _NOTHING)
    if not isinstance(value, str) or not value:
        got = "nothing" if value is _NOTHING else repr(value)
        raise ListError(f"{path}: {where}: {key} must be a non-empty string, got {got}")
    return value


def _strings(path: Path, where: str, value: object, what: str = "op names") -> list[str]:
    """``value`` as a list of non-empty strings; :class:`ListError` naming the file and
    ``where`` otherwise. A bare string is refused: iterating it gives its letters
    (``ops = "RNN"`` read as R, N, N)."""
    hint = f" (write [{value!r}])" if isinstance(value, str) else ""
    if not isinstance(value, list):
        got = "nothing" if value is _NOTHING else repr(value)
        raise ListError(f"{path}: {where} must be a list of {what}, got {got}{hint}")
    wrong = [v for v in value if not isinstance(v, str) or not v]
    if wrong:
        raise ListError(f"{path}: {where} must be a list of {what} (non-empty strings), "
                        f"got {wrong[0]!r} in it")
    return value


def _tables(data: Mapping, key: str, path: Path) -> list[Mapping]:
    """The ``[[key]]`` array of tables (empty when absent); :class:`ListError` when the key
    holds anything else."""
    tables = data.get(key, [])
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise ListError(f"{path}: {key} must be an array of tables ([[{key}]]), got {tables!r}")
    return tables


def _category(path: Path, where: str, table: Mapping, allowed: Sequence[Category]) -> Category:
    """``table['category']`` as one of ``allowed``; :class:`ListError` naming the choices."""
    value = table.get("category", _NOTHING)
    for cat in allowed:
        if value == cat.value:
            return cat
    got = "nothing" if value is _NOTHING else repr(value)
    raise ListError(f"{path}: {where}: category must be one of "
                    f"{', '.join(c.value for c in allowed)}, got {got}")


def _check_ops(names: Iterable[str], where: str) -> None:
    names = set(names)
    unknown = names - registry_op_names()
    if unknown:
        # a plugin library (mx.library.load) may have registered ops since the cache filled
        registry_op_names.cache_clear()
        unknown = names - registry_op_names()
    if unknown:
        raise UnknownOpError(unknown, where)


@lru_cache(maxsize=4)
def _base_policy(target_dtype: str, folder: str) -> OpPolicy:
    path = Path(folder) / f"{target_dtype}.toml"
    data = _read(path)
    if data.get("target_dtype") != target_dtype:
        raise ListError(f"{path}: says target_dtype = {data.get('target_dtype')!r}, "
                        f"expected {target_dtype!r}")
    cats: dict[Category, set[str]] = {c: set() for c in _GROUP_CATEGORIES}
    seen: dict[str, str] = {}
    reasons: dict[str, str] = {}
    for k, group in enumerate(_tables(data, "group", path)):
        cat = _category(path, f"group {k}", group, _GROUP_CATEGORIES)
        reason = _text(path, f"group {k}", group, "reason")
        for op in _strings(path, f"group {k}: ops", group.get("ops", _NOTHING)):
            if op in seen:
                raise ListError(f"{path}: op {op!r} is listed twice ({seen[op]} and {cat.value})")
            seen[op] = cat.value
            cats[cat].add(op)
            reasons[op] = reason
    conditional = _conditionals(data, path, seen, reasons)
    slow_kernels = _slow_kernels(data, path, cats[Category.TARGET])
    patterns = tuple((_text(path, f"pattern {k}", p, "prefix"),
                      _category(path, f"pattern {k}", p, _GROUP_CATEGORIES))
                     for k, p in enumerate(_tables(data, "pattern", path)))
    index_inputs = _index_inputs(data, path)
    reuse = _reuse_casts(data, path)
    loss_outputs, fp32_params = _contrib_tables(data, path)
    _check_ops(set(seen) | set(index_inputs) | reuse | set(loss_outputs) | set(fp32_params or ()),
               str(path))
    return OpPolicy(target_dtype=target_dtype, target=frozenset(cats[Category.TARGET]),
                    fp32=frozenset(cats[Category.FP32]), widest=frozenset(cats[Category.WIDEST]),
                    follow=frozenset(cats[Category.FOLLOW]), conditional=tuple(conditional),
                    patterns=patterns, index_inputs=MappingProxyType(index_inputs),
                    reasons=MappingProxyType(reasons), reuse_casts=reuse, loss_outputs=loss_outputs,
                    fp32_params=fp32_params, slow_kernels=slow_kernels)


_GROUP_CATEGORIES = (Category.TARGET, Category.FP32, Category.WIDEST, Category.FOLLOW)


def _conditionals(data: dict, path: Path, seen: dict[str, str],
                  reasons: dict[str, str]) -> list[tuple[str, str, tuple[str, ...]]]:
    """The ``[[conditional]]`` tables as ``(op, attr, values)``; each op is recorded in
    ``seen`` and its reason in ``reasons``."""
    conditional: list[tuple[str, str, tuple[str, ...]]] = []
    for k, cond in enumerate(_tables(data, "conditional", path)):
        op = _text(path, f"conditional {k}", cond, "op")
        where = f"conditional {k} (op {op!r})"
        attr = _text(path, where, cond, "attr")
        # a bare string would be read letter by letter: values = "sum" protects nothing
        values = tuple(_strings(path, f"{where}: values", cond.get("values", _NOTHING),
                                "attribute values"))
        reason = cond.get("reason", "")
        if not isinstance(reason, str):
            raise ListError(f"{path}: {where}: reason must be a string, got {reason!r}")
        if seen.get(op, "conditional") != "conditional":
            raise ListError(f"{path}: op {op!r} is both {seen[op]} and conditional")
        seen[op] = "conditional"
        reasons.setdefault(op, reason)
        conditional.append((op, attr, values))
    return conditional


def _index_inputs(data: dict, path: Path) -> dict[str, tuple[str, ...]]:
    """The ``[index_inputs]`` table: each op -> the names of its index inputs."""
    table = data.get("index_inputs", {})
    if not isinstance(table, dict):
        raise ListError(f"{path}: index_inputs must be a table ([index_inputs]), got {table!r}")
    return {op: tuple(_strings(path, f"[index_inputs] {op}", names, "input names"))
            for op, names in table.items()}


def _slow_kernels(data: dict, path: Path, target: set[str]) -> tuple[SlowKernel, ...]:
    """The ``[[slow_kernel]]`` tables: each names target ops (``ops``), the shape kind
    (``depthwise = true``, the only one), ``channels_not_multiple_of`` and a reason."""
    rules = []
    for k, table in enumerate(_tables(data, "slow_kernel", path)):
        ops, reason = table.get("ops"), table.get("reason")
        multiple = table.get("channels_not_multiple_of")
        if (not isinstance(ops, list) or not ops or not reason or table.get("depthwise") is not True
                or not isinstance(multiple, int) or multiple < 2
                or set(table) - {"ops", "reason", "depthwise", "channels_not_multiple_of"}):
            raise ListError(f"{path}: slow_kernel {k} needs ops (a list), a reason, depthwise = true "
                            "and channels_not_multiple_of (an integer >= 2), and nothing else")
        ops = _strings(path, f"slow_kernel {k}: ops", ops)
        not_target = [op for op in ops if op not in target]
        if not_target:
            raise ListError(f"{path}: slow_kernel {k} names {', '.join(not_target)}, which the "
                            "target list does not hold (a slow kernel only keeps target ops in float32)")
        rules += [SlowKernel(op, multiple, reason) for op in ops]
    return tuple(rules)


def _contrib_tables(data: dict, path: Path
                    ) -> tuple[tuple[str, ...], Mapping[str, tuple[str, ...]] | None]:
    """The ``[loss_outputs]`` ops and the ``[fp32_params]`` table (None when absent)."""
    tables = []
    for key, kind in (("loss_outputs", list), ("fp32_params", dict)):
        table = data.get(key)
        if table is not None and (not isinstance(table, dict) or not table.get("reason")
                                  or not isinstance(table.get("ops"), kind)):
            raise ListError(f"{path}: [{key}] needs a non-empty reason and ops as a {kind.__name__}")
        tables.append(table["ops"] if table is not None else None)
    loss, fp32 = tables
    if loss is not None:
        _strings(path, "[loss_outputs]: ops", loss)
    for op, names in (fp32 or {}).items():
        _strings(path, f"[fp32_params] ops.{op}", names, "param names")
    return (tuple(loss or ()),
            None if fp32 is None else MappingProxyType({k: tuple(v) for k, v in fp32.items()}))


def _reuse_casts(data: dict, path: Path) -> frozenset[str]:
    """The ``[reuse_casts]`` table's ops (empty when the file has none)."""
    table = data.get("reuse_casts", {})
    if not isinstance(table, dict) or (table and (not table.get("reason")
                                                  or not isinstance(table.get("ops"), list))):
        raise ListError(f"{path}: [reuse_casts] needs a non-empty reason and a list of ops")
    return frozenset(_strings(path, "[reuse_casts]: ops", table.get("ops", [])))


def _names(value: object, what: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise ArgumentError(f"{what} must be a list of op names, got {value!r}"
                            + (f" (write [{value!r}])" if isinstance(value, str) else ""))
    names = list(value)
    wrong = [v for v in names if not isinstance(v, str)]
    if wrong:
        raise ArgumentError(f"{what} must be a list of op names (str), got {wrong[0]!r} in it")
    _check_ops(names, what)
    return names


OVERRIDE_MODES = ("replace", "move")


def load_policy(target_dtype: str = "float16",
                target_dtype_ops: Sequence[str] | None = None,
                fp32_ops: Sequence[str] | None = None,
                widest_dtype_ops: Sequence[str] | None = None,
                conditional_fp32_ops: Sequence[tuple[str, str, Sequence[str]]] | None = None,
                follow_ops: Sequence[str] | None = None,
                overrides: str = "replace") -> OpPolicy:
    """The op policy for ``target_dtype``: the shipped lists with user overrides applied.

    Parameters
    ----------
    target_dtype : {'float16', 'bfloat16'}
    target_dtype_ops, fp32_ops, widest_dtype_ops : list of str, optional
        The ops of the target / float32 / widest category. With ``overrides='replace'`` (the
        default, ``mx.contrib.amp``'s meaning) a given list *replaces* the shipped one: an op
        it held that no given list names runs in its inputs' dtype (*follow*), so
        ``target_dtype_ops=['FullyConnected']`` runs only FullyConnected in low precision.
        With ``overrides='move'`` the named ops move and every other op keeps its category.
    conditional_fp32_ops : list of (op, attr, values), optional
        Ops to run in float32 when ``attr`` has one of ``values`` (else they follow).
        ``'replace'``: these are the only conditions; ``'move'``: they place the named ops only.
    follow_ops : list of str, optional
        Ops to move into the *follow* category (where an op in no list goes: it only adds).
    overrides : {'replace', 'move'}, default 'replace'
        How the lists above apply (see there).

    Returns
    -------
    OpPolicy
        The categories the pass uses (immutable).

    Raises
    ------
    UnknownOpError
        An override names ops the MXNet registry does not know (all of them are listed).
    ListError
        One op is named in two overrides, a condition names an attribute its op does not
        have or a value outside the attribute's choices, or ``overrides`` is neither mode.
    """
    target_dtype = check_target_dtype(target_dtype)
    if not isinstance(overrides, str) or overrides not in OVERRIDE_MODES:
        raise ListError(f"overrides must be 'replace' (the lists replace the shipped ones, as in "
                        f"mx.contrib.amp) or 'move' (the named ops move), got {overrides!r}")
    base = _base_policy(target_dtype, str(lists_dir()))
    lists = {Category.TARGET: target_dtype_ops, Category.FP32: fp32_ops,
             Category.WIDEST: widest_dtype_ops, Category.FOLLOW: follow_ops}
    moves = {cat: _names(ops, what) for (cat, ops), what in
             zip(lists.items(), ("target_dtype_ops", "fp32_ops", "widest_dtype_ops", "follow_ops"))}
    conds = _conditions(conditional_fp32_ops)
    if all(v is None for v in lists.values()) and conditional_fp32_ops is None:
        return base
    # the categories whose shipped list a given one replaces (follow only adds)
    given: set[Category] = {cat for cat, ops in lists.items()
                            if ops is not None and cat is not Category.FOLLOW}
    if conditional_fp32_ops is not None:
        given.add(Category.CONDITIONAL)
    return _overridden(base, moves, conds, given if overrides == "replace" else set())


def _overridden(base: OpPolicy, moves: Mapping[Category, list[str]],
                conds: Sequence[tuple[str, str, tuple[str, ...]]], replaced: set[Category]) -> OpPolicy:
    """``base`` with the ops of ``moves`` and ``conds`` placed there, the ``replaced``
    categories' shipped lists emptied first (:func:`load_policy`)."""
    named = _named_once(moves, conds)
    _check_ops(named, "user overrides")
    _check_conditions(conds)
    sets = {Category.TARGET: set(base.target), Category.FP32: set(base.fp32),
            Category.WIDEST: set(base.widest), Category.FOLLOW: set(base.follow)}
    conditional = tuple(c for c in base.conditional if c[0] not in named)
    dropped: dict[str, str] = {}   # op -> the category whose shipped list was replaced
    if replaced:
        conditional = _replace(sets, conditional, replaced, dropped)
    for s in sets.values():
        s.difference_update(named)
    for cat, ops in moves.items():
        sets[cat].update(ops)
    # an op the user places keeps that place on every node, as contrib runs it
    slow_kernels = tuple(k for k in base.slow_kernels if k.op not in named)
    return replace(base, target=frozenset(sets[Category.TARGET]), fp32=frozenset(sets[Category.FP32]),
                   widest=frozenset(sets[Category.WIDEST]), follow=frozenset(sets[Category.FOLLOW]),
                   conditional=conditional + tuple(conds), slow_kernels=slow_kernels,
                   reasons=_user_reasons(base.reasons, dropped, named))


def _replace(sets: dict[Category, set[str]], conditional: tuple, given: set[Category],
             dropped: dict[str, str]) -> tuple:
    """Empty the ``given`` categories of ``sets`` (and the conditions, when given) into
    *follow*, as contrib runs an op in no list; ``dropped`` records each op moved. Returns
    the conditions left."""
    for cat in (Category.TARGET, Category.FP32, Category.WIDEST):
        if cat in given:
            dropped.update(dict.fromkeys(sets[cat], cat.value))
            sets[Category.FOLLOW] |= sets[cat]
            sets[cat] = set()
    if Category.CONDITIONAL not in given:
        return conditional
    dropped.update(dict.fromkeys((c[0] for c in conditional), "conditional"))
    sets[Category.FOLLOW].update(c[0] for c in conditional)
    return ()


def _user_reasons(shipped: Mapping[str, str], dropped: Mapping[str, str],
                  named: Mapping[str, str]) -> Mapping[str, str]:
    """The reasons reports show, for ops the user's lists place: named in one, or left in
    none by a replaced list (the shipped reason would explain a category they left)."""
    reasons = dict(shipped)
    for op, cat in dropped.items():
        reasons[op] = f"the {cat} list passed replaces the shipped one, which held it"
    for op, cat in named.items():
        reasons[op] = f"named in the {cat} list passed"
    return MappingProxyType(reasons)


def _conditions(items: Iterable | None) -> list[tuple[str, str, tuple[str, ...]]]:
    """The ``conditional_fp32_ops`` ``items`` as ``(op, attr, values)`` tuples of strings."""
    if items is not None and (isinstance(items, (str, Mapping)) or not isinstance(items, Iterable)):
        raise ArgumentError("conditional_fp32_ops must be a list of (op, attr, values) tuples, "
                            f"got {items!r}")
    conds = []
    for item in items or ():
        try:
            op, attr, values = item
        except (TypeError, ValueError):
            raise ArgumentError("conditional_fp32_ops entries must be (op, attr, values) tuples, "
                                f"got {item!r}") from None
        if isinstance(values, str):
            values = [values]
        if not isinstance(values, Iterable):
            raise ArgumentError("conditional_fp32_ops entries must be (op, attr, values) tuples "
                                f"with a list of values, got {tuple(item)!r}")
        conds.append((str(op), str(attr), tuple(str(v) for v in values)))
    _check_ops({c[0] for c in conds}, "conditional_fp32_ops")
    return conds


def _named_once(moves: Mapping[Category, list[str]],
                conds: Sequence[tuple[str, str, tuple[str, ...]]]) -> dict[str, str]:
    """Each op the overrides name, with its category; :class:`ListError` for one named in
    two of them."""
    named: dict[str, str] = {}
    for cat, ops in moves.items():
        for op in ops:
            if op in named and named[op] != cat.value:
                raise ListError(f"op {op!r} is named in two overrides ({named[op]} and {cat.value})")
            named[op] = cat.value
    for op, _, _ in conds:
        if op in named and named[op] != "conditional":
            raise ListError(f"op {op!r} is named in two overrides ({named[op]} and conditional_fp32_ops)")
        named[op] = "conditional"
    return named


def _attr_choices(kind: str) -> frozenset[str] | None:
    """The values an enum attribute takes, from its registry type string
    (``"{'relu', 'tanh'}, required"``); None for any other type."""
    if not kind.startswith("{"):
        return None
    return frozenset(v.strip().strip("'\"") for v in kind[1:kind.index("}")].split(","))


def _check_conditions(conds: Iterable[tuple[str, str, tuple[str, ...]]]) -> None:
    """:class:`ListError` for a user condition that can never hold: an attribute its op does
    not have, or a value outside the attribute's choices. Such a condition would silently
    replace the op's shipped one. Ops whose registry entry lists no attributes (``Custom``
    and the like take any) are not checked."""
    for op, attr, values in conds:
        params = op_signature(op).params
        if not params or op_signature(op).name == "Custom":
            continue
        if attr not in params:
            raise ListError(f"conditional_fp32_ops ({op!r}, {attr!r}, ...): {op} has no "
                            f"attribute {attr!r}, so the condition never holds (its attributes: "
                            f"{', '.join(sorted(params))})")
        choices = _attr_choices(params[attr])
        wrong = [v for v in values if choices is not None and v not in choices]
        if wrong and choices is not None:
            raise ListError(f"conditional_fp32_ops ({op!r}, {attr!r}, ...): {attr} never takes "
                            f"{', '.join(map(repr, wrong))} (its values: "
                            f"{', '.join(map(repr, sorted(choices)))})")
