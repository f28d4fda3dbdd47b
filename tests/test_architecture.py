"""ARCHITECTURE.md's module table is true: every module is listed, and imports point one way.

A module may import (at run time, function-local imports included) only modules of a lower layer
than its own; imports under ``if TYPE_CHECKING:`` are annotations and do not count. This keeps the
pipeline's layers acyclic and tells a newcomer where a new module belongs.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.support import REPO

_ROW = re.compile(r"^\|\s*`(castfind(?:\.[a-z_]+)*)`\s*\|\s*(\d+)\s*\|")


def documented_layers(text: str) -> dict[str, int]:
    return {m.group(1): int(m.group(2)) for line in text.splitlines() if (m := _ROW.match(line))}


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def runtime_imports(path: Path, modules: set[str]) -> set[str]:
    """The castfind modules ``path`` imports outside ``if TYPE_CHECKING:`` blocks."""
    out: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, ast.ImportFrom) and child.level == 0 and (child.module or "").startswith("castfind"):
                base = child.module or ""
                for alias in child.names:
                    full = f"{base}.{alias.name}"
                    out.add(full if full in modules else base)
            elif isinstance(child, ast.Import):
                out.update(a.name for a in child.names if a.name.startswith("castfind"))
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return out


def check(layers: dict[str, int], imports: dict[str, set[str]]) -> list[str]:
    """Every way the table and the imports disagree, as messages."""
    problems = [f"{m} is not in ARCHITECTURE.md's module table" for m in sorted(imports) if m not in layers]
    problems += [f"ARCHITECTURE.md lists {m}, which does not exist" for m in sorted(layers) if m not in imports]
    for mod, targets in sorted(imports.items()):
        for t in sorted(targets - {mod, "castfind"}):
            if mod in layers and t in layers and layers[t] >= layers[mod]:
                problems.append(f"{mod} (layer {layers[mod]}) imports {t} (layer {layers[t]}): "
                                "imports must point to a lower layer")
    return problems


def real_imports() -> dict[str, set[str]]:
    files = sorted((REPO / "castfind").rglob("*.py"))
    modules = {module_name(p) for p in files}
    return {module_name(p): runtime_imports(p, modules) for p in files}


def test_the_module_table_matches_the_code_and_imports_point_to_lower_layers() -> None:
    layers = documented_layers((REPO / "ARCHITECTURE.md").read_text(encoding="utf-8"))
    imports = real_imports()
    assert len(layers) == len(imports) > 40
    assert check(layers, imports) == []


def test_the_check_catches_an_upward_import_a_missing_module_and_a_stale_row() -> None:
    layers = {"castfind.store.index": 5, "castfind.store.memo": 3, "castfind.gone": 1}
    imports = {"castfind.store.index": {"castfind.store.memo"}, "castfind.store.memo": {"castfind.store.index"}, "castfind.new": set()}
    problems = check(layers, imports)
    assert "castfind.store.memo (layer 3) imports castfind.store.index (layer 5): imports must point to a lower layer" in problems
    assert "castfind.new is not in ARCHITECTURE.md's module table" in problems
    assert "ARCHITECTURE.md lists castfind.gone, which does not exist" in problems
    assert not any(p.startswith("castfind.store.index (layer 5)") for p in problems)


def test_type_checking_imports_do_not_count(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from castfind.store.index import Index\n"
                   "def f():\n    from castfind import scan\n")
    assert runtime_imports(src, {"castfind.store.index", "castfind.analysis.scan"}) == {"castfind.analysis.scan"}


@pytest.mark.parametrize("doc", ["README.md", "ARCHITECTURE.md"])
def test_no_document_points_outside_the_repository(doc: str) -> None:
    text = (REPO / doc).read_text(encoding="utf-8")
    assert "DESIGN" not in text and "shared/" not in text


def test_no_source_cites_a_document_outside_the_repository() -> None:
    cited = [str(p.relative_to(REPO)) for p in sorted((REPO / "castfind").rglob("*.py"))
             if re.search(r"DESIGN\b|\.\./shared|DESIGN\.md", p.read_text(encoding="utf-8"))]
    assert cited == []
