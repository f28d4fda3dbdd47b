"""Provenance: is a cast's operand a *whole buffer*? Walk it back inside its function.

Views (``view``, ``reshape``, ``permute``, the ``.T``/``.mT``/``.H``/``.mH`` properties, basic slices on
later axes, a scalar index like ``[layer_id]``) keep a buffer whole; a local name is followed to its
assignment, tuple unpacking included; the walk stops at a call, an attribute or a parameter. It ends
*whole* at a getter named by the rules, a getter the index infers (every ``return`` of it is itself a
whole buffer, or a tuple of them), or an attribute named by the rules. Gathering with an index tensor
(``buf[kv_indices]``) or slicing the first axis to the batch (``buf[:bs]``) is not a whole buffer.

**The token axis.** Axis 0 of a pool or an activation is its token (or batch) axis: that is the axis a
gather or a batch slice cuts. A method that cuts a tensor into pieces along one axis (``split``,
``chunk``, ``unbind``, ...) keeps every piece whole only when the call names that axis as an integer
other than 0 (``kv.split(d, dim=-1)``: each piece still covers every token). No axis argument means
axis 0, and an axis held in a variable is unknown: both leave the pieces not whole, so a look-alike
(``q, k = qkv.split(...)`` of a per-batch activation) stays quiet.

**Unpacking.** ``k, v = X`` takes element *i* of ``X``: of a tuple display, that element; of a getter
(named or inferred), a whole buffer (a getter's return is a whole buffer or a tuple of them); of a
``split``-like call, one piece (the rule above); of any other tensor, ``X[i]``, which a constant index
keeps whole.

**Where the proof stops.** :meth:`Provenance.origin_or_stop` returns a :class:`Stop` instead of None when
the walk gives up: the :data:`StopReason`, a detail naming the exact thing (the parameter, the function
called, the attribute, the index, the split axis) and the hops walked up to it. :meth:`Provenance.origin`
is the same walk, answering None for a stop.

**The one walk.** Both outcomes carry the walk as data (:class:`Trail`: each :class:`Step` and the expression
it ended or stopped at). Nothing else walks an operand back: getter inference reads :meth:`Provenance.returns_of`,
and the cost stage (:mod:`castfind.analysis.cost`) reads the trail with its own, stricter reading to find the
allocation (it resumes the same walk past an index or a split the proof rejects, never a walk of its own).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Literal, Protocol

from castfind.core.rules import RuleSet
from castfind.read.facts import (
    Assign,
    Attr,
    Call,
    Const,
    Definition,
    Expr,
    FileFacts,
    Name,
    Other,
    Return,
    Seq,
    Slice,
    Subscript,
    dotted,
    from_dotted,
    render,
)

_MAX_STEPS = 24

#: Tensor properties that are views of the whole tensor (transposes and conjugate transposes).
VIEW_ATTRIBUTES = ("T", "mT", "H", "mH")

#: How many function boundaries (parameters or helper results) one provenance walk may cross.
MAX_CALLS = 2

#: Methods that cut a tensor into pieces along one axis: the position of their axis argument (its name is
#: ``dim``). They keep each piece whole only along a non-token axis (see the module docstring).
SPLITS = {"split": 1, "chunk": 1, "unbind": 0, "tensor_split": 1, "split_with_sizes": 1}


#: Why a proof stopped. From the walk: ``parameter`` (a parameter of the function, no caller seen),
#: ``unknown-call`` (a call that is no getter and no view), ``unresolved-attribute`` (an attribute no buffer
#: kind names), ``gather-index`` (indexing by a tensor, a mask or a name not known to be a scalar),
#: ``batch-slice`` (a range of the first axis), ``token-split`` (split/chunk along axis 0 or an unknown axis),
#: ``no-assignment`` (a name not assigned in its function and no parameter: a global, a loop or ``with``
#: target), ``step-limit``, ``other``. From the checker: ``excluded`` (the kind's ``exclude`` pattern matched
#: the buffer) and ``cold`` (a rule asks for a hot path and no entry point reaches the function, or, for a
#: buffer handed in through a parameter, no caller that hands it one and runs per step).
StopReason = Literal["parameter", "unknown-call", "unresolved-attribute", "gather-index", "batch-slice",
                     "token-split", "no-assignment", "step-limit", "excluded", "cold", "other"]

#: Every stop reason, in the order tables list them.
STOP_REASONS: tuple[StopReason, ...] = ("parameter", "unknown-call", "unresolved-attribute", "gather-index",
                                        "batch-slice", "token-split", "no-assignment", "step-limit", "excluded",
                                        "cold", "other")


#: What one step of the walk did to the expression it stepped from (:class:`Step`): ``name`` (a local name to
#: its assignment), ``unpack`` (a name to the value it is element *i* of), ``view`` (``x.view(...)``, ``x.reshape``,
#: ...; ``.view(dtype)`` included), ``split`` (a piece of ``x.split(..., dim=d)`` along a non-token axis),
#: ``view-fn``/``split-fn`` (the same written ``torch.view(x, ...)``), ``index`` (an index that keeps the buffer
#: whole), ``view-attribute`` (``.T``, ``.mT``, ...), ``rows`` (unpacking a tensor takes ``x[i]``), ``element``
#: (element *i* of a tuple display), ``tuple`` (a tuple display of buffers), ``helper`` (a call that returns a
#: full-size derivation of an argument), ``parameter`` (into the caller that passes the buffer).
StepKind = Literal["name", "unpack", "view", "split", "view-fn", "split-fn", "index", "view-attribute", "rows",
                   "element", "tuple", "helper", "parameter"]


@dataclass(frozen=True, slots=True)
class Step:
    """One step of the walk back: its kind, the expression it stepped from and the line that expression is read at."""

    kind: StepKind
    expr: Expr
    line: int


@dataclass(frozen=True, slots=True)
class Trail:
    """The walk as data, in the function it started in: the steps taken in order, and the expression it ended
    (or stopped) at with its line (None for a walk that never read one). What the buffer is for the cost stage:
    its holder (``end``: ``self.X``, ``self.h.X``, ``layer.X``, a getter call ``recv.get_key_buffer(i)``) and the
    operations applied on the way (views, indexes, a dtype view): :mod:`castfind.analysis.cost` reads it, never walks."""

    steps: tuple[Step, ...] = ()
    end: Expr | None = None
    line: int = 0

    @property
    def getter(self) -> str | None:
        """The method name when the walk ended at a method call ``recv.name(...)``."""
        e = self.end
        return e.func.attr if isinstance(e, Call) and isinstance(e.func, Attr) else None


@dataclass(frozen=True, slots=True)
class Stop:
    """Where a proof gave up: why, the exact thing it stopped at (``detail``) and the hops walked before;
    ``trail``: the same walk as data (the stopping expression its ``end``)."""

    reason: StopReason
    detail: str
    hops: tuple[str, ...] = ()
    trail: Trail = field(default=Trail(), compare=False)  # the hops as data: equal proofs, equal outcomes


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a whole buffer comes from: its kind, the text that names it, the hops walked.

    ``names`` are the identifiers of the buffer expression itself (``self.input_layernorm.weight`` →
    ``self``, ``input_layernorm``, ``weight``; a getter call's names, never its arguments or indices);
    ``classes`` the classes of the object that holds the buffer when the file says (the class of
    ``self``; for ``self.norm.weight``, the classes ``self.norm`` is constructed from in that class).
    The buffer kind's ``exclude`` patterns are matched against these, never against the function.

    ``entry``: when the buffer came in through a parameter of the function the walk started in,
    ``(module, function, parameter, hops before that crossing)`` (None when it is read there): the
    cast is whole only when one of the callers that pass a whole buffer for that parameter runs it
    (:mod:`castfind.analysis.checker` judges hot and once on those callers, not on the function alone).

    ``trail``: the walk as data (:class:`Trail`): its steps in the function it started in and the buffer
    expression it ended at (a walk that crossed into a caller ends with a ``parameter`` step).
    """

    kind: str
    path: str
    hops: tuple[str, ...]
    names: tuple[str, ...] = ()
    classes: tuple[str, ...] = ()
    entry: tuple[str, str, str, int] | None = None
    trail: Trail = field(default=Trail(), compare=False)  # the hops as data: equal proofs, equal outcomes


