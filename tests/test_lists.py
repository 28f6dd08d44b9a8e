"""The op lists (lists/float16.toml, lists/bfloat16.toml) against the live MXNet registry.

Checked here: every registered op is classified exactly once per target dtype; every name a
list mentions is registered; index inputs and conditional attributes are real; reasons are
given; aliases of one operator agree; docs/ops.md is up to date; and the loader
(mxnet_amp.policy) reads the lists faithfully and applies user overrides correctly.
"""
from __future__ import annotations

import copy
import importlib.util
import re
import tomllib
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

# every pass these tests run is checked by verify_graph

ROOT = Path(__file__).resolve().parent.parent
LISTS = ROOT / "lists"
DTYPES = ("float16", "bfloat16")
CATEGORIES = ("target", "fp32", "widest", "follow")


# --------------------------------------------------------------------------- helpers
@lru_cache(maxsize=None)
def op_info() -> dict[str, dict]:
    """name -> {'real': canonical name, 'inputs': [...], 'params': {name: type string}}."""
    from mxnet_amp.mx.registry import mxnet_op_names, op_signature
    return {name: {"real": sig.name, "inputs": list(sig.inputs), "params": dict(sig.params)}
            for name, sig in ((n, op_signature(n)) for n in mxnet_op_names())}


def registry() -> set[str]:
    return set(op_info())


@lru_cache(maxsize=None)
def _load(dtype: str) -> dict:
    with open(LISTS / f"{dtype}.toml", "rb") as f:
        return tomllib.load(f)


def load(dtype: str) -> dict:
    return copy.deepcopy(_load(dtype))


def classification_problems(data: dict, names: set[str]) -> tuple[dict[str, str], list[str]]:
    """Classify ``names`` from a parsed list; return (op -> category, problems)."""
    seen: dict[str, str] = {}
    problems = []
    for k, group in enumerate(data.get("group", [])):
        for op in group["ops"]:
            if op in seen:
                problems.append(f"{op} is in two groups ({seen[op]} and group {k})")
            seen[op] = f"group {k}"
    cond_ops = {c["op"] for c in data.get("conditional", [])}
    for op in sorted(cond_ops & set(seen)):
        problems.append(f"{op} is in {seen[op]} and also conditional")
    category = {}
    for group in data.get("group", []):
        for op in group["ops"]:
            category[op] = group["category"]
    for op in cond_ops:
        category[op] = "conditional"
    for op in sorted(set(category) - names):
        problems.append(f"{op} is listed but not registered")
    for op in sorted(names - set(category)):
        for pat in data.get("pattern", []):
            if op.startswith(pat["prefix"]):
                category[op] = pat["category"]
                break
        else:
            problems.append(f"{op} is not classified")
    return category, problems


# --------------------------------------------------------------------------- the registry
def test_registry_is_enumerated():
    names = registry()
    # the ops the issue names explicitly as missing from mx.contrib.amp's lists
    for op in ("cumsum", "_contrib_box_decode", "_npi_matmul", "_npx_fully_connected"):
        assert op in names


# --------------------------------------------------------------------------- file format
@pytest.mark.parametrize("dtype", DTYPES)
def test_schema_and_reasons(dtype):
    data = load(dtype)
    assert data["schema"] == 1
    assert data["target_dtype"] == dtype
    assert set(data) <= {"schema", "target_dtype", "group", "conditional", "pattern", "index_inputs",
                         "reuse_casts", "loss_outputs", "fp32_params", "slow_kernel"}
    for key in ("loss_outputs", "fp32_params"):   # contrib's list functions read these
        if key in data:
            assert set(data[key]) == {"reason", "ops"} and data[key]["reason"].strip(), key
    for group in data["group"]:
        assert set(group) == {"category", "reason", "ops"}, group
        assert group["category"] in CATEGORIES, group["category"]
        assert group["reason"].strip(), f"group without a reason: {group['ops'][:3]}"
        assert group["ops"], f"empty group: {group['reason']}"
    for cond in data.get("conditional", []):
        assert set(cond) == {"op", "attr", "values", "reason"}, cond
        assert cond["values"] and all(isinstance(v, str) for v in cond["values"]), cond
        assert cond["reason"].strip(), cond
    for rule in data.get("slow_kernel", []):
        assert rule["reason"].strip() and rule["ops"], rule
    for pat in data.get("pattern", []):
        assert set(pat) == {"prefix", "category", "reason"}, pat
        assert pat["category"] in CATEGORIES, pat
        assert pat["reason"].strip(), pat


