"""Constants and small helpers shared by the zoo sweep's modules."""
from __future__ import annotations

TOLERANCE = 0.1  # max |lp - fp32| / max |fp32| per output (see the module doc)
DTYPES = ("float16", "bfloat16")
# auto mode's execution budget per failing model and dtype (bounds the sweep's time)
AUTO_MAX_EXECUTIONS = 24
# the converted graph without its casts against the fp32 model: float32 roundoff
STRUCTURE_TOL = 1e-4


def _first_line(err: BaseException) -> str:
    from mxnet_amp.errors import error_text
    return f"{type(err).__name__}: {error_text(err, 300)}"
