"""Files the package writes and reads: atomic writes, output paths, progress bars, interrupts.
No MXNet: the report and the timing cache write through here."""
from __future__ import annotations

__all__: list[str] = []