@pytest.mark.parametrize("dtype", DTYPES)
def test_reuse_casts_names_only_widest_joins(dtype):
    """[reuse_casts] may only name widest ops, and no arithmetic: a reused cast rounds a
    float32 operand before the op, harmless only where the op copies values."""
    data = load(dtype)
    table = data["reuse_casts"]
    assert table["reason"].strip() and table["ops"]
    category = {op: g["category"] for g in data["group"] for op in g["ops"]}
    assert {category.get(op) for op in table["ops"]} == {"widest"}
    real = {op: info["real"] for op, info in op_info().items()}
    assert not {real[op] for op in table["ops"]} & {"elemwise_add", "broadcast_add", "add_n", "elemwise_mul"}
    # aliases of one operator agree
    for op in table["ops"]:
        aliases = {o for o, r in real.items() if r == real[op] and category.get(o) == "widest"}
        assert aliases <= set(table["ops"]), (op, aliases - set(table["ops"]))


# --------------------------------------------------------------------------- classification
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_registry_op_classified_exactly_once(dtype):
    _, problems = classification_problems(load(dtype), registry())
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_named_op_is_registered(dtype):
    data = load(dtype)
    named = {op for g in data["group"] for op in g["ops"]}
    named |= {c["op"] for c in data.get("conditional", [])}
    named |= set(data.get("index_inputs", {}))
    named |= set(data.get("reuse_casts", {}).get("ops", ()))
    unknown = sorted(named - registry())
    assert not unknown, f"{dtype}.toml names ops MXNet does not register: {unknown}"


@pytest.mark.parametrize("dtype", DTYPES)
def test_patterns_cover_only_what_they_claim(dtype):
    data = load(dtype)
    listed = {op for g in data["group"] for op in g["ops"]} | {c["op"] for c in data.get("conditional", [])}
    prefixes = [p["prefix"] for p in data.get("pattern", [])]
    for prefix in prefixes:
        hits = {op for op in registry() if op.startswith(prefix)} - listed
        assert hits, f"pattern {prefix!r} classifies no registry op; remove it"
        others = [p for p in prefixes if p != prefix and (p.startswith(prefix) or prefix.startswith(p))]
        assert not others, f"overlapping patterns {prefix!r} and {others}: order would matter"
    # every optimizer update is explicit, not left to a rule
    updates = {op for op in registry() if op.endswith("_update")}
    assert updates and updates <= listed


@pytest.mark.parametrize("dtype", DTYPES)
def test_aliases_share_a_category(dtype):
    data = load(dtype)
    category, _ = classification_problems(data, registry())
    conds = {}
    for c in data.get("conditional", []):
        conds.setdefault(c["op"], set()).add((c["attr"], tuple(c["values"])))
    by_real: dict[str, set[str]] = {}
    for op, info in op_info().items():
        by_real.setdefault(info["real"], set()).add(op)
    bad = []
    for real, names in by_real.items():
        if len({category.get(n) for n in names}) > 1:
            bad.append(sorted((n, category.get(n)) for n in names))
        elif len({frozenset(conds.get(n, ())) for n in names}) > 1:
            bad.append(sorted(names))
    assert not bad, f"aliases of one operator classified differently: {bad}"


@pytest.mark.parametrize("dtype", DTYPES)
def test_conditional_attrs_are_real_params(dtype):
    for cond in load(dtype).get("conditional", []):
        params = op_info()[cond["op"]]["params"]
        assert cond["attr"] in params, f"{cond['op']} has no parameter {cond['attr']!r}"
        # enum parameters spell their choices as {'a', 'b', ...} in the type string
        choices = re.findall(r"'([^']*)'", params[cond["attr"]].split("}")[0])
        if choices:
            wrong = [v for v in cond["values"] if v not in choices]
            assert not wrong, f"{cond['op']}.{cond['attr']} has no value(s) {wrong}; choices {choices}"


