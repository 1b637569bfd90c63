"""The layout keeps its rules: imports point one way, no reach-ins, small modules and classes.

An AST walk over ``src/cytepool`` (every import, also inside functions and under
``TYPE_CHECKING``), as docs/architecture.md describes.
"""

from __future__ import annotations

import ast
import io
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

import cytepool

SRC = Path(cytepool.__file__).parent
# Lines of code, as ../shared/tools/arch_check.py counts them: docstrings, comments and blank
# lines are not counted, so documentation never pushes code out of where it belongs.
MAX_MODULE_LINES = 600
MAX_CLASS_LINES = 300

# Layers, bottom to top; a module may import only from its own layer or those below it.
LAYERS = [
    [
        "cytepool.errors",
        "cytepool._version",
        "cytepool._utf8",
        "cytepool._words",
        "cytepool._ids",
        "cytepool._exact",
        "cytepool._kept_pools",
        "cytepool._value_texts",
        "cytepool._dask",
        "cytepool._arrays",
    ],
    ["cytepool.io.zarr"],
    ["cytepool.io.tables", "cytepool.io._atomic"],
    [
        "cytepool._records",
        "cytepool.fingerprint",
        "cytepool.layers",
        "cytepool._table",
        "cytepool._join",
    ],
    [
        "cytepool._parts",
        "cytepool._derive",
        "cytepool._combine",
        "cytepool._stats",
        "cytepool._filters",
        "cytepool.cube",
    ],
    [
        "cytepool._assemble",
        "cytepool._labels",
        "cytepool._pool_sums",
        "cytepool._pool_kernels",
        "cytepool._progress",
    ],
    ["cytepool.pooling", "cytepool"],
    ["cytepool.io.cubes", "cytepool.io"],
    ["cytepool.io.anndata", "cytepool._demo", "cytepool.cli", "cytepool.__main__"],
]


def _name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_name(p): p for p in SRC.rglob("*.py")}


def _imports(module: str) -> Iterator[tuple[str, str]]:
    """(imported module, imported name or "") for every import of ``module``."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, ""
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                yield (sub, "") if sub in MODULES else (base, alias.name)


def _owner(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _edges() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {m: set() for m in MODULES}
    for module in MODULES:
        for target, _ in _imports(module):
            owner = _owner(target)
            if owner is not None and owner != module and owner.startswith("cytepool"):
                edges[module].add(owner)
    return edges


def _layer(module: str) -> int:
    best = -1, -1
    for i, layer in enumerate(LAYERS):
        for prefix in layer:
            if module == prefix or module.startswith(prefix + "."):
                best = max(best, (len(prefix), i))
    assert best[1] >= 0, f"{module} is in no layer of this test"
    return best[1]


def test_no_import_cycle() -> None:
    edges = _edges()
    state: dict[str, int] = {}
    cycles: list[str] = []

    def visit(module: str, trail: list[str]) -> None:
        state[module] = 1
        for target in sorted(edges[module]):
            if state.get(target) == 1:
                cycles.append(" -> ".join([*trail[trail.index(target) :], target]))
            elif target not in state:
                visit(target, [*trail, target])
        state[module] = 2

    for module in sorted(MODULES):
        if module not in state:
            visit(module, [module])
    assert cycles == []


def test_imports_point_down_the_layers() -> None:
    upward = [
        f"{module} imports {target}"
        for module, targets in _edges().items()
        for target in targets
        if _layer(target) > _layer(module) and not module.startswith(target + ".")
    ]
    assert upward == []


def test_no_module_uses_another_modules_private_names() -> None:
    found = []
    for module in MODULES:
        imported: dict[str, str] = {}
        for target, name in _imports(module):
            owner = _owner(target)
            if owner is None or owner == module or not owner.startswith("cytepool"):
                continue
            if name.startswith("_") and not name.startswith("__"):
                found.append(f"{module} imports {owner}.{name}")
            imported[name or target.rpartition(".")[2]] = owner
        tree = ast.parse(MODULES[module].read_text())
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in imported
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                found.append(f"{module} uses {node.value.id}.{node.attr}")
    assert found == []


def _code_lines(text: str, tree: ast.Module) -> set[int]:
    """The numbers of the lines that hold code (not a docstring, comment or blank line)."""
    docs: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                docs.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    skip = {
        tokenize.COMMENT,
        tokenize.NL,
        tokenize.NEWLINE,
        tokenize.INDENT,
        tokenize.DEDENT,
        tokenize.ENDMARKER,
    }
    lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type not in skip:
            lines.update(n for n in range(token.start[0], token.end[0] + 1) if n not in docs)
    return lines


@pytest.mark.parametrize("module", sorted(MODULES))
def test_modules_and_classes_are_small(module: str) -> None:
    text = MODULES[module].read_text()
    tree = ast.parse(text)
    code = _code_lines(text, tree)
    assert len(code) <= MAX_MODULE_LINES, f"{module}: {len(code)} lines of code"
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            end = node.end_lineno or node.lineno
            size = sum(1 for n in code if node.lineno <= n <= end)
            assert size <= MAX_CLASS_LINES, f"class {node.name}: {size} lines of code"


def test_src_uses_narwhals_only_through_its_stable_v2_namespace() -> None:
    found = [
        f"{module} imports {target}"
        for module in MODULES
        for target, _ in _imports(module)
        if target.split(".")[0] == "narwhals" and not target.startswith("narwhals.stable.v2")
    ]
    assert found == []
