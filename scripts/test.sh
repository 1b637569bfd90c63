#!/usr/bin/env bash
# Install cytepool and its test dependencies into .venv, then run every check:
# ruff (lint and format), mypy on src/, and the whole pytest suite (doctests and notebooks included).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[test]'
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
.venv/bin/python -m pytest -n 2 "$@"