@pytest.mark.parametrize("dtype", DTYPES)
def test_index_inputs_name_real_inputs(dtype):
    index_inputs = load(dtype).get("index_inputs", {})
    assert index_inputs
    for op, inputs in index_inputs.items():
        assert op in registry(), op
        real = op_info()[op]["inputs"]
        wrong = [i for i in inputs if i not in real]
        assert inputs and not wrong, f"{op} has no input(s) {wrong}; its inputs are {real}"


def test_index_inputs_agree_between_dtypes():
    assert load("float16").get("index_inputs") == load("bfloat16").get("index_inputs")


# ------------------------------------------------------------- the checker itself can fail
def _mutated(dtype, how):
    data = load(dtype)
    if how == "missing":
        data["group"][0]["ops"].pop(0)
    elif how == "duplicate":
        data["group"][-1]["ops"].append(data["group"][0]["ops"][0])
    elif how == "unknown":
        data["group"][0]["ops"].append("NoSuchOperator")
    elif how == "cond_and_group":
        data["conditional"].append({"op": data["group"][0]["ops"][0], "attr": "x", "values": ["y"],
                                    "reason": "r"})
    return data


@pytest.mark.parametrize("how", ["missing", "duplicate", "unknown", "cond_and_group"])
def test_checker_catches_broken_lists(how):
    _, problems = classification_problems(_mutated("float16", how), registry())
    assert problems


# --------------------------------------------------------------------------- principles
# Expectations taken from the issue text (not from running the code): matrix and
# convolution ops are target; numerically sensitive ops stay fp32; elementwise binary
# ops are widest; shape/index ops follow.
def _category(dtype, op):
    category, _ = classification_problems(load(dtype), registry())
    return category[op]


@pytest.mark.parametrize("op", ["Convolution", "Deconvolution", "FullyConnected", "batch_dot", "dot",
                                "_npi_matmul", "_npx_fully_connected", "RNN"])
def test_fp16_matrix_ops_are_target(op):
    assert _category("float16", op) == "target"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["softmax", "log_softmax", "SoftmaxOutput", "LayerNorm", "norm",
                                "CTCLoss", "cumsum", "_contrib_box_decode", "_contrib_box_nms",
                                "_contrib_ROIAlign", "argmax"])
def test_sensitive_ops_are_fp32(dtype, op):
    assert _category(dtype, op) == "fp32"


@pytest.mark.parametrize("op", ["exp", "log", "_npi_power", "sum", "mean", "erf", "gamma", "rsqrt"])
def test_fp16_range_sensitive_ops_are_fp32(op):
    assert _category("float16", op) == "fp32"


@pytest.mark.parametrize("op", ["elemwise_add", "broadcast_mul", "_npi_add", "broadcast_sub"])
def test_fp16_binary_arithmetic_is_widest(op):
    assert _category("float16", op) == "widest"


@pytest.mark.parametrize("op", ["elemwise_add", "_plus", "_Plus", "_add"])
def test_bf16_add_is_widest(op):
    # oneDNN runs elemwise_add in bfloat16 (rounding, fast): the residual add of a CNN stays low
    assert _category("bfloat16", op) == "widest"


@pytest.mark.parametrize("op", ["elemwise_mul", "broadcast_mul", "broadcast_add", "broadcast_sub",
                                "_npi_add", "_plus_scalar", "_div_scalar", "_mul_scalar"])
def test_bf16_generic_kernel_arithmetic_is_fp32(op):
    # MXNet's generic bfloat16 kernels truncate and are 10-29x slower than float32 (the list's
    # reason): hard-swish (x * clip(x + 3, 0, 6) / 6) and squeeze-excite products run in fp32
    assert _category("bfloat16", op) == "fp32"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["Reshape", "Flatten", "slice", "take", "_npx_reshape", "expand_dims",
                                "squeeze", "shape_array", "BatchNorm"])
def test_movement_and_index_ops_follow(dtype, op):
    assert _category(dtype, op) == "follow"


