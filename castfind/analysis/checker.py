"""Rules → findings: apply the YAML rules to the casts of one file (the checker never prints).

For each cast: which operand it reads (:class:`~castfind.core.rules.CastSpec`), whether that operand is
a whole buffer (:mod:`castfind.analysis.provenance`), whether it runs once (initialisation, loading, behind a
memo) and, only when a rule asks, whether its function is hot (:mod:`castfind.analysis.callgraph`).
The first rule in file order that matches a cast reports it; with ``explain``, the explanation
names the later matching rules it shadows (a user rule overlapping a default one).

With ``explain`` the checker also keeps one :class:`Explanation` per cast, keyed ``(path, line, column)``:
the provenance hops, the :class:`~castfind.analysis.provenance.Stop` where the proof that it is a whole buffer
ended (the walk's, or ``excluded`` by the kind's ``exclude``), what made it run once, the hot path or
the ``cold`` stop, and the rule that matched. :func:`tally_stops` counts the stops of the buffer-like
casts (``castfind scan --stops``).
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from castfind.analysis.callgraph import CallGraph, Node, label, path_conditions
from castfind.analysis.provenance import (
    MAX_CALLS,
    STOP_REASONS,
    Origin,
    Provenance,
    Stop,
    StopReason,
    buffer_names,
    once_function,
)
from castfind.core.rules import Rule, RuleSet, identifier_tokens
from castfind.core.types import Condition, Finding, Guess
from castfind.read.facts import Cast, Const, Expr, FileFacts, Other, dotted, render


def cast_dtype(rules: RuleSet, cast: Cast) -> str | None:
    """The dtype the cast produces, as text; None when the call does not change dtype (``.to(device)``)."""
    spec = rules.casts.get(cast.method)
    if spec is None:
        return None
    if spec.dtype is not None:
        return spec.dtype
    for k, v in cast.kwargs:
        if k == "dtype":
            return render(v)
    for a in cast.args:
        text = dotted(a) or (a.text if isinstance(a, Const) else None)
        if text is not None and rules.is_dtype_arg(text):
            return text
    return None


def is_once(rules: RuleSet, cast: Cast, operand_path: str, decorators: tuple[str, ...] = ()) -> bool:
    """Does this cast run once? (:func:`once_reason` says why.)"""
    return once_reason(rules, cast, operand_path, decorators) is not None


def once_reason(rules: RuleSet, cast: Cast, operand_path: str, decorators: tuple[str, ...] = ()) -> str | None:
    """What makes this cast run once (None: it runs on every call). By the structure of the code, never
    by the words of a test:

    (a) its function (or one it is nested in) is an initialisation/loading function (``once.functions``);
    (b) its result is stored to a location (an attribute, ``setattr``, a cache entry, a global) and a
        test of that same location guards it: an enclosing ``if self._w is None:`` /
        ``if not hasattr(self, "_w"):`` / ``if key not in cache:``, or an early
        ``if cached is not None: return cached`` before it. A dtype test is dispatch, not a memo;
    (c) its own function is memoised by a decorator (``once.decorators``: ``functools.cache`` ...);
    (d) ``self.w = self.w.to(...)`` stores it back over its own operand (``once.store_to_self``).
    """
    n = once_function(rules, cast.scope)
    if n is not None:
        return f"function {n} is an initialisation or loading function (once.functions)"
    for d in decorators:
        if rules.is_once_decorator(d):
            return f"its function is memoised by @{d} (once.decorators)"
    for guard in cast.guards:
        for k in cast.stores:
            if k in guard.absent:
                how = "an early return or else branch of" if guard.negated else "the guard"
                return f"its result is stored to {k} and {how} `if {guard.test}` tests that {k} is unset (a memo)"
    # `self.w = self.w.to(...)`: afterwards the buffer has the new dtype and .to() is a no-op.
    if rules.once_store_to_self and cast.assigned_to is not None and cast.assigned_to == operand_path.split("[")[0]:
        return f"it is stored back over its own operand {cast.assigned_to} (once.store_to_self)"
    return None


#: A test that reads a tensor's or a setting's dtype (or its element size): the branch is dtype dispatch.
_DTYPE_TEST = re.compile(r"dtype|element_size|itemsize|float8|fp8|fp4|int8|bfloat16|float16|float32|is_floating_point")


def dispatch_condition(cast: Cast) -> str | None:
    """The dtype test that decides whether this cast runs (innermost first), as "when ...": a cast under
    ``if self.kv_cache_dtype == fp8:`` runs on every call *when the cache is fp8* — dispatch, not a memo."""
    for guard in reversed(cast.guards):
        if _DTYPE_TEST.search(guard.test):
            return f"when not ({guard.test})" if guard.negated else f"when {guard.test}"
    return None


def _decorators(facts: FileFacts, cast: Cast) -> tuple[str, ...]:
    """The decorators of the function the cast is in (not of functions it is nested in: an inner
    function a cached one returns runs on every call)."""
    if not cast.scope:
        return ()
    for d in facts.definitions:
        if d.qualname == cast.scope:
            return d.decorators
    return ()


@dataclass(frozen=True, slots=True)
class Explanation:
    """Why one cast was or was not flagged, as data (``--explain`` renders ``why``, ``--stops`` counts ``stop``).

    ``hops``: the provenance walk (to the buffer, or to the stop). ``stop``: where the proof that the
    operand is a whole buffer ended (None when it is one); ``buffer``: its kind when it is one. ``once``:
    what made it run once (a once function, decorator, memo guard or store back). ``hot``: the hot path
    when a rule asked and one was found; ``cold``: the stop when a rule asked and none was. ``rule``: the
    rule that reports it (None: none matched). ``buffer_like``: see :func:`is_buffer_like`. ``why``: the
    whole account as lines, in order.
    """

    path: str
    line: int
    column: int
    expr: str
    function: str
    dtype: str | None
    operand: str
    hops: tuple[str, ...]
    stop: Stop | None
    buffer: str | None
    once: str | None
    hot: tuple[str, ...] | None
    cold: Stop | None
    rule: str | None
    buffer_like: bool
    why: tuple[str, ...]
    #: The cast's last line (a call written over several lines); 0: its first line.
    end_line: int = 0

    def covers(self, line: int) -> bool:
        """Whether ``line`` is one of the cast's lines."""
        return self.line <= line <= max(self.end_line, self.line)

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.path, self.line, self.column)