def once_function(rules: RuleSet, qualname: str) -> str | None:
    """The part of ``qualname`` (a function, or one it is nested in) that ``once.functions`` names: an
    initialisation, loading or capture function runs once per model, not per step. None: no part does."""
    for part in qualname.split("."):
        if part != "<locals>" and rules.is_once_function(part):
            return part
    return None


def split_axis(call: Call, method: str, skip: int = 0) -> Expr | None:
    """The axis argument of a ``split``-like call (``skip``: leading operand arguments of ``torch.split``)."""
    for k, v in call.kwargs:
        if k == "dim":
            return v
    pos = SPLITS[method] + skip
    return call.args[pos] if pos < len(call.args) else None


def non_token_axis(axis: Expr | None) -> bool:
    """Is ``axis`` an integer literal other than 0 (so the split keeps every token)?"""
    if not isinstance(axis, Const):
        return False  # absent (axis 0) or a name: not known to spare the token axis
    text = axis.text.strip()
    return text.lstrip("-").isdigit() and int(text) != 0


class AcrossCalls(Protocol):
    """What the walk asks when it reaches a function boundary (:mod:`castfind.analysis.summaries` answers).

    ``parameter``: the whole buffer a caller passes as parameter ``name`` of ``scope``, with the hops
    on the caller's side first (``caller.py:L passes X as name``), or None. ``derived``: when
    ``call`` returns a full-size derivation of one of its arguments (a helper that casts, views or
    dequantizes its argument and returns it), that argument expression and a hop that says so.
    ``depth`` counts the function boundaries crossed so far. ``callers_passing``: the functions that hand
    parameter ``name`` of function ``node`` a whole buffer; ``via``: the buffer one of them hands it;
    ``guessed``: how many functions share ``callee``'s name when every handoff from ``caller`` reaches it by
    that name alone among several (0: resolved).
    """

    def parameter(self, facts: FileFacts, scope: str, name: str, depth: int) -> Origin | None: ...

    def callers_passing(self, node: tuple[str, str], name: str) -> list[tuple[str, str]]: ...

    def via(self, node: tuple[str, str], name: str, caller: tuple[str, str]) -> Origin | None: ...

    def guessed(self, caller: tuple[str, str], callee: tuple[str, str]) -> int: ...

    def derived(self, facts: FileFacts, scope: str, call: Call, line: int, depth: int) -> tuple[Expr, str] | None: ...