def test_every_npi_and_npx_op_is_classified_explicitly():
    # the numpy-interface ops are the gap in mx.contrib.amp's lists: no rule may cover them
    for dtype in DTYPES:
        data = load(dtype)
        listed = {op for g in data["group"] for op in g["ops"]} | {c["op"] for c in data["conditional"]}
        forward = {op for op in registry() if op.startswith(("_npi_", "_npx_", "_np_"))
                   and "backward" not in op}
        assert forward <= listed, sorted(forward - listed)[:10]


# --------------------------------------------------------------------------- bfloat16 kernels
class _SymbolAPI:
    """``mx`` with ``nd`` standing for ``mx.sym``: a sample's call builds its symbol."""

    def __init__(self, mx):
        self.nd = mx.sym


def _bf16_run(op_fn, mode: str):
    """Native: the op runs on a bfloat16 array and gives bfloat16. Emulated (a CPU whose
    oneDNN runs no bf16, where MXNet's bf16 Concat, say, has no kernel): MXNet's type and
    shape inference of the same call give a bfloat16 output of the float32 run's shape, and
    the float32 kernel runs on the bf16-rounded input (what the emulation computes)."""
    import mxnet as mx
    from mxnet_amp.ir.dtypes import bfloat16_np
    from mxnet_amp.emulation import round_numpy
    values = np.array([[0.5, 1.0, 1.5], [2.0, 2.5, 3.0]], "float32")
    if mode == "native":
        y = op_fn(mx, mx.nd.array(values).astype(bfloat16_np))
        assert y.dtype == bfloat16_np
        y.wait_to_read()
        return
    out = op_fn(_SymbolAPI(mx), mx.sym.var("x", dtype=bfloat16_np))
    _, [dtype], _ = out.infer_type()
    _, [shape], _ = out.infer_shape(x=values.shape)
    assert dtype == bfloat16_np, dtype
    y = op_fn(mx, mx.nd.array(round_numpy(values, "bfloat16"))).asnumpy()
    assert y.shape == tuple(shape) and np.isfinite(y).all()


BF16_FOLLOW_SAMPLES = {  # op name -> call; each must be follow/widest in bfloat16.toml and run
    "Reshape": lambda mx, x: mx.nd.reshape(x, shape=(3, 2)),
    "slice": lambda mx, x: mx.nd.slice(x, begin=(0, 0), end=(1, 2)),
    "Concat": lambda mx, x: mx.nd.concat(x, x, dim=1),
    "elemwise_add": lambda mx, x: x + x,
    "exp": lambda mx, x: mx.nd.exp(x),
    "sum": lambda mx, x: mx.nd.sum(x, axis=1),
    "SwapAxis": lambda mx, x: mx.nd.SwapAxis(x, dim1=0, dim2=1),
    "where": lambda mx, x: mx.nd.where(x > 1, x, x),
    "clip": lambda mx, x: mx.nd.clip(x, 0.6, 2.0),
}


@pytest.mark.parametrize("op", sorted(BF16_FOLLOW_SAMPLES))
def test_bf16_follow_samples_run_in_bf16(op, bf16_mode):
    assert _category("bfloat16", op) in ("follow", "widest")
    _bf16_run(BF16_FOLLOW_SAMPLES[op], bf16_mode)


def test_bf16_bilinear_resize_is_fp32_because_its_kernel_rounds_every_step(native_bf16):
    """MXNet's bfloat16 BilinearResize2D interpolates in bfloat16: natively 3-6x the error of
    the float32 interpolation of the same bfloat16 input rounded once (lists/bfloat16.toml)."""
    assert _category("bfloat16", "_contrib_BilinearResize2D") == "fp32"
    if not native_bf16:
        pytest.skip("this CPU cannot execute bf16 natively: the kernel's error is not measured")
    import mxnet as mx
    from mxnet_amp.ir.dtypes import bfloat16_np
    from mxnet_amp.emulation import round_numpy
    x = round_numpy(np.random.RandomState(0).randn(2, 16, 12, 12).astype("float32"), "bfloat16")
    exact = mx.nd.contrib.BilinearResize2D(mx.nd.array(x), height=37, width=37).asnumpy()
    native = mx.nd.contrib.BilinearResize2D(mx.nd.array(x).astype(bfloat16_np), height=37, width=37)
    native = native.astype("float32").asnumpy()
    scale = np.abs(exact).max()
    once = np.abs(round_numpy(exact, "bfloat16") - exact).max() / scale
    assert np.abs(native - exact).max() / scale > 2.5 * once


