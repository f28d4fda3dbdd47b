"""Call graph: is a function hot (an entry point, or reachable from one), and by which path?

The graph is a networkx ``DiGraph`` of qualified function names, grown *backwards* on demand from
the functions that hold a flagged cast: the callers of ``f`` can only be in files whose text holds
``f``'s name, so only those are parsed. Edges (DESIGN §4):

- direct calls resolved through the ``where`` resolver (imports, aliases, re-exports);
- ``self.m()`` / ``cls.m()`` / ``super().m()``: class-hierarchy analysis — a call in class C
  reaches ``m`` in C, its bases and its subclasses;
- ``obj.m()`` with a receiver we cannot type: a *weak* edge to every ``m`` in the index, added only
  when few functions bear that name (:data:`WEAK_FANOUT`).

A reverse breadth-first search from the cast's function finds the nearest entry point, so the
path a finding carries is a shortest one.
"""

from __future__ import annotations

from collections import deque

import networkx as nx

from castfind.facts import Attr, Expr, Name
from castfind.index import Index
from castfind.resolve import Resolver
from castfind.rules import RuleSet

#: A by-name edge is added only when at most this many functions share the name.
WEAK_FANOUT = 6
#: How many functions one search may visit before it calls the function cold.
SEARCH_BUDGET = 400

Node = tuple[str, str]  # (module, qualname inside the module)


def _expr(dotted_name: str) -> Expr:
    parts = dotted_name.split(".")
    e: Expr = Name(parts[0])
    for p in parts[1:]:
        e = Attr(e, p)
    return e


def label(node: Node) -> str:
    return f"{node[0]}.{node[1]}" if node[1] else node[0]


class CallGraph:
    """Reverse reachability from entry points, computed lazily and memoised."""

    def __init__(self, index: Index, resolver: Resolver, rules: RuleSet) -> None:
        self.index = index
        self.r = resolver
        self.rules = rules
        self.graph = nx.DiGraph()
        self._callers: dict[Node, list[Node]] = {}
        self._hot: dict[Node, tuple[Node, ...] | None] = {}
        self._ancestors: dict[Node, frozenset[Node]] = {}
        self._by_name: dict[str, list[Node]] = {}

    # -- facts about functions ------------------------------------------------------------------
    def defs_named(self, name: str) -> list[Node]:
        """Every function or method called ``name`` in files whose text holds the name."""
        got = self._by_name.get(name)
        if got is None:
            got = []
            for facts in self.index.load_files(self.index.containing([name])):
                got += [(facts.module, d.qualname) for d in facts.definitions
                        if d.name == name and d.kind in ("function", "method")]
            self._by_name[name] = got
        return got

    def class_of(self, node: Node) -> Node | None:
        d = self.r.definitions(node[0]).get(node[1])
        if d is None or d.kind != "method":
            return None
        return (node[0], d.parent)

    def ancestors(self, cls: Node) -> frozenset[Node]:
        """The class and every base class that resolves in the index."""
        got = self._ancestors.get(cls)
        if got is not None:
            return got
        self._ancestors[cls] = frozenset({cls})
        out = {cls}
        d = self.r.definitions(cls[0]).get(cls[1])
        if d is not None:
            for b in self.r.bases(cls[0], d):
                if b.target.definition is not None:
                    out |= self.ancestors((b.target.module, b.target.definition.qualname))
        self._ancestors[cls] = frozenset(out)
        return self._ancestors[cls]

    # -- edges ----------------------------------------------------------------------------------
    def callers(self, node: Node) -> list[Node]:
        """Functions with a call that may reach ``node`` (sorted, so searches are deterministic)."""
        got = self._callers.get(node)
        if got is not None:
            return got
        name = node[1].rsplit(".", 1)[-1]
        node_cls = self.class_of(node)
        node_anc = self.ancestors(node_cls) if node_cls else frozenset()
        weak_ok = len(self.defs_named(name)) <= WEAK_FANOUT
        out: set[Node] = set()
        for facts in self.index.load_files(self.index.containing([name])):
            defs = self.r.definitions(facts.module)
            for cs in facts.calls:
                if cs.func.rsplit(".", 1)[-1] != name or not cs.scope:
                    continue
                caller_def = defs.get(cs.scope)
                if caller_def is None or caller_def.kind == "class":
                    continue
                caller = (facts.module, cs.scope)
                if self._edge(cs.func, caller, node, node_cls, node_anc, weak_ok):
                    out.add(caller)
                    self.graph.add_edge(label(caller), label(node))
        got = sorted(out)
        self._callers[node] = got
        return got

    def _edge(self, func: str, caller: Node, node: Node, node_cls: Node | None,
              node_anc: frozenset[Node], weak_ok: bool) -> bool:
        parts = func.split(".")
        if node_cls is not None and (parts[0] in ("self", "cls", "super()") and len(parts) == 2):
            caller_cls = self.class_of(caller)
            if caller_cls is None:
                return weak_ok
            # CHA: a call in class C reaches m in C's bases (inherited) and in C's subclasses.
            return caller_cls in node_anc or node_cls in self.ancestors(caller_cls)
        res = self.r.resolve_expr(caller[0], caller[1], _expr(func))
        defs = [x.target for x in res if x.target.kind == "def" and x.target.definition is not None]
        if defs:
            return any((t.module, t.definition.qualname) == node for t in defs)  # type: ignore[union-attr]
        return len(parts) > 1 and weak_ok

    # -- hotness --------------------------------------------------------------------------------
    def hot_path(self, node: Node) -> tuple[str, ...] | None:
        """``(entry, ..., function)`` when ``node`` is reachable from an entry point, else None."""
        if node in self._hot:
            p = self._hot[node]
            return tuple(label(n) for n in p) if p is not None else None
        path = self._search(node)
        self._hot[node] = path
        return tuple(label(n) for n in path) if path is not None else None

    def _search(self, start: Node) -> tuple[Node, ...] | None:
        if self.rules.is_entry(start[1]):
            return (start,)
        parent: dict[Node, Node | None] = {start: None}
        queue = deque([start])
        visited = 0
        while queue and visited < SEARCH_BUDGET:
            cur = queue.popleft()
            visited += 1
            for pred in self.callers(cur):
                if pred in parent:
                    continue
                parent[pred] = cur
                known = self._hot.get(pred, False)
                if self.rules.is_entry(pred[1]) or known:
                    chain: list[Node] = []
                    n: Node | None = pred
                    while n is not None:
                        chain.append(n)
                        n = parent[n]
                    prefix = tuple(known[:-1]) if known else ()
                    return prefix + tuple(chain)
                queue.append(pred)
        return None
