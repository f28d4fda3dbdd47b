"""Extract: one source file → one :class:`~castfind.read.facts.FileFacts`. The only stage that touches libcst.

The tree is walked *once*, through :mod:`castfind.read.cstwalk` (libcst's code generator, which sees every
node in source order and every token, so lines and columns come from the walk itself). Scopes
(class/function nesting), loop depth and enclosing ``if``/``try`` are tracked on small stacks.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

import libcst as cst

from castfind.core import casts
from castfind.core.heap import collector_paused
from castfind.read.allocs import allocations
from castfind.read.cstwalk import TokenWalker, parse_module, walk
from castfind.read.facts import (
    Allocation,
    Annotation,
    Assign,
    Attr,
    Call,
    CallSite,
    Cast,
    Const,
    Definition,
    Dynamic,
    Expr,
    FileFacts,
    Guard,
    Import,
    LazyExport,
    Name,
    Other,
    Produced,
    Return,
    Seq,
    Slice,
    Subscript,
    dotted,
    render,
)

_KEYWORD_CONSTS = frozenset({"None", "True", "False"})
_LITERALS = (cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.ConcatenatedString)
_MAX_DEPTH = 12


def _name_of(node: cst.CSTNode | None) -> str | None:
    """Dotted text of a Name/Attribute chain (import module paths, decorators, bases)."""
    if node is None:
        return None
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        left = _name_of(node.value)
        return f"{left}.{node.attr.value}" if left else None
    if isinstance(node, cst.Call):
        return _name_of(node.func)
    return None


#: Wrappers an annotation is unwrapped through: every element (``Optional``, ``Union``) or the first
#: (``Annotated[X, meta]``, ``ClassVar[X]``, ``Final[X]``).
_UNION_WRAPPERS = frozenset({"Optional", "Union"})
_FIRST_WRAPPERS = frozenset({"Annotated", "ClassVar", "Final"})


def annotation_types(node: cst.BaseExpression | None, depth: int = 0) -> tuple[str, ...]:
    """The dotted class names an annotation allows (``Optional[A]``, ``A | None``, ``Union[A, B]``,
    ``"A"``); ``None`` is dropped, a generic ``G[T]`` names ``G``. Empty when it names no class."""
    if node is None or depth > _MAX_DEPTH:
        return ()
    d = depth + 1
    if isinstance(node, (cst.Name, cst.Attribute)):
        name = _name_of(node)
        return (name,) if name and name != "None" else ()
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.BitOr):
        return _unique(annotation_types(node.left, d) + annotation_types(node.right, d))
    if isinstance(node, cst.SimpleString):
        text = node.evaluated_value
        if not isinstance(text, str):
            return ()
        try:
            inner = cst.parse_expression(text.strip())
        except (cst.ParserSyntaxError, RecursionError, ValueError):
            return ()
        return annotation_types(inner, d)
    if isinstance(node, cst.Subscript) and isinstance(node.value, (cst.Name, cst.Attribute)):
        base = _name_of(node.value) or ""
        elems = [el.slice.value for el in node.slice if isinstance(el.slice, cst.Index)]
        last = base.rsplit(".", 1)[-1]
        if last in _UNION_WRAPPERS:
            return _unique(tuple(n for e in elems for n in annotation_types(e, d)))
        if last in _FIRST_WRAPPERS:
            return annotation_types(elems[0], d) if elems else ()
        return (base,) if base else ()
    return ()


def _unique(names: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(names))


def to_expr(node: cst.CSTNode, depth: int = 0) -> Expr:
    """Convert an expression node to the small plain-data :data:`~castfind.read.facts.Expr` tree."""
    if depth > _MAX_DEPTH:
        return Other("Deep")
    d = depth + 1
    if isinstance(node, cst.Name):
        # ``None``/``True``/``False`` are keywords, not names: ``buf[None]`` adds an axis.
        return Const(node.value) if node.value in _KEYWORD_CONSTS else Name(node.value)
    if isinstance(node, cst.Attribute):
        return Attr(to_expr(node.value, d), node.attr.value)
    if isinstance(node, cst.Call):
        args: list[Expr] = []
        kwargs: list[tuple[str, Expr]] = []
        for a in node.args:
            if a.keyword is not None:
                kwargs.append((a.keyword.value, to_expr(a.value, d)))
            elif not a.star:
                args.append(to_expr(a.value, d))
        return Call(to_expr(node.func, d), tuple(args), tuple(kwargs))
    if isinstance(node, cst.Subscript):
        index: list[Expr | Slice] = []
        for el in node.slice:
            s = el.slice
            if isinstance(s, cst.Index):
                index.append(to_expr(s.value, d))
            elif isinstance(s, cst.Slice):
                index.append(
                    Slice(
                        to_expr(s.lower, d) if s.lower is not None else None,
                        to_expr(s.upper, d) if s.upper is not None else None,
                        to_expr(s.step, d) if s.step is not None else None,
                    )
                )
        return Subscript(to_expr(node.value, d), tuple(index))
    if isinstance(node, _LITERALS):
        if isinstance(node, cst.ConcatenatedString):
            return Const("<str>")
        return Const(node.value)
    if isinstance(node, cst.UnaryOperation) and isinstance(node.expression, (cst.Integer, cst.Float)):
        return Const("-" + node.expression.value)
    if isinstance(node, (cst.Tuple, cst.List)):
        return Seq(tuple(to_expr(e.value, d) for e in node.elements if isinstance(e, cst.Element)))
    if isinstance(node, cst.Ellipsis):
        return Const("...")
    if isinstance(node, cst.BinaryOperation):
        left, right = to_expr(node.left, d), to_expr(node.right, d)
        op = _BINOPS.get(type(node.operator), "?")
        names = tuple(n for n in (dotted(left), dotted(right)) if n)
        names += tuple(n for x in (left, right) if isinstance(x, Other) for n in x.names)
        return Other("BinaryOperation", names, f"{render(left)} {op} {render(right)}", (left, right))
    if isinstance(node, cst.IfExp):
        body, orelse = to_expr(node.body, d), to_expr(node.orelse, d)
        return Other("IfExp", tuple(n for n in (dotted(body), dotted(orelse)) if n), "")
    return Other(type(node).__name__)


_BINOPS = {
    cst.Add: "+", cst.Subtract: "-", cst.Multiply: "*", cst.Divide: "/", cst.FloorDivide: "//",
    cst.Modulo: "%", cst.Power: "**", cst.MatrixMultiply: "@", cst.BitAnd: "&", cst.BitOr: "|",
    cst.BitXor: "^", cst.LeftShift: "<<", cst.RightShift: ">>",
}

_WS = re.compile(r"\s+")


class _Frame:
    """A scope being walked: module, class or function."""

    __slots__ = ("qualname", "kind", "node", "line", "loop_base", "iter_base", "shared", "aliases", "held")

    def __init__(self, qualname: str, kind: str, node: Any, line: int, loop_base: int, iter_base: int = 0) -> None:
        self.qualname = qualname
        self.kind = kind
        self.node = node
        self.line = line
        self.loop_base = loop_base
        self.iter_base = iter_base  # how many ``for`` iterables enclose the scope (theirs, not its own)
        self.shared: set[str] = set()  # names declared ``global``/``nonlocal``: they outlive the call
        self.aliases: dict[str, str] = {}  # local name -> the stored location it was read from
        self.held: dict[str, list[int]] = {}  # local name -> the casts whose result it holds


#: A node whose extent changes the context (:attr:`_Walker.marks`).
_Mark = tuple[int, "_Guard | None", "list[str] | None", "tuple[str, str] | None"]


class _Guard:
    """An enclosing ``if`` while it is walked (or the rest of a block after an early ``return``)."""

    __slots__ = ("node", "negated", "active", "when_true", "when_false", "early", "stored", "line")

    def __init__(self, node: Any, when_true: tuple[str, ...] = (), when_false: tuple[str, ...] = (),
                 early: bool = False, line: int = 0) -> None:
        self.node = node  # None: a def's barrier
        self.line = line  # the line of the ``if``
        self.negated = early  # in the else branch (an early return guards what follows as its else)
        self.active = node is None or early  # an if's test is not guarded by the if itself
        self.when_true = when_true  # locations known unset when the test is true
        self.when_false = when_false  # ... when it is false
        self.early = early
        self.stored: tuple[set[str], set[str]] = (set(), set())  # locations stored in the body, in the else

    def unset(self) -> tuple[str, ...]:
        """The locations known unset in the branch being walked."""
        return self.when_false if self.negated else self.when_true


def _returns(block: cst.BaseSuite) -> bool:
    """Does this block end in ``return`` (or ``raise``)?"""
    last: Any = block.body[-1] if block.body else None
    if isinstance(last, cst.SimpleStatementLine):
        last = last.body[-1] if last.body else None
    return isinstance(last, (cst.Return, cst.Raise))


class _Walker(TokenWalker):
    """The single pass. libcst drives it by generating code; we listen."""

    positioned = frozenset({cst.Call, cst.FunctionDef, cst.ClassDef})

    def __init__(self, module: cst.Module) -> None:
        super().__init__(module)
        self.module = module
        self.scopes: list[_Frame] = [_Frame("", "module", module, 1, 0)]
        self.loop_depth = 0
        self.cond_depth = 0
        self.guards: list[_Guard] = []
        # Nodes whose extent changes the context, keyed by id: (loop depth delta, guard it activates,
        # locations its value is stored to, the loop whose body it is). A ``for`` body is a loop (its
        # target's and iterable's text name it), its iterable and ``else`` are not; an ``if`` guards its
        # branches, not its own test; a comprehension's first iterable is evaluated once, outside its
        # loop; the value of an assignment is stored to its targets.
        self.marks: dict[int, _Mark] = {}
        # What to undo when a node ends, keyed by id, in the order it was set up (run in reverse).
        # PERF: the code generator calls both hooks on each of a million nodes a MB; most nodes have
        # neither a handler nor a mark, so each hook costs one dict lookup for them.
        self.exits: dict[int, list[tuple[Callable[[Any], None], Any]]] = {}
        self.storing: list[list[str]] = []  # the targets of the assignments whose value is being walked
        self.for_iters: list[tuple[str, str]] = []  # the loops whose bodies are being walked, outermost first
        self.cast_stores: list[list[str]] = []  # per cast: the locations its result is stored to
        #: per call under a memo guard: its index and each such guard with the branch it runs in
        self.call_memo: list[tuple[int, list[tuple[_Guard, bool]]]] = []
        #: The guard records of each state of the enclosing ifs, keyed by (if node, branch) of each: every
        #: call and cast of one block shares one tuple (PERF: a file has tens of thousands of calls).
        self.guard_records: dict[tuple[tuple[int, bool], ...], tuple[Guard, ...]] = {}
        self.cur_assign: cst.CSTNode | None = None
        self.pending_defs: dict[int, dict[str, Any]] = {}
        self.definitions: list[Definition] = []
        self.annotations: list[Annotation] = []
        self.imports: list[Import] = []
        self.assigns: list[Assign] = []
        self.loop_assigns: list[Assign] = []
        self.calls: list[CallSite] = []
        self.returns: list[Return] = []
        self.casts: list[Cast] = []
        # Method names recorded as cast-like calls (a superset: the rules choose which ones matter).
        # Read from castfind.core.casts once per file, so a table a test extends is honoured in-process.
        self.cast_methods = casts.names()
        self.dynamic: list[Dynamic] = []
        self.all_names: list[str] | None = None
        self.produced: list[Produced] = []
        #: Name and attribute nodes that are no read of a value: a comparison's operands, assignment and import
        #: targets, the names after a dot (ids; see :class:`Produced`).
        self.not_produced: set[int] = set()
        self.into: list[str] = []  # the module-level names whose assignment value is being walked
        self._before: dict[type, Callable[[Any], None]] = {
            cst.Import: self._import,
            cst.ImportFrom: self._import_from,
            cst.Assign: self._assign,
            cst.AnnAssign: self._ann_assign,
            cst.AugAssign: self._aug_assign,
            cst.Return: self._return,
            cst.Global: self._shared,
            cst.Nonlocal: self._shared,
            cst.Expr: self._expr_stmt,
            cst.If: self._if_enter,
            cst.Else: self._else_enter,
            cst.Try: self._cond_enter,
            cst.TryStar: self._cond_enter,
            cst.For: self._for_enter,
            cst.While: self._while_enter,
            cst.ListComp: self._comp_enter,
            cst.SetComp: self._comp_enter,
            cst.DictComp: self._comp_enter,
            cst.GeneratorExp: self._comp_enter,
            cst.Comparison: self._comparison,
            cst.Attribute: self._attribute,
            cst.Name: self._name,
        }

    def before(self, node: cst.CSTNode) -> None:
        h = self._before.get(type(node))
        if h is not None:
            h(node)
        m = self.marks.pop(id(node), None)
        if m is not None:
            self.loop_depth += m[0]
            if m[1] is not None:
                m[1].active = True
            if m[2] is not None:
                self.storing.append(m[2])
            if m[3] is not None:
                self.for_iters.append(m[3])
            self._on_exit(node, self._unmark, m)

    def after(self, node: cst.CSTNode) -> None:
        todo = self.exits.pop(id(node), None)
        if todo is not None:
            for fn, arg in reversed(todo):
                fn(arg)

    def _on_exit(self, node: cst.CSTNode, fn: Callable[[Any], None], arg: Any) -> None:
        """Call ``fn(arg)`` when ``node`` ends."""
        todo = self.exits.get(id(node))
        if todo is None:
            self.exits[id(node)] = [(fn, arg)]
        else:
            todo.append((fn, arg))

    def _unmark(self, m: _Mark) -> None:
        self.loop_depth -= m[0]
        if m[2] is not None:
            self.storing.pop()
        if m[3] is not None:
            self.for_iters.pop()

    # -- scopes --------------------------------------------------------------------------------
    @property
    def scope(self) -> str:
        return self.scopes[-1].qualname

    def _child_qualname(self, name: str) -> str:
        top = self.scopes[-1]
        if top.kind == "module":
            return name
        if top.kind == "class":
            return f"{top.qualname}.{name}"
        return f"{top.qualname}.<locals>.{name}"

    def on_start(self, node: cst.CSTNode, line: int, column: int) -> None:
        if isinstance(node, cst.Call):
            self._call(node, line, column)
            return
        name = node.name.value  # type: ignore[attr-defined]
        qual = self._child_qualname(name)
        parent_kind = self.scopes[-1].kind
        kind = "class" if isinstance(node, cst.ClassDef) else ("method" if parent_kind == "class" else "function")
        self.pending_defs[id(node)] = {"qual": qual, "kind": kind, "parent": self.scope,
                                       "cond": self.cond_depth > 0}
        self.scopes.append(_Frame(qual, kind, node, line, self.loop_depth, len(self.for_iters)))
        # A def starts a fresh loop context: its body runs once per call, not per iteration.
        self.guards.append(_Guard(None))  # barrier: guards of the outer scope do not apply

    def on_end(self, node: cst.CSTNode, start: int, end: int) -> None:
        if isinstance(node, cst.Call):
            return
        self.scopes.pop()
        while self.guards.pop().node is not None:  # up to the barrier (early returns above it)
            pass
        p = self.pending_defs.pop(id(node))
        returns: tuple[str, ...] = ()
        param_types: tuple[tuple[str, tuple[str, ...]], ...] = ()
        defaults: tuple[tuple[str, str], ...] = ()
        strings: tuple[tuple[str, str], ...] = ()
        if isinstance(node, cst.ClassDef):
            bases = tuple(b for b in (_name_of(a.value) for a in node.bases if a.keyword is None) if b)
            params: tuple[str, ...] = ()
            positional = 0
        else:
            bases = ()
            ps = node.params  # type: ignore[attr-defined]
            named = (*ps.posonly_params, *ps.params, *ps.kwonly_params)
            params = tuple(p_.name.value for p_ in named)
            # ``*args: T`` is a tuple of T, ``**kw: T`` a dict: only plain parameters are typed.
            param_types = tuple((p_.name.value, annotation_types(p_.annotation.annotation))
                                for p_ in named if p_.annotation is not None)
            positional = len(ps.posonly_params) + len(ps.params)
            defaults = tuple((p_.name.value, _literal_text(p_.default)) for p_ in named
                             if p_.default is not None and _literal_text(p_.default))
            strings = tuple((p_.name.value, v) for p_ in named if isinstance(p_.default, cst.SimpleString)
                            and isinstance(v := p_.default.evaluated_value, str))
            if isinstance(ps.star_arg, cst.Param):
                params += (ps.star_arg.name.value,)
            if ps.star_kwarg is not None:
                params += (ps.star_kwarg.name.value,)
            ret = node.returns  # type: ignore[attr-defined]
            returns = annotation_types(ret.annotation) if ret is not None else ()
        decorators = tuple(d for d in (_name_of(dec.decorator) for dec in node.decorators) if d)  # type: ignore[attr-defined]
        self.definitions.append(
            Definition(p["qual"], node.name.value, p["kind"], start, end, p["parent"], p["cond"],  # type: ignore[attr-defined]
                       bases, decorators, params, positional, returns, param_types, defaults, strings)
        )

    # -- statements ----------------------------------------------------------------------------
    def _import(self, node: cst.Import) -> None:
        for a in node.names:
            mod = _name_of(a.name) or ""
            alias = a.asname.name.value if a.asname and isinstance(a.asname.name, cst.Name) else None
            self.imports.append(Import(mod, None, alias, 0, self.line, self.scope, self.cond_depth > 0))

    def _import_from(self, node: cst.ImportFrom) -> None:
        mod = _name_of(node.module) or ""
        level = len(node.relative)
        if isinstance(node.names, cst.ImportStar):
            self.imports.append(Import(mod, "*", None, level, self.line, self.scope, self.cond_depth > 0))
            return
        for a in node.names:
            self.not_produced.add(id(a.name))  # an imported name is bound, not read
            if a.asname is not None:
                self.not_produced.add(id(a.asname.name))
            name = _name_of(a.name) or ""
            alias = a.asname.name.value if a.asname and isinstance(a.asname.name, cst.Name) else None
            self.imports.append(Import(mod, name, alias, level, self.line, self.scope, self.cond_depth > 0))

    def _assign(self, node: cst.Assign) -> None:
        self.cur_assign = node
        self._targets([t.target for t in node.targets])
        if self.scope == "" and len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
            self.into.append(node.targets[0].target.value)
            self._on_exit(node, self._into_done, None)
        value = to_expr(node.value)
        for t in node.targets:
            self._bind(t.target, value, node.value)
        self._store([t.target for t in node.targets], node.value)

    def _ann_assign(self, node: cst.AnnAssign) -> None:
        self.cur_assign = node
        self._targets([node.target])
        target = _name_of(node.target) if isinstance(node.target, (cst.Name, cst.Attribute)) else None
        if target is not None:
            self.annotations.append(Annotation(target, annotation_types(node.annotation.annotation),
                                               self.line, self.scope))
        if node.value is not None:
            self._bind(node.target, to_expr(node.value), node.value)
            self._store([node.target], node.value)

    # -- where constant values are produced (Produced) -----------------------------------------------
    def _into_done(self, _: object) -> None:
        self.into.pop()

    def _targets(self, targets: Iterable[cst.BaseExpression]) -> None:
        """Assignment targets are stores, not reads: no producers (their elements, for a tuple)."""
        for t in targets:
            if isinstance(t, (cst.Tuple, cst.List)):
                self._targets(el.value for el in t.elements)
            elif isinstance(t, (cst.Name, cst.Attribute)):
                self.not_produced.add(id(t))

    def _comparison(self, node: cst.Comparison) -> None:
        """A comparison's operands (and the items of a literal it tests membership in) read a value, never make one."""
        for operand in (node.left, *(c.comparator for c in node.comparisons)):
            self.not_produced.add(id(operand))
            if isinstance(operand, (cst.Tuple, cst.List, cst.Set)):
                self.not_produced.update(id(el.value) for el in operand.elements)

    def _attribute(self, node: cst.Attribute) -> None:
        attr = node.attr.value
        if not attr.isupper():
            return
        self.not_produced.add(id(node.attr))
        if id(node) not in self.not_produced:
            self._produce(_name_of(node) or f"?.{attr}")

    def _name(self, node: cst.Name) -> None:
        if node.value.isupper() and id(node) not in self.not_produced:
            self._produce(node.value)

    def _produce(self, text: str) -> None:
        self.produced.append(Produced(text, self.line, self.scope, self._guard_facts(),
                                      self.into[-1] if self.into and self.scope == "" else ""))

    def _shared(self, node: cst.Global | cst.Nonlocal) -> None:
        self.scopes[-1].shared.update(n.name.value for n in node.names)

    # -- where values are kept, and which tests check them ---------------------------------------
    def _location(self, node: cst.BaseExpression) -> str | None:
        """The stored location an expression reads or writes: ``self._w``, ``cache[key]``, a global;
        ``getattr(o, "n", d)`` is ``o.n``, ``d.get(k)`` is ``d[k]``, a local read from one is that one."""
        frame = self.scopes[-1]
        if isinstance(node, cst.Name):
            if node.value in frame.aliases:
                return frame.aliases[node.value]
            return node.value if frame.kind not in ("function", "method") or node.value in frame.shared else None
        if isinstance(node, cst.Attribute):
            return _name_of(node)
        if isinstance(node, cst.Subscript):
            base = self._location(node.value)  # a local dict made per call is no location
            keys = [el.slice.value for el in node.slice if isinstance(el.slice, cst.Index)]
            if base is None or len(keys) != len(node.slice) or not keys:
                return None
            key = render(to_expr(keys[0])) if len(keys) == 1 else render(Seq(tuple(to_expr(k) for k in keys)))
            return f"{base}[{key}]"
        if isinstance(node, cst.Call) and isinstance(node.func, (cst.Name, cst.Attribute)):
            fname = _name_of(node.func)
            args = [a.value for a in node.args if a.keyword is None and not a.star]
            if fname == "getattr" and len(args) >= 2 and isinstance(args[1], cst.SimpleString):
                obj = _name_of(args[0]) if isinstance(args[0], (cst.Name, cst.Attribute)) else None
                name = args[1].evaluated_value
                return f"{obj}.{name}" if obj and isinstance(name, str) else None
            if isinstance(node.func, cst.Attribute) and node.func.attr.value == "get" and args:
                base = self._location(node.func.value)
                return f"{base}[{render(to_expr(args[0]))}]" if base else None
        return None

    def _absent(self, test: cst.BaseExpression) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(locations known unset when ``test`` is true, ... when it is false).

        ``x is None``, ``not x``, ``not hasattr(o, "n")``, ``k not in d`` and their negations; ``and``
        keeps what each side knows when true, ``or`` what each knows when false, and when true what
        either knows (``if self._w is None or stale:`` is a memo that also recasts when stale).
        """
        if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            t, f = self._absent(test.expression)
            return f, t
        if isinstance(test, cst.BooleanOperation):
            lt, lf = self._absent(test.left)
            rt, rf = self._absent(test.right)
            if isinstance(test.operator, cst.And):
                return lt + rt, ()
            return lt + rt, lf + rf
        if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
            c = test.comparisons[0]
            op, right = c.operator, c.comparator
            if isinstance(op, (cst.Is, cst.IsNot, cst.Equal, cst.NotEqual)) and (
                    isinstance(right, cst.Name) and right.value == "None"):
                loc = self._location(test.left)
                if loc is None:
                    return (), ()
                return ((loc,), ()) if isinstance(op, (cst.Is, cst.Equal)) else ((), (loc,))
            if isinstance(op, (cst.In, cst.NotIn)):
                base = self._location(right)
                if base is None:
                    return (), ()
                loc = f"{base}[{render(to_expr(test.left))}]"
                return ((loc,), ()) if isinstance(op, cst.NotIn) else ((), (loc,))
            return (), ()
        if (isinstance(test, cst.Call) and isinstance(test.func, cst.Name) and test.func.value == "hasattr"
                and len(test.args) == 2 and isinstance(test.args[1].value, cst.SimpleString)):
            obj = _name_of(test.args[0].value) if isinstance(test.args[0].value, (cst.Name, cst.Attribute)) else None
            name = test.args[1].value.evaluated_value
            return ((), (f"{obj}.{name}",)) if obj and isinstance(name, str) else ((), ())
        loc = self._location(test)
        return ((), (loc,)) if loc is not None else ((), ())

    def _carried(self, value: cst.BaseExpression) -> list[int]:
        """The casts whose results the local names read in ``value`` hold (``w`` in ``cache[k] = w.t()``)."""
        held = self.scopes[-1].held
        if not held:
            return []
        out: list[int] = []
        stack: list[cst.CSTNode] = [value]
        while stack:
            n = stack.pop()
            if isinstance(n, cst.Name):
                out += held.get(n.value, ())
            elif isinstance(n, cst.Attribute):
                stack.append(n.value)  # ``w.attr``: not the name ``attr``
            elif not isinstance(n, cst.Lambda):  # a lambda's body runs later, if ever
                stack.extend(n.children)
        return out

    def _store(self, targets: list[cst.BaseExpression], value: cst.BaseExpression) -> None:
        """Record that ``value`` is kept in ``targets``: casts inside it, or casts a local name read in it holds."""
        frame = self.scopes[-1]
        carried = self._carried(value)  # before a target rebinds a name the value reads
        keys: list[str] = []
        for t in targets:
            if isinstance(t, cst.Name) and frame.kind in ("function", "method") and t.value not in frame.shared:
                frame.held.pop(t.value, None)  # rebinding a local: it no longer holds earlier casts
                frame.aliases.pop(t.value, None)
                keys.append("=" + t.value)
                if not isinstance(value, cst.Name):
                    loc = self._location(value)
                    if loc is not None:
                        frame.aliases[t.value] = loc
                continue
            loc = self._location(t) if isinstance(t, (cst.Name, cst.Attribute, cst.Subscript)) else None
            if loc is not None:
                keys.append(loc)
                if isinstance(value, cst.Name) and value.value not in frame.shared:
                    frame.aliases[value.value] = loc  # `obj.cache = cache`: the local now names that location
        self._keep(keys, value, carried)

    def _keep(self, keys: list[str], value: cst.BaseExpression, carried: list[int] | None = None) -> None:
        """``value`` is kept in ``keys`` (``=name`` for a local name)."""
        if not keys:
            return
        for g in self._guards_in_scope():
            g.stored[g.negated].update(k for k in keys if not k.startswith("="))
        frame = self.scopes[-1]
        for i in self._carried(value) if carried is None else carried:  # `self._w = w` after `w = x.to(t)`
            for k in keys:
                if k.startswith("="):
                    frame.held.setdefault(k[1:], []).append(i)
                elif k not in self.cast_stores[i]:
                    self.cast_stores[i].append(k)
        self.marks[id(value)] = (0, None, keys, None)

    def _aug_assign(self, node: cst.AugAssign) -> None:
        self._targets([node.target])
        target = _name_of(node.target)
        if target == "__all__" and self.scope == "":
            self._extend_all(node.value)

    def _bind(self, target: cst.BaseExpression, value: Expr, value_node: cst.BaseExpression) -> None:
        cond = self.cond_depth > 0
        name = _name_of(target) if isinstance(target, (cst.Name, cst.Attribute)) else None
        if name is not None:
            self.assigns.append(Assign(name, value, self.line, self.scope, cond))
            if name == "__all__" and self.scope == "":
                self.all_names = []
                self._extend_all(value_node)
        elif isinstance(target, (cst.Tuple, cst.List)):
            for i, el in enumerate(target.elements):
                n = _name_of(el.value) if isinstance(el.value, (cst.Name, cst.Attribute)) else None
                if n is not None:
                    item = value.elts[i] if isinstance(value, Seq) and i < len(value.elts) else value
                    idx = None if isinstance(value, Seq) else i
                    self.assigns.append(Assign(n, item, self.line, self.scope, cond, idx))

    def _extend_all(self, value: cst.BaseExpression) -> None:
        if self.all_names is None:
            self.all_names = []
        if isinstance(value, (cst.List, cst.Tuple, cst.Set)):
            for el in value.elements:
                if isinstance(el.value, cst.SimpleString):
                    self.all_names.append(el.value.evaluated_value)  # type: ignore[arg-type]

    def _expr_stmt(self, node: cst.Expr) -> None:
        self.cur_assign = None
        v = node.value
        # __all__.extend([...]) / __all__.append("x") at module level
        if (self.scope == "" and isinstance(v, cst.Call) and isinstance(v.func, cst.Attribute)
                and isinstance(v.func.value, cst.Name) and v.func.value.value == "__all__" and v.args):
            if v.func.attr.value == "extend":
                self._extend_all(v.args[0].value)
            elif v.func.attr.value == "append" and isinstance(v.args[0].value, cst.SimpleString):
                if self.all_names is None:
                    self.all_names = []
                self.all_names.append(v.args[0].value.evaluated_value)  # type: ignore[arg-type]

    def _return(self, node: cst.Return) -> None:
        self.cur_assign = None
        if node.value is not None:
            self.returns.append(Return(to_expr(node.value), self.line, self.scope))

    def _branch_ends(self, node: cst.CSTNode) -> None:
        """``node`` starts the ``else``/``elif`` of the innermost if: its body is left behind."""
        i = len(self.guards) - 1
        while i >= 0 and self.guards[i].early:
            i -= 1
        top = self.guards[i] if i >= 0 else None
        if top is not None and top.node is not None and top.node.orelse is node:
            del self.guards[i + 1:]  # early returns in the body guard only the rest of the body
            top.negated = True

    def _if_enter(self, node: cst.If) -> None:
        self._branch_ends(node)  # an ``elif``: we left the parent's body
        when_true, when_false = self._absent(node.test)
        # The walk stands before the if's leading comment and blank lines: the ``if`` is after them.
        entry = _Guard(node, when_true, when_false, line=self.line + len(node.leading_lines))
        self.guards.append(entry)
        self.marks[id(node.body)] = (0, entry, None, None)
        self.cond_depth += 1
        self._on_exit(node, self._if_leave, node)

    def _else_enter(self, node: cst.Else) -> None:
        self._branch_ends(node)

    def _if_leave(self, node: cst.If) -> None:
        while (g := self.guards.pop()).node is not node:
            pass
        self.cond_depth -= 1
        if node.orelse is None and _returns(node.body):
            # `if self._w is not None: return self._w`: what follows runs only when the test was false.
            self.guards.append(_Guard(node, *self._absent(node.test), early=True, line=g.line))

    def _cond_enter(self, node: cst.CSTNode) -> None:
        self.cond_depth += 1
        self._on_exit(node, self._cond_leave, node)

    def _cond_leave(self, node: cst.CSTNode) -> None:
        self.cond_depth -= 1

    def _for_enter(self, node: cst.For) -> None:
        loop = tuple(_WS.sub(" ", self.module.code_for_node(n)).strip()[:200] for n in (node.target, node.iter))
        self.marks[id(node.body)] = (1, None, None, loop)  # type: ignore[assignment]  # the iterable and else run once
        value = to_expr(node.iter)
        cond = self.cond_depth > 0
        target = node.target
        if isinstance(target, (cst.Name, cst.Attribute)):
            name = _name_of(target)
            if name is not None:
                self.loop_assigns.append(Assign(name, value, self.line, self.scope, cond, None, True))
        elif isinstance(target, (cst.Tuple, cst.List)):
            for i, el in enumerate(target.elements):
                n = _name_of(el.value) if isinstance(el.value, (cst.Name, cst.Attribute)) else None
                if n is not None:
                    self.loop_assigns.append(Assign(n, value, self.line, self.scope, cond, i, True))

    def _while_enter(self, node: cst.While) -> None:
        self.loop_depth += 1  # the test runs on every iteration, the else block once
        self._on_exit(node, self._loop_leave, node)
        if node.orelse is not None:
            self.marks[id(node.orelse)] = (-1, None, None, None)

    def _comp_enter(self, node: cst.ListComp | cst.SetComp | cst.DictComp | cst.GeneratorExp) -> None:
        self.loop_depth += 1
        self._on_exit(node, self._loop_leave, node)
        self.marks[id(node.for_in.iter)] = (-1, None, None, None)  # the first iterable is evaluated once, outside

    def _loop_leave(self, node: cst.CSTNode) -> None:
        self.loop_depth -= 1

    # -- calls ---------------------------------------------------------------------------------
    def _call(self, node: cst.Call, line: int, column: int) -> None:
        func = node.func
        scope = self.scope
        fname = _name_of(func) if isinstance(func, (cst.Name, cst.Attribute)) else None
        if fname is None and (isinstance(func, cst.Attribute) and isinstance(func.value, cst.Call)
                              and isinstance(func.value.func, cst.Name) and func.value.func.value == "super"):
            fname = f"super().{func.attr.value}"
        if fname is not None:
            call = to_expr(node)
            starred = any(a.star for a in node.args)
            assert isinstance(call, Call)
            self.calls.append(CallSite(fname, line, scope, call.args, call.kwargs, starred,
                                       guards=self._guard_facts()))
            memo = [(g, g.negated) for g in self._guards_in_scope() if g.unset()]
            if memo:
                self.call_memo.append((len(self.calls) - 1, memo))
        if (fname == "setattr" and len(node.args) == 3 and isinstance(node.args[1].value, cst.SimpleString)
                and isinstance(node.args[0].value, (cst.Name, cst.Attribute))):
            obj, attr = _name_of(node.args[0].value), node.args[1].value.evaluated_value
            if obj and isinstance(attr, str):
                self._keep([f"{obj}.{attr}"], node.args[2].value)
        if fname in ("getattr", "importlib.import_module", "import_module", "__import__"):
            self._dynamic(node, fname)
        if isinstance(func, cst.Attribute) and func.attr.value in self.cast_methods:
            self._cast(node, func, line, column)

    def _assigned_target(self, node: cst.Call) -> str | None:
        a = self.cur_assign
        if isinstance(a, cst.Assign) and a.value is node and len(a.targets) == 1:
            return _name_of(a.targets[0].target)
        if isinstance(a, cst.AnnAssign) and a.value is node:
            return _name_of(a.target)
        return None

    def _dynamic(self, node: cst.Call, fname: str) -> None:
        args = node.args
        if fname == "getattr":
            if len(args) >= 2 and not isinstance(args[1].value, cst.SimpleString):
                what = _name_of(args[0].value) or "an object"
                self.dynamic.append(Dynamic(self._assigned_target(node), self.line, self.scope,
                                            f"getattr({what}, ...) with a computed name"))
        elif args and not isinstance(args[0].value, cst.SimpleString):
            self.dynamic.append(Dynamic(self._assigned_target(node), self.line, self.scope,
                                        f"{fname}() with a module path computed at run time"))

    def _cast(self, node: cst.Call, func: cst.Attribute, line: int, column: int) -> None:
        call = to_expr(node)
        assert isinstance(call, Call)
        guards = self._guard_facts()
        stores: list[str] = []
        for k in self.storing[-1] if self.storing else ():
            if k.startswith("="):  # a local name: it keeps the result only if stored later
                self.scopes[-1].held.setdefault(k[1:], []).append(len(self.casts))
            else:
                stores.append(k)
        self.cast_stores.append(stores)
        # The call alone: parentheses around it (and the comments and lines inside them) are not its text.
        code = self.module.code_for_node(node.with_changes(lpar=(), rpar=()) if node.lpar else node)
        text = _WS.sub(" ", code).strip()
        # The end line: the call's own text may span lines (arguments on their own lines).
        end = line + code.strip().count("\n")
        self.casts.append(
            Cast(func.attr.value, to_expr(func.value), call.args, call.kwargs, line, end, column,
                 self.scope, text[:300], self.loop_depth - self.scopes[-1].loop_base, guards,
                 self._assigned_target(node), loops=tuple(self.for_iters[self.scopes[-1].iter_base:]))
        )

    def memo_calls(self) -> tuple[CallSite, ...]:
        """The calls, each under a memo guard with what the guards say is unset and what their branch stores
        (a store after the call counts: ``w = fold(conv)`` then ``self._w = w``)."""
        calls = list(self.calls)
        for i, memo in self.call_memo:
            unset = tuple(dict.fromkeys(k for g, neg in memo for k in (g.when_false if neg else g.when_true)))
            stored = tuple(k for k in unset if any(k in g.stored[neg] for g, neg in memo))
            calls[i] = replace(calls[i], memo_unset=unset, memo_stored=stored)
        return tuple(calls)

    def _guard_facts(self) -> tuple[Guard, ...]:
        """The enclosing ifs of the node being walked, in its function, as :class:`Guard` records."""
        active = self._guards_in_scope()
        key = tuple((id(g.node), g.negated) for g in active)  # the nodes live as long as the walk
        got = self.guard_records.get(key)
        if got is None:
            got = self.guard_records[key] = tuple(
                Guard(_WS.sub(" ", self.module.code_for_node(g.node.test)).strip()[:160], g.negated,
                      g.when_false if g.negated else g.when_true, g.line)
                for g in active)
        return got

    def _guards_in_scope(self) -> list[_Guard]:
        out: list[_Guard] = []
        for g in reversed(self.guards):
            if g.node is None:  # scope barrier
                break
            if g.active:
                out.append(g)
        out.reverse()
        return out


#: Deepest syntax tree handed to libcst. Its native parser and the code-generator walk recurse once
#: per level: ten thousand levels overflow the C stack (a segfault no ``except`` can catch), three
#: thousand still pass. Real code stays far below (the deepest module of the sglang and flashinfer
#: wheels: 49 levels); generated code reaches hundreds (a 600-term sum is 600 levels).
#: Python 3.12 also counts the walk against a fixed C recursion limit (1,500, not raised by
#: ``sys.setrecursionlimit``), which stops it between 700 and 800 levels: there the limit is 700.
MAX_DEPTH = 700 if sys.version_info[:2] == (3, 12) else 1000
#: Python frames the walk may use per tree level, with room for the callers' frames.
_FRAMES_PER_LEVEL = 12
_BRACKET = re.compile(rb"[\[\](){}]")


def _tree_depth(tree: ast.AST, branches: list[tuple[int, int, int, int]] | None = None) -> int:
    """Depth of a syntax tree, walked without recursion; ``branches`` collects each ``if``'s two branches."""
    best = 0
    stack: list[tuple[ast.AST, int]] = [(tree, 1)]
    pop, push = stack.pop, stack.append
    node_type, if_type = ast.AST, ast.If
    while stack:
        node, d = pop()
        if d > best:
            best = d
        if branches is not None and type(node) is if_type and node.body and node.orelse:
            body, orelse = node.body, node.orelse
            branches.append((body[0].lineno, body[-1].end_lineno or body[-1].lineno,
                             orelse[0].lineno, orelse[-1].end_lineno or orelse[-1].lineno))
        d += 1
        # PERF: ``ast.iter_child_nodes`` inlined (a generator per node cost two thirds of this walk).
        for name in node._fields:
            v = getattr(node, name, None)
            if type(v) is list:
                for x in v:
                    if isinstance(x, node_type):
                        push((x, d))
            elif isinstance(v, node_type):
                push((v, d))
    return best


