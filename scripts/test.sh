#!/usr/bin/env bash
# Every check, on both supported stacks, as CI runs them (.ci/run runs this script):
#   oldest  Python 3.11 with the minimum version of every requirement in pyproject.toml, pinned
#           exactly by ci/oldest.txt, in .venv-oldest;
#   newest  Python 3.13 with the newest releases of everything (pandas >= 3, anndata >= 0.13),
#           in .venv-newest.
# Each stack installs cytepool and its test dependencies and runs the whole pytest suite
# (doctests, notebooks and the docs build included); the newest also runs ruff and mypy.
#
#   bash scripts/test.sh                          both stacks
#   bash scripts/test.sh --stack newest -x        one stack; other arguments go to pytest
#
# The Pythons come from PATH (python3.11, python3.13) or pyenv ($(pyenv root)/versions/3.X.*).
set -euo pipefail
cd "$(dirname "$0")/.."

stacks=(oldest newest)
if [ "${1:-}" = "--stack" ]; then
    case "${2:-}" in
        oldest | newest) stacks=("$2") ;;
        *) echo "test.sh: --stack takes oldest or newest, found '${2:-}'" >&2; exit 2 ;;
    esac
    shift 2
fi

find_python() {  # a Python of minor version $1 (e.g. 3.11) that really runs
    local root candidate
    root=$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")
    for candidate in "$root"/versions/"$1".*/bin/python3 "python$1"; do
        if "$candidate" -c "import sys; sys.exit(sys.version_info[:2] != tuple(map(int, '$1'.split('.'))))" 2>/dev/null; then
            echo "$candidate"
            return
        fi
    done
    echo "test.sh: no Python $1 found (on PATH or under pyenv); install it, e.g. pyenv install $1" >&2
    return 1
}

install() {  # install() STACK VENV: make the venv and install cytepool with the stack's versions
    local python
    python=$(find_python "$([ "$1" = oldest ] && echo 3.11 || echo 3.13)")
    "$python" -m venv "$2"
    "$2/bin/python" -m pip install -q --upgrade pip
    if [ "$1" = oldest ]; then
        "$2/bin/python" -m pip install -q -c ci/oldest.txt -e '.[test]'
    else
        "$2/bin/python" -m pip install -q --upgrade --upgrade-strategy eager -e '.[test]' \
            'pandas>=3' 'anndata>=0.13'
    fi
}

for stack in "${stacks[@]}"; do
    venv=".venv-$stack"
    echo "== $stack stack ($venv)"
    install "$stack" "$venv"
    "$venv/bin/python" -c 'import importlib.metadata as m, sys; print(f"Python {sys.version.split()[0]}", *(f"{p} {m.version(p)}" for p in ("numpy", "pandas", "anndata", "zarr", "polars", "narwhals")))'
    if [ "$stack" = newest ]; then
        "$venv/bin/ruff" check .
        "$venv/bin/ruff" format --check .
        "$venv/bin/mypy"
    fi
    "$venv/bin/python" -m pytest -n 2 "$@"
done