def buffer_tokens(rules: RuleSet) -> frozenset[str]:
    """The identifier tokens of every buffer kind's getter and attribute names, but ``get`` (the verb of
    every getter), numbers and single letters: ``kv``, ``buffer``, ``cache``, ``state``, ``weight`` ..."""
    out = {t for k in rules.buffers.values() for n in (*k.getters, *k.attributes) for t in identifier_tokens(n)}
    return frozenset(t for t in out if len(t) > 1 and not t.isdigit() and t != "get")


def is_buffer_like(operand: Expr, tokens: frozenset[str], walked: int) -> bool:
    """Is a cast's operand *buffer-like* (what ``--stops`` counts)? Its identifiers (names and attributes of
    the operand expression, a call's function, a subscript's value; not arguments or indices) hold one of
    ``tokens`` (:func:`buffer_tokens`), or the provenance walk passed at least one hop (``walked``)."""
    if walked > 0:
        return True
    names = operand.names if isinstance(operand, Other) else buffer_names(operand)
    return any(t in tokens for n in names for t in identifier_tokens(n))


class Checker:
    """Applies a :class:`RuleSet` to files, sharing provenance and the call graph across them."""

    def __init__(self, rules: RuleSet, provenance: Provenance, graph: CallGraph) -> None:
        self.rules = rules
        self.prov = provenance
        self.graph = graph
        self.explanations: dict[tuple[str, int, int], Explanation] = {}
        self._tokens = buffer_tokens(rules)

    def operand_of(self, cast: Cast) -> Expr | None:
        """The expression the cast reads (its receiver or its first argument, as the cast table says)."""
        spec = self.rules.casts.get(cast.method)
        if spec is None:
            return None
        return cast.receiver if spec.operand == "receiver" else (cast.args[0] if cast.args else None)

    def origin_of(self, facts: FileFacts, cast: Cast) -> Origin | None:
        got = self.origin_or_stop(facts, cast)
        return got if isinstance(got, Origin) else None

    def origin_or_stop(self, facts: FileFacts, cast: Cast) -> Origin | Stop:
        """The whole buffer the cast reads, or where the proof stopped (``excluded`` included)."""
        operand = self.operand_of(cast)
        if operand is None:
            return Stop("other", f".{cast.method}() here has no operand to follow")
        got = self.prov.origin_or_stop(facts, cast.scope, operand, cast.line)
        if isinstance(got, Stop):
            return got
        # The kind's exclusions look at the buffer (its identifiers, the class that holds it), never at
        # the function the cast is in: a weight read in `forward_normal` is still a weight.
        kind = self.rules.buffers[got.kind]
        if kind.excluded(got.names, got.classes):
            why = kind.exclusion(got.names, got.classes) or "excluded"
            return Stop("excluded", f"{got.path} is a {got.kind} buffer, but {why}", got.hops, got.trail)
        return got

    def _applicable(self, cast: Cast, origin: Origin, once: bool) -> list[Rule]:
        """The rules, in file order, whose cast, buffer kind and once-ness fit this cast."""
        return [r for r in self.rules.rules if cast.method in r.cast and origin.kind in r.buffers
                and (r.once is None or r.once == once)]

    def needs_hot(self, facts: FileFacts, cast: Cast) -> bool:
        """May judging this cast ask the call graph whether its function is hot?"""
        return bool(self.hot_starts(facts, cast))

    def hot_starts(self, facts: FileFacts, cast: Cast) -> list[Node]:
        """The functions whose hot paths judging this cast may ask for: its own function, or, when the
        whole buffer comes in through its parameter, the callers that hand it one and run per step
        (through their own parameters, up to :data:`~castfind.analysis.provenance.MAX_CALLS` calls out)."""
        if not cast.scope or cast.method not in self.rules.cast_methods() or cast_dtype(self.rules, cast) is None:
            return []
        origin = self.origin_of(facts, cast)
        if origin is None:
            return []
        passing = self._passing(facts, cast, origin)
        once = self._once(facts, cast, origin, passing) is not None
        if passing is None:
            asks = any(r.hot is not None for r in self._applicable(cast, origin, once))
            return [(facts.module, cast.scope)] if asks else []
        # The buffer kind that decides the rules is the one the chosen caller hands: any rule may ask.
        if not any(r.hot is not None and cast.method in r.cast and (r.once is None or r.once == once)
                   for r in self.rules.rules):
            return []
        return list(dict.fromkeys(leaf for leaf, _, _ in self._leaves(passing[0], passing[1])))

    def _passing(self, facts: FileFacts, cast: Cast, origin: Origin) -> tuple[Node, str] | None:
        """When the whole buffer comes in through a parameter of the cast's own function: that function
        and the parameter (the callers that hand it a whole buffer decide hot and once). Not for an
        entry point: the framework runs it per step with arguments castfind does not see."""
        e = origin.entry
        across = self.prov.across
        if e is None or across is None or (e[0], e[1]) != (facts.module, cast.scope) or self.rules.is_entry(e[1]):
            return None  # an entry point runs per step whoever calls it: its own hot path decides
        return ((e[0], e[1]), e[2]) if across.callers_passing((e[0], e[1]), e[2]) else None

    def _once(self, facts: FileFacts, cast: Cast, origin: Origin, passing: tuple[Node, str] | None) -> str | None:
        """What makes the cast run once (:func:`once_reason`), or, for a buffer that comes in through a
        parameter, that only once-functions (a loader, ``__init__``) hand it a whole one."""
        why = once_reason(self.rules, cast, origin.path, _decorators(facts, cast))
        if why is not None or passing is None:
            return why
        return self._only_once(passing[0], passing[1])

    def _only_once(self, node: Node, param: str) -> str | None:
        """Why every caller that hands ``param`` of ``node`` a whole buffer runs once (no caller that runs
        per step hands one, :meth:`_leaves`), or None when one does."""
        if next(self._leaves(node, param), None) is not None:
            return None
        across = self.prov.across
        assert across is not None
        callers = across.callers_passing(node, param)
        first = callers[0]
        who = label(first) + (f" (and {len(callers) - 1} more)" if len(callers) > 1 else "")
        part = once_function(self.rules, first[1])
        what = f"{part} is an initialisation or loading function" if part else "it is handed one only by such functions"
        return f"only {who} hands it a whole buffer for {param}, and {what} (once.functions)"

    def _inner_entry(self, node: Node, param: str, caller: Node, depth: int) -> tuple[Node, str] | None:
        """When ``caller`` hands ``param`` of ``node`` a buffer that came in through its own parameter
        (and one more call out is allowed): that caller and parameter."""
        across = self.prov.across
        assert across is not None
        if depth + 1 >= MAX_CALLS or self.rules.is_entry(caller[1]):
            return None  # an entry point runs per step whoever hands it the buffer
        via = across.via(node, param, caller)
        e = via.entry if via is not None else None
        if e is None or (e[0], e[1]) != caller or not across.callers_passing(caller, e[2]):
            return None
        return caller, e[2]

    def _leaves(self, node: Node, param: str, depth: int = 0) -> Iterator[tuple[Node, Origin | None, tuple[Node, ...]]]:
        """The callers that run per step (no once-function) and hand ``param`` of ``node`` a whole buffer,
        in order, each with the buffer as it reaches ``node`` (hops from that call on; None when it cannot
        be walked again) and the functions from there to ``node``. A caller that got the buffer through its
        own parameter is replaced by its own such callers (a helper that ``forward`` hands a per-batch
        tensor and a loader the whole weight has none). The one walk behind once, hot and the prefetch."""
        across = self.prov.across
        assert across is not None
        for c in across.callers_passing(node, param):
            if once_function(self.rules, c[1]) is not None:
                continue
            via = across.via(node, param, c)
            inner = self._inner_entry(node, param, c, depth)
            if inner is None or via is None or via.entry is None:
                yield c, via, (node,)
                continue
            cut = via.entry[3]
            for leaf, outer, between in self._leaves(inner[0], inner[1], depth + 1):
                got = None if outer is None else Origin(outer.kind, outer.path, (*via.hops[:cut], *outer.hops),
                                                        outer.names, outer.classes)
                yield leaf, got, (*between, node)

    def _reach(self, node: Node, param: str) -> tuple[tuple[Node, ...], Origin, Guess | None] | None:
        """A hot path into ``node`` through a caller that hands ``param`` a whole buffer and runs per step
        (:meth:`_leaves`, the first reached from an entry point whose buffer the kind does not exclude;
        one whose hot path rests on no guess first, :meth:`CallGraph.judged`), the buffer it hands (hops
        from that call on) and the guess the path rests on, or None."""
        guessed: tuple[tuple[Node, ...], Origin, Guess | None] | None = None
        for leaf, via, between in self._leaves(node, param):
            if via is None or self.rules.buffers[via.kind].excluded(via.names, via.classes):
                continue
            hot, guess = self.graph.judged(leaf)
            if hot and guess is None:
                guess = self._handoff_guess((leaf, *between))
            if hot and guess is None:
                return (*hot, *between), via, None
            if hot and guessed is None:
                guessed = (*hot, *between), via, guess
        return guessed

    def _handoff_guess(self, chain: tuple[Node, ...]) -> Guess | None:
        """The first handoff on ``chain`` (caller, callee, ...) that reaches its callee by name alone among
        several functions (:meth:`~castfind.analysis.summaries.Summaries.guessed`), or None."""
        across = self.prov.across
        assert across is not None
        for a, b in itertools.pairwise(chain):
            n = across.guessed(a, b)
            if n:
                return Guess(label(a), label(b), b[1].rsplit(".", 1)[-1], n, on="handoff")
        return None

    def _hot(self, facts: FileFacts, cast: Cast, origin: Origin, passing: tuple[Node, str] | None
             ) -> tuple[tuple[Node, ...] | None, Origin, Stop | None, Guess | None]:
        """The hot path, the origin it goes with, the stop when there is none, and the by-name guess the
        path rests on when no path without one exists (:meth:`CallGraph.judged`).

        A buffer read in the cast's function is hot when the function is. One that comes in through a
        parameter is whole only when a caller that hands it a whole buffer runs the function, so the
        path must go through such a caller (:meth:`_reach`), and the provenance is the one that caller's
        call gives (its buffer kind decides the rules).
        """
        if passing is None:
            hot, guess = self.graph.judged((facts.module, cast.scope)) if cast.scope else (None, None)
            where = f"{facts.module}.{cast.scope}" if cast.scope else f"module level of {facts.module}"
            return hot, origin, None if hot else Stop("cold", f"no entry point reaches {where}"), guess
        node, param = passing
        got = self._reach(node, param)
        if got is not None:
            path, via, guess = got
            assert origin.entry is not None
            return path, Origin(via.kind, via.path, (*origin.hops[:origin.entry[3]], *via.hops), via.names,
                                via.classes, origin.entry, origin.trail), None, guess
        return None, origin, Stop("cold", f"no entry point reaches a caller that hands {label(node)} a whole buffer "
                                  f"for {param} and runs per step"), None

    def check(self, facts: FileFacts, root: str, explain: bool = False) -> list[Finding]:
        """The findings of one file; with ``explain``, an :class:`Explanation` of each cast in :attr:`explanations`."""
        out: list[Finding] = []
        methods = self.rules.cast_methods()
        for cast in facts.casts:
            if cast.method not in methods:
                continue
            why: list[str] = []
            dtype = cast_dtype(self.rules, cast)
            got = self.origin_or_stop(facts, cast) if dtype is not None else None
            verdict = _Verdict()
            if dtype is None:
                why.append(f".{cast.method}() here does not name a dtype: not a dtype cast")
            elif isinstance(got, Stop):
                why += [f"provenance: {h}" for h in got.hops]
                if got.reason == "excluded":
                    why.append(f"not a whole buffer the rules flag: excluded: {got.detail}")
                else:
                    why.append(f"not a whole buffer: provenance stopped at {got.reason}: {got.detail}")
            elif got is not None:
                f, verdict = self._judge(facts, root, cast, got, dtype, why, explain)
                if f is not None:
                    out.append(f)
            if explain:
                self._explain(facts, cast, dtype, got, verdict, why)
        return out

    def _explain(self, facts: FileFacts, cast: Cast, dtype: str | None, got: Origin | Stop | None, verdict: _Verdict,
                 why: list[str]) -> None:
        operand = self.operand_of(cast)
        hops = verdict.hops if verdict.hops is not None else got.hops if got is not None else ()
        stop = got if isinstance(got, Stop) else None
        e = Explanation(
            path=facts.path, line=cast.line, column=cast.column, expr=cast.text, function=cast.scope or "<module>",
            dtype=dtype, operand=render(operand), hops=hops, stop=stop,
            buffer=got.kind if isinstance(got, Origin) else None, once=verdict.once, hot=verdict.hot,
            cold=verdict.cold, rule=verdict.rule,
            buffer_like=operand is not None and (isinstance(got, Origin) or is_buffer_like(operand, self._tokens, len(hops))),
            why=tuple(why), end_line=cast.end_line,
        )
        self.explanations[e.key] = e

    def _judge(self, facts: FileFacts, root: str, cast: Cast, origin: Origin, dtype: str, why: list[str],
               explain: bool = False) -> tuple[Finding | None, _Verdict]:
        """The finding of the first rule that matches; with ``explain``, also name the later ones it shadows."""
        why += [f"provenance: {h}" for h in origin.hops]
        passing = self._passing(facts, cast, origin)
        once_why = self._once(facts, cast, origin, passing)
        once = once_why is not None
        why.append(f"runs once: {once_why}" if once_why else
                   "runs on every call (no once function, memo decorator, memo guard or store back)")
        hot: tuple[str, ...] | None = None
        nodes: tuple[Node, ...] | None = None
        cold: Stop | None = None
        guess: Guess | None = None
        hot_known = False

        def settle() -> None:
            nonlocal hot, nodes, cold, hot_known, origin, guess
            nodes, through, cold, guess = self._hot(facts, cast, origin, passing)
            hot = tuple(label(n) for n in nodes) if nodes else None
            hot_known = True
            if through.hops != origin.hops:
                assert origin.entry is not None
                why.extend(f"provenance through that caller: {h}" for h in through.hops[origin.entry[3]:])
                origin = through
            if hot:
                why.append(f"hot path: {' -> '.join(hot)}")
                if guess is not None:
                    why.append(f"{guess.text}: {guess.caller} -> {guess.callee} is resolved by name alone, and no "
                               "path without such a guess reaches an entry point")
            elif cold is not None:
                why.append(f"cold: {cold.detail}")

        if passing is not None and not once:
            settle()  # the caller that runs it decides the buffer, so its kind decides the rules
        matched: list[Rule] = []
        win_hot: tuple[str, ...] | None = None  # as known when the first rule matched: the finding's hot path
        win_nodes: tuple[Node, ...] | None = None
        win_guess: Guess | None = None
        for rule in self._applicable(cast, origin, once):
            if rule.hot is not None:
                if not hot_known:
                    settle()
                if rule.hot != (hot is not None):
                    continue
            if not matched:
                win_hot, win_nodes = hot, nodes
                win_guess = guess if rule.hot else None
            matched.append(rule)
            if not explain:
                break
        verdict = _Verdict(once_why, hot or None, cold, matched[0].id if matched else None, origin.hops)
        if not matched:
            why.append("no rule matches this combination (its buffer kind, once-ness and hot path)")
            return None, verdict
        rule = matched[0]
        why.append(f"matches {rule.id} {rule.name}")
        if len(matched) > 1:
            why.append(f"{rule.id} ({rule.source}:{rule.line}) takes the line, the first matching rule in file order; "
                       "it shadows " + ", ".join(f"{r.id} {r.name} ({r.source}:{r.line})" for r in matched[1:]))
        return self._finding(facts, root, cast, origin, dtype, rule, win_hot or (), win_nodes or (), win_guess), verdict

    def _finding(self, facts: FileFacts, root: str, cast: Cast, origin: Origin, dtype: str,
                 rule: Rule, hot: tuple[str, ...], nodes: tuple[Node, ...] = (), guess: Guess | None = None) -> Finding:
        """The finding of ``rule`` on this cast. A hot path that rests on a by-name guess (``guess``) makes an
        error a warning, and its message says so."""
        fields = {"expr": cast.text, "buffer": origin.kind, "buffer_path": origin.path, "dtype": dtype,
                  "function": cast.scope or "<module>"}
        try:
            message = rule.message.format(**fields)
        except (KeyError, IndexError, ValueError):
            message = rule.message
        condition = dispatch_condition(cast)
        if condition is not None:
            message += f" (only {condition})"
        if guess is not None:
            message += f" ({guess.text})"
        # The weights are policy, so they live in the rule files (buffer kinds' `weight`, `rank.entry_points`).
        score = self.rules.kind_weight(origin.kind) + min(cast.loop_depth, 3)
        if hot:
            score += self.rules.entry_bonus(hot[0])
        return Finding(
            rule=rule.id, name=rule.name, severity="warning" if guess and rule.severity == "error" else rule.severity,
            root=root, path=facts.path,
            line=cast.line, end_line=cast.end_line, column=cast.column, function=cast.scope,
            expr=cast.text, message=message, hot_path=hot, provenance=origin.hops, fix=rule.fix,
            module=facts.module, score=score, conditions=self.conditions(facts, cast, nodes), guess=guess,
        )

    def conditions(self, facts: FileFacts, cast: Cast, path: tuple[Node, ...]) -> tuple[Condition, ...]:
        """The branch tests between the entry point and the cast along the hot path ``path``
        (:func:`~castfind.analysis.callgraph.path_conditions`)."""
        return path_conditions(self.graph, path, facts.path, cast.guards)


