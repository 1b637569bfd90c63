"""Run the ``cytepool`` command line: ``python -m cytepool``."""

from __future__ import annotations

import sys

from cytepool.cli import main

if __name__ == "__main__":
    sys.exit(main())
