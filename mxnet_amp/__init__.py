"""mxnet-amp: automatic mixed precision (float16 / bfloat16) for Apache MXNet 1.9 models.

Drop-in for ``mx.contrib.amp`` callers::

    import mxnet_amp as amp
    sym, args, auxs = amp.convert_model(sym, args, auxs, target_dtype='bfloat16')
    net16 = amp.convert_hybrid_block(net, target_dtype='float16')
"""
from __future__ import annotations

from typing import Callable, NoReturn

from .auto import auto_convert_block, auto_convert_model
from .bucketing import convert_bucketing_module
from .checkpoint import convert_checkpoint
from .convert import convert_model, convert_symbol
from .emulation import emulate, emulate_model
from .errors import (AlreadyConvertedError, AMPError, CheckpointError, DeferredInitError,
                     GraphError, InputShapeError, ListError, OutputPathError, OverwriteError,
                     ParamError, TargetDtypeError, TypeInferenceError, UnknownOpError)
from .gluon import convert_block, convert_hybrid_block, emulate_block, export_block
from .io import load_checkpoint, save_checkpoint
from .policy import load_policy

__all__ = [
    "convert_symbol", "convert_model", "convert_hybrid_block", "convert_block",
    "convert_checkpoint", "convert_bucketing_module", "save_checkpoint", "load_checkpoint",
    "export_block",
    "emulate", "emulate_model", "emulate_block", "auto_convert_model", "auto_convert_block",
    "load_policy",
    "list_lp16_ops", "list_fp32_ops", "list_lp16_fp32_ops", "list_widest_type_cast",
    "list_conditional_fp32_ops",
    "AMPError", "AlreadyConvertedError", "CheckpointError", "DeferredInitError", "GraphError",
    "ListError", "ParamError", "TargetDtypeError", "TypeInferenceError", "UnknownOpError",
    "InputShapeError", "OutputPathError", "OverwriteError",
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


# mx.contrib.amp's training API (and the lists only it reads): not provided, see README "Scope"
_TRAINING_API = frozenset({"init", "init_trainer", "scale_loss", "unscale",
                           "list_loss_output_functions", "list_lp16_use_fp32_params"})


def __getattr__(name: str) -> NoReturn:
    """Say why ``amp.init()`` and the rest of contrib's training API are missing."""
    if name in _TRAINING_API:
        raise AttributeError(
            f"mxnet_amp has no {name!r}: it converts trained float32 models for inference; "
            "mx.contrib.amp's training API (init, init_trainer, scale_loss, unscale) is not "
            "provided. Train with mx.contrib.amp (or in float32), then convert the model")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
