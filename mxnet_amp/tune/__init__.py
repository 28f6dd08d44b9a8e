"""The timed choice (``tune=``): what it asks for (tuning), the timings per machine (cache)
and the kernel timing itself (timing)."""
from __future__ import annotations

__all__: list[str] = []
