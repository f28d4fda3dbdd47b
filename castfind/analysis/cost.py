"""Cost: what a flagged cast moves per decode step, read from the code that allocated its buffer.

Runs after the engine, on findings only (a few hundred at most), never per cast candidate:

1. **The operand's buffer.** Cost does not walk: it reads provenance's walk back from the cast's receiver
   (:meth:`~castfind.analysis.provenance.Provenance.origin_or_stop`, the walk the finding was raised on; its
   :class:`~castfind.analysis.provenance.Trail`: the steps taken and the expression it ended at). Read with cost's
   stricter rules (:meth:`castfind.analysis.getters.Holders.read`: local names, views, ``.view(dtype)`` remembered, an index whose
   first element is no slice, at most 16 steps; an unpacked element, a loop variable or a parameter: no cost), it
   ends at ``self.X`` (the holder is the method's class, or the classes ``self.h`` is built
   from for ``self.h.X``) or at a getter call ``recv.get_key_buffer(i)``. A getter (:mod:`castfind.analysis.getters`,
   the one getter inference: :meth:`~castfind.analysis.getters.Holders.handed_out`) is every method of that
   name whose returns (provenance's walk of each, :meth:`~castfind.analysis.provenance.Provenance.returns_of`, read the
   same way) end at ``self.X[...]`` of its class (directly or through ``self.m(...)``) and agree on
   one ``X`` (a return that ends elsewhere, a dequantized copy, is not the buffer); when several classes have one, those
   whose name shares a word with the finding's path come first (``flashinfer_mla_backend`` → ``MLAPool``),
   then a base class over its subclasses; still several and the cost is unknown.
2. **The allocation.** ``self.X = torch.zeros(shape, dtype=...)`` in that class or a base
   (:class:`~castfind.read.facts.Allocation`), and each ``self.a`` in the shape replaced by the expression
   ``__init__`` set it to (in a base class too; of several assignments under ``if``s, the one whose test
   holds with the bound names, else the unconditional one). Each ``(class, attribute)`` is resolved once
   per run, at most :data:`MAX_DEPTH` levels deep and :data:`MAX_TEXT` characters long (past either: the
   name stays as it is, unknown), so no chain of conditional expressions can blow up.
3. **The formula.** ``bytes_per_call = numel × (src + dst bytes)``; ``per_step`` multiplies by ``N`` when the
   operand is one buffer of a per-layer list ``[... for _ in range(N)]`` (the stated rule: a decode step
   runs every layer once), and by the trip count of each ``for ... in range(M)`` around the cast in its
   function (a loop over layers or experts runs the cast ``M`` times per call). When a loop variable picks
   the buffer (``get_key_buffer(i)`` under ``for i in range(...)``), the loop walks the list: its trip count
   replaces ``N``. Module-level numeric constants in a shape are replaced by their values. ``value`` is
   ``per_step`` evaluated by a small evaluator over the bound names (numbers, + - * // / %, min/max,
   comparisons, ``and``/``or``/``not``, conditional expressions, ``getattr(config, "field", default)``,
   ``torch.get_default_dtype()``; anything else is unknown), or None.
4. **The verdict** (:func:`judged` applies it to the finding; :class:`~castfind.core.types.Cost` carries it):

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
     dimension names that are small by what they count (``*kernel*`` taps, ``*_mult`` copies) are data in the
     rules' ``cost.tiny``, not code.

   * **never** (an error becomes a warning): a test around the cast on its own operand's dtype
     (``if w.dtype != torch.bfloat16:``, or the rest of a block after ``if w.dtype == torch.bfloat16: return``;
     :mod:`castfind.analysis.operand_guards`) is false for the literal dtype the operand was declared with:
     the cast never runs there. The note names the test and the declared dtype. A test castfind cannot read
     (the device, another variable, another tensor's dtype) decides nothing.

   A finding whose allocation is not found has no cost and keeps its severity: nothing is downgraded
   on a guess.

Names are bound from configuration (:class:`Bindings`, built from the rules' ``cost:`` section): a Hugging
Face ``config.json``, ``--kv-tokens``, ``--kv-cache-dtype``, ``--tp`` and ``--set NAME=VALUE``.

A getter several pool classes define is costed as a range over the candidates the bound names size
(:meth:`CostModel._range`); :func:`step_table` gathers a report's numbers into the per-step table.
"""

from __future__ import annotations

import ast
import math
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol

from castfind.analysis.getters import ClassRef, GetterCall, Held, Holders, dtype_like
from castfind.analysis.handed import Callers, Handed, parameter_of
from castfind.analysis.operand_guards import never_runs
from castfind.core import casts
from castfind.core.rules import CostSpec, RuleSet, glob_match
from castfind.core.types import Cost, CostCheck, CostVerdict, Finding, Runtime, StepRow, StepTable
from castfind.read.facts import Allocation, AllocKind, Cast, Const, Definition, FileFacts, render

#: The version of what a carried cost row holds (a :class:`~castfind.core.types.Cost` with its verdict and note).
COST_VERSION = 12

#: How many ``self.a`` → expression substitutions may nest.
MAX_DEPTH = 6
#: The longest formula text a substitution may produce (longer: the name stays, unknown).
MAX_TEXT = 400

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
    #: ``--kv-tokens``: the names it bound (``cost.flags``), judged like ``explicit`` (a hint when none is read).
    kv_tokens: tuple[str, ...] = ()


