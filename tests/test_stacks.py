"""The oldest stack that CI tests (ci/oldest.txt) pins each requirement at its minimum.

scripts/test.sh installs the oldest stack with ``pip install -c ci/oldest.txt``; were a pin
above the minimum that pyproject.toml declares, the declared minimum would go untested.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).parents[1]


def declared_minimums() -> dict[str, Version]:
    """The ``>=`` bound of every requirement of pyproject.toml (extras included), by name."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    texts = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        texts += extra
    minimums: dict[str, Version] = {}
    for text in texts:
        requirement = Requirement(text)
        if requirement.name == "cytepool":
            continue
        bounds = [Version(s.version) for s in requirement.specifier if s.operator == ">="]
        assert len(bounds) == 1, f"{text}: expected one lower bound (>=)"
        name = canonicalize_name(requirement.name)
        assert minimums.setdefault(name, bounds[0]) == bounds[0], f"{name}: two minimums"
    return minimums


def oldest_pins() -> dict[str, Version]:
    pins = {}
    for line in (ROOT / "ci" / "oldest.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, version = line.split("==")
            pins[canonicalize_name(name)] = Version(version)
    return pins


def test_oldest_stack_pins_every_requirement_at_its_minimum() -> None:
    assert oldest_pins() == declared_minimums()
