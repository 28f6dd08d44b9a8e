"""The automatic mode's emulated checks read the conversion's record (graph, tensor dtypes,
stored param dtypes) instead of re-deriving it: no dtype inference in the emulation."""
import mxnet as mx
import numpy as np
import pytest

import mxnet_amp as amp
import mxnet_amp.mx.optypes as optypes
import mxnet_amp.passes.emulate as emulate_pass
from mxnet_amp.convert import convert_model_full
from mxnet_amp.emulation import emulate_conversion, emulate_model
from mxnet_amp.options import make_options

from helpers import init_params

pytestmark = pytest.mark.filterwarnings("ignore:type inference leaves")


def model():
    x = mx.sym.var("data")
    c = mx.sym.Convolution(x, num_filter=8, kernel=(3, 3), pad=(1, 1), name="conv")
    b = mx.sym.BatchNorm(c, name="bn")
    r = mx.sym.Activation(b, act_type="relu", name="relu")
    p = mx.sym.Pooling(r, kernel=(2, 2), stride=(2, 2), pool_type="avg", name="pool")
    y = mx.sym.FullyConnected(p * 0.5, num_hidden=4, name="fc")
    sym = mx.sym.softmax(y, name="out")
    args, auxs = init_params(sym, {"data": (2, 3, 8, 8)})
    return sym, args, auxs, mx.nd.array(np.random.RandomState(1).normal(size=(2, 3, 8, 8)))


def run(sym, args, auxs, x):
    exe = sym.bind(mx.cpu(), args={**args, "data": x}, aux_states=auxs, grad_req="null")
    return exe.forward(is_train=False)[0].asnumpy()


class Counting:
    """Counts MXNet type inference requests (OpTypes.infer: each single-op question, memo
    hits included) and whole-graph MXNet inference calls (registry.infer_types)."""

    def __init__(self, monkeypatch):
        self.op_questions = self.mxnet_calls = 0
        infer, infer_types = optypes.OpTypes.infer, optypes.infer_types

        def counted_infer(op_types, *a, **kw):
            self.op_questions += 1
            return infer(op_types, *a, **kw)

        def counted_infer_types(*a, **kw):
            self.mxnet_calls += 1
            return infer_types(*a, **kw)

        monkeypatch.setattr(optypes.OpTypes, "infer", counted_infer)
        monkeypatch.setattr(optypes, "infer_types", counted_infer_types)


@pytest.mark.parametrize("target_dtype", ["bfloat16", "float16"])
def test_emulating_a_conversion_infers_no_dtype_and_computes_the_same(monkeypatch, target_dtype):
    sym, args, auxs, x = model()
    new_sym, f32_args, f32_auxs, conversion = convert_model_full(
        sym, args, auxs, make_options(target_dtype), cast_params=False)
    stored = {**conversion.arg_dtypes, **conversion.aux_dtypes}
    count = Counting(monkeypatch)
    e_sym, e_args, e_auxs = emulate_conversion(conversion, f32_args, f32_auxs)
    assert (count.op_questions, count.mxnet_calls) == (0, 0)
    # the old path (symbol -> JSON -> graph, then every dtype inferred again) asks MXNet
    o_sym, o_args, o_auxs = emulate_model(new_sym, f32_args, f32_auxs, stored_dtypes=stored)
    assert count.op_questions > 0
    np.testing.assert_array_equal(run(e_sym, e_args, e_auxs, x), run(o_sym, o_args, o_auxs, x))


def test_auto_emulated_checks_never_infer_dtypes_again(monkeypatch):
    sym, args, auxs, x = model()

    def no_inference(*a, **kw):
        raise AssertionError("the emulation inferred dtypes the conversion already decided")

    monkeypatch.setattr(emulate_pass, "infer_dtypes", no_inference)
    _, _, _, report = amp.auto_convert_model(sym, args, auxs, {"data": x}, target_dtype="float16",
                                             execution="emulated", quiet=True)
    assert sum(1 for s in report.steps if s.kind != "reference") >= 1   # checks ran
