"""Fixtures of the ported MXNet AMP tests: the locally built imagenet1k-resnet-18 checkpoint."""
from __future__ import annotations

import mxnet as mx
import pytest

from .resnet_symbol import imagenet_resnet, random_params


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "deliberate_difference(reason): the ported test asserts mxnet_amp's documented "
        "behaviour where it deliberately differs from mx.contrib.amp (the reason says how)")


@pytest.fixture(scope="session")
def resnet18_prefix(tmp_path_factory) -> str:
    """Prefix of an ``imagenet1k-resnet-18`` checkpoint (epoch 0) written by the Module API.

    Upstream downloads the trained checkpoint; this one has the same symbol and random
    weights (see :mod:`tests.upstream.resnet_symbol`).
    """
    sym = imagenet_resnet(18)
    args, auxs = random_params(sym)
    prefix = str(tmp_path_factory.mktemp("model") / "imagenet1k-resnet-18")
    mx.model.save_checkpoint(prefix, 0, sym, args, auxs)
    return prefix


@pytest.fixture
def resnet18(resnet18_prefix):
    """``(sym, arg_params, aux_params)`` freshly loaded, so no test sees another's arrays."""
    return mx.model.load_checkpoint(resnet18_prefix, 0)
