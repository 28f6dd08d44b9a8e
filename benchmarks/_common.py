"""Shared pieces of the benchmark scripts: model builders, cast counting, timing, output.

Every figure a script reports is measured in that run; nothing here holds a result.
Timings are interleaved (ours, contrib, ours, contrib, ...) in one process so machine noise
hits both sides alike, and summarised as medians.
"""
from __future__ import annotations

import json
import os
import platform
import re
import statistics
import sys
import tempfile
import time
import traceback
import warnings
from typing import Any, Callable, Mapping, Sequence

import numpy as np

# the scripts run as `python benchmarks/x.py` from the repository root
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

os.environ.setdefault("MXNET_STORAGE_FALLBACK_LOG_VERBOSE", "0")
warnings.filterwarnings("ignore")

from mxnet_amp.ir.graph import CAST_OPS  # noqa: E402  (after the sys.path line above)
DETECTION_SIZE = 256  # input side used to build (shape-infer) detection nets


# ---------------------------------------------------------------------------- models

def zoo_net(name: str, image_size: int | None = None, calibrate: bool = False):
    """A gluoncv zoo model with random weights, as a user holds it: built with
    ``pretrained=False`` (and ``pretrained_base=False`` where the constructor takes it),
    initialised, hybridized (plainly, ``hybridize()``) and run once.

    ``calibrate``: BatchNorm running statistics set to what a random batch gives each
    layer (tools/zoo_sweep.py), as training leaves them, instead of identity.
    """
    import mxnet as mx
    from gluoncv.model_zoo import get_model
    if image_size is None:
        image_size = zoo_input_size(name)
    try:
        net = get_model(name, pretrained=False, pretrained_base=False)
    except (TypeError, Warning):  # gluoncv raises a Warning for kwargs a net does not take
        net = get_model(name, pretrained=False)
    net.initialize()
    net.hybridize()
    net(mx.nd.zeros((1, 3, image_size, image_size)))
    if calibrate:
        load_tool("zoo_sweep").calibrate_batchnorm(net, (1, 3, image_size, image_size))
        net(mx.nd.zeros((1, 3, image_size, image_size)))
    return net


def block_checkpoint(net):
    """``(sym, arg_params, aux_params)`` of a hybridized block that ran: its ``export()``
    loaded back, as a user's checkpoint is."""
    import mxnet as mx
    with tempfile.TemporaryDirectory() as d:
        prefix = os.path.join(d, "model")
        net.export(prefix)
        return mx.model.load_checkpoint(prefix, 0)


def imported_block(sym, arg_params, aux_params, input_names=("data",)):
    """A ``SymbolBlock`` of the model as a user loads a checkpoint: written by
    :func:`mxnet_amp.mx.io.save_checkpoint` (casts kept), read by ``SymbolBlock.imports``
    (each param keeps its saved dtype). Not hybridized."""
    import mxnet as mx
    from mxnet_amp.mx.io import save_checkpoint
    from mxnet_amp.files.paths import checkpoint_files
    with tempfile.TemporaryDirectory() as d:
        prefix = os.path.join(d, "model")
        save_checkpoint(prefix, 0, sym, arg_params, aux_params)
        sym_file, params_file = checkpoint_files(prefix, 0)
        return mx.gluon.SymbolBlock.imports(sym_file, list(input_names), params_file, ctx=mx.cpu())


def zoo_checkpoint(name: str, image_size: int | None = None, calibrate: bool = False):
    """``(sym, arg_params, aux_params)`` of a gluoncv zoo model with random weights
    (:func:`zoo_net`), exported and loaded back as a user's checkpoint is."""
    return block_checkpoint(zoo_net(name, image_size, calibrate))


def load_tool(name: str):
    """The tool ``tools/<name>.py`` or package ``tools/<name>/``: loaded as the tests load it
    (tests/support/helpers.py, beside the shared trainers benchmarks also use)."""
    support = os.path.join(_ROOT, "tests", "support")
    if support not in sys.path:
        sys.path.insert(0, support)
    from helpers import load_tool as load
    return load(name)


def zoo_input_size(name: str) -> int:
    """The input side a zoo model is built and run at."""
    if any(k in name for k in ("ssd", "yolo", "center_net", "rcnn")):
        return DETECTION_SIZE
    if "inception" in name:
        return 299
    return 224


