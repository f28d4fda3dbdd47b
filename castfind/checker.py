"""Rules → findings: apply the YAML rules to the casts of one file (the checker never prints).

For each cast: which operand it reads (:class:`~castfind.rules.CastSpec`), whether that operand is
a whole buffer (:mod:`castfind.provenance`), whether it runs once (initialisation, loading, behind a
memo) and, only when a rule asks, whether its function is hot (:mod:`castfind.callgraph`).
The first rule in file order that matches a cast reports it; with ``explain``, the explanation
names the later matching rules it shadows (a user rule overlapping a default one).
"""

from __future__ import annotations

from castfind.callgraph import CallGraph
from castfind.facts import Cast, Const, FileFacts, dotted, render
from castfind.provenance import Origin, Provenance
from castfind.rules import Rule, RuleSet
from castfind.types import Finding


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
    """Does this cast run once? By the structure of the code, never by the words of a test:

    (a) its function (or one it is nested in) is an initialisation/loading function (``once.functions``);
    (b) its result is stored to a location (an attribute, ``setattr``, a cache entry, a global) and a
        test of that same location guards it: an enclosing ``if self._w is None:`` /
        ``if not hasattr(self, "_w"):`` / ``if key not in cache:``, or an early
        ``if cached is not None: return cached`` before it. A dtype test is dispatch, not a memo;
    (c) its own function is memoised by a decorator (``once.decorators``: ``functools.cache`` ...);
    (d) ``self.w = self.w.to(...)`` stores it back over its own operand (``once.store_to_self``).
    """
    names = [p for p in cast.scope.split(".") if p != "<locals>"]
    if any(rules.is_once_function(n) for n in names):
        return True
    if any(rules.is_once_decorator(d) for d in decorators):
        return True
    if cast.stores and any(k in guard.absent for guard in cast.guards for k in cast.stores):
        return True
    # `self.w = self.w.to(...)`: afterwards the buffer has the new dtype and .to() is a no-op.
    return rules.once_store_to_self and cast.assigned_to is not None and cast.assigned_to == operand_path.split("[")[0]


def _decorators(facts: FileFacts, cast: Cast) -> tuple[str, ...]:
    """The decorators of the function the cast is in (not of functions it is nested in: an inner
    function a cached one returns runs on every call)."""
    if not cast.scope:
        return ()
    for d in facts.definitions:
        if d.qualname == cast.scope:
            return d.decorators
    return ()


