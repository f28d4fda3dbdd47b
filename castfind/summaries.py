"""Function summaries: provenance across calls.

:class:`~castfind.provenance.Provenance` walks a cast's operand back *inside* its function. Two
function boundaries stop that walk, and this module carries it over both (it is the walk's
:class:`~castfind.provenance.AcrossCalls`):

- **A parameter.** ``def _forward_decode(self, x, conv_weights): ... conv_weights.to(d)``: the
  operand is whatever the callers pass. For each caller the call graph knows (the same edges the
  hot-path search uses), the argument bound to the parameter (by keyword, or by position after the
  bound ``self``) is walked back in the caller. The first caller that passes a whole buffer makes
  the cast a whole-buffer cast; the provenance then reads ``caller.py:L Cls.forward passes
  self.conv1d.weight.view(...) as conv_weights of Cls._forward_decode`` and goes on in the caller.
- **A helper's result.** ``x = unpack(pool.kv); x.float()``: when every ``return`` of the called
  function is a *full-size derivation* of one of its parameters — the parameter itself through
  views (``view``, ``reshape``, ``.T``, ...), whole-keeping indexes and casts (``.to(...)``,
  ``.float()``: a cast keeps every element) — the walk goes on with the argument the call passes
  for it.

Both are bounded: at most :data:`MAX_CALLS` boundaries per walk, and each summary is computed once
per run through the tracker (:meth:`castfind.memo.Tracker.cached`), so the files a summary read
are recorded as dependencies of the step that asked, and a warm run replays it only when none of
them changed.
"""

from __future__ import annotations

from functools import partial

from castfind.callgraph import CallGraph, Node
from castfind.facts import Attr, Call, Definition, Expr, FileFacts, Name, Subscript, render
from castfind.provenance import SPLITS, VIEW_ATTRIBUTES, Origin, Provenance
from castfind.resolve import Resolver

#: How many function boundaries (parameters or helper results) one provenance walk may cross.
MAX_CALLS = 2
_MAX_STEPS = 24


def argument(args: tuple[Expr, ...], kwargs: tuple[tuple[str, Expr], ...], starred: bool, fn: Definition,
             param: str, bound: bool) -> Expr | None:
    """The expression a call passes for ``param`` of ``fn`` (None when it passes none we can see).

    ``bound``: the call goes through an instance or class (``self.m(...)``, ``obj.m(...)``), so the
    first parameter of a method (``self``/``cls``) is not among the call's arguments.
    """
    for k, v in kwargs:
        if k == param:
            return v
    if param not in fn.params or starred:
        return None
    pos = fn.params.index(param)
    if pos >= fn.positional:
        return None  # keyword-only, *args or **kwargs
    pos -= 1 if bound else 0
    return args[pos] if 0 <= pos < len(args) else None


def is_bound(fn: Definition, func: str) -> bool:
    """Does calling ``fn`` as ``func`` (a dotted name) leave out its first parameter?"""
    return fn.kind == "method" and "staticmethod" not in fn.decorators and "." in func


class Summaries:
    """Answers the provenance walk at function boundaries, from the call graph and the resolver."""

    def __init__(self, resolver: Resolver, graph: CallGraph, provenance: Provenance) -> None:
        self.r = resolver
        self.graph = graph
        self.prov = provenance
        self._casts = {name for name, spec in provenance.rules.casts.items() if spec.operand == "receiver"}
        self._views = set(provenance.rules.views)

    # -- parameters: what the callers pass ------------------------------------------------------
    def parameter(self, facts: FileFacts, scope: str, name: str, depth: int) -> Origin | None:
        if depth >= MAX_CALLS or name in ("self", "cls"):
            return None
        node = (facts.module, scope)
        return self.r.tracker.cached(("passed", node, name, depth), partial(self._parameter, node, name, depth), None)

    def _parameter(self, node: Node, name: str, depth: int) -> Origin | None:
        fn = self.r.definitions(node[0]).get(node[1])
        if fn is None or fn.kind == "class":
            return None
        for caller in self.graph.callers(node):
            cfacts = self.r.modules.facts(caller[0])
            if cfacts is None:
                continue
            for cs in self.graph.sites(caller, node):
                arg = argument(cs.args, cs.kwargs, cs.starred, fn, name, is_bound(fn, cs.func))
                if arg is None:
                    continue
                o = self.prov.origin(cfacts, caller[1], arg, cs.line, depth + 1)
                if o is not None:
                    hop = f"{cfacts.path}:{cs.line} {caller[1]} passes {render(arg)} as {name} of {node[1]}"
                    return Origin(o.kind, o.path, (hop, *o.hops), o.names, o.classes)
        return None

    # -- helper results: a full-size derivation of an argument ----------------------------------
    def derived(self, facts: FileFacts, scope: str, call: Call, depth: int) -> tuple[Expr, str] | None:
        if depth >= MAX_CALLS or not isinstance(call.func, (Name, Attr)):
            return None
        targets = [t.target for t in self.r.resolve_expr(facts.module, scope, call.func)]
        defs = {(t.module, t.definition.qualname): t.definition for t in targets
                if t.kind == "def" and t.definition is not None and t.definition.kind != "class"}
        if len(defs) != 1 or len(targets) != 1:
            return None  # unknown, or several functions that could answer: no single summary
        (module, qualname), fn = next(iter(defs.items()))
        param = self.r.tracker.cached(("derives", module, qualname), partial(self._derives, module, fn), None)
        if param is None:
            return None
        func = render(call.func)
        arg = argument(call.args, call.kwargs, False, fn, param, is_bound(fn, func))
        if arg is None:
            return None
        return arg, f"{func}() returns its {param} at full size ({module}.{qualname}), here {render(arg)}"

    def _derives(self, module: str, fn: Definition) -> str | None:
        """The parameter every ``return`` of ``fn`` is a full-size derivation of, or None."""
        facts = self.r.modules.facts(module)
        if facts is None:
            return None
        rets = [r for r in facts.returns if r.scope == fn.qualname]
        found = {self._walk_to_param(facts, fn, r.value, r.line) for r in rets}
        if len(found) != 1:
            return None
        return found.pop()

    def _walk_to_param(self, facts: FileFacts, fn: Definition, expr: Expr, line: int) -> str | None:
        for _ in range(_MAX_STEPS):
            if isinstance(expr, Name):
                a = self.prov.assignment(facts, fn.qualname, expr.id, line)
                if a is not None and a.index is None and not a.loop:
                    expr, line = a.value, a.line
                    continue
                if a is None and expr.id in fn.params and expr.id not in ("self", "cls"):
                    return expr.id
                return None
            if isinstance(expr, Attr) and expr.attr in VIEW_ATTRIBUTES:
                expr = expr.value
                continue
            if isinstance(expr, Subscript) and self.prov.whole_index(expr.index, facts, fn.qualname, line):
                expr = expr.value
                continue
            if isinstance(expr, Call) and isinstance(expr.func, Attr):
                method = expr.func.attr
                if method in SPLITS:
                    return None
                if method in self._views or method in self._casts:
                    expr = expr.func.value
                    continue
            return None
        return None


__all__ = ["MAX_CALLS", "Summaries", "argument", "is_bound"]