def bert_encoder(num_layers: int = 4, units: int = 256, heads: int = 4, seq_len: int = 128,
                 vocab: int = 8000, ffn: int | None = None):
    """A BERT-style encoder (token embedding, position embedding, post-LN transformer layers
    with GELU) as ``(sym, arg_params, aux_params)`` with random weights.

    Input ``data``: token ids, shape ``(batch, seq_len)`` float32 (MXNet's Embedding takes
    float ids).
    """
    import mxnet as mx
    ffn = ffn or 4 * units
    sym_ = mx.sym
    data = sym_.var("data")
    x = sym_.Embedding(data, input_dim=vocab, output_dim=units, name="word_embed")
    pos = sym_.var("pos_embed_weight", shape=(1, seq_len, units))
    x = sym_.broadcast_add(x, pos, name="add_pos")
    x = sym_.LayerNorm(x, axis=-1, name="embed_ln")
    head_dim = units // heads
    for i in range(num_layers):
        p = f"layer{i}_"
        qkv = sym_.FullyConnected(x, num_hidden=3 * units, flatten=False, name=p + "qkv")
        # (B, L, 3, H, D) -> three (B*H, L, D)
        qkv = sym_.reshape(qkv, shape=(0, 0, 3, heads, head_dim))
        q, k, v = (sym_.reshape(sym_.transpose(sym_.squeeze(sym_.slice_axis(qkv, axis=2, begin=j, end=j + 1), axis=2),
                                               axes=(0, 2, 1, 3)), shape=(-3, 0, 0))
                   for j in range(3))
        scores = sym_.batch_dot(q, k, transpose_b=True, name=p + "scores") / float(np.sqrt(head_dim))
        attn = sym_.softmax(scores, axis=-1, name=p + "softmax")
        ctx = sym_.batch_dot(attn, v, name=p + "context")
        ctx = sym_.reshape(ctx, shape=(-4, -1, heads, 0, 0))
        ctx = sym_.reshape(sym_.transpose(ctx, axes=(0, 2, 1, 3)), shape=(0, 0, -3))
        out = sym_.FullyConnected(ctx, num_hidden=units, flatten=False, name=p + "proj")
        x = sym_.LayerNorm(sym_.elemwise_add(out, x), axis=-1, name=p + "ln1")
        h = sym_.FullyConnected(x, num_hidden=ffn, flatten=False, name=p + "ffn1")
        h = sym_.LeakyReLU(h, act_type="gelu", name=p + "gelu")
        h = sym_.FullyConnected(h, num_hidden=units, flatten=False, name=p + "ffn2")
        x = sym_.LayerNorm(sym_.elemwise_add(h, x), axis=-1, name=p + "ln2")
    pooled = sym_.FullyConnected(sym_.slice_axis(x, axis=1, begin=0, end=1), num_hidden=units,
                                 name="pooler")
    out = sym_.FullyConnected(sym_.Activation(pooled, act_type="tanh"), num_hidden=2, name="classifier")
    shapes, _, aux_shapes = out.infer_shape(data=(1, seq_len))
    rng = np.random.default_rng(0)
    arg_params = {}
    for name, shape in zip(out.list_arguments(), shapes):
        if name == "data":
            continue
        if name.endswith("gamma"):
            value = np.ones(shape)
        elif name.endswith(("beta", "bias")):
            value = np.zeros(shape)
        else:
            value = rng.normal(0, 0.02, shape)
        arg_params[name] = mx.nd.array(value, dtype="float32")
    aux_params = {n: mx.nd.zeros(s) for n, s in zip(out.list_auxiliary_states(), aux_shapes)}
    return out, arg_params, aux_params


# ---------------------------------------------------------------------------- converters

def convert_ours(sym, arg_params, aux_params, **kw):
    """``mxnet_amp.convert_model``, the drop-in public API."""
    import mxnet_amp
    return mxnet_amp.convert_model(sym, arg_params, aux_params, **kw)


def convert_contrib(sym, arg_params, aux_params, **kw):
    """``mx.contrib.amp.convert_model``; it rebinds entries of the dicts it is given, so it
    gets shallow copies (the arrays themselves are not modified)."""
    from mxnet.contrib import amp
    return amp.convert_model(sym, dict(arg_params), dict(aux_params), **kw)