def _dtype_text(value: str) -> str:
    """``bfloat16`` → ``torch.bfloat16`` (a config's ``torch_dtype``); anything else as it is."""
    return f"torch.{value}" if value in DTYPE_BYTES else value


#: The largest number a binding may hold (``--set``, ``--kv-tokens``, a model config's field): what torch counts
#: sizes in (int64). Bindings are also finite and non-negative: they are sizes and counts.
MAX_BINDING = 2**63 - 1
_NUMBER = re.compile(r"[+-]?(\d[\d_]*\.?[\d_]*([eE][+-]?\d+)?|\.\d[\d_]*([eE][+-]?\d+)?|0[xXoObB][\da-fA-F_]+|inf|nan|infinity)",
                     re.IGNORECASE)


def _shown(text: str) -> str:
    return text if len(text) <= 40 else f"{text[:20]}...{text[-8:]} ({len(text)} characters)"


def number_problem(value: object) -> str | None:
    """Why ``value`` (a JSON number, or the text of a binding) cannot be a size or count binding; None when it
    can, or when it is not a number at all (a dtype, a formula). Never raises (no ``OverflowError``)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        text = value.strip()
        if not _NUMBER.fullmatch(text):
            return None
        if len(text) > 400:  # past any int64 or float (and Python's 4300-digit limit on int())
            return f"{_shown(text)} is out of range (at most {MAX_BINDING})"
        try:
            special = text.lower().lstrip("+-") in ("inf", "infinity", "nan")
            number: object = float(text) if special else ast.literal_eval(text.lstrip("+"))
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return f"{_shown(text)} is not a number castfind can read"
        value = number
    if not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return f"{_shown(str(value))} is not a finite number"
    if value < 0:
        return f"{_shown(str(value))} is negative; sizes and counts are 0 or more"
    if value > MAX_BINDING:
        return f"{_shown(str(value))} is out of range (at most {MAX_BINDING})"
    return None


def parse_set(spec: str) -> tuple[str, str]:
    """``NAME=VALUE`` (one ``--set``) → (name, value); ValueError (one line) unless NAME is an identifier,
    VALUE is not empty and, when VALUE is a number, it is finite, non-negative and at most :data:`MAX_BINDING`."""
    name, eq, value = spec.partition("=")
    name, value = name.strip(), value.strip()
    if not eq or not all(p.isidentifier() for p in name.split(".")) or not value:
        raise ValueError(f"--set {_shown(spec)}: expected NAME=VALUE with NAME an identifier or a dotted name, "
                         f"e.g. --set layer_num=61")
    why = number_problem(value)
    if why is not None:
        raise ValueError(f"--set {name}: {why} — give a size or count such as --set {name}=61")
    return name, value


def bindings(spec: CostSpec, *, config: Mapping[str, Any] | None = None, kv_tokens: int | None = None,
             kv_cache_dtype: str | None = None, tp: int | None = None, sets: Sequence[tuple[str, str]] = ()
             ) -> Bindings:
    """The names bound for this run: the rules' defaults, then the config fields (each as ``config.FIELD``
    too, what a model's constructor reads), the flags, ``--set``.

    Raises ValueError for a ``--kv-cache-dtype`` no ``cost.kv_cache_dtypes`` entry or dtype names, and for a
    ``--kv-tokens`` or a config field the rules bind that is not a finite, non-negative number up to
    :data:`MAX_BINDING` (:func:`number_problem`); other config fields out of range are left unbound.
    """
    values: dict[str, str] = dict(spec.defaults)
    for key, v in (config or {}).items():  # `config.hidden_size` in a model's own constructor
        if isinstance(key, str) and key.isidentifier() and isinstance(v, (int, float, str)) and not isinstance(v, bool):
            if not isinstance(v, str) and number_problem(v) is not None:
                continue  # e.g. pad_token_id = -1: no size, so no binding
            values[f"config.{key}"] = _dtype_text(v) if isinstance(v, str) else str(v)
    for key, names in spec.config:
        v = (config or {}).get(key)
        if isinstance(v, bool) or not isinstance(v, (int, float, str)):
            continue
        why = number_problem(v)
        if why is not None:
            raise ValueError(f"--model-config: field {key!r}: {why} — fix the config or bind it with --set")
        for n in names:
            values[n] = _dtype_text(v) if isinstance(v, str) else str(v)
    flags = dict(spec.flags)
    if kv_tokens is not None:
        why = number_problem(kv_tokens)
        if why is not None:
            raise ValueError(f"--kv-tokens: {why}")
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
    if tp is not None:
        why = number_problem(tp)
        if why is not None or tp < 1:
            raise ValueError(f"--tp: {why or f'{tp} is no tensor-parallel size'} — give the number of GPUs a layer "
                             f"is split over, e.g. --tp 8")
        for n in flags.get("tp", ()):  # `tp_size` in `output_size // tp_size`: a weight is 1/tp of the model's
            values[n] = str(tp)
    for name, value in sets:
        values[name] = _dtype_text(value)
    kv_names = tuple(flags.get("kv_tokens", ())) if kv_tokens is not None else ()
    return Bindings(values, tuple(dict.fromkeys(n for n, _ in sets)), kv_names)


def unreadable_set(bound: Bindings, name: str) -> str | None:
    """Why the ``--set`` value of ``name`` binds no size or dtype (``tokens=abc``: a name nothing binds), or
    None when it reads as a number, a dtype or a formula of bound names."""
    text = bound.values.get(name)
    if text is None:
        return None
    try:
        value = Evaluator(bound).value(text)
    except (Unknown, ArithmeticError, TypeError, RecursionError):
        value = None
    if (isinstance(value, int | float) and not isinstance(value, bool)) or dtype_bytes(value) is not None:
        return None
    return (f"{name}={_shown(text)}: not a number, a dtype castfind sizes or a formula of bound names, so every "
            f"cost that reads {name} stays unbound — give a count such as --set {name}=4096")


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
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            return None
        try:
            f = float(v)
        except OverflowError:  # an int past 1e308
            return None
        return f if math.isfinite(f) else None

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
        if isinstance(node, ast.Call) and not node.args and not node.keywords and ast.unparse(node.func) == "torch.get_default_dtype":
            return self._name("default_dtype")  # what an engine sets torch's default dtype to: the rules' default
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
                and len(node.args) == 3 and not node.keywords and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str) and isinstance(node.args[0], (ast.Name, ast.Attribute))):
            # `getattr(config, "router_fp32", False)`: an optional config field, bound (`config.router_fp32`) or
            # its default
            dotted = f"{ast.unparse(node.args[0])}.{node.args[1].value}"
            return self._name(dotted) if dotted in self.bound.values else self._ev(node.args[2], d)
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


def bindable_names(text: str) -> set[str]:
    """The names a formula reads as ``--set`` would bind them: dotted for an attribute chain of a name
    (``pool.layer_num``, ``config.hidden_size``), bare otherwise; a function's name is not one."""
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError):
        return set()
    out: set[str] = set()
    skip: set[int] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Call):
            skip.add(id(n.func))
        if id(n) in skip:
            if isinstance(n, ast.Attribute):
                skip.add(id(n.value))
            continue
        if isinstance(n, ast.Attribute):
            dotted = ast.unparse(n)
            if re.fullmatch(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+", dotted):
                out.add(dotted)
                for sub_node in ast.walk(n):
                    skip.add(id(sub_node))
        elif isinstance(n, ast.Name):
            out.add(n.id)
    return out


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

    def files_naming(self, name: str, limit: int) -> Sequence[FileFacts]:
        """The facts of the files (at most ``limit``) whose text has the identifier ``name`` (where its calls may be)."""
        ...


class CostModel:
    """Costs of findings for one run. Every class hierarchy, attribute and getter is resolved once."""

    def __init__(self, rules: RuleSet, lookup: Lookup, bound: Bindings, deployment: bool = False,
                 off_model: Callable[[str], str | None] | None = None) -> None:
        self.rules = rules
        self.lookup = lookup
        self.ev = Evaluator(bound)
        self.holders = Holders(rules, lookup.definitions)
        #: A deployment is described: a parameter's cast is costed by what its callers hand in
        #: (:mod:`castfind.analysis.handed`), and one without a number says why. Without one, costs are as before.
        #: ``off_model``: why a function (``module.Class.method``) is off the model's path (``ModelPath.verdict``).
        self.callers = Callers(self.holders, lookup.files_naming, off_model, rules.cost.per_batch) \
            if deployment else None
        self._attrs: dict[tuple[str, str, str], str | None] = {}
        self._mro: dict[tuple[str, str], tuple[ClassRef, ...]] = {}
        self._consts: dict[tuple[str, str], dict[str, str]] = {}
        self.formulas: list[str] = []

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
                defs = [(ff, d) for ff, d in self.holders.defs_named(short) if d.kind == "class"]
                same = [x for x in defs if x[0].module == cur[0].module]
                todo += (same or defs)[:1]
        self._mro[key] = tuple(out)
        return self._mro[key]

    def _allocs(self, ref: ClassRef, target: str, kinds: tuple[str, ...]) -> list[Allocation]:
        """The allocations of ``target`` in the first class of ``ref``'s hierarchy that has any (``*.X``: of
        ``X`` on any parameter object of a method, never ``self.X``)."""
        return self._allocs_in(ref, target, kinds)[1]

    def _allocs_in(self, ref: ClassRef, target: str, kinds: tuple[str, ...]) -> tuple[str, list[Allocation]]:
        """:meth:`_allocs` and the path (in its root) of the file that holds them."""
        suffix = target[1:] if target.startswith("*.") else None

        def named(t: str) -> bool:
            return t == target if suffix is None else (t.endswith(suffix) and not t.startswith("self."))

        for facts, d in self._mro_of(ref):
            prefix = d.qualname + "."
            got = [a for a in facts.allocations if named(a.target) and a.kind in kinds
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

    def constants(self, ref: ClassRef) -> dict[str, str]:
        """What a bare name in ``ref``'s formulas stands for when nothing binds it: a literal default of a
        parameter of the constructor (``use_dsa=False``; the class's own ``__init__`` first, then its bases'),
        else a module-level numeric constant (``HEAD_DIM = 128``, assigned once, unconditionally) of the
        modules that define ``ref`` and its bases, the class's own module first. A name the configuration
        binds is left out: what is bound wins."""
        key = (ref[0].module, ref[1].qualname)
        got = self._consts.get(key)
        if got is None:
            got = {}
            mro = self._mro_of(ref)
            for facts, d in mro:
                init = next((x for x in facts.definitions if x.qualname == f"{d.qualname}.__init__"), None)
                for name, text in init.param_defaults if init is not None else ():
                    got.setdefault(name, text)
            for facts in {id(f): f for f, _ in mro}.values():  # by identity: facts are large
                top = [a for a in facts.assigns if a.scope == "" and a.index is None]
                times = Counter(a.target for a in top)
                for a in top:
                    if (times[a.target] == 1 and not a.conditional and isinstance(a.value, Const)
                            and re.fullmatch(r"\d+", a.value.text)):
                        got.setdefault(a.target, a.value.text)
            got = {n: v for n, v in got.items() if n not in self.ev.bound.values}
            self._consts[key] = got
        return got

    def substitute(self, ref: ClassRef, text: str, depth: int = 0) -> str:
        """``text`` with each ``self.a`` replaced by what ``a`` is set to, and each module constant by its
        value (unknown ones stay as they are)."""
        consts = self.constants(ref)
        if depth > MAX_DEPTH or ("self." not in text and " if " not in text
                                 and not (consts and names_in(text) & consts.keys())):
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

            def visit_Name(self, node: ast.Name) -> ast.AST:
                got = consts.get(node.id)
                return ast.parse(got, mode="eval").body if got is not None else node

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
        end = self.holders.operand(facts, cast.scope, cast.receiver, cast.line)
        own = self.holders.own_class(facts, cast.scope)
        bounds = self._loop_bounds(own, cast.loops)
        walks = any(t in names_in(render(cast.receiver)) for t, _ in cast.loops)
        got = self._end_cost(finding, end, cast, own, bounds, walks)
        if got is not None or self.callers is None:
            return got
        walked = self.holders.prov.origin_or_stop(facts, cast.scope, cast.receiver, cast.line)
        param = parameter_of(facts, cast.scope, walked.trail.end)
        if param is None or not all(s.kind in ("name", "view", "view-attribute") for s in walked.trail.steps):
            return None
        return self._handed_cost(finding, cast, own, bounds, walks, param,
                                 self.callers.handed(facts, cast.scope, *param))

    def _end_cost(self, finding: Finding, end: Held | GetterCall | None, cast: Cast, own: ClassRef | None,
                  bounds: Sequence[str], walks: bool) -> Cost | None:
        """The cost of the buffer an operand was read to: ``self.X``, or what a getter hands out."""
        if isinstance(end, GetterCall):
            cands = self.holders.handed_out(end.name)
            got = self.holders.choose(cands, finding.path)
            if got is None:
                return self._range(finding, cands, end, cast, own, bounds, walks)
            end = Held(got.holders, got.attr, got.indexed or end.indexed, got.view or end.view)
        if not isinstance(end, Held) or not end.holders:
            return None
        return self._held_cost(finding, end, cast, own, bounds, walks)

    def _handed_cost(self, finding: Finding, cast: Cast, own: ClassRef | None, bounds: Sequence[str], walks: bool,
                     param: tuple[str, str | None], handed: Handed) -> Cost:
        """A parameter's cast: the cost of each buffer its callers hand in (one: its cost; several: the range over
        those sized); none sized: a cost with no number whose note says why (never a silent blank)."""
        what = param[0] + (f".{param[1]}" if param[1] else "")
        costs: list[Cost] = []
        unsized: list[str] = []
        for end in handed.found:
            c = self._end_cost(finding, end, cast, own, bounds, walks)
            if c is not None:
                costs.append(c)
            else:
                unsized.append(f"{_end_text(end)} is handed in, but castfind finds no allocation of it it can size")
        costs = [c for c in costs if not self._another_models(c)]
        got = self._spread(costs, f"handed to {what} by its callers", True) if costs else None
        if got is not None:
            return got if got.candidates else replace(got, note=f"{got.note}; " * bool(got.note)
                                                      + f"handed to {what} by its callers")
        dst, _ = self._dst(cast)
        if not handed.found and handed.why and set(handed.why) <= set(handed.fresh):
            # Every call on the path hands a tensor made for it (joined, allocated, sliced from the batch): the cast
            # moves this batch's rows, not a buffer the deployment holds.
            made = "; ".join(handed.fresh[:3]) + (f"; {len(handed.fresh) - 3} more" if len(handed.fresh) > 3 else "")
            return Cost((), None, dst, "", "", verdict="per-batch",
                        note=f"per-batch: {what} is a parameter every call on the path hands a tensor made for "
                             f"that call; {made}")
        reasons = [*dict.fromkeys(unsized), *handed.why]
        why = "; ".join(reasons[:3]) + (f"; {len(reasons) - 3} more" if len(reasons) > 3 else "")
        if costs:
            why = f"the {len(costs)} buffers handed to {what} are not sized with the bound names" + "; " * bool(why) + why
        return Cost((), None, dst, "", "", note=f"no number: {what} is a parameter; {why or 'no caller hands a buffer'}")

    def _held_cost(self, finding: Finding, end: Held, cast: Cast, own: ClassRef | None, bounds: Sequence[str],
                   walks: bool) -> Cost | None:
        cost = self._cost_of(end, *self._dst(cast), own=own, loops=bounds, walks=walks)
        if cost is None and end.weight_of is not None:
            end = end.weight_of
            cost = self._cost_of(end, *self._dst(cast), own=own, loops=bounds, walks=walks)
        return self._guarded(finding, cast, end, cost)

    def _guarded(self, finding: Finding, cast: Cast, held: Held, cost: Cost | None) -> Cost | None:
        """``cost`` with the verdict ``never`` when a test around the cast on its own operand's dtype is false
        for the literal dtype the operand was declared with (:mod:`castfind.analysis.operand_guards`): a
        getter's ``.view(dtype)``, or the ``dtype=`` every allocation of the buffer agrees on (an allocation
        under an ``if`` with another dtype, or none, leaves it unknown). A parameter's operand is known only
        when every call that hands it one agrees on its holder (:meth:`Holders.from_callers`)."""
        if cost is None or cost.verdict == "no-op" or not cost.src_dtype:
            return cost
        if len(held.holders) != 1:
            return cost  # several classes may hold it: their dtypes may differ
        if not held.view:
            ref = held.holders[0]
            _, found = self._allocs_in(ref, f"*.{held.attr}" if held.on_param else f"self.{held.attr}",
                                       self._kinds(held))
            if len({a.dtype for a in found if a.shape is not None}) != 1:
                return cost
        src = canonical_literal(cost.src_dtype)
        operand = render(cast.receiver)
        g = never_runs(cast.guards, operand, src, canonical_literal) if src else None
        if g is None:
            return cost
        test = f"not ({g.test})" if g.negated else g.test
        note = f"never runs here: `{test}` ({finding.path}:{g.line}) is false for {operand}, declared {src}"
        return replace(cost, verdict="never", note=note)

    def _range(self, finding: Finding, cands: Sequence[Held], call: GetterCall, cast: Cast, own: ClassRef | None,
               bounds: Sequence[str], walks: bool) -> Cost | None:
        """The cost of a getter several classes define and none of which :meth:`Holders.choose` prefers. The
        configuration selects among them: a candidate whose size needs a model field the configuration does not
        give (an MLA pool's ``kv_lora_rank`` for a model without one; an MHA pool's ``head_dim`` for an MLA model:
        a name of the rules' ``cost.config``) is not this deployment's buffer. Of the rest, one sized is its cost,
        several a range (the smallest's cost with ``value_max`` the largest's, ``candidates`` naming them); those
        unsized for another reason are named in the note, and then no verdict is applied (never on a guess)."""
        # Each candidate as its getter hands it out: `self.kv_buffer[layer_id]` is one layer's buffer, a lone
        # `self.remote_buffer` the whole tensor (the call's argument indexes nothing there).
        costs = [c for h in cands if h.holders
                 for c in [self._held_cost(finding, Held(h.holders, h.attr, h.indexed, h.view or call.view),
                                           cast, own, bounds, walks)] if c is not None]
        # A candidate that needs a model field the configuration lacks (`kv_lora_rank` of a Llama config) is another
        # model's buffer. One unsized for another reason (a name the rules bind from no flag, a shape castfind
        # cannot read) may be this one's: the range covers the sized ones and says how many are not in it.
        costs = [c for c in costs if not self._another_models(c)]
        return self._spread(costs, "the getter hands out", self.callers is not None)

    def _another_models(self, cost: Cost) -> bool:
        """A candidate's cost that needs a model field the configuration lacks (``kv_lora_rank`` of a Llama config):
        another model's buffer. A no-op under the bound dtypes keeps the names its size would need."""
        model_names = {n for _, names in self.rules.cost.config for n in names}
        return (cost.value is None or cost.verdict == "no-op") and bool(set(cost.unbound) & model_names)

    @staticmethod
    def _spread(costs: Sequence[Cost], what: str, deployment: bool = False) -> Cost | None:
        """One cost for several candidate buffers (``what``: how they were found): the one sized, or the range over
        those sized (the smallest's cost, ``value_max`` the largest's, ``candidates`` naming them); those not sized
        are named in the note, and then no verdict is applied (never one buffer's on a guess). None: none sized.
        On a deployment, candidates that are all no-ops (under the bound dtypes too) give the first one's no-op."""
        sized = [c for c in costs if c.value is not None and c.verdict != "no-op"]
        unsized = tuple(dict.fromkeys(c.holder for c in costs if c.value is None))
        if not sized:
            noops = [c for c in costs if c.verdict == "no-op"]
            if deployment and noops and not unsized:
                names = tuple(dict.fromkeys(c.holder for c in costs))
                return costs[0] if len(names) == 1 else replace(
                    costs[0], note=f"{costs[0].note}; so are the other buffers {what} ({', '.join(names[1:])})")
            # Some move 0 B under the bound dtypes, some are not sized: the range over the first (0 B, no verdict),
            # since the others may be this deployment's buffer and move bytes.
            sized = [replace(c, verdict="") for c in noops if c.value == 0.0] if deployment and unsized else []
            if not sized:
                return None  # nothing to choose by: no cost, rather than one candidate's verdict on a guess
        sized.sort(key=lambda c: (c.value or 0.0, c.holder))
        low, high = sized[0], sized[-1]
        if len(sized) == 1 and not unsized:
            return low
        # A verdict holds for the range only when every candidate has it (all tiny): never one buffer's on a guess.
        verdict = low.verdict if not unsized and all(c.verdict == low.verdict for c in sized) else ""
        names = tuple(dict.fromkeys(c.holder for c in sized))
        calls = low.calls if all(c.calls == low.calls for c in sized) else None  # one count, or none shown
        note = f"one of {len(names)} buffers {what} ({', '.join(names)})"
        if unsized:
            note += f"; {len(unsized)} more not sized with the bound names ({', '.join(unsized)})"
        return replace(low, value_max=high.value, candidates=names, verdict=verdict, calls=calls,
                       note=f"{low.note}; " * bool(low.note) + note)

    def _loop_bounds(self, here: ClassRef | None, loops: Sequence[tuple[str, str]]) -> list[str]:
        """The trip count of each ``for`` around the cast that walks a ``range``: ``range(N)`` → ``N``,
        ``range(a, b)`` → ``b - a``, also under ``enumerate``; ``self.x`` in it substituted in the cast's own
        class. A loop over anything else is not counted (its length is not written in the code)."""
        out: list[str] = []
        for _, text in loops:
            try:
                node = ast.parse(text, mode="eval").body
            except (SyntaxError, ValueError, RecursionError):
                continue
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "enumerate"
                    and len(node.args) == 1):
                node = node.args[0]
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range"
                    and len(node.args) in (1, 2) and not node.keywords):
                continue
            args = [ast.unparse(a) for a in node.args]
            bound = args[0] if len(args) == 1 else f"({args[1]}) - ({args[0]})"
            out.append(self.substitute(here, bound) if here is not None else bound)
        return out

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
        return (text, text) if dtype_like(text) else (None, "")

    def _cost_of(self, held: Held, dst: str | None, dst_text: str = "", own: ClassRef | None = None,
                 loops: Sequence[str] = (), walks: bool = False) -> Cost | None:
        """``own``: the class the cast is in (its ``self.a`` in the destination dtype is substituted there);
        ``loops``: the trip counts of the ``range`` loops around the cast; ``walks``: a loop variable picks
        the buffer."""
        ref = held.holders[0]
        same = own is not None and own[0] is ref[0] and own[1] is ref[1]
        target = f"*.{held.attr}" if held.on_param else f"self.{held.attr}"
        kinds = self._kinds(held)
        path, found = self._allocs_in(ref, target, kinds)
        allocs = [a for a in found if a.shape is not None]
        if not allocs:
            return None
        alloc = next((a for a in allocs if a.when is None), allocs[0])
        assert alloc.shape is not None
        dims = declared = [self.substitute(ref, d) for d in alloc.shape]
        per_layer = alloc.count is not None and held.indexed
        if held.indexed and alloc.count is None:
            dims = dims[1:]  # `buf[i]` of one tensor: a slice of its first axis
        # No `dtype=`: the tensor or module is made in torch's default dtype, which an engine sets to the
        # model's while it loads it (`default_dtype`, bound in the rules' defaults).
        src = self.substitute(ref, held.view or alloc.dtype or "default_dtype")
        dst = dst if dst is None or own is None else self.substitute(own, dst)
        count = self.substitute(ref, alloc.count) if per_layer and alloc.count else None
        if count is not None and walks:
            count = None  # a loop variable picks the buffer: the loop walks the list, its trip count counts
        factors = [*loops, *([count] if count else [])]
        sizes = [self._size_text(t) for t in (src, dst)]
        numel = " * ".join(f"({d})" if not _atomic(d) else d for d in dims) or "1"
        per_call = f"{numel} * ({sizes[0]} + {sizes[1]})"
        times_text = " * ".join(t if _atomic(t) else f"({t})" for t in factors)
        per_step = f"{times_text} * {per_call}" if factors else per_call
        self.formulas += [*dims, *(t for t in (src, dst) if t), *factors]
        value = None
        src_b, dst_b = (self._bytes(t) for t in (src, dst))
        n = [self.ev.number(d) for d in dims]
        times = self.ev.number(times_text) if factors else 1.0
        if src_b is not None and dst_b is not None and times is not None and all(x is not None for x in n):
            value = float(times)
            for x in n:
                value *= float(x or 0)
            value *= src_b + dst_b
            if not (math.isfinite(value) and value >= 0):
                value = None  # a negative size (``size - 8`` with size 4) or past a float: no value, never -1.7 KiB
        owner = ref[1].qualname
        at = f"{path}:{alloc.line}"
        written = held.view or alloc.dtype or ""
        verdict, note = self._noop((src, written, ref[1].name), (dst, dst_text, own[1].name if own else ""),
                                   f"{written} at {at}", same)
        unbound = () if value is not None else self._unbound([*dims, *factors], [src, dst])
        if verdict == "" and note and self._equal_when_bound(src, dst):
            if self.callers is not None:
                # A deployment binds both dtypes, and they are one: `.to` returns its operand, 0 bytes, an info.
                verdict, value = "no-op", 0.0
                note = f"no-op with the bound dtypes: {note.removeprefix('no-op when ')} ({self._bound_dtype(src)})"
            elif value is not None:
                value = 0.0  # the bound dtypes are the same: `.to` returns its operand, nothing moves
                note += " (so with the bound dtypes it moves nothing)"
        if verdict != "no-op":
            tiny, why = self._tiny([*declared, *([count] if count else [])], value)
            verdict = tiny
            note = f"{note}; {why}" if note and why else note or why
        return Cost(tuple(dims), src, dst, per_call, per_step, value, f"{owner}.{held.attr}", declared=at,
                    verdict=verdict, note=note, unbound=unbound, calls=times)

    def _kinds(self, held: Held) -> tuple[AllocKind, ...]:
        """The allocation kinds ``held`` may be: a module's weight (``self.proj.weight``) is read off its constructor
        call; an embedding-like one (``ParallelLMHead(vocab, hidden)``) only with a deployment described, so a scan
        without one costs as before."""
        modules: tuple[AllocKind, ...] = ("linear", "embedding") if self.callers is not None else ("linear",)
        return modules if held.module_weight else ("tensor", "parameter", *modules)

    def _unbound(self, sizes: Sequence[str], dtypes: Sequence[str | None]) -> tuple[str, ...]:
        """The names a user has to bind for a value: those of the sizes that are no number, and each dtype
        castfind cannot size (as written: ``activation_dtype``)."""
        names = {n for t in sizes for n in bindable_names(t) if self.ev.number(n) is None}
        names |= {t for t in dtypes if t and self._bytes(t) is None}
        return tuple(sorted(names))

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
        defaults = dict(self.rules.cost.defaults)
        if (defaults.get(a) == b or defaults.get(b) == a) and not {a, b} & set(self.ev.bound.explicit):
            # `default_dtype: activation_dtype`: built without dtype= (torch's default dtype, which the engine
            # sets to the model's while loading) and cast to an activation's dtype (the model's): one dtype.
            return "no-op", f"no-op: declared without dtype= {declared.strip()}, so in the model's dtype, as {dst[1] or b} is"
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

    def _bound_dtype(self, formula: str | None) -> str:
        """The dtype a formula evaluates to under the bound names, as torch spells it."""
        try:
            got = self.ev.value(formula or "")
        except (Unknown, ArithmeticError, TypeError, RecursionError):
            return "?"
        return _canonical(got) if isinstance(got, str) else "?"

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
        """The ``--set`` names (and those ``--kv-tokens`` bound) no formula of this run read."""
        used = set(self.ev.seen)
        for f in self.formulas:
            used |= names_in(f)
        return [n for n in dict.fromkeys((*self.ev.bound.explicit, *self.ev.bound.kv_tokens)) if n not in used]