def _bracket_depth(source: bytes) -> int:
    """Deepest bracket nesting of the raw text (a bound for code Python's own parser rejected)."""
    depth = best = 0
    for m in _BRACKET.finditer(source):
        if m.group() in b"([{":
            depth += 1
            best = max(best, depth)
        else:
            depth = max(depth - 1, 0)
    return best


def _python_verdict(source: bytes, path: str,
                    branches: list[tuple[int, int, int, int]] | None = None,
                    lazy: list[LazyExport] | None = None,
                    allocs: list[Allocation] | None = None) -> tuple[int, tuple[int, str] | None]:
    """(tree depth, None) when CPython parses the file, else (0, (line, message)) — or, when its own
    parser ran out of stack, (``MAX_DEPTH + 1``, (line, message)).

    CPython reads the bytes as the interpreter would: BOM, ``# coding:`` line, UTF-8 by default.
    """
    try:
        tree = compile(source, path, "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as e:
        hint = "; add a '# -*- coding: ... -*-' line or save it as UTF-8" if "code" in e.msg else ""
        return 0, (e.lineno or 1, f"syntax error: {e.msg}{hint}")
    except (RecursionError, MemoryError) as e:
        return MAX_DEPTH + 1, (1, f"too deeply nested for Python's own parser ({type(e).__name__})")
    except ValueError as e:  # e.g. NUL bytes
        return 0, (1, f"cannot parse: {e}")
    depth = _tree_depth(tree, branches)
    if lazy is not None and depth <= MAX_DEPTH and isinstance(tree, ast.Module):
        lazy += lazy_exports(tree, b"LazyModule" in source)
    if allocs is not None and depth <= MAX_DEPTH and isinstance(tree, ast.Module):
        allocs += allocations(tree)
    return depth, None


def _literal_text(node: cst.BaseExpression) -> str:
    """The text of a number or ``True``/``False``/``None`` (``-1`` too); "" for anything else."""
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        inner = _literal_text(node.expression)
        return f"-{inner}" if inner and inner[0].isdigit() else ""
    if isinstance(node, (cst.Integer, cst.Float)):
        return node.value
    if isinstance(node, cst.Name) and node.value in ("True", "False", "None"):
        return node.value
    return ""


def extract_source(source: bytes, module: str, path: str, is_package: bool) -> FileFacts:
    """Parse ``source`` once and return its facts. A file that cannot be analysed gives ``error``.

    ``error_kind`` tells the two cases apart: ``parse-error`` when Python itself rejects the file,
    ``unsupported`` when Python accepts it but castfind cannot analyse it (its findings would be
    lost: the scan reports the file and exits non-zero).
    """
    # PERF: the parse builds hundreds of thousands of short-lived acyclic objects; the cyclic collector,
    # paused meanwhile, would walk them (and a lookup's long-lived facts) over and over (castfind.core.heap).
    with collector_paused():
        return _extract_source(source, module, path, is_package)


def _extract_source(source: bytes, module: str, path: str, is_package: bool) -> FileFacts:
    branches: list[tuple[int, int, int, int]] = []
    lazy: list[LazyExport] = []
    allocs: list[Allocation] = []
    depth, rejected = _python_verdict(source, path, branches, lazy, allocs)
    if depth > MAX_DEPTH:
        why = rejected[1] if rejected else f"{depth} levels deep, castfind's parser takes {MAX_DEPTH}"
        return FileFacts(module, path, is_package, error=(1, f"too deeply nested: {why}"),
                         error_kind="unsupported" if rejected is None else "parse-error")
    if rejected is not None and _bracket_depth(source) > MAX_DEPTH:
        return FileFacts(module, path, is_package, error=rejected)
    try:
        # A file CPython accepted needs no validation of the tree built from it (castfind.read.cstwalk).
        tree = cst.parse_module(source) if rejected is not None else parse_module(source)
    except cst.ParserSyntaxError as e:
        if rejected is not None:
            return FileFacts(module, path, is_package, error=rejected)
        return FileFacts(module, path, is_package, error=(e.raw_line, f"libcst cannot parse it: {e.message}"),
                         error_kind="unsupported")
    except (RecursionError, MemoryError, ValueError, UnicodeDecodeError, SyntaxError, LookupError) as e:
        return FileFacts(module, path, is_package, error=rejected or (1, f"cannot parse: {type(e).__name__}: {e}"),
                         error_kind="parse-error" if rejected else "unsupported")
    w = _Walker(tree)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, (max(depth, 50) + 20) * _FRAMES_PER_LEVEL))
    try:
        walk(tree, w)
    except RecursionError as e:
        return FileFacts(module, path, is_package, error=(1, f"too deeply nested to walk: {e}"),
                         error_kind="unsupported")
    finally:
        sys.setrecursionlimit(limit)
    return FileFacts(
        module=module,
        path=path,
        is_package=is_package,
        definitions=tuple(sorted(w.definitions, key=lambda d: (d.line, d.qualname))),
        imports=tuple(w.imports),
        assigns=tuple(w.assigns),
        loop_assigns=tuple(w.loop_assigns),
        branches=tuple(sorted(branches)),
        calls=w.memo_calls(),
        returns=tuple(w.returns),
        casts=tuple(replace(c, stores=tuple(st)) if st else c for c, st in zip(w.casts, w.cast_stores, strict=True)),
        dynamic=tuple(w.dynamic),
        all_names=tuple(w.all_names) if w.all_names is not None else None,
        annotations=tuple(w.annotations),
        lazy=tuple(lazy),
        allocations=tuple(allocs),
        produced=tuple(w.produced),
    )