CONVERTERS: Mapping[str, Callable] = {"ours": convert_ours, "contrib": convert_contrib}


def error_text(err: BaseException) -> str:
    """The exception's type and meaningful line (:func:`mxnet_amp.errors.error_text`), for a
    result file."""
    from mxnet_amp.errors import error_text as meaningful_line
    return f"{type(err).__name__}: {meaningful_line(err, 300)}"


def try_convert(which: str, sym, arg_params, aux_params, **kw) -> dict:
    """Run one converter; ``{'ok': True, 'sym':…, 'args':…, 'auxs':…}`` or ``{'ok': False,
    'error': text}`` (a failure is a result, not a crash)."""
    try:
        s, a, x = CONVERTERS[which](sym, arg_params, aux_params, **kw)
    except Exception as err:  # noqa: BLE001 - any converter failure is recorded
        return {"ok": False, "error": error_text(err)}
    return {"ok": True, "sym": s, "args": a, "auxs": x}


# ---------------------------------------------------------------------------- measures

def symbol_nodes(sym) -> list[dict]:
    """The JSON node list of ``sym`` with amp casts kept."""
    return json.loads(sym.tojson(remove_amp_cast=False))["nodes"]


def cast_counts(sym) -> dict:
    """How many ``amp_cast`` and ``amp_multicast`` nodes ``sym`` holds."""
    nodes = symbol_nodes(sym)
    return {"amp_cast": sum(n["op"] == "amp_cast" for n in nodes),
            "amp_multicast": sum(n["op"] == "amp_multicast" for n in nodes)}


def param_bytes(*param_dicts) -> dict:
    """Bytes of params by dtype, and the total / low precision sums."""
    from mxnet_amp.ir.dtypes import dtype_name, np_dtype
    by_dtype: dict[str, int] = {}
    for params in param_dicts:
        for value in params.values():
            name = dtype_name(value.dtype)
            by_dtype[name] = by_dtype.get(name, 0) + int(np.prod(value.shape)) * np_dtype(name).itemsize
    return {"by_dtype": by_dtype, "total": sum(by_dtype.values()),
            "low_precision": by_dtype.get("float16", 0) + by_dtype.get("bfloat16", 0)}


def num_nodes(sym) -> int:
    return len(symbol_nodes(sym))


def median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs))


def interleaved_times(fns: Mapping[str, Callable[[], Any]], repeats: int,
                      warmup: int = 1, inner: int = 1) -> dict[str, list[float]]:
    """Wall time of each callable, ``repeats`` times, in interleaved rounds; each timing
    covers ``inner`` calls back to back.

    The order inside a round rotates, so neither side always runs first (caches, turbo).
    """
    names = list(fns)
    for _ in range(warmup):
        for n in names:
            fns[n]()
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(repeats):
        order = names[r % len(names):] + names[:r % len(names)]
        for n in order:
            t0 = time.perf_counter()
            for _ in range(inner):
                fns[n]()
            times[n].append(time.perf_counter() - t0)
    return times


def paired_ratio(num: Sequence[float], den: Sequence[float]) -> float:
    """Median over rounds of ``num[i] / den[i]`` (both measured in the same round)."""
    return median([a / b for a, b in zip(num, den)])


# ---------------------------------------------------------------------------- output

