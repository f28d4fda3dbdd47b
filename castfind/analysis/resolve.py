"""Resolve: names → the definitions they stand for, with the chain of hops that leads there.

Follows ``import … as``, relative imports, package ``__init__`` re-exports, ``__all__`` and star
imports, module ``__getattr__`` that imports lazily, module-level aliases, conditional and repeated
bindings (all reported), function-local imports, names bound from a call whose function returns an
imported callable (tuple unpacking included), and attribute look-ups through the class hierarchy.
What cannot be followed statically becomes an ``unresolved`` target, never a guess.

Modules are parsed only when a resolution reaches them (:meth:`Modules.facts`). Look-ups are
memoised for the run in the memo's :class:`~castfind.store.memo.Tracker` (:meth:`Tracker.cached`), which
also records what each one read.

The public API — :meth:`Resolver.lookup`, :meth:`~Resolver.resolve_name`,
:meth:`~Resolver.resolve_expr`, :meth:`~Resolver.member`, :meth:`~Resolver.resolve_binding`,
:meth:`~Resolver.class_member`, :meth:`~Resolver.bases` — is what ``where``, the call graph and
the scan use; underscore methods are this module's own.
"""

from __future__ import annotations

import ast
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from castfind.core.sourcetext import may_bind
from castfind.core.types import Hop, HopKind
from castfind.read.facts import (
    Assign,
    Attr,
    Call,
    Const,
    Definition,
    Expr,
    FileFacts,
    Import,
    Name,
    Seq,
    dotted,
    from_dotted,
)
from castfind.store.index import Index
from castfind.store.memo import Tracker
from castfind.store.modules import Modules, OutOfTime
from castfind.store.words import Words

_MAX_DEPTH = 160  # about 3.5 Python frames per unit: well inside the default recursion limit
#: Resolution steps (calls of :meth:`Resolver.resolve_expr`, :meth:`~Resolver.returns_of` and
#: :meth:`~Resolver.class_member`) one outermost resolution may take before the rest of it is
#: reported as ``unresolved``. Memoised steps cost one each, so real code stays far below it.
STEP_BUDGET = 20_000

#: ``def`` (a function or class definition), ``module``, ``variable``/``alias`` (a module-level name
#: bound to a value castfind does not follow), ``instance`` (of a class), ``param`` (a parameter:
#: its value is unknown), ``unresolved`` (dynamic: ``reason`` says why).
TargetKind = Literal["def", "module", "variable", "alias", "instance", "param", "unresolved"]


class Clock:
    """A time budget of ``seconds`` (None: none), counted from ``start`` (a :func:`time.monotonic` reading:
    when the work it bounds began, default now). :meth:`spent` says whether it ran out or was ended;
    :attr:`out` says whether anything was left for it (an answer it cut is not the full answer)."""

    def __init__(self, seconds: float | None, start: float | None = None) -> None:
        #: The budget as given, in seconds (None: none).
        self.seconds = seconds
        self._end = None if seconds is None else (time.monotonic() if start is None else start) + seconds
        self.out = False
        self._ended = False

    def fits(self, seconds: float) -> bool:
        """Would work of ``seconds`` end within the budget, started now?"""
        return self._end is None or time.monotonic() + seconds <= self._end

    def stop(self) -> None:
        """End the budget now (work that would not fit was left)."""
        self.out = self._ended = True

    def skip(self) -> None:
        """Work that would not fit was left, and smaller work may still fit: the answer is cut, the budget goes on."""
        self.out = True

    def spent(self) -> bool:
        if self._end is not None and not self._ended and time.monotonic() > self._end:
            self.stop()
        return self._ended


@dataclass(frozen=True, slots=True)
class Target:
    """What a name resolves to."""

    kind: TargetKind
    module: str
    definition: Definition | None = None
    line: int = 0
    reason: str = ""
    name: str = ""

    @property
    def is_class(self) -> bool:
        return self.kind == "def" and self.definition is not None and self.definition.kind == "class"


@dataclass(frozen=True, slots=True)
class Resolved:
    target: Target
    chain: tuple[Hop, ...]


def absolute_module(module: str, is_package: bool, imp: Import) -> str:
    """The absolute module an import names (relative imports resolved against ``module``)."""
    if imp.level == 0:
        return imp.module
    parts = module.split(".") if is_package else module.split(".")[:-1]
    if imp.level > 1:
        parts = parts[: len(parts) - (imp.level - 1)] if imp.level - 1 <= len(parts) else []
    base = ".".join(parts)
    if imp.module:
        return f"{base}.{imp.module}" if base else imp.module
    return base


