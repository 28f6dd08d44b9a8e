"""Small float32 models with a planted low precision problem, shared by the automatic mode's
tests (tests/auto/): an overflowing branch, an underflowing one, a cancellation that only the
accuracy search finds, and a clean net."""
import mxnet as mx
import numpy as np

from mxnet_amp.auto import check_outputs
from mxnet_amp.emulation import emulate_model


def fc(x, name, n):
    """A FullyConnected of ``n`` units named ``name``."""
    return mx.sym.FullyConnected(x, num_hidden=n, name=name)


def nd(d):
    """numpy arrays as NDArrays, by name."""
    return {k: mx.nd.array(v) for k, v in d.items()}


def run(sym, args, auxs, x):
    """The first output of ``sym`` run in float32 on ``x`` (its only input, ``data``)."""
    exe = sym.bind(mx.cpu(), {**args, "data": mx.nd.array(x)}, aux_states=dict(auxs), grad_req="null")
    return exe.forward(is_train=False)[0].asnumpy()


def clean_branch(d, rng, args, prefix="b"):
    """fc -> relu -> fc on ``d`` with weights that no low precision dtype troubles; adds them to ``args``."""
    h = mx.sym.Activation(fc(d, f"fc_{prefix}", 8), act_type="relu", name=f"relu_{prefix}")
    args.update({f"fc_{prefix}_weight": rng.uniform(-1, 1, (8, 16)), f"fc_{prefix}_bias": np.zeros(8),
                 f"fc_{prefix}2_weight": rng.uniform(-1, 1, (4, 8)), f"fc_{prefix}2_bias": np.zeros(4)})
    return fc(h, f"fc_{prefix}2", 4)


def overflow_model(seed=0):
    """Branch a: fc_a's activations reach ~1.2e5 (beyond 65504), fc_a2 scales them back."""
    rng = np.random.RandomState(seed)
    d = mx.sym.var("data")
    args = {"fc_a_weight": rng.uniform(0.5, 1, (8, 16)) * 2e4, "fc_a_bias": np.zeros(8),
            "fc_a2_weight": rng.uniform(-1, 1, (4, 8)) * 1e-4, "fc_a2_bias": np.zeros(4)}
    a = fc(mx.sym.Activation(fc(d, "fc_a", 8), act_type="relu", name="relu_a"), "fc_a2", 4)
    out = mx.sym.elemwise_add(a, clean_branch(d, rng, args), name="add")
    return out, nd(args), rng.uniform(0, 1, (2, 16)).astype(np.float32)


def underflow_model(seed=0):
    """Branch u: fc_u's outputs are ~1e-9 (flushed to zero in fp16), then rescaled by 1e9."""
    rng = np.random.RandomState(seed)
    d = mx.sym.var("data")
    args = {"fc_u_weight": rng.uniform(0.5, 1, (4, 16)) * 1e-9, "fc_u_bias": np.zeros(4)}
    u = mx.sym._internal._mul_scalar(fc(d, "fc_u", 4), scalar=1e9, name="rescale")
    out = mx.sym.elemwise_add(u, clean_branch(d, rng, args), name="add")
    return out, nd(args), rng.uniform(0, 1, (2, 16)).astype(np.float32)


def cancellation_model(seed=0, depth=6):
    """fc_c outputs 2048 + ~0.05: float16's spacing at 2048 is 2, so subtracting 2048 loses
    everything. No tensor is out of range: only the accuracy search can find fc_c."""
    rng = np.random.RandomState(seed)
    d = mx.sym.var("data")
    args = {"fc_c_weight": rng.uniform(0, 0.01, (4, 16)), "fc_c_bias": np.full(4, 2048.0)}
    c = mx.sym._internal._minus_scalar(fc(d, "fc_c", 4), scalar=2048.0, name="shift")
    c = mx.sym._internal._mul_scalar(c, scalar=10.0, name="scale")
    h = d
    for i in range(depth):
        h = mx.sym.Activation(fc(h, f"fc{i}", 16), act_type="tanh", name=f"act{i}")
        args.update({f"fc{i}_weight": rng.uniform(-0.3, 0.3, (16, 16)), f"fc{i}_bias": np.zeros(16)})
    out = mx.sym.Concat(c, h, dim=1, name="cat")
    return out, nd(args), rng.uniform(0, 1, (2, 16)).astype(np.float32)


def clean_model(seed=0):
    """A clean branch alone: every node converts, nothing to keep in float32."""
    rng = np.random.RandomState(seed)
    args = {}
    out = clean_branch(mx.sym.var("data"), rng, args)
    return out, nd(args), rng.uniform(0, 1, (2, 16)).astype(np.float32)


def within_tolerance(report, sym, args, auxs, x, ref):
    """Whether the emulated converted model passes the check ``report`` used, against ``ref``."""
    out = run(*emulate_model(sym, args, auxs), x)
    return np.isfinite(out).all() and check_outputs([ref], [out], report.target_dtype,
                                                    report.tolerance).passed
