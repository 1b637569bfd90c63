"""Add "Used in" and "Explained in" links to cytepool's API reference.

For every public name documented with autodoc, the extension lists the tutorials (notebooks) whose
code uses it and the explanation pages that refer to it, as the reference text does:

    Used in: Export a cube from another tool, Bulk RNA-seq
    Explained in: The cube and its additive layers

The links are found, not written by hand, so they stay true when a page changes:

* in notebooks and in the ``python`` code blocks of explanation pages, the code is parsed: imports
  of cytepool are followed (``import cytepool as cp``, ``from cytepool.io import read_cube``), and
  so are the types of variables assigned from calls whose return annotation names a public class
  (``cube = read_cube(...)`` makes ``cube.select`` refer to ``cytepool.Cube.select``);
* in the text of explanation pages, cross-reference roles (``{func}`cytepool.io.read_cube```) and
  inline code naming a public object count: ```read_cube``` or ```cytepool.concat``` for a
  module-level name, ```cube.select``` or ```Cube.select(...)``` for a member.

A class is used in or explained in every page that uses or explains one of its members.
"""

import ast
import importlib
import inspect
import json
import re
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx
from sphinx.util import logging

LOGGER = logging.getLogger(__name__)

_ROLE = re.compile(
    r"\{(?:py:)?(?:func|class|meth|attr|obj|data|mod|exc)\}"  # the role
    r"`~?([^`<]+?)(?:\s*<([^>]+)>)?`"  # `target` or `title <target>`
)
_INLINE_CODE = re.compile(r"(?<![`}])`([^`\n]+)`(?!`)")
_CHAIN = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")
_FENCE = re.compile(
    r"^(```+|~~~+)\s*(?:\{code-cell\}|\{code-block\}|\{code\})?\s*(\w*)\s*\n"  # opening fence
    r"(.*?)^\1\s*$",  # the code, up to the closing fence
    re.M | re.S,
)
_CUBE_VARIABLES = ("cube", "c")


def _import(module_name: str) -> Any:
    """Import a documented module; a module that fails to import is reported and skipped."""
    try:
        return importlib.import_module(module_name)
    except ImportError as error:
        LOGGER.warning("cannot import %s to document it: %s", module_name, error)
        return None


class PublicNames:
    """The public names of the documented modules, with their members and return types."""

    def __init__(self, modules: list[str]) -> None:
        self.objects: dict[str, Any] = {}
        self.classes: dict[str, str] = {}  # short class name -> qualified name
        self.modules = set(modules)
        for module_name in modules:
            module = _import(module_name)
            for name in getattr(module, "__all__", []):
                if name.startswith("__"):
                    continue
                obj = getattr(module, name)
                qualified = f"{module_name}.{name}"
                self.objects[qualified] = obj
                if inspect.isclass(obj):
                    self.classes[name] = qualified
                    for member in vars(obj):
                        if not member.startswith("_"):
                            self.objects[f"{qualified}.{member}"] = getattr(obj, member, None)
        self.by_short: dict[str, set[str]] = defaultdict(set)
        for qualified in self.objects:
            self.by_short[qualified.rsplit(".", 1)[1]].add(qualified)

    def owner_class(self, qualified: str) -> str | None:
        """The class a member belongs to, if qualified names a member of a public class."""
        parent = qualified.rsplit(".", 1)[0]
        return parent if parent in self.classes.values() else None

    def returned_class(self, qualified: str) -> str | None:
        """The public class that calling the named object returns, if its annotation says so."""
        obj = self.objects.get(qualified)
        if inspect.isclass(obj):
            return qualified
        if obj is None or not callable(obj):
            return None
        try:
            annotation = inspect.signature(obj).return_annotation
        except (TypeError, ValueError):
            return None
        text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
        found = {self.classes[word] for word in re.findall(r"\w+", text) if word in self.classes}
        return found.pop() if len(found) == 1 else None


