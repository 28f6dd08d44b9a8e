"""Type and range checks of the public functions' arguments: each failure is an
:class:`~mxnet_amp.errors.ArgumentError` naming the parameter, raised before any work."""
from __future__ import annotations

import math
import numbers
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

from ..errors import ArgumentError, GraphError, ParamError
from ..ir.dtypes import dtype_name

if TYPE_CHECKING:   # mxnet itself is imported where it runs
    from mxnet import Context
    from mxnet.symbol import Symbol

__all__ = ["check_bool", "check_optional_bool", "check_number", "check_int", "check_choice", "check_callable",
           "check_symbol", "check_contexts", "check_names", "check_str", "check_dtype_map", "check_path",
           "param_dict", "name_list"]


def check_bool(value: object, name: str) -> bool:
    """``value`` when it is a bool (numpy's too): ``fold_batchnorm='no'`` would be true."""
    import numpy as np
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise ArgumentError(f"{name} must be True or False, got {value!r}")


def check_optional_bool(value: object, name: str) -> bool | None:
    """``value`` when it is a bool or None (``progress=None``: on where stderr is a terminal)."""
    return None if value is None else check_bool(value, name)


def check_number(value: object, name: str, *, low: float | None = None, high: float | None = None,
                 low_open: bool = False) -> float:
    """``value`` as a finite float in ``[low, high]`` (``(low, high]`` with ``low_open``)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ArgumentError(f"{name} must be a number, got {value!r}")
    number = float(value)
    too_low = low is not None and (number <= low if low_open else number < low)
    if not math.isfinite(number) or too_low or (high is not None and number > high):
        bounds = (f"{'>' if low_open else '>='} {low:g}" if low is not None else "") + \
                 (f" and <= {high:g}" if high is not None else "")
        raise ArgumentError(f"{name} must be finite{' and ' + bounds.strip() if bounds else ''}, got {value!r}")
    return number


def check_int(value: object, name: str, *, low: int = 0, optional: bool = False) -> int | None:
    """``value`` as an int ``>= low`` (numpy integers too; not a bool or a float)."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ArgumentError(f"{name} must be an int, got {value!r}")
    if value < low:
        raise ArgumentError(f"{name} must be at least {low}, got {value!r}")
    return int(value)


def check_choice(value: object, name: str, choices: Sequence[str]) -> str:
    """``value`` when it is one of ``choices``."""
    if not isinstance(value, str) or value not in choices:
        raise ArgumentError(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return value


def check_str(value: object, name: str) -> str:
    """``value`` when it is a str."""
    if not isinstance(value, str):
        raise ArgumentError(f"{name} must be a str, got {value!r}")
    return value


def check_callable(value: object, name: str, optional: bool = True) -> Callable | None:
    """``value`` when it is callable (or None where that is allowed)."""
    if value is None and optional:
        return None
    if not callable(value):
        raise ArgumentError(f"{name} must be a callable, got {value!r}")
    return value


def check_symbol(value: object, name: str = "sym") -> Symbol:
    """``value`` when it is an ``mx.sym.Symbol``; :class:`~mxnet_amp.errors.GraphError`
    saying what to pass for anything else (a path, a Gluon block)."""
    import mxnet as mx
    if isinstance(value, mx.sym.Symbol):
        return value
    hint = ("for a Gluon block use convert_hybrid_block / emulate_block"
            if isinstance(value, mx.gluon.Block) else
            "load a checkpoint with mxnet_amp.load_checkpoint(prefix, epoch) or a symbol file "
            "with mx.sym.load(path), or convert files with convert_checkpoint")
    raise GraphError(f"{name} must be an mx.sym.Symbol, got {_kind(value)}: {hint}")


def check_names(value: object, name: str) -> list[str] | None:
    """``value`` as a list of names (a str is one name; None stays None)."""
    if value is None:
        return None
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping) or not isinstance(value, Iterable):
        raise ArgumentError(f"{name} must be a list of names, got {value!r}")
    names = list(value)
    wrong = [v for v in names if not isinstance(v, str)]
    if wrong:
        raise ArgumentError(f"{name} must be a list of names (str), got {wrong[0]!r} in it")
    return names