def _end_text(end: Held | GetterCall) -> str:
    """``Model.k_cache`` (an attribute of a class) or ``get_key_buffer()`` (a getter): what was handed in."""
    if isinstance(end, GetterCall):
        return f"{end.name}()"
    return f"{end.holders[0][1].qualname}.{end.attr}" if end.holders else end.attr


_ALIASES = {"float": "float32", "half": "float16", "double": "float64", "long": "int64", "int": "int32",
            "short": "int16"}


def _canonical(dtype: str) -> str:
    """``torch.float`` → ``torch.float32`` (torch's aliases); anything else as it is."""
    name = dtype.removeprefix("torch.")
    return f"torch.{_ALIASES[name]}" if dtype.startswith("torch.") and name in _ALIASES else dtype


def _literal_dtype(text: str) -> bool:
    return text.startswith("torch.") and text.removeprefix("torch.") in DTYPE_BYTES


def canonical_literal(text: str) -> str | None:
    """A literal dtype as written (``torch.float``) → its canonical name (``torch.float32``); None for anything
    else (a formula, ``self.dtype``)."""
    c = _canonical(text)
    return c if _literal_dtype(c) else None


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
    vector ``[hidden]`` and a depthwise conv ``[c, 1, 4]`` are small; a pool
    ``[size + page_size, 1, kv_lora_rank + rope]`` (two free factors), a weight ``[out, in]``, a router
    ``[num_experts, hidden]`` (an expert count is a model size: 256 × 7168 in DeepSeek-V3), a flat pool
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


