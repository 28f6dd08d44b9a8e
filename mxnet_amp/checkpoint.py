"""Convert a checkpoint on disk with bounded memory.

``convert_model`` must leave the caller's param dicts alone, so it holds the fp32 and the
low precision copy of every recast weight at once. Here the params are ours: each weight is
recast and its fp32 original dropped before the next one, so peak memory stays near the
size of the fp32 params plus one weight.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, NamedTuple, Sequence

from .convert import convert_with_params
from .errors import FusionError, ParamError, StrippedCastsError
from .files.paths import check_outputs, checkpoint_files, refuse_stream_prefix
from .files.progress import byte_bar
from .ir.dtypes import LOW_PRECISION, array_dtype, array_nbytes
from .mx.arguments import check_bool, check_names, check_optional_bool, check_path, name_list
from .mx.fused import check_fused_for
from .mx.hardware import HardwareWarning, warn_not_native
from .mx.io import (existing_checkpoint_files, graph_from_symbol, load_checkpoint as read_checkpoint,
                    save_checkpoint)
from .mx.params import check_data_names, check_params, default_data_names, label_inputs, with_labels
from .options import ConvertOptions, OpLists, make_options
from .record import Conversion
from .shape_check.check import check_param_shapes
from .stripped_casts import restore_casts as restore_casts_of, stripped_dtype, stripped_message

if TYPE_CHECKING:
    from mxnet.symbol import Symbol

    from .ir.graph import Graph

__all__ = ["convert_checkpoint", "load_checkpoint", "restoring_load", "ConvertedCheckpoint", "LoadedCheckpoint"]


class ConvertedCheckpoint(NamedTuple):
    """What :func:`convert_checkpoint` returns (unpacks as ``(conversion, arg_params,
    aux_params, sizes)``): the conversion record, the new params, and
    ``{'param_bytes_before': int, 'param_bytes_after': int}``."""

    conversion: Conversion
    arg_params: dict
    aux_params: dict
    sizes: dict[str, int]


@dataclass(frozen=True)
class LoadedCheckpoint:
    """What :func:`restoring_load` returns: the checkpoint's files as read, and the
    conversion that restores a stripped model's casts (None for any other checkpoint)."""

    symbol: Symbol
    arg_params: dict
    aux_params: dict
    conversion: Conversion | None


def convert_checkpoint(prefix: str, epoch: int = 0, out_prefix: str | None = None,
                       out_epoch: int | None = None, *, target_dtype: str = "float16",
                       target_dtype_ops: Sequence[str] | None = None,
                       fp32_ops: Sequence[str] | None = None,
                       widest_dtype_ops: Sequence[str] | None = None,
                       conditional_fp32_ops: Sequence[tuple[str, str, Sequence[str]]] | None = None,
                       excluded_sym_names: Sequence[str] | None = None,
                       data_names: Sequence[str] | None = None,
                       cast_optional_params: bool = True,
                       fold_batchnorm: bool = True,
                       data_shapes: Mapping[str, Sequence[int]] | None = None,
                       write: bool = True, shapes_from: str = "data_shapes",
                       progress: bool | None = False, follow_ops: Sequence[str] | None = None,
                       overrides: str = "replace", strict_params: bool = False, guard_weight_range: bool = True,
                       fused_for: str | None = None
                       ) -> ConvertedCheckpoint:
    """Convert ``prefix-symbol.json`` + ``prefix-%04d.params`` and write the result.

    Parameters
    ----------
    prefix, epoch : str, int
        The fp32 checkpoint.
    out_prefix, out_epoch : str, int, optional
        Where to write (default ``prefix + '-amp'``, same epoch), atomically; an output that
        is an input file (same real path) is refused before anything is read.
    data_shapes, shapes_from : dict of str to tuple of int, str
        Shapes of the model inputs, for the check of the params' shapes (see
        :func:`mxnet_amp.convert_model`), and what shape errors call them.
    write : bool
        False converts and returns without writing (what ``mxnet-amp inspect`` does).
    progress : bool or None, default False
        Show byte progress bars (reading, converting, writing) on stderr; None shows them
        only when stderr is a terminal (what ``mxnet-amp`` does).
    fused_for : {None, 'cpu'}, default None
        ``'cpu'`` writes the graph already partitioned by MXNet's oneDNN backend (see
        :func:`mxnet_amp.save_checkpoint`; ``mxnet-amp convert --fuse-cpu``).
    Other parameters are those of :func:`mxnet_amp.convert_model`.

    Returns
    -------
    ConvertedCheckpoint
        The conversion record, the new arg and aux params, ``{'param_bytes_before': int,
        'param_bytes_after': int}``.

    Raises
    ------
    OverwriteError, OutputPathError
        An output file is one of the input files, or its folder is missing or not writable;
        nothing is written.
    CheckpointError, GraphError, ParamError
        As :func:`mxnet_amp.load_checkpoint` and :func:`mxnet_amp.convert_model`.
    """
    options = make_options(target_dtype, OpLists(target_dtype_ops, fp32_ops, widest_dtype_ops, conditional_fp32_ops,
                                                 follow_ops, excluded_sym_names, overrides),
                           cast_optional_params=cast_optional_params, fold_batchnorm=fold_batchnorm,
                           strict_params=strict_params, guard_weight_range=guard_weight_range)
    warn_not_native(options.target_dtype)   # said once, at the caller's line
    return checkpoint_conversion(prefix, epoch, out_prefix, out_epoch, options,
                                 data_names=data_names, data_shapes=data_shapes, write=write,
                                 shapes_from=shapes_from, progress=progress, fused_for=fused_for)


