"""Call graph: is a function hot (an entry point, or reachable from one), and by which path?

The graph is a networkx ``DiGraph`` of qualified function names, grown *backwards* on demand from
the functions that hold a flagged cast: the callers of ``f`` can only be in files whose text holds
a call of ``f``'s name (the ``("calls", …)`` text query), so only those are parsed. Edges:

- direct calls resolved through the ``where`` resolver (imports, aliases, re-exports);
- ``self.m()`` / ``cls.m()`` / ``super().m()``: class-hierarchy analysis — a call in class C
  reaches ``m`` in C, its bases and its subclasses;
- ``recv.m()`` with a receiver of known types (:mod:`castfind.analysis.receivers`: declared attribute, parameter
  and local types, constructor and factory assignments — ``self.quant_method.apply()`` with
  ``self.quant_method: Optional[QuantizeMethodBase]``): *typed dispatch* — the call reaches ``m`` in
  each type, in its bases (inherited) and in its subclasses (every override, however many), and
  nothing else;
- ``obj.m()`` with a receiver we cannot type: a *weak* edge to every ``m`` in the index, added only
  when few functions bear that name (:data:`WEAK_FANOUT`).

Callers are looked for only in the report scope (:mod:`castfind.core.scope`): a test, a benchmark or an
example that runs a model's ``forward`` is not a serving step, so a call from one never makes a
production function hot (with ``--include-tests`` the scope is every file, and they count).

A reverse breadth-first search from the cast's function finds the nearest entry point, so the
path a finding carries is a shortest one. It does not go through a once-function (``__init__``,
loaders, warm-up): building or loading an object is not a per-step path; nor through a call under a memo
guard (``if self._w is None: self._w = fold(conv)``, or ``if self._packed is None: self._pack()`` where
``_pack`` stores ``self._packed``: :attr:`~castfind.read.facts.CallSite.memo_stored`): it runs once per value. Callers (per file) and
hot paths are steps of the scan's :class:`~castfind.store.memo.Memo`, replayed when nothing they read changed.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterable
from functools import partial
from typing import Literal, Protocol

import networkx as nx

from castfind.analysis.receivers import Receivers, receiver_of
from castfind.analysis.resolve import Resolver
from castfind.core.rules import RuleSet
from castfind.core.scope import in_scope
from castfind.core.types import Condition, Guess
from castfind.read.facts import CallSite, Guard, from_dotted
from castfind.store.discover import SourceFile
from castfind.store.index import Index
from castfind.store.textquery import TextQueries, def_lines

#: A by-name edge is added only when at most this many functions share the name.
WEAK_FANOUT = 6
#: How many functions one search may visit before it calls the function cold.
SEARCH_BUDGET = 400

Node = tuple[str, str]  # (module, qualname inside the module)
#: How a call edge was resolved: through the resolver (imports, aliases), the receiver's known types, the class
#: hierarchy of ``self.m()``, or by the method's name alone (receiver unknown, at most :data:`WEAK_FANOUT`).
EdgeHow = Literal["direct", "typed", "cha", "by-name"]


class ClosedEdges(Protocol):
    """Call edges a search may not take (a deployment's false branches: :mod:`castfind.analysis.deployment`);
    ``key`` names the restriction in memo keys (the same key, the same closed edges)."""

    @property
    def key(self) -> str: ...

    def __call__(self, caller: Node, callee: Node) -> bool: ...


class EdgeGuards(Protocol):
    """What :func:`path_conditions` reads of a call graph (:meth:`CallGraph.edge_guards`)."""

    def edge_guards(self, caller: Node, node: Node) -> tuple[str, tuple[Guard, ...]]: ...


def path_conditions(graph: EdgeGuards, path: tuple[Node, ...], where: str, own: Iterable[Guard]) -> tuple[Condition, ...]:
    """The branch tests between the entry point and a cast, outermost first: the ifs common to the calls of each
    edge of the hot path ``path`` (:meth:`CallGraph.edge_guards`), then ``own``, the guards around the cast in its
    own function (in the file ``where``). An edge from a file outside the index adds nothing."""
    out: list[Condition] = []
    for caller, callee in itertools.pairwise(path):
        at, guards = graph.edge_guards(caller, callee)
        out += (Condition(g.test, g.negated, at, g.line) for g in guards)
    out += (Condition(g.test, g.negated, where, g.line) for g in own)
    return tuple(out)


def label(node: Node) -> str:
    return f"{node[0]}.{node[1]}" if node[1] else node[0]


class CallGraph:
    """Reverse reachability from entry points, computed lazily and memoised."""

    def __init__(self, index: Index, resolver: Resolver, rules: RuleSet, queries: TextQueries | None = None,
                 report_exclude: tuple[str, ...] = ()) -> None:
        self.index = index
        self.report_exclude = report_exclude
        self._outside: frozenset[str] | None = None  # abspaths outside the report scope, found once
        self.r = resolver
        self.rules = rules
        self.queries = queries or TextQueries.fresh(index, rules)
        self.memo = self.queries.memo
        self.receivers = Receivers(resolver)
        self.graph = nx.DiGraph()

    # -- facts about functions ------------------------------------------------------------------
    def def_count(self, name: str) -> int:
        """How many ``def NAME(`` lines the indexed files hold (nested and conditional defs included).

        PERF: counted from the text, never by parsing: a common method name (``apply``, ``run``)
        is defined in hundreds of files, and parsing them all only to count would cost more than
        the rest of the scan. Decides whether a by-name (weak) edge is allowed.
        """
        def count() -> int:
            files = self.queries.select(("defines", name))
            self.r.tracker.read(sf.abspath for sf in files)  # the count reads their text
            lines = def_lines(name)
            return sum(lines(self.index.data(sf)) for sf in files)

        return self.memo.step(("defcount", name), count)

    def class_of(self, node: Node) -> Node | None:
        d = self.r.definitions(node[0]).get(node[1])
        if d is None or d.kind != "method":
            return None
        return (node[0], d.parent)

    def ancestors(self, cls: Node) -> frozenset[Node]:
        """The class and every base class that resolves in the index."""
        return self.receivers.ancestors(cls)

    # -- edges ----------------------------------------------------------------------------------
    def callers(self, node: Node) -> list[Node]:
        """Functions with a call that may reach ``node`` (sorted, so searches are deterministic).

        The networkx graph is the one store of call edges: a node's callers are found once (a memoised
        step, whose dependencies are replayed into whatever asks again) and stored as edges into it;
        the hot-path search and the prefetch both read them back from the graph.
        """
        got = self.memo.step(("callers", node), lambda: self._find_callers(node))
        g = self.graph
        if not g.nodes.get(node, {}).get("expanded"):
            g.add_node(node, expanded=True)
            g.add_edges_from((c, node) for c in got)
        return sorted(g.predecessors(node))

    def _files_calling(self, node: Node) -> list[SourceFile]:
        """The files that may hold a call of ``node``, in the report scope (callers elsewhere never count)."""
        files = self.queries.select(("calls", node[1].rsplit(".", 1)[-1], node[0]))
        if not self.report_exclude:
            return files
        outside = self._outside_scope()
        return [sf for sf in files if sf.abspath not in outside]

    def _outside_scope(self) -> frozenset[str]:
        if self._outside is None:
            self._outside = frozenset(sf.abspath for sf in self.index.files
                                      if not in_scope(sf.path, self.report_exclude))
        return self._outside

    def counts_as_caller(self, module: str) -> bool:
        """Can a call in ``module`` make a function hot, or hand it a buffer that counts? Not from
        outside the report scope."""
        if not self.report_exclude:
            return True
        sf = self.r.modules.file(module)
        return sf is not None and sf.abspath not in self._outside_scope()

    def _files_to_parse(self, node: Node) -> list[SourceFile]:
        """The caller files of ``node`` whose per-file step no carried result covers."""
        return [sf for sf in self._files_calling(node) if not self.memo.has(("callers-in", node, sf.abspath))]

    def _find_callers(self, node: Node) -> list[Node]:
        # One memoised step per file, so an edit re-reads only the edited file's calls. The files
        # no carried step covers are parsed together (in parallel when there are many).
        self.index.load_files(self._files_to_parse(node))
        files = self._files_calling(node)
        out: set[Node] = set()
        for sf in files:
            out.update(self.memo.step(("callers-in", node, sf.abspath), partial(self._callers_in, node, sf)))
        return sorted(out)

    def _callers_in(self, node: Node, sf: SourceFile) -> list[Node]:
        """The functions of one file with a call that may reach ``node``."""
        return sorted({(self.index.facts_of(sf).module, cs.scope) for cs in self._sites(node, sf)})

    def sites(self, caller: Node, node: Node) -> list[CallSite]:
        """The calls in function ``caller`` that may reach ``node`` (where an argument crosses the edge)."""
        sf = self.r.modules.file(caller[0])
        if sf is None:
            return []
        return [cs for cs in self._sites(node, sf) if cs.scope == caller[1]]

    def _sites(self, node: Node, sf: SourceFile) -> list[CallSite]:
        name = node[1].rsplit(".", 1)[-1]
        node_cls = self.class_of(node)
        node_anc = self.ancestors(node_cls) if node_cls else frozenset()
        weak_ok = self.def_count(name) <= WEAK_FANOUT
        facts = self.index.facts_of(sf)
        defs = self.r.definitions(facts.module)
        out: list[CallSite] = []
        for cs in facts.calls:
            if cs.func.rsplit(".", 1)[-1] != name or not cs.scope:
                continue
            caller_def = defs.get(cs.scope)
            if caller_def is None or caller_def.kind == "class":
                continue
            if self._runs_once(cs, node):
                continue
            if self._edge(cs.func, (facts.module, cs.scope), node, node_cls, node_anc, weak_ok):
                out.append(cs)
        return out

    def _runs_once(self, cs: CallSite, node: Node) -> bool:
        """A call under a memo guard runs once per stored value, not once a step: the guard says a location
        is unset (``if self._w is None:``) and the same branch stores it (``self._w = fold(conv)``), or the
        call is ``self.m()`` and ``m`` itself stores it (``_pack_weights`` sets ``self._packed``)."""
        if cs.memo_stored:
            return True
        if not cs.memo_unset or not cs.func.startswith("self."):
            return False
        sf = self.r.modules.file(node[0])
        if sf is None:
            return False
        stores = {a.target for a in self.index.facts_of(sf).assigns if a.scope == node[1]}
        return any(k in stores for k in cs.memo_unset)

    def _edge(self, func: str, caller: Node, node: Node, node_cls: Node | None,
              node_anc: frozenset[Node], weak_ok: bool) -> EdgeHow | None:
        """How a call ``func`` in ``caller`` reaches ``node`` (None: it does not)."""
        parts = func.split(".")
        if node_cls is not None and (parts[0] in ("self", "cls", "super()") and len(parts) == 2):
            caller_cls = self.class_of(caller)
            if caller_cls is None:
                return "by-name" if weak_ok else None
            # CHA: a call in class C reaches m in C's bases (inherited) and in C's subclasses.
            return "cha" if caller_cls in node_anc or node_cls in self.ancestors(caller_cls) else None
        res = self.r.resolve_expr(caller[0], caller[1], from_dotted(func))
        defs = [x.target for x in res if x.target.kind == "def" and x.target.definition is not None]
        if defs:
            hit = any((t.module, t.definition.qualname) == node for t in defs)  # type: ignore[union-attr]
            return "direct" if hit else None
        recv = receiver_of(func)
        types = self.receivers.types_of(caller, recv) if recv is not None else None
        if types is not None:
            # Typed dispatch: a method of one of the types, of a base (inherited) or of a subclass
            # (an override); a plain function or an unrelated class is not reached.
            return "typed" if node_cls is not None and self.receivers.related(node_cls, types) else None
        return "by-name" if len(parts) > 1 and weak_ok else None

    def guessed(self, caller: Node, node: Node) -> int:
        """How many functions share ``node``'s name when every call in ``caller`` that may reach ``node`` does so
        by name alone (a by-name edge, its receiver's type unknown); 0 when one of them is resolved (direct,
        typed or class hierarchy) or the name has a single candidate: the edge is then no guess."""
        def count() -> int:
            name = node[1].rsplit(".", 1)[-1]
            node_cls = self.class_of(node)
            node_anc = self.ancestors(node_cls) if node_cls else frozenset()
            weak_ok = self.def_count(name) <= WEAK_FANOUT
            sites = self.sites(caller, node)
            if not sites or any(self._edge(cs.func, caller, node, node_cls, node_anc, weak_ok) != "by-name"
                                for cs in sites):
                return 0
            n = self.def_count(name)
            return n if n > 1 else 0

        return self.memo.step(("guessed", caller, node), count)

    def judged(self, node: Node) -> tuple[tuple[Node, ...] | None, Guess | None]:
        """The hot path of ``node`` a finding may rest on, and the guess it rests on (None: none).

        The shortest path (:meth:`hot_nodes`) may go through a by-name edge with several candidates
        (:meth:`guessed`). The search is then run again with such edges closed (its own memo key): a path
        found so is returned, with no guess; with none, the shortest path and its first guessed edge.
        """
        path = self.hot_nodes(node)
        if path is None:
            return None, None
        first = next(((a, b, n) for a, b in itertools.pairwise(path) if (n := self.guessed(a, b))), None)
        if first is None:
            return path, None
        sure = self.memo.step(("hot-sure", node), lambda: self._search(node, sure=True)[0])
        if sure is not None:
            return tuple(sure), None
        a, b, n = first
        return path, Guess(label(a), label(b), b[1].rsplit(".", 1)[-1], n)

    # -- hotness --------------------------------------------------------------------------------
    def prefetch(self, starts: Iterable[Node]) -> None:
        """Parse, level by level and in one parallel batch per level, the files the searches need.

        PERF: :meth:`_search` asks for one node's callers at a time, so its misses would be parsed
        a handful at a time on one core. This walks the same reverse graph breadth-first from every
        start at once, loading each level's caller files together (the index parses a batch in its
        process pool), and stops a start's walk where its search would stop: at an entry point, a
        once-function or the search budget. It changes no result; the searches that follow find
        every file already loaded.
        """
        serving: dict[Node, set[Node]] = {}
        for s in starts:
            if not self.rules.is_entry(s[1]):
                serving.setdefault(s, set()).add(s)
        visited: dict[Node, int] = {s: 0 for s in serving}
        expanded: set[Node] = set()
        while serving:
            expanded.update(serving)
            todo = [n for n in serving if not self.memo.has(("callers", n))]
            files: dict[str, SourceFile] = {}
            for n in todo:
                for sf in self._files_to_parse(n):
                    files.setdefault(sf.abspath, sf)
            self.index.load_files(files.values())
            done: set[Node] = set()
            nxt: dict[Node, set[Node]] = {}
            for n, owners in serving.items():
                owners = owners - done
                for pred in self.callers(n):
                    if self.rules.is_entry(pred[1]) or self.memo.peek(("hot", pred))[1]:
                        done |= owners
                        break
                    if pred in expanded or self.rules.is_once_function(pred[1].rsplit(".", 1)[-1]):
                        continue
                    for o in owners:
                        visited[o] += 1
                    nxt.setdefault(pred, set()).update(owners)
            serving = {}
            for n, owners in nxt.items():
                owners = {o for o in owners if o not in done and visited[o] < SEARCH_BUDGET}
                if owners:
                    serving[n] = owners

    def hot_path(self, node: Node) -> tuple[str, ...] | None:
        """``(entry, ..., function)`` when ``node`` is reachable from an entry point, else None."""
        path = self.hot_nodes(node)
        return tuple(label(n) for n in path) if path is not None else None

    def hot_nodes(self, node: Node) -> tuple[Node, ...] | None:
        """The functions of :meth:`hot_path`, as nodes."""
        path = self.memo.step(("hot", node), lambda: self._search(node)[0])
        return tuple(path) if path is not None else None

    def open_path(self, node: Node, closed: ClosedEdges) -> tuple[tuple[Node, ...] | None, bool]:
        """The hot path of ``node`` once the edges ``closed`` names are removed (the same reverse search,
        memoised under its own key), and whether the search decided: False when it ran out of its budget
        before it found an entry point or ran out of callers (then the caller should keep what it knew)."""
        got = self.memo.step(("hot-open", closed.key, node), lambda: list(self._search(node, closed)))
        path, decided = got
        return (tuple(path) if path is not None else None), bool(decided)

    def edge_guards(self, caller: Node, node: Node) -> tuple[str, tuple[Guard, ...]]:
        """The ifs around the calls in ``caller`` that may reach ``node``: those common to every such call
        (outermost first), so they hold however ``caller`` reaches it (``if a: f()`` and ``else: f()`` share
        none); with the root-relative path of ``caller``'s file ("" and none when it is not indexed)."""
        sf = self.r.modules.file(caller[0])
        sites = self.sites(caller, node)
        if sf is None or not sites:
            return "", ()
        return sf.path, tuple(g for g in sites[0].guards if all(g in cs.guards for cs in sites[1:]))

    def _search(self, start: Node, closed: ClosedEdges | None = None,
                sure: bool = False) -> tuple[tuple[Node, ...] | None, bool]:
        """A shortest path from an entry point to ``start`` (None: none), and whether the search decided
        (False: the budget ran out first). With ``closed``, those edges are not taken, and only paths found
        under the same restriction are reused; with ``sure``, no guessed edge is taken."""
        if self.rules.is_entry(start[1]):
            return (start,), True
        parent: dict[Node, Node | None] = {start: None}
        queue = deque([start])
        visited = 0
        while queue and visited < SEARCH_BUDGET:
            cur = queue.popleft()
            visited += 1
            for pred in self.callers(cur):
                if pred in parent or (sure and self.guessed(pred, cur)) or (closed is not None and closed(pred, cur)):
                    continue
                parent[pred] = cur
                if closed is not None:
                    seen = self.memo.peek(("hot-open", closed.key, pred))[1]
                    known = seen[0] if seen else None
                else:
                    known = self.memo.peek(("hot-sure" if sure else "hot", pred))[1]
                if self.rules.is_entry(pred[1]) or known:
                    chain: list[Node] = []
                    n: Node | None = pred
                    while n is not None:
                        chain.append(n)
                        n = parent[n]
                    prefix = tuple(known[:-1]) if known else ()
                    return prefix + tuple(chain), True
                if not self.rules.is_once_function(pred[1].rsplit(".", 1)[-1]):
                    queue.append(pred)
        return None, not queue