def environment() -> dict:
    """What the numbers were measured on."""
    import mxnet as mx
    from mxnet_amp.mx.hardware import bf16_runs_natively
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
    except OSError:
        text = ""
    model = next((ln.split(":", 1)[1].strip() for ln in text.splitlines()
                  if ln.startswith("model name")), "")
    flags = set(next((ln.split(":", 1)[1].split() for ln in text.splitlines()
                      if ln.startswith("flags")), []))
    return {
        "mxnet": mx.__version__, "python": platform.python_version(),
        "cpu": model, "cpu_count": os.cpu_count(),
        "avx512f": " avx512f" in text, "avx512_bf16": "avx512_bf16" in text,
        "bf16_runs_natively": bf16_runs_natively(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "cpu_flags": sorted(f for f in flags if f.startswith(("avx512", "amx", "avx2", "fma", "f16c"))),
        "env": {k: v for k, v in sorted(os.environ.items())
                if k.startswith(("MXNET_", "OMP_", "KMP_", "DNNL_", "MKLDNN_"))},
        "loadavg": os.getloadavg(),
        "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


NOT_NATIVE = "no-native-bf16"


def _records_native(path: str, section: str | None = None) -> bool:
    """Whether the file at ``path`` (a result JSON, or a docs page; ``section``: only the
    text between its ``section`` markers) was measured where bfloat16 runs natively."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return False
    if path.endswith(".json"):
        try:
            data = json.loads(text)
        except ValueError:
            return False
        env = data.get("environment") if isinstance(data, dict) else None
        return bool(isinstance(env, dict) and env.get("bf16_runs_natively")
                    or isinstance(data, dict) and data.get("bf16_runs_natively"))
    if section is not None:
        start, end = f"<!-- {section}:start -->", f"<!-- {section}:end -->"
        if start in text and end in text:
            text = text[text.index(start):text.index(end)]
    return re.search(r"natively(?:=|: |\*\*: )\**True", text) is not None


def kept_beside(path: str, section: str | None = None) -> str:
    """Where a run's file goes: ``path``, unless this CPU does not run bfloat16 natively and
    the file there was measured on one that does; then beside it (``NAME.no-native-bf16.EXT``),
    said on stderr: a run that could not measure never replaces one that did."""
    from mxnet_amp.mx.hardware import bf16_runs_natively
    if not os.path.exists(path) or bf16_runs_natively() or not _records_native(path, section):
        return path
    stem, ext = os.path.splitext(path)
    beside = f"{stem}.{section + '.' if section else ''}{NOT_NATIVE}{ext}"
    print(f"{os.path.relpath(path)} was measured on a CPU that runs bfloat16 natively and this "
          f"one does not: this run goes beside it, to {os.path.relpath(beside)}", file=sys.stderr)
    return beside


def write_json(path: str, payload: dict) -> None:
    """Write ``payload`` (plus the command line) as JSON, atomically; beside ``path`` when
    the file there was measured natively and this run cannot be (:func:`kept_beside`)."""
    from mxnet_amp.files.atomic import atomic_write
    path = kept_beside(path)
    payload = {"command": "python " + " ".join(sys.argv), **payload}
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    text = json.dumps(payload, indent=1, sort_keys=False, default=str)

    def write(tmp):
        with open(tmp, "w") as f:
            f.write(text + "\n")
    atomic_write(path, write)


def append_row(path: str, row: dict) -> None:
    """Print ``row`` as one JSON line and append it to the JSON-lines file ``path`` (a long
    run keeps every finished row, whatever stops it later)."""
    line = json.dumps(row)
    print(line, flush=True)
    with open(path, "a") as f:
        f.write(line + "\n")


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A plain text table on stdout."""
    cells = [[_fmt(c) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h)
              for i, h in enumerate(headers)]
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths)))
    print("  ".join("-" * w for w in widths))
    for r in cells:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))
    sys.stdout.flush()


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        if value == 0 or 1e-3 <= abs(value) < 1e5:
            return f"{value:.3g}" if abs(value) < 10 else f"{value:.1f}"
        return f"{value:.3e}"
    return "-" if value is None else str(value)


def default_out(script: str, quick: bool) -> str:
    """``benchmarks/results/<script>.json`` (``<script>_quick.json`` for --quick)."""
    base = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
    return os.path.join(base, f"{script}{'_quick' if quick else ''}.json")


def format_exc() -> str:
    return traceback.format_exc(limit=3)


def write_between_markers(doc: str, name: str, body: str) -> None:
    """Replace what lies between ``<!-- NAME:start -->`` and ``<!-- NAME:end -->`` in the
    file ``doc`` with ``body`` (a rendered benchmark table); a section measured natively
    that this CPU cannot measure stays, and ``body`` goes to a file beside the page."""
    beside = kept_beside(doc, name)
    if beside != doc:
        with open(beside, "w", encoding="utf-8") as f:
            f.write(body + "\n")
        return
    with open(doc) as f:
        text = f.read()
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    i, j = text.index(start) + len(start), text.index(end)
    with open(doc, "w") as f:
        f.write(text[:i] + "\n" + body + "\n" + text[j:])
