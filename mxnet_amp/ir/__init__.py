"""The graph as plain data: :class:`~mxnet_amp.ir.graph.Graph` and its builders, dtype names and codes,
the invariant checker, the collector pause. Imports no MXNet (tests/house/test_imports.py
checks it): everything above reads and writes this."""
from __future__ import annotations

__all__: list[str] = []
