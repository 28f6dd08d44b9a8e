"""The timings ``tune=`` measured, per machine, in a JSON file a user may ship with a model.

A timing holds where the same kernels run: the CPU model, the ISA flags that pick oneDNN's
kernels, ``DNNL_MAX_CPU_ISA`` (AMX on or off), the MXNet version and the thread count make
the machine key (:func:`machine_key`).
"""
from __future__ import annotations

import json
import os

from ..errors import TuneError
from ..files.atomic import atomic_write
from ..mx.hardware import ISA_FLAGS, cpu_flags

__all__ = ["TimingCache", "machine_key", "CACHE_VERSION"]

# 3: the float32 kernel timed with the casts it adds between low precision nodes, the low
# precision kernel alone (2: both alone; 1: the low precision kernel with casts)
CACHE_VERSION = 3


def machine_key() -> str:
    """The timings' validity: CPU model, ISA flags, ``DNNL_MAX_CPU_ISA``, MXNet, threads."""
    import mxnet as mx

    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.partition(":")[2].strip()
                    break
    except OSError:
        pass
    flags = sorted(f for f in cpu_flags() if f in ISA_FLAGS)
    threads = os.environ.get("OMP_NUM_THREADS") or str(os.cpu_count())
    isa = os.environ.get("DNNL_MAX_CPU_ISA", "default")
    return (f"{model} | {' '.join(flags)} | DNNL_MAX_CPU_ISA={isa} | mxnet {mx.__version__} | "
            f"{threads} threads")


class TimingCache:
    """Kernel timings per machine, read from and written to one JSON file.

    ``{"version": 1, "machines": {machine key: {case key: {"float32": s, "<dtype>": s}}}}``
    """

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.machines: dict[str, dict[str, dict[str, float]]] = {}
        if path and os.path.exists(path):
            try:
                with open(path) as f:
                    data = json.load(f)
                if data.get("version") != CACHE_VERSION or not isinstance(data.get("machines"), dict):
                    raise ValueError(f"not a version {CACHE_VERSION} mxnet-amp timing cache")
                self.machines = data["machines"]
            except (OSError, ValueError, AttributeError, RecursionError) as err:   # corrupt: any of them
                raise TuneError(f"tune cache {path}: cannot read it ({err}); delete it or "
                                "name another file") from None

    def get(self, machine: str, case: str, target_dtype: str) -> tuple[float, float] | None:
        """``(float32 s, target dtype s)`` of the kernel keyed ``case``
        (:meth:`mxnet_amp.tune.tuning.KernelCase.key`) on ``machine``; None when not cached."""
        entry = self.machines.get(machine, {}).get(case)
        if entry and "float32" in entry and target_dtype in entry:
            return float(entry["float32"]), float(entry[target_dtype])
        return None

    def put(self, machine: str, case: str, target_dtype: str, fp32_s: float, low_s: float) -> None:
        """Remember a timing (written by :meth:`save`)."""
        self.machines.setdefault(machine, {})[case] = {"float32": fp32_s, target_dtype: low_s}

    def save(self) -> None:
        """Write the file (atomically; its folder made if missing); nothing without a path."""
        if not self.path:
            return
        folder = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(folder, exist_ok=True)
        text = json.dumps({"version": CACHE_VERSION, "machines": self.machines}, indent=1)

        def write(tmp: str) -> None:
            with open(tmp, "w") as f:
                f.write(text)
        atomic_write(self.path, write)
