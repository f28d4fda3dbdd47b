"""Function summaries: provenance across calls.

:class:`~castfind.analysis.provenance.Provenance` walks a cast's operand back *inside* its function. Two
function boundaries stop that walk, and this module carries it over both (it is the walk's
:class:`~castfind.analysis.provenance.AcrossCalls`):

- **A parameter.** ``def _forward_decode(self, x, conv_weights): ... conv_weights.to(d)``: the
  operand is whatever the callers pass. The scan goes *forward* first (:meth:`Summaries.handoffs`):
  every call, in the files that name a buffer, that passes a whole buffer as an argument is a
  *handoff* to the parameter it binds (by keyword, or by position after a bound ``self``), its callee
  found by name, in the class for ``self.m()``, through the receiver's declared type
  (:mod:`castfind.analysis.receivers`), or by name when few functions carry it. A cast of a parameter some
  handoff reaches is a whole-buffer cast; the provenance then reads ``caller.py:L Cls.forward passes
  self.conv1d.weight.view(...) as conv_weights of Cls._forward_decode`` and goes on in the caller.
  Parameters no handoff reaches are not searched through every caller (a ``forward``'s ``x`` has
  hundreds): only calls that pass whole buffers can make a parameter whole. Calls from outside the
  report scope hand nothing that counts; the callers that run per step are tried first (then the
  once-functions), and a buffer the kind's ``exclude`` takes out only when no caller hands another.
  Which of those callers runs the function decides hot and once (:mod:`castfind.analysis.checker`).
- **A helper's result.** ``x = unpack(pool.kv); x.float()``: when every ``return`` of the called
  function is a *full-size derivation* of one of its parameters — the parameter itself through
  views (``view``, ``reshape``, ``.T``, ...), whole-keeping indexes and casts (``.to(...)``,
  ``.float()``: a cast keeps every element) — the walk goes on with the argument the call passes
  for it.

Both are bounded: at most :data:`MAX_CALLS` boundaries per walk, and each summary is computed once
per run through the tracker (:meth:`castfind.store.memo.Tracker.cached`), so the files a summary read
are recorded as dependencies of the step that asked, and a warm run replays it only when none of
them changed.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from functools import partial

from castfind.analysis.callgraph import WEAK_FANOUT, CallGraph, Node
from castfind.analysis.provenance import MAX_CALLS, SPLITS, VIEW_ATTRIBUTES, Origin, Provenance, enclosing_class, once_function
from castfind.analysis.receivers import receiver_of
from castfind.analysis.resolve import Resolver
from castfind.read.facts import Attr, Call, CallSite, Definition, Expr, FileFacts, Name, Subscript, from_dotted, render

_RUNS = itertools.count()

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


#: One call that hands a whole buffer to a parameter: (callee module, callee qualname, parameter,
#: caller module, caller function, line, the call's dotted function, guess). ``guess`` is how many functions
#: bear the callee's name when the call reaches it by that name alone (its receiver's type unknown, several
#: candidates), 0 when it is resolved (by name with one candidate, in the class, through the receiver's type).
#: Plain data, so a scan step can carry it between runs.
Handoff = tuple[str, str, str, str, str, int, str, int]


class Summaries:
    """Answers the provenance walk at function boundaries.

    Parameters are answered from *handoffs*: the calls, found going forward from the files that name
    a buffer (:meth:`handoffs`), that pass a whole buffer as an argument. A cast of a parameter no
    handoff reaches is not searched backwards through every caller: a parameter named ``x`` of a
    ``forward`` has hundreds of callers, and only the calls that pass whole buffers can matter.
    """

    def __init__(self, resolver: Resolver, graph: CallGraph, provenance: Provenance) -> None:
        self.r = resolver
        self.graph = graph
        self.prov = provenance
        self.handed: dict[tuple[Node, str], list[Handoff]] = {}
        self._generation = 0
        # File facts id → (facts, generation, handoffs per call index, whole arguments per call index) of
        # a :meth:`handoffs` that stopped at a file not parsed yet.
        self._stopped: dict[int, tuple[FileFacts, int, dict[int, list[Handoff]], dict[int, list[Expr]]]] = {}
        # The tracker's answers outlive one scan of an index; this scan's handoffs (and scope) are its own.
        self._run = next(_RUNS)
        self._casts = {name for name, spec in provenance.rules.casts.items() if spec.operand == "receiver"}
        self._views = set(provenance.rules.views)

    def add(self, handoffs: Iterable[Handoff]) -> None:
        for h in handoffs:
            got = self.handed.setdefault(((h[0], h[1]), h[2]), [])
            if h not in got:
                got.append(h)
                self._generation += 1
                self._stopped.clear()

    def handed_to(self, module: str) -> tuple[Handoff, ...]:
        """Every handoff into a function of ``module`` (what its casts' provenance may cross), sorted."""
        return tuple(sorted(h for hs in self.handed.values() for h in hs if h[0] == module))

    def handed_near(self, module: str) -> tuple[Handoff, ...]:
        """The handoffs into ``module`` and into the modules of their callers: what judging ``module``'s
        casts may read (a caller that got the buffer through its own parameter is judged on its
        callers, :data:`MAX_CALLS` calls out), so a carried check of ``module`` depends on all of them."""
        own = self.handed_to(module)
        near = {h[3] for h in own} - {module}
        return tuple(sorted({*own, *(h for m in near for h in self.handed_to(m))}))

    # -- parameters: what the callers pass ------------------------------------------------------
    def parameter(self, facts: FileFacts, scope: str, name: str, depth: int) -> Origin | None:
        if depth >= MAX_CALLS or name in ("self", "cls") or ((facts.module, scope), name) not in self.handed:
            return None
        node = (facts.module, scope)
        return self.r.tracker.cached(("passed", self._run, node, name, depth, self._generation),
                                     partial(self._parameter, node, name, depth), None)

    def callers_passing(self, node: Node, name: str) -> list[Node]:
        """The functions with a call that hands a whole buffer to parameter ``name`` of ``node``: those
        that run per step first, then the once-functions (a loader), each in name order. Calls from
        outside the report scope do not count (:meth:`CallGraph.counts_as_caller`)."""
        callers = {(h[3], h[4]) for h in self.handed.get((node, name), ()) if self.graph.counts_as_caller(h[3])}
        return sorted(callers, key=lambda c: (once_function(self.prov.rules, c[1]) is not None, c))

    def via(self, node: Node, name: str, caller: Node) -> Origin | None:
        """The whole buffer ``caller`` hands to parameter ``name`` of ``node`` (the walk's hops on the
        caller's side first), or None."""
        return self.r.tracker.cached(("passed-by", self._run, node, name, caller, self._generation),
                                     partial(self._parameter, node, name, 0, caller), None)

    def _parameter(self, node: Node, name: str, depth: int, caller: Node | None = None) -> Origin | None:
        fn = self.r.definitions(node[0]).get(node[1])
        if fn is None or fn.kind == "class":
            return None
        order = {c: i for i, c in enumerate(self.callers_passing(node, name))}
        handed = sorted((h for h in self.handed.get((node, name), ()) if (h[3], h[4]) in order),
                        key=lambda h: (order[(h[3], h[4])], h))
        excluded: Origin | None = None  # a buffer the kind's `exclude` takes out: used when no other is handed
        for _, _, _, cmod, cscope, line, func, _ in handed:
            if caller is not None and (cmod, cscope) != caller:
                continue
            cfacts = self.r.modules.facts(cmod)
            if cfacts is None:
                continue
            for cs in cfacts.calls:
                if cs.line != line or cs.scope != cscope or cs.func != func:
                    continue
                arg = argument(cs.args, cs.kwargs, cs.starred, fn, name, is_bound(fn, cs.func))
                if arg is None:
                    continue
                o = self.prov.origin(cfacts, cscope, arg, line, depth + 1)
                if o is not None:
                    hop = f"{cfacts.path}:{line} {cscope} passes {render(arg)} as {name} of {node[1]}"
                    # `entry` now says where the caller's own walk crossed into *its* parameter, if it did.
                    entry = None if o.entry is None else (*o.entry[:3], o.entry[3] + 1)
                    got = Origin(o.kind, o.path, (hop, *o.hops), o.names, o.classes, entry)
                    if not self.prov.rules.buffers[o.kind].excluded(o.names, o.classes):
                        return got
                    excluded = excluded or got
        return excluded

    # -- going forward: the calls that hand a whole buffer on ------------------------------------
    def handoffs(self, facts: FileFacts) -> list[Handoff]:
        """The calls of one file that pass a whole buffer as an argument, one per callee parameter.

        PERF: a callee in a file not parsed yet stops the file, and :meth:`castfind.store.index.Index.in_batches`
        asks again once that file is parsed. What the calls before it handed, and which arguments of the
        stopped call are whole, are kept for that second time (for as long as no new handoff changes
        what is whole), so it goes on from the stopped call.
        """
        if facts.error is not None:
            return []
        done: dict[int, list[Handoff]] = {}  # call index → its handoffs
        wholes: dict[int, list[Expr]] = {}  # call index → its whole arguments
        saved = self._stopped.pop(id(facts), None)
        if saved is not None and saved[0] is facts and saved[1] == self._generation:
            done, wholes = saved[2], saved[3]
        finished = False
        try:
            for i, cs in enumerate(facts.calls):
                if i in done or not cs.scope or not (cs.args or cs.kwargs):
                    continue
                whole = wholes.get(i)
                if whole is None:
                    whole = wholes[i] = [a for a in (*cs.args, *(v for _, v in cs.kwargs))
                                         if self.prov.origin(facts, cs.scope, a, cs.line) is not None]
                found: list[Handoff] = []
                if whole:
                    callees, guess = self.resolve_call(facts, cs)
                    for module, fn in callees:
                        bound = is_bound(fn, cs.func)
                        for param in fn.params:
                            arg = argument(cs.args, cs.kwargs, cs.starred, fn, param, bound)
                            if arg is not None and any(arg is w for w in whole):
                                found.append((module, fn.qualname, param, facts.module, cs.scope, cs.line, cs.func,
                                              guess))
                done[i] = found
            finished = True
        finally:
            if not finished:
                self._stopped[id(facts)] = (facts, self._generation, done, wholes)
        return sorted({h for hs in done.values() for h in hs})

    def callees(self, facts: FileFacts, cs: CallSite) -> list[tuple[str, Definition]]:
        """The functions a call may run: resolved by name; ``self.m()`` in the class or its bases; a typed
        receiver's method in the classes related to its types; by name when few functions carry it."""
        return self.resolve_call(facts, cs)[0]

    def resolve_call(self, facts: FileFacts, cs: CallSite) -> tuple[list[tuple[str, Definition]], int]:
        """:meth:`callees`, and how many functions bear the name when they were found by that name alone
        (the receiver's type unknown) and more than one does: the call is then a guess; 0 otherwise."""
        parts = cs.func.split(".")
        name = parts[-1]
        module = facts.module
        if parts[0] == "super()":
            return [], 0
        found: list[tuple[str, Definition]] = []
        if parts[0] in ("self", "cls") and len(parts) == 2:
            cls = enclosing_class(facts, cs.scope)
            d = self.r.definitions(module).get(cls) if cls else None
            res = self.r.class_member(module, d, name) if d is not None else []
        else:
            res = self.r.resolve_expr(module, cs.scope, from_dotted(cs.func))
        for t in res:
            if t.target.kind == "def" and t.target.definition is not None and t.target.definition.kind != "class":
                found.append((t.target.module, t.target.definition))
        if found or len(parts) < 2 or parts[0] in ("self", "cls") and len(parts) == 2:
            return found, 0
        recv = receiver_of(cs.func)
        types = self.graph.receivers.types_of((module, cs.scope), recv) if recv is not None else None
        guess = 0
        if types:
            names = tuple(sorted({t[1].rsplit(".", 1)[-1] for t in types}))
            defining = {sf.abspath for sf in self.graph.queries.select(("defines", name))}
            files = [sf for sf in self.graph.queries.select(("contains", names)) if sf.abspath in defining]
        elif (count := self.graph.def_count(name)) <= WEAK_FANOUT:
            files = self.graph.queries.select(("defines", name))
            guess = count if count > 1 else 0
        else:
            return [], 0
        for f in self.r.index.load_files(files):
            for d in f.definitions:
                if d.name != name or d.kind == "class":
                    continue
                if types and (d.kind != "method" or not self.graph.receivers.related((f.module, d.parent), types)):
                    continue
                found.append((f.module, d))
        return found, guess

    def guessed(self, caller: Node, callee: Node) -> int:
        """How many functions share ``callee``'s name when every handoff from ``caller`` into ``callee`` reaches it
        by name alone among several (the handoffs' ``guess``); 0 when one of them is resolved."""
        got = [h[7] for hs in self.handed.values() for h in hs if (h[3], h[4]) == caller and (h[0], h[1]) == callee]
        return 0 if not got or 0 in got else max(got)

    # -- helper results: a full-size derivation of an argument ----------------------------------
    def derived(self, facts: FileFacts, scope: str, call: Call, line: int, depth: int) -> tuple[Expr, str] | None:
        if depth >= MAX_CALLS or not isinstance(call.func, (Name, Attr)):
            return None
        # PERF: only a call handed a whole buffer can return one; resolving the helper (which parses the
        # modules on the way) waits until an argument is known whole.
        if not any(self.prov.origin(facts, scope, a, line, depth + 1) is not None
                   for a in (*call.args, *(v for _, v in call.kwargs))):
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
