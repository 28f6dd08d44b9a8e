"""The immutable run configuration (mxnet_amp.auto.checks.config): frozen, its dicts
read-only views the search cannot change, and the check's words read from the settings."""
import dataclasses

import mxnet as mx
import numpy as np
import pytest

from mxnet_amp.auto import auto_settings
from mxnet_amp.auto.checks.config import RunConfig
from mxnet_amp.options import make_options


def config(**settings):
    args = {"fc_weight": mx.nd.ones((2, 3))}
    return RunConfig.of(sym=mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=2, name="fc"),
                        arg_params=args, aux_params={}, inputs={"data": mx.nd.ones((1, 3))},
                        ctx=mx.cpu(), options=make_options("float16"), data_names=["data"],
                        settings=auto_settings("float16", **settings), execution="emulated"), args


def test_the_configuration_is_frozen_and_its_dicts_read_only():
    c, args = config()
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.execution = "native"
    with pytest.raises(TypeError):
        c.arg_params["extra"] = mx.nd.ones(1)
    args["added_later"] = mx.nd.ones(1)          # the caller's dict, changed after: not seen
    assert "added_later" not in c.arg_params and c.data_names == ("data",)
    assert c.input_dtypes() == {"data": "float32"} and c.options.target_dtype == "float16"


def test_the_check_in_words_follows_the_settings():
    assert config()[0].criterion_words() == "tolerance 0.01"
    assert config(rtol=0.1)[0].criterion_words().startswith("allclose rtol 0.1")
    c = config(validate=lambda ref, out: bool(np.isfinite(out[0]).all()))[0]
    assert c.criterion_words() == "the caller's validate()" and c.accuracy_reason == "accuracy"
    assert config(tolerance=0.2, max_executions=7)[0].settings.max_executions == 7
    # the options and settings are read where they live: no field forwarded beside them
    assert not {"target_dtype", "tolerance", "rtol", "atol", "validate", "max_executions",
                "search"} & set(dir(RunConfig))
