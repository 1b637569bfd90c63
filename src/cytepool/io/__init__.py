"""Reading and writing cube files; cytepool.io.anndata converts cubes to and from AnnData and MuData."""

from __future__ import annotations

__all__: list[str] = []
