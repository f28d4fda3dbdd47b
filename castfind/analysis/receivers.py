"""Receivers: the classes the object of a method call may be, from what the code declares and builds.

Serving engines dispatch through attributes: ``self.quant_method.apply(layer, x)`` where the class
declares ``self.quant_method: Optional[QuantizeMethodBase]``, ``self.impl.forward(...)`` after
``self.impl = FlashImpl(...)``, ``layer.quant_method`` on a parameter ``layer: LinearBase``. A
receiver's types come from, in this order:

- the name it starts with: ``self``/``cls`` (the method's class), an annotated parameter, a local
  with a declared type, or a local assigned from a value typed as below;
- each attribute after it, looked up in the classes found so far and their bases: the declared type
  (a class-level ``x: T`` or ``self.x: T`` in any method) wins; otherwise every assignment
  ``self.x = ...`` in a method of those classes (and ``x = ...`` in a class body) must have a type:
  a constructor call ``Foo(...)``, a call of a function or method whose ``def`` declares its return
  type (``-> Base | None``), or a name or attribute typed by the same rules. ``None`` adds nothing.

A type is the ``(module, qualname)`` of a class in the index, found by the :class:`Resolver`. When
any part cannot be typed — an annotation naming a class castfind cannot find (``torch.Tensor``,
``Any``, ``List[Foo]``), a value it cannot follow, no declaration at all — the answer is ``None``:
*unknown*, and the call graph falls back to its by-name rule. Assignments in subclasses are not
looked for (a receiver typed by construction in the base is taken at its word).

Every answer is memoised for the run in the resolver's :class:`~castfind.store.memo.Tracker`, which records
the files it read, so a carried result that used it is replayed only while they are unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable

from castfind.analysis.resolve import Resolver
from castfind.read.facts import Attr, Call, Const, Definition, Expr, Name, dotted, from_dotted

Node = tuple[str, str]  # (module, qualname inside the module)
#: The classes a value may be an instance of; None when castfind cannot tell.
Types = frozenset[Node] | None

_MAX_CHAIN = 8  # attributes followed after the first name (``a.b.c.d``...)


def receiver_of(func: str) -> str | None:
    """The receiver of a call ``recv.m`` (dotted text) whose type may decide what it reaches; None for
    a plain function, ``super().m`` and ``self.m``/``cls.m`` alone (the class hierarchy decides those,
    and an instance attribute holding a function is no method of a class)."""
    parts = func.split(".")
    if len(parts) < 2 or parts[0] == "super()" or (len(parts) == 2 and parts[0] in ("self", "cls")):
        return None
    return ".".join(parts[:-1])


def _union(parts: Iterable[Types]) -> Types:
    """Every part must be known; the union of them, or None when one is not (or all are empty)."""
    out: set[Node] = set()
    for p in parts:
        if p is None:
            return None
        out |= p
    return frozenset(out) if out else None


class Receivers:
    """Receiver types over a :class:`Resolver` (memoised in its tracker)."""

    def __init__(self, resolver: Resolver) -> None:
        self.r = resolver

    # -- the class hierarchy ----------------------------------------------------------------------
    def ancestors(self, cls: Node) -> frozenset[Node]:
        """The class and every base class that resolves in the index."""
        def compute() -> frozenset[Node]:
            out = {cls}
            d = self.r.definitions(cls[0]).get(cls[1])
            if d is not None:
                for b in self.r.bases(cls[0], d):
                    if b.target.definition is not None:
                        out |= self.ancestors((b.target.module, b.target.definition.qualname))
            return frozenset(out)

        # A class in an inheritance cycle sees only itself while its ancestors are computed.
        return self.r.tracker.cached(("ancestors", cls), compute, frozenset({cls}))

    def related(self, cls: Node, types: frozenset[Node]) -> bool:
        """Can a method of ``cls`` run for a receiver of one of ``types``? Yes when ``cls`` is one of
        them, a base of one (an inherited method) or a subclass of one (an override)."""
        return any(cls in self.ancestors(t) for t in types) or bool(self.ancestors(cls) & types)

    # -- receivers --------------------------------------------------------------------------------
    def types_of(self, caller: Node, receiver: str) -> Types:
        """The classes ``receiver`` (dotted: ``self.quant_method``, ``layer``, ``layer.impl``) may be an
        instance of where function ``caller`` reads it; None when castfind cannot tell."""
        return self.r.tracker.cached(("receiver", caller, receiver),
                                     lambda: self._types_of(caller[0], caller[1], receiver), None)

    def _types_of(self, module: str, scope: str, receiver: str) -> Types:
        parts = receiver.split(".")
        if len(parts) > _MAX_CHAIN + 1 or not all(p.isidentifier() for p in parts):
            return None
        cur = self._name_types(module, scope, parts[0])
        for attr in parts[1:]:
            if cur is None:
                return None
            cur = _union(self.attribute_types(c, attr) for c in sorted(cur))
        return cur

    def _name_types(self, module: str, scope: str, name: str) -> Types:
        """A plain name read in function ``scope``: ``self``/``cls``, a typed parameter or local."""
        fn = self.r.definitions(module).get(scope)
        if fn is None or fn.kind == "class":
            return None
        if (fn.kind == "method" and fn.params and name == fn.params[0]
                and "staticmethod" not in fn.decorators):
            return frozenset({(module, fn.parent)})
        if name in fn.params:
            declared = dict(fn.param_types).get(name)
            return self.resolve_types(module, fn.parent, declared) if declared else None
        facts = self.r.modules.facts(module)
        if facts is None:
            return None
        anns = [a for a in facts.annotations if a.scope == scope and a.target == name]
        if anns:
            return _union(self.resolve_types(module, scope, a.types) for a in anns)
        values = [a for a in facts.assigns if a.scope == scope and a.target == name]
        if not values or any(a.index is not None for a in values):  # `a, b = f()`: not followed
            return None
        return _union(self.value_types(module, scope, a.value) for a in values)

    def attribute_types(self, cls: Node, attr: str) -> Types:
        """The classes attribute ``attr`` of an instance of ``cls`` may hold (see the module doc)."""
        return self.r.tracker.cached(("attribute-types", cls, attr), lambda: self._attribute_types(cls, attr), None)

    def _attribute_types(self, cls: Node, attr: str) -> Types:
        declared: list[Types] = []
        assigned: list[tuple[str, str, Expr]] = []  # (module, scope, value)
        for owner in sorted(self.ancestors(cls)):
            module, qual = owner
            facts = self.r.modules.facts(module)
            if facts is None:
                continue
            targets = {qual: attr}  # the class body binds `attr`, a method binds `self.attr`
            for d in facts.definitions:
                if d.parent == qual and d.kind == "method" and d.params and "staticmethod" not in d.decorators:
                    targets[d.qualname] = f"{d.params[0]}.{attr}"
            for ann in facts.annotations:
                if targets.get(ann.scope) == ann.target:
                    declared.append(self.resolve_types(module, ann.scope, ann.types))
            for a in facts.assigns:
                if targets.get(a.scope) == a.target:
                    if a.index is not None:
                        return None if not declared else _union(declared)  # `self.a, self.b = f()`
                    assigned.append((module, a.scope, a.value))
        if declared:
            return _union(declared)
        return _union(self.value_types(m, s, v) for m, s, v in assigned)

    # -- values -----------------------------------------------------------------------------------
    def value_types(self, module: str, scope: str, value: Expr) -> Types:
        """What an assigned value is an instance of: ``None`` (nothing), ``Foo(...)``, a call of a def
        that declares its return type, or a name or attribute typed as a receiver."""
        if isinstance(value, Const):
            return frozenset() if value.text == "None" else None
        if isinstance(value, Call):
            return self._call_types(module, scope, value)
        name = dotted(value) if isinstance(value, (Name, Attr)) else None
        if name is None:
            return None
        got = self.types_of((module, scope), name)
        if got is not None:
            return got
        res = self.r.resolve_expr(module, scope, value)
        if res and all(x.target.kind == "instance" and x.target.definition is not None for x in res):
            return frozenset((x.target.module, x.target.definition.qualname)  # type: ignore[union-attr]
                             for x in res)
        return None

    def _call_types(self, module: str, scope: str, call: Call) -> Types:
        res = self.r.resolve_expr(module, scope, call.func)
        if res:
            parts: list[Types] = []
            for x in res:
                t = x.target
                if t.kind != "def" or t.definition is None:
                    return None
                parts.append(frozenset({(t.module, t.definition.qualname)}) if t.is_class
                             else self.returns_of(t.module, t.definition))
            return _union(parts)
        # `quant_config.get_quant_method(...)` on a typed parameter: the method of its class.
        if not isinstance(call.func, Attr):
            return None
        recv = dotted(call.func.value)
        owners = self.types_of((module, scope), recv) if recv is not None else None
        if owners is None:
            return None
        parts = []
        for owner in sorted(owners):
            d = self.r.definitions(owner[0]).get(owner[1])
            found = self.r.class_member(owner[0], d, call.func.attr) if d is not None else []
            defs = [x.target for x in found if x.target.kind == "def" and x.target.definition is not None]
            if not defs:
                return None
            parts += [self.returns_of(t.module, t.definition) for t in defs if t.definition is not None]
        return _union(parts)

    def returns_of(self, module: str, fn: Definition) -> Types:
        """The classes a def declares it returns (``-> Base | None``); a class called builds itself."""
        if fn.kind == "class":
            return frozenset({(module, fn.qualname)})
        return self.resolve_types(module, fn.parent, fn.returns) if fn.returns else None

    def resolve_types(self, module: str, scope: str, names: tuple[str, ...]) -> Types:
        """The indexed classes the annotation names of ``names`` (read in ``scope``) stand for; None
        when one of them is not such a class (``torch.Tensor``, ``Any``, a ``TypeVar``)."""
        if not names:
            return None
        out: set[Node] = set()
        for n in names:
            classes = {(x.target.module, x.target.definition.qualname)  # type: ignore[union-attr]
                       for x in self.r.resolve_expr(module, scope, from_dotted(n)) if x.target.is_class}
            if not classes:
                return None
            out |= classes
        return frozenset(out)
