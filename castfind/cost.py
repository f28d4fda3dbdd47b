"""Cost: what a flagged cast moves per decode step, read from the code that allocated its buffer.

Runs after the engine, on findings only (a few hundred at most), never per cast candidate:

1. **The operand's buffer.** The cast's receiver is walked back inside its function (views, a scalar
   index, local names) to ``self.X`` (the holder is the method's class, or the classes ``self.h`` is built
   from for ``self.h.X``) or to a getter call ``recv.get_key_buffer(i)``. A getter is every method of that
   name whose returns that walk to ``self.X[...]`` of its class (directly or through ``self.m(...)``) agree on
   one ``X`` (a return that ends elsewhere, a dequantized copy, is not the buffer); when several classes have one, those
   whose name shares a word with the finding's path come first (``flashinfer_mla_backend`` → ``MLAPool``),
   then a base class over its subclasses; still several and the cost is unknown.
2. **The allocation.** ``self.X = torch.zeros(shape, dtype=...)`` in that class or a base
   (:class:`~castfind.facts.Allocation`), and each ``self.a`` in the shape replaced by the expression
   ``__init__`` set it to (in a base class too; of several assignments under ``if``s, the one whose test
   holds with the bound names, else the unconditional one). Each ``(class, attribute)`` is resolved once
   per run, at most :data:`MAX_DEPTH` levels deep and :data:`MAX_TEXT` characters long (past either: the
   name stays as it is, unknown), so no chain of conditional expressions can blow up.
3. **The formula.** ``bytes_per_call = numel × (src + dst bytes)``; ``per_step`` multiplies by ``N`` when the
   operand is one buffer of a per-layer list ``[... for _ in range(N)]`` (the stated rule: a decode step
   runs every layer once). ``value`` is ``per_step`` evaluated by a small evaluator over the bound names
   (numbers, + - * // / %, min/max, comparisons, ``and``/``or``/``not``, conditional expressions; anything
   else is unknown), or None.
4. **The verdict** (:func:`judged` applies it to the finding; :class:`~castfind.types.Cost` carries it):

   * **no-op** (the finding becomes info): the destination dtype is the dtype the operand was declared with
     (the allocation's ``dtype=``, or the getter's ``.view(dtype)``), whatever the configuration: the same
     literal dtype (``torch.float`` = ``torch.float32``), or the same formula when the cast is in the
     buffer's own class (``dtype=self.cache_dtype`` then ``.to(self.cache_dtype)``: one ``self``). The note
     says ``no-op: buffer declared torch.float32 at FILE:LINE``.
   * **depends on configuration** (severity kept): either dtype is a formula (``self.dtype`` → the
     ``--kv-cache-dtype`` name ``dtype``, ``q.dtype`` → ``activation_dtype``), or the same words in two
     classes; the note says when it is a no-op (``no-op when kv_cache_dtype == q.dtype``). When the bound
     names make the two dtypes equal, ``value`` is 0 (``.to`` returns its operand) and it ranks last.
   * **tiny** (an error becomes a warning): the buffer is small by construction
     (:func:`small_by_construction`: at most one free dimension factor, literal dimensions multiplying to at
     most ``cost.tiny.max_literal``; the declared shape, with a per-layer list's count as a factor), unless
     the bound names make it move ``cost.tiny.max_bytes`` or more per step. The thresholds and the
     dimension names that are small by what they count (``*experts*``, ``*kernel*``) are data in the
     rules' ``cost.tiny``, not code.

   A finding whose allocation is not found has no cost and keeps its severity: nothing is downgraded
   on a guess.

Names are bound from configuration (:class:`Bindings`, built from the rules' ``cost:`` section): a Hugging
Face ``config.json``, ``--kv-tokens``, ``--kv-cache-dtype`` and ``--set NAME=VALUE``.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from castfind import casts
from castfind.facts import Allocation, Attr, Call, Cast, Definition, Expr, FileFacts, Name, Slice, Subscript, render
from castfind.provenance import VIEW_ATTRIBUTES, Provenance, enclosing_class, holder_classes
from castfind.rules import CostSpec, RuleSet, glob_match, identifier_tokens
from castfind.types import Cost, CostVerdict, Finding

#: The version of what a carried cost row holds (a :class:`~castfind.types.Cost` with its verdict and note).
COST_VERSION = 2

#: How many ``self.a`` → expression substitutions may nest.
MAX_DEPTH = 6
#: The longest formula text a substitution may produce (longer: the name stays, unknown).
MAX_TEXT = 400
_MAX_WALK = 16

#: Bytes per element of each dtype castfind can size (``torch.`` prefix dropped).
DTYPE_BYTES: dict[str, int] = {
    "float64": 8, "double": 8, "int64": 8, "long": 8, "complex64": 8,
    "float32": 4, "float": 4, "int32": 4, "int": 4,
    "bfloat16": 2, "float16": 2, "half": 2, "int16": 2, "short": 2,
    "float8_e4m3fn": 1, "float8_e4m3fnuz": 1, "float8_e5m2": 1, "float8_e5m2fnuz": 1, "float8_e8m0fnu": 1,
    "int8": 1, "uint8": 1, "bool": 1, "float4_e2m1fn_x2": 1,
}


class Unknown(Exception):
    """An expression the evaluator cannot (or may not) evaluate."""


@dataclass(frozen=True)
class Bindings:
    """Names → expression text (``layer_num`` → ``61``, ``dtype`` → ``torch.float8_e4m3fn``); ``explicit``:
    the names given with ``--set`` (reported when no formula uses them)."""

    values: Mapping[str, str] = field(default_factory=dict)
    explicit: tuple[str, ...] = ()


def _dtype_text(value: str) -> str:
    """``bfloat16`` → ``torch.bfloat16`` (a config's ``torch_dtype``); anything else as it is."""
    return f"torch.{value}" if value in DTYPE_BYTES else value


def bindings(spec: CostSpec, *, config: Mapping[str, Any] | None = None, kv_tokens: int | None = None,
             kv_cache_dtype: str | None = None, sets: Sequence[tuple[str, str]] = ()) -> Bindings:
    """The names bound for this run: the rules' defaults, then the config fields (each as ``config.FIELD``
    too, what a model's constructor reads), the flags, ``--set``.

    Raises ValueError for a ``--kv-cache-dtype`` no ``cost.kv_cache_dtypes`` entry or dtype names.
    """
    values: dict[str, str] = dict(spec.defaults)
    for key, v in (config or {}).items():  # `config.hidden_size` in a model's own constructor
        if isinstance(key, str) and key.isidentifier() and isinstance(v, (int, float, str)) and not isinstance(v, bool):
            values[f"config.{key}"] = _dtype_text(v) if isinstance(v, str) else str(v)
    for key, names in spec.config:
        v = (config or {}).get(key)
        if isinstance(v, bool) or not isinstance(v, (int, float, str)):
            continue
        for n in names:
            values[n] = _dtype_text(v) if isinstance(v, str) else str(v)
    flags = dict(spec.flags)
    if kv_tokens is not None:
        for n in flags.get("kv_tokens", ()):
            values[n] = str(kv_tokens)
    if kv_cache_dtype is not None:
        table = dict(spec.kv_cache_dtypes)
        dt = table.get(kv_cache_dtype)
        if dt is None:
            dt = _dtype_text(kv_cache_dtype.removeprefix("torch."))
            if dt.removeprefix("torch.") not in DTYPE_BYTES:
                raise ValueError(f"unknown --kv-cache-dtype {kv_cache_dtype!r}; expected one of "
                                 f"{', '.join(sorted(table))}")
        for n in flags.get("kv_cache_dtype", ()):
            values[n] = dt
    for name, value in sets:
        values[name] = _dtype_text(value)
    return Bindings(values, tuple(dict.fromkeys(n for n, _ in sets)))


# --------------------------------------------------------------------------- evaluation


class Evaluator:
    """A tiny, safe evaluator of formula text over :class:`Bindings` (never ``eval``).

    Values are ints, floats, bools, None and dtypes (``"torch.bfloat16"``, as text). ``seen`` collects every
    name a formula read, bound or not (what an unused ``--set`` is judged by).
    """

    def __init__(self, bound: Bindings) -> None:
        self.bound = bound
        self.seen: set[str] = set()
        self._values: dict[str, Any] = {}
        self._active: set[str] = set()

    def value(self, text: str) -> Any:
        """The value of ``text``; raises :class:`Unknown`."""
        try:
            tree = ast.parse(text, mode="eval")
        except (SyntaxError, ValueError, RecursionError) as e:
            raise Unknown(text) from e
        return self._ev(tree.body, 0)

    def number(self, text: str) -> float | None:
        try:
            v = self.value(text)
        except (Unknown, ArithmeticError, TypeError, RecursionError):
            return None
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    def truth(self, text: str) -> bool | None:
        try:
            return bool(self.value(text))
        except (Unknown, ArithmeticError, TypeError, RecursionError):
            return None

    def _name(self, name: str) -> Any:
        self.seen.add(name)
        if name in self._values:
            return self._values[name]
        text = self.bound.values.get(name)
        if text is None or name in self._active:
            raise Unknown(name)
        self._active.add(name)
        try:
            got = self.value(text)
        finally:
            self._active.discard(name)
        self._values[name] = got
        return got

    def _ev(self, node: ast.AST, depth: int) -> Any:  # noqa: C901 - one case per node kind
        if depth > 40:
            raise Unknown("too deep")
        d = depth + 1
        if isinstance(node, ast.Constant) and (node.value is None or isinstance(node.value, (int, float, bool))):
            return node.value
        if isinstance(node, ast.Name):
            if node.id in ("True", "False", "None"):
                return {"True": True, "False": False, "None": None}[node.id]
            return self._name(node.id)
        if isinstance(node, ast.Attribute):
            text = ast.unparse(node)
            if text.startswith("torch.") and text.count(".") == 1:
                return text  # a dtype
            if text in self.bound.values or "." in text:
                return self._name(text)
            raise Unknown(text)
        if isinstance(node, ast.BinOp):
            a, b = self._ev(node.left, d), self._ev(node.right, d)
            if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (a, b)):
                raise Unknown(ast.unparse(node))
            op = node.op
            if isinstance(op, ast.Add):
                return a + b
            if isinstance(op, ast.Sub):
                return a - b
            if isinstance(op, ast.Mult):
                return a * b
            if isinstance(op, ast.FloorDiv):
                return a // b
            if isinstance(op, ast.Div):
                return a / b
            if isinstance(op, ast.Mod):
                return a % b
            raise Unknown(ast.unparse(node))
        if isinstance(node, ast.UnaryOp):
            u = self._ev(node.operand, d)
            if isinstance(node.op, ast.Not):
                return not u
            if isinstance(node.op, ast.USub) and isinstance(u, (int, float)):
                return -u
            raise Unknown(ast.unparse(node))
        if isinstance(node, ast.BoolOp):
            want = isinstance(node.op, ast.Or)  # `and` stops at the first falsy value, `or` at the first truthy
            v: Any = not want
            for x in node.values:
                v = self._ev(x, d)
                if bool(v) == want:
                    return v
            return v
        if isinstance(node, ast.IfExp):
            return self._ev(node.body if self._ev(node.test, d) else node.orelse, d)
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            a, b = self._ev(node.left, d), self._ev(node.comparators[0], d)
            cmp = node.ops[0]
            if isinstance(cmp, (ast.Eq, ast.Is)):
                return a == b
            if isinstance(cmp, (ast.NotEq, ast.IsNot)):
                return a != b
            if isinstance(cmp, (ast.In, ast.NotIn)) and isinstance(b, tuple):
                return (a in b) == isinstance(cmp, ast.In)
            raise Unknown(ast.unparse(node))
        if isinstance(node, ast.Tuple):
            return tuple(self._ev(e, d) for e in node.elts)
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("min", "max")
                and node.args and not node.keywords):
            vals = [self._ev(a, d) for a in node.args]
            if not all(isinstance(x, (int, float)) for x in vals):
                raise Unknown(ast.unparse(node))
            return min(vals) if node.func.id == "min" else max(vals)
        raise Unknown(ast.unparse(node))


