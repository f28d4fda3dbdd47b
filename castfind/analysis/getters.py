"""Getters: what a call of a method hands out, inferred once, from one walk of its returns.

A getter is a method whose returns are a whole buffer (``get_key_buffer(layer_id)`` → ``self.k_buffer[i]``). Two
stages ask about one, and both read the same walk of each ``return``
(:meth:`~castfind.analysis.provenance.Provenance.returns_of`); nothing else infers a getter:

* :class:`GetterOracle` (the engine): the buffer **kind** every return of a name is, by a fixpoint over the index
  (a call of an inferred getter is then a whole buffer to provenance);
* :class:`Holders` (the cost stage): the **holder**, which ``self.X`` of its class each method of that name hands
  out (:meth:`Holders.handed_out`), read from the same walks with the same reading as a cast's operand
  (:meth:`Holders.read`: a :class:`~castfind.analysis.provenance.Trail` → :class:`Held` or :class:`GetterCall`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

from castfind.analysis.provenance import Origin, Provenance, Stop, enclosing_class, holder_classes
from castfind.core.rules import RuleSet, identifier_tokens
from castfind.read.facts import Attr, Call, Definition, Expr, FileFacts, Name, Slice, Subscript, render
from castfind.store.discover import SourceFile
from castfind.store.index import Index
from castfind.store.textquery import TextQueries

#: At most this many steps of a walk are read for a holder (a longer walk: no holder).
MAX_WALK = 16

ClassRef = tuple[FileFacts, Definition]


def dtype_like(text: str) -> bool:
    """Whether ``text`` names a dtype (``self.dtype``, ``torch.float8_e4m3fn``)."""
    return "dtype" in text or text.startswith("torch.")


class GetterOracle:
    """Names of functions whose every ``return`` is a whole buffer of one kind (inferred getters).

    Computed once per scan by a fixpoint (:meth:`infer`): a function is a getter when each of its
    returns walks back to a buffer attribute, a rules getter or an already inferred getter, and
    every other function of that name in the index agrees.
    """

    def __init__(self, index: Index, rules: RuleSet, queries: TextQueries) -> None:
        self.index = index
        self.rules = rules
        self.queries = queries
        self.kinds = {k.name for k in rules.buffers.values() if k.infer_getters}
        self.known: dict[str, str] = {}
        self.prov = Provenance(rules, self.known.get)

    def kind(self, name: str) -> str | None:
        return self.known.get(name)

    def _returns_kind(self, facts: FileFacts, qualname: str, rets: list | None = None) -> str | None:
        """The kind every return of ``qualname`` is a whole buffer of (its walks: :meth:`Provenance.returns_of`)."""
        kinds: set[str] = set()
        for o in self.prov.returns_of(facts, qualname, rets):
            if not isinstance(o, Origin) or o.kind not in self.kinds:
                return None
            kinds.add(o.kind)
        return kinds.pop() if len(kinds) == 1 else None

    def _agree(self, name: str, kind: str) -> bool:
        for facts in self.index.load_files(self.queries.select(("defines", name))):
            for d in facts.definitions:
                if d.name == name and d.kind != "class":
                    rets = [r for r in facts.returns if r.scope == d.qualname]
                    if rets and self._returns_kind(facts, d.qualname, rets) != kind:
                        return False
        return True

    def _file_candidates(self, sf: SourceFile) -> list[tuple[str, str]]:
        """``(name, kind)`` for each def of the file whose every return is a whole buffer, in order."""
        facts = self.index.facts_of(sf)
        by_scope: dict[str, list] = {}
        for r in facts.returns:
            by_scope.setdefault(r.scope, []).append(r)
        out = []
        for d in facts.definitions:
            rets = by_scope.get(d.qualname)
            if d.kind != "class" and rets:
                k = self._returns_kind(facts, d.qualname, rets)
                if k is not None:
                    out.append((d.name, k))
        return out

    def infer(self, pool: list[SourceFile], grow: Callable[[set[str]], list[SourceFile]] | None = None) -> None:
        """Fixpoint over the definitions in ``pool``; ``grow(new_names)`` adds files that name them.

        Each file's candidates and each name's agreement are memoised steps (keyed by the getters
        known so far), so an edit re-reads only the edited file.
        """
        if not self.kinds:
            return
        memo = self.queries.memo
        decided: set[str] = set()
        while True:
            known = tuple(sorted(self.known.items()))
            self.index.load_files([sf for sf in pool if not memo.has(("getters-in", sf.abspath, known))])
            cands: dict[str, str] = {}
            for sf in pool:
                for name, k in memo.step(("getters-in", sf.abspath, known), partial(self._file_candidates, sf)):
                    if name not in decided and name not in cands:
                        cands[name] = k
            new = {n: k for n, k in cands.items()
                   if memo.step(("agree", n, k, known), partial(self._agree, n, k))}
            decided.update(cands)
            if not new:
                return
            self.known.update(new)
            if grow is not None:
                seen = {sf.abspath for sf in pool}
                pool = pool + [sf for sf in grow(set(new)) if sf.abspath not in seen]


@dataclass(frozen=True, slots=True)
class Held:
    """An operand's buffer: attribute ``attr`` of the classes ``holders``, indexed by a scalar or not, viewed
    as ``view`` (a dtype) or not."""

    holders: tuple[ClassRef, ...]
    attr: str
    indexed: bool
    view: str | None
    #: ``layer.X`` with ``layer`` a parameter of the method: allocated by a sibling method of the class on
    #: its own parameter (``layer.register_parameter("X", ...)`` in ``create_weights``), not as ``self.X``.
    on_param: bool = False
    #: ``self.X.weight`` with ``self.X = nn.Linear(...)`` / ``nn.Conv1d(...)``: the module's weight.
    module_weight: bool = False
    #: For ``self.proj.weight`` held by a class castfind can read: the same weight read off the constructor
    #: call ``self.proj = Linear(in, out)`` (a :attr:`module_weight` reading), when that class does not say.
    weight_of: Held | None = None


@dataclass(frozen=True, slots=True)
class GetterCall:
    """An operand that is a method call ``recv.name(...)`` (``on_self``: ``recv`` is ``self``)."""

    name: str
    indexed: bool
    view: str | None
    on_self: bool = False


class Holders:
    """Where an operand's buffer is held: the reading of a walk back into ``self.X`` or a getter call, and which
    ``self.X`` each getter hands out. Every class and getter is resolved once per run."""

    def __init__(self, rules: RuleSet, definitions: Callable[[str], Sequence[tuple[FileFacts, Definition]]]) -> None:
        self.prov = Provenance(rules)
        self.views = set(rules.views)
        self._definitions = definitions
        self._getters: dict[str, tuple[Held, ...]] = {}
        self._defs: dict[str, Sequence[tuple[FileFacts, Definition]]] = {}

    # -- an operand's holder --------------------------------------------------------------------------------
    def defs_named(self, name: str) -> Sequence[tuple[FileFacts, Definition]]:
        got = self._defs.get(name)
        if got is None:
            got = self._defs[name] = self._definitions(name)
        return got

    def class_ref(self, facts: FileFacts, qualname: str) -> ClassRef | None:
        return next(((facts, d) for d in facts.definitions if d.qualname == qualname and d.kind == "class"), None)

    def own_class(self, facts: FileFacts, scope: str) -> ClassRef | None:
        """The class whose method ``scope`` is in (None at module level or in a plain function)."""
        cls = enclosing_class(facts, scope)
        return self.class_ref(facts, cls) if cls else None

    def operand(self, facts: FileFacts, scope: str, expr: Expr, line: int) -> Held | GetterCall | None:
        """The buffer ``expr`` is read from: provenance's walk back (:meth:`Provenance.origin_or_stop`, the one
        walk), read by :meth:`read`."""
        got = self.prov.origin_or_stop(facts, scope, expr, line)
        end = self.read(facts, scope, got)
        if end is None and isinstance(got.trail.end, Name) and not got.trail.steps:
            end = self.from_callers(facts, scope, got.trail.end.id)
        return end

    def from_callers(self, facts: FileFacts, scope: str, param: str) -> Held | GetterCall | None:
        """A parameter's buffer, from the calls of its function in its own file (``forward`` hands
        ``self.conv1d.weight`` to ``self._forward_prefill(x, conv_weights)``): each call's argument read as an
        operand in the caller; the one holder they all agree on, or None (no call, a call that hides the
        argument, or two holders). One level: a caller's own parameter is not followed further."""
        d = next((d for d in facts.definitions if d.qualname == scope and d.kind != "class"), None)
        if d is None or param not in d.params:
            return None
        method = d.kind == "method" and d.parent != ""
        position = d.params.index(param) - (1 if method else 0)
        if position < 0:
            return None
        found: list[Held | GetterCall] = []
        for c in facts.calls:
            own_call = c.func == f"self.{d.name}" if method else c.func == d.name
            if not own_call or c.scope == scope:
                continue
            if method and enclosing_class(facts, c.scope) != d.parent:
                continue
            arg = next((v for k, v in c.kwargs if k == param), None)
            if arg is None and not c.starred and position < len(c.args):
                arg = c.args[position]
            if arg is None:
                return None
            got = self.read(facts, c.scope, self.prov.origin_or_stop(facts, c.scope, arg, c.line))
            if got is None:
                return None
            found.append(got)
        if not found or any(f != found[0] for f in found[1:]):
            return None
        return found[0]

    def read(self, facts: FileFacts, scope: str, got: Origin | Stop, taken: int = 0, indexed: bool = False,
              view: str | None = None) -> Held | GetterCall | None:
        """``self.X`` (a :class:`Held`) or a getter call (:class:`GetterCall`) from a walk's :class:`Trail`.

        Cost's reading is stricter than a proof of wholeness: at most :data:`MAX_WALK` steps; a local name
        and a view go on (``.view(dtype)`` is remembered: the dtype the getter hands out); an index goes on
        when its first element is no slice (``buf[:bs]``, ``buf[:, :, :d]`` are not what the allocation holds);
        tuple unpacking, loop variables, parameters and ``torch.view(x, ...)`` end it with no answer; a helper
        that returns its argument, or any other method call, is read as a getter call. Where the walk stopped
        at an index or a split that is no whole buffer (a getter's ``self.X[layer_id]`` with an index it cannot
        judge), the same walk is resumed from what was indexed or split: the allocation is still the one read.
        """
        trail = got.trail
        for step in trail.steps:
            if taken >= MAX_WALK:
                return None
            e = step.expr
            if step.kind in ("view", "split"):
                assert isinstance(e, Call) and isinstance(e.func, Attr)
                if e.func.attr == "view" and len(e.args) == 1 and view is None and dtype_like(render(e.args[0])):
                    view = render(e.args[0])
            elif step.kind == "index":
                assert isinstance(e, Subscript)
                if not e.index or isinstance(e.index[0], Slice):
                    return None  # `buf[:bs]`, `buf[:, :, :d]`: not what the allocation holds
                indexed = True
            elif step.kind == "helper":
                return self._call(e, indexed, view)
            elif step.kind not in ("name", "view-attribute"):
                return None  # an element of a tuple, a loop variable, a parameter, `torch.view(x, ...)`
            taken += 1
        end = trail.end
        if end is None or taken >= MAX_WALK:
            return None
        e = end
        if isinstance(e, Call):
            f = e.func
            if isinstance(f, Attr) and f.attr in self.views:  # a split along the token axis: resumed past it
                if f.attr == "view" and len(e.args) == 1 and view is None and dtype_like(render(e.args[0])):
                    view = render(e.args[0])
                return self.read(facts, scope, self.prov.origin_or_stop(facts, scope, f.value, trail.line),
                                  taken + 1, indexed, view)
            return self._call(e, indexed, view)
        if isinstance(e, Subscript):  # an index that is no whole buffer: resumed past it
            if not e.index or isinstance(e.index[0], Slice):
                return None
            return self.read(facts, scope, self.prov.origin_or_stop(facts, scope, e.value, trail.line),
                              taken + 1, True, view)
        if isinstance(e, Attr):
            holders = self._holders(facts, scope, e)
            inner = e.value
            module = None
            if (e.attr == "weight" and isinstance(inner, Attr) and isinstance(inner.value, Name)
                    and inner.value.id == "self"):  # `self.proj.weight`: the weight of the module `self.proj` is built as
                ref = self.own_class(facts, scope)
                module = Held((ref,), inner.attr, indexed, view, module_weight=True) if ref else None
            if holders:
                # The module's class sets its weight where castfind cannot read it (a quantization method's
                # `create_weights`): then the constructor call `self.proj = Linear(in, out)` says its shape.
                return Held(holders, e.attr, indexed, view, weight_of=module)
            if module is not None:
                return module
            if isinstance(e.value, Name) and self._is_param(facts, scope, e.value.id):
                ref = self.own_class(facts, scope)
                return Held((ref,), e.attr, indexed, view, on_param=True) if ref else None
        return None

    @staticmethod
    def _call(e: Expr, indexed: bool, view: str | None) -> GetterCall | None:
        """A method call ``recv.name(...)`` read as a getter call (a call of a plain function: no answer)."""
        if isinstance(e, Call) and isinstance(e.func, Attr):
            f = e.func
            return GetterCall(f.attr, indexed or bool(e.args), view, isinstance(f.value, Name) and f.value.id == "self")
        return None

    @staticmethod
    def _is_param(facts: FileFacts, scope: str, name: str) -> bool:
        d = next((d for d in facts.definitions if d.qualname == scope), None)
        return d is not None and name in d.params[1:]

    def _holders(self, facts: FileFacts, scope: str, expr: Attr) -> tuple[ClassRef, ...]:
        if isinstance(expr.value, Name) and expr.value.id == "self":
            ref = self.own_class(facts, scope)
            return (ref,) if ref else ()
        out: list[ClassRef] = []
        for name in holder_classes(facts, scope, expr):
            out += [(ff, d) for ff, d in self.defs_named(name) if d.kind == "class"][:1]
        return tuple(out)

    def handed_out(self, name: str) -> tuple[Held, ...]:
        """Every class method ``name`` whose returns all end at one ``self.X`` of its class: provenance's walk of
        each return (:meth:`Provenance.returns_of`, what getter inference reads), read by :meth:`read`."""
        got = self._getters.get(name)
        if got is not None:
            return got
        self._getters[name] = ()  # a getter that calls itself ends here
        found: list[Held] = []
        for facts, d in self.defs_named(name):
            if d.kind != "method":
                continue
            held: list[Held] = []
            for walked in self.prov.returns_of(facts, d.qualname):
                end = self.read(facts, d.qualname, walked)
                if isinstance(end, GetterCall) and end.on_self:  # `return self._get_key_buffer(layer_id)`
                    own = [h for h in self.handed_out(end.name) if h.holders and h.holders[0][0] is facts
                           and h.holders[0][1].qualname == d.parent]
                    held += [Held(h.holders, h.attr, h.indexed, h.view or end.view) for h in own[:1]]
                elif isinstance(end, Held):
                    held.append(end)
            # Returns that end elsewhere (a dequantized copy) are not the buffer: the ones that do must agree.
            if not held or len({h.attr for h in held}) != 1:
                continue
            view = next((h.view for h in held if h.view), None)
            found.append(Held(held[0].holders, held[0].attr, all(h.indexed for h in held), view))
        self._getters[name] = tuple(found)
        return self._getters[name]

    def choose(self, cands: Sequence[Held], path: str) -> Held | None:
        """The getter's class for a finding in ``path``: the one sharing a word with the path, a base over its
        subclasses, or None when that leaves more than one."""
        if len(cands) <= 1:
            return cands[0] if cands else None
        words = {t for part in re.split(r"[/._]", path) for t in identifier_tokens(part) if len(t) >= 3}

        def overlap(h: Held) -> int:
            return sum(1 for t in identifier_tokens(h.holders[0][1].name) if t in words)

        best = max(overlap(h) for h in cands)
        top = [h for h in cands if overlap(h) == best]
        names = {h.holders[0][1].name for h in top}
        bases = [h for h in top if not any(b.rsplit(".", 1)[-1] in names for b in h.holders[0][1].bases)]
        return bases[0] if len(bases) == 1 else None
