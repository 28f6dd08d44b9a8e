"""Port of MXNet 1.9.1's ``tests/python/gpu/test_contrib_amp.py`` (float16) to the CPU.

Upstream runs these on ``gpu(0)`` with ``mx.contrib.amp``; here they run against
``mxnet_amp`` on the CPU. MXNet cannot execute float16 on a CPU, so wherever upstream runs a
converted model forward, the structural assertions are kept (the graph, binding without a
``type_dict``, param dtypes) and the same converted model runs through
``mxnet_amp.emulate_model``, its output compared with float32. The downloaded
imagenet1k-resnet-18 checkpoint is rebuilt locally (same symbol, random weights).

Out of scope: upstream's training AMP (``amp.init``, ``scale_loss``, ``init_trainer``);
mxnet_amp converts models for inference only. Tests marked ``deliberate_difference``
assert mxnet_amp's documented behaviour where it differs from ``mx.contrib.amp`` on purpose.
"""
from __future__ import annotations

import pytest

from . import contrib_amp_checks as checks

DTYPE = "float16"


def test_amp_coverage():
    """``test_amp_coverage`` (float16 lists): disjoint, no duplicate, every op listed."""
    checks.check_amp_coverage(DTYPE)


@pytest.mark.deliberate_difference(reason="widest ops are unified with amp_multicast, not "
                                   "amp_cast of the narrower input (docs/lists.md)")
def test_amp_conversion_convert_symbol_structure():
    """``test_amp_conversion`` / ``check_amp_convert_symbol``: the hand-built graph."""
    checks.check_convert_symbol_structure(DTYPE)


@pytest.mark.deliberate_difference(reason="overrides move ops instead of replacing lists; "
                                   "conflicting overrides raise ListError, not AssertionError")
def test_amp_conversion_convert_symbol_overrides():
    """``test_amp_conversion`` / ``check_amp_convert_symbol``: incorrect override inputs."""
    checks.check_convert_symbol_overrides(DTYPE)


def test_amp_conversion_conditional_unsatisfied():
    """``test_amp_conversion`` / ``check_amp_convert_symbol``: condition not satisfied."""
    checks.check_conditional_unsatisfied(DTYPE)


@pytest.mark.deliberate_difference(reason="no amp_cast where the dtype does not change "
                                   "(upstream casts float32 inputs to float32)")
def test_amp_conversion_conditional_satisfied():
    """``test_amp_conversion`` / ``check_amp_convert_symbol``: condition satisfied."""
    checks.check_conditional_satisfied(DTYPE)


def test_amp_conversion_convert_symbol_resnet18(resnet18):
    """``test_amp_conversion`` / ``check_amp_convert_symbol``: real-world model."""
    checks.check_convert_symbol_resnet18(resnet18, DTYPE)


def test_amp_conversion_convert_model_resnet18(resnet18):
    """``test_amp_conversion`` / ``check_amp_convert_model``."""
    checks.check_convert_model_resnet18(resnet18, DTYPE)


@pytest.mark.deliberate_difference(reason="the converted block keeps the block's context "
                                   "(contrib defaults to gpu(0))")
def test_amp_conversion_convert_hybrid_block(resnet18_prefix):
    """``test_amp_conversion`` / ``check_amp_convert_hybrid_block``."""
    checks.check_convert_hybrid_block(resnet18_prefix, DTYPE)


def test_amp_conversion_rnn():
    """``test_amp_conversion_rnn``."""
    checks.check_conversion_rnn(DTYPE)


@pytest.mark.deliberate_difference(reason="weights are stored in low precision only with "
                                   "cast_optional_params=True (README, Params)")
def test_module_backward_compatibility():
    """``test_module_backward_compatibility``."""
    checks.check_module_backward_compatibility(DTYPE)


@pytest.mark.deliberate_difference(reason="a graph already holding amp casts is refused "
                                   "with AlreadyConvertedError (README, Differences)")
def test_fp16_casting():
    """``test_fp16_casting``."""
    checks.check_casting(DTYPE)


def test_amp_conversion_convert_bucketing_module():
    """``test_amp_conversion`` / ``check_amp_convert_bucketing_module``."""
    checks.check_convert_bucketing_module(DTYPE)