@dataclass(frozen=True, slots=True)
class _Verdict:
    """What :meth:`Checker._judge` learnt beyond the finding: the once reason, the hot path or the cold
    stop (when a rule asked), the rule that matched."""

    once: str | None = None
    hot: tuple[str, ...] | None = None
    cold: Stop | None = None
    rule: str | None = None
    #: The provenance judged: through the caller on the hot path when a parameter's callers decided it.
    hops: tuple[str, ...] | None = None


# --------------------------------------------------------------------------- --stops


@dataclass(frozen=True, slots=True)
class StopRow:
    """One stop reason: how many buffer-like casts stopped there, and the files with most (path, count)."""

    reason: StopReason
    count: int
    files: tuple[tuple[str, int], ...]

    def to_dict(self) -> dict[str, Any]:
        return {"reason": self.reason, "count": self.count,
                "files": [{"path": p, "count": n} for p, n in self.files]}


@dataclass(frozen=True, slots=True)
class StopTable:
    """``castfind scan --stops``: over the dtype casts examined (a cast method a rule names, naming a dtype,
    in a candidate file), those with a buffer-like operand; each counted once, at its provenance stop (or
    ``excluded``), else at its ``cold`` stop; ``whole`` of them reached a whole buffer."""

    examined: int
    buffer_like: int
    whole: int
    rows: tuple[StopRow, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"examined": self.examined, "buffer_like": self.buffer_like, "whole": self.whole,
                "stops": [r.to_dict() for r in self.rows]}


def cast_stop(e: Explanation) -> Stop | None:
    """The stop a cast is counted at: provenance's (or ``excluded``), else ``cold``."""
    return e.stop if e.stop is not None else e.cold


def tally_stops(explanations: Iterable[Explanation] | Mapping[Any, Explanation], top: int = 5) -> StopTable:
    """Count the stops of the buffer-like dtype casts among ``explanations``, per reason (in
    :data:`~castfind.analysis.provenance.STOP_REASONS` order; reasons with no cast left out), with the ``top``
    files of each (most first, then by path)."""
    items = list(explanations.values()) if isinstance(explanations, Mapping) else list(explanations)
    examined = [e for e in items if e.dtype is not None]
    like = [e for e in examined if e.buffer_like]
    per: dict[StopReason, Counter[str]] = {}
    for e in like:
        stop = cast_stop(e)
        if stop is not None:
            per.setdefault(stop.reason, Counter())[e.path] += 1
    rows = tuple(
        StopRow(r, sum(per[r].values()), tuple(sorted(per[r].items(), key=lambda kv: (-kv[1], kv[0]))[:top]))
        for r in STOP_REASONS if r in per)
    return StopTable(len(examined), len(like), sum(e.buffer is not None for e in like), rows)
