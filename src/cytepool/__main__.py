"""Run the ``cytepool`` command line: ``python -m cytepool``."""

from __future__ import annotations

from cytepool.cli import run

if __name__ == "__main__":
    run()
