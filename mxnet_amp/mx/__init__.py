"""The MXNet boundary: the op registry and its type inference, argument checks, a graph's
entries, the machine (hardware), fused ops, params and symbol / checkpoint I/O."""
from __future__ import annotations

__all__: list[str] = []
