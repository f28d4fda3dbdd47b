"""ARCHITECTURE.md's module table is true: every module is listed, and imports point one way.

A module may import only modules of a lower layer than its own. Every import counts: at module
level or inside a function, absolute or relative, and under ``if TYPE_CHECKING:`` too (a type-only
import that points up is a cycle the type checker sees, and the first thing to become a run-time
import). No module imports another's private (``_name``) names. This keeps the pipeline's layers
acyclic and tells a newcomer where a new module belongs.
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


def imported_names(path: Path, here: str) -> list[tuple[str, str | None]]:
    """Every import in ``path`` (module level, in functions, under ``if TYPE_CHECKING:``) as (module,
    name): ``(m, None)`` for ``import m``, ``(m, n)`` for ``from m import n``; a relative import resolved
    against ``here``, the file's module name (a package's ``__init__`` is named as the package)."""
    package = here.split(".") if path.name == "__init__.py" else here.split(".")[:-1]
    out: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.extend((a.name, None) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
            out.extend((base, a.name) for a in node.names)
    return out


def imports(path: Path, here: str, modules: set[str]) -> set[str]:
    """The castfind modules the file of module ``here`` imports (any import: :func:`imported_names`)."""
    out: set[str] = set()
    for base, name in imported_names(path, here):
        if base == "castfind" or base.startswith("castfind."):
            full = f"{base}.{name}"
            out.add(full if name is not None and full in modules else base)
    return out


def private_imports(path: Path, here: str) -> list[str]:
    """Each ``from castfind.M import _name`` in the file of module ``here`` (M another module)."""
    return [f"{here} imports {name} from {base}" for base, name in imported_names(path, here)
            if (base == "castfind" or base.startswith("castfind.")) and base != here and name is not None
            and name.startswith("_") and not name.startswith("__")]


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
    return {module_name(p): imports(p, module_name(p), modules) for p in files}


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


def test_type_checking_relative_and_function_local_imports_count(tmp_path: Path) -> None:
    src = tmp_path / "text.py"
    src.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from castfind.store.index import Index\n"
                   "from . import registry\nfrom ..store.memo import Tracker\nfrom ..store import words\n"
                   "from .where_text import where_output\nimport castfind.store.cache\n"
                   "def f():\n    from castfind.analysis import scan\n")
    modules = {"castfind.store.index", "castfind.analysis.scan", "castfind.store.memo", "castfind.store.words", "castfind.store.cache",
               "castfind.report", "castfind.report.registry", "castfind.report.where_text"}
    assert imports(src, "castfind.report.text", modules) == modules - {"castfind.report"}
    init = tmp_path / "__init__.py"
    init.write_text("from .registry import REPORTERS\nfrom ..store.memo import Tracker\n")
    assert imports(init, "castfind.report", modules) == {"castfind.report.registry", "castfind.store.memo"}


def test_a_type_only_import_of_a_higher_layer_is_a_problem() -> None:
    layers = {"castfind.store.memo": 3, "castfind.store.textquery": 7}
    problems = check(layers, {"castfind.store.memo": {"castfind.store.textquery"}, "castfind.store.textquery": {"castfind.store.memo"}})
    assert problems == ["castfind.store.memo (layer 3) imports castfind.store.textquery (layer 7): imports must point to a lower layer"]


def test_no_module_imports_another_modules_private_names() -> None:
    found = [line for p in sorted((REPO / "castfind").rglob("*.py")) for line in private_imports(p, module_name(p))]
    assert found == []


def test_the_private_name_check_catches_absolute_and_relative_imports(tmp_path: Path) -> None:
    src = tmp_path / "where.py"
    src.write_text("from castfind.where.answer import WhereResult, _carried\nfrom ..store.memo import _pack_steps, __all__\n"
                   "from castfind.where.lookup import _own\n")
    assert private_imports(src, "castfind.where.lookup") == [
        "castfind.where.lookup imports _carried from castfind.where.answer",
        "castfind.where.lookup imports _pack_steps from castfind.store.memo"]


@pytest.mark.parametrize("doc", ["README.md", "ARCHITECTURE.md"])
def test_no_document_points_outside_the_repository(doc: str) -> None:
    text = (REPO / doc).read_text(encoding="utf-8")
    assert "DESIGN" not in text and "shared/" not in text


def test_no_source_cites_a_document_outside_the_repository() -> None:
    cited = [str(p.relative_to(REPO)) for p in sorted((REPO / "castfind").rglob("*.py"))
             if re.search(r"DESIGN\b|\.\./shared|DESIGN\.md", p.read_text(encoding="utf-8"))]
    assert cited == []


_WING_ROW = re.compile(r"^\|\s*`castfind/(?:([a-z_]+)/)?`(?: \(the app\))?\s*\|\s*(\d+)\s*\|")


def documented_wings(text: str) -> dict[str, int]:
    """The wing table: wing name (``app`` for the modules directly in ``castfind/``) → its rank."""
    return {m.group(1) or "app": int(m.group(2)) for line in text.splitlines() if (m := _WING_ROW.match(line))}


def wing_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and (REPO / "castfind" / parts[1]).is_dir() else "app"


def wing_problems(wings: dict[str, int], imports: dict[str, set[str]]) -> list[str]:
    problems = [f"{m} is in wing {wing_of(m)!r}, which the wing table does not list"
                for m in sorted(imports) if wing_of(m) not in wings]
    for mod, targets in sorted(imports.items()):
        for t in sorted(targets):
            a, b = wing_of(mod), wing_of(t)
            if a != b and a in wings and b in wings and wings[b] >= wings[a]:
                problems.append(f"{mod} (wing {a}, rank {wings[a]}) imports {t} (wing {b}, rank {wings[b]}): "
                                "a wing imports only lower wings")
    return problems


def test_every_module_is_in_a_listed_wing_and_wings_import_only_lower_wings() -> None:
    wings = documented_wings((REPO / "ARCHITECTURE.md").read_text(encoding="utf-8"))
    assert set(wings) == {"core", "read", "runtime", "store", "analysis", "where", "report", "app"}
    folders = {p.name for p in (REPO / "castfind").iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    assert folders == set(wings) - {"app"}  # every wing is a folder, every folder a wing
    assert wing_problems(wings, real_imports()) == []


def test_the_wing_check_catches_an_upward_import() -> None:
    wings = {"core": 0, "store": 2, "app": 6}
    imports = {"castfind.core.types": {"castfind.store.index"}, "castfind.store.index": {"castfind.core.types"},
               "castfind.cli": {"castfind.store.index"}}
    assert wing_problems(wings, imports) == [
        "castfind.core.types (wing core, rank 0) imports castfind.store.index (wing store, rank 2): "
        "a wing imports only lower wings"]


# --- ARCHITECTURE.md's general claims, checked on the code ------------------------------------------------

_DISK = re.compile(r"\bopen\(|\.read_bytes\(|\.read_text\(|\.write_bytes\(|\.write_text\(|os\.replace\(|\.mkdir\("
                   r"|os\.makedirs\(|shutil\.|os\.link\(|\.unlink\(|sqlite3\.connect\(|tempfile\.|os\.rename\("
                   r"|subprocess\.|os\.dup2\(")
_SPEAKS = re.compile(r"(?<![\w.])print\(|typer\.echo\(|sys\.exit\(|SystemExit\(|typer\.Exit\(|sys\.stdout\.write\("
                     r"|sys\.stderr\.write\(|os\._exit\(")


def _code_lines(path: Path) -> str:
    """The file's code without its docstrings and comments (a docstring may name ``open(``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            body[0] = ast.Pass()
    return ast.unparse(tree)