def dtype_bytes(value: Any) -> int | None:
    """Bytes per element of a dtype value (``"torch.bfloat16"`` → 2), None when not one castfind sizes."""
    return DTYPE_BYTES.get(value.removeprefix("torch.")) if isinstance(value, str) else None


def names_in(text: str) -> set[str]:
    """The bare names a formula reads."""
    try:
        return {n.id for n in ast.walk(ast.parse(text, mode="eval")) if isinstance(n, ast.Name)}
    except (SyntaxError, ValueError, RecursionError):
        return set()


# --------------------------------------------------------------------------- classes and attributes


class Lookup(Protocol):
    """What the cost model reads from the index (:mod:`castfind.pipeline` answers, memoised there)."""

    def definitions(self, name: str) -> Sequence[tuple[FileFacts, Definition]]:
        """Every ``def``/``class`` named ``name`` in the roots."""
        ...

    def facts(self, root: str, path: str) -> FileFacts | None:
        """The facts of a scanned file."""
        ...


ClassRef = tuple[FileFacts, Definition]


@dataclass(frozen=True, slots=True)
class _Held:
    """An operand's buffer: attribute ``attr`` of the classes ``holders``, indexed by a scalar or not, viewed
    as ``view`` (a dtype) or not."""

    holders: tuple[ClassRef, ...]
    attr: str
    indexed: bool
    view: str | None


