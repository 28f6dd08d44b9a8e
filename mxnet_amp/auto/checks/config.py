"""The immutable configuration of an automatic search's runs: the float32 model, the sample
inputs, where and how the converted models run, and how they are judged."""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Mapping

from ...ir.dtypes import dtype_name
from ...options import ConvertOptions
from ..metrics import MetricCheck
from ..records import AutoSettings

if TYPE_CHECKING:   # mxnet itself is imported where it runs
    from mxnet import Context
    from mxnet.symbol import Symbol

__all__ = ["RunConfig"]


@dataclass(frozen=True)
class RunConfig:
    """Everything the runs of one search read and none of them writes.

    Attributes
    ----------
    sym, arg_params, aux_params
        The float32 model (params as the caller's NDArrays, read-only views of the dicts).
    inputs : mapping of str to NDArray
        The sample inputs, on ``ctx``.
    ctx : Context
    options : ConvertOptions
        How each configuration converts (its ``fp32_nodes``: the caller's exclusions).
    data_names : tuple of str
    settings : AutoSettings
        The check's tolerances or ``validate``, the execution budget, the search.
    execution : {'native', 'emulated'}
    """

    sym: Symbol
    arg_params: Mapping[str, Any]
    aux_params: Mapping[str, Any]
    inputs: Mapping[str, Any]
    ctx: Context
    options: ConvertOptions
    data_names: tuple[str, ...]
    settings: AutoSettings
    execution: str

    @classmethod
    def of(cls, *, sym: Symbol, arg_params: Mapping, aux_params: Mapping, inputs: Mapping,
           ctx: Context, options: ConvertOptions, data_names: Any, settings: AutoSettings,
           execution: str) -> RunConfig:
        """The configuration, its dicts frozen (read-only views: nothing the search does
        can add to or drop from the caller's params)."""
        return cls(sym, MappingProxyType(dict(arg_params)), MappingProxyType(dict(aux_params)),
                   MappingProxyType(dict(inputs)), ctx, options, tuple(data_names), settings,
                   execution)

    @property
    def accuracy_reason(self) -> str:
        """The reason of a node kept because the check failed: ``'metric'`` under a user
        metric, else ``'accuracy'``."""
        return "metric" if isinstance(self.settings.validate, MetricCheck) else "accuracy"

    def criterion_words(self) -> str:
        """The check's bound in words ("tolerance 0.01", "rtol 0.01, atol 0.001", ...)."""
        if isinstance(self.settings.validate, MetricCheck):
            v = self.settings.validate
            return f"{v.name} drop allowed {v.max_drop:g} ({v.drop})"
        if self.settings.validate is not None:
            return "the caller's validate()"
        if self.settings.rtol is not None:
            return f"allclose rtol {self.settings.rtol:g}, atol {self.settings.atol:g}"
        return f"tolerance {self.settings.tolerance:g}"

    def params(self) -> dict[str, Any]:
        """The float32 params, arg and aux, in one new dict."""
        return {**self.arg_params, **self.aux_params}

    def input_dtypes(self) -> dict[str, str]:
        """The sample inputs' dtype names."""
        return {k: dtype_name(v.dtype) for k, v in self.inputs.items()}