# -- names provided lazily ----------------------------------------------------------------------

_STR_SEQS = (ast.List, ast.Tuple, ast.Set)


def _strs(node: ast.AST | None) -> tuple[str, ...] | None:
    """A literal list/tuple/set of strings (also ``frozenset({...})``, ``set([...])``), else None."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("frozenset", "set", "tuple", "list") \
            and len(node.args) == 1 and not node.keywords:
        node = node.args[0]
    if isinstance(node, _STR_SEQS) and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
        return tuple(e.value for e in node.elts)  # type: ignore[attr-defined]
    return None


def _str(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _tables(tree: ast.Module) -> dict[str, dict[str, tuple[str, ...]]]:
    """Module-level literal tables: name → {key: values}; a dict ``{"n": "mod"}`` gives ``{"n": ("mod",)}``,
    ``{"mod": ["a", "b"]}`` gives ``{"mod": ("a", "b")}``, a set of names ``{"n": ()}``. Also grown by
    ``T["k"] = [...]`` and ``T["k"].extend([...])`` at module level (inside ``if``/``try`` too)."""
    out: dict[str, dict[str, tuple[str, ...]]] = {}
    stack: list[ast.stmt] = list(tree.body)
    while stack:
        st = stack.pop(0)
        if isinstance(st, (ast.If, ast.Try)):
            stack[:0] = [*st.body, *st.orelse, *getattr(st, "finalbody", []),
                         *(s for h in getattr(st, "handlers", []) for s in h.body)]
            continue
        target = value = None
        if isinstance(st, ast.Assign) and len(st.targets) == 1:
            target, value = st.targets[0], st.value
        elif isinstance(st, ast.AnnAssign):
            target, value = st.target, st.value
        elif isinstance(st, ast.Expr) and isinstance(st.value, ast.Call) and isinstance(st.value.func, ast.Attribute) \
                and st.value.func.attr == "extend" and len(st.value.args) == 1:
            target, value = st.value.func.value, st.value.args[0]
            if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
                key, vals = _str(target.slice), _strs(value)
                if key is not None and vals is not None and target.value.id in out:
                    grown = out[target.value.id]
                    grown[key] = grown.get(key, ()) + vals
            continue
        if isinstance(target, ast.Name) and value is not None:
            if isinstance(value, ast.Dict):
                table: dict[str, tuple[str, ...]] = {}
                for k, v in zip(value.keys, value.values, strict=True):
                    key, one, many = _str(k), _str(v), _strs(v)
                    if key is not None and (one is not None or many is not None):
                        table[key] = (one,) if one is not None else many  # type: ignore[assignment]
                out[target.id] = table
            elif (names := _strs(value)) is not None:
                out[target.id] = {n: () for n in names}
        elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) and target.value.id in out:
            key, vals = _str(target.slice), _strs(value)
            if key is not None and vals is not None:
                out[target.value.id][key] = vals
    return out


class _LazyGetattr:
    """What a module ``__getattr__(name)`` returns for which names (see :class:`LazyExport`)."""

    def __init__(self, fn: ast.FunctionDef, tables: dict[str, dict[str, tuple[str, ...]]]) -> None:
        self.param = fn.args.args[0].arg if fn.args.args else ""
        self.tables = tables
        self.out: list[LazyExport] = []
        self.locals = {n.id for st in ast.walk(fn) for n in ast.walk(st)
                       if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        self.lookups: dict[str, str] = {}  # local → dict table it was looked up in with the name (`T.get(name)`)
        self.modules: dict[str, str] = {}  # local → module path as written (`from . import rows`)
        self._block(fn.body, None)

    def _table_lookup(self, node: ast.AST) -> str | None:
        """``T.get(name)`` / ``T[name]`` of a dict table: the table's name."""
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                and isinstance(node.func.value, ast.Name) and node.args and _is_name(node.args[0], self.param):
            t = node.func.value.id
        elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and _is_name(node.slice, self.param):
            t = node.value.id
        else:
            return None
        return t if t in self.tables else None

    def _names_of_test(self, test: ast.AST, names: frozenset[str] | None) -> frozenset[str] | None:
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and _is_name(test.left, self.param):
            right, op = test.comparators[0], test.ops[0]
            if isinstance(op, ast.In):
                if isinstance(right, ast.Name) and right.id in self.tables:
                    return frozenset(self.tables[right.id])
                if (lit := _strs(right)) is not None:
                    return frozenset(lit)
            if isinstance(op, ast.Eq) and (s := _str(right)) is not None:
                return frozenset({s})
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.IsNot, ast.NotEq)):
            test = test.left
        if isinstance(test, ast.Name) and test.id in self.lookups:
            return frozenset(self.tables[self.lookups[test.id]])
        return names

    def _block(self, body: list[ast.stmt], names: frozenset[str] | None) -> None:
        for st in body:
            if isinstance(st, ast.If):
                self._block(st.body, self._names_of_test(st.test, names))
                self._block(st.orelse, names)
            elif isinstance(st, (ast.Try, ast.With)):
                self._block(st.body, names)
            elif isinstance(st, ast.ImportFrom):
                dots = "." * st.level
                for a in st.names:
                    path = f"{dots}{st.module}.{a.name}" if st.module else f"{dots}{a.name}"
                    self.modules[a.asname or a.name] = path
            elif isinstance(st, ast.Import):
                for a in st.names:
                    self.modules[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            elif isinstance(st, (ast.Assign, ast.Return)) and st.value is not None:
                if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
                    t = self._table_lookup(st.value)
                    if t is not None:
                        self.lookups[st.targets[0].id] = t
                        continue
                self._value(st.value, st.lineno, names, isinstance(st, ast.Return))

    def _module_of(self, node: ast.AST, name: str) -> str | None:
        """The module path an expression stands for when ``__getattr__`` is asked for ``name``."""
        if isinstance(node, ast.Name) and node.id in self.modules:
            return self.modules[node.id]
        if isinstance(node, ast.Call) and (isinstance(node.func, ast.Name) and node.func.id == "import_module"
                                           or isinstance(node.func, ast.Attribute) and node.func.attr == "import_module") \
                and node.args:
            arg = node.args[0]
            if (s := _str(arg)) is not None:
                return s
            if isinstance(arg, ast.Name) and arg.id in self.lookups:
                values = self.tables[self.lookups[arg.id]].get(name, ())
                return values[0] if len(values) == 1 else None
            if self._table_lookup(arg) is not None:
                values = self.tables[self._table_lookup(arg) or ""].get(name, ())
                return values[0] if len(values) == 1 else None
        return None

    def _value(self, value: ast.AST, line: int, names: frozenset[str] | None, returned: bool) -> None:
        if names is None:
            return
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "getattr" \
                and len(value.args) >= 2 and _is_name(value.args[1], self.param):
            for n in sorted(names):
                src = self._module_of(value.args[0], n)
                if src is not None:
                    self.out.append(LazyExport(n, line, src, n))
        elif returned and isinstance(value, ast.Name) and value.id not in self.locals and value.id != self.param:
            self.out += [LazyExport(n, line, "", value.id) for n in sorted(names)]


def _is_name(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def lazy_exports(tree: ast.Module, named: bool = True) -> tuple[LazyExport, ...]:
    """The names a module provides lazily (:class:`~castfind.read.facts.LazyExport`).

    ``named``: may the module call a ``...LazyModule``? False when its text never says ``LazyModule``
    (PERF: the search for those calls walks every node of the tree; the text test is nearly free).
    """
    getattr_fn = next((st for st in tree.body if isinstance(st, ast.FunctionDef) and st.name == "__getattr__"), None)
    lazy_calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)
                  and (n.func.id if isinstance(n.func, ast.Name) else n.func.attr if isinstance(n.func, ast.Attribute) else "")
                  .endswith("LazyModule")] if named else []
    if getattr_fn is None and not lazy_calls:
        return ()
    tables = _tables(tree)
    out: list[LazyExport] = []
    if getattr_fn is not None:
        out += _LazyGetattr(getattr_fn, tables).out
    built = {st.targets[0].id: st.value for st in ast.walk(tree) if isinstance(st, ast.Assign)
             and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name) and _is_structure_call(st.value)}
    for call in lazy_calls:
        for arg in (*call.args, *(k.value for k in call.keywords)):
            if isinstance(arg, ast.Name) and arg.id in built:
                arg = built[arg.id]
            if _is_structure_call(arg):
                # `_LazyModule(__name__, __file__, define_import_structure(_file))`: every name in the
                # `__all__` of a submodule of the package (under `prefix`, when given).
                assert isinstance(arg, ast.Call)
                prefix = next((_str(k.value) for k in arg.keywords if k.arg == "prefix"), None)
                out.append(LazyExport("*", call.lineno, "." + (prefix or ""), "__all__", "module"))
                # transformers merges its hand-written `_import_structure` into the built one.
                names = [t for t in tables if "import_structure" in t]
            elif isinstance(arg, ast.Name) and arg.id in tables:
                names = [arg.id]
            else:
                continue
            # `_LazyModule(__name__, __file__, _import_structure)`: {"sub.module": ["Name", ...]}.
            for t in names:
                for mod, members in tables[t].items():
                    out += [LazyExport(n, call.lineno, "." + mod, n, "module") for n in members]
    return tuple(dict.fromkeys(out))


def _is_structure_call(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and (
        (node.func.id if isinstance(node.func, ast.Name) else node.func.attr if isinstance(node.func, ast.Attribute)
         else "") == "define_import_structure")
