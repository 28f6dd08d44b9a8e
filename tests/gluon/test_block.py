"""The converted Gluon block runs MXNet's fused oneDNN path by default (issue 25).

Speed itself is measured in benchmarks/cpu_inference.py (the bf16 block against the user's
fp32 block, side by side); these tests check what makes it fast, structurally: the block the
converter returns partitions into oneDNN's fused ``_sg_mkldnn_conv`` nodes at its first
forward pass, keeps that backend when hybridized again, still runs other batch sizes, and
exports the converted graph (casts kept, nothing fused) that any MXNet loads.
"""
from __future__ import annotations

import json

import mxnet as mx
import numpy as np
import pytest
from mxnet.gluon import nn

from mxnet_amp.errors import BackendError
from mxnet_amp.gluon.adapter import convert_hybrid_block, emulate_block, low_precision_conv_batchnorms

FUSED_OP = "_sg_mkldnn_conv"
BF16_REL_TOL = 0.05

needs_mkldnn = pytest.mark.skipif(not mx.runtime.Features().is_enabled("MKLDNN"),
                                  reason="this MXNet build has no oneDNN (MKLDNN) subgraph backend")


class Relu6(nn.HybridBlock):
    def hybrid_forward(self, F, x):
        return F.clip(x, 0, 6)


def mobilenet_style(seed: int = 0) -> nn.HybridSequential:
    """conv-BN-relu6, depthwise conv-BN-relu6, pointwise conv-BN, pool, dense; BatchNorm
    statistics and scales random (as trained), so folding them changes the weights."""
    net = nn.HybridSequential()
    net.add(nn.Conv2D(16, 3, padding=1, in_channels=3, use_bias=False), nn.BatchNorm(in_channels=16),
            Relu6(), nn.Conv2D(16, 3, padding=1, groups=16, in_channels=16, use_bias=False),
            nn.BatchNorm(in_channels=16), Relu6(), nn.Conv2D(32, 1, in_channels=16, use_bias=False),
            nn.BatchNorm(in_channels=32), nn.GlobalAvgPool2D(), nn.Dense(10, in_units=32))
    net.initialize(mx.init.Xavier())
    rng = np.random.default_rng(seed)
    array = mx.np.array if mx.util.is_np_array() else mx.nd.array
    for name, param in net.collect_params().items():
        if name.endswith(("running_mean", "beta")):
            param.set_data(array(rng.normal(0, 0.2, param.shape)))
        elif name.endswith(("running_var", "gamma")):
            param.set_data(array(rng.uniform(0.5, 1.5, param.shape)))
    net.hybridize()
    return net


def _x(batch: int) -> mx.nd.NDArray:
    return mx.nd.array(np.random.default_rng(batch).uniform(-1, 1, (batch, 3, 16, 16)))


def _ops(sym) -> set[str]:
    return {n["op"] for n in json.loads(sym.tojson(remove_amp_cast=False))["nodes"]}


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / np.abs(b).max())


@pytest.fixture
def native(native_bf16):
    if not native_bf16:
        pytest.skip("this CPU's oneDNN cannot run bfloat16 Convolution (needs avx512): the "
                    "fused bf16 path does not run here")


@needs_mkldnn
def test_returned_block_runs_fused_onednn_kernels(native):
    """The converted mobilenet-style block runs oneDNN's fused conv kernels (before issue 25
    it ran MXNet's generic bf16 kernels, slower than the fp32 source block)."""
    net = mobilenet_style()
    converted = convert_hybrid_block(net, target_dtype="bfloat16", fold_batchnorm=True)
    assert converted.default_backend == "MKLDNN"
    out = converted(_x(8)).asnumpy()
    assert FUSED_OP in _ops(converted.optimized_symbol)
    # the block's own graph stays the converted one: casts, no fused node
    assert FUSED_OP not in _ops(converted._cached_graph[1])
    assert "amp_cast" in _ops(converted._cached_graph[1])
    assert _rel(out, net(_x(8)).asnumpy()) < BF16_REL_TOL