class Provenance:
    """Receiver → :class:`Origin`. ``getter_kind`` answers for inferred getters (by function name);
    ``across`` (optional) carries the walk over function boundaries (parameters, helper calls)."""

    def __init__(self, rules: RuleSet, getter_kind: Callable[[str], str | None] | None = None,
                 across: AcrossCalls | None = None) -> None:
        self.rules = rules
        self.getter_kind = getter_kind or (lambda name: None)
        self.across = across
        self._assigns: dict[int, tuple[FileFacts, dict[tuple[str, str], list[Assign]]]] = {}
        self._params: dict[int, tuple[FileFacts, dict[str, tuple[str, ...]]]] = {}
        self._views = set(rules.views)
        self._getters = {g: k.name for k in rules.buffers.values() for g in k.getters}

    def whole_index(self, index: tuple[Expr | Slice, ...], facts: FileFacts | None = None, scope: str = "",
                    line: int = 0) -> bool:
        """True when indexing keeps the buffer whole (a scalar layer index, basic slices on later axes).

        An index is judged by what it is (:meth:`scalar`), given the function it is read in
        (``facts``, ``scope``, ``line``); without one, only literals and the rules' index names count.
        """
        return self.index_stop(index, facts, scope, line) is None

    def index_stop(self, index: tuple[Expr | Slice, ...], facts: FileFacts | None = None, scope: str = "",
                   line: int = 0) -> tuple[StopReason, str] | None:
        """None when indexing keeps the buffer whole, else why not and the element that cuts it."""
        for pos, el in enumerate(index):
            if isinstance(el, Slice):
                if pos == 0 and (el.lower is not None or el.upper is not None):
                    return "batch-slice", render(el)  # a range of rows: the batch, not the buffer
                continue
            if isinstance(el, Const) and el.text in ("...", "None"):
                continue
            if self.scalar(el, facts, scope, line):
                continue
            if isinstance(el, Const):
                return "other", render(el)
            name = dotted(el)
            if name is not None:
                return "gather-index", name
            if isinstance(el, Other) and not el.text and el.names:
                return "gather-index", f"a {el.kind} of {', '.join(el.names)}"
            return "gather-index", render(el)
        return None

    def scalar(self, expr: Expr, facts: FileFacts | None = None, scope: str = "", line: int = 0,
               depth: int = 0) -> bool:
        """Is ``expr`` one integer (so ``buf[expr]`` picks a layer, not rows)? Judged by what it is:
        an integer literal; a parameter annotated ``int``; ``int(...)``, ``len(...)``, ``x.item()``; a ``range(...)`` loop variable or
        the counter of ``enumerate``; a local assigned one of those; integer arithmetic of them
        (``layer_id - self.start_layer``); or a name the rules' ``index.scalar`` list holds. An index
        tensor, a mask or anything castfind cannot see is not a scalar."""
        if depth > 8:
            return False
        if isinstance(expr, Const):
            return expr.text.lstrip("-").isdigit()
        name = dotted(expr)
        if name is not None and self.rules.is_scalar_index(name):
            return True
        if isinstance(expr, Name) and facts is not None:
            a = self.assignment(facts, scope, expr.id, line)
            if a is None:
                return self.int_parameter(facts, scope, expr.id)
            if a.loop:
                it = a.value
                fn = dotted(it.func) if isinstance(it, Call) else None
                return (fn == "range" and a.index is None) or (fn == "enumerate" and a.index == 0)
            return a.index is None and self.scalar(a.value, facts, scope, a.line, depth + 1)
        if isinstance(expr, Call):
            fn = dotted(expr.func)
            return fn in ("int", "len", "operator.index") or (isinstance(expr.func, Attr) and expr.func.attr == "item")
        if isinstance(expr, Other) and expr.kind == "BinaryOperation":
            if expr.parts:
                return all(self.scalar(p, facts, scope, line, depth + 1) for p in expr.parts)
            return bool(expr.names) and all(self.scalar(from_dotted(n), facts, scope, line, depth + 1)
                                            for n in expr.names)
        return False

    def kind_of_call(self, func: Expr) -> str | None:
        name = func.attr if isinstance(func, Attr) else func.id if isinstance(func, Name) else None
        if name is None:
            return None
        return self._getters.get(name) or self.getter_kind(name)

    def _view_call(self, call: Call) -> tuple[str, Expr, int] | None:
        """``(method, operand, leading args)`` when ``call`` is a view: ``x.view(...)`` or ``torch.view(x, ...)``."""
        f = call.func
        if not isinstance(f, Attr) or f.attr not in self._views:
            return None
        if dotted(f.value) == "torch" and call.args:
            return f.attr, call.args[0], 1
        return f.attr, f.value, 0

    def origin(self, facts: FileFacts, scope: str, expr: Expr, line: int, depth: int = 0) -> Origin | None:
        """The whole buffer ``expr`` is, or None. ``depth``: function boundaries already crossed."""
        got = self.origin_or_stop(facts, scope, expr, line, depth)
        return got if isinstance(got, Origin) else None

    def origin_or_stop(self, facts: FileFacts, scope: str, expr: Expr, line: int, depth: int = 0) -> Origin | Stop:
        """The whole buffer ``expr`` is, or where and why the walk stopped; either carries the walk as a :class:`Trail`."""
        hops: list[str] = []
        steps: list[Step] = []
        seen: set[tuple[str, int]] = set()
        # Elements taken by tuple unpacking, innermost last: `k, v = X` then `k` is element 0 of X.
        elems: list[int] = []
        for _ in range(_MAX_STEPS):
            if elems and not isinstance(expr, (Name, Seq, Call)):
                steps.append(Step("rows", expr, line))
                expr = self._take_rows(expr, elems, hops)
            if isinstance(expr, Call):
                view = self._view_call(expr)
                if view is not None:
                    method, operand, skip = view
                    if method in SPLITS:
                        axis = split_axis(expr, method, skip)
                        if not non_token_axis(axis):
                            # pieces along the token axis (or an unknown one): rows, not the buffer
                            return _stop("token-split", f"{render(expr)} cuts axis "
                                         f"{render(axis) if axis is not None else '0 (no dim given)'}", hops,
                                         steps, expr, line)
                        piece = f"element {elems.pop()} of " if elems else ""
                        hops.append(f"{piece}.{method}(dim={render(axis)}) cuts a non-token axis: each piece is whole")
                        steps.append(Step("split-fn" if skip else "split", expr, line))
                    else:
                        if elems:
                            steps.append(Step("rows", expr, line))
                            expr = self._take_rows(expr, elems, hops)
                            continue
                        hops.append(f".{method}() is a view")
                        steps.append(Step("view-fn" if skip else "view", expr, line))
                    expr = operand
                    continue
                kind = self.kind_of_call(expr.func)
                if kind is not None:
                    f = expr.func
                    name = f.attr if isinstance(f, Attr) else render(f)
                    if elems:
                        hops.append(f"element {elems[-1]} of {name}() is a whole {kind}: a getter returns whole "
                                    "buffers or a tuple of them")
                    else:
                        hops.append(f"{name}() returns the whole {kind}")
                    return self._end(facts, scope, kind, expr, hops, steps, line)
                if self.across is not None and not elems:
                    derived = self.across.derived(facts, scope, expr, line, depth)
                    if derived is not None:
                        steps.append(Step("helper", expr, line))
                        expr, hop = derived
                        hops.append(hop)
                        continue
                return _stop("unknown-call", f"{render(expr.func)}() is no getter and no view", hops, steps, expr, line)
            if isinstance(expr, Seq):
                if elems:
                    i = elems.pop()
                    if i >= len(expr.elts):
                        return _stop("other", f"element {i} of {render(expr)} does not exist", hops, steps, expr, line)
                    hops.append(f"element {i} of {render(expr)}")
                    steps.append(Step("element", expr, line))
                    expr = expr.elts[i]
                    continue
                return self._tuple_origin(facts, scope, expr, line, hops, depth, steps)
            if isinstance(expr, Subscript):
                cut = self.index_stop(expr.index, facts, scope, line)
                if cut is not None:
                    return _stop(cut[0], f"[{cut[1]}] in {render(expr)}", hops, steps, expr, line)
                hops.append(f"[{', '.join(render(i) for i in expr.index)}] keeps it whole")
                steps.append(Step("index", expr, line))
                expr = expr.value
                continue
            if isinstance(expr, Attr):
                if expr.attr in VIEW_ATTRIBUTES:
                    hops.append(f".{expr.attr} is a view")
                    steps.append(Step("view-attribute", expr, line))
                    expr = expr.value
                    continue
                for buffer in self.rules.buffers.values():
                    if buffer.attribute_matches(expr.attr):
                        hops.append(f".{expr.attr} is a {buffer.name} buffer")
                        return self._end(facts, scope, buffer.name, expr, hops, steps, line)
                return _stop("unresolved-attribute", f"{render(expr)}: no buffer kind names .{expr.attr}", hops,
                             steps, expr, line)
            if isinstance(expr, Name):
                a = self.assignment(facts, scope, expr.id, line)
                if a is None and not elems and self.across is not None and expr.id in self.params(facts, scope):
                    return self._through_parameter(facts, scope, expr, line, hops, depth, steps)
                if a is None:
                    return _unassigned(facts, scope, expr, line, hops, steps)
                if (a.target, a.line) in seen:
                    return _stop("other", f"{expr.id} is assigned from itself (line {a.line})", hops, steps, expr, line)
                if a.loop:
                    return _stop("other", f"{expr.id} is a loop variable over {render(a.value)} (line {a.line}): "
                                 "one element at a time", hops, steps, expr, line)
                seen.add((a.target, a.line))
                if a.index is not None:
                    elems.append(a.index)
                    hops.append(f"{expr.id} = element {a.index} of {render(a.value)} (line {a.line})")
                    steps.append(Step("unpack", expr, line))
                else:
                    hops.append(f"{expr.id} = {render(a.value)} (line {a.line})")
                    steps.append(Step("name", expr, line))
                expr, line = a.value, a.line
                continue
            return _stop("other", f"{render(expr)} is a {expr.kind if isinstance(expr, Other) else 'constant'}", hops,
                         steps, expr, line)
        return _stop("step-limit", f"gave up after {_MAX_STEPS} steps at {render(expr)}", hops, steps, expr, line)

    def returns_of(self, facts: FileFacts, qualname: str, returns: Iterable[Return] | None = None) -> Iterator[Origin | Stop]:
        """The walk of each ``return`` of function ``qualname`` (``returns``: those of ``facts``, already picked
        out), in order: what getter inference reads (the engine's :class:`~castfind.analysis.getters.GetterOracle`: is every
        return a whole buffer of one kind; the cost stage: which attribute of its class a getter hands out).
        Lazy: a reader may stop at the first it rejects."""
        for r in facts.returns if returns is None else returns:
            if r.scope == qualname:
                yield self.origin_or_stop(facts, qualname, r.value, r.line)

    @staticmethod
    def _take_rows(expr: Expr, elems: list[int], hops: list[str]) -> Expr:
        """Unpacking a tensor iterates its first axis: element ``i`` is ``expr[i]`` (a constant index)."""
        index: tuple[Expr | Slice, ...] = tuple(Const(str(i)) for i in reversed(elems))
        elems.clear()
        hops.append(f"unpacking {render(expr)} takes {render(Subscript(expr, index))}")
        return Subscript(expr, index)

    def _tuple_origin(self, facts: FileFacts, scope: str, expr: Seq, line: int, hops: list[str],
                      depth: int = 0, steps: list[Step] | None = None) -> Origin | Stop:
        """A tuple display of whole buffers of one kind (``return self.k_buffer[i], self.v_buffer[i]``).
        Its trail ends at the tuple (no one buffer): the elements' walks are not part of it."""
        trail = Trail((*(steps or ()), Step("tuple", expr, line)), expr, line)
        if not expr.elts:
            return Stop("other", "an empty tuple", tuple(hops), trail)
        got = [self.origin_or_stop(facts, scope, e, line, depth) for e in expr.elts]
        for g in got:
            if isinstance(g, Stop):  # the first element that is no whole buffer, with its own hops
                return Stop(g.reason, g.detail, (*hops, *g.hops), trail)
        found = [g for g in got if isinstance(g, Origin)]
        kinds = {o.kind for o in found}
        if len(kinds) != 1:
            return Stop("other", f"{render(expr)} mixes {', '.join(sorted(kinds))} buffers", tuple(hops), trail)
        kind = kinds.pop()
        hops.append(f"{render(expr)} is a tuple of whole {kind} buffers")
        names = tuple(dict.fromkeys(n for o in found for n in o.names))
        classes = tuple(dict.fromkeys(c for o in found for c in o.classes))
        return Origin(kind, render(expr), tuple(hops), names, classes, trail=trail)

    def _through_parameter(self, facts: FileFacts, scope: str, expr: Name, line: int, hops: list[str],
                           depth: int, steps: list[Step]) -> Origin | Stop:
        """``expr`` names a parameter of ``scope``: the whole buffer a caller passes for it, if any. The trail
        stays in this function: it ends with the ``parameter`` step (the caller's side is in the hops)."""
        assert self.across is not None
        name = expr.id
        outer = self.across.parameter(facts, scope, name, depth)
        if outer is None:
            return _stop("parameter", f"{name} is a parameter of {scope}: no caller castfind sees in the report "
                         "scope passes a whole buffer for it", hops, steps, expr, line)
        return Origin(outer.kind, outer.path, (*hops, *outer.hops), outer.names, outer.classes,
                      (facts.module, scope, name, len(hops)), Trail((*steps, Step("parameter", expr, line)), expr, line))

    @staticmethod
    def int_parameter(facts: FileFacts, scope: str, name: str) -> bool:
        """Is ``name`` a parameter of ``scope`` annotated ``int``?"""
        for d in facts.definitions:
            if d.qualname == scope and d.kind != "class":
                return dict(d.param_types).get(name) == ("int",)
        return False

    def params(self, facts: FileFacts, scope: str) -> tuple[str, ...]:
        """The parameters of the function ``scope`` (none at module or class level)."""
        got = self._params.get(id(facts))
        if got is None or got[0] is not facts:
            table = {d.qualname: d.params for d in facts.definitions if d.kind != "class"}
            got = (facts, table)
            if len(self._params) > 256:
                self._params.clear()
            self._params[id(facts)] = got
        return got[1].get(scope, ())

    def _end(self, facts: FileFacts, scope: str, kind: str, expr: Expr, hops: list[str], steps: list[Step],
             line: int) -> Origin:
        return Origin(kind, render(expr), tuple(hops), buffer_names(expr), holder_classes(facts, scope, expr),
                      trail=Trail(tuple(steps), expr, line))

    def assignment(self, facts: FileFacts, scope: str, name: str, line: int) -> Assign | None:
        """The latest assignment to ``name`` in ``scope`` before ``line`` (tuple unpacking included)."""
        got = self._assigns.get(id(facts))
        if got is None or got[0] is not facts:
            table: dict[tuple[str, str], list[Assign]] = {}
            for a in (*facts.assigns, *facts.loop_assigns):
                table.setdefault((a.scope, a.target), []).append(a)
            got = (facts, table)
            if len(self._assigns) > 256:
                self._assigns.clear()
            self._assigns[id(facts)] = got
        cands = got[1].get((scope, name), ())
        # PERF: the branch test only for an assignment that would be the answer (most are not).
        best = None
        for a in cands:
            if a.line <= line and (best is None or a.line >= best.line) and not _exclusive(facts, a.line, line):
                best = a
        if best is not None and best.line == line:
            # `x = x.to(...)`: the value on the cast's own line is the cast itself, look earlier.
            earlier = None
            for a in cands:
                if a.line < line and (earlier is None or a.line > earlier.line) and not _exclusive(facts, a.line, line):
                    earlier = a
            return earlier
        return best


