"""mxnet_amp.gluon.model (gluon/model): a Gluon block read as a symbol and params, and exported."""
import mxnet as mx
import numpy as np
import pytest
from mxnet.gluon import nn

from mxnet_amp.gluon.model import block_graph, block_model, export_block
from mxnet_amp.errors import ArgumentError, DeferredInitError, GraphError


def _net(hybridized_run: bool = True):
    net = nn.HybridSequential(prefix="net_")
    with net.name_scope():
        net.add(nn.Dense(4, in_units=3), nn.Dense(2, in_units=4))
    net.initialize(mx.init.Xavier())
    if hybridized_run:
        net.hybridize()
        net(mx.nd.ones((1, 3)))
    return net


def test_block_model_gives_the_symbol_and_the_blocks_own_arrays():
    """The symbol reads 'data'; the params are the block's arrays themselves (not copies)."""
    net = _net()
    sym, args, auxs, names = block_model(net)
    assert names == ["data"] and auxs == {}
    assert sorted(args) == sorted(p.name for p in net.collect_params().values())
    first = next(iter(net.collect_params().values()))
    assert args[first.name] is first.data()


def test_a_block_that_never_ran_is_traced_without_being_changed():
    """An un-hybridized block is traced on symbol variables; it stays un-hybridized."""
    net = _net(hybridized_run=False)
    names, sym, _, _ = block_graph(net, ["x"])
    assert names == ["x"] and "x" in sym.list_arguments()
    assert not net._cached_graph


def test_input_names_of_the_wrong_count_and_a_plain_block_are_refused():
    """Two names for one input is a GraphError; a plain Block an ArgumentError."""
    with pytest.raises(GraphError, match="give 2 name"):
        block_graph(_net(), ["a", "b"])
    with pytest.raises(ArgumentError, match="plain Block"):
        block_graph(nn.Block(), None)


def test_deferred_initialisation_is_named():
    """A Dense without in_units, never run: DeferredInitError saying to run a forward pass."""
    net = nn.HybridSequential()
    net.add(nn.Dense(2))
    net.initialize()
    with pytest.raises(DeferredInitError, match="forward pass"):
        block_model(net)


def test_export_block_writes_a_checkpoint_that_computes_the_same(tmp_path):
    """The exported pair loads with SymbolBlock.imports and gives the block's outputs."""
    net = _net()
    sym_file, params_file = export_block(net, str(tmp_path / "m"))
    back = mx.gluon.SymbolBlock.imports(sym_file, ["data"], params_file)
    x = mx.nd.array(np.random.default_rng(0).standard_normal((2, 3)))
    np.testing.assert_allclose(back(x).asnumpy(), net(x).asnumpy(), rtol=1e-6)
