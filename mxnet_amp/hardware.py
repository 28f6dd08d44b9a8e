"""What this machine can execute in low precision."""
from __future__ import annotations

from functools import lru_cache

__all__ = ["bf16_runs_natively", "fp16_runs_natively"]


@lru_cache(maxsize=None)
def bf16_runs_natively() -> bool:
    """True when MXNet runs a bf16 FullyConnected on the CPU.

    oneDNN implements bf16 matrix ops only on CPUs with avx512 (avx512_bf16 for speed);
    elsewhere MXNet fails with "could not create a primitive descriptor iterator".
    """
    import mxnet as mx
    from .dtypes import bfloat16_np
    try:
        x = mx.nd.ones((2, 8)).astype(bfloat16_np)
        w = mx.nd.ones((4, 8)).astype(bfloat16_np)
        y = mx.nd.FullyConnected(x, w, num_hidden=4, no_bias=True)
        return float(y.astype("float32").asnumpy()[0, 0]) == 8.0
    except mx.base.MXNetError:
        return False


@lru_cache(maxsize=None)
def fp16_runs_natively(ctx=None) -> bool:
    """True when a float16 FullyConnected runs on ``ctx`` (never on CPU in MXNet 1.9)."""
    import mxnet as mx
    ctx = ctx or mx.cpu()
    try:
        x = mx.nd.ones((2, 8), ctx=ctx, dtype="float16")
        y = mx.nd.FullyConnected(x, x[:1], num_hidden=1, no_bias=True)
        return float(y.asnumpy()[0, 0]) == 8.0
    except mx.base.MXNetError:
        return False
