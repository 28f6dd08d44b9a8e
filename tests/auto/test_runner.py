"""Where the automatic mode's checks run (mxnet_amp.auto.runner): natively where this machine
runs the dtype, emulated elsewhere."""
import mxnet as mx
import pytest

from mxnet_amp.auto import auto_convert_model

from auto_models import overflow_model

pytestmark = pytest.mark.filterwarnings("ignore:type inference leaves")


def test_bf16_uses_native_execution_only_where_it_runs(native_bf16):
    sym, args, x = overflow_model()
    *_, report = auto_convert_model(sym, args, {}, x, target_dtype="bfloat16", quiet=True)
    assert report.execution == ("native" if native_bf16 else "emulated")
    if not native_bf16:
        assert any("emulation" in n for n in report.notes)
    # 1.2e5 is nothing for bfloat16's range: nothing to exclude
    assert report.kept_fp32 == () and report.validated and report.executions == 2


def test_gpu_context_runs_fp16_natively():
    if mx.context.num_gpus() == 0:
        pytest.skip("no GPU: real fp16 execution needs one")
    sym, args, x = overflow_model()
    *_, report = auto_convert_model(sym, args, {}, x, ctx=mx.gpu(0), quiet=True)
    assert report.execution == "native"
    assert {k.name for k in report.kept_fp32} == {"fc_a", "fc_a2"} and report.validated
