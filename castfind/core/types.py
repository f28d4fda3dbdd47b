"""Plain-data records shared by every stage: findings, diagnostics and runtime trace sites.

Everything here is a frozen dataclass with a ``to_dict`` that is the one serialisation
used by the JSON, SARIF and baseline writers (as bandit's ``Issue.as_dict``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal, TypeGuard

from castfind.core.names import shown

Severity = Literal["error", "warning", "info"]
#: What the cost model concluded about a finding beyond its bytes (:class:`Cost`).
CostVerdict = Literal["", "no-op", "tiny", "never", "per-batch"]
#: What kind of input problem a :class:`Diagnostic` reports.
DiagnosticKind = Literal[
    "error",
    "parse-error",  # Python rejects the file (syntax, encoding)
    "unsupported",  # Python accepts it, castfind cannot analyse it (too deep, parser crash)
    "read-error",  # unreadable file or symlink loop
    "too-large",  # over --max-file-size
    "rule-error",
    "trace-error",
    "cache",  # the cache cannot be used or was rebuilt
    "config",
]

SEVERITIES: tuple[Severity, ...] = ("error", "warning", "info")

HopKind = Literal["import", "alias", "call", "return", "def", "star-import", "lazy-import", "base", "module"]


@dataclass(frozen=True, slots=True)
class Hop:
    """One step of a name's resolution chain (:mod:`castfind.analysis.resolve`, shown by ``where``): ``path:line  text``."""

    root: str
    path: str
    line: int
    kind: HopKind
    text: str


def is_severity(text: object) -> TypeGuard[Severity]:
    return text in SEVERITIES

SEVERITY_RANK = {"error": 0, "warning": 1, "info": 2}


@dataclass(frozen=True, slots=True)
class Runtime:
    """Measured cost of one cast site, joined from a runtime trace."""

    calls: int
    shape: tuple[int, ...]
    src_dtype: str
    dst_dtype: str
    bytes_per_call: int
    bytes_total: int
    device: str = ""
    device_time_us: float | None = None
    calls_per_step: float | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["shape"] = list(self.shape)
        if self.device_time_us is None:
            d.pop("device_time_us")
        if self.calls_per_step is None:
            d.pop("calls_per_step")
        return d


@dataclass(frozen=True, slots=True)
class CostCheck:
    """The static cost of a finding held against a trace's measurement of the same cast
    (:func:`castfind.analysis.cost.check`).

    ``status``: ``agrees`` (every axis, dtype and the bytes per call that could be compared are equal),
    ``mismatch`` (one differs: the static model or the code surprised us; ``mismatches`` says which),
    ``unchecked`` (nothing could be compared). ``inferred``: names the static formula left unbound, read
    off the measured shape and dtypes (``num_tokens = 61``); ``bytes_per_call`` the static formula's
    value with them, beside the measured one.
    """

    status: Literal["agrees", "mismatch", "unchecked"]
    mismatches: tuple[str, ...] = ()
    inferred: tuple[tuple[str, str], ...] = ()
    bytes_per_call: float | None = None
    measured_bytes_per_call: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "mismatches": list(self.mismatches),
                "inferred": {n: v for n, v in self.inferred}, "bytes_per_call": self.bytes_per_call,
                "measured_bytes_per_call": self.measured_bytes_per_call}


