"""What a parameter's cast moves: the buffers its callers hand in, followed back across functions and files.

A cast of a parameter (``k.to(torch.float16)`` in ``run(self, q, k, v)``, ``head.weight.float()`` in
``_logits(self, hidden, head)``) has no allocation of its own: the buffer is whatever the calls of its function
pass. :class:`Callers` finds those calls and reads each argument in its caller the way cost reads an operand
(:meth:`castfind.analysis.getters.Holders.read`): ``self.X`` (a :class:`~castfind.analysis.getters.Held`), a getter
call, or the caller's own parameter, followed again, at most :data:`MAX_HOPS` functions out.

The calls of a function ``f`` (a method of class ``C``, or a plain function) are, by what the code says about the
receiver, never by the name alone:

* in ``f``'s own file, ``self.f(...)`` in a method of ``C`` (``f(...)`` for a plain function);
* in any file that names ``C``: ``self.A.f(...)`` where the caller's class builds ``self.A = C(...)``
  (:func:`~castfind.analysis.provenance.holder_classes`), or ``p.f(...)`` with ``p`` a parameter annotated ``C``;
  for ``f`` = ``forward``, calling the module itself, ``self.A(...)`` / ``p(...)``, is a call of ``f``;
* for a plain function, ``f(...)`` or ``mod.f(...)`` in a file that names ``f``.

An argument that is no buffer (``torch.cat(...)`` of activations, a parameter no caller hands a buffer to) is
said, with where it was handed, in :attr:`Handed.why`: a cast without a number says why it has none. Of those, a
tensor made for this call is also in :attr:`Handed.fresh`: a call of the rules' ``cost.per_batch`` (``torch.cat``,
``torch.empty(...)``), rows of the batch (``batch.keys[:n]``: provenance's ``batch-slice``, ``token-split`` or
``gather-index`` stop), or an arithmetic result, none of whose arguments or operands is a held buffer; when every
call hands such a tensor the cast is per-batch (:class:`castfind.analysis.cost.CostModel`). A cast or clone is
read as what it was made from: of a held buffer (``self.pool.k_buffer[i].to(x)``, ``buf.clone()``) it is still that
buffer, of a tensor made for the call still such a tensor, of the caller's parameter that parameter. With
``--model-config``, a call off the model's path (another model's class, a component the flags did not select: the
model path's verdict) is left out: it hands a buffer this deployment does not run.
Pure over the facts; used only when a deployment is described (:class:`castfind.analysis.cost.CostModel`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from castfind.analysis.getters import GetterCall, Held, Holders
from castfind.analysis.provenance import Origin, Stop, enclosing_class, holder_classes
from castfind.core import casts
from castfind.core.rules import glob_match
from castfind.read.facts import Attr, Call, CallSite, Definition, Expr, FileFacts, Name, Other, Seq, render

#: How many functions out a parameter is followed (``_compute`` ← ``_get`` ← ``forward`` ← the model).
MAX_HOPS = 4
#: How many files naming a class (or a plain function) are searched for its calls.
MAX_FILES = 200


@dataclass(frozen=True)
class Handed:
    """What the calls hand to a parameter: the buffers read (``found``) and, for each call that hands none, why."""

    found: tuple[Held | GetterCall, ...]
    why: tuple[str, ...]
    #: The reasons of :attr:`why` that are a tensor made for the call (built from the batch, rows of it).
    fresh: tuple[str, ...] = ()


def parameter_of(facts: FileFacts, scope: str, end: Expr | None) -> tuple[str, str | None] | None:
    """``(p, None)`` when a walk ended at parameter ``p`` of ``scope``; ``(p, "weight")`` at ``p.weight``."""
    d = _function(facts, scope)
    if d is None:
        return None
    params = d.params[1:] if _is_method(d) else d.params
    if isinstance(end, Name) and end.id in params:
        return end.id, None
    if isinstance(end, Attr) and isinstance(end.value, Name) and end.value.id in params:
        return end.value.id, end.attr
    return None


class Callers:
    """The calls that hand a parameter its buffer, across files (see the module docstring)."""

    def __init__(self, holders: Holders, files_naming: Callable[[str, int], Sequence[FileFacts]],
                 off_model: Callable[[str], str | None] | None = None, per_batch: Sequence[str] = ()) -> None:
        self.holders = holders
        #: The rules' ``cost.per_batch``: patterns of calls that make a new tensor on every call.
        self.per_batch = tuple(per_batch)
        self.files_naming = files_naming
        #: Why a caller (``module.Class.method``) is off the model's path (non-empty: another model's class, a component
        #: the flags did not select), "" or None when it is not: with ``--model-config``, the model path's verdict.
        self.off_model = off_model
        self._seen: dict[tuple[str, str, str], tuple[str, ...]] = {}

    def handed(self, facts: FileFacts, scope: str, param: str, attr: str | None) -> Handed:
        """What the calls of ``scope`` hand to ``param`` (its ``.attr`` when ``attr``), followed back."""
        found: list[Held | GetterCall] = []
        why: list[str] = []
        fresh: list[str] = []
        seen: set[tuple[str, str, str]] = set()
        todo: list[tuple[FileFacts, str, str, str | None, int]] = [(facts, scope, param, attr, 0)]
        while todo:
            ff, sc, p, attr, hops = todo.pop(0)
            if (ff.path, sc, p) in seen:
                continue
            seen.add((ff.path, sc, p))
            calls = self.calls_of(ff, sc)
            off = self.off_model
            ours = [c for c in calls if off is None or not off(f"{c[0].module}.{c[1].scope}")]
            if not ours:
                why.append(f"no call of {sc} that castfind can read hands {p}" + (
                    f" on the model's path ({len(calls)} in code off it: another model's, an unselected component's)"
                    if calls else ""))
                continue
            calls = ours
            d = _function(ff, sc)
            assert d is not None
            for cf, cs, module_call in calls:
                arg = _argument(d, cs, p, module_call)
                where = f"{cf.path}:{cs.line}"
                if arg is None:
                    why.append(f"{where} passes {p} in a way castfind cannot read (*args or a missing argument)")
                    continue
                expr: Expr = Attr(arg, attr) if attr else arg
                walked = self._uncast(cf, cs.scope, self.holders.prov.origin_or_stop(cf, cs.scope, expr, cs.line),
                                      cs.line)
                got = self.holders.read(cf, cs.scope, walked)
                if isinstance(got, Held) and got.on_param:
                    got = None  # `p.weight` of the caller's own parameter `p`: followed to the caller's callers below
                made = self._made(cf, cs.scope, walked) if got is None or (
                    isinstance(got, GetterCall) and not self.holders.handed_out(got.name)) else None
                if made is not None:
                    fresh.append(f"{where} {cs.scope} hands {_short(render(expr))}, {made}")
                    why.append(fresh[-1])
                    continue
                if isinstance(got, GetterCall) and not self.holders.handed_out(got.name):
                    # `k.view(...).to(q.dtype)`: a call's fresh result (an activation), no getter of a held buffer
                    why.append(f"{where} {cs.scope} hands {_short(render(expr))}, the result of a call (.{got.name}) "
                               f"that hands out no buffer castfind can size")
                    continue
                if got is not None:
                    if got not in found:
                        found.append(got)
                    continue
                # The caller's own parameter (`p`, or `p.weight` for the weight asked): followed to its callers.
                up = parameter_of(cf, cs.scope, walked.trail.end)
                if (up is not None and (attr is None or up[1] == attr) and hops + 1 < MAX_HOPS
                        and all(s.kind in ("name", "view", "view-attribute") for s in walked.trail.steps)):
                    todo.append((cf, cs.scope, up[0], up[1], hops + 1))
                    continue
                stop = f" ({walked.reason}: {walked.detail})" if isinstance(walked, Stop) and walked.detail else ""
                why.append(f"{where} {cs.scope} hands {_short(render(expr))}, no allocation castfind can size{stop}")
        return Handed(tuple(found), tuple(dict.fromkeys(why)), tuple(dict.fromkeys(fresh)))

    # -- what an argument is -------------------------------------------------------------------------------
    def _uncast(self, facts: FileFacts, scope: str, walked: Origin | Stop, line: int) -> Origin | Stop:
        """The walk of what a cast or clone the argument ends at was made from, as often as it is one: a cast's
        result moves as many elements as its operand, so ``self.pool.k_buffer[i].to(x)`` is still that buffer,
        ``torch.cat(parts).to(x)`` still a tensor made for the call, ``k.view(...).to(q.dtype)`` still the caller's
        parameter ``k`` (followed to its callers)."""
        for _ in range(8):
            end = walked.trail.end
            if not (isinstance(end, Call) and isinstance(end.func, Attr)):
                return walked
            method = casts.by_name().get(end.func.attr)
            if end.func.attr != "clone" and (method is None or method.operand != "receiver"):
                return walked
            walked = self.holders.prov.origin_or_stop(facts, scope, end.func.value, line)
        return walked

    def _made(self, facts: FileFacts, scope: str, walked: Origin | Stop) -> str | None:
        """Why the argument a walk ended at is a tensor made for this call (see the module docstring), or None."""
        if not isinstance(walked, Stop):
            return None
        end = walked.trail.end
        if walked.reason in ("batch-slice", "token-split", "gather-index"):
            return f"rows of the batch ({walked.reason}: {walked.detail})"
        if isinstance(end, Call) and any(glob_match(p, render(end.func)) for p in self.per_batch):
            parts = [*end.args, *(v for _, v in end.kwargs)]
            if not self._holds_buffer(facts, scope, parts, walked.trail.line):
                return f"a tensor {render(end.func)}() makes on every call"
        if (isinstance(end, Other) and end.kind == "BinaryOperation" and end.parts
                and not self._holds_buffer(facts, scope, end.parts, walked.trail.line)):
            return "an arithmetic result made on every call"
        return None

    def _holds_buffer(self, facts: FileFacts, scope: str, exprs: Sequence[Expr], line: int) -> bool:
        """Is any of ``exprs`` (or an element of a list or tuple among them) a whole buffer (provenance's proof) or
        what a getter hands out?"""
        for e in exprs:
            if isinstance(e, Seq):
                if self._holds_buffer(facts, scope, e.elts, line):
                    return True
                continue
            walked = self.holders.prov.origin_or_stop(facts, scope, e, line)
            if isinstance(walked, Origin):
                return True
            got = self.holders.read(facts, scope, walked)  # `self.scale` reads as held too: only a getter's counts
            if isinstance(got, GetterCall) and self.holders.handed_out(got.name):
                return True
        return False

    # -- the calls of a function ------------------------------------------------------------------------------
    def calls_of(self, facts: FileFacts, scope: str) -> list[tuple[FileFacts, CallSite, bool]]:
        """Each call of function ``scope`` of ``facts`` the code types (see the module docstring), with its file
        and whether it calls the module itself (``self.A(...)`` for ``forward``)."""
        d = _function(facts, scope)
        if d is None:
            return []
        out: list[tuple[FileFacts, CallSite, bool]] = []
        if not _is_method(d):
            for ff in [facts, *(f for f in self.files_naming(d.name, MAX_FILES) if f.path != facts.path)]:
                out += [(ff, c, False) for c in ff.calls if c.scope != scope
                        and (c.func == d.name if ff is facts else c.func.rsplit(".", 1)[-1] == d.name)]
            return out
        cls = d.parent.rsplit(".", 1)[-1]
        out += [(facts, c, False) for c in facts.calls
                if c.func == f"self.{d.name}" and c.scope != scope and enclosing_class(facts, c.scope) == d.parent]
        for ff in self.files_naming(cls, MAX_FILES):
            for c in ff.calls:
                recv, _, method = c.func.rpartition(".")
                if method == d.name and recv and cls in self._types(ff, c.scope, recv):
                    out.append((ff, c, False))
                elif d.name == "forward" and cls in self._types(ff, c.scope, c.func):
                    out.append((ff, c, True))
        return out

    def _types(self, facts: FileFacts, scope: str, recv: str) -> tuple[str, ...]:
        """The classes ``recv`` (``self.A`` or a parameter name) is an instance of, by what ``facts`` says: those
        ``self.A`` is built from in the method's class, or a parameter's annotation. Memoised per class and name
        (PERF: a module's ``forward`` is called as ``self.A(...)``, and files have thousands of such calls)."""
        parts = recv.split(".")
        if len(parts) == 2 and parts[0] == "self":
            key = (f"{facts.module}:{facts.path}", enclosing_class(facts, scope) or "", recv)
            got = self._seen.get(key)
            if got is None:
                got = self._seen[key] = holder_classes(facts, scope, Attr(Attr(Name("self"), parts[1]), "_"))
            return got
        if len(parts) == 1:
            d = _function(facts, scope)
            return tuple(t.rsplit(".", 1)[-1] for n, ts in (d.param_types if d else ()) if n == recv for t in ts)
        return ()


def _function(facts: FileFacts, scope: str) -> Definition | None:
    return next((d for d in facts.definitions if d.qualname == scope and d.kind != "class"), None)


def _is_method(d: Definition) -> bool:
    return d.kind == "method" and d.parent != ""


def _argument(d: Definition, cs: CallSite, param: str, module_call: bool) -> Expr | None:
    """The expression ``cs`` passes for ``param`` of ``d`` (by keyword, else by position), or None."""
    got = next((v for k, v in cs.kwargs if k == param), None)
    if got is not None:
        return got
    position = d.params.index(param) - (1 if _is_method(d) else 0)
    if position < 0 or cs.starred or position >= len(cs.args):
        return None
    return cs.args[position]



def _short(text: str) -> str:
    """An argument as a note shows it: at most 60 characters."""
    return text if len(text) <= 60 else f"{text[:45]}...{text[-12:]}"