class Checker:
    """Applies a :class:`RuleSet` to files, sharing provenance and the call graph across them."""

    def __init__(self, rules: RuleSet, provenance: Provenance, graph: CallGraph) -> None:
        self.rules = rules
        self.prov = provenance
        self.graph = graph
        self.explanations: dict[tuple[str, int], list[str]] = {}

    def origin_of(self, facts: FileFacts, cast: Cast) -> Origin | None:
        spec = self.rules.casts.get(cast.method)
        if spec is None:
            return None
        operand = cast.receiver if spec.operand == "receiver" else (cast.args[0] if cast.args else None)
        if operand is None:
            return None
        origin = self.prov.origin(facts, cast.scope, operand, cast.line)
        if origin is None:
            return None
        # The kind's exclusions look at the buffer (its identifiers, the class that holds it), never at
        # the function the cast is in: a weight read in `forward_normal` is still a weight.
        kind = self.rules.buffers[origin.kind]
        if kind.excluded(origin.names, origin.classes):
            return None
        return origin

    def _applicable(self, cast: Cast, origin: Origin, once: bool) -> list[Rule]:
        """The rules, in file order, whose cast, buffer kind and once-ness fit this cast."""
        return [r for r in self.rules.rules if cast.method in r.cast and origin.kind in r.buffers
                and (r.once is None or r.once == once)]

    def needs_hot(self, facts: FileFacts, cast: Cast) -> bool:
        """May judging this cast ask the call graph whether its function is hot?"""
        if not cast.scope or cast.method not in self.rules.cast_methods() or cast_dtype(self.rules, cast) is None:
            return False
        origin = self.origin_of(facts, cast)
        if origin is None:
            return False
        once = is_once(self.rules, cast, origin.path, _decorators(facts, cast))
        return any(r.hot is not None for r in self._applicable(cast, origin, once))

    def check(self, facts: FileFacts, root: str, explain: bool = False) -> list[Finding]:
        out: list[Finding] = []
        methods = self.rules.cast_methods()
        for cast in facts.casts:
            if cast.method not in methods:
                continue
            why: list[str] = []
            dtype = cast_dtype(self.rules, cast)
            origin = self.origin_of(facts, cast) if dtype is not None else None
            if dtype is None:
                why.append(f".{cast.method}() here does not name a dtype: not a dtype cast")
            elif origin is None:
                why.append("its operand is not a whole buffer (a parameter, a gathered or batch-sliced tensor, or a name no rule knows)")
            else:
                f = self._judge(facts, root, cast, origin, dtype, why, explain)
                if f is not None:
                    out.append(f)
            if explain:
                self.explanations[(facts.path, cast.line)] = why
        return out

    def _judge(self, facts: FileFacts, root: str, cast: Cast, origin: Origin, dtype: str, why: list[str],
               explain: bool = False) -> Finding | None:
        """The finding of the first rule that matches; with ``explain``, also name the later ones it shadows."""
        why += [f"provenance: {h}" for h in origin.hops]
        once = is_once(self.rules, cast, origin.path, _decorators(facts, cast))
        why.append("runs once (initialisation, loading or memoised)" if once else "runs on every call")
        hot: tuple[str, ...] | None = None
        hot_known = False
        matched: list[Rule] = []
        win_hot: tuple[str, ...] | None = None  # as known when the first rule matched: the finding's hot path
        for rule in self._applicable(cast, origin, once):
            if rule.hot is not None:
                if not hot_known:
                    hot = self.graph.hot_path((facts.module, cast.scope)) if cast.scope else None
                    hot_known = True
                    why.append(f"hot path: {' -> '.join(hot)}" if hot else "cold: no entry point reaches it")
                if rule.hot != (hot is not None):
                    continue
            if not matched:
                win_hot = hot
            matched.append(rule)
            if not explain:
                break
        if not matched:
            why.append("no rule matches this combination")
            return None
        rule = matched[0]
        why.append(f"matches {rule.id} {rule.name}")
        if len(matched) > 1:
            why.append(f"{rule.id} ({rule.source}:{rule.line}) takes the line, the first matching rule in file order; "
                       "it shadows " + ", ".join(f"{r.id} {r.name} ({r.source}:{r.line})" for r in matched[1:]))
        return self._finding(facts, root, cast, origin, dtype, rule, win_hot or ())

    def _finding(self, facts: FileFacts, root: str, cast: Cast, origin: Origin, dtype: str,
                 rule: Rule, hot: tuple[str, ...]) -> Finding:
        fields = {"expr": cast.text, "buffer": origin.kind, "buffer_path": origin.path, "dtype": dtype,
                  "function": cast.scope or "<module>"}
        try:
            message = rule.message.format(**fields)
        except (KeyError, IndexError, ValueError):
            message = rule.message
        # The weights are policy, so they live in the rule files (buffer kinds' `weight`, `rank.entry_points`).
        score = self.rules.kind_weight(origin.kind) + min(cast.loop_depth, 3)
        if hot:
            score += self.rules.entry_bonus(hot[0])
        return Finding(
            rule=rule.id, name=rule.name, severity=rule.severity, root=root, path=facts.path,
            line=cast.line, end_line=cast.end_line, column=cast.column, function=cast.scope,
            expr=cast.text, message=message, hot_path=hot, provenance=origin.hops, fix=rule.fix,
            module=facts.module, score=score,
        )
