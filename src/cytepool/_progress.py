"""A small progress bar: a line on stderr in a terminal, a live display in Jupyter.

Whether it shows (``progress=None``) is decided where it runs: on a terminal (stderr is one)
it redraws a line on stderr; in a Jupyter kernel it updates one display output of the cell,
HTML with a text fallback, never touching stderr; otherwise it stays off. IPython is not
imported for this: a kernel has imported it already.
"""

from __future__ import annotations

import html
import sys
import time
from typing import Any, TextIO

__all__ = ["Progress", "in_notebook"]


def in_notebook() -> bool:
    """True in a Jupyter kernel (notebook, lab, VS Code, qtconsole), not in a terminal IPython."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return getattr(shell, "kernel", None) is not None


class Progress:
    """A progress bar of ``total`` items, redrawn at most ten times a second.

    ``enabled``: True shows it (in the notebook when in Jupyter, else on ``stream``), False
    hides it, None shows it where it can be seen (a terminal or a notebook).
    """

    _WIDTH = 28
    _INTERVAL = 0.1  # seconds between redraws

    def __init__(
        self,
        total: int,
        label: str,
        unit: str,
        *,
        enabled: bool | None,
        stream: TextIO | None = None,
    ) -> None:
        self.total, self.label, self.unit = total, label, unit
        self.stream = stream if stream is not None else sys.stderr
        notebook = stream is None and in_notebook()
        terminal = bool(getattr(self.stream, "isatty", lambda: False)())
        self.enabled = (notebook or terminal) if enabled is None else enabled
        self.display: Any = _Display() if self.enabled and notebook else None
        self.done, self.start, self.drawn = 0, time.monotonic(), 0.0

    def update(self, n: int) -> None:
        """Count ``n`` more items done."""
        self.done += n
        now = time.monotonic()
        if self.enabled and (now - self.drawn >= self._INTERVAL or self.done >= self.total):
            self.drawn = now
            self._draw(now)

    def close(self) -> None:
        """End the bar's line (the notebook's display keeps its last state)."""
        if self.enabled and self.drawn and self.display is None:
            self.stream.write("\n")
            self.stream.flush()

    def _text(self, now: float) -> tuple[float, str]:
        share = self.done / self.total if self.total else 1.0
        counts = f"{share:4.0%} {self.done:,}/{self.total:,} {self.unit} {now - self.start:5.1f} s"
        return share, counts

    def _draw(self, now: float) -> None:
        share, counts = self._text(now)
        if self.display is not None:
            self.display.show(self.label, share, counts)
            return
        full = int(share * self._WIDTH)
        bar = "#" * full + "-" * (self._WIDTH - full)
        self.stream.write(f"\r{self.label} [{bar}] {counts}")
        self.stream.flush()


class _Display:
    """One display output of the running cell, updated in place (IPython's display_id)."""

    def __init__(self) -> None:
        self.handle: Any = None

    def show(self, label: str, share: float, counts: str) -> None:
        from IPython.display import display

        text = f"{label} {counts}"
        bundle = {
            "text/plain": text,
            "text/html": (
                f'<progress value="{share:.4f}" max="1" style="width: 20em"></progress> '
                f"<code>{html.escape(text)}</code>"
            ),
        }
        if self.handle is None:
            self.handle = display(bundle, raw=True, display_id=True)
        else:
            self.handle.update(bundle, raw=True)
