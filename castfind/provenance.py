"""Provenance: is a cast's operand a *whole buffer*? Walk it back inside its function.

Views (``view``, ``reshape``, ``permute``, basic slices on later axes, a scalar index like
``[layer_id]``) keep a buffer whole; a local name is followed to its assignment; the walk stops at
a call, an attribute or a parameter. It ends *whole* at a getter named by the rules, a getter the
index infers (every ``return`` of it is itself a whole buffer), or an attribute named by the rules.
Gathering with an index tensor (``buf[kv_indices]``) or slicing the first axis to the batch
(``buf[:bs]``) is not a whole buffer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from castfind.facts import Attr, Call, Const, Expr, FileFacts, Name, Other, Slice, Subscript, dotted, render
from castfind.rules import RuleSet

_MAX_STEPS = 24


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a whole buffer comes from: its kind, the receiver text that names it, the hops walked."""

    kind: str
    path: str
    hops: tuple[str, ...]


class Provenance:
    """Receiver → :class:`Origin`. ``getter_kind`` answers for inferred getters (by function name)."""

    def __init__(self, rules: RuleSet, getter_kind: Callable[[str], str | None] | None = None) -> None:
        self.rules = rules
        self.getter_kind = getter_kind or (lambda name: None)
        self._views = set(rules.views)
        self._getters = {g: k.name for k in rules.buffers.values() for g in k.getters}

    def whole_index(self, index: tuple[Expr | Slice, ...]) -> bool:
        """True when indexing keeps the buffer whole (a scalar layer index, basic slices on later axes)."""
        for pos, el in enumerate(index):
            if isinstance(el, Slice):
                if pos == 0 and (el.lower is not None or el.upper is not None):
                    return False  # a range of rows: the batch, not the buffer
                continue
            if isinstance(el, Const):
                if el.text == "..." or el.text.lstrip("-").isdigit() or el.text == "None":
                    continue
                return False
            name = dotted(el)
            if name is not None:
                if self.rules.is_scalar_index(name):
                    continue
                return False
            if (isinstance(el, Other) and el.kind == "BinaryOperation" and el.names
                    and all(self.rules.is_scalar_index(n) for n in el.names)):
                continue
            return False
        return True

    def kind_of_call(self, func: Expr) -> str | None:
        name = func.attr if isinstance(func, Attr) else func.id if isinstance(func, Name) else None
        if name is None:
            return None
        return self._getters.get(name) or self.getter_kind(name)

    def origin(self, facts: FileFacts, scope: str, expr: Expr, line: int) -> Origin | None:
        """The whole buffer ``expr`` is, or None."""
        hops: list[str] = []
        seen: set[tuple[str, int]] = set()
        for _ in range(_MAX_STEPS):
            if isinstance(expr, Call):
                f = expr.func
                if isinstance(f, Attr) and f.attr in self._views:
                    hops.append(f".{f.attr}() is a view")
                    expr = f.value
                    continue
                kind = self.kind_of_call(f)
                if kind is not None:
                    name = f.attr if isinstance(f, Attr) else render(f)
                    hops.append(f"{name}() returns the whole {kind}")
                    return Origin(kind, render(expr), tuple(hops))
                return None
            if isinstance(expr, Subscript):
                if not self.whole_index(expr.index):
                    return None
                hops.append(f"[{', '.join(render(i) for i in expr.index)}] keeps it whole")
                expr = expr.value
                continue
            if isinstance(expr, Attr):
                for buffer in self.rules.buffers.values():
                    if buffer.attribute_matches(expr.attr):
                        hops.append(f".{expr.attr} is a {buffer.name} buffer")
                        return Origin(buffer.name, render(expr), tuple(hops))
                return None
            if isinstance(expr, Name):
                a = self._assignment(facts, scope, expr.id, line)
                if a is None or (a.target, a.line) in seen:
                    return None
                seen.add((a.target, a.line))
                hops.append(f"{expr.id} = {render(a.value)} (line {a.line})")
                expr, line = a.value, a.line
                continue
            return None
        return None

    @staticmethod
    def _assignment(facts: FileFacts, scope: str, name: str, line: int):
        """The latest plain assignment to ``name`` in ``scope`` before ``line`` (not tuple unpacking)."""
        best = None
        for a in facts.assigns:
            if (a.scope == scope and a.target == name and a.line <= line and a.index is None
                    and (best is None or a.line >= best.line)):
                best = a
        if best is not None and best.line == line:
            # `x = x.to(...)`: the value on the cast's own line is the cast itself, look earlier.
            earlier = [a for a in facts.assigns
                       if a.scope == scope and a.target == name and a.line < line and a.index is None]
            return max(earlier, key=lambda a: a.line) if earlier else None
        return best
