"""The deployment as bindings: which branch tests are true, false or open on one platform with one set of
server flags, and which findings that puts off the deployment's path.

The rule files say how the code spells the deployment (``deployment:``,
:class:`~castfind.core.rules.DeploymentSpec`): per platform the predicates true on it (``is_cuda()``,
``_is_cuda``) and those that may hold only on it (``_use_aiter``), and per server flag the fields that hold
its value (``server_args.attention_backend``). :class:`Deployment` binds them to what the user gave
(``--platform cuda --attention-backend fa3``) and evaluates a branch test's text in three-valued logic:
names, attribute chains, subscripts and calls with no arguments; ``==``, ``!=``, ``in``, ``not in``, ``is
(not) None`` against literals; ``not``, ``and``, ``or``. A test it cannot read is open (``None``), never
false.

:func:`prune` marks a finding off the path (``Finding.off_path``, a reason starting ``branch: ``) when a test
around the cast in its own function is false, or when no path from an entry point is left once the call
edges whose guards are false are closed (:meth:`CallGraph.open_path`: the same reverse search, so another
caller may still reach the cast); a finding that keeps a path gets that path and its conditions.

:func:`steps` gives each finding on the path the steps of the serving loop it runs on (the rule files'
``steps:``): a step is one an entry point reaches the cast on once the entries that run only on other steps are
closed (``forward_extend`` on the decode step), the same reverse search again under its own memo key.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from dataclasses import field as _field
from functools import cache
from typing import TYPE_CHECKING

from castfind.analysis.producers import Producers
from castfind.core.rules import DeploymentSpec, RuleSet
from castfind.core.types import Finding
from castfind.read.facts import Cast, FileFacts, Guard
from castfind.store.index import Index

if TYPE_CHECKING:  # PERF: the call graph (and networkx) is built by the caller, only when a path has a false test
    from castfind.analysis.callgraph import CallGraph, ClosedEdges, Node

#: A test's value under the bindings: true, false, or open (None).
Truth = bool | None
_LITERAL = (str, int, float, bool, type(None))


@cache
def _pattern(text: str) -> re.Pattern[str]:
    """A deployment pattern as a regular expression: ``*`` any text, everything else literal, quotes either way."""
    return re.compile(".*".join(re.escape(part) for part in text.replace('"', "'").split("*")))


def _matches(patterns: Iterable[str], atom: str) -> bool:
    """Does a pattern match all of ``atom`` or the part after one of its dots?"""
    tails = [atom] + [atom[i + 1:] for i, ch in enumerate(atom) if ch == "."]
    return any(_pattern(p).fullmatch(t) for p in patterns for t in tails)


def _atom(node: ast.expr) -> str | None:
    """The text a pattern is matched against: a name, attribute chain or subscript, or a call with no
    arguments (without its ``()``); None for anything else."""
    if isinstance(node, ast.Call) and not node.args and not node.keywords:
        node = node.func
    if isinstance(node, (ast.Name, ast.Attribute, ast.Subscript)):
        return ast.unparse(node)
    return None


def flag_option(flag: str) -> str:
    """``attention_backend`` → ``--attention-backend``."""
    return "--" + flag.replace("_", "-")


@dataclass(frozen=True)
class Deployment:
    """The platform and server flags given (None: not given), bound through the rule files' spellings."""

    spec: DeploymentSpec
    platform: str | None = None
    flags: tuple[tuple[str, str | int], ...] = ()
    #: Where enum members and class constants are produced (None: a comparison with one stays open).
    producers: Producers | None = _field(default=None, compare=False, repr=False)
    #: The keys of ``--model-config`` the spec's ``model_fields`` ask about that it has (None: no config given).
    config: frozenset[str] | None = None

    @property
    def active(self) -> bool:
        """Does anything bind? (No flag: nothing is evaluated and nothing changes.)"""
        return self.platform is not None or bool(self.flags) or (self.config is not None and bool(self.spec.model_fields))

    @property
    def key(self) -> str:
        """What names these bindings in memo keys."""
        return repr((self.platform, self.flags, self.spec, sorted(self.config) if self.config is not None else None))

    def _config_value(self, atom: str) -> tuple[str, bool] | None:
        """(config key, whether the model config has it) when ``atom`` is a field the spec's ``model_fields`` bind."""
        if self.config is None:
            return None
        for key, patterns in self.spec.model_fields:
            if _matches(patterns, atom):
                return key, key in self.config
        return None

    def _platform_truth(self, atom: str) -> tuple[Truth, bool]:
        """(value, known): a platform predicate's value on :attr:`platform`; known False when no platform
        lists the atom or none was given."""
        if self.platform is None:
            return None, False
        listed = [p for p in self.spec.platforms if _matches(p.holds + p.only, atom)]
        if not listed:
            return None, False
        mine = next((p for p in listed if p.name == self.platform), None)
        if mine is None:
            return False, True
        return (True if _matches(mine.holds, atom) else None), True

    def _flag_value(self, atom: str) -> tuple[str, str | int] | None:
        """(flag, value) when ``atom`` is a field that holds a flag that was given."""
        given = dict(self.flags)
        for flag, patterns in self.spec.flags:
            if flag in given and _matches(patterns, atom):
                return flag, given[flag]
        return None

    def evaluate(self, test: str) -> tuple[Truth, tuple[str, ...]]:
        """The value of a branch test's text, and the bindings that decided it (``--platform cuda``)."""
        try:
            tree = ast.parse(test.strip(), mode="eval").body
        except (SyntaxError, ValueError, RecursionError):
            return None, ()
        used: list[str] = []
        got = self._eval(tree, used)
        return got, tuple(dict.fromkeys(used)) if got is not None else ()

    def holds(self, guard: Guard) -> Truth:
        """Does the branch a guard stands for run (its test, flipped on the ``else`` side)?"""
        return self.decide(guard)[0]

    def decide(self, guard: Guard) -> tuple[Truth, tuple[str, ...]]:
        """:meth:`holds`, and the bindings that decided it."""
        got, used = self.evaluate(guard.test)
        return (got if got is None or not guard.negated else not got), used

    def _eval(self, node: ast.expr, used: list[str]) -> Truth:
        if isinstance(node, ast.Constant) and isinstance(node.value, _LITERAL):
            return bool(node.value)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            got = self._eval(node.operand, used)
            return None if got is None else not got
        if isinstance(node, ast.BoolOp):
            values = [self._eval(v, used) for v in node.values]
            stop = isinstance(node.op, ast.Or)  # `or` is decided by a true part, `and` by a false one
            if stop in values:
                return stop
            return None if None in values else not stop
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            return self._compare(node.left, node.ops[0], node.comparators[0], used)
        atom = _atom(node)
        if atom is None:
            return None
        value, known = self._platform_truth(atom)
        if known:
            used.append(f"--platform {self.platform}")
            return value
        bound = self._flag_value(atom)
        if bound is not None:
            used.append(f"{flag_option(bound[0])} {bound[1]}")
            return bool(bound[1])
        fielded = self._config_value(atom)
        if fielded is not None:
            used.append(f"--model-config ({fielded[0]} {'given' if fielded[1] else 'absent'})")
            return fielded[1]
        return None

    def _device(self, left: ast.expr, op: ast.cmpop, right: ast.expr) -> Truth:
        """``x.device.type == "mps"`` (``!=``, ``in``, ``not in``): false (true) when the platform given cannot
        hold a tensor of that device type and some other platform can; open otherwise (``cpu``, or its own)."""
        atom = _atom(left)
        literal = _literal(right)
        if self.platform is None or atom is None or not _matches(self.spec.device_fields, atom):
            return None
        if isinstance(op, (ast.Eq, ast.NotEq)) and isinstance(literal, str):
            names = (literal,)
        elif isinstance(op, (ast.In, ast.NotIn)) and isinstance(literal, (tuple, frozenset)):
            names = tuple(literal)
        else:
            return None
        mine = next(p.devices for p in self.spec.platforms if p.name == self.platform)
        listed = {d for p in self.spec.platforms for d in p.devices}
        if not names or any(n not in listed or n in mine for n in names):
            return None
        return isinstance(op, (ast.NotEq, ast.NotIn))

    def _compare(self, left: ast.expr, op: ast.cmpop, right: ast.expr, used: list[str]) -> Truth:
        """``FIELD op LITERAL`` (or the literal first, for ``==`` and ``!=``) with FIELD bound to a flag, or
        FIELD a tensor's device type (:meth:`_device`)."""
        device = self._device(left, op, right)
        if device is not None:
            used.append(f"--platform {self.platform}")
            return device
        for field, lit, flipped in ((left, right, False), (right, left, True)):
            atom = _atom(field)
            bound = self._flag_value(atom) if atom is not None else None
            literal = _literal(lit)
            if bound is None or literal is _OPEN:
                continue
            if flipped and not isinstance(op, (ast.Eq, ast.NotEq)):
                continue
            value = bound[1]
            got: Truth
            if isinstance(op, (ast.Eq, ast.NotEq)):
                got = value == literal if isinstance(op, ast.Eq) else value != literal
            elif isinstance(op, (ast.In, ast.NotIn)) and isinstance(literal, (tuple, frozenset)):
                got = (value in literal) == isinstance(op, ast.In)
            elif isinstance(op, (ast.Is, ast.IsNot)) and literal is None:
                got = isinstance(op, ast.IsNot)  # a flag that was given holds a value, never None
            else:
                continue
            used.append(f"{flag_option(bound[0])} {value}")
            return got
        return self._member(left, op, right, used)

    def _member(self, left: ast.expr, op: ast.cmpop, right: ast.expr, used: list[str]) -> Truth:
        """``X == Cls.MEMBER`` (``is``, ``in`` a literal of members, and their negations) with anything as X:
        false when no place that produces the member runs under the bindings (:class:`Producers`), open
        otherwise."""
        if self.producers is None:
            return None
        chains: list[str | None]
        if isinstance(op, (ast.Eq, ast.NotEq, ast.Is, ast.IsNot)):
            chains = [next((c for c in (_chain(right), _chain(left)) if c is not None), None)]
        elif isinstance(op, (ast.In, ast.NotIn)) and isinstance(right, (ast.Tuple, ast.List, ast.Set)) and right.elts:
            chains = [_chain(e) for e in right.elts]
        else:
            return None
        why: list[str] = []
        for chain in chains:
            got = self.producers.never(chain, self.decide, self.key) if chain is not None else None
            if got is None:
                return None
            why += got
        used += why
        return isinstance(op, (ast.NotEq, ast.IsNot, ast.NotIn))


