"""Modules cytepool's own processes never use, marked absent before anything imports them.

anndata imports ``dask.array`` whenever dask is installed: 1.3 of the 1.9 CPU-seconds that
importing anndata takes (on a 2-core machine). The ``cytepool`` program and the worker
processes that pool files never use dask, so they mark it absent first; a process cytepool is
merely imported into is left as it was.
"""

from __future__ import annotations

import sys

__all__ = ["UNUSED", "hide_unused"]

UNUSED = ("dask",)


def hide_unused() -> None:
    """Mark the modules of :data:`UNUSED` absent (``None`` in ``sys.modules``:
    ``importlib.util.find_spec`` finds nothing, an import raises ImportError), unless already
    imported (say by the main module a spawned worker imports first)."""
    for name in UNUSED:
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]
