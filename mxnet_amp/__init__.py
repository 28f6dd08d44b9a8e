"""mxnet-amp: automatic mixed precision (float16 / bfloat16) for Apache MXNet 1.9 models.

Drop-in for ``mx.contrib.amp`` callers::

    import mxnet_amp as amp
    sym, args, auxs = amp.convert_model(sym, args, auxs, target_dtype='bfloat16')
    net16 = amp.convert_hybrid_block(net, target_dtype='float16')
"""
from __future__ import annotations

from typing import Callable, NoReturn

from .auto.api import auto_convert_block, auto_convert_model
from .bucketing import convert_bucketing_module
from .checkpoint import convert_checkpoint, load_checkpoint
from .convert import convert_model, convert_symbol
from .emulation import emulate, emulate_model
from .errors import (AlreadyConvertedError, AMPError, ArgumentError, CheckpointError, DeferredInitError,
                     GraphError, HardwareError, InputShapeError, ListError, OutputPathError, OverwriteError,
                     ParamError, StrippedCastsError, TargetDtypeError, TypeInferenceError,
                     UnknownOpError)
from .gluon.adapter import convert_block, convert_hybrid_block, emulate_block
from .gluon.model import export_block
from .mx import hardware  # noqa: F401  (the docs call mxnet_amp.hardware.bf16_runs_natively())
from .mx.io import save_checkpoint
from .mx.registry import op_input_names
from .onnx.export import OnnxExport, export_onnx
from .policy_load import load_policy

__all__ = [
    "convert_symbol", "convert_model", "convert_hybrid_block", "convert_block",
    "convert_checkpoint", "convert_bucketing_module", "save_checkpoint", "load_checkpoint",
    "export_block", "export_onnx", "OnnxExport",
    "emulate", "emulate_model", "emulate_block", "auto_convert_model", "auto_convert_block",
    "load_policy",
    "list_lp16_ops", "list_fp32_ops", "list_lp16_fp32_ops", "list_widest_type_cast",
    "list_conditional_fp32_ops", "list_loss_output_functions", "list_lp16_use_fp32_params",
    "AMPError", "AlreadyConvertedError", "ArgumentError", "CheckpointError", "DeferredInitError", "GraphError",
    "ListError", "ParamError", "TargetDtypeError", "TypeInferenceError", "UnknownOpError",
    "InputShapeError", "OutputPathError", "OverwriteError", "StrippedCastsError",
    "HardwareError",
]
__version__ = "0.1.0"


def _op_lister(name: str, category: str, summary: str) -> Callable[[str], list[str]]:
    """One ``list_*`` function of mx.contrib.amp: the sorted ops of ``category``."""
    def lister(target_dtype: str = "float16") -> list[str]:
        return sorted(getattr(load_policy(target_dtype), category))
    lister.__name__ = lister.__qualname__ = name
    lister.__doc__ = f"""{summary}

    Parameters
    ----------
    target_dtype : {{'float16', 'bfloat16'}}, default 'float16'

    Returns
    -------
    list of str
        Op names, sorted.
    """
    return lister


list_lp16_ops = _op_lister("list_lp16_ops", "target",
                           "Ops that compute in ``target_dtype`` (the *target* category).")
list_fp32_ops = _op_lister("list_fp32_ops", "fp32", "Ops that always compute in float32.")
list_lp16_fp32_ops = _op_lister("list_lp16_fp32_ops", "follow",
                                "Ops that run in whatever dtype their inputs have (the *follow* category).")
list_widest_type_cast = _op_lister("list_widest_type_cast", "widest",
                                   "Ops whose float inputs are unified to the widest dtype among them.")


def list_conditional_fp32_ops(target_dtype: str = "float16") -> list[tuple[str, str, list[str]]]:
    """``(op, attribute, values)``: the op computes in float32 when the attribute takes a value.

    Parameters
    ----------
    target_dtype : {'float16', 'bfloat16'}, default 'float16'

    Returns
    -------
    list of (str, str, list of str)
        One triple per conditional entry of the list.
    """
    return [(op, attr, list(values)) for op, attr, values in load_policy(target_dtype).conditional]


def list_loss_output_functions(target_dtype: str = "float16") -> list[str]:
    """Output layers whose backward starts from a label (``mx.contrib.amp``'s training scales
    their gradient); from the lists' ``[loss_outputs]`` table.

    Parameters
    ----------
    target_dtype : {'float16', 'bfloat16'}, default 'float16'

    Returns
    -------
    list of str
        Op names, in the lists' order.
    """
    return list(load_policy(target_dtype).loss_outputs)


def list_lp16_use_fp32_params(target_dtype: str = "float16") -> dict[str, list[str]] | None:
    """Ops whose named inputs stay float32 when the op runs in ``target_dtype``, in
    ``mx.contrib.amp``'s format; from the lists' ``[fp32_params]`` table.

    Parameters
    ----------
    target_dtype : {'float16', 'bfloat16'}, default 'float16'

    Returns
    -------
    dict of str to list of str, or None
        For each op (its registered name), one entry per input in the op's order: the
        input's name where it stays float32, ``''`` where it takes the low precision dtype
        (``{'BatchNorm': ['', 'gamma', 'beta', 'moving_mean', 'moving_var'], ...}``). None
        for float16, as ``mx.contrib.amp`` answers.
    """
    table = load_policy(target_dtype).fp32_params
    if table is None:
        return None
    return {op: [name if name in keep else "" for name in op_input_names(op)]
            for op, keep in table.items()}


# mx.contrib.amp's training API: not provided, see README "Scope"
_TRAINING_API = frozenset({"init", "init_trainer", "scale_loss", "unscale"})


def __getattr__(name: str) -> NoReturn:
    """Say why ``amp.init()`` and the rest of contrib's training API are missing."""
    if name in _TRAINING_API:
        raise AttributeError(
            f"mxnet_amp has no {name!r}: it converts trained float32 models for inference; "
            "mx.contrib.amp's training API (init, init_trainer, scale_loss, unscale) is not "
            "provided. Train with mx.contrib.amp (or in float32), then convert the model")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