@needs_mkldnn
def test_fused_block_runs_other_batch_sizes(native):
    """static_shape=True: a call with another batch size is re-planned, not refused."""
    net = mobilenet_style()
    converted = convert_hybrid_block(net, target_dtype="bfloat16", fold_batchnorm=True)
    for batch in (8, 3, 1, 8):
        got = converted(_x(batch))
        assert got.shape == (batch, 10)
        assert _rel(got.asnumpy(), net(_x(batch)).asnumpy()) < BF16_REL_TOL


@needs_mkldnn
def test_hybridize_again_keeps_the_backend_unless_told(native):
    net = mobilenet_style()
    converted = convert_hybrid_block(net, target_dtype="bfloat16", fold_batchnorm=True)
    converted(_x(2))
    converted.hybridize()                      # as a user would, without backend=
    converted(_x(2))
    assert FUSED_OP in _ops(converted.optimized_symbol)
    converted.hybridize(backend=None)          # asked for: MXNet's generic kernels
    converted(_x(2))
    assert converted.optimized_symbol is None
    converted.hybridize(static_alloc=True)     # the default backend again
    converted(_x(2))
    assert FUSED_OP in _ops(converted.optimized_symbol)


@needs_mkldnn
def test_export_after_fused_forward_loads_in_any_mxnet(native, tmp_path):
    """export() writes the converted graph (casts kept, nothing fused): SymbolBlock.imports
    and Module (load_checkpoint) give what the fused block gives."""
    net = mobilenet_style()
    converted = convert_hybrid_block(net, target_dtype="bfloat16", fold_batchnorm=True)
    x = _x(4)
    ours = converted(x).asnumpy()
    sym_file, params_file = converted.export(str(tmp_path / "net"))
    assert FUSED_OP not in _ops(mx.sym.load(sym_file)) and "amp_cast" in _ops(mx.sym.load(sym_file))
    imported = mx.gluon.SymbolBlock.imports(sym_file, ["data"], params_file)
    imported.hybridize(backend="MKLDNN", static_alloc=True, static_shape=True)
    np.testing.assert_allclose(imported(x).asnumpy(), ours, rtol=1e-6, atol=1e-6)
    sym, args, auxs = mx.model.load_checkpoint(str(tmp_path / "net"), 0)
    mod = mx.mod.Module(sym, data_names=["data"], label_names=None, context=mx.cpu())
    mod.bind(data_shapes=[("data", x.shape)], for_training=False)
    mod.set_params(args, auxs)
    mod.forward(mx.io.DataBatch([x]), is_train=False)
    np.testing.assert_allclose(mod.get_outputs()[0].asnumpy(), ours, rtol=1e-6, atol=1e-6)
    # MXNet's own export (casts stripped) finds its params after the fused forward too
    converted.export(str(tmp_path / "stripped"), remove_amp_cast=True)
    assert sorted(mx.nd.load(str(tmp_path / "stripped-0000.params"))) == \
        sorted(mx.nd.load(params_file))


@needs_mkldnn
def test_fused_block_converts_and_emulates_from_its_own_graph(native):
    """After a fused forward the block is still a graph mxnet-amp reads (emulate_block) and
    composes symbolically (a parent block's hybridize() traces it)."""
    net = mobilenet_style()
    converted = convert_hybrid_block(net, target_dtype="bfloat16", fold_batchnorm=True)
    x = _x(2)
    fused = converted(x).asnumpy()
    assert _rel(emulate_block(converted)(x).asnumpy(), fused) < BF16_REL_TOL
    parent = nn.HybridSequential()
    parent.add(converted)
    parent.hybridize()
    np.testing.assert_allclose(parent(x).asnumpy(), fused, rtol=0.02, atol=0.02)


@needs_mkldnn
def test_unfolded_batchnorm_after_low_precision_conv_stays_unfused():
    """oneDNN's fusion folds a BatchNorm into the conv's bf16 weights (rounding them twice):
    by default such a block keeps MXNet's generic kernels; asked for, it fuses anyway."""
    net = mobilenet_style()
    unfolded = convert_hybrid_block(net, target_dtype="bfloat16", fold_batchnorm=False)
    assert unfolded.default_backend is None and unfolded._backend is None
    asked = convert_hybrid_block(net, target_dtype="bfloat16", hybridize="MKLDNN")
    assert asked.default_backend == "MKLDNN"
    folded = convert_hybrid_block(net, target_dtype="bfloat16", fold_batchnorm=True)
    assert folded.default_backend == "MKLDNN"


