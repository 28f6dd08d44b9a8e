"""Timed kernel choice (``tune=``): each low precision node kept only where it is faster, as
timed on the machine that converts.

A static rule (``[[slow_kernel]]``) is a snapshot of one CPU: bf16 Deconvolution was 0.34-0.85x
of the fp32 time on a Xeon with AMX and slower than fp32 on an AMD EPYC. With ``tune`` every
distinct kernel the policy would run in the target dtype (op, attributes, input shapes) is
timed here in float32 and in bfloat16 through MXNet's default bind (oneDNN's fused path), as
a node inside a chain of bf16 nodes runs it: the bf16 kernel alone (bf16 in, bf16 out), the
float32 kernel with the cast from bf16 before it and the cast back after it, which keeping it
float32 there adds. (Version 1 put the casts on the bf16 side, as if its neighbours were
float32: they dominated small and depthwise convolutions, kept most of mobilenetv2 in float32
and the model 1.4-2.3x slower. Version 2 timed both kernels alone: the casts a float32 choice
adds went unseen, and on a loaded machine the whole-model check below dropped the choices on
6 of 10 models.) A node whose bf16 kernel is slower than that stays float32,
its report reason the two times (``tuned: bfloat16 1.80 ms vs float32 1.10 ms``): it joins
:attr:`~mxnet_amp.options.ConvertOptions.fp32_nodes` (:func:`with_timings`). The others run
in bf16, a ``[[slow_kernel]]`` rule notwithstanding: the timed nodes are the options'
``timed_nodes``, which the rule skips (the timings replace it). That choice is a step before
the conversion that returns options (:func:`tune_policy`: it converts nothing). After the
conversion, the whole model is timed converted without and with these choices
(:func:`check_tuned_model`); if the tuned one is slower by more than the timing noise
(:data:`MODEL_NOISE`, 2%), the untuned choices stand (both times are in the record).

Timings are cached in a JSON file per machine (CPU model, ISA flags, ``DNNL_MAX_CPU_ISA``,
MXNet version, thread count), which a user may ship with a model. bfloat16 only: MXNet has
no float16 CPU kernels, so float16 cannot be timed on a CPU (:class:`~mxnet_amp.errors.TuneError`).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from ..errors import TuneError, error_text
from ..ir.dtypes import MX_CODE, np_dtype
from ..ir.graph import Entry, Graph, GraphBuilder, Node
from ..mx.hardware import native_note
from ..mx.io import graph_to_symbol
from ..policy import Category, Decision, Reason
from .cache import TimingCache, machine_key
from .tuning import KernelCase, KernelTimer, Tuning

if TYPE_CHECKING:   # mxnet itself is imported where it runs
    from mxnet.symbol import Symbol

    from ..options import ConvertOptions

__all__ = ["KernelTiming", "TuneRecord", "MXNetTimer", "target_nodes", "kernel_cases",
           "node_input_shapes", "case_graph", "case_input_dtypes", "tuned_decisions", "tune_policy", "check_tuned_model",
           "with_timings", "TUNED_PREFIX", "MODEL_NOISE"]

TUNED_PREFIX = "tuned: "
# the whole-model check drops the timed choices only when the tuned model is slower by more
# than this share: two timings of the same bf16 work on two quiet cores differ by up to 2-3%
# (the per-path table's same graph through two static paths), and a choice such as one FC
# in fp32 (0.52 against 0.58 ms, timed) moves a 155 ms model by less than that: dropped on
# noise, it kept a kernel timed slower in bf16 (benchmarks.md, issue 34)
MODEL_NOISE = 0.02


@dataclass(frozen=True)
class KernelTiming:
    """Seconds per call of one :class:`KernelCase` in float32 and in the target dtype."""

    case: KernelCase
    fp32_s: float
    low_s: float
    cached: bool = False

    @property
    def low_is_faster(self) -> bool:
        return self.low_s <= self.fp32_s

    def reason(self, target_dtype: str) -> str:
        """The report's reason for the nodes running this kernel (both times)."""
        return (f"{TUNED_PREFIX}{target_dtype} {1e3 * self.low_s:.3g} ms vs float32 "
                f"{1e3 * self.fp32_s:.3g} ms with its casts ({self.case.describe()}"
                + (", cached)" if self.cached else ")"))


