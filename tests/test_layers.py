"""The package's layers: every import runs downwards (docs/ARCHITECTURE.md, "Who imports whom").

Read from the source with ``ast`` (nothing is imported), so a lazy import inside a function
counts as much as one at the top of a module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "nmtserve"

# Dependency-free modules any layer may use.
BASE = {"contract", "defaults", "graphs", "exitcodes", "languages", "documents", "coverage", "alignment", "alternatives",
        "glossary",
        "confidence"}
# Each sub-package and what it may import besides BASE (and itself).
ALLOWED = {
    "documents": set(),
    "decoding": set(),
    "runtime": {"decoding"},
    "model": {"decoding", "runtime"},
    "engine": {"decoding", "runtime"},
    "export": {"decoding", "runtime", "model", "engine"},
    "server": {"decoding", "runtime", "model", "engine"},
    "demo": {"decoding", "runtime", "model"},
    "client": set(),
    "gateway": {"client"},
}


def _imported(path: Path) -> set[str]:
    """The nmtserve sub-packages / top-level modules that ``path`` imports."""
    here = path.relative_to(PACKAGE).parts[:-1]  # ("export",) for nmtserve/export/pipeline.py
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level:
            module = [*here[: len(here) - node.level + 1], *(node.module.split(".") if node.module else [])]
            out |= {module[0]} if module else {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("nmtserve."):
            out.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            out |= {a.name.split(".")[1] for a in node.names if a.name.startswith("nmtserve.")}
    return out


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_imports_run_downwards(layer):
    wrong = []
    for path in sorted((PACKAGE / layer).rglob("*.py")):
        for target in _imported(path) - BASE - ALLOWED[layer] - {layer}:
            wrong.append(f"{path.relative_to(PACKAGE.parent)} imports nmtserve.{target}")
    assert not wrong, "\n".join(wrong)


def test_every_sub_package_has_a_layer():
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert packages == set(ALLOWED)


def test_the_checker_sees_relative_and_absolute_imports(tmp_path):
    assert _imported(PACKAGE / "export" / "repository.py") >= {"contract", "graphs", "runtime"}
    assert "client" in _imported(PACKAGE / "gateway" / "service.py")