def written_module(module: str, is_package: bool, path: str) -> str:
    """A module path as written in ``module`` (``.kernels.add``, ``..ops``, ``pkg.sub``), made absolute."""
    rest = path.lstrip(".")
    level = len(path) - len(rest)
    return absolute_module(module, is_package, Import(rest.rstrip("."), None, None, level, 0, "", False))


class Resolver:
    """Name resolution over an :class:`Index` (memoised per module, scope and name)."""

    def __init__(self, index: Index, modules: Modules | None = None) -> None:
        self.index = index
        self.modules = modules if modules is not None else Modules(index)
        self.tracker = Tracker.of(index)
        #: Steps taken by every resolution of this resolver (``where`` reports it; tests bound it).
        self.steps = 0
        self._walk_start = 0  # ``steps`` when the outermost resolution now running began
        self._nesting = 0
        self.budget = STEP_BUDGET
        #: The lookup's time budget: past it every resolution still running stops (``_over``).
        self.clock = Clock(None)
        self._words: Words | None = None

    # -- budgets --------------------------------------------------------------------------------
    def _step(self) -> bool:
        """Count one step; False once the outermost resolution running has spent its budget."""
        if self._nesting == 0:
            self._walk_start = self.steps
        self.steps += 1
        return self.steps - self._walk_start <= self.budget

    def _over(self, module: str, line: int, name: str, what: str) -> list[Resolved]:
        """The ``unresolved`` entry a branch becomes past the depth, step or time budget."""
        why = (f"the lookup's time budget ({self.clock.seconds:g} s) ran out, or a module it needed would have run "
               f"it out; --time-budget 0 has no limit"
               if self.clock.out else f"{name or 'this value'} needs more than {_MAX_DEPTH} hops or {self.budget} steps")
        return [Resolved(Target("unresolved", module, line=line, name=name,
                                reason=f"castfind stopped following {what}: {why}"), ())]

    # -- helpers --------------------------------------------------------------------------------
    def hop(self, module: str, line: int, kind: HopKind) -> Hop:
        sf = self.modules.file(module)
        if sf is None:
            return Hop("", module, line, kind, "")
        return Hop(sf.root, sf.path, line, kind, self.index.line_text(sf, line))

    def definitions(self, module: str) -> dict[str, Definition]:
        """Definitions of a module by qualname."""

        def compute() -> dict[str, Definition]:
            try:
                f = self.modules.facts(module)
            except OutOfTime:
                return {}  # the lookup is cut (its clock says so): what it answers says what is left
            return {x.qualname: x for x in f.definitions} if f else {}

        return self.tracker.cached(("definitions", module), compute, {})

    def resolve_binding(self, facts: FileFacts, binding: Assign | Import) -> list[Resolved]:
        """What one assignment or import statement of ``facts`` binds its name to, with the hops."""
        if isinstance(binding, Import):
            return self._resolve_import(facts.module, facts, binding, 0)
        return self._resolve_assign(facts.module, binding, 0)

    def scope_of_line(self, facts: FileFacts, line: int) -> str:
        """The innermost def/class containing ``line`` ('' for module level)."""
        best: Definition | None = None
        for d in facts.definitions:
            if d.line <= line <= d.end_line and (best is None or d.line >= best.line):
                best = d
        return best.qualname if best else ""

    # -- module scope ---------------------------------------------------------------------------
    def lookup(self, module: str, name: str, depth: int = 0) -> list[Resolved]:
        """Bindings of ``name`` at the top level of ``module``, resolved."""
        return self._memoised((module, "", name), lambda: self._lookup(module, name, depth))

    def _memoised(self, key: tuple[str, str, str], compute: Callable[[], list[Resolved]]) -> list[Resolved]:
        # A re-entrant look-up (an import cycle) sees nothing.
        return self.tracker.cached(("resolve", *key), lambda: self._or_over(compute, key[0], key[2]), [])

    def _or_over(self, compute: Callable[[], list[Resolved]], module: str, name: str) -> list[Resolved]:
        """``compute()``, or the ``unresolved`` entry it becomes when it needs a module parsed after the time
        budget ran out (:class:`~castfind.store.modules.OutOfTime`)."""
        try:
            return compute()
        except OutOfTime as e:
            return self._over(module, 0, name, f"{name or 'a name'} into {e.args[0]}")

    def _lookup(self, module: str, name: str, depth: int) -> list[Resolved]:
        facts = self.modules.facts(module)
        if facts is None or depth > _MAX_DEPTH:
            return []
        out = self._bindings_in(facts, "", name, depth)
        if not out and any(lz.kind == "module" for lz in facts.lazy):
            # `sys.modules[__name__] = _LazyModule(...)`: at run time its table is the module (the
            # star imports under `if TYPE_CHECKING:` are for type checkers).
            out = self._lazy(module, facts, name, depth, "module")
        if not out:
            for imp in facts.imports:
                if imp.scope == "" and imp.name == "*":
                    src = absolute_module(module, facts.is_package, imp)
                    if self.star_exports(src, name):
                        h = self.hop(module, imp.line, "star-import")
                        out += [Resolved(r.target, (h, *r.chain)) for r in self.lookup(src, name, depth + 1)]
        if not out and facts.is_package and self.modules.has(f"{module}.{name}"):
            # `from pkg import _ops` imports the submodule before any `pkg.__getattr__` is asked.
            out.append(Resolved(Target("module", f"{module}.{name}", name=name), ()))
        if not out and facts.lazy:
            out = self._lazy(module, facts, name, depth, "getattr")
        if not out and "__getattr__" in self.definitions(module):
            lazy = [i for i in facts.imports if i.scope == "__getattr__" and i.bound == name]
            for imp in lazy:
                out += self._resolve_import(module, facts, imp, depth, kind="lazy-import")
            if not lazy:
                g = self.definitions(module)["__getattr__"]
                out.append(Resolved(Target("unresolved", module, line=g.line, name=name,
                                           reason=f"{module}.__getattr__ may provide {name!r} at run time"), ()))
        return out

    def _lazy(self, module: str, facts: FileFacts, name: str, depth: int, kind: str) -> list[Resolved]:
        """``name`` provided lazily by the module (:class:`~castfind.read.facts.LazyExport` of ``kind``): its
        ``__getattr__`` tables and branches, or a lazy-module table."""
        out: list[Resolved] = []
        for lz in facts.lazy:
            if lz.name != name or lz.kind != kind:
                continue
            h = self.hop(module, lz.line, "lazy-import")
            if not lz.source:  # a module-level name returned for it (`return NewName` after a warning)
                res = self.lookup(module, lz.attr, depth + 1) if lz.attr != name else []
            else:
                res = self._attribute_of(written_module(module, facts.is_package, lz.source), lz.attr, depth)
            out += [Resolved(r.target, (h, *r.chain)) for r in res]
        if out or name.startswith("_"):
            return out
        quoted = (f'"{name}"'.encode(), f"'{name}'".encode())
        for lz in facts.lazy:
            if lz.name == "*" and lz.attr == "__all__" and lz.kind == kind:
                # Every name in the `__all__` of a submodule: only files that hold the name as a
                # string (as `__all__` does) are read.
                pkg = written_module(module, facts.is_package, lz.source)
                h = self.hop(module, lz.line, "lazy-import")
                if self._words is None:
                    self._words = Words(self.index)
                for sf in self._words.containing([name]):
                    if not sf.module.startswith(pkg + ".") or not any(q in self.index.data(sf) for q in quoted):
                        continue
                    sub = self.index.facts_of(sf)
                    if sub.all_names is not None and name in sub.all_names:
                        out += [Resolved(r.target, (h, *r.chain)) for r in self.lookup(sf.module, name, depth + 1)]
        return out

    def _attribute_of(self, src: str, attr: str, depth: int) -> list[Resolved]:
        """``getattr(<module src>, attr)``; ``src`` may name a module or a module attribute (``pkg.sub.mod``)."""
        if self.modules.has(src):
            res = self.lookup(src, attr, depth + 1)
            if not res and self.modules.has(f"{src}.{attr}"):
                res = [Resolved(Target("module", f"{src}.{attr}", name=attr), ())]
            return res
        if "." not in src:
            return [Resolved(Target("unresolved", src, name=attr,
                                    reason=f"module {src} is in no root and not installed"), ())]
        parent, last = src.rsplit(".", 1)
        out: list[Resolved] = []
        for base in self._attribute_of(parent, last, depth + 1):
            if base.target.kind == "unresolved":
                out.append(base)
                continue
            out += [Resolved(r.target, (*base.chain, *r.chain)) for r in self.member(base.target, attr, depth + 1)]
        return out

    def _holders(self, name: str) -> frozenset[str]:
        """The modules whose file holds ``name`` as an identifier (text first: nothing is parsed)."""
        def compute() -> frozenset[str]:
            if self._words is None:
                self._words = Words(self.index)
            return frozenset(sf.module for sf in self._words.containing([name]))

        return self.tracker.cached(("holders", name), compute, frozenset())

    def star_exports(self, module: str, name: str) -> bool:
        """Does ``from module import *`` bind ``name``? Demand-driven: a star import is followed only
        into modules that hold the name or whose package does (``from .models import *`` of a few
        hundred packages reads one), and a module not parsed yet is parsed only when its code could bind
        the name (:func:`~castfind.core.sourcetext.may_bind`: a 230 KB module whose docstrings mention a
        name its package provides lazily is not parsed to learn that it does not define it)."""
        def compute() -> bool:
            sf = self.modules.file(module)
            if sf is None:
                return False
            if self.index.load_known([sf]) and not may_bind(self.index.data(sf), name):
                return False
            facts = self.modules.facts(module)
            if facts is None:
                return False
            if facts.all_names is not None:
                return name in facts.all_names
            if name.startswith("_"):
                return False
            if any(d.name == name and d.parent == "" for d in facts.definitions) or any(
                    a.scope == "" and a.target == name for a in facts.assigns) or any(
                    i.scope == "" and i.name != "*" and i.bound == name for i in facts.imports):
                return True
            holders = self._holders(name)
            for imp in facts.imports:
                if imp.scope == "" and imp.name == "*":
                    src = absolute_module(module, facts.is_package, imp)
                    if src != module and (src in holders or any(h.startswith(src + ".") for h in holders)) \
                            and self.star_exports(src, name):
                        return True
            return False

        return self.tracker.cached(("star-exports", module, name), compute, False)

    def exports(self, module: str) -> set[str]:
        """Names ``from module import *`` binds: ``__all__``, else every public top-level name."""
        facts = self.modules.facts(module)
        if facts is None:
            return set()
        if facts.all_names is not None:
            return set(facts.all_names)
        names = {d.name for d in facts.definitions if d.parent == ""}
        names |= {a.target for a in facts.assigns if a.scope == "" and "." not in a.target}
        names |= {i.bound for i in facts.imports if i.scope == "" and i.name != "*"}
        for imp in facts.imports:
            if imp.scope == "" and imp.name == "*":
                names |= self.exports(absolute_module(module, facts.is_package, imp)) if module != imp.module else set()
        return {n for n in names if not n.startswith("_")}

    # -- any scope ------------------------------------------------------------------------------
    def _bindings_in(self, facts: FileFacts, scope: str, name: str, depth: int) -> list[Resolved]:
        """Every binding of ``name`` directly in ``scope`` of this file, in source order."""
        module = facts.module
        found: list[tuple[int, list[Resolved]]] = []
        for d in facts.definitions:
            if d.parent == scope and d.name == name:
                found.append((d.line, [Resolved(Target("def", module, d, d.line, name=name), ())]))
        for a in facts.assigns:
            if a.scope == scope and a.target == name:
                found.append((a.line, self._resolve_assign(module, a, depth)))
        for imp in facts.imports:
            if imp.scope == scope and imp.name != "*" and imp.bound == name:
                found.append((imp.line, self._resolve_import(module, facts, imp, depth)))
        for dyn in facts.dynamic:
            if dyn.scope == scope and dyn.target == name:
                found.append((dyn.line, [Resolved(Target("unresolved", module, line=dyn.line, name=name,
                                                         reason=dyn.reason), ())]))
        found.sort(key=lambda x: x[0])
        return [r for _, rs in found for r in rs]

    def resolve_name(self, module: str, scope: str, name: str, depth: int = 0) -> list[Resolved]:
        """``name`` as Python sees it inside ``scope`` (LEGB, class bodies skipped for nested scopes)."""
        if scope == "":
            return self.lookup(module, name, depth)
        return self._memoised((module, scope, name), lambda: self._resolve_in_scope(module, scope, name, depth))

    def _resolve_in_scope(self, module: str, scope: str, name: str, depth: int) -> list[Resolved]:
        facts = self.modules.facts(module)
        out: list[Resolved] = []
        if facts is not None and depth <= _MAX_DEPTH:
            defs = self.definitions(module)
            d = defs.get(scope)
            if d is not None and d.kind in ("function", "method") and name in d.params:
                out = self._param(module, d, name)
            else:
                out = self._bindings_in(facts, scope, name, depth)
            if not out:
                parent = d.parent if d is not None else ""
                while parent and defs.get(parent) is not None and defs[parent].kind == "class":
                    parent = defs[parent].parent
                out = self.resolve_name(module, parent, name, depth + 1)
        return out

    def _param(self, module: str, fn: Definition, name: str) -> list[Resolved]:
        """A parameter: ``self``/``cls`` of a method stand for its class; others stop here."""
        if fn.kind == "method" and fn.params and name == fn.params[0] and "staticmethod" not in fn.decorators:
            cls = self.definitions(module).get(fn.parent)
            if cls is not None:
                kind: TargetKind = "def" if "classmethod" in fn.decorators else "instance"
                return [Resolved(Target(kind, module, cls, cls.line, name=name), ())]
        return [Resolved(Target("param", module, fn, fn.line, name=name), ())]

    def _resolve_import(self, module: str, facts: FileFacts, imp: Import, depth: int,
                        kind: HopKind = "import") -> list[Resolved]:
        h = self.hop(module, imp.line, kind)
        src = absolute_module(module, facts.is_package, imp)
        if imp.name is None:
            target_mod = src if imp.alias else src.split(".")[0]
            if self.modules.has(target_mod):
                return [Resolved(Target("module", target_mod, name=imp.bound), (h,))]
            return [Resolved(Target("unresolved", module, line=imp.line, name=imp.bound,
                                    reason=f"module {target_mod} is in no root and not installed"), (h,))]
        if not self.modules.has(src):
            return [Resolved(Target("unresolved", module, line=imp.line, name=imp.bound,
                                    reason=f"module {src} is in no root and not installed"), (h,))]
        res = self.lookup(src, imp.name, depth + 1)
        if not res and self.modules.has(f"{src}.{imp.name}"):
            res = [Resolved(Target("module", f"{src}.{imp.name}", name=imp.name), ())]
        if not res:
            res = [Resolved(Target("unresolved", src, line=imp.line, name=imp.name,
                                   reason=f"{src} defines no {imp.name!r} that castfind can see"), ())]
        return [Resolved(r.target, (h, *r.chain)) for r in res]

    def _dynamic_at(self, module: str, scope: str, line: int) -> list[Resolved]:
        """An unresolvable construct (computed getattr/import) on this line of this scope."""
        facts = self.modules.facts(module)
        return [Resolved(Target("unresolved", module, line=d.line, name=d.target or "", reason=d.reason), ())
                for d in (facts.dynamic if facts else ()) if d.scope == scope and d.line == line]

    def _resolve_assign(self, module: str, a: Assign, depth: int) -> list[Resolved]:
        h = self.hop(module, a.line, "alias")
        dyn = self._dynamic_at(module, a.scope, a.line)
        if dyn:
            return [Resolved(r.target, (h,)) for r in dyn]
        res = self.resolve_expr(module, a.scope, a.value, depth + 1, a.index)
        res = [r for r in res if r.target.kind not in ("param",)]
        if not res:
            kind: TargetKind = "alias" if dotted(a.value) else "variable"
            return [Resolved(Target(kind, module, line=a.line, name=a.target), (h,))]
        return [Resolved(r.target, (h, *r.chain)) for r in res]

    # -- expressions ----------------------------------------------------------------------------
    def resolve_expr(self, module: str, scope: str, expr: Expr, depth: int = 0,
                     index: int | None = None) -> list[Resolved]:
        """What an expression evaluates to, as far as it is a name, attribute or call result."""
        if depth > _MAX_DEPTH or not self._step():
            return self._over(module, 0, dotted(expr) or "", f"an expression in {module}")
        self._nesting += 1
        try:
            return self._resolve_expr(module, scope, expr, depth, index)
        except OutOfTime as e:
            return self._over(module, 0, dotted(expr) or "", f"an expression in {module} into {e.args[0]}")
        finally:
            self._nesting -= 1

    def _resolve_expr(self, module: str, scope: str, expr: Expr, depth: int,
                      index: int | None) -> list[Resolved]:
        if index is not None and isinstance(expr, Seq):
            return self.resolve_expr(module, scope, expr.elts[index], depth + 1) if index < len(expr.elts) else []
        if isinstance(expr, Name):
            return self.resolve_name(module, scope, expr.id, depth + 1)
        if isinstance(expr, Attr):
            out = []
            for base in self.resolve_expr(module, scope, expr.value, depth + 1):
                if base.target.kind == "unresolved":
                    out.append(base)  # `dynamic_module.attr` is as unknown as the module
                    continue
                for r in self.member(base.target, expr.attr, depth + 1):
                    out.append(Resolved(r.target, (*base.chain, *r.chain)))
            return out
        if isinstance(expr, Call):
            out = []
            for fn in self.resolve_expr(module, scope, expr.func, depth + 1):
                t = fn.target
                if t.kind == "def" and t.definition is not None and t.definition.kind == "class":
                    out.append(Resolved(Target("instance", t.module, t.definition, t.line, name=t.name), fn.chain))
                elif t.kind == "def" and t.definition is not None:
                    got = self.returns_of(t.module, t.definition, index, depth + 1)
                    local = f"{t.module}.{t.definition.qualname}.<locals>."
                    if index is None and all(r.target.kind == "unresolved" or (
                            r.target.definition is not None
                            and f"{r.target.module}.{r.target.definition.qualname}".startswith(local)) for r in got):
                        # `lazy("pkg.sub", "fn")`: the literal strings may say what it returns (or what
                        # the closure it returns calls), which beats "computed at run time".
                        bound = self._bind_strings(module, scope, t.definition, expr, {})
                        if bound:
                            got = self._dispatched(t.module, t.definition, bound, depth + 1) or got
                    out += [Resolved(r.target, (*fn.chain, *r.chain)) for r in got]
            return out
        return []

    # -- string dispatch ------------------------------------------------------------------------
    # A module path and an attribute name passed as strings (``lazy("pkg.ops", "fn")``) are values:
    # they flow through parameters (and their string defaults), closures' free variables, local names
    # and helper calls, each call with its own literals, into ``import_module``/``__import__`` and
    # ``getattr``. A string computed at run time (an f-string, a join of variables) is no value here:
    # what it feeds stays ``unresolved``.

    def _enclosing(self, module: str, scope: str) -> list[str]:
        """``scope`` and the function scopes around it, innermost first, then the module ('')."""
        defs = self.definitions(module)
        out = []
        while scope:
            d = defs.get(scope)
            if d is None:
                break
            if d.kind != "class":
                out.append(scope)
            scope = d.parent
        return [*out, ""]

    def _local_values(self, module: str, scope: str, name: str) -> list[Expr] | None:
        """What ``name`` is assigned in the innermost enclosing scope that binds it (None: a parameter
        or no assignment castfind sees)."""
        facts = self.modules.facts(module)
        if facts is None:
            return None
        defs = self.definitions(module)
        for s in self._enclosing(module, scope):
            d = defs.get(s)
            if d is not None and name in d.params:
                return None
            vals = [a.value for a in facts.assigns if a.scope == s and a.target == name and a.index is None
                    and not a.loop]
            if vals:
                return vals
        return None

    def _string(self, module: str, scope: str, expr: Expr, env: dict[str, str]) -> str | None:
        """A string literal, a name bound to one in ``env`` (parameters, free variables), or a name
        assigned one literal (and nothing else) in an enclosing scope."""
        if isinstance(expr, Const):
            try:
                value = ast.literal_eval(expr.text)
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                return None  # an f-string, a concatenation: computed at run time
            return value if isinstance(value, str) else None
        if isinstance(expr, Name):
            if expr.id in env:
                return env[expr.id]
            vals = self._local_values(module, scope, expr.id)
            if vals is not None and len(vals) == 1 and isinstance(vals[0], Const):
                return self._string(module, scope, vals[0], {})
        return None

    def _module_named(self, module: str, scope: str, expr: Expr, env: dict[str, str], hops: int = 0) -> str | None:
        """The module an expression imports by name: ``import_module(s)``, ``__import__(s, fromlist=…)``
        (the top-level package without ``fromlist``), or a local name assigned one of them."""
        if isinstance(expr, Name) and hops < 4:
            vals = self._local_values(module, scope, expr.id)
            if vals is not None and len(vals) == 1:
                return self._module_named(module, scope, vals[0], env, hops + 1)
            return None
        if not isinstance(expr, Call) or not expr.args:
            return None
        fname = (dotted(expr.func) or "").rsplit(".", 1)[-1]
        if fname not in ("import_module", "__import__"):
            return None
        name = self._string(module, scope, expr.args[0], env)
        if name is None or name.startswith("."):
            return None
        if fname == "__import__" and len(expr.args) < 4 and not any(k == "fromlist" for k, _ in expr.kwargs):
            return name.split(".")[0]
        return name

    def _bind_strings(self, module: str, scope: str, fn: Definition, call: Call,
                      env: dict[str, str]) -> tuple[tuple[str, str], ...]:
        """The parameters of ``fn`` that ``call`` passes a string (a literal or a name that holds one),
        then those it leaves to a string default."""
        out: dict[str, str] = {}
        passed: set[str] = set()
        params = fn.params[1:] if fn.kind == "method" and "staticmethod" not in fn.decorators else fn.params
        for param, arg in zip(params[: fn.positional], call.args, strict=False):
            passed.add(param)
            if (v := self._string(module, scope, arg, env)) is not None:
                out[param] = v
        for key, arg in call.kwargs:
            passed.add(key)
            if key in params and (v := self._string(module, scope, arg, env)) is not None:
                out[key] = v
        for param, default in fn.param_strings:
            if param not in passed:
                out[param] = default
        return tuple(sorted(out.items()))

    def _dispatched(self, module: str, fn: Definition, bound: tuple[tuple[str, str], ...],
                    depth: int) -> list[Resolved]:
        """What ``fn`` returns when the names ``bound`` hold those strings (its parameters, and the free
        variables of an enclosing call): ``getattr(import_module(mod), attr)``, a helper called with
        them, or a closure that calls what such a helper returns."""
        if depth > _MAX_DEPTH or not self._step():
            return self._over(module, fn.line, fn.name, f"what {fn.qualname} returns for {dict(bound)}")
        self._nesting += 1
        try:
            return self.tracker.cached(("dispatch", module, fn.qualname, bound), lambda: self._or_over(
                lambda: self._dispatched_now(module, fn, dict(bound), depth), module, fn.name), [])
        finally:
            self._nesting -= 1

    def _dispatched_now(self, module: str, fn: Definition, env: dict[str, str], depth: int) -> list[Resolved]:
        facts = self.modules.facts(module)
        if facts is None:
            return []
        out: list[Resolved] = []
        call_hop = self.hop(module, fn.line, "call")
        for ret in facts.returns:
            if ret.scope == fn.qualname:
                h = self.hop(module, ret.line, "return")
                for r in self._dispatch_value(module, fn.qualname, ret.value, env, depth + 1, closure=True):
                    out.append(Resolved(r.target, (call_hop, h, *r.chain)))
        return out

    def _dispatch_value(self, module: str, scope: str, value: Expr, env: dict[str, str], depth: int,
                        closure: bool = False) -> list[Resolved]:
        """What ``value`` (in ``scope``, the strings ``env`` bound) names. ``closure``: a nested def it
        names stands for what that def calls (the factory's closure calls the kernel)."""
        if depth > _MAX_DEPTH or not self._step():
            return self._over(module, 0, dotted(value) or "", f"a string-dispatched value in {module}")
        if isinstance(value, Name):
            nested = self.definitions(module).get(f"{scope}.<locals>.{value.id}")
            if nested is not None and closure and nested.kind == "function":
                return self._closure_calls(module, nested, env, depth + 1)
            vals = self._local_values(module, scope, value.id)
            return [r for v in vals or () for r in self._dispatch_value(module, scope, v, env, depth + 1)]
        if not isinstance(value, Call):
            return []
        if (dotted(value.func) or "").rsplit(".", 1)[-1] == "getattr" and len(value.args) >= 2:
            mod = self._module_named(module, scope, value.args[0], env)
            attr = self._string(module, scope, value.args[1], env)
            if mod is None or attr is None:
                # Reached with some strings bound, but not these: they are computed at run time.
                what = "the module path" if mod is None else "the attribute name"
                return [Resolved(Target("unresolved", module, line=self._line_of_return(module, scope, value),
                                        name=dotted(value.args[0]) or "",
                                        reason=f"getattr of a module imported by name: {what} is computed at run time"), ())]
            return self._attribute_of(mod, attr, depth)
        imported = self._module_named(module, scope, value, env)
        if imported is not None:
            return [Resolved(Target("module", imported, name=imported.rsplit(".", 1)[-1]), ())] \
                if self.modules.has(imported) else []
        out: list[Resolved] = []
        for fn in self.resolve_expr(module, scope, value.func, depth + 1):
            t = fn.target
            if t.kind == "def" and t.definition is not None and t.definition.kind != "class":
                d = t.definition
                # A nested helper sees the enclosing call's strings (its free variables) as well as its own.
                inherited = env if t.module == module and d.parent and (
                    scope == d.parent or scope.startswith(d.parent + ".")) else {}
                bound = tuple(sorted({**inherited, **dict(self._bind_strings(module, scope, d, value, env))}.items()))
                if bound:
                    out += [Resolved(r.target, (*fn.chain, *r.chain)) for r in self._dispatched(t.module, d, bound, depth + 1)]
        return out

    def _line_of_return(self, module: str, scope: str, value: Expr) -> int:
        """The line of the ``return`` (or assignment) in ``scope`` whose value is ``value``."""
        facts = self.modules.facts(module)
        if facts is None:
            return 0
        lines = [r.line for r in facts.returns if r.scope == scope and r.value == value]
        lines += [a.line for a in facts.assigns if a.scope == scope and a.value == value]
        return min(lines, default=0)

    def _closure_calls(self, module: str, fn: Definition, env: dict[str, str], depth: int) -> list[Resolved]:
        """What a closure returned by a factory calls (``return lazy(mod, attr)(*a)``, ``return
        _kernel()(*a)``, ``k = _kernel(); return k(*a)``), its free variables bound by ``env``."""
        facts = self.modules.facts(module)
        out: list[Resolved] = []
        for ret in facts.returns if facts is not None else ():
            if ret.scope == fn.qualname and isinstance(ret.value, Call):
                h = self.hop(module, ret.line, "return")
                for r in self._dispatch_value(module, fn.qualname, ret.value.func, env, depth + 1):
                    out.append(Resolved(r.target, (h, *r.chain)))
        return out

    def returns_of(self, module: str, fn: Definition, index: int | None, depth: int) -> list[Resolved]:
        """What a function returns, resolved in its own scope (``return imported_fn, X``); memoised
        per function and index, so helpers returning calls of helpers cost one walk each."""
        if depth > _MAX_DEPTH or not self._step():
            return self._over(module, fn.line, fn.name, f"what {fn.qualname} returns")
        self._nesting += 1
        try:
            # A recursive helper (directly or through others) sees nothing of itself while it is walked.
            return self.tracker.cached(("returns", module, fn.qualname, index), lambda: self._or_over(
                lambda: self._returns_of(module, fn, index, depth), module, fn.name), [])
        finally:
            self._nesting -= 1

    def _returns_of(self, module: str, fn: Definition, index: int | None, depth: int) -> list[Resolved]:
        facts = self.modules.facts(module)
        if facts is None:
            return []
        out: dict[Target, Resolved] = {}  # one chain per target: two returns of one value do not double it
        call_hop = self.hop(module, fn.line, "call")
        for ret in facts.returns:
            if ret.scope != fn.qualname:
                continue
            if index is not None and not isinstance(ret.value, Seq):
                continue
            h = self.hop(module, ret.line, "return")
            for r in self._dynamic_at(module, fn.qualname, ret.line):
                out.setdefault(r.target, Resolved(r.target, (call_hop, h)))
            for r in self.resolve_expr(module, fn.qualname, ret.value, depth + 1, index):
                if r.target.kind in ("def", "module", "unresolved"):
                    out.setdefault(r.target, Resolved(r.target, (call_hop, h, *r.chain)))
        return list(out.values())

    def member(self, target: Target, attr: str, depth: int = 0) -> list[Resolved]:
        """``target.attr``: a module attribute, or a class member through the class hierarchy."""
        if target.kind == "module":
            return self.lookup(target.module, attr, depth + 1)
        if target.kind in ("def", "instance") and target.definition is not None and target.definition.kind == "class":
            return self.class_member(target.module, target.definition, attr, depth + 1)
        return []

    def class_member(self, module: str, cls: Definition, attr: str, depth: int = 0,
                     seen: frozenset[tuple[str, str]] = frozenset()) -> list[Resolved]:
        """``attr`` in ``cls`` or, when not defined there, in its bases (left to right, depth first)."""
        if (module, cls.qualname) in seen:
            return []
        if depth > _MAX_DEPTH or not self._step():
            return self._over(module, cls.line, attr, f"the bases of {cls.qualname}")
        seen = seen | {(module, cls.qualname)}
        try:
            facts = self.modules.facts(module)
        except OutOfTime as e:
            return self._over(module, cls.line, attr, f"the bases of {cls.qualname} into {e.args[0]}")
        if facts is None:
            return []
        own = self._bindings_in(facts, cls.qualname, attr, depth)
        if own:
            return own
        for base in self.bases(module, cls, depth):
            t = base.target
            if t.definition is None:
                continue
            found = self.class_member(t.module, t.definition, attr, depth + 1, seen)
            if found:
                return [Resolved(r.target, (*base.chain, *r.chain)) for r in found]
        return []

    def bases(self, module: str, cls: Definition, depth: int = 0) -> list[Resolved]:
        """The base classes of ``cls`` that resolve to classes in the index."""
        out = []
        for b in cls.bases:
            for r in self.resolve_expr(module, cls.parent, from_dotted(b), depth + 1):
                if r.target.is_class:
                    h = self.hop(module, cls.line, "base")
                    out.append(Resolved(r.target, (h, *r.chain)))
        return out