_OPEN = object()


def _chain(node: ast.expr) -> str | None:
    """``a.Cls.MEMBER`` as text when ``node`` is a dotted chain of at least two names, else None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or not parts:
        return None
    return ".".join([node.id, *reversed(parts)])


def _literal(node: ast.expr) -> object:
    """A literal string, number or None, or a tuple/list/set of them (as a tuple or frozenset); else ``_OPEN``."""
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _OPEN
    if isinstance(value, _LITERAL):
        return value
    if isinstance(value, (tuple, list, set, frozenset)) and all(isinstance(v, _LITERAL) for v in value):
        return tuple(value) if isinstance(value, (tuple, list)) else frozenset(value)
    return _OPEN


def deployment_of(spec: DeploymentSpec, platform: str | None, config: Mapping[str, object] | None = None,
                  **flags: str | int | None) -> Deployment:
    """The bindings of the flags given (None: not given) and of the model config's keys the spec's
    ``model_fields`` name; ValueError, one line, for a platform the rule files do not name."""
    spec.check_platform(platform)
    keys = frozenset(k for k, _ in spec.model_fields if k in config) if config is not None else None
    return Deployment(spec, platform, tuple((k, v) for k, v in sorted(flags.items()) if v is not None), config=keys)


@dataclass(frozen=True)
class _Closed:
    """The call edges a deployment closes: those with a guard that is false under it."""

    deployment: Deployment
    graph: CallGraph

    @property
    def key(self) -> str:
        return self.deployment.key

    def __call__(self, caller: Node, callee: Node) -> bool:
        _, guards = self.graph.edge_guards(caller, callee)
        return any(self.deployment.holds(g) is False for g in guards)


def _reason(dep: Deployment, tests: Sequence[tuple[str, bool]]) -> str | None:
    """``branch: TEST is false on BINDINGS`` for the first test (text, negated) that is false, else None."""
    for test, negated in tests:
        got, used = dep.evaluate(test)
        if got is not None and got == negated:
            shown = f"not ({test})" if negated else test
            return f"branch: {shown} is false on {', '.join(used)}"
    return None


def prune(found: Sequence[Finding], dep: Deployment, graph: Callable[[], CallGraph],
          facts: Callable[[Finding], FileFacts | None]) -> list[Finding]:
    """``found`` with ``off_path`` set on each finding this deployment's branches never reach, and the path and
    conditions of each that keeps another path updated. ``graph`` builds the call graph (only when a finding's
    path has a false test); ``facts`` gives a finding's file facts (its cast's own guards)."""
    if not dep.active:
        return list(found)
    out: list[Finding] = []
    built: list[CallGraph] = []
    for f in found:
        why = _reason(dep, [(c.test, c.negated) for c in f.conditions])
        if why is None or not f.function:
            out.append(f if why is None else replace(f, off_path=why))
            continue
        ff = facts(f)
        cast = _cast_of(ff, f) if ff is not None else None
        if cast is None:  # its file's facts are gone (edited since): nothing to decide with, it stays on
            out.append(f)
            continue
        mine = _reason(dep, [(g.test, g.negated) for g in cast.guards])
        if mine is not None:
            out.append(replace(f, off_path=mine))
            continue
        if not built:
            built.append(graph())
        out.append(_repath(f, cast, dep, built[0], why))
    return out


def _repath(f: Finding, cast: Cast, dep: Deployment, g: CallGraph, why: str) -> Finding:
    """``f`` with the path left once the deployment's false edges are closed and its conditions, off the path
    (``why``) when none is left, unchanged when the search ran out of budget."""
    from castfind.analysis.callgraph import path_conditions  # PERF: networkx only once a path has a false test

    path, decided = g.open_path((f.module, f.function), _Closed(dep, g))
    if path is None:
        return replace(f, off_path=why) if decided else f
    labels = tuple(f"{m}.{q}" if q else m for m, q in path)
    return replace(f, hot_path=labels, conditions=path_conditions(g, path, f.path, cast.guards))


@dataclass(frozen=True)
class _OffStep:
    """The call edges a search for one step may not take: out of a function that runs only on other steps (an
    entry the rule files' ``steps:`` give to another step), and those ``inner`` closes (a deployment's)."""

    step: str
    rules: RuleSet
    inner: ClosedEdges | None

    @property
    def key(self) -> str:
        return repr(("step", self.step, self.rules.steps, self.inner.key if self.inner is not None else None))

    def __call__(self, caller: Node, callee: Node) -> bool:
        return self.rules.off_step(caller[1], self.step) or (self.inner is not None and self.inner(caller, callee))


def steps(found: Sequence[Finding], rules: RuleSet, dep: Deployment, graph: Callable[[], CallGraph]) -> list[Finding]:
    """``found`` with :attr:`Finding.steps` set on each finding on the path that has a hot path: the steps (rule
    files' ``steps:``) an entry point reaches its cast on. The hot path decides a step when no function on it runs
    only on other steps; otherwise the search runs again with those closed (:class:`_OffStep`, with the
    deployment's false edges). A search that runs out of budget keeps the step (it is not known to be off)."""
    if not rules.steps:
        return list(found)
    built: list[CallGraph] = []
    out: list[Finding] = []
    for f in found:
        if f.off_path or not f.function or not f.hot_path:
            out.append(f)
            continue
        if not built:
            built.append(graph())
        g = built[0]
        node = (f.module, f.function)
        closed = _Closed(dep, g) if dep.active else None
        # PERF: the finding's own path (the engine's, or the one the pruning left), read back into nodes by
        # the modules the index knows; no search unless a function on it runs only on another step.
        path = _nodes(g, f.hot_path)
        on: list[str] = []
        for step, _ in rules.steps:
            if rules.off_step(node[1], step):
                continue
            if path is None or any(rules.off_step(n[1], step) for n in path):
                got, decided = g.open_path(node, _OffStep(step, rules, closed))
                if got is None and decided:
                    continue
            on.append(step)
        out.append(replace(f, steps=tuple(on)))
    return out


def _nodes(g: CallGraph, labels: Sequence[str]) -> tuple[Node, ...] | None:
    """A hot path's labels (``pkg.mod.Cls.method``) as nodes, each split at the longest prefix that is an indexed
    module; None when one is not."""
    out: list[Node] = []
    for label in labels:
        parts = label.split(".")
        cut = next((i for i in range(len(parts), 0, -1) if g.r.modules.file(".".join(parts[:i])) is not None), 0)
        if not cut:
            return None
        out.append((".".join(parts[:cut]), ".".join(parts[cut:])))
    return tuple(out)


def _cast_of(facts: FileFacts, f: Finding) -> Cast | None:
    return next((c for c in facts.casts if (c.line, c.column) == (f.line, f.column)), None)


def facts_reader(index: Index) -> Callable[[Finding], FileFacts | None]:
    """A finding's file facts from the index (None: not indexed)."""

    def read(f: Finding) -> FileFacts | None:
        sf = index.file_for_path(os.path.join(f.root, f.path))
        return index.facts_of(sf) if sf is not None else None

    return read
