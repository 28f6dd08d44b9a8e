"""mxnet_amp.mx.optypes: single-op type inference asked of MXNet, cached."""
from types import MappingProxyType

import pytest

from mxnet_amp.errors import InferenceFailed
from mxnet_amp.ir.graph import Entry, Node
from mxnet_amp.mx.optypes import OpTypes


class _CountingTypes(OpTypes):
    """OpTypes that counts the questions that reach MXNet."""
    __slots__ = ("asked",)

    def __init__(self) -> None:
        super().__init__({})
        self.asked = 0

    def _probe(self, *args, **kwargs):
        self.asked += 1
        return super()._probe(*args, **kwargs)


def _fc() -> Node:
    return Node("FullyConnected", "fc", (Entry(0), Entry(1), Entry(2)),
                MappingProxyType({"num_hidden": "4"}))


def test_fully_connected_follows_its_data_dtype():
    """An fp16 input makes MXNet type the weight, bias and output fp16."""
    types = OpTypes({})
    ins, outs = types.infer(_fc(), ["float16", None, None], 1)
    assert ins == ("float16", "float16", "float16") and outs == ("float16",)


def test_batchnorm_keeps_float32_statistics_under_float16_data():
    """MXNet's own rule, not a guess: BatchNorm's gamma/beta stay fp32 for fp16 data."""
    bn = Node("BatchNorm", "bn", tuple(Entry(i) for i in range(5)), MappingProxyType({}))
    ins, outs = OpTypes({}).infer(bn, ["float16", None, None, None, None], 1)
    assert ins[0] == "float16" and ins[1] == "float32" and outs[0] == "float16"


def test_answers_are_cached_per_op_attributes_and_dtypes():
    """The second identical question is answered from the cache without asking MXNet."""
    types = _CountingTypes()
    types.infer(_fc(), ["float32", None, None], 1)
    types.infer(_fc(), ["float32", None, None], 1)
    assert types.asked == 1
    types.infer(_fc(), ["float16", None, None], 1)
    assert types.asked == 2


def test_a_rejected_combination_raises_and_is_cached_too():
    """Mixed dtypes MXNet rejects raise InferenceFailed, again from the cache the second time."""
    types = _CountingTypes()
    for _ in range(2):
        with pytest.raises(InferenceFailed):
            types.infer(_fc(), ["float16", "float32", None], 1)
    assert types.asked == 1