def _depthwise_net(channels: int):
    """data -> 1x1 conv to ``channels`` -> 3x3 depthwise conv -> 1x1 conv."""
    import mxnet as mx
    x = mx.sym.Convolution(mx.sym.var("data"), kernel=(1, 1), num_filter=channels, name="expand")
    x = mx.sym.Convolution(x, kernel=(3, 3), pad=(1, 1), num_filter=channels, num_group=channels,
                           name="dw")
    return mx.sym.Convolution(x, kernel=(1, 1), num_filter=16, name="project")


@pytest.mark.parametrize("channels, dw_dtype", [(72, "float32"), (24, "float32"), (96, "bfloat16"),
                                                (16, "bfloat16")])
def test_bf16_depthwise_conv_without_a_bf16_kernel_stays_fp32(channels, dw_dtype):
    """lists/bfloat16.toml [[slow_kernel]]: a depthwise convolution over a channel count that
    is not a multiple of 16 has no oneDNN bfloat16 kernel (the reference gemm runs, 13-18x
    the float32 time: benchmarks/depthwise_bf16.py) and stays float32; the convolutions
    around it, and depthwise ones over multiples of 16, are bfloat16."""
    from mxnet_amp.convert import convert_graph
    from mxnet_amp.mx.io import graph_from_symbol
    from mxnet_amp.options import OpLists, make_options
    graph = graph_from_symbol(_depthwise_net(channels))

    def dtypes(**overrides):
        result = convert_graph(graph, make_options("bfloat16", OpLists(**overrides))).result
        return tuple(result.node_dtypes[n] for n in ("expand", "dw", "project")), result

    got, result = dtypes()
    assert got == ("bfloat16", dw_dtype, "bfloat16")
    if dw_dtype == "float32":
        assert result.decisions["dw"].reason.startswith("slow kernel: depthwise Convolution")
    # the user's own list names Convolution: every convolution is then bfloat16, as in
    # contrib, whether the list moves it or replaces the target list
    assert dtypes(target_dtype_ops=["Convolution"], overrides="move")[0][1] == "bfloat16"
    assert dtypes(target_dtype_ops=["Convolution"])[0][1] == "bfloat16"


def test_bf16_slow_kernel_rule_decides_by_shape():
    p = policy.load_policy("bfloat16")

    def slow(op, attrs, q=p):
        return q.slow_kernel(op, attrs) is not None
    assert slow("Convolution", {"num_group": "72", "num_filter": "72"})
    assert slow("_npx_convolution", {"num_group": "200", "num_filter": "200"})
    assert not slow("Convolution", {"num_group": "96", "num_filter": "96"})
    # grouped but not depthwise, dense, no attributes: the target list decides
    assert not slow("Convolution", {"num_group": "8", "num_filter": "72"})
    assert not slow("Convolution", {"num_filter": "72"})
    assert not slow("Convolution", {})
    assert not slow("Convolution", {"num_group": "72", "num_filter": "72"}, policy.load_policy("float16"))
    # a rule on nodes: the op's answer is the target list's, the same for every shape
    assert p.explain("Convolution", {"num_group": "72", "num_filter": "72"}).category.value == "target"


@pytest.mark.parametrize("table, match", [
    ({"ops": ["Convolution"], "depthwise": True, "channels_not_multiple_of": 16}, "reason"),
    ({"ops": ["Convolution"], "reason": "r", "channels_not_multiple_of": 16}, "depthwise"),
    ({"ops": ["Convolution"], "reason": "r", "depthwise": True, "channels_not_multiple_of": 1},
     "integer"),
    ({"ops": ["Activation"], "reason": "r", "depthwise": True, "channels_not_multiple_of": 16},
     "Activation"),
])
def test_loader_rejects_malformed_slow_kernel(tmp_path, table, match):
    import shutil
    from mxnet_amp.errors import ListError
    folder = tmp_path / "lists"
    shutil.copytree(LISTS, folder)
    text = (folder / "bfloat16.toml").read_text()
    start = text.index("[[slow_kernel]]")
    end = text.index("\n\n", start)
    body = "\n".join(f"{k} = {_toml_value(v)}" for k, v in table.items())
    (folder / "bfloat16.toml").write_text(text[:start] + "[[slow_kernel]]\n" + body + text[end:])
    with pytest.raises(ListError, match=match):
        policy._base_policy.__wrapped__("bfloat16", str(folder))


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        return "[" + ", ".join(f'"{x}"' for x in v) + "]"
    return f'"{v}"' if isinstance(v, str) else str(v)


