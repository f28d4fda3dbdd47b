"""Put a profiler site back on the line of its cast, using the source file when it is at hand.

torch.profiler names a Python frame by the line where its function *starts*
(``attn.py(120): forward_decode``), not the line that was running (pytorch/pytorch#167605).
The recorder and the static findings speak of the cast's own line, so the importer looks
the function up in the source and, when it holds exactly one matching cast call, uses
that call's line and the function's qualified name.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass

from castfind.core import casts


def methods_for(op: str) -> frozenset[str]:
    """The tensor methods whose call may be the source line of a profiled ``op``, from :data:`castfind.core.casts.CASTS`.

    ``aten::copy`` (the out-of-place form) comes from ``copy_`` too; every other cast op from the
    methods that dispatch to ``aten::_to_copy``. Read on each call so the table is the only list.
    """
    return casts.located_methods(casts.COPY if op in ("aten::copy_", "aten::copy") else casts.TO_COPY)


@dataclass(frozen=True, slots=True)
class Located:
    """Where a cast really is: ``line`` is ``None`` when the source could not single it out."""

    line: int | None
    qualname: str | None
    note: str = ""  # why the line could not be pinned, for the trace record


@dataclass(frozen=True, slots=True)
class _Function:
    qualname: str
    calls: tuple[tuple[str, int], ...]  # (method name, line of the method name)


class SourceIndex:
    """Parsed source files, looked up by the (often sys.path-relative) path the profiler prints."""

    def __init__(self, roots: tuple[str, ...] = ()) -> None:
        self.roots = tuple(roots) + (os.getcwd(),)
        self._files: dict[str, dict[tuple[str, int], _Function] | str] = {}

    def resolve(self, path: str) -> str | None:
        """The file on disk for a trace path, or ``None``.

        An absolute path (as the profiler prints files outside ``sys.path``) is taken as it
        is: it names the profiled machine's file. A relative one is looked up in each root
        and must stay inside it once ``..`` and symlinks are resolved.
        """
        if os.path.isabs(path):
            return path if os.path.isfile(path) else None
        for root in self.roots:
            candidate = os.path.join(root, path)
            real_root, real = os.path.realpath(root), os.path.realpath(candidate)
            if os.path.commonpath([real_root, real]) == real_root and os.path.isfile(real):
                return candidate
        return None

    def locate(self, path: str, def_line: int, name: str, op: str, method: str | None) -> Located:
        """The cast's line inside function ``name`` that starts at ``def_line`` of ``path``."""
        if name == "<module>":
            return Located(None, None, "module-level frame: the profiler gives no line")
        functions = self._functions(path)
        if isinstance(functions, str):
            return Located(None, None, functions)
        function = functions.get((name, def_line))
        if function is None:
            return Located(None, None, f"no function {name} at line {def_line} in the source (changed since?)")
        wanted = methods_for(op)
        if method in wanted:
            wanted = frozenset({method})
        lines = sorted({line for attr, line in function.calls if attr in wanted})
        if len(lines) == 1:
            return Located(lines[0], function.qualname)
        if not lines:
            return Located(None, function.qualname, "no cast call in the function's source")
        return Located(None, function.qualname, f"{len(lines)} cast calls in the function; line is its first line")

    def _functions(self, path: str) -> dict[tuple[str, int], _Function] | str:
        cached = self._files.get(path)
        if cached is None:
            cached = self._files[path] = _index_file(self.resolve(path), path)
        return cached


def _index_file(filename: str | None, path: str) -> dict[tuple[str, int], _Function] | str:
    """Functions of one file keyed by (name, first line) as ``co_firstlineno`` gives it; or why not."""
    if filename is None:
        return f"source of {path} not found (pass --src)"
    try:
        with open(filename, "rb") as fh:
            tree = ast.parse(fh.read(), filename=filename)
    except (OSError, SyntaxError, ValueError, RecursionError) as exc:  # ValueError: NUL bytes; RecursionError: deep nesting
        return f"cannot parse {filename}: {type(exc).__name__}"
    functions: dict[tuple[str, int], _Function] = {}
    _walk(tree, "", functions)
    return functions


def _walk(node: ast.AST, prefix: str, out: dict[tuple[str, int], _Function]) -> None:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            qualname = f"{prefix}{child.name}"
            first = min([child.lineno] + [d.lineno for d in child.decorator_list])
            out[(child.name, first)] = _Function(qualname, tuple(_own_calls(child)))
            _walk(child, f"{qualname}.<locals>.", out)
        elif isinstance(child, ast.ClassDef):
            _walk(child, f"{prefix}{child.name}.", out)
        else:
            _walk(child, prefix, out)


def _own_calls(function: ast.AST) -> list[tuple[str, int]]:
    """Method calls in ``function`` itself, not in nested functions, classes or lambdas."""
    calls: list[tuple[str, int]] = []
    stack = list(ast.iter_child_nodes(function))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            # Python reports a call on the line of its method name (``.to(`` of a chained call).
            calls.append((node.func.attr, node.func.end_lineno or node.lineno))
        stack.extend(ast.iter_child_nodes(node))
    return calls