@dataclass(frozen=True)
class TuneRecord:
    """What tuning measured and chose (:attr:`mxnet_amp.record.Conversion.tuning`)."""

    machine: str
    timings: tuple[tuple[tuple[str, ...], KernelTiming], ...]   # (node names, timing)
    decisions: Mapping[str, Decision]          # the timed answer of each node
    untuned_model_s: float | None = None
    tuned_model_s: float | None = None
    applied: bool = True                       # False: the untuned choices stood
    cache: str | None = None

    @property
    def kept_fp32(self) -> list[str]:
        return sorted(n for n, d in self.decisions.items() if d.category is Category.FP32)

    def to_dict(self) -> dict:
        """A JSON-ready dict (times in ms)."""
        return {"machine": self.machine, "cache": self.cache, "applied": self.applied,
                "untuned_model_ms": None if self.untuned_model_s is None else 1e3 * self.untuned_model_s,
                "tuned_model_ms": None if self.tuned_model_s is None else 1e3 * self.tuned_model_s,
                "kernels": [{"nodes": list(names), "kernel": t.case.describe(),
                             "fp32_ms": 1e3 * t.fp32_s, "low_ms": 1e3 * t.low_s, "cached": t.cached,
                             "kept": "low precision" if t.low_is_faster else "float32"}
                            for names, t in self.timings],
                "kept_fp32": self.kept_fp32}


def _timer(tuning: Tuning) -> KernelTimer:
    """The timer ``tuning`` asks for: its own, else an :class:`MXNetTimer`."""
    return tuning.timer if tuning.timer is not None else MXNetTimer(tuning.rounds)


# --- what to time --------------------------------------------------------------------------

def node_input_shapes(graph: Graph, nodes: Sequence[int],
                      data_shapes: Mapping[str, Sequence[int]]) -> dict[int, tuple[tuple[int, ...], ...]]:
    """The shape of each input of each node of ``graph`` indexed by ``nodes`` (one MXNet shape
    inference of the graph with those inputs as its outputs)."""
    wanted = sorted({e[:2] for i in nodes for e in graph.nodes[i].inputs})
    if not wanted:
        return {}
    # the model's own outputs too: a weight is known only through a reader of it
    probe = Graph(graph.nodes, tuple(Entry(n, k) for n, k in wanted) + graph.heads, graph.attrs)
    try:
        _, out_shapes, _ = graph_to_symbol(probe).infer_shape(
            **{k: tuple(v) for k, v in data_shapes.items()})
    except Exception as err:  # noqa: BLE001 - MXNet's own error, named below
        raise TuneError(f"tune: MXNet cannot infer the model's shapes from data_shapes "
                        f"{dict(data_shapes)}: {error_text(err)}") from None
    if out_shapes is None:
        raise TuneError(f"tune: data_shapes {dict(data_shapes)} do not give every shape of the "
                        "model; name each input's full shape")
    known = {entry: tuple(int(d) for d in shape) for entry, shape in zip(wanted, out_shapes)}
    return {i: tuple(known[e[:2]] for e in graph.nodes[i].inputs) for i in nodes}


def target_nodes(graph: Graph, options: ConvertOptions) -> list[int]:
    """The nodes of a target op (what the policy runs in low precision, or keeps in float32
    by a ``[[slow_kernel]]`` rule) that the caller did not exclude."""
    return [i for i, node in enumerate(graph.nodes)
            if not node.is_variable and node.name not in options.excluded and not node.subgraphs
            and options.policy.category_of(node.op) is Category.TARGET]


def kernel_cases(graph: Graph, nodes: Sequence[int], shapes: Mapping[int, tuple],
                 params: Mapping[str, Any]) -> dict[KernelCase, list[str]]:
    """Each distinct kernel among ``nodes`` (:func:`target_nodes`), and the nodes running it."""
    cases: dict[KernelCase, list[str]] = {}
    for i in nodes:
        node = graph.nodes[i]
        inputs = []
        for e, shape in zip(node.inputs, shapes.get(i, ())):
            src = graph.nodes[e.node]
            if not shape:
                break
            inputs.append(("param" if src.is_variable and src.name in params else "data", shape))
        else:
            case = KernelCase(node.op, tuple(sorted(node.attrs.items())), tuple(inputs))
            cases.setdefault(case, []).append(node.name)
    return cases


def case_graph(case: KernelCase, dtype: str, chain_dtype: str | None = None) -> Graph:
    """A one-op graph of ``case`` computing in ``dtype`` as a node inside a chain of
    ``chain_dtype`` nodes runs it (default ``dtype``): its params in ``dtype``, its data
    inputs in ``chain_dtype``, cast to ``dtype`` before it and its output cast back after
    it where the two differ. So the low precision kernel is timed alone (a bf16 node between
    bf16 nodes has no cast) and the float32 one with the two casts that keeping it float32
    there adds."""
    chain = chain_dtype or dtype
    held_by_name = case_input_dtypes(case, dtype, chain_dtype)
    b = GraphBuilder()
    args = []
    for k, (kind, _) in enumerate(case.inputs):
        held = held_by_name[f"{kind}{k}"]
        attrs = {"__dtype__": _code(held)} if held != "float32" else {}
        arg = Entry(b.add(Node("null", f"{kind}{k}", attrs=MappingProxyType(attrs))))
        if held != dtype:
            arg = Entry(b.add(Node("amp_cast", f"cast{k}", (arg,), MappingProxyType({"dtype": dtype}))))
        args.append(arg)
    out = Entry(b.add(Node(case.op, "op", tuple(args), MappingProxyType(dict(case.attrs)))))
    if chain != dtype:
        out = Entry(b.add(Node("amp_cast", "cast_out", (out,), MappingProxyType({"dtype": chain}))))
    return b.build([out])


