"""Per-file facts: the plain, picklable records that :mod:`castfind.read.extract` produces.

Nothing here knows about rules. Every later stage (index, resolver, call graph, provenance, rules)
reads these records and never the CST, so a file is parsed at most once per content hash.

Expressions are kept as a small tree (:class:`Name`, :class:`Attr`, :class:`Call`, :class:`Subscript`,
:class:`Const`, :class:`Seq`, :class:`Other`): enough to follow a receiver back to a buffer and to
print it, without keeping libcst nodes alive.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

DefKind = Literal["function", "method", "class"]


@dataclass(frozen=True, slots=True)
class Name:
    id: str


@dataclass(frozen=True, slots=True)
class Attr:
    value: Expr
    attr: str


@dataclass(frozen=True, slots=True)
class Call:
    func: Expr
    args: tuple[Expr, ...] = ()
    kwargs: tuple[tuple[str, Expr], ...] = ()


@dataclass(frozen=True, slots=True)
class Slice:
    """One element of a subscript: ``lower:upper:step`` (any part may be None)."""

    lower: Expr | None
    upper: Expr | None
    step: Expr | None


@dataclass(frozen=True, slots=True)
class Subscript:
    value: Expr
    index: tuple[Expr | Slice, ...]


@dataclass(frozen=True, slots=True)
class Const:
    """A literal: number, string, ``None``, ``True``/``False``, ``...``."""

    text: str


@dataclass(frozen=True, slots=True)
class Seq:
    """A tuple or list display."""

    elts: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class Other:
    """Any other expression: its kind (``BinaryOperation``...), the names it reads, and short text."""

    kind: str
    names: tuple[str, ...] = ()
    text: str = ""
    #: The operands of a ``BinaryOperation`` (left, right): what integer arithmetic is made of.
    parts: tuple[Expr, ...] = ()


Expr = Name | Attr | Call | Subscript | Const | Seq | Other


def dotted(expr: Expr | None) -> str | None:
    """``a.b.c`` for a chain of names and attributes, else None."""
    parts: list[str] = []
    while isinstance(expr, Attr):
        parts.append(expr.attr)
        expr = expr.value
    if isinstance(expr, Name):
        parts.append(expr.id)
        return ".".join(reversed(parts))
    return None


def from_dotted(name: str) -> Expr:
    """``a.b.c`` as an expression tree (``Attr(Attr(Name('a'), 'b'), 'c')``)."""
    parts = name.split(".")
    e: Expr = Name(parts[0])
    for p in parts[1:]:
        e = Attr(e, p)
    return e


def render(expr: Expr | Slice | None) -> str:
    """Short source-like text of an expression (for messages and provenance hops)."""
    if expr is None:
        return ""
    if isinstance(expr, Name):
        return expr.id
    if isinstance(expr, Attr):
        return f"{render(expr.value)}.{expr.attr}"
    if isinstance(expr, Call):
        args = [render(a) for a in expr.args] + [f"{k}={render(v)}" for k, v in expr.kwargs]
        return f"{render(expr.func)}({', '.join(args)})"
    if isinstance(expr, Subscript):
        return f"{render(expr.value)}[{', '.join(render(i) for i in expr.index)}]"
    if isinstance(expr, Slice):
        s = f"{render(expr.lower)}:{render(expr.upper)}"
        return s + (f":{render(expr.step)}" if expr.step is not None else "")
    if isinstance(expr, Const):
        return expr.text
    if isinstance(expr, Seq):
        return f"({', '.join(render(e) for e in expr.elts)})"
    return expr.text or f"<{expr.kind}>"


@dataclass(frozen=True, slots=True)
class Import:
    """One imported name. ``import a.b`` → module='a.b', name=None; ``from . import x`` → level=1.

    ``scope`` is the qualified name of the enclosing function/class ('' at module level);
    ``conditional`` is True inside ``if``/``try`` (e.g. ``try: import x except ImportError``).
    """

    module: str
    name: str | None
    alias: str | None
    level: int
    line: int
    scope: str
    conditional: bool

    @property
    def bound(self) -> str:
        """The local name this import binds."""
        if self.alias:
            return self.alias
        if self.name is not None:
            return self.name
        return self.module.split(".")[0]


@dataclass(frozen=True, slots=True)
class Assign:
    """``target = value`` (``index`` is the position for tuple unpacking ``a, b = value``)."""

    target: str  # a dotted name: ``x`` or ``self.x``
    value: Expr
    line: int
    scope: str
    conditional: bool = False
    index: int | None = None
    #: ``for target in value:`` — ``target`` is bound to each element of ``value`` in turn (element
    #: ``index`` of each, for ``for i, x in value``). Kept in :attr:`FileFacts.loop_assigns`.
    loop: bool = False


@dataclass(frozen=True, slots=True)
class CallSite:
    """A call whose function is a dotted name (``f()``, ``self.m()``, ``mod.f()``), or ``super().m()``."""

    func: str
    line: int
    scope: str
    #: The call's arguments (positional, then keyword); ``*x``/``**x`` arguments are left out, and
    #: ``starred`` says there was one (positions after it are unknown).
    args: tuple[Expr, ...] = ()
    kwargs: tuple[tuple[str, Expr], ...] = ()
    starred: bool = False
    #: A memo guard around the call: the stored locations the enclosing ``if``s say are unset where the call
    #: runs (``if self._packed is None:``, ``if w is None:`` after ``w = self._w``, ``k not in cache``) ...
    memo_unset: tuple[str, ...] = ()
    #: ... and those of them the same branch stores (``self._w = fold(conv)``): the call runs once per value.
    memo_stored: tuple[str, ...] = ()
    #: The ``if``s around the call in its function, outermost first (as :attr:`Cast.guards`): the tests
    #: that must hold for the call to run, which a finding whose hot path crosses this call carries.
    guards: tuple[Guard, ...] = ()


@dataclass(frozen=True, slots=True)
class Return:
    value: Expr
    line: int
    scope: str


@dataclass(frozen=True, slots=True)
class Guard:
    """An enclosing ``if``: its test as text and whether the cast (or call) is in its ``else`` branch.

    An ``elif`` is an ``if`` in the ``else`` of the one before: a cast under ``elif b:`` has the guards
    ``a`` (negated) and ``b``.

    ``absent``: the stored locations this branch knows to be unset — ``self._w`` under
    ``if self._w is None:`` or ``if not hasattr(self, "_w"):``, ``cache[key]`` under
    ``if key not in cache:`` (location keys as in :attr:`Cast.stores`). An ``if`` that returns
    early (``if self._w is not None: return self._w``) guards the rest of its block as if the cast
    were in its ``else`` branch (``negated``).
    """

    test: str
    negated: bool
    absent: tuple[str, ...] = ()
    #: The line of the ``if`` (or ``elif``) whose test this is.
    line: int = 0


@dataclass(frozen=True, slots=True)
class Cast:
    """A cast-like method call ``receiver.method(args)`` (method from a superset; rules pick)."""

    method: str
    receiver: Expr
    args: tuple[Expr, ...]
    kwargs: tuple[tuple[str, Expr], ...]
    line: int
    end_line: int
    column: int  # 1-based
    scope: str
    text: str
    loop_depth: int
    guards: tuple[Guard, ...] = ()
    assigned_to: str | None = None  # ``self.w`` in ``self.w = self.w.to(...)``
    #: Where the cast's result is kept beyond the call: ``self._w`` (an attribute, or ``setattr(self,
    #: "_w", ...)``), ``self._cache[key]`` (an entry), ``_W`` (a module global or nonlocal), directly
    #: or through a local name stored later in the function. Locals alone are not stores.
    stores: tuple[str, ...] = ()
    #: Each ``for`` loop around the cast inside its function, outermost first, as source text of its
    #: target and its iterable (``("i", "range(self.layer_num)")``): what a cast's multiplicity is read from.
    loops: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Definition:
    """A ``def`` or ``class``. ``qualname`` is module-relative (``Pool.get``, ``build.<locals>.f``)."""

    qualname: str
    name: str
    kind: DefKind
    line: int
    end_line: int
    parent: str  # enclosing scope qualname, '' at module level
    conditional: bool
    bases: tuple[str, ...] = ()
    decorators: tuple[str, ...] = ()
    params: tuple[str, ...] = ()
    #: How many of ``params`` can be passed by position (``posonly`` and plain ones, before ``*``).
    positional: int = 0
    #: The declared return type: the class names of its annotation (``-> Base | None`` → ``("Base",)``).
    returns: tuple[str, ...] = ()
    #: The annotated parameters, each with the class names of its annotation (``(("layer", ("Attn",)),)``).
    param_types: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: The parameters whose default is a literal (a number, ``True``/``False``/``None``), with its text:
    #: what a constructor parameter stands for when no configuration binds it.
    param_defaults: tuple[tuple[str, str], ...] = ()
    #: The parameters whose default is a plain string literal, with the string (``mod="pkg.ops"`` →
    #: ``(("mod", "pkg.ops"),)``): what a module or attribute name passed as a string is when no call binds it.
    param_strings: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Annotation:
    """A declared type, with or without a value: ``self.m: Optional[Base] = None`` in a method,
    ``m: Base`` in a class body, ``x: Foo`` in a function.

    ``types`` are the dotted class names the annotation allows, after unwrapping ``Optional[X]``,
    ``X | None``, ``Union[X, Y]``, ``Annotated[X, ...]``, ``ClassVar``/``Final`` and string annotations
    (``"X"``); ``None`` is dropped. A generic ``Foo[T]`` names ``Foo`` (and ``List[Foo]`` names ``List``,
    a class castfind will not find: the declaration then types nothing). Empty when nothing is named.
    """

    target: str  # a dotted name: ``x`` or ``self.x``
    types: tuple[str, ...]
    line: int
    scope: str


@dataclass(frozen=True, slots=True)
class Dynamic:
    """A binding castfind cannot resolve statically (computed getattr, importlib with a non-literal)."""

    target: str | None
    line: int
    scope: str
    reason: str


@dataclass(frozen=True, slots=True)
class LazyExport:
    """A name a module provides only when asked: through its module ``__getattr__`` (a table of
    names or of name → module, a branch that imports a module, ``import_module(path, __name__)``,
    a module-level name returned) or a lazy-module table (``_LazyModule(..., _import_structure)``).

    ``source`` is the module to look ``attr`` up in, as written (``.kernels.add`` is relative to this
    package, like ``from .kernels.add import ...``); an empty ``source`` means ``attr`` is a name of
    this module returned for ``name`` (a deprecated alias).
    """

    name: str
    line: int
    source: str
    attr: str
    #: ``module``: the module object is replaced (``sys.modules[__name__] = _LazyModule(...)``), so at
    #: run time the table is what the module provides; ``getattr``: asked only for names it lacks.
    kind: Literal["getattr", "module"] = "getattr"


AllocKind = Literal["tensor", "parameter", "linear", "embedding", "value"]


@dataclass(frozen=True, slots=True)
class Allocation:
    """``self.X = ...`` in a method: a tensor allocated there, or (``kind="value"``) the expression an
    attribute is set to in ``__init__`` or in a method that allocates, so a shape can be substituted.

    Everything is source text (as ``ast.unparse`` writes it): ``shape`` the dimensions of a
    ``torch.zeros|empty|full|ones|randn`` call (its tuple argument or its positional sizes; ``None``: not
    written out), ``dtype`` its ``dtype=`` argument, ``count`` the ``N`` of a list comprehension
    ``[torch.zeros(...) for _ in range(N)]`` (one buffer per layer), ``text`` the expression of a
    ``value`` (at most :data:`ALLOC_TEXT_LIMIT` characters; longer ones are not recorded). ``when``: the
    test of the innermost enclosing ``if`` (``not (...)`` in its ``else``).
    """

    target: str  # ``self.kv_buffer``
    scope: str  # the method's qualname, ``Pool._create_buffers``
    line: int
    kind: AllocKind
    shape: tuple[str, ...] | None = None
    dtype: str | None = None
    count: str | None = None
    text: str = ""
    when: str | None = None


#: The longest expression text an :class:`Allocation` of kind ``value`` keeps.
ALLOC_TEXT_LIMIT = 300


@dataclass(frozen=True, slots=True)
class Produced:
    """A read of a constant-style name outside a comparison: an attribute chain whose last part has no lowercase
    letter (``AttnForwardMethod.MLA_ROCM``, ``Mode.DECODE``) or such a bare name (``_ROCM_METHODS``), returned,
    assigned, passed, put in a container, used as a default. Where a value comes from: a comparison with the member
    can hold only where one of these runs (:mod:`castfind.analysis.producers`). Not recorded: a comparison's own
    operands, assignment and import targets, the definition ``MLA_ROCM = auto()`` in its class.

    ``text``: the chain as written (``?.M`` when its base is no dotted name); ``guards``: the ifs around it, as a
    call's; ``into``: the module-level name whose assignment holds it (``_ROCM_METHODS = {A.X: A.Y}``), else ""."""

    text: str
    line: int
    scope: str
    guards: tuple[Guard, ...] = ()
    into: str = ""