def _modules_matching(pattern: re.Pattern[str]) -> set[str]:
    return {module_name(p) for p in sorted((REPO / "castfind").rglob("*.py")) if pattern.search(_code_lines(p))}


def _named_in_architecture(paragraph_start: str) -> set[str]:
    text = (REPO / "ARCHITECTURE.md").read_text(encoding="utf-8")
    start = text.index(paragraph_start)
    para = text[start:text.index("\n\n", start)]
    modules = {module_name(p) for p in (REPO / "castfind").rglob("*.py")}
    return {"castfind." + m for m in re.findall(r"`([a-z_]+(?:\.[a-z_]+)?)`", para)} & modules


def test_the_modules_that_touch_disk_are_the_ones_architecture_names() -> None:
    documented = _named_in_architecture("Every stage is a pure function of what it is given")
    assert _modules_matching(_DISK) <= documented
    assert {"castfind.store.index", "castfind.store.cache", "castfind.core.fsutil"} <= _modules_matching(_DISK)


def test_only_the_commands_architecture_names_print_or_exit() -> None:
    documented = _named_in_architecture("Only the commands print or exit")
    assert _modules_matching(_SPEAKS) == documented


def test_no_dataclass_is_mutable_but_the_two_accumulators_architecture_names() -> None:
    mutable = set()
    for p in sorted((REPO / "castfind").rglob("*.py")):
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                for dec in node.decorator_list:
                    call = dec if isinstance(dec, ast.Call) else None
                    name = ast.unparse(call.func if call else dec)
                    frozen = call is not None and any(k.arg == "frozen" and ast.unparse(k.value) == "True"
                                                      for k in call.keywords)
                    if name.endswith("dataclass") and not frozen:
                        mutable.add(f"{module_name(p)}.{node.name}")
    assert mutable == {"castfind.analysis.scan.ScanOutcome", "castfind.runtime.profiler._Cast"}
    text = (REPO / "ARCHITECTURE.md").read_text(encoding="utf-8")
    assert "`analysis.scan.ScanOutcome`" in text and "`runtime.profiler._Cast`" in text


def test_every_shipped_format_has_its_output_option() -> None:
    from castfind import options
    from castfind.report.registry import REPORTERS

    flags = {flag for opt in options.SCAN for flag in opt.flags}
    shipped = set(REPORTERS) - {"text"}  # text is the terminal report (stdout or --output)
    assert {f"--{name}-output" for name in shipped} - {"--sarif-output"} <= flags and "--sarif-output" in flags
    named = {f[2:-len("-output")] for f in flags if f.endswith("-output") and f != "--output"}
    assert named <= set(REPORTERS)