def test_low_precision_conv_batchnorms_names_them():
    from mxnet_amp.convert import convert_model_full
    from mxnet_amp.options import OpLists, make_options
    data = mx.sym.var("data")
    conv = mx.sym.Convolution(data, num_filter=4, kernel=(3, 3), no_bias=True, name="conv")
    # a head BatchNorm is not folded (its output name would change): an activation follows
    sym = mx.sym.relu(mx.sym.BatchNorm(conv, fix_gamma=False, name="bn"))
    args = {"conv_weight": mx.nd.ones((4, 3, 3, 3)), "bn_gamma": mx.nd.ones(4), "bn_beta": mx.nd.zeros(4)}
    auxs = {"bn_moving_mean": mx.nd.zeros(4), "bn_moving_var": mx.nd.ones(4)}
    unfolded = make_options("bfloat16", fold_batchnorm=False)
    *_, conversion = convert_model_full(sym, args, auxs, unfolded)
    assert low_precision_conv_batchnorms(conversion) == ["bn"]
    *_, conversion = convert_model_full(sym, args, auxs, make_options("bfloat16", OpLists(fp32_ops=["Convolution"]), fold_batchnorm=False))
    assert low_precision_conv_batchnorms(conversion) == []
    *_, conversion = convert_model_full(sym, args, auxs, make_options("bfloat16", fold_batchnorm=True))
    assert low_precision_conv_batchnorms(conversion) == []


def test_hybridize_false_keeps_generic_kernels():
    net = nn.Dense(4, in_units=3)
    net.initialize()
    converted = convert_hybrid_block(net, target_dtype="bfloat16", hybridize=False)
    assert converted.default_backend is None and converted._backend is None


@pytest.mark.parametrize("value", ["NO_SUCH_BACKEND", 3, ["MKLDNN"]])
def test_bad_hybridize_value_is_a_typed_error(value):
    net = nn.Dense(4, in_units=3)
    net.initialize()
    with pytest.raises(BackendError, match="hybridize="):
        convert_hybrid_block(net, target_dtype="bfloat16", hybridize=value)


AMX_SCRIPT = """
import mxnet as mx
from mxnet.gluon import nn
from mxnet_amp import convert_hybrid_block
from mxnet_amp.mx.hardware import enable_amx
print("granted", enable_amx())
net = nn.Conv2D(32, 3, padding=1, in_channels=32, use_bias=False)
net.initialize(mx.init.One())
converted = convert_hybrid_block(net, target_dtype="bfloat16")
y = converted(mx.nd.ones((2, 32, 8, 8)))
print("centre", float(y.asnumpy()[0, 0, 4, 4]))
"""


def test_enable_amx_lets_onednn_run_bf16_convolution_on_amx(tmp_path):
    """MXNet 1.9.1's oneDNN uses AMX only with DNNL_MAX_CPU_ISA and Linux's AMX permission:
    enable_amx() gives both, and the converted block's bf16 convolution then runs oneDNN's
    AMX kernel, with the right result."""
    import os
    import subprocess
    import sys
    with open("/proc/cpuinfo") as f:
        if " amx_bf16" not in f.read():
            pytest.skip("this CPU has no AMX bf16 (Intel Sapphire Rapids and later)")
    env = {k: v for k, v in os.environ.items() if k != "DNNL_MAX_CPU_ISA"}
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env.update(DNNL_VERBOSE="1", PYTHONPATH=repo)
    proc = subprocess.run([sys.executable, "-c", AMX_SCRIPT], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "granted True" in proc.stdout
    assert "centre 288.0" in proc.stdout          # 32 channels x 3x3 ones, exact in bf16
    convs = [ln for ln in proc.stdout.splitlines() if ln.startswith("dnnl_verbose,exec,cpu,convolution")]
    assert convs and all("amx" in ln for ln in convs), convs
