"""The installed version of cytepool, below every other module (nothing imports the package)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

__all__ = ["__version__"]

try:
    __version__ = version("cytepool")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"