def check_contexts(ctx: Any, name: str = "ctx") -> list[Context] | None:
    """``ctx`` (an mx.Context or a list of them; None stays None) as a list, each a device
    this MXNet build has: ``mx.gpu()`` on a CPU build fails here, not deep in MXNet."""
    import mxnet as mx
    if ctx is None:
        return None
    contexts = list(ctx) if isinstance(ctx, (list, tuple)) else [ctx]
    if not contexts:
        raise ArgumentError(f"{name} must be an mx.Context or a non-empty list of them, got {ctx!r}")
    for one in contexts:
        if not isinstance(one, mx.Context):
            raise ArgumentError(f"{name} must be an mx.Context (mx.cpu(), mx.gpu(0)) or a list of "
                                f"them, got {one!r}")
        if one.device_type == "gpu" and one.device_id >= mx.context.num_gpus():
            found = mx.context.num_gpus()
            raise ArgumentError(f"{name}={one} names a GPU this machine does not have "
                                f"({found} GPU{'s' if found != 1 else ''} visible"
                                f"{'' if found else ', or an MXNet build without CUDA'}); use mx.cpu()")
    return contexts


def _kind(value: object) -> str:
    return repr(value) if isinstance(value, (str, int, float, type(None))) else type(value).__name__


def check_dtype_map(value: object, name: str, keys: Iterable[str] | None = None,
                    optional_values: bool = False) -> dict[str, str | None] | None:
    """``value`` (a dict of name to dtype; None stays None) with each dtype's plain name;
    every key one of ``keys`` where given. ``optional_values``: a None dtype stays None."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ArgumentError(f"{name} must be a dict of name to dtype, got {value!r}")
    known = None if keys is None else set(keys)
    out: dict[str, str | None] = {}
    for key, dtype in value.items():
        if known is not None and key not in known:
            raise ArgumentError(f"{name} names {key!r}, which is not an input of the symbol "
                                f"(its inputs: {sorted(known)[:20]})")
        if dtype is None and optional_values:
            out[key] = None
            continue
        try:
            out[key] = dtype_name(dtype)
        except ValueError as err:
            raise ArgumentError(f"{name}[{key!r}]: {err}") from None
    return out


def check_path(value: object, name: str, optional: bool = False) -> str | None:
    """``value`` (a str or PathLike; None stays None where ``optional``) as a str."""
    import os
    if value is None and optional:
        return None
    if not isinstance(value, (str, os.PathLike)):
        raise ArgumentError(f"{name} must be a path (str or os.PathLike), got {value!r}")
    return str(os.fspath(value))


def param_dict(params: Mapping | None, what: str) -> dict:
    """``params`` as a dict (None is an empty one); :class:`ParamError` for anything but a
    mapping of names to arrays."""
    if params is None:
        return {}
    if not isinstance(params, Mapping):
        raise ParamError(f"{what} must be a dict of param name to NDArray (or None), got "
                         f"{type(params).__name__}")
    from mxnet.ndarray import NDArray
    for name, value in params.items():
        if not isinstance(value, NDArray):
            kind = type(value)
            raise ParamError(f"{what}[{name!r}] is a {kind.__module__}.{kind.__qualname__}, not an "
                             "MXNet NDArray; pass mx.nd.array(value, dtype=value.dtype)")
    return dict(params)


def name_list(names: str | Iterable[str] | None) -> list[str] | None:
    """``names`` as a list of names; a string is one name, not a list of its letters (as
    users pass ``data_names='data'`` or ``excluded_sym_names='fc1'``). None stays None."""
    if names is None:
        return None
    return [names] if isinstance(names, str) else list(names)