def _exclusive(facts: FileFacts, a: int, b: int) -> bool:
    """Are lines ``a`` and ``b`` in the two branches of one ``if``/``else`` (so one never sees the other)?

    An ``else`` comes after its body, so the earlier line must be in the body and the later one in the
    ``else``. PERF: called for each assignment a provenance walk considers (hundreds of thousands a scan).
    """
    lo, hi = (a, b) if a <= b else (b, a)
    for b0, b1, e0, e1 in facts.branches:
        if b0 > lo:
            break  # sorted by the body's first line: no later if holds the earlier line in its body
        if lo <= b1 and e0 <= hi <= e1:
            return True
    return False


def _stop(reason: StopReason, detail: str, hops: list[str], steps: list[Step], end: Expr, line: int) -> Stop:
    return Stop(reason, detail, tuple(hops), Trail(tuple(steps), end, line))


def _unassigned(facts: FileFacts, scope: str, expr: Name, line: int, hops: list[str], steps: list[Step]) -> Stop:
    """A name with no assignment before the line: a parameter of its function (or of one it is nested in),
    or something else (a global, an import, a loop or ``with`` target)."""
    name = expr.id
    fn = function_with_param(facts, scope, name)
    if fn is not None:
        return _stop("parameter", f"{name} is a parameter of {fn.qualname}", hops, steps, expr, line)
    return _stop("no-assignment", f"{name} is not assigned in {scope or '<module>'} before its use", hops, steps,
                 expr, line)


