"""Convert a checkpoint on disk with bounded memory.

``convert_model`` must leave the caller's param dicts alone, so it holds the fp32 and the
low precision copy of every recast weight at once. Here the params are ours: each weight is
recast and its fp32 original dropped before the next one, so peak memory stays near the
size of the fp32 params plus one weight.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Sequence

from .convert import Conversion, convert_graph, fold_model
from .errors import CheckpointError, ParamError
from .io import graph_from_symbol, load_checkpoint, save_checkpoint
from .params import array_dtype, cast_array, check_params, default_data_names

__all__ = ["convert_checkpoint"]


def convert_checkpoint(prefix: str, epoch: int = 0, out_prefix: str | None = None,
                       out_epoch: int | None = None, *, target_dtype: str = "float16",
                       target_dtype_ops: Sequence[str] | None = None,
                       fp32_ops: Sequence[str] | None = None,
                       widest_dtype_ops: Sequence[str] | None = None,
                       conditional_fp32_ops=None,
                       excluded_sym_names: Sequence[str] | None = None,
                       data_names: Sequence[str] | None = None,
                       cast_optional_params: bool = True,
                       fold_batchnorm: bool = False,
                       write: bool = True):
    """Convert ``prefix-symbol.json`` + ``prefix-%04d.params`` and write the result.

    Parameters
    ----------
    prefix, epoch : str, int
        The fp32 checkpoint.
    out_prefix, out_epoch : str, int, optional
        Where to write (default ``prefix + '-amp'``, same epoch). Both files are written
        atomically; the input files are never touched.
    write : bool
        False converts and returns without writing (what ``mxnet-amp inspect`` does).
    Other parameters are those of :func:`mxnet_amp.convert_model`.

    Returns
    -------
    (Conversion, dict, dict, dict)
        The conversion record, the new arg and aux params, and
        ``{'param_bytes_before': int, 'param_bytes_after': int}``.
    """
    out_prefix = out_prefix or prefix + "-amp"
    out_epoch = epoch if out_epoch is None else out_epoch
    if write and os.path.abspath(out_prefix) == os.path.abspath(prefix) and out_epoch == epoch:
        raise CheckpointError(f"refusing to overwrite the input checkpoint {prefix!r}; "
                              "choose another out_prefix")
    sym, arg_params, aux_params = load_checkpoint(prefix, epoch)
    arg_names, aux_names = sym.list_arguments(), sym.list_auxiliary_states()
    params_file = f"{prefix}-{epoch:04d}.params"
    try:
        if data_names is None:
            data_names = default_data_names(arg_names, arg_params, where=params_file)
        check_params(arg_names, aux_names, arg_params, aux_params, data_names)
    except ParamError as err:
        raise ParamError(f"{params_file} does not match {prefix}-symbol.json: {err}") from None
    graph, folded = graph_from_symbol(sym), ()
    if fold_batchnorm:
        graph, arg_params, aux_params, folded = fold_model(graph, arg_params, aux_params,
                                                           excluded_sym_names)
    conversion: Conversion = convert_graph(
        graph, target_dtype=target_dtype, target_dtype_ops=target_dtype_ops,
        fp32_ops=fp32_ops, widest_dtype_ops=widest_dtype_ops,
        conditional_fp32_ops=conditional_fp32_ops, excluded_sym_names=excluded_sym_names,
        data_names=data_names, cast_optional_params=cast_optional_params,
        param_dtypes={k: array_dtype(v) for k, v in {**arg_params, **aux_params}.items()})
    if folded:
        conversion = dataclasses.replace(conversion, folded_batchnorms=folded)
    del sym, graph
    sizes = {"param_bytes_before": 0, "param_bytes_after": 0}
    for params, dtypes in ((arg_params, conversion.arg_dtypes), (aux_params, conversion.aux_dtypes)):
        for name in list(params):
            sizes["param_bytes_before"] += _nbytes(params[name])
            want = dtypes.get(name)
            if want is not None and array_dtype(params[name]) != want:
                # replacing the entry frees the fp32 original before the next weight is cast
                params[name] = cast_array(params[name], want)
            sizes["param_bytes_after"] += _nbytes(params[name])
    if write:
        save_checkpoint(out_prefix, out_epoch, conversion.symbol,
                        arg_params, aux_params)
    return conversion, arg_params, aux_params, sizes


def _nbytes(array) -> int:
    import numpy as np
    from .dtypes import np_dtype
    return int(np.prod(array.shape)) * np_dtype(array_dtype(array)).itemsize
