#!/usr/bin/env python3
"""Enumerate the dtype-changing cast calls in parts of an sglang wheel and draw
the hand-labelling sample (stdlib only, deterministic).

Usage:
    python scripts/cast_population.py [--pkg PATH/TO/sglang] [--out labels/sglang-0.5.23]

--pkg is the unpacked ``sglang`` package directory (the one holding ``srt/``).
Paths in the output are relative to that directory's parent, so they start
with ``sglang/``.

A cast call is any call ``<expr>.<name>(...)`` where

* name is ``to`` or ``type`` and the arguments include a dtype: a ``dtype=``
  keyword, a ``torch.<dtype>`` attribute, or a name/attribute whose last part
  ends in ``dtype`` (``dtype``, ``kv_cache_dtype``, ``x.dtype`` ...);
  ``.to(device)`` alone is not a cast;
* name is one of ``float half bfloat16 double int long short byte char bool``;
* name is ``type_as`` or ``copy_`` (``copy_`` may change dtype).

Population A: the call sits inside a function named ``forward*``, ``apply*``,
``run*`` or ``__call__``, or in a function nested (at any depth) inside one.
Population B: every other cast call (including module and class level).

Selection: all of A, plus ``random.Random(20261203).sample(sorted(B), 200)``.
This module uses no part of castfind.
"""

from __future__ import annotations

import argparse
import ast
import csv
import os
import random
import sys
from dataclasses import dataclass
from pathlib import Path

SEED = 20261203
SAMPLE_B = 200
SUBDIRS = (
    "srt/layers/attention",
    "srt/layers/quantization",
    "srt/layers/moe",
    "srt/mem_cache",
)
MODEL_GLOB = "deepseek*.py"  # under srt/models/

TORCH_DTYPES = frozenset(
    [
        "float",
        "float16",
        "float32",
        "float64",
        "half",
        "double",
        "bfloat16",
        "bool",
        "int",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "short",
        "long",
        "complex64",
        "complex128",
        "cfloat",
        "cdouble",
        "chalf",
        "complex32",
        "float8_e4m3fn",
        "float8_e4m3fnuz",
        "float8_e5m2",
        "float8_e5m2fnuz",
        "float8_e8m0fnu",
        "float4_e2m1fn_x2",
        "qint8",
        "quint8",
        "qint32",
        "quint4x2",
    ]
)
NOARG_CASTS = frozenset(["float", "half", "bfloat16", "double", "int", "long", "short", "byte", "char", "bool"])
HOT_PREFIXES = ("forward", "apply", "run")


@dataclass(frozen=True, order=True)
class Cast:
    path: str
    line: int
    column: int
    function: str
    expr: str
    population: str


def _last_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _is_dtype_arg(node: ast.expr) -> bool:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "torch" and node.attr in TORCH_DTYPES:
        return True
    name = _last_name(node)
    return name is not None and name.endswith("dtype")


def is_cast_call(node: ast.Call) -> bool:
    func = node.func
    if not isinstance(func, ast.Attribute):
        return False
    name = func.attr
    if name in ("to", "type"):
        if any(kw.arg == "dtype" for kw in node.keywords):
            return True
        return any(_is_dtype_arg(a) for a in node.args)
    return name in NOARG_CASTS or name in ("type_as", "copy_")


def _is_hot_name(name: str) -> bool:
    return name.startswith(HOT_PREFIXES) or name == "__call__"


class _Walker(ast.NodeVisitor):
    def __init__(self, path: str, source: str) -> None:
        self.path = path
        self.source = source
        self.scope: list[tuple[str, str]] = []  # (kind, name)
        self.found: list[Cast] = []

    def _qualname(self) -> str:
        parts: list[str] = []
        for i, (kind, name) in enumerate(self.scope):
            parts.append(name)
            if kind == "def" and i < len(self.scope) - 1:
                parts.append("<locals>")
        return ".".join(parts) if parts else "<module>"

    def _in_hot(self) -> bool:
        return any(k == "def" and _is_hot_name(n) for k, n in self.scope)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for d in node.decorator_list:
            self.visit(d)
        for b in node.bases:
            self.visit(b)
        self.scope.append(("class", node.name))
        for stmt in node.body:
            self.visit(stmt)
        self.scope.pop()

    def _visit_def(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        # decorators and defaults are evaluated in the enclosing scope
        for d in node.decorator_list:
            self.visit(d)
        self.visit(node.args)
        self.scope.append(("def", node.name))
        for stmt in node.body:
            self.visit(stmt)
        self.scope.pop()

    visit_FunctionDef = _visit_def
    visit_AsyncFunctionDef = _visit_def

    def visit_Call(self, node: ast.Call) -> None:
        if is_cast_call(node):
            seg = ast.get_source_segment(self.source, node) or ""
            text = " ".join(seg.split())[:160]
            self.found.append(
                Cast(
                    path=self.path,
                    line=node.lineno,
                    column=node.col_offset + 1,
                    function=self._qualname(),
                    expr=text,
                    population="A" if self._in_hot() else "B",
                )
            )
        self.generic_visit(node)


def iter_files(pkg: Path) -> list[Path]:
    files: list[Path] = []
    for sub in SUBDIRS:
        base = pkg / sub
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames.sort()
            files.extend(Path(dirpath) / f for f in sorted(filenames) if f.endswith(".py"))
    files.extend(sorted((pkg / "srt" / "models").glob(MODEL_GLOB)))
    return sorted(set(files))


def collect(pkg: Path) -> list[Cast]:
    out: list[Cast] = []
    for f in iter_files(pkg):
        rel = f.relative_to(pkg.parent).as_posix()
        source = f.read_text(encoding="utf-8")
        w = _Walker(rel, source)
        w.visit(ast.parse(source, filename=str(f)))
        out.extend(w.found)
    return sorted(out)


def main(argv: list[str] | None = None) -> int:
    repo = Path(__file__).resolve().parent.parent
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pkg", type=Path, default=repo / ".corpus" / "sglang" / "sglang")
    ap.add_argument("--out", type=Path, default=repo / "labels" / "sglang-0.5.23")
    args = ap.parse_args(argv)

    casts = collect(args.pkg)
    pop_a = [c for c in casts if c.population == "A"]
    pop_b = sorted(c for c in casts if c.population == "B")
    sample_b = random.Random(SEED).sample(pop_b, min(SAMPLE_B, len(pop_b)))
    selected = set(pop_a) | set(sample_b)

    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "population.csv", "w", newline="", encoding="utf-8") as fh:
        wr = csv.writer(fh, lineterminator="\n")
        wr.writerow(["path", "line", "column", "function", "expr", "population", "selected"])
        for c in casts:
            wr.writerow([c.path, c.line, c.column, c.function, c.expr, c.population, "yes" if c in selected else "no"])

    print(f"files scanned: {len(iter_files(args.pkg))}")
    print(f"casts: {len(casts)}")
    print(f"population A: {len(pop_a)}")
    print(f"population B: {len(pop_b)}")
    print(f"sampled from B: {len(sample_b)} (seed {SEED})")
    print(f"selected: {len(selected)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