def checkpoint_conversion(prefix: str, epoch: int, out_prefix: str | None,
                          out_epoch: int | None, options: ConvertOptions, *,
                          data_names: Sequence[str] | None = None,
                          data_shapes: Mapping[str, Sequence[int]] | None = None,
                          write: bool = True, shapes_from: str = "data_shapes",
                          progress: bool | None = False, fused_for: str | None = None
                          ) -> ConvertedCheckpoint:
    """:func:`convert_checkpoint` under ``options`` (:func:`mxnet_amp.options.make_options`)."""
    prefix = str(check_path(prefix, "prefix"))
    out_prefix = check_path(out_prefix, "out_prefix", optional=True)
    write, progress = check_bool(write, "write"), check_optional_bool(progress, "progress")
    data_names = check_names(data_names, "data_names")
    if check_fused_for(fused_for) and options.policy.target_dtype == "float16":
        raise FusionError("fused_for='cpu' (--fuse-cpu) with target_dtype='float16': float16 "
                          "runs only on a GPU, where oneDNN's fused nodes have no kernel; "
                          "fuse a bfloat16 conversion")
    out_prefix = out_prefix or prefix + "-amp"
    out_epoch = epoch if out_epoch is None else out_epoch
    # a wrong input prefix is named as such, not as the missing folder of the output beside it
    sym_file, params_file = existing_checkpoint_files(prefix, epoch)
    if write:
        check_outputs(checkpoint_inputs(prefix, epoch),
                      checkpoint_outputs(out_prefix, out_epoch, what="out_epoch"))
    sym, arg_params, aux_params = read_checkpoint(prefix, epoch, progress=progress)
    graph = graph_from_symbol(sym)
    stored = {k: array_dtype(v) for k, v in {**arg_params, **aux_params}.items()}
    low = stripped_dtype(graph, sym, stored)
    if low is not None:   # not a float32 model: converting it again would be wrong
        raise StrippedCastsError(stripped_message(f"{sym_file}, {params_file}", stored, low)
                                 + "; to convert again, convert the original float32 model")
    data_names = _checked_data_names(sym, graph, arg_params, aux_params, data_names, data_shapes,
                                     shapes_from, sym_file, params_file, options.strict_params)
    try:
        done = convert_with_params(graph, arg_params, aux_params, options, data_names=data_names,
                                   data_shapes=data_shapes)
        conversion, arg_params, aux_params = done.conversion, done.arg_params, done.aux_params
    except ParamError as err:   # a param's own fault (an int32 weight): say which file holds it
        raise (_in_files(err, f"{params_file}: ") if err.param else err) from None
    del sym, graph
    sizes = _recast_in_place(arg_params, aux_params, conversion, progress)
    if write:
        with warnings.catch_warnings():   # the conversion said where it runs (warn_not_native)
            warnings.simplefilter("ignore", HardwareWarning)
            save_checkpoint(out_prefix, out_epoch, conversion.symbol,
                            arg_params, aux_params, progress=progress, fused_for=fused_for)
    return ConvertedCheckpoint(conversion, arg_params, aux_params, sizes)


def load_checkpoint(prefix: str, epoch: int = 0, *, restore_casts: bool = True,
                    progress: bool | None = False) -> tuple[Symbol, dict, dict]:
    """Load ``(sym, arg_params, aux_params)`` like ``mx.model.load_checkpoint``, with errors
    that name the file, and the amp casts of a converted model saved without them restored.

    ``mx.model.save_checkpoint``, ``HybridBlock.export`` and ``Symbol.save`` drop amp casts
    unless given ``remove_amp_cast=False``: a converted model saved so has float16/bfloat16
    weights and no casts, and MXNet cannot bind it ("This layer requires uniform type").
    Such a checkpoint is recognised (:mod:`mxnet_amp.stripped_casts`) and its casts put
    back: the symbol returned is the one the conversion produced, node for node, for a
    model converted with the default options (``excluded_sym_names`` and
    ``fold_batchnorm`` too). A model converted with ``cast_optional_params=False`` keeps
    float32 weights: saved without its casts it is the float32 model again, and loads as
    such (nothing in the files tells it apart).

    Parameters
    ----------
    prefix : str
        Reads ``prefix-symbol.json`` and ``prefix-%04d.params``.
    epoch : int, default 0
    restore_casts : bool, default True
        False: raise :class:`StrippedCastsError` for such a checkpoint instead.
    progress : bool or None, default False
        Show a bar of the bytes read on stderr (None: only when stderr is a terminal).

    Returns
    -------
    (Symbol, dict, dict)
        The symbol (casts kept, or restored) and the arg and aux params as stored.

    Raises
    ------
    StrippedCastsError
        A converted model saved without its casts, with ``restore_casts=False`` or whose
        casts cannot be restored exactly (converted with other op lists, say); the message
        says how to save it with its casts.
    CheckpointError
        A file is missing or not a readable params file.
    GraphError
        The symbol file is not a symbol MXNet can load.
    """
    restore_casts = check_bool(restore_casts, "restore_casts")
    progress = check_optional_bool(progress, "progress")
    loaded = restoring_load(prefix, epoch, restore_casts, progress)
    restored = loaded.conversion
    return (loaded.symbol if restored is None else restored.symbol), loaded.arg_params, loaded.aux_params