@dataclass(frozen=True, slots=True)
class _GetterCall:
    """An operand that is a method call ``recv.name(...)`` (``on_self``: ``recv`` is ``self``)."""

    name: str
    indexed: bool
    view: str | None
    on_self: bool = False


class CostModel:
    """Costs of findings for one run. Every class hierarchy, attribute and getter is resolved once."""

    def __init__(self, rules: RuleSet, lookup: Lookup, bound: Bindings) -> None:
        self.rules = rules
        self.lookup = lookup
        self.ev = Evaluator(bound)
        self.prov = Provenance(rules)
        self.views = set(rules.views)
        self._attrs: dict[tuple[str, str, str], str | None] = {}
        self._mro: dict[tuple[str, str], tuple[ClassRef, ...]] = {}
        self._getters: dict[str, tuple[_Held, ...]] = {}
        self._defs: dict[str, Sequence[tuple[FileFacts, Definition]]] = {}
        self.formulas: list[str] = []

    # -- the operand --------------------------------------------------------------------------------
    def _defs_named(self, name: str) -> Sequence[tuple[FileFacts, Definition]]:
        got = self._defs.get(name)
        if got is None:
            got = self._defs[name] = self.lookup.definitions(name)
        return got

    def _class_ref(self, facts: FileFacts, qualname: str) -> ClassRef | None:
        return next(((facts, d) for d in facts.definitions if d.qualname == qualname and d.kind == "class"), None)

    def _walk(self, facts: FileFacts, scope: str, expr: Expr, line: int) -> _Held | _GetterCall | None:
        """Back from ``expr`` to ``self.X`` (a :class:`_Held`) or to a getter call (:class:`_GetterCall`)."""
        indexed, view = False, None
        for _ in range(_MAX_WALK):
            if isinstance(expr, Call):
                f = expr.func
                if isinstance(f, Attr) and f.attr in self.views:
                    if f.attr == "view" and len(expr.args) == 1 and view is None and _dtype_like(render(expr.args[0])):
                        view = render(expr.args[0])
                    expr = f.value
                    continue
                if isinstance(f, Attr):
                    on_self = isinstance(f.value, Name) and f.value.id == "self"
                    return _GetterCall(f.attr, indexed or bool(expr.args), view, on_self)
                return None
            if isinstance(expr, Subscript):
                if not expr.index or isinstance(expr.index[0], Slice):
                    return None  # `buf[:bs]`, `buf[:, :, :d]`: not what the allocation holds
                indexed = True
                expr = expr.value
                continue
            if isinstance(expr, Attr):
                if expr.attr in VIEW_ATTRIBUTES:
                    expr = expr.value
                    continue
                holders = self._holders(facts, scope, expr)
                return _Held(holders, expr.attr, indexed, view) if holders else None
            if isinstance(expr, Name):
                a = self.prov.assignment(facts, scope, expr.id, line)
                if a is None or a.loop or a.index is not None:
                    return None
                expr, line = a.value, a.line
                continue
            return None
        return None

    def _holders(self, facts: FileFacts, scope: str, expr: Attr) -> tuple[ClassRef, ...]:
        if isinstance(expr.value, Name) and expr.value.id == "self":
            cls = enclosing_class(facts, scope)
            ref = self._class_ref(facts, cls) if cls else None
            return (ref,) if ref else ()
        out: list[ClassRef] = []
        for name in holder_classes(facts, scope, expr):
            out += [(ff, d) for ff, d in self._defs_named(name) if d.kind == "class"][:1]
        return tuple(out)

    def _getter(self, name: str) -> tuple[_Held, ...]:
        """Every class method ``name`` whose returns all end at one ``self.X`` of its class."""
        got = self._getters.get(name)
        if got is not None:
            return got
        self._getters[name] = ()  # a getter that calls itself ends here
        found: list[_Held] = []
        for facts, d in self._defs_named(name):
            if d.kind != "method":
                continue
            held: list[_Held] = []
            for r in facts.returns:
                if r.scope != d.qualname:
                    continue
                end = self._walk(facts, d.qualname, r.value, r.line)
                if isinstance(end, _GetterCall) and end.on_self:  # `return self._get_key_buffer(layer_id)`
                    own = [h for h in self._getter(end.name) if h.holders and h.holders[0][0] is facts
                           and h.holders[0][1].qualname == d.parent]
                    held += [_Held(h.holders, h.attr, h.indexed, h.view or end.view) for h in own[:1]]
                elif isinstance(end, _Held):
                    held.append(end)
            # Returns that end elsewhere (a dequantized copy) are not the buffer: the ones that do must agree.
            if not held or len({h.attr for h in held}) != 1:
                continue
            view = next((h.view for h in held if h.view), None)
            found.append(_Held(held[0].holders, held[0].attr, all(h.indexed for h in held), view))
        self._getters[name] = tuple(found)
        return self._getters[name]

    def _choose(self, cands: Sequence[_Held], path: str) -> _Held | None:
        """The getter's class for a finding in ``path``: the one sharing a word with the path, a base over its
        subclasses, or None when that leaves more than one."""
        if len(cands) <= 1:
            return cands[0] if cands else None
        words = {t for part in re.split(r"[/._]", path) for t in identifier_tokens(part) if len(t) >= 3}

        def overlap(h: _Held) -> int:
            return sum(1 for t in identifier_tokens(h.holders[0][1].name) if t in words)

        best = max(overlap(h) for h in cands)
        top = [h for h in cands if overlap(h) == best]
        names = {h.holders[0][1].name for h in top}
        bases = [h for h in top if not any(b.rsplit(".", 1)[-1] in names for b in h.holders[0][1].bases)]
        return bases[0] if len(bases) == 1 else None

    # -- the class hierarchy and its attributes ---------------------------------------------------------
    def _mro_of(self, ref: ClassRef) -> tuple[ClassRef, ...]:
        key = (ref[0].module, ref[1].qualname)
        got = self._mro.get(key)
        if got is not None:
            return got
        out: list[ClassRef] = []
        todo = [ref]
        while todo and len(out) < MAX_DEPTH + 2:
            cur = todo.pop(0)
            if any(c[0] is cur[0] and c[1] is cur[1] for c in out):
                continue
            out.append(cur)
            for b in cur[1].bases:
                short = b.rsplit(".", 1)[-1]
                defs = [(ff, d) for ff, d in self._defs_named(short) if d.kind == "class"]
                same = [x for x in defs if x[0].module == cur[0].module]
                todo += (same or defs)[:1]
        self._mro[key] = tuple(out)
        return self._mro[key]

    def _allocs(self, ref: ClassRef, target: str, kinds: tuple[str, ...]) -> list[Allocation]:
        """The allocations of ``target`` in the first class of ``ref``'s hierarchy that has any."""
        return self._allocs_in(ref, target, kinds)[1]

    def _allocs_in(self, ref: ClassRef, target: str, kinds: tuple[str, ...]) -> tuple[str, list[Allocation]]:
        """:meth:`_allocs` and the path (in its root) of the file that holds them."""
        for facts, d in self._mro_of(ref):
            prefix = d.qualname + "."
            got = [a for a in facts.allocations if a.target == target and a.kind in kinds
                   and a.scope.startswith(prefix) and "." not in a.scope[len(prefix):]]
            if got:
                return facts.path, got
        return "", []

    def attribute(self, ref: ClassRef, attr: str, depth: int = 0) -> str | None:
        """The expression ``self.attr`` stands for in class ``ref`` (its names substituted in turn), or None."""
        key = (ref[0].module, ref[1].qualname, attr)
        if key in self._attrs:
            return self._attrs[key]
        if depth > MAX_DEPTH:
            return None  # not memoised: the same attribute reached less deeply may still resolve
        self._attrs[key] = None  # a cycle (`self.a` set from `self.a`) ends here: unknown
        cands = [a for a in self._allocs(ref, f"self.{attr}", ("value",)) if a.text != "None"]
        chosen = None
        conditional = [a for a in cands if a.when is not None]
        for a in conditional:
            if self.ev.truth(self.substitute(ref, a.when or "", depth + 1)):
                chosen = a
                break
        if chosen is None:
            plain = [a for a in cands if a.when is None]
            if plain:
                chosen = plain[-1]
            elif len({a.text for a in cands}) == 1:
                chosen = cands[0]
        got = self.substitute(ref, chosen.text, depth + 1) if chosen is not None else None
        if got is not None and len(got) > MAX_TEXT:
            got = None
        self._attrs[key] = got
        return got

    def substitute(self, ref: ClassRef, text: str, depth: int = 0) -> str:
        """``text`` with each ``self.a`` replaced by what ``a`` is set to (unknown ones stay as they are)."""
        if depth > MAX_DEPTH or ("self." not in text and " if " not in text):
            return text
        try:
            tree = ast.parse(text, mode="eval")
        except (SyntaxError, ValueError, RecursionError):
            return text
        model = self

        class _Sub(ast.NodeTransformer):
            def visit_IfExp(self, node: ast.IfExp) -> ast.AST:
                """A conditional expression whose test the bound names decide is the branch taken."""
                self.generic_visit(node)
                test = model.ev.truth(ast.unparse(node.test))
                return node if test is None else (node.body if test else node.orelse)

            def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
                if isinstance(node.value, ast.Name) and node.value.id == "self":
                    got = model.attribute(ref, node.attr, depth)
                    if got is not None:
                        try:
                            return ast.parse(got, mode="eval").body
                        except (SyntaxError, ValueError, RecursionError):
                            return node
                    return node
                return self.generic_visit(node)

        out = ast.unparse(_Sub().visit(tree))
        return out if len(out) <= MAX_TEXT else text

    # -- the cost -------------------------------------------------------------------------------------
    def cost(self, finding: Finding) -> Cost | None:
        """The cost of one finding, or None when its operand's allocation is not found."""
        facts = self.lookup.facts(finding.root, finding.path)
        if facts is None:
            return None
        cast = next((c for c in facts.casts if c.line == finding.line and c.column == finding.column), None)
        if cast is None:
            return None
        method = casts.by_name().get(cast.method)
        if method is None or method.operand != "receiver":
            return None
        end = self._walk(facts, cast.scope, cast.receiver, cast.line)
        if isinstance(end, _GetterCall):
            got = self._choose(self._getter(end.name), finding.path)
            if got is None:
                return None
            end = _Held(got.holders, got.attr, got.indexed or end.indexed, got.view or end.view)
        if not isinstance(end, _Held) or not end.holders:
            return None
        cls = enclosing_class(facts, cast.scope)
        own = self._class_ref(facts, cls) if cls else None
        return self._cost_of(end, *self._dst(cast), own=own)

    def _dst(self, cast: Cast) -> tuple[str | None, str]:
        """The destination dtype as a formula (``activation_dtype`` for ``q.dtype``), and as written."""
        method = casts.by_name()[cast.method]
        if method.dtype is not None:
            dt = f"torch.{method.dtype}"
            return (dt, dt) if method.dtype in DTYPE_BYTES else (None, "")
        arg = next((v for k, v in cast.kwargs if k == "dtype"), cast.args[0] if cast.args else None)
        if arg is None:
            return None, ""
        text = render(arg)
        if any(glob_match(p, text) for p in self.rules.cost.activation):
            return "activation_dtype", text
        return (text, text) if _dtype_like(text) else (None, "")

    def _cost_of(self, held: _Held, dst: str | None, dst_text: str = "", own: ClassRef | None = None) -> Cost | None:
        """``own``: the class the cast is in (its ``self.a`` in the destination dtype is substituted there)."""
        ref = held.holders[0]
        same = own is not None and own[0] is ref[0] and own[1] is ref[1]
        path, found = self._allocs_in(ref, f"self.{held.attr}", ("tensor", "parameter", "linear"))
        allocs = [a for a in found if a.shape is not None]
        if not allocs:
            return None
        alloc = next((a for a in allocs if a.when is None), allocs[0])
        assert alloc.shape is not None
        dims = declared = [self.substitute(ref, d) for d in alloc.shape]
        per_layer = alloc.count is not None and held.indexed
        if held.indexed and alloc.count is None:
            dims = dims[1:]  # `buf[i]` of one tensor: a slice of its first axis
        src = self.substitute(ref, held.view or alloc.dtype or "") or None
        dst = dst if dst is None or own is None else self.substitute(own, dst)
        count = self.substitute(ref, alloc.count) if per_layer and alloc.count else None
        sizes = [self._size_text(t) for t in (src, dst)]
        numel = " * ".join(f"({d})" if not _atomic(d) else d for d in dims) or "1"
        per_call = f"{numel} * ({sizes[0]} + {sizes[1]})"
        per_step = f"{count if _atomic(count or '') else f'({count})'} * {per_call}" if count else per_call
        self.formulas += [*dims, *(t for t in (src, dst, count) if t)]
        value = None
        src_b, dst_b = (self._bytes(t) for t in (src, dst))
        n = [self.ev.number(d) for d in dims]
        times = self.ev.number(count) if count else 1.0
        if src_b is not None and dst_b is not None and times is not None and all(x is not None for x in n):
            value = float(times)
            for x in n:
                value *= float(x or 0)
            value *= src_b + dst_b
        owner = ref[1].qualname
        at = f"{path}:{alloc.line}"
        written = held.view or alloc.dtype or ""
        verdict, note = self._noop((src, written, ref[1].name), (dst, dst_text, own[1].name if own else ""),
                                   f"{written} at {at}", same)
        if verdict == "" and note and value is not None and self._equal_when_bound(src, dst):
            value = 0.0  # the bound dtypes are the same: `.to` returns its operand, nothing moves
            note += " (so with the bound dtypes it moves nothing)"
        if verdict != "no-op":
            tiny, why = self._tiny([*declared, *([count] if count else [])], value)
            verdict = tiny
            note = f"{note}; {why}" if note and why else note or why
        return Cost(tuple(dims), src, dst, per_call, per_step, value, f"{owner}.{held.attr}", at, verdict, note)

    # -- no-op and tiny casts ---------------------------------------------------------------------------
    def _noop(self, src: tuple[str | None, str, str], dst: tuple[str | None, str, str], declared: str,
              same: bool) -> tuple[CostVerdict, str]:
        """``("no-op", why)`` when the cast's destination is the declared dtype whatever the configuration:
        the same literal dtype, or the same formula when the cast is in the buffer's own class (``same``),
        where both ``self`` are one object; ``("", "no-op when A == B")`` when that depends on configuration
        (or on two classes' attributes of one name); ``("", "")`` when it is a real cast (or a dtype is not
        known). ``src`` and ``dst``: each dtype as a formula, as written, and the class it was written in."""
        if not src[0] or not dst[0]:
            return "", ""
        a, b = _canonical(src[0]), _canonical(dst[0])
        if a == b and (same or _literal_dtype(a)):
            return "no-op", f"no-op: buffer declared {declared}"
        if _literal_dtype(a) and _literal_dtype(b):
            return "", ""
        qualify = a == b  # one name in two classes: say whose
        return "", f"no-op when {self._describe(*src, qualify)} == {self._describe(*dst, qualify)}"

    def _equal_when_bound(self, src: str | None, dst: str | None) -> bool:
        try:
            a, b = (self.ev.value(t or "") for t in (src, dst))
        except (Unknown, ArithmeticError, TypeError, RecursionError):
            return False
        return isinstance(a, str) and isinstance(b, str) and _canonical(a) == _canonical(b)

    def _describe(self, formula: str | None, written: str, cls: str, qualify: bool = False) -> str:
        """A dtype as the user knows it: the flag that binds it (``kv_cache_dtype``), else the formula
        (a constructor parameter ``--set`` can bind), else as the cast wrote it (``q.dtype``), with ``self.``
        as its class (``Pool.dtype``)."""
        flag = next((f for f, names in self.rules.cost.flags if formula in names), None)
        if flag:
            return flag
        text = formula if formula and formula != "activation_dtype" and "self." not in formula and not qualify \
            else written or formula or "?"
        text = text.replace("self.", f"{cls}.") if cls else text
        return text if _atomic(text) else f"({text})"

    def _tiny(self, shape: Sequence[str], value: float | None) -> tuple[CostVerdict, str]:
        """``("tiny", why)`` for a buffer small by construction whose bound bytes (if any) stay under
        ``cost.tiny.max_bytes``; ``("", why not)`` when the bound values make it large."""
        spec = self.rules.cost
        if spec.tiny_max_bytes is None:
            return "", ""
        why = small_by_construction(shape, spec)
        if why is None:
            return "", ""
        if value is not None and value >= spec.tiny_max_bytes:
            return "", f"{why}, but {value:.0f} bytes per step with the bound values (>= {spec.tiny_max_bytes:.0f})"
        return "tiny", why

    def _bytes(self, dtype: str | None) -> int | None:
        if dtype is None:
            return None
        try:
            return dtype_bytes(self.ev.value(dtype))
        except (Unknown, ArithmeticError, TypeError, RecursionError):
            return None

    def _size_text(self, dtype: str | None) -> str:
        b = self._bytes(dtype)
        return str(b) if b is not None else f"sizeof({dtype or '?'})"

    def unused_sets(self) -> list[str]:
        """The ``--set`` names no formula of this run read."""
        used = set(self.ev.seen)
        for f in self.formulas:
            used |= names_in(f)
        return [n for n in self.ev.bound.explicit if n not in used]