BF16_NO_KERNEL = {  # op name -> call; each must be fp32 in bfloat16.toml because it cannot run
    "Dropout": lambda mx, x: mx.nd.Dropout(x, p=0.5, mode="always"),
    "LayerNorm": lambda mx, x: mx.nd.LayerNorm(x, x[0], x[0]),
    "sort": lambda mx, x: mx.nd.sort(x),
    "Pad": lambda mx, x: mx.nd.pad(x.reshape((1, 1, 2, 3)), mode="constant",
                                   pad_width=(0, 0, 0, 0, 1, 1, 1, 1)),
}


@pytest.mark.parametrize("op", sorted(BF16_NO_KERNEL))
def test_bf16_ops_without_kernel_are_fp32(op):
    import mxnet as mx
    assert _category("bfloat16", op) == "fp32"
    with pytest.raises(mx.base.MXNetError):
        _bf16_run(BF16_NO_KERNEL[op], "native")


def test_bf16_accumulation_claims():
    # the bfloat16 list relies on these measured facts: sum accumulates in float32
    # (so it may follow), cumsum and norm accumulate in bfloat16 (so they stay fp32)
    import mxnet as mx
    from mxnet_amp.ir.dtypes import bfloat16_np
    ones = mx.nd.ones((1, 1000)).astype(bfloat16_np)  # 1000 is exact in bfloat16
    total = float(mx.nd.sum(ones, axis=1).astype("float32").asscalar())
    running = float(mx.nd.cumsum(ones, axis=1).astype("float32")[0, -1].asscalar())
    norm = float(mx.nd.norm(ones, axis=1).astype("float32").asscalar())
    assert total == 1000.0 and _category("bfloat16", "sum") == "follow"
    assert running < 1000.0 and _category("bfloat16", "cumsum") == "fp32"
    assert abs(norm - 1000 ** 0.5) > 1 and _category("bfloat16", "norm") == "fp32"


def test_bf16_onednn_ops_run_natively(native_bf16):
    if not native_bf16:
        pytest.skip("this CPU has no oneDNN bf16 (needs avx512)")
    for op, fn in {"FullyConnected": lambda mx, x: mx.nd.FullyConnected(x, x, num_hidden=2, no_bias=True),
                   "Activation": lambda mx, x: mx.nd.Activation(x, act_type="relu")}.items():
        assert _category("bfloat16", op) in ("target", "follow", "conditional")
        _bf16_run(fn, "native")