def function_with_param(facts: FileFacts, scope: str, name: str) -> Definition | None:
    """The innermost function, ``scope`` or one it is nested in, that has a parameter ``name``."""
    defs = {d.qualname: d for d in facts.definitions if d.kind != "class"}
    parts = scope.split(".") if scope else []
    for n in range(len(parts), 0, -1):
        d = defs.get(".".join(parts[:n]))
        if d is not None and name in d.params:
            return d
    return None


def buffer_names(expr: Expr) -> tuple[str, ...]:
    """The identifiers of a buffer expression, outermost first: its names and attributes, a call's function
    (not its arguments), a subscript's value (not its index)."""
    out: list[str] = []
    while True:
        if isinstance(expr, Attr):
            out.append(expr.attr)
            expr = expr.value
        elif isinstance(expr, Call):
            expr = expr.func
        elif isinstance(expr, Subscript):
            expr = expr.value
        else:
            if isinstance(expr, Name):
                out.append(expr.id)
            return tuple(reversed(out))


def enclosing_class(facts: FileFacts, scope: str) -> str | None:
    """The qualname of the innermost class whose method ``scope`` is in (None at module level or in a function)."""
    classes = {d.qualname for d in facts.definitions if d.kind == "class"}
    parts = scope.split(".")
    for n in range(len(parts) - 1, 0, -1):
        if ".".join(parts[:n]) in classes:
            return ".".join(parts[:n])
    return None


def holder_classes(facts: FileFacts, scope: str, expr: Expr) -> tuple[str, ...]:
    """The classes of the object holding the buffer ``expr``, as far as the file says.

    ``self.weight``: the class of the method. ``self.norm.weight``: every class ``self.norm`` is built
    from (``self.norm = RMSNorm(...)``) in a method of that class; none when any assignment of it is
    not a constructor call (a parameter, a conditional expression). Anything else: none known.
    """
    if not isinstance(expr, Attr):
        return ()
    holder = expr.value
    cls = enclosing_class(facts, scope)
    if cls is None:
        return ()
    if isinstance(holder, Name) and holder.id == "self":
        return (cls.rsplit(".", 1)[-1],)
    target = dotted(holder)
    if target is None or not target.startswith("self.") or target.count(".") != 1:
        return ()
    found: list[str] = []
    for a in facts.assigns:
        if a.target != target or a.index is not None or not a.scope.startswith(cls + "."):
            continue
        built = dotted(a.value.func) if isinstance(a.value, Call) else None
        if built is None:
            return ()
        found.append(built.rsplit(".", 1)[-1])
    return tuple(dict.fromkeys(found))