_ALIASES = {"float": "float32", "half": "float16", "double": "float64", "long": "int64", "int": "int32",
            "short": "int16"}


def _canonical(dtype: str) -> str:
    """``torch.float`` → ``torch.float32`` (torch's aliases); anything else as it is."""
    name = dtype.removeprefix("torch.")
    return f"torch.{_ALIASES[name]}" if dtype.startswith("torch.") and name in _ALIASES else dtype


def _literal_dtype(text: str) -> bool:
    return text.startswith("torch.") and text.removeprefix("torch.") in DTYPE_BYTES


#: A dimension factor count that is never small (an expression the rule cannot read).
_MANY = 99


def _factors(node: ast.AST, small: Sequence[str]) -> tuple[int, float]:
    """``(free factors, literal multiplier)`` of one dimension's expression: a name not matched by ``small``
    is one free factor, a product adds its operands' factors and multiplies their literals, a sum (or
    ``max``, or a conditional) takes the larger of its operands', a division keeps its dividend's."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return 0, abs(float(node.value))
    if isinstance(node, (ast.Name, ast.Attribute)):
        text = ast.unparse(node)
        return (0, 1.0) if any(glob_match(p, text) for p in small) else (1, 1.0)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return _factors(node.operand, small)
    if isinstance(node, ast.BinOp):
        (fa, la), (fb, lb) = _factors(node.left, small), _factors(node.right, small)
        if isinstance(node.op, ast.Mult):
            return fa + fb, la * lb
        if isinstance(node.op, (ast.Add, ast.Sub)):
            return (0, la + lb) if fa == fb == 0 else (max(fa, fb), max(la, lb))
        if isinstance(node.op, (ast.FloorDiv, ast.Div, ast.Mod)):
            return fa, la
    if isinstance(node, ast.IfExp):
        (fa, la), (fb, lb) = _factors(node.body, small), _factors(node.orelse, small)
        return max(fa, fb), max(la, lb)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("min", "max") and node.args:
        got = [_factors(a, small) for a in node.args]
        return min(got) if node.func.id == "min" else (max(f for f, _ in got), max(x for _, x in got))
    return _MANY, math.inf


def small_by_construction(shape: Sequence[str], spec: CostSpec) -> str | None:
    """Why a buffer of ``shape`` (dimension formulas; a per-layer list's count among them) is small by
    construction, or None when it is not.

    The rule: across all dimensions, at most **one free factor** (a name that ``cost.tiny.small_dims`` does
    not match: a token count, a hidden size, an unresolved attribute; a product of names counts each), and
    the literal dimensions (and literal multipliers) multiply to at most ``cost.tiny.max_literal``. A 1-D
    vector ``[hidden]``, a gate ``[num_experts, hidden]`` and a depthwise conv ``[c, 1, 4]`` are small; a pool
    ``[size + page_size, 1, kv_lora_rank + rope]`` (two free factors), a weight ``[out, in]``, a flat pool
    ``[size * heads * dim]`` or ``[size, 1, 576]`` (576 > max_literal) are not. An expression the rule cannot
    read (a call, a power) is never small.
    """
    free, literal = 0, 1.0
    for dim in shape:
        try:
            node = ast.parse(dim, mode="eval").body
        except (SyntaxError, ValueError, RecursionError):
            return None
        f, lit = _factors(node, spec.small_dims)
        free, literal = free + f, literal * lit
    if free > 1 or literal > spec.tiny_max_literal:
        return None
    what = "a constant shape" if free == 0 else "one free dimension"
    return f"small by construction: [{', '.join(shape)}] has {what}"


def _atomic(text: str) -> bool:
    return bool(re.fullmatch(r"[\w.]+", text))


def _dtype_like(text: str) -> bool:
    return "dtype" in text or text.startswith("torch.")


def judged(finding: Finding, cost: Cost | None) -> Finding:
    """``finding`` with its cost, and the severity the cost's verdict gives it: a no-op cast is info, a
    buffer small by construction makes an error a warning (the message says why); otherwise as it was."""
    if cost is None:
        return finding
    if cost.verdict == "no-op" and finding.severity != "info":
        return replace(finding, cost=cost, severity="info", message=f"{finding.message} ({cost.note})")
    if cost.verdict == "tiny" and finding.severity == "error":
        return replace(finding, cost=cost, severity="warning", message=f"{finding.message} ({cost.note})")
    return replace(finding, cost=cost)