@dataclass(frozen=True, slots=True)
class Cost:
    """What a flagged cast costs, read from the code that allocated its buffer (:mod:`castfind.analysis.cost`).

    ``shape`` is the buffer's shape as formulas over constructor parameters and configuration names;
    ``bytes_per_call`` is ``numel × (src + dst bytes)`` as a formula, ``per_step`` that times the
    multiplicity (``× layer_num`` for one buffer of a per-layer list); ``value`` the bytes per step once
    every name is bound (``--model-config``, ``--kv-tokens``, ``--set``), else None, and then ``unbound``
    names the formula's names no configuration bound. ``holder``: the class and attribute the allocation
    was read from (``MLAPool.kv_buffer``).

    ``verdict``: ``"no-op"`` when the cast's destination is the dtype the buffer was declared with (the
    finding becomes info), ``"tiny"`` when the buffer is small by construction (an error becomes a
    warning), ``"never"`` when a test of the operand's dtype around the cast is false for the dtype it was
    declared with (an error becomes a warning), ``"per-batch"`` when the operand is a parameter that every call on
    a deployment's path hands a tensor made for that call (an error becomes a warning, left out of the step
    table), ``""`` otherwise; ``note`` says why, or, when the dtypes depend on configuration, under which ones the
    cast is a no-op. On a deployment, dtypes the bound names make equal are a ``"no-op"`` of 0 bytes.
    """

    shape: tuple[str, ...]
    src_dtype: str | None
    dst_dtype: str | None
    bytes_per_call: str
    per_step: str
    value: float | None = None
    holder: str = ""
    declared: str = ""  # where the buffer is allocated: ``mem_cache/memory_pool.py:1412``
    verdict: CostVerdict = ""
    note: str = ""  # why the verdict, or under which dtypes the cast costs (``no-op when dtype == q.dtype``)
    unbound: tuple[str, ...] = ()
    #: Set when a trace measured the same cast (``--trace``): the two held against each other.
    check: CostCheck | None = None
    #: The largest candidate's bytes per step when the operand may be several buffers (a getter several pool
    #: classes define) whose sizes the bound names all give: ``value`` is then the smallest, and the cost a range.
    value_max: float | None = None
    #: The classes and attributes of a range's candidates (``MHAPool.k_buffer``, ``MLAPool.kv_buffer``).
    candidates: tuple[str, ...] = ()
    #: How many times a decode step runs the cast (the per-layer list's count times the loops' trip counts),
    #: evaluated over the bound names; None when a name of it is unbound.
    calls: float | None = None

    def declared_at(self) -> tuple[str, int] | None:
        """:attr:`declared` as ``(path relative to the root, line)``; None when it names no line."""
        path, _, line = self.declared.rpartition(":")
        return (path, int(line)) if path and line.isdigit() else None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "shape": list(self.shape), "src_dtype": self.src_dtype, "dst_dtype": self.dst_dtype,
            "bytes_per_call": self.bytes_per_call, "per_step": self.per_step, "value": self.value,
            "holder": self.holder, "declared": self.declared, "verdict": self.verdict, "note": self.note,
            "unbound": list(self.unbound)}
        if self.check is not None:
            d["check"] = self.check.to_dict()
        if self.value_max is not None:  # a range: only then, so a single number's record keeps its keys
            d["value_max"], d["candidates"] = self.value_max, list(self.candidates)
        if self.calls is not None:
            d["calls_per_step"] = self.calls
        return d

    def is_range(self) -> bool:
        """Several candidate buffers of different sizes: the bytes per step are ``value`` to ``value_max``."""
        return self.value is not None and self.value_max is not None and self.value_max != self.value


@dataclass(frozen=True, slots=True)
class StepRow:
    """One row of the per-step table (:class:`StepTable`): a reported cast with a number, what a decode step
    spends on it (``bytes_max``: the top of a range), its share of the step's total, and what a trace measured
    (``measured_calls`` / ``measured_bytes`` per step; None without a trace, or a trace without step marks).
    ``holder``: the buffer's ``Class.attribute``; a range's candidates joined by `` / ``."""

    rule: str
    severity: Severity
    root: str
    path: str
    line: int
    function: str
    holder: str
    calls: float | None
    bytes: float
    bytes_max: float | None
    share: float
    measured_calls: float | None = None
    measured_bytes: float | None = None
    check: str = ""
    #: The branch tests on the cast's path the deployment leaves open (their text, as ``Condition.text``): the
    #: row runs only when they hold, so it is not in :attr:`StepTable.total` (its share is of the total plus it).
    only_when: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "severity": self.severity, "path": self.path, "line": self.line,
                "function": self.function, "holder": self.holder, "calls_per_step": self.calls,
                "bytes_per_step": self.bytes, "bytes_per_step_max": self.bytes_max, "share": self.share,
                "measured_calls_per_step": self.measured_calls, "measured_bytes_per_step": self.measured_bytes,
                "check": self.check, "only_when": list(self.only_when)}