# --------------------------------------------------------------------------- against a trace

_IDENT = re.compile(r"[A-Za-z_]\w*")


def check(cost: Cost, measured: Runtime, bound: Bindings) -> CostCheck:
    """Hold a finding's static cost against the trace's measurement of the same cast.

    Each axis of the static shape is compared with the measured one where the bound names give it a
    value; an axis that is a single unbound name takes the measured size (``inferred``), and so does a
    dtype written as an unbound name. The declared source dtype is compared with the measured one, and the
    bytes per call (``numel × (src + dst bytes)``, what the recorder counts) with the measured bytes once
    every size is known. Pure: the trace is not taken as truth, only as a second opinion.
    """
    ev = Evaluator(bound)
    wrong: list[str] = []
    inferred: dict[str, str] = {}
    compared = 0
    shape, got = cost.shape, measured.shape
    sizes: list[float | None] = []
    if len(shape) != len(got):
        wrong.append(f"rank: static [{', '.join(shape)}] has {len(shape)} axes, measured "
                     f"[{', '.join(map(str, got))}] has {len(got)}")
    else:
        for i, (dim, m) in enumerate(zip(shape, got, strict=True)):
            v = ev.number(dim)
            if v is None and _IDENT.fullmatch(dim):
                if inferred.setdefault(dim, str(m)) != str(m):
                    wrong.append(f"{dim}: measured {inferred[dim]} on one axis and {m} on axis {i}")
                v = float(m)
            elif v is not None:
                compared += 1
                if v != m:
                    wrong.append(f"axis {i}: static {dim} = {v:g}, measured {m}")
            sizes.append(v)
    dtype_bytes_of: list[int | None] = []
    sides: tuple[tuple[str, str | None, str], ...] = (("source", cost.src_dtype, measured.src_dtype),
                                                       ("target", cost.dst_dtype, measured.dst_dtype))
    for side, text, mdtype in sides:
        want = f"torch.{mdtype.removeprefix('torch.')}"
        try:
            value = ev.value(text) if text else None
        except (Unknown, ArithmeticError, TypeError, RecursionError):
            value = None
        if dtype_bytes(value) is not None:
            compared += 1
            if value != want and dtype_bytes(value) != dtype_bytes(want):
                wrong.append(f"{side} dtype: static {text} = {value}, measured {mdtype}")
            elif value != want:  # same width (float16 for bfloat16): bytes agree, say so
                wrong.append(f"{side} dtype: static {text} = {value}, measured {mdtype} (same width)")
        elif text and _IDENT.fullmatch(text):
            inferred.setdefault(text, want)
        dtype_bytes_of.append(dtype_bytes(value) if dtype_bytes(value) is not None else dtype_bytes(want))
    static_bytes = None
    if sizes and all(s is not None for s in sizes) and all(b is not None for b in dtype_bytes_of):
        static_bytes = 1.0
        for s in sizes:
            static_bytes *= float(s or 0)
        static_bytes *= sum(b or 0 for b in dtype_bytes_of)
        if static_bytes != measured.bytes_per_call:
            wrong.append(f"bytes per call: static {static_bytes:g}, measured {measured.bytes_per_call}")
    status: Literal["agrees", "mismatch", "unchecked"] = (
        "mismatch" if wrong else "agrees" if compared else "unchecked")
    return CostCheck(status, tuple(wrong), tuple(sorted(inferred.items())), static_bytes, measured.bytes_per_call)