# --------------------------------------------------------------------------- generated docs
def _gen_module():
    spec = importlib.util.spec_from_file_location("gen_op_table", ROOT / "tools" / "gen_op_table.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_docs_ops_md_is_up_to_date():
    gen = _gen_module()
    expected = gen.render()
    current = (ROOT / "docs" / "ops.md").read_text()
    assert current == expected, "docs/ops.md is stale; run: python tools/gen_op_table.py"


def test_docs_table_has_every_op_for_both_dtypes():
    text = (ROOT / "docs" / "ops.md").read_text()
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| `([^`]+)` \|.*$", text, re.M)
            if m.group(0).count("|") == 7}
    assert set(rows) == registry()
    assert "python tools/gen_op_table.py" in text


def test_generator_rejects_unclassified_ops(tmp_path):
    gen = _gen_module()
    for dtype in DTYPES:
        data_text = (LISTS / f"{dtype}.toml").read_text()
        (tmp_path / f"{dtype}.toml").write_text(data_text)
    reg = {op: info["real"] for op, info in op_info().items()}
    reg["SomeNewOperator"] = "SomeNewOperator"
    with pytest.raises(ValueError, match="SomeNewOperator: not classified"):
        gen.render(reg, folder=tmp_path)


# --------------------------------------------------------------------------- the loader
policy = pytest.importorskip("mxnet_amp.policy_load")


def _base(dtype="float16"):
    return policy.load_policy(dtype, target_dtype_ops=None, fp32_ops=None, widest_dtype_ops=None,
                              conditional_fp32_ops=None)


@pytest.mark.parametrize("dtype", DTYPES)
def test_loader_agrees_with_lists(dtype):
    p = _base(dtype)
    category, _ = classification_problems(load(dtype), registry())
    sets = {"target": p.target, "fp32": p.fp32, "widest": p.widest, "follow": p.follow}
    for a in sets:
        for b in sets:
            if a < b:
                assert not sets[a] & sets[b], (a, b, sorted(sets[a] & sets[b])[:5])
    for op in registry():
        got = p.category_of(op)
        assert got is not None, op
        assert got.value == category[op], (op, got, category[op])
    assert {k: tuple(v) for k, v in load(dtype)["index_inputs"].items()} == dict(p.index_inputs)


def test_loader_conditional_resolution():
    p = _base("float16")
    cond = load("float16")["conditional"][0]
    assert p.decide(cond["op"], {cond["attr"]: cond["values"][0]}).value == "fp32"
    assert p.decide(cond["op"], {cond["attr"]: "__not_a_value__"}).value == "follow"


def test_override_unknown_ops_raise_and_list_them():
    from mxnet_amp.errors import UnknownOpError
    with pytest.raises(UnknownOpError) as err:
        policy.load_policy("float16", fp32_ops=["Convolution", "NoSuchOp", "AlsoMissing"])
    msg = str(err.value)
    assert "NoSuchOp" in msg and "AlsoMissing" in msg and "Convolution" not in err.value.names
    for kw in ("target_dtype_ops", "widest_dtype_ops", "follow_ops"):
        with pytest.raises(UnknownOpError, match="Nope"):
            policy.load_policy("bfloat16", **{kw: ["Nope"]})
    with pytest.raises(UnknownOpError, match="Nope"):
        policy.load_policy("float16", conditional_fp32_ops=[("Nope", "act_type", ["relu"])])


@pytest.mark.parametrize("dtype", DTYPES)
def test_override_moves_without_duplicating(dtype):
    base = _base(dtype)
    op = sorted(base.target)[0]
    p = policy.load_policy(dtype, fp32_ops=[op], overrides="move")
    assert op in p.fp32 and op not in p.target
    assert p.category_of(op).value == "fp32"
    # everything else is unchanged and still classified once
    sets = [p.target, p.fp32, p.widest, p.follow]
    assert sum(len(s) for s in sets) == len(set().union(*sets))
    assert set().union(*sets) == set().union(base.target, base.fp32, base.widest, base.follow)
    assert p.widest == base.widest and p.follow == base.follow
    # the shipped policy is not modified by an override
    assert op in _base(dtype).target


def test_override_follow_and_widest_moves():
    base = _base("float16")
    op = sorted(base.fp32)[0]
    p = policy.load_policy("float16", follow_ops=[op])
    assert op in p.follow and op not in p.fp32
    p = policy.load_policy("float16", widest_dtype_ops=[op], overrides="move")
    assert op in p.widest and op not in p.fp32 and op not in p.follow


def test_override_conditional_replaces_category():
    base = _base("float16")
    cond_op = base.conditional[0][0]
    p = policy.load_policy("float16", target_dtype_ops=[cond_op])
    assert p.category_of(cond_op).value == "target"
    assert all(c[0] != cond_op for c in p.conditional)
    # an op without registered attributes: any condition on it is taken as given
    from mxnet_amp.mx.registry import op_signature
    group_op = next(op for op in sorted(base.follow) if not op_signature(op).params)
    p = policy.load_policy("float16", conditional_fp32_ops=[(group_op, "x", ["y"])])
    assert group_op not in p.follow and p.category_of(group_op).value == "conditional"


def test_override_same_op_twice_is_an_error():
    from mxnet_amp.errors import ListError
    with pytest.raises(ListError, match="Convolution"):
        policy.load_policy("float16", fp32_ops=["Convolution"], target_dtype_ops=["Convolution"])