@dataclass(frozen=True, slots=True)
class StepTable:
    """What one decode step spends on the report's casts, as a profiler's table: a row per finding on that step whose
    cost has a number (most bytes first), the total (``total_max``: the top when a row is a range), and how many
    costed findings have no number (a name of their formula unbound). A row under a branch test the deployment
    leaves open (:attr:`StepRow.only_when`) comes after the rest and is not in the total: ``conditional`` (and
    ``conditional_max``, a range's top) is what those rows add when their tests hold."""

    rows: tuple[StepRow, ...]
    total: float
    total_max: float | None = None
    unnumbered: int = 0
    #: The step of the serving loop the table counts (a finding whose :attr:`Finding.steps` leaves it out is no row).
    step: str = "decode"
    #: The costed findings left out because they run only on other steps: (those steps joined by ``,``, how many).
    elsewhere: tuple[tuple[str, int], ...] = ()
    conditional: float = 0.0
    conditional_max: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"rows": [r.to_dict() for r in self.rows], "total": self.total, "total_max": self.total_max,
                "unnumbered": self.unnumbered, "step": self.step, "elsewhere": dict(self.elsewhere),
                "conditional": self.conditional, "conditional_max": self.conditional_max}


@dataclass(frozen=True, slots=True)
class Condition:
    """One branch test on the way from the entry point to a cast, as written in the code: the cast runs
    only when it holds (``negated``: when it does not — an ``else`` branch, or the rest of a function after
    an early ``if x: return``). ``path`` (relative to its root) and ``line`` are where the ``if`` is:
    around a call on the hot path, or around the cast in its own function."""

    test: str
    negated: bool
    path: str
    line: int

    @property
    def text(self) -> str:
        """The test as it must hold: ``is_hip()``, ``not (self.use_mla)``."""
        return f"not ({self.test})" if self.negated else self.test

    def to_dict(self) -> dict[str, Any]:
        return {"test": self.test, "negated": self.negated, "path": self.path, "line": self.line}


@dataclass(frozen=True, slots=True)
class Guess:
    """A finding that rests on a guess: the call ``caller -> callee`` was resolved by the method's name alone
    (``how`` is ``"by-name"``: its receiver's type is unknown) among ``candidates`` functions of that name.
    ``on`` says what rests on it: the ``hot-path`` (no path without such a call reaches an entry point,
    :meth:`castfind.analysis.callgraph.CallGraph.judged`) or the ``handoff`` of the whole buffer to the cast's
    parameter (no caller hands one through a resolved call)."""

    caller: str
    callee: str
    name: str
    candidates: int
    on: Literal["hot-path", "handoff"] = "hot-path"
    how: str = "by-name"

    @property
    def text(self) -> str:
        """What a finding's message says of it: ``hot path rests on a guess: 3 methods named run``."""
        what = "hot path" if self.on == "hot-path" else "whole-buffer handoff"
        return f"{what} rests on a guess: {self.candidates} methods named {self.name}"

    def to_dict(self) -> dict[str, Any]:
        return {"edge": f"{self.caller} -> {self.callee}", "how": self.how, "candidates": self.candidates,
                "name": self.name, "on": self.on}