class _CodeUses(ast.NodeVisitor):
    """Collect the public names a piece of Python code refers to."""

    def __init__(self, names: PublicNames) -> None:
        self.names = names
        self.aliases: dict[str, str] = {}
        self.types: dict[str, str] = {}
        self.used: set[str] = set()

    def qualify(self, node: ast.AST) -> str | None:
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id) or self.types.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self.qualify(node.value)
            return f"{base}.{node.attr}" if base else None
        if isinstance(node, ast.Call):
            callee = self.qualify(node.func)
            return self.names.returned_class(callee) if callee else None
        return None

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name.split(".")[0] == "cytepool":
                if alias.asname:
                    self.aliases[alias.asname] = alias.name
                else:
                    self.aliases["cytepool"] = "cytepool"

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module and node.module.split(".")[0] == "cytepool":
            for alias in node.names:
                self.aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"

    def visit_Assign(self, node: ast.Assign) -> None:
        self.generic_visit(node)
        kind = self.qualify(node.value)
        kind = kind if kind in self.names.classes.values() else None
        for target in node.targets:
            if isinstance(target, ast.Name):
                if kind:
                    self.types[target.id] = kind
                else:
                    self.types.pop(target.id, None)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self._record(self.qualify(node))
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        self._record(self.aliases.get(node.id))

    def _record(self, qualified: str | None) -> None:
        if qualified in self.names.objects:
            self.used.add(qualified)


def code_uses(source: str, names: PublicNames) -> set[str]:
    """The public names used by Python source (IPython magics and shell lines are skipped)."""
    lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
    try:
        tree = ast.parse("\n".join(lines))
    except SyntaxError:
        return set()
    visitor = _CodeUses(names)
    visitor.visit(tree)
    return visitor.used


def _resolve_chain(chain: str, names: PublicNames) -> str | None:
    parts = chain.split(".")
    if parts[0] in ("cp", "cytepool"):
        qualified = ".".join(["cytepool", *parts[1:]])
        return qualified if qualified in names.objects else None
    if len(parts) == 2 and parts[0] in (*_CUBE_VARIABLES, "Cube") and "Cube" in names.classes:
        qualified = f"{names.classes['Cube']}.{parts[1]}"
        return qualified if qualified in names.objects else None
    if len(parts) == 2 and parts[0] in names.classes:
        qualified = f"{names.classes[parts[0]]}.{parts[1]}"
        return qualified if qualified in names.objects else None
    if len(parts) == 1:  # a bare name stands for a module-level name, never for a member
        candidates = {c for c in names.by_short.get(parts[0], set()) if not names.owner_class(c)}
        return next(iter(candidates)) if len(candidates) == 1 else None
    return None


def text_mentions(text: str, names: PublicNames) -> set[str]:
    """The public names a Markdown page refers to, in roles, inline code and code blocks."""
    found: set[str] = set()
    for match in _FENCE.finditer(text):
        if match.group(2) in ("", "python", "ipython", "py", "pycon"):
            found |= code_uses(match.group(3), names)
    prose = _FENCE.sub("", text)
    for match in _ROLE.finditer(prose):
        target = (match.group(2) or match.group(1)).strip().lstrip("~.")
        resolved = target if target in names.objects else _resolve_chain(target, names)
        if resolved:
            found.add(resolved)
    for match in _INLINE_CODE.finditer(_ROLE.sub("", prose)):
        code = match.group(1).strip()
        chain = _CHAIN.match(code)
        if chain and (chain.end() == len(code) or code[chain.end()] == "("):
            resolved = _resolve_chain(chain.group(0), names)
            if resolved:
                found.add(resolved)
    return found


def _notebook_code(path: Path) -> str:
    notebook = json.loads(path.read_text(encoding="utf-8"))
    cells = [cell for cell in notebook.get("cells", []) if cell.get("cell_type") == "code"]
    return "\n".join("".join(cell.get("source", "")) for cell in cells)


