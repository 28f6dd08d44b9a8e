"""mxnet_amp.gluon_block (gluon/block): the SymbolBlock a conversion returns, whose export
keeps the amp casts."""
import json

import mxnet as mx
import numpy as np
from mxnet.gluon import nn

import mxnet_amp
from mxnet_amp.gluon_block import AMPSymbolBlock


def _converted():
    net = nn.HybridSequential()
    net.add(nn.Dense(4, in_units=3), nn.Dense(2, in_units=4))
    net.initialize(mx.init.Xavier())
    net.hybridize()
    net(mx.nd.ones((1, 3)))
    return mxnet_amp.convert_hybrid_block(net, "bfloat16")


def test_the_converted_block_is_an_amp_symbol_block():
    """convert_hybrid_block returns this subclass of SymbolBlock."""
    block = _converted()
    assert isinstance(block, AMPSymbolBlock) and isinstance(block, mx.gluon.SymbolBlock)


def test_export_keeps_the_casts_and_remove_amp_cast_drops_them(tmp_path):
    """The default export keeps the data's amp_cast; remove_amp_cast=True writes MXNet's
    default, without it (MXNet keeps only a cast that is a graph output)."""
    block = _converted()
    block.export(str(tmp_path / "kept"))
    block.export(str(tmp_path / "dropped"), remove_amp_cast=True)
    kept = [n["op"] for n in json.loads((tmp_path / "kept-symbol.json").read_text())["nodes"]]
    dropped = [n["op"] for n in json.loads((tmp_path / "dropped-symbol.json").read_text())["nodes"]]
    assert kept[:2] == ["null", "amp_cast"] and dropped[:2] == ["null", "null"]
    assert kept.count("amp_cast") > dropped.count("amp_cast")


def test_hybridize_without_backend_keeps_the_default_backend():
    """hybridize() with no backend keeps default_backend; backend=None turns it off."""
    block = _converted()
    block.default_backend = "MKLDNN"
    block.hybridize()
    assert block._backend == "MKLDNN"
    block.hybridize(backend=None)
    assert not block._backend


def test_forward_runs_and_the_graph_is_the_converted_one(native_bf16):
    """After a run the cached graph is still the converted graph (casts kept), and outputs are finite."""
    block = _converted()
    if native_bf16:
        out = block(mx.nd.array(np.ones((2, 3))))
        assert np.isfinite(out.astype("float32").asnumpy()).all()
    assert "amp_cast" in block._cached_graph[1].tojson(remove_amp_cast=False)