def judged(finding: Finding, cost: Cost | None) -> Finding:
    """``finding`` with its cost, and the severity the cost's verdict gives it: a no-op cast is info, a
    buffer small by construction or a cast its operand's dtype keeps from running makes an error a warning
    (the message says why); otherwise as it was."""
    if cost is None:
        return finding
    if cost.verdict == "no-op" and finding.severity != "info":
        return replace(finding, cost=cost, severity="info", message=f"{finding.message} ({cost.note})")
    if cost.verdict in ("tiny", "never", "per-batch") and finding.severity == "error":
        return replace(finding, cost=cost, severity="warning", message=f"{finding.message} ({cost.note})")
    return replace(finding, cost=cost)


# --------------------------------------------------------------------------- the per-step table


def step_table(findings: Sequence[Finding], step: str = "decode",
               truth: Callable[[str], bool | None] | None = None) -> StepTable:
    """The per-step table of a report's findings (item 5 of issue 35): one row per error or warning whose cost
    has a number (bytes per step, calls per step, a range's top), most bytes first, each row's share of the
    total; with a trace joined, what it measured per step beside it (the runtime join's ``calls_per_step``, and
    its bytes scaled to one step) and the static check's status (:func:`check`, done in ``post``). Only the casts
    on ``step`` count: a finding whose :attr:`~castfind.core.types.Finding.steps` leaves it out (an extend-only
    cast) is counted in ``elsewhere`` instead; one with no steps (not asked) counts. A finding whose path keeps a
    branch test open (``truth``, the deployment's value of a test's text, gives None; every test is open without
    it) runs only when that test holds: its row comes after the others, names those tests, and is counted apart
    (``conditional``), not in the total, as a profile of the step would count it only if the test held. Pure."""
    reported = [f for f in findings if f.severity in ("error", "warning") and f.cost is not None
                and f.cost.verdict != "per-batch"]  # this batch's rows, not a buffer: no row of the step
    costed = [f for f in reported if not f.steps or step in f.steps]
    elsewhere = Counter(",".join(f.steps) for f in reported if f.steps and step not in f.steps)
    numbered = [f for f in costed if f.cost is not None and f.cost.value is not None]

    def open_tests(f: Finding) -> tuple[str, ...]:
        return tuple(dict.fromkeys(c.text for c in f.conditions
                                   if (got := truth(c.test) if truth is not None else None) is None
                                   or got == c.negated))

    opened = {id(f): open_tests(f) for f in numbered}

    def summed(fs: list[Finding]) -> tuple[float, float | None]:
        """The bytes of ``fs`` and, when one is a range, the sum of their tops."""
        costs = [f.cost for f in fs if f.cost is not None]
        value = sum(c.value or 0.0 for c in costs)
        if not any(c.is_range() for c in costs):
            return value, None
        return value, sum((c.value_max if c.value_max is not None else c.value) or 0.0 for c in costs)

    total, total_max = summed([f for f in numbered if not opened[id(f)]])
    conditional, conditional_max = summed([f for f in numbered if opened[id(f)]])
    rows = []
    for f in numbered:
        c = f.cost
        assert c is not None and c.value is not None
        rt = f.runtime
        m_calls = rt.calls_per_step if rt is not None else None
        m_bytes = rt.bytes_total * m_calls / rt.calls if rt is not None and m_calls is not None and rt.calls else None
        holder = " / ".join(c.candidates) if len(c.candidates) > 1 else c.holder  # every candidate, even of equal size
        whole = total + (c.value if opened[id(f)] else 0.0)  # a conditional row's share: of the step if it ran
        rows.append(StepRow(f.rule, f.severity, f.root, f.path, f.line, f.function, holder, c.calls, c.value,
                            c.value_max if c.is_range() else None, c.value / whole if whole else 0.0,
                            m_calls, m_bytes, c.check.status if c.check is not None else "", opened[id(f)]))
    rows.sort(key=lambda r: (bool(r.only_when), -(r.bytes_max if r.bytes_max is not None else r.bytes), -r.bytes,
                             r.path, r.line))
    return StepTable(tuple(rows), total, total_max, len(costed) - len(numbered), step, tuple(sorted(elsewhere.items())),
                     conditional, conditional_max)
