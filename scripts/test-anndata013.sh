#!/usr/bin/env bash
# Run the interop tests again with anndata 0.13 (Python >= 3.12), whose Zarr v3 output is
# sharded by default, so that reading anndata's sharded tables stays covered.
set -euo pipefail
cd "$(dirname "$0")/.."
py=""
for candidate in python3.13 python3.12 "$(pyenv root 2>/dev/null)"/versions/3.1[23]*/bin/python3; do
    if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
        py=$candidate
        break
    fi
done
if [ -z "$py" ]; then
    echo "test-anndata013: no Python >= 3.12 found; install one (pyenv install 3.12) to run this step" >&2
    exit 1
fi
"$py" -m venv .venv-anndata013
.venv-anndata013/bin/python -m pip install -q --upgrade pip
.venv-anndata013/bin/python -m pip install -q -e '.[polars]' 'anndata>=0.13' 'zarr>=3.1.3' 'pandas>=2.2,<3' pytest hypothesis scipy
.venv-anndata013/bin/python -m pytest -m interop -p no:cacheprovider tests/io "$@"