def restoring_load(prefix: str, epoch: int, restore_casts: bool = True,
                   progress: bool | None = False) -> LoadedCheckpoint:
    """:func:`load_checkpoint`'s files, and the conversion that restores a stripped
    model's casts (None for any other checkpoint): the CLI's ``inspect`` reports on it."""
    sym, arg_params, aux_params = read_checkpoint(prefix, epoch, progress=progress)
    stored = {k: array_dtype(v) for k, v in {**arg_params, **aux_params}.items()}
    if not LOW_PRECISION.intersection(stored.values()):   # a float32 model: no graph to read
        return LoadedCheckpoint(sym, arg_params, aux_params, None)
    graph = graph_from_symbol(sym)
    low = stripped_dtype(graph, sym, stored)
    if low is None:
        return LoadedCheckpoint(sym, arg_params, aux_params, None)
    where = ", ".join(checkpoint_files(prefix, epoch))
    if not restore_casts:
        raise StrippedCastsError(stripped_message(where, stored, low))
    return LoadedCheckpoint(sym, arg_params, aux_params, restore_casts_of(graph, stored, low, where))


def checkpoint_inputs(prefix: str, epoch: int) -> list[tuple[str, str]]:
    """The files of an input checkpoint, labelled for :func:`mxnet_amp.files.paths.check_outputs`."""
    sym_file, params_file = checkpoint_files(prefix, epoch)
    return [("input symbol file", sym_file), ("input params file", params_file)]


def checkpoint_outputs(prefix: str, epoch: int, what: str = "epoch") -> list[tuple[str, str]]:
    """The files of an output checkpoint, labelled for :func:`mxnet_amp.files.paths.check_outputs`;
    :class:`OutputPathError` for a prefix meaning standard output (``-``)."""
    refuse_stream_prefix(prefix)
    sym_file, params_file = checkpoint_files(prefix, epoch, what)
    return [("output symbol file", sym_file), ("output params file", params_file)]


def _checked_data_names(sym: Symbol, graph: Graph, arg_params: Mapping, aux_params: Mapping,
                        data_names: str | Sequence[str] | None,
                        data_shapes: Mapping[str, Sequence[int]] | None,
                        shapes_from: str, sym_file: str, params_file: str,
                        strict: bool) -> list[str]:
    """The model inputs, after checking the params fit the symbol (errors name the files)."""
    arg_names, aux_names = sym.list_arguments(), sym.list_auxiliary_states()
    names = name_list(data_names)
    if names is not None:   # the caller's mistake, not the files': said without them
        check_data_names(arg_names, arg_params, names)
        names = with_labels(names, label_inputs(graph), arg_params)
    try:
        if names is None:
            names = default_data_names(arg_names, arg_params, where=params_file)
        check_params(arg_names, aux_names, arg_params, aux_params, names, strict)
        check_param_shapes(sym, arg_params, aux_params, data_shapes, graph=graph,
                           shapes_from=shapes_from, input_names=arg_names + aux_names)
    except ParamError as err:
        where = (f"{params_file}: " if err.input_shapes
                 else f"{params_file} does not match {sym_file}: ")
        raise _in_files(err, where) from None
    return names


def _recast_in_place(arg_params: dict, aux_params: dict, conversion: Conversion,
                     progress: bool | None) -> dict[str, int]:
    """Cast each param to its converted dtype in place, one at a time; the byte counts."""
    sizes = {"param_bytes_before": 0, "param_bytes_after": 0}
    total = sum(array_nbytes(v) for params in (arg_params, aux_params) for v in params.values())
    with byte_bar("converting params", total, progress) as bar:
        def each(name: str, before: Any, after: Any) -> None:
            sizes["param_bytes_before"] += array_nbytes(before)
            sizes["param_bytes_after"] += array_nbytes(after)
            bar.update(array_nbytes(before))
        conversion.recast(arg_params, aux_params, in_place=True, each=each)
    return sizes


def _in_files(err: ParamError, where: str) -> ParamError:
    """``err`` with ``where`` in front of its message, its attributes kept."""
    return ParamError(where + str(err), param=err.param, found=err.found, expected=err.expected,
                      input_shapes=err.input_shapes)