@dataclass(frozen=True, slots=True)
class Finding:
    """One flagged cast: where it is, which rule, why, and (with a trace) what it costs."""

    rule: str
    name: str
    severity: Severity
    root: str
    path: str  # relative to ``root``, with forward slashes
    line: int  # first line of the cast call expression (as ``ast`` gives the Call)
    end_line: int
    column: int  # 1-based
    function: str  # ``Class.method`` or ``func``; "" at module level
    expr: str
    message: str
    hot_path: tuple[str, ...] = ()
    provenance: tuple[str, ...] = ()
    fix: str = ""
    runtime: Runtime | None = None
    module: str = ""  # dotted module name, used to match runtime traces and fingerprints
    score: float = 0.0  # static badness (buffer kind, loop depth, decode path): ranks within a severity
    cost: Cost | None = None  # read from the allocation of its buffer (castfind.analysis.cost), after the engine
    #: The branch tests between the entry point and the cast, outermost first: those around each call on
    #: the hot path, then those around the cast in its function (:class:`Condition`).
    conditions: tuple[Condition, ...] = ()
    #: Set when the only hot path goes through a by-name guess with several candidates (:class:`Guess`):
    #: the finding is then a warning, whatever its rule's severity.
    guess: Guess | None = None
    #: Why the finding is off the deployment's path ("" when on it, or when no deployment was given): a branch
    #: the deployment never takes (``branch: ...``) or a class the model never runs (``model: ...``).
    off_path: str = ""
    #: The steps of the serving loop the cast runs on (``("decode",)``, ``("decode", "extend")``), in the order the
    #: rule files' ``steps:`` name them; empty when not asked (a scan that describes no deployment) or not known.
    steps: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "name": self.name,
            "severity": self.severity,
            "root": self.root,
            "path": self.path,
            "line": self.line,
            "end_line": self.end_line,
            "column": self.column,
            "function": self.function,
            "expr": self.expr,
            "message": self.message,
            "hot_path": list(self.hot_path),
            "provenance": list(self.provenance),
            "fix": self.fix,
            "runtime": self.runtime.to_dict() if self.runtime else None,
            "cost": self.cost.to_dict() if self.cost else None,
            "conditions": [c.to_dict() for c in self.conditions],
            "guess": self.guess.to_dict() if self.guess else None,
            "off_path": self.off_path,
            # Only on a deployment scan: a scan without deployment flags writes the records it always wrote.
            **({"steps": list(self.steps)} if self.steps else {}),
        }

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.column}: {self.rule} {self.severity} {self.message}"


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """A problem with the input (unparsable file, bad rule, unreadable trace): reported, never fatal."""

    path: str
    line: int
    message: str
    kind: DiagnosticKind = "error"

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "line": self.line, "kind": self.kind, "message": self.message}

    def __str__(self) -> str:
        # Line 0: about the whole file (or flag) named by ``path``, not one of its lines.
        # Shown escaped: one diagnostic is one line, whatever its file is called.
        path, message = shown(self.path), shown(self.message)
        return f"{path}:{self.line}: {message}" if self.line else f"{path}: {message}"


@dataclass(frozen=True, slots=True)
class TraceSite:
    """One aggregated runtime cast record of a ``.castfind.jsonl`` trace.

    Keyed by (path, line, op, src_dtype, dst_dtype, shape, device); ``calls`` counts them.
    """

    path: str
    line: int
    function: str
    op: str
    src_dtype: str
    dst_dtype: str
    shape: tuple[int, ...]
    device: str
    calls: int
    bytes_per_call: int
    device_time_us: float | None = None
    steps: int | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "path": self.path,
            "line": self.line,
            "function": self.function,
            "op": self.op,
            "src_dtype": self.src_dtype,
            "dst_dtype": self.dst_dtype,
            "shape": list(self.shape),
            "device": self.device,
            "calls": self.calls,
            "bytes_per_call": self.bytes_per_call,
        }
        if self.device_time_us is not None:
            d["device_time_us"] = self.device_time_us
        if self.steps is not None:
            d["steps"] = self.steps
        return d