@dataclass(frozen=True, slots=True)
class FileFacts:
    """Everything castfind needs from one source file."""

    module: str
    path: str  # relative to its root
    is_package: bool
    definitions: tuple[Definition, ...] = ()
    imports: tuple[Import, ...] = ()
    assigns: tuple[Assign, ...] = ()
    calls: tuple[CallSite, ...] = ()
    returns: tuple[Return, ...] = ()
    casts: tuple[Cast, ...] = ()
    dynamic: tuple[Dynamic, ...] = ()
    all_names: tuple[str, ...] | None = None
    error: tuple[int, str] | None = None  # (line, message) when the file could not be analysed
    error_kind: Literal["parse-error", "unsupported"] = "parse-error"  # Python rejects it too | castfind only
    #: ``for`` targets (:attr:`Assign.loop`), apart from ``assigns`` so name resolution never takes a
    #: loop variable for its iterable; provenance reads both.
    loop_assigns: tuple[Assign, ...] = ()
    annotations: tuple[Annotation, ...] = ()
    #: Each ``if`` with an ``else``: (first, last line of its body, first, last line of its else). A name
    #: assigned in one branch is not what a use in the other branch reads.
    branches: tuple[tuple[int, int, int, int], ...] = ()
    #: Names provided lazily (module ``__getattr__``, lazy-module tables).
    lazy: tuple[LazyExport, ...] = ()
    #: Buffers allocated and attributes set in methods (``self.X = torch.zeros(...)``): what costs are made of.
    allocations: tuple[Allocation, ...] = ()
    #: Reads of constant-style names and enum members outside comparisons (:class:`Produced`).
    produced: tuple[Produced, ...] = ()


def _reduce(self: Any) -> tuple[type, tuple[Any, ...]]:
    return (type(self), tuple(getattr(self, f) for f in self.__slots__))


# PERF: frozen slotted dataclasses unpickle through dataclasses._dataclass_setstate, which calls
# fields() for every object; a warm scan loads millions of these records from the cache. Pickling
# them as a constructor call with positional values is several times faster.
for _cls in (Name, Attr, Call, Slice, Subscript, Const, Seq, Other, Import, Assign, CallSite, Return, Guard,
             Cast, Definition, Dynamic, FileFacts, Annotation, LazyExport, Allocation, Produced):
    _cls.__reduce__ = _reduce  # type: ignore[method-assign]
