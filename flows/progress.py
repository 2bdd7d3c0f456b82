"""A terminal progress bar for replays (stderr; silent when disabled)."""

from __future__ import annotations

import sys
import time


class ProgressBar:
    """Shows simulated time against the replay's end, redrawn at most ten times a second.

    >>> bar = ProgressBar(100.0, enabled=False)
    >>> bar.update(50.0); bar.close()
    """

    WIDTH = 30

    def __init__(self, total_s: float, enabled: bool = True) -> None:
        self.total_s = total_s
        self.enabled = enabled
        self._drawn = 0.0
        self._started = time.perf_counter()

    def update(self, simulated_s: float) -> None:
        """Redraw for the simulated time reached."""
        now = time.perf_counter()
        if not self.enabled or now - self._drawn < 0.1:
            return
        self._drawn = now
        done = min(1.0, simulated_s / self.total_s) if self.total_s > 0 else 1.0
        filled = int(done * self.WIDTH)
        bar = "#" * filled + "." * (self.WIDTH - filled)
        sys.stderr.write(
            f"\r[{bar}] {100 * done:5.1f}%  {simulated_s:,.0f}/{self.total_s:,.0f} s simulated"
        )
        sys.stderr.flush()

    def close(self, note: str = "") -> None:
        """Finish the line."""
        if self.enabled:
            self._drawn = 0.0
            self.update(self.total_s)
            sys.stderr.write(f"  {note}\n" if note else "\n")
            sys.stderr.flush()