def _with_classes(pages: dict[str, set[str]], names: PublicNames) -> dict[str, set[str]]:
    """Give each class the pages of its members as well."""
    result = {name: set(docs) for name, docs in pages.items()}
    for name, docs in pages.items():
        owner = names.owner_class(name)
        if owner:
            result.setdefault(owner, set()).update(docs)
    return result


def collect(app: Sphinx) -> None:
    """Find, for each public name, the tutorials using it and the explanations referring to it."""
    config = app.config
    names = PublicNames(list(config.cytepool_crosslinks_modules))
    srcdir = Path(app.srcdir)
    used: dict[str, set[str]] = defaultdict(set)
    explained: dict[str, set[str]] = defaultdict(set)
    tutorials = []
    for pattern in config.cytepool_crosslinks_tutorials:
        tutorials += sorted(srcdir.glob(f"{pattern}.ipynb"))
    for path in tutorials:
        docname = path.relative_to(srcdir).with_suffix("").as_posix()
        for name in code_uses(_notebook_code(path), names):
            used[name].add(docname)
    for docname in config.cytepool_crosslinks_explanations:
        path = srcdir / f"{docname}.md"
        if path.is_file():
            for name in text_mentions(path.read_text(encoding="utf-8"), names):
                explained[name].add(docname)
    order = [p.relative_to(srcdir).with_suffix("").as_posix() for p in tutorials]
    order += list(config.cytepool_crosslinks_explanations)
    app.env.cytepool_crosslinks = {  # type: ignore[attr-defined]
        "used": _with_classes(used, names),
        "explained": _with_classes(explained, names),
        "order": order,
        "docnames": set(),
    }


def _links(docnames: set[str], order: list[str]) -> str:
    ranked = sorted(docnames, key=lambda d: (order.index(d) if d in order else len(order), d))
    return ", ".join(f":doc:`/{docname}`" for docname in ranked)


def add_links(
    app: Sphinx, what: str, name: str, obj: object, options: object, lines: list[str]
) -> None:
    """Append the "Used in" and "Explained in" paragraphs to a docstring."""
    state = getattr(app.env, "cytepool_crosslinks", None)
    if state is None or what == "module":
        return
    used = state["used"].get(name, set())
    explained = state["explained"].get(name, set())
    if used or explained:
        state["docnames"].add(app.env.docname)
    if used:
        lines += ["", f"**Used in:** {_links(used, state['order'])}"]
    if explained:
        lines += ["", f"**Explained in:** {_links(explained, state['order'])}"]


def always_reread(app: Sphinx, env: Any, added: set[str], changed: set[str], removed: set[str]):
    """Re-read the API pages on every build, since the pages they link to may have changed."""
    return sorted(getattr(env, "cytepool_crosslinks_api_pages", []))


def remember_api_pages(app: Sphinx, env: Any) -> None:
    state = getattr(env, "cytepool_crosslinks", None)
    if state is not None:
        env.cytepool_crosslinks_api_pages = sorted(state["docnames"])


def check_documented(app: Sphinx, env: Any) -> None:
    """Warn about every public name of the documented modules that no page documents."""
    documented = set(env.get_domain("py").objects)
    for module_name in app.config.cytepool_crosslinks_modules:
        module = sys.modules.get(module_name)
        for name in getattr(module, "__all__", []):
            if not name.startswith("__") and f"{module_name}.{name}" not in documented:
                LOGGER.warning("public name %s.%s is not documented", module_name, name)


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_config_value("cytepool_crosslinks_modules", [], "env")
    app.add_config_value("cytepool_crosslinks_tutorials", ["tutorials/*"], "env")
    app.add_config_value("cytepool_crosslinks_explanations", [], "env")
    app.connect("builder-inited", collect)
    app.connect("env-get-outdated", always_reread)
    app.connect("env-updated", remember_api_pages)
    app.connect("env-check-consistency", check_documented)
    # After numpydoc (priority 500), which rewrites the docstring into reST.
    app.connect("autodoc-process-docstring", add_links, priority=600)
    return {"version": "1.0", "parallel_read_safe": False, "parallel_write_safe": True}