def case_input_dtypes(case: KernelCase, dtype: str, chain_dtype: str | None = None) -> dict[str, str]:
    """The dtype of each input variable of :func:`case_graph` (by name)."""
    chain = chain_dtype or dtype
    return {f"{kind}{k}": dtype if kind == "param" else chain for k, (kind, _) in enumerate(case.inputs)}


def _code(dtype: str) -> str:
    return str(MX_CODE[dtype])


class MXNetTimer:
    """Times kernels and models through ``simple_bind`` (MXNet's default bind: oneDNN's
    subgraph fusion applies), float32 and low precision interleaved round by round."""

    def __init__(self, rounds: int = 5, min_round_s: float = 0.02) -> None:
        self.rounds, self.min_round_s = rounds, min_round_s

    def kernel(self, case: KernelCase, target_dtype: str) -> tuple[float, float]:
        """``(float32 s, target dtype s)`` per call of ``case`` (:class:`KernelTimer`): the
        float32 kernel with the casts from and to the target dtype around it, the target
        dtype kernel alone (:func:`case_graph`)."""
        import mxnet as mx
        import numpy as np

        rng = np.random.default_rng(0)
        runs = []
        for dtype in ("float32", target_dtype):
            # float32 as it would run between low precision nodes: with its two casts
            sym = graph_to_symbol(case_graph(case, dtype, target_dtype))
            shapes = {f"{kind}{k}": s for k, (kind, s) in enumerate(case.inputs)}
            types = {k: np_dtype(d) for k, d in case_input_dtypes(case, dtype, target_dtype).items()}
            exe = sym.simple_bind(mx.cpu(), grad_req="null", type_dict=types, **shapes)
            for name, arr in exe.arg_dict.items():
                scale = 0.05 if name.startswith("param") else 1.0
                values = mx.nd.array(rng.uniform(-scale, scale, arr.shape), dtype="float32")
                values.astype(arr.dtype).copyto(arr)
            runs.append(exe)
        fp32, low = (lambda e=e: e.forward(is_train=False)[0].wait_to_read() for e in runs)
        return self._interleaved(fp32, low)

    def model(self, untuned: tuple[Symbol, dict, dict], tuned: tuple[Symbol, dict, dict],
              data_shapes: Mapping[str, tuple[int, ...]]) -> tuple[float, float]:
        """``(untuned s, tuned s)`` per batch of two converted models (:class:`KernelTimer`)."""
        import mxnet as mx
        import numpy as np
        rng = np.random.default_rng(0)
        data = {k: mx.nd.array(rng.uniform(-1, 1, s)) for k, s in data_shapes.items()}
        fns = []
        for sym, args, auxs in (untuned, tuned):
            exe = sym.simple_bind(mx.cpu(), grad_req="null", **{k: tuple(s) for k, s in data_shapes.items()})
            exe.copy_params_from(args, auxs, allow_extra_params=True)
            for k, v in data.items():
                v.copyto(exe.arg_dict[k])
            fns.append(lambda e=exe: e.forward(is_train=False)[0].wait_to_read())
        return self._interleaved(*fns)

    def _interleaved(self, a: Callable[[], object], b: Callable[[], object]) -> tuple[float, float]:
        a(), b()                               # warm-up: primitives created, weights reordered
        t0 = time.perf_counter()
        a()
        once = max(time.perf_counter() - t0, 1e-6)
        calls = max(1, min(50, int(self.min_round_s / once)))
        times: tuple[list[float], list[float]] = ([], [])
        for r in range(self.rounds):
            for k in ((0, 1) if r % 2 == 0 else (1, 0)):
                fn = (a, b)[k]
                t0 = time.perf_counter()
                for _ in range(calls):
                    fn()
                times[k].append((time.perf_counter() - t0) / calls)
        return float(sorted(times[0])[len(times[0]) // 2]), float(sorted(times[1])[len(times[1]) // 2])


# --- choosing ------------------------------------------------------------------------------

def tuned_decisions(cases: Mapping[KernelCase, Sequence[str]], tuning: Tuning, target_dtype: str,
                    machine: str) -> tuple[dict[str, Decision], list[tuple[tuple[str, ...], KernelTiming]]]:
    """Time each case (the cache first; new timings written back) and give each node its
    answer: the target dtype where it is no slower than float32, else float32."""
    cache = TimingCache(tuning.cache)
    timer = _timer(tuning)
    decisions: dict[str, Decision] = {}
    timings: list[tuple[tuple[str, ...], KernelTiming]] = []
    new = False
    for case, names in cases.items():
        hit = cache.get(machine, case.key(), target_dtype)
        if hit is None:
            try:
                fp32_s, low_s = timer.kernel(case, target_dtype)
            except Exception as err:  # noqa: BLE001 - a kernel that does not run stays fp32
                for name in names:
                    decisions[name] = Decision(Category.FP32, f"{TUNED_PREFIX}{target_dtype} "
                                               f"kernel failed to run here ({error_text(err, 200)})")
                continue
            cache.put(machine, case.key(), target_dtype, fp32_s, low_s)
            timing = KernelTiming(case, fp32_s, low_s)
            new = True
        else:
            timing = KernelTiming(case, hit[0], hit[1], cached=True)
        timings.append((tuple(names), timing))
        category = Category.TARGET if timing.low_is_faster else Category.FP32
        for name in names:
            decisions[name] = Decision(category, timing.reason(target_dtype))
    if new:
        cache.save()
    return decisions, timings


def tune_policy(graph: Graph, params: Mapping[str, Any], options: ConvertOptions,
                data_shapes: Mapping[str, Sequence[int]] | None) -> tuple[ConvertOptions, TuneRecord]:
    """The options to convert ``graph`` with after timing its kernels, and what was timed: a
    step before the conversion, which converts nothing (the whole-model check after the
    conversion is :func:`check_tuned_model`'s).

    ``graph`` is the float32 graph the conversion converts (BatchNorms folded where they
    will be), ``params`` its arg and aux params.

    Raises
    ------
    TuneError
        No data shapes (tuning times real shapes), shapes MXNet cannot infer, or a CPU that
        does not run bfloat16 natively (with the real timer).
    """
    tuning = options.tuning
    assert tuning is not None
    target = options.target_dtype
    if not data_shapes:
        raise TuneError("tune needs the model's input shapes (the kernels are timed at their "
                        "real sizes): pass data_shapes={'data': (batch, ...)} (convert_model, "
                        "convert_hybrid_block), --input-shape on the command line, or sample "
                        "inputs (auto_convert_model)")
    if tuning.timer is None:
        note = native_note(target)
        if note is not None:
            raise TuneError(f"tune times {target} kernels on this machine, and {note}")
    nodes = target_nodes(graph, options)
    cases = kernel_cases(graph, nodes, node_input_shapes(graph, nodes, data_shapes), params)
    machine = machine_key()
    decisions, timings = tuned_decisions(cases, tuning, target, machine)
    record = TuneRecord(machine, tuple(timings), MappingProxyType(decisions), cache=tuning.cache)
    return with_timings(replace(options, tuning=None), record), record


def check_tuned_model(record: TuneRecord, tuning: Tuning, untuned: tuple[Symbol, dict, dict],
                      tuned: tuple[Symbol, dict, dict], data_shapes: Mapping[str, Sequence[int]]) -> TuneRecord:
    """``record`` with the whole-model check: the model converted without and with the timed
    choices (each a symbol with its params cast), timed whole; the tuned choices stand
    (``applied``) unless that model is slower by more than :data:`MODEL_NOISE`. The same
    graph both ways: ``record`` as it is (nothing to compare)."""
    if untuned[0].tojson(remove_amp_cast=False) == tuned[0].tojson(remove_amp_cast=False):
        return record
    shaped = {k: tuple(v) for k, v in data_shapes.items()}
    before, after = _timer(tuning).model(untuned, tuned, shaped)
    return replace(record, untuned_model_s=before, tuned_model_s=after, applied=after <= before * (1 + MODEL_NOISE))


def with_timings(options: ConvertOptions, record: TuneRecord) -> ConvertOptions:
    """``options`` with the choices of ``record`` where they were applied: each node timed
    slower in low precision added to ``fp32_nodes`` with both times as its reason (under the
    reasons already there: the caller's exclusions stand), and every timed node one of
    ``timed_nodes``, which the ``[[slow_kernel]]`` rule leaves to its timing.

    Parameters
    ----------
    options : ConvertOptions
        Untuned options (``tuning`` None).
    record : TuneRecord
        What :func:`tune_policy` timed and chose.

    Returns
    -------
    ConvertOptions
        ``options`` itself where the untuned choices stood (``record.applied`` false).
    """
    if not record.applied:
        return options
    slower = {name: Reason(d.reason, "tune") for name, d in record.decisions.items()
              if d.category is Category.FP32}
    return replace(options.keeping({**slower, **options.fp32_nodes}),
                   timed_nodes=frozenset(record.decisions))
