"""Rules: load and validate the YAML rule files (``rules/*.yaml`` plus ``--rules DIR``).

A rule file may hold shared ``buffers`` kinds, ``entry_points``, ``once`` contexts, ``index`` name
patterns, ``steps`` (the entry points that run only on one step of the serving loop), ``dtype_args``, ``casts``
overrides, ``rank`` (how findings are ordered), ``cost``, ``models`` (how an
engine registers its models and the component registries the deployment flags pick from:
:class:`ModelSpec`) and ``rules``.
Files are merged in order: later files extend the lists, add rules and override ``casts`` entries,
``rank.entry_points`` entries and ``once.store_to_self``. A buffer kind named again (``kv-cache`` in
a user file) is *extended*: its getters, attributes and ``exclude`` patterns are added
to the earlier ones and ``infer_getters`` and ``weight``, when given, override; with ``replace: true``
the new definition replaces the earlier one instead.

The cast methods themselves live in :mod:`castfind.core.casts`, the one table the extractor records from:
its operand and dtype are each method's defaults, a ``casts:`` entry may only override them, and a
``casts:`` key (or a rule's ``cast:`` item) naming a method that table lacks is an error, since
castfind would never extract such a call and the rule could never fire.

A finding's static score (it orders findings of one severity when no trace measured them) is its
buffer kind's ``weight`` (1.0 when not given), plus its loop depth (at most 3), plus the largest
``rank.entry_points`` bonus whose pattern matches the first function of its hot path. Policy for a
particular serving stack (SGLang's decode step matters most) thus sits in the rule files, not here.

A rule's ``message`` is a :meth:`str.format` template over :data:`MESSAGE_FIELDS` only: no attribute
or index access, no nested fields, no width or precision over :data:`MAX_FORMAT_WIDTH`.
Patterns (entry points, once functions, index names, dtype arguments, buffer attributes and
excludes) are shell globs, matched as :func:`fnmatch.fnmatchcase` does by :func:`glob_regex`, which
does not depend on the text of :func:`fnmatch.translate` (that changed in Python 3.14).
A buffer kind's ``exclude`` patterns say which field they apply to: ``exclude.name`` patterns match
each token (:func:`identifier_tokens`) of each identifier of the buffer expression, ``exclude.class``
patterns the tokens of the class that holds the buffer; nothing matches the enclosing function's name.

Every problem is a :class:`RuleError` with the file, line and offending key: a wrong type (a list
where a mapping belongs, a quoted ``'no'`` where a boolean belongs), an unknown or repeated key,
a bad template. :func:`validate` returns them all, :func:`load_rules` raises the first.
"""

from __future__ import annotations

import dataclasses
import math
import re
import string
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from castfind.core import casts as cast_table
from castfind.core.casts import CastMethod, Operand
from castfind.core.inputs import InputError, read_input
from castfind.core.sourcetext import word_start
from castfind.core.types import SEVERITIES, Severity, is_severity

#: The placeholders a rule's ``message`` may use.
MESSAGE_FIELDS = ("expr", "buffer", "buffer_path", "dtype", "function")
#: The largest width or precision a ``message`` placeholder may ask for (``{expr:>40}``).
MAX_FORMAT_WIDTH = 100


class RuleError(Exception):
    """A malformed rule file: ``path:line: key: reason``."""

    def __init__(self, path: str, line: int, key: str, reason: str) -> None:
        super().__init__(f"{path}:{line}: {key}: {reason}")
        self.path, self.line, self.key, self.reason = path, line, key, reason


# --- globs ----------------------------------------------------------------------------------------


def glob_regex(pattern: str, star: str = ".*", one: str = ".") -> str:
    """The regex for a shell glob, read as :func:`fnmatch.fnmatchcase` reads it; unanchored, no flags.

    ``*`` is any run of characters (``star``), ``?`` one character (``one``), ``[abc]`` or ``[a-z]`` one
    of a set and ``[!...]`` one outside it. In a set a leading ``]`` is literal, so is a ``-`` first or
    last, and a range whose ends are reversed (``z-a``) is empty. A ``[`` without its ``]`` and anything
    else, ``\\`` included, stands for itself. Match it with ``re.fullmatch`` and ``re.DOTALL``.
    """
    out: list[str] = []
    i, n = 0, len(pattern)
    after_star = False
    while i < n:
        c = pattern[i]
        i += 1
        if c == "*":
            if not after_star:
                out.append(star)
            after_star = True
            continue
        after_star = False
        if c == "?":
            out.append(one)
        elif c == "[" and (end := _set_end(pattern, i)) >= 0:
            out.append(_char_set(pattern[i:end], one))
            i = end + 1
        else:
            out.append(re.escape(c))
    return "".join(out)


def _set_end(pattern: str, i: int) -> int:
    """The index of the ``]`` closing the set that starts at ``pattern[i]`` (after its ``[``); -1: none."""
    j, n = i, len(pattern)
    if j < n and pattern[j] == "!":
        j += 1
    if j < n and pattern[j] == "]":
        j += 1
    while j < n and pattern[j] != "]":
        j += 1
    return j if j < n else -1


def _char_set(body: str, one: str) -> str:
    negate = body.startswith("!")
    if negate:
        body = body[1:]
    items: list[str] = []
    k = 0
    while k < len(body):
        if k + 2 < len(body) and body[k + 1] == "-":
            lo, hi = body[k], body[k + 2]
            k += 3
            if lo <= hi:
                items.append(f"{re.escape(lo)}-{re.escape(hi)}")
        else:
            items.append(re.escape(body[k]))
            k += 1
    if not items:  # only reversed ranges: the set is empty
        return one if negate else "(?!)"
    return "[" + ("^" if negate else "") + "".join(items) + "]"


@lru_cache(maxsize=1024)
def _glob_set(patterns: tuple[str, ...]) -> re.Pattern[str] | None:
    if not patterns:
        return None
    return re.compile("|".join(f"(?:{glob_regex(p)})" for p in patterns), re.DOTALL)


def glob_match(pattern: str, name: str) -> bool:
    """``fnmatch.fnmatchcase(name, pattern)``, on every Python version alike."""
    return globs_match((pattern,), name)


def globs_match(patterns: tuple[str, ...], name: str) -> bool:
    """Does ``name`` match any of ``patterns`` (shell globs, case-sensitive)?"""
    compiled = _glob_set(tuple(patterns))
    return compiled is not None and compiled.fullmatch(name) is not None


# --- the rule set ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class AnyPattern:
    """Byte patterns searched one after the other: where any matches, the text matches.

    PERF: ``re`` scans quickly for a pattern that starts with literals, and tries every position of
    the text for one that starts with ``\\b`` or with an alternation of different shapes. Over both
    wheels the getter names and the attribute accesses searched apart take ~0.4 s; one pattern of
    both took ~3 s.
    """

    patterns: tuple[re.Pattern[bytes], ...]

    def search(self, data: bytes) -> re.Match[bytes] | None:
        for p in self.patterns:
            m = p.search(data)
            if m is not None:
                return m
        return None


#: One identifier token: a run of lowercase letters (with its capital), an acronym, or digits.
_TOKEN = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")


def identifier_tokens(name: str) -> tuple[str, ...]:
    """The lowercase tokens of an identifier, split at ``_``, case humps and digits.

    ``input_layernorm`` → ``input``, ``layernorm``; ``Qwen2RMSNorm`` → ``qwen``, ``2``, ``rms``, ``norm``;
    ``norm1`` → ``norm``, ``1``. A buffer kind's ``exclude`` patterns are matched against these tokens,
    one at a time, so ``*norm`` matches ``layernorm`` and ``norm`` but never ``normal``.
    """
    return tuple(t.lower() for t in _TOKEN.findall(name))


@dataclass(frozen=True, slots=True)
class BufferKind:
    """A kind of whole buffer: getter method names and attribute name patterns (globs)."""

    name: str
    getters: tuple[str, ...]
    attributes: tuple[str, ...]
    #: ``exclude.name``: token patterns on the identifiers of the buffer expression (``self.q_norm.weight``)
    exclude_names: tuple[str, ...] = ()
    #: ``exclude.class``: token patterns on the class of the object that holds the buffer (``RMSNorm``)
    exclude_classes: tuple[str, ...] = ()
    infer_getters: bool = True
    weight: float = 1.0  # this kind's part of a finding's static score (a KV pool outranks a weight)

    def attribute_matches(self, attr: str) -> bool:
        return globs_match(self.attributes, attr)

    def excluded(self, names: Iterable[str], classes: Iterable[str] = ()) -> bool:
        """Is a buffer so named excluded? ``names``: the identifiers of its expression; ``classes``: the
        classes its holder may be (excluded only when every one of them matches). Never the function."""
        if any(globs_match(self.exclude_names, t) for n in names for t in identifier_tokens(n)):
            return True
        known = list(classes)
        return bool(known) and bool(self.exclude_classes) and all(
            any(globs_match(self.exclude_classes, t) for t in identifier_tokens(c)) for c in known)

    def exclusion(self, names: Iterable[str], classes: Iterable[str] = ()) -> str | None:
        """Why :meth:`excluded` (None when not): the pattern and the token it matched (of a name, or of
        every holder class). Slower than :meth:`excluded`; for explanations."""
        for n in names:
            for t in identifier_tokens(n):
                hit = next((g for g in self.exclude_names if globs_match((g,), t)), None)
                if hit is not None:
                    return f"exclude.name {hit!r} matches {t!r} of {n}"
        known = list(classes)
        if not known or not self.exclude_classes:
            return None
        why: list[str] = []
        for c in known:
            pair = next(((g, t) for t in identifier_tokens(c) for g in self.exclude_classes if globs_match((g,), t)),
                        None)
            if pair is None:
                return None
            why.append(f"{pair[0]!r} matches {pair[1]!r} of class {c}")
        return "exclude.class " + ", ".join(why)

    def extended(self, other: BufferKind, infer_getters: bool | None, weight: float | None = None) -> BufferKind:
        """This kind with ``other``'s names added (a later file naming the same kind); given flags override."""
        return BufferKind(
            self.name, _union(self.getters, other.getters), _union(self.attributes, other.attributes),
            _union(self.exclude_names, other.exclude_names), _union(self.exclude_classes, other.exclude_classes),
            self.infer_getters if infer_getters is None else infer_getters,
            self.weight if weight is None else weight,
        )


def _union(a: tuple[str, ...], b: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(a + b))


#: What a cast method reads and the dtype it yields, as the rule set sees it: the
#: :data:`castfind.core.casts.CASTS` entry with the rule files' ``casts:`` overrides applied.
CastSpec = CastMethod


@dataclass(frozen=True, slots=True)
class Rule:
    id: str
    name: str
    severity: Severity
    message: str
    cast: tuple[str, ...]
    buffers: tuple[str, ...]
    hot: bool | None
    once: bool | None
    fix: str
    match_example: str
    no_match_example: str
    source: str
    line: int
    #: Why such a cast costs (``why:``; every shipped rule has one): what ``castfind rule ID`` explains.
    why: str = ""

    @property
    def help_uri(self) -> str | None:
        """The README section documenting this rule when castfind ships it, else None (:func:`help_uri`)."""
        return help_uri(self.id, self.source)


@dataclass(frozen=True)
class CostSpec:
    """``cost:``: how configuration reaches the names a buffer's allocation is written over.

    ``config``: a Hugging Face ``config.json`` field → the names it binds (``num_hidden_layers`` →
    ``layer_num``, the pools' constructor parameter); ``flags``: ``kv_tokens`` / ``kv_cache_dtype`` / ``tp``
    (``--tp``: the tensor-parallel size the code divides a weight by) → the names they bind; ``defaults``: names
    bound unless something else binds them (``page_size: 1``);
    ``kv_cache_dtypes``: SGLang's ``--kv-cache-dtype`` spellings → torch dtypes; ``activation``: patterns of
    dtype expressions that stand for the model's activation dtype (``q.dtype``: bound to the name
    ``activation_dtype``).

    ``tiny``: when a buffer is small by construction (:func:`castfind.analysis.cost.small_by_construction`):
    ``max_literal``, the largest product of literal dimensions a small shape may have; ``small_dims``,
    patterns of dimension names that are small by what they count (kernel taps); ``max_bytes``,
    the bytes per step at or above which bound values make a small-by-construction buffer large (it
    stays an error). Unset: nothing is judged tiny.

    ``per_batch``: patterns of calls that make a new tensor on every call (``torch.cat``, ``torch.empty``): a
    parameter's cast whose every call on the deployment's path hands such a tensor (or rows of the batch, or an
    arithmetic result) is per-batch, not a whole buffer (:mod:`castfind.analysis.handed`).
    """

    config: tuple[tuple[str, tuple[str, ...]], ...] = ()
    flags: tuple[tuple[str, tuple[str, ...]], ...] = ()
    defaults: tuple[tuple[str, str], ...] = ()
    kv_cache_dtypes: tuple[tuple[str, str], ...] = ()
    activation: tuple[str, ...] = ()
    tiny_max_bytes: float | None = None
    tiny_max_literal: float = 1.0
    small_dims: tuple[str, ...] = ()
    per_batch: tuple[str, ...] = ()


#: The flags a ``cost.flags`` entry may name.
COST_FLAGS = ("kv_tokens", "kv_cache_dtype", "tp")
#: The server flags a ``deployment.flags`` entry may name (the scan options of the same name).
DEPLOYMENT_FLAGS = ("attention_backend", "kv_cache_dtype", "quantization", "tp")


@dataclass(frozen=True)
class PlatformSpec:
    """One ``deployment.platforms`` entry: ``holds``, patterns of the predicates true on this platform
    (``is_cuda``, ``_is_cuda``, ``*.is_cuda``); ``only``, those that may hold only on it (``_use_aiter``:
    open on rocm, false elsewhere). A predicate some platform lists is false on every platform that lists
    it in neither (platforms are exclusive)."""

    name: str
    holds: tuple[str, ...] = ()
    only: tuple[str, ...] = ()
    #: The device types a tensor may have on this platform (``cuda`` on rocm too); a device type no platform
    #: lists (``cpu``, which every platform may hold) decides nothing.
    devices: tuple[str, ...] = ()


@dataclass(frozen=True)
class DeploymentSpec:
    """``deployment:``: how the code spells the deployment (:mod:`castfind.analysis.deployment`):
    ``platforms`` (:class:`PlatformSpec`, in file order) and ``flags``: a server flag of
    :data:`DEPLOYMENT_FLAGS` → patterns of the fields that hold its value (``*server_args.attention_backend``).
    A pattern is an expression as written, quotes either way, ``()`` of a call with no arguments left out;
    ``*`` matches any text; it matches a test's name, attribute chain, subscript or call with no arguments
    when it matches the whole of it or the part after one of its dots."""

    platforms: tuple[PlatformSpec, ...] = ()
    flags: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: Patterns of the fields that hold a tensor's device type (``*device.type``), compared with a platform's
    #: ``devices``: ``x.device.type == "mps"`` is false on cuda.
    device_fields: tuple[str, ...] = ()
    #: A model-config key → patterns of the fields that hold whether the config has it (``kv_lora_rank`` →
    #: ``*.use_mla``: the backend's MLA switch follows the model's architecture), bound by ``--model-config``.
    model_fields: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def platform_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.platforms)

    def check_platform(self, name: str | None) -> None:
        """ValueError, one line listing the known ones, for a ``--platform`` no ``deployment.platforms`` names."""
        if name is not None and name not in self.platform_names():
            known = ", ".join(self.platform_names()) or "none (the rule files define no deployment.platforms)"
            raise ValueError(f"--platform {name}: unknown platform; known: {known}")


@dataclass(frozen=True)
class Registry:
    """``models.components.FLAG``: how an engine spells one registry of components a server flag picks
    from (:mod:`castfind.analysis.modelpath`). ``decorators``: a decorator that takes the key string,
    on a factory function (``@register_attention_backend("flashinfer")``): the entry yields the classes
    the factory constructs. ``tables``: a module-level dict literal keyed by strings
    (``{"fp8": Fp8Config, ...}``): the entry yields the class it names. ``tests``: a name a factory's
    branch tests (``runner.use_mla_backend``) → the model-config field whose presence makes it true.
    ``returns``: an entry also yields the classes its classes' methods return (a quantization config's
    ``get_quant_method`` → the linear method that holds the casts)."""

    flag: str
    decorators: tuple[str, ...] = ()
    tables: tuple[str, ...] = ()
    tests: tuple[tuple[str, str], ...] = ()
    returns: bool = False


@dataclass(frozen=True)
class ModelSpec:
    """``models:``: how an engine registers its model classes (``entry_variables``: a module-level
    ``EntryClass = X`` or ``= [X, Y]``) and the registries of components the deployment flags select."""

    entry_variables: tuple[str, ...] = ()
    registries: tuple[Registry, ...] = ()


#: The deployment flags a ``models.components`` registry may be keyed by (fields of ``pipeline.CostRequest``).
COMPONENT_FLAGS = ("attention_backend", "quantization")


@dataclass(frozen=True)
class RuleSet:
    """Everything the rule engine needs, merged from all rule files."""

    rules: tuple[Rule, ...]
    buffers: dict[str, BufferKind]
    entry_points: tuple[str, ...]
    once_functions: tuple[str, ...]
    once_decorators: tuple[str, ...]
    once_store_to_self: bool
    scalar_index: tuple[str, ...]
    views: tuple[str, ...]
    dtype_args: tuple[str, ...]
    casts: dict[str, CastSpec]
    sources: tuple[str, ...] = ()
    #: ``rank.entry_points``: a bonus for findings whose hot path starts at a matching function.
    entry_point_rank: dict[str, float] = field(default_factory=dict)
    #: ``cost:``: configuration → the names of allocation formulas (:mod:`castfind.analysis.cost`).
    cost: CostSpec = field(default_factory=CostSpec)
    #: ``deployment:``: the code's spellings of platforms and server flags (:class:`DeploymentSpec`). Read in
    #: ``post``, after the engine: not part of the repr the carried results' key digests.
    deployment: DeploymentSpec = field(default_factory=DeploymentSpec, repr=False)
    #: ``models:``: how the engine registers model classes and the component registries the flags pick from
    #: (:class:`ModelSpec`; read in ``post``).
    models: ModelSpec = field(default_factory=ModelSpec)
    #: ``steps:``: per step of the serving loop (``decode``, ``extend``), the entry points that run only on it;
    #: an entry no step lists runs on every step. Read in ``post`` (:func:`castfind.analysis.deployment.steps`).
    steps: tuple[tuple[str, tuple[str, ...]], ...] = field(default=(), repr=False)
    _words: re.Pattern[bytes] | None = field(default=None, compare=False)

    def is_entry(self, qualname: str) -> bool:
        return globs_match(self.entry_points, qualname)

    def off_step(self, qualname: str, step: str) -> bool:
        """Does the function run only on other steps than ``step`` (an entry some ``steps:`` list names, ``step``'s
        list not)?"""
        mine = [name for name, patterns in self.steps if globs_match(patterns, qualname)]
        return bool(mine) and step not in mine

    def is_once_function(self, name: str) -> bool:
        return globs_match(self.once_functions, name)

    def is_once_decorator(self, name: str) -> bool:
        """``functools.lru_cache`` matches ``lru_cache`` too (the name as imported, or its last part)."""
        return globs_match(self.once_decorators, name) or globs_match(self.once_decorators, name.rsplit(".", 1)[-1])

    def is_scalar_index(self, name: str) -> bool:
        return globs_match(self.scalar_index, name.rsplit(".", 1)[-1])

    def is_dtype_arg(self, text: str) -> bool:
        return globs_match(self.dtype_args, text)

    def cast_methods(self) -> set[str]:
        return {m for r in self.rules for m in r.cast}

    def kind_weight(self, kind: str) -> float:
        """A buffer kind's part of a finding's static score (1.0 for a kind no file defines)."""
        found = self.buffers.get(kind)
        return found.weight if found is not None else 1.0

    def entry_bonus(self, entry: str) -> float:
        """The largest ``rank.entry_points`` bonus whose pattern matches ``entry`` (0.0: none matches).

        The largest, not the sum: a broad pattern and a narrower one naming the same entry point
        should not stack, and the result does not depend on the order of the files.
        """
        bonuses = [b for p, b in self.entry_point_rank.items() if glob_match(p, entry)]
        return max(bonuses) if bonuses else 0.0

    def with_entry_points(self, extra: tuple[str, ...]) -> RuleSet:
        from dataclasses import replace

        return replace(self, entry_points=self.entry_points + tuple(extra))

    def buffer_words(self, inferable_only: bool = False) -> AnyPattern | None:
        """A byte regex for the text that can make a receiver a whole buffer (None: nothing can).

        A getter counts as a word (``get_key_buffer``); an attribute pattern only as an attribute
        access (``.kv_buffer``, ``. w13_weight``), since provenance ends at an attribute, never at a
        bare name: a parameter called ``weight`` is not a whole buffer. ``inferable_only``: the
        kinds whose getters are inferred (:class:`~castfind.analysis.getters.GetterOracle`).
        """
        getters: set[str] = set()
        attrs: set[str] = set()
        for kind in self.buffers.values():
            if inferable_only and not kind.infer_getters:
                continue
            getters.update(re.escape(g) for g in kind.getters)
            # Inside a name: `*` is a run of word characters, `?` one.
            attrs.update("(?:" + glob_regex(p, star=r"\w*", one=r"\w") + ")" for p in kind.attributes)
        alts: list[bytes] = []
        if getters:
            alts.append(b"(?:" + b"|".join(word_start(g.encode()) for g in sorted(getters)) + rb")\b")
        if attrs:
            # Whitespace, a line continuation or a comment may sit between the dot and the name.
            alts.append((r"\.(?:\s|\\\r?\n|#[^\n]*\n)*(?:" + "|".join(sorted(attrs)) + r")\b").encode())
        return AnyPattern(tuple(re.compile(a) for a in alts)) if alts else None


_TOP_KEYS = ("buffers", "entry_points", "steps", "once", "index", "views", "dtype_args", "casts", "rank", "cost",
             "deployment", "models", "rules")
_MODELS_KEYS = ("entry_variables", "components")
_REGISTRY_KEYS = ("decorator", "table", "tests", "returns")
_COST_KEYS = ("config", "flags", "defaults", "kv_cache_dtypes", "activation", "tiny", "per_batch")
_TINY_KEYS = ("max_bytes", "max_literal", "small_dims")
_KIND_KEYS = ("getters", "attributes", "exclude", "infer_getters", "replace", "weight")
#: The fields an ``exclude`` pattern may apply to (YAML key → what it matches).
_EXCLUDE_KEYS = ("name", "class")
_RULE_KEYS = ("id", "name", "severity", "message", "cast", "receiver", "hot", "once", "fix", "why", "examples")
_REQUIRED = ("id", "name", "severity", "message", "cast", "receiver", "examples")
_ID = re.compile(r"^CF\d{3}$")
_NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")


def default_rule_dir() -> Path:
    """The rule files shipped inside the package (``castfind.ruledata``, the repo's ``rules/``).

    A source tree's own ``rules/`` comes first: an editable install maps ``castfind.ruledata`` to the
    tree it was installed from, which is not this one when a second checkout (a git worktree) is run
    with its folder on ``PYTHONPATH``.
    """
    local = Path(__file__).resolve().parents[2] / "rules"  # castfind/core/rules.py -> the tree's rules/
    if (local / "castfind.yaml").is_file() and (local / "__init__.py").is_file():
        return local
    try:
        return Path(str(resources.files("castfind.ruledata")))
    except ModuleNotFoundError:  # running from a source tree that was not installed
        return local


def rule_files(dirs: list[str | Path]) -> list[Path]:
    """The rule files of ``dirs`` (files, or the ``*.yaml``/``*.yml`` of folders), each file once."""
    out: list[Path] = []
    for d in dirs:
        p = Path(d)
        if p.is_file() or (p.exists() and not p.is_dir()):  # a FIFO or device: refused when read, in one line
            out.append(p)
        elif p.is_dir():
            out += sorted(x for x in p.iterdir() if x.suffix in (".yaml", ".yml"))
        else:
            raise RuleError(str(p), 0, "--rules", "no such rule file or folder")
    seen: set[Path] = set()
    unique: list[Path] = []
    for f in out:  # `--rules rules/` names the default folder again: read it once, not as duplicates
        key = f.resolve()
        if key not in seen:
            seen.add(key)
            unique.append(f)
    return unique


def message_problem(message: str) -> str | None:
    """Why ``message`` is not an acceptable rule message template (None: it is).

    Only the :data:`MESSAGE_FIELDS` placeholders, no attribute or index access (``{expr.x}``,
    ``{expr[0]}``), no nested fields in a format spec and no width or precision over
    :data:`MAX_FORMAT_WIDTH` (``{expr:>99999999}`` would build a 100 MB string per finding).
    """
    try:
        parts = list(string.Formatter().parse(message))
    except ValueError as e:
        return f"unbalanced brace ({e}); write {{{{ or }}}} for a literal brace"
    names = ", ".join("{" + f + "}" for f in MESSAGE_FIELDS)
    for _, name, spec_or_none, conversion in parts:
        if name is None:
            continue
        spec = spec_or_none or ""
        if "." in name or "[" in name:
            return f"{{{name}}}: attribute or index access is not allowed; use one of {names}"
        if name not in MESSAGE_FIELDS:
            return f"unknown placeholder {{{name}}}; expected one of {names}"
        if conversion not in (None, "r", "s", "a"):
            return f"{{{name}!{conversion}}}: unknown conversion; use !r, !s or !a"
        if "{" in spec or "}" in spec:
            return f"{{{name}:{spec}}}: nested placeholders in a format spec are not allowed"
        if any(len(d.lstrip("0")) > 3 or int(d.lstrip("0") or "0") > MAX_FORMAT_WIDTH
               for d in re.findall(r"\d+", spec)):
            return f"{{{name}:{spec}}}: a width or precision over {MAX_FORMAT_WIDTH} is not allowed"
    try:
        message.format(**{f: "x" for f in MESSAGE_FIELDS})
    except (ValueError, TypeError) as e:
        return f"cannot format the message: {e}"
    return None


# --- reading a rule file --------------------------------------------------------------------------


class _Map(dict[Any, Any]):
    """A YAML mapping that keeps its line, each key's line and the keys written twice."""

    line: int
    key_lines: dict[Any, int]
    duplicates: list[tuple[Any, int, int]]  # (key, its line, the line of its first occurrence)


class _Seq(list[Any]):
    """A YAML list that keeps its line and each item's line."""

    line: int
    item_lines: list[int]


class _Loader(yaml.SafeLoader):
    """``yaml.SafeLoader`` building :class:`_Map` and :class:`_Seq`: positions for every message."""


def _construct_map(loader: _Loader, node: yaml.MappingNode) -> Iterator[_Map]:
    data = _Map()
    data.line, data.key_lines, data.duplicates = node.start_mark.line + 1, {}, []
    yield data
    # Keys merged in with `<<: *anchor` may be overridden; keys written twice may not.
    written = {id(k) for k, _ in node.value if k.tag != "tag:yaml.org,2002:merge"}
    loader.flatten_mapping(node)
    first: dict[Any, int] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node)
        try:
            hash(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping", node.start_mark, "found an unhashable key", key_node.start_mark
            ) from None
        line = key_node.start_mark.line + 1
        if id(key_node) in written:
            if key in first:
                data.duplicates.append((key, line, first[key]))
            else:
                first[key] = line
        data[key] = loader.construct_object(value_node)
        data.key_lines[key] = line


def _construct_seq(loader: _Loader, node: yaml.SequenceNode) -> Iterator[_Seq]:
    data = _Seq()
    data.line, data.item_lines = node.start_mark.line + 1, [n.start_mark.line + 1 for n in node.value]
    yield data
    data.extend(loader.construct_sequence(node))


_Loader.add_constructor("tag:yaml.org,2002:map", _construct_map)
_Loader.add_constructor("tag:yaml.org,2002:seq", _construct_seq)

#: The same loader over libyaml's parser, when PyYAML was built with it. PERF: the pure-Python
#: parser takes ~0.13 s for the bundled rules (a third of a warm scan); libyaml ~20x less. It reads a
#: valid file as the Python one does (same constructors and resolver); a file it rejects is read again
#: by :class:`_Loader`, whose messages (and line numbers) are the ones castfind reports.
_FastLoader: type | None = None
if hasattr(yaml, "CSafeLoader"):
    class _CLoader(yaml.CSafeLoader):
        """:class:`_Loader` over libyaml."""

    _CLoader.add_constructor("tag:yaml.org,2002:map", _construct_map)
    _CLoader.add_constructor("tag:yaml.org,2002:seq", _construct_seq)
    _FastLoader = _CLoader


def _what(value: Any) -> str:
    """How a wrong value reads in a message."""
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return f"the string {value[:40]!r}"
    if value is None:
        return "nothing"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    return f"a {type(value).__name__}"


def _key_line(m: Any, key: Any) -> int:
    return m.key_lines.get(key, m.line) if isinstance(m, _Map) else 0


def _join(where: str, key: Any) -> str:
    return f"{where}.{key}" if where else str(key)


def _rule_where(r: Any, i: int) -> str:
    rid = r.get("id") if isinstance(r, dict) else None
    return f"rule {rid}" if isinstance(rid, str) and rid else f"rules[{i}]"


@dataclass(frozen=True)
class _File:
    """One rule file being read: its path and the problems found in it."""

    path: str
    errors: list[RuleError] = field(default_factory=list)

    def err(self, line: int, key: str, reason: str) -> None:
        self.errors.append(RuleError(self.path, line, key, reason))

    def keys(self, m: _Map, allowed: Iterable[str], where: str) -> None:
        allowed = tuple(allowed)
        for k in m:
            if k not in allowed:
                self.err(_key_line(m, k), _join(where, k), f"unknown key; expected one of {sorted(allowed)}")

    def mapping(self, m: _Map, key: str, where: str, shape: str = "") -> _Map | None:
        """``m[key]`` when it is a mapping; None when it is absent or null (or wrong: reported)."""
        value = m.get(key)
        if value is None or isinstance(value, _Map):
            return value
        self.err(_key_line(m, key), where, f"expected a mapping{shape}, got {_what(value)}")
        return None

    def strings(self, m: _Map, key: str, where: str) -> tuple[str, ...]:
        """``m[key]`` as a list of strings (a lone string is a list of one)."""
        value = m.get(key)
        if value is None:
            return ()
        if isinstance(value, str):
            return (value,)
        if not isinstance(value, _Seq):
            self.err(_key_line(m, key), where, f"expected a list of strings, got {_what(value)}")
            return ()
        for i, item in enumerate(value):
            if not isinstance(item, str):
                self.err(value.item_lines[i], where, f"expected a string, got {_what(item)} (item {i + 1})")
        return tuple(item for item in value if isinstance(item, str))

    def string(self, m: _Map, key: str, where: str) -> str | None:
        value = m.get(key)
        if value is None or isinstance(value, str):
            return value
        self.err(_key_line(m, key), where, f"expected a string, got {_what(value)}")
        return None

    def boolean(self, m: _Map, key: str, where: str) -> bool | None:
        """``m[key]`` when it is true or false; None when absent or null (or wrong: reported)."""
        value = m.get(key)
        if value is None or isinstance(value, bool):
            return value
        why = " (quoted, it is a string, and any non-empty string counts as true)" if isinstance(value, str) else ""
        self.err(_key_line(m, key), where, f"expected true or false, got {_what(value)}{why}")
        return None

    def number(self, m: _Map, key: str, where: str) -> float | None:
        """``m[key]`` as a float when it is a number; None when absent or null (or wrong: reported)."""
        value = m.get(key)
        return None if value is None else self.number_value(value, _key_line(m, key), where)

    def number_value(self, value: Any, line: int, where: str) -> float | None:
        """``value`` as a float when it is an int or a float (a YAML ``true`` is not a number)."""
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
        self.err(line, where, f"expected a finite number, got {_what(value)}")
        return None

    def duplicates(self, node: Any, where: str, seen: set[int]) -> None:
        """Report every key written twice in one mapping, anywhere under ``node``."""
        if id(node) in seen:  # an alias seen before (or a recursive one)
            return
        seen.add(id(node))
        if isinstance(node, _Map):
            for key, line, first in node.duplicates:
                self.err(line, _join(where, key), f"duplicate key (first at line {first}); YAML keeps only the last")
            for k, v in node.items():
                self.duplicates(v, _join(where, k), seen)
        elif isinstance(node, _Seq):
            for i, v in enumerate(node):
                self.duplicates(v, _rule_where(v, i) if where == "rules" else f"{where}[{i}]", seen)


def _read(f: _File, path: Path) -> Any:
    try:
        text = read_input(path, "rules").decode("utf-8")
    except InputError as e:
        f.err(0, "file", str(e))
        return None
    except (OSError, UnicodeDecodeError) as e:
        f.err(0, "file", f"cannot read: {e}")
        return None
    if _FastLoader is not None:
        fast = _FastLoader(text)
        try:
            return fast.get_single_data()
        except (yaml.YAMLError, RecursionError):
            pass  # read again below, for the Python parser's message
        finally:
            fast.dispose()
    loader: _Loader | None = None
    try:
        loader = _Loader(text)
        return loader.get_single_data()
    except yaml.reader.ReaderError as e:  # a character YAML does not allow
        f.err(text.count("\n", 0, e.position) + 1, "yaml", str(e).split("\n")[0])
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        f.err((mark.line + 1) if mark else 0, "yaml", str(getattr(e, "problem", None) or e))
    except RecursionError:
        f.err(0, "yaml", "nested too deeply")
    finally:
        if loader is not None:
            loader.dispose()
    return None


def _parse_file(path: Path, acc: dict[str, Any], errors: list[RuleError]) -> None:
    f = _File(str(path))
    data = _read(f, path)
    if data is not None and not isinstance(data, _Map):
        f.err(1, "file", f"a rule file must be a mapping with 'rules', 'buffers', ...; got {_what(data)}")
    elif data is not None:
        f.duplicates(data, "", set())
        f.keys(data, _TOP_KEYS, "")
        _parse_sections(f, data, acc)
    errors += sorted(f.errors, key=lambda e: e.line)


def _parse_sections(f: _File, data: _Map, acc: dict[str, Any]) -> None:
    buffers = f.mapping(data, "buffers", "buffers", " of buffer kinds")
    if buffers is not None:
        for name, spec in buffers.items():
            _parse_kind(f, buffers, name, spec, acc["buffers"])
    acc["entry_points"] += f.strings(data, "entry_points", "entry_points")
    _parse_steps(f, data, acc["steps"])
    once = f.mapping(data, "once", "once", " {functions: [...], decorators: [...], store_to_self: BOOL}")
    if once is not None:
        if "guards" in once:  # the old substring list: memo guards are now recognised by structure
            f.err(_key_line(once, "guards"), "once.guards",
                  "no longer read: a cast is memoised when a test of the location it is stored to guards it "
                  "(`if self._w is None:`, `if key not in cache:`, an early return); remove this key")
        f.keys(once, ("functions", "decorators", "store_to_self", "guards"), "once")
        acc["once_functions"] += f.strings(once, "functions", "once.functions")
        acc["once_decorators"] += f.strings(once, "decorators", "once.decorators")
        store = f.boolean(once, "store_to_self", "once.store_to_self")
        if store is not None:
            acc["once_store_to_self"] = store
    index = f.mapping(data, "index", "index", " {scalar: [NAME, ...]}")
    if index is not None:
        f.keys(index, ("scalar",), "index")
        acc["scalar_index"] += f.strings(index, "scalar", "index.scalar")
    acc["views"] += f.strings(data, "views", "views")
    acc["dtype_args"] += f.strings(data, "dtype_args", "dtype_args")
    casts = f.mapping(data, "casts", "casts", " of cast methods")
    if casts is not None:
        for m, spec in casts.items():
            _parse_cast_override(f, casts, m, spec, acc["casts"])
    _parse_rank(f, data, acc["entry_point_rank"])
    _parse_cost(f, data, acc["cost"])
    _parse_deployment(f, data, acc["deployment"])
    _parse_models(f, data, acc["models"])
    rules = data.get("rules")
    if rules is None:
        return
    if not isinstance(rules, _Seq):
        f.err(_key_line(data, "rules"), "rules", f"expected a list of rules, got {_what(rules)}")
        return
    for i, r in enumerate(rules):
        _parse_rule(f, r, i, rules.item_lines[i], acc)


def _parse_steps(f: _File, data: _Map, acc: dict[str, tuple[str, ...]]) -> None:
    """``steps: {STEP: [PATTERN]}``: the entry points that run only on that step; a later file adds patterns."""
    steps = f.mapping(data, "steps", "steps", " {STEP: [ENTRY PATTERN, ...]}")
    if steps is None:
        return
    for name in steps:
        if not isinstance(name, str) or not name:
            f.err(_key_line(steps, name), "steps", f"a step's name is a string, got {_what(name)}")
            continue
        acc[name] = tuple(dict.fromkeys(acc.get(name, ()) + f.strings(steps, name, f"steps.{name}")))


def _unknown_cast(m: str) -> str:
    """The reason for a cast method :mod:`castfind.core.casts` does not list."""
    known = ", ".join(sorted(cast_table.names()))
    return f"unknown cast method {m!r}: castfind does not extract it; known: {known}"


def _operand(text: str) -> Operand | None:
    """``text`` as an :data:`~castfind.core.casts.Operand`, or None when it is neither."""
    if text == "receiver":
        return "receiver"
    if text == "argument":
        return "argument"
    return None


def _parse_cast_override(f: _File, casts: _Map, m: Any, spec: Any, specs: dict[str, CastSpec]) -> None:
    """One ``casts:`` entry: overrides of a known method's operand or dtype (a new method is an error).

    A key left out keeps the default from :mod:`castfind.core.casts`; ``dtype: null`` says the dtype is
    taken from the call's arguments.
    """
    where = f"casts.{m}"
    line = _key_line(casts, m)
    if not isinstance(m, str):
        f.err(line, where, f"a cast method's name is a string, got {_what(m)}")
        return
    if m not in specs:
        f.err(line, where, _unknown_cast(m))
        return
    if not isinstance(spec, _Map):
        f.err(line, where, f"expected a mapping {{operand: receiver|argument, dtype: NAME?}}, got {_what(spec)}")
        return
    before = len(f.errors)
    f.keys(spec, ("operand", "dtype"), where)
    text = f.string(spec, "operand", f"{where}.operand")
    operand = _operand(text) if text is not None else specs[m].operand
    if operand is None:
        f.err(_key_line(spec, "operand"), f"{where}.operand", f"expected receiver or argument, got {_what(text)}")
    dtype = f.string(spec, "dtype", f"{where}.dtype") if "dtype" in spec else specs[m].dtype
    if len(f.errors) == before and operand is not None:
        specs[m] = dataclasses.replace(specs[m], operand=operand, dtype=dtype)


def _parse_rank(f: _File, data: _Map, entry_rank: dict[str, float]) -> None:
    """``rank: {entry_points: {PATTERN: BONUS}}``; a pattern named again (a later file) takes the new bonus."""
    rank = f.mapping(data, "rank", "rank", " {entry_points: {PATTERN: NUMBER}}")
    if rank is None:
        return
    f.keys(rank, ("entry_points",), "rank")
    table = f.mapping(rank, "entry_points", "rank.entry_points", " {PATTERN: NUMBER}")
    for pattern, value in (table or {}).items():
        where = f"rank.entry_points.{pattern}"
        line = _key_line(table, pattern)
        if not isinstance(pattern, str):
            f.err(line, where, f"an entry point pattern is a string, got {_what(pattern)}")
            continue
        bonus = f.number_value(value, line, where)
        if bonus is not None:
            entry_rank[pattern] = bonus


def _parse_cost(f: _File, data: _Map, acc: dict[str, dict[str, Any]]) -> None:
    """``cost: {config: {FIELD: [NAME]}, flags: {FLAG: [NAME]}, defaults: {NAME: VALUE},
    kv_cache_dtypes: {SPELLING: DTYPE}, activation: [PATTERN], tiny: {max_bytes: N, max_literal: N,
    small_dims: [PATTERN]}, per_batch: [PATTERN]}``; a later file's entries override (patterns add up)."""
    cost = f.mapping(data, "cost", "cost", " {config: ..., flags: ..., defaults: ..., kv_cache_dtypes: ...}")
    if cost is None:
        return
    f.keys(cost, _COST_KEYS, "cost")
    for section in ("config", "flags"):
        table = f.mapping(cost, section, f"cost.{section}", " {NAME: [PARAMETER, ...]}")
        if table is None:
            continue
        for key in table:
            where = f"cost.{section}.{key}"
            if not isinstance(key, str):
                f.err(_key_line(table, key), where, f"expected a name, got {_what(key)}")
                continue
            if section == "flags" and key not in COST_FLAGS:
                f.err(_key_line(table, key), where, f"unknown flag; expected one of {list(COST_FLAGS)}")
                continue
            acc[section][key] = f.strings(table, key, where)
    for section in ("defaults", "kv_cache_dtypes"):
        table = f.mapping(cost, section, f"cost.{section}", " {NAME: VALUE}")
        for key, value in (table or {}).items():
            where = f"cost.{section}.{key}"
            if not isinstance(key, str):
                f.err(_key_line(table, key), where, f"expected a name, got {_what(key)}")
            elif isinstance(value, bool) or not isinstance(value, (str, int, float)):
                f.err(_key_line(table, key), where, f"expected a number or a string, got {_what(value)}")
            else:
                acc[section][key] = str(value)
    acc["activation"]["*"] = (*acc["activation"].get("*", ()), *f.strings(cost, "activation", "cost.activation"))
    acc["per_batch"]["*"] = (*acc["per_batch"].get("*", ()), *f.strings(cost, "per_batch", "cost.per_batch"))
    tiny = f.mapping(cost, "tiny", "cost.tiny", " {max_bytes: N, max_literal: N, small_dims: [PATTERN, ...]}")
    if tiny is None:
        return
    f.keys(tiny, _TINY_KEYS, "cost.tiny")
    for key in ("max_bytes", "max_literal"):
        n = f.number(tiny, key, f"cost.tiny.{key}")
        if n is not None and n < 0:
            f.err(_key_line(tiny, key), f"cost.tiny.{key}", f"expected a number >= 0, got {n:g}")
        elif n is not None:
            acc["tiny"][key] = n
    if "small_dims" in tiny:
        acc["tiny"]["small_dims"] = f.strings(tiny, "small_dims", "cost.tiny.small_dims")


def _parse_deployment(f: _File, data: _Map, acc: dict[str, dict[str, Any]]) -> None:
    """``deployment: {platforms: {NAME: {holds: [PATTERN], only: [PATTERN], devices: [TYPE]}}, flags: {FLAG:
    [PATTERN]}, device_fields: [PATTERN], model_fields: {CONFIG_KEY: [PATTERN]}}``; a
    later file's patterns are added to the earlier ones (another engine's spellings, no code)."""
    dep = f.mapping(data, "deployment", "deployment", " {platforms: {NAME: {holds: [...], only: [...]}}, flags: ...}")
    if dep is None:
        return
    f.keys(dep, ("platforms", "flags", "device_fields", "model_fields"), "deployment")
    acc["device_fields"]["*"] = _union(acc["device_fields"].get("*", ()),
                                       _patterns(f, dep, "device_fields", "deployment.device_fields"))
    platforms = f.mapping(dep, "platforms", "deployment.platforms", " {NAME: {holds: [PATTERN], only: [PATTERN]}}")
    for name, spec in (platforms or {}).items():
        where = f"deployment.platforms.{name}"
        if not isinstance(name, str) or not name:
            f.err(_key_line(platforms, name), where, f"expected a platform name, got {_what(name)}")
            continue
        if not isinstance(spec, _Map):
            f.err(_key_line(platforms, name), where,
                  f"expected a mapping {{holds: [...], only: [...], devices: [...]}}, got {_what(spec)}")
            continue
        f.keys(spec, ("holds", "only", "devices"), where)
        have = acc["platforms"].setdefault(name, {"holds": (), "only": (), "devices": ()})
        for key in ("holds", "only", "devices"):
            have[key] = _union(have[key], _patterns(f, spec, key, f"{where}.{key}"))
    flags = f.mapping(dep, "flags", "deployment.flags", " {FLAG: [PATTERN, ...]}")
    for key in flags if flags is not None else ():
        assert flags is not None
        where = f"deployment.flags.{key}"
        if key not in DEPLOYMENT_FLAGS:
            f.err(_key_line(flags, key), where, f"unknown flag; expected one of {list(DEPLOYMENT_FLAGS)}")
            continue
        acc["flags"][key] = _union(acc["flags"].get(key, ()), _patterns(f, flags, key, where))
    fields = f.mapping(dep, "model_fields", "deployment.model_fields", " {CONFIG_KEY: [PATTERN, ...]}")
    for key in fields if fields is not None else ():
        assert fields is not None
        where = f"deployment.model_fields.{key}"
        if not isinstance(key, str) or not key:
            f.err(_key_line(fields, key), where, f"expected a model-config key, got {_what(key)}")
            continue
        acc["model_fields"][key] = _union(acc["model_fields"].get(key, ()), _patterns(f, fields, key, where))


def _deployment_spec(acc: dict[str, dict[str, Any]]) -> DeploymentSpec:
    return DeploymentSpec(tuple(PlatformSpec(n, p["holds"], p["only"], p["devices"]) for n, p in acc["platforms"].items()),
                          tuple(acc["flags"].items()), acc["device_fields"].get("*", ()),
                          tuple(acc["model_fields"].items()))


def _patterns(f: _File, m: _Map, key: str, where: str) -> tuple[str, ...]:
    """``m[key]`` as deployment patterns: strings, none empty."""
    got = f.strings(m, key, where)
    if any(not p.strip() for p in got):
        f.err(_key_line(m, key), where, "an empty pattern matches nothing; remove it")
    return tuple(p for p in got if p.strip())


def _parse_models(f: _File, data: _Map, acc: dict[str, Any]) -> None:
    """``models: {entry_variables: [NAME], components: {FLAG: {decorator: [NAME], table: [NAME],
    tests: {NAME: CONFIG_FIELD}, returns: BOOL}}}``; later files add names, and a flag's registry named
    again is extended (its ``returns``, when given, overrides)."""
    models = f.mapping(data, "models", "models", " {entry_variables: [...], components: {...}}")
    if models is None:
        return
    f.keys(models, _MODELS_KEYS, "models")
    acc["entry_variables"] += f.strings(models, "entry_variables", "models.entry_variables")
    components = f.mapping(models, "components", "models.components", " {FLAG: {decorator: ..., table: ...}}")
    for flag, spec in (components or {}).items():
        where = f"models.components.{flag}"
        if flag not in COMPONENT_FLAGS:
            f.err(_key_line(components, flag), where, f"unknown flag; expected one of {list(COMPONENT_FLAGS)}")
            continue
        if not isinstance(spec, _Map):
            f.err(_key_line(components, flag), where, f"expected a mapping {{decorator: ..., table: ...}}, "
                                                      f"got {_what(spec)}")
            continue
        f.keys(spec, _REGISTRY_KEYS, where)
        old = acc["registries"].get(flag, Registry(flag))
        tests = dict(old.tests)
        table = f.mapping(spec, "tests", f"{where}.tests", " {NAME: CONFIG_FIELD}")
        for name, value in (table or _Map()).items():
            if not isinstance(name, str) or not isinstance(value, str):
                f.err(_key_line(table, name), f"{where}.tests.{name}",
                      f"expected a name and a config field, got {_what(name)}: {_what(value)}")
            else:
                tests[name] = value
        returns = f.boolean(spec, "returns", f"{where}.returns")
        acc["registries"][flag] = Registry(flag, old.decorators + f.strings(spec, "decorator", f"{where}.decorator"),
                                           old.tables + f.strings(spec, "table", f"{where}.table"),
                                           tuple(tests.items()), old.returns if returns is None else returns)


def _cost_spec(acc: dict[str, dict[str, Any]]) -> CostSpec:
    tiny = acc["tiny"]
    return CostSpec(tuple(acc["config"].items()), tuple(acc["flags"].items()), tuple(acc["defaults"].items()),
                    tuple(acc["kv_cache_dtypes"].items()), tuple(dict.fromkeys(acc["activation"].get("*", ()))),
                    tiny.get("max_bytes"), tiny.get("max_literal", 1.0), tuple(tiny.get("small_dims", ())),
                    tuple(dict.fromkeys(acc["per_batch"].get("*", ()))))


def _parse_kind(f: _File, buffers: _Map, name: Any, spec: Any, kinds: dict[str, BufferKind]) -> None:
    where = f"buffers.{name}"
    line = _key_line(buffers, name)
    if not isinstance(name, str):
        f.err(line, where, f"a buffer kind's name is a string, got {_what(name)}")
        return
    if not isinstance(spec, _Map):
        f.err(line, where, f"expected a mapping with getters/attributes, got {_what(spec)}")
        return
    if "exclude_in" in spec:
        f.err(_key_line(spec, "exclude_in"), f"{where}.exclude_in",
              "no longer supported: it matched the enclosing function's name, which says nothing about the buffer "
              "(forward_normal is not a norm); write exclude: {class: [PATTERN, ...]} for the class that holds it")
    f.keys(spec, (*_KIND_KEYS, "exclude_in"), where)
    names, classes = _parse_exclude(f, spec, f"{where}.exclude")
    kind = BufferKind(
        name,
        f.strings(spec, "getters", f"{where}.getters"),
        f.strings(spec, "attributes", f"{where}.attributes"),
        names,
        classes,
    )
    infer = f.boolean(spec, "infer_getters", f"{where}.infer_getters")
    replace = f.boolean(spec, "replace", f"{where}.replace")
    weight = f.number(spec, "weight", f"{where}.weight")
    earlier = kinds.get(name)
    if earlier is None or replace:
        # A replaced kind keeps its weight unless given one: the weight ranks what the kind *is*
        # (a KV pool), not the names that find it.
        kept = earlier.weight if earlier is not None else 1.0
        kinds[name] = dataclasses.replace(kind, infer_getters=True if infer is None else infer,
                                          weight=kept if weight is None else weight)
    else:  # a kind named again extends the earlier one (`replace: true` says otherwise)
        kinds[name] = earlier.extended(kind, infer, weight)


def _parse_exclude(f: _File, spec: _Map, where: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A kind's ``exclude: {name: [...], class: [...]}``: token patterns, each for the field its key names.

    A token is lowercase and holds no ``_`` or ``.`` (:func:`identifier_tokens`), so a pattern with an
    uppercase letter, an underscore or a dot could never match: each such pattern is an error at its line.
    """
    exclude = f.mapping(spec, "exclude", where, " {name: [PATTERN, ...], class: [PATTERN, ...]} that says which "
                        "field each pattern applies to")
    if exclude is None:
        return (), ()
    f.keys(exclude, _EXCLUDE_KEYS, where)
    out: list[tuple[str, ...]] = []
    for key in _EXCLUDE_KEYS:
        at = f"{where}.{key}"
        patterns = f.strings(exclude, key, at)
        items = exclude.get(key)
        lines = items.item_lines if isinstance(items, _Seq) else [_key_line(exclude, key)] * len(patterns)
        good: list[str] = []
        for pattern, line in zip(patterns, lines, strict=False):
            bad = [why for why, hit in (("an underscore", "_" in pattern), ("a dot", "." in pattern),
                                        ("an uppercase letter", pattern != pattern.lower())) if hit]
            if bad:
                f.err(line, at, f"{pattern!r} has {' and '.join(bad)}, which no token holds: patterns match the "
                                "lowercase tokens of each identifier, split at '_', case humps and digits "
                                "(input_layernorm -> input, layernorm; RMSNorm -> rms, norm)")
            else:
                good.append(pattern)
        out.append(tuple(good))
    return out[0], out[1]


def _parse_rule(f: _File, r: Any, i: int, line: int, acc: dict[str, Any]) -> None:
    if not isinstance(r, _Map):
        f.err(line, f"rules[{i}]", f"each rule must be a mapping, got {_what(r)}")
        return
    where = _rule_where(r, i)
    before = len(f.errors)
    f.keys(r, _RULE_KEYS, where)
    for k in _REQUIRED:
        if r.get(k) is None:
            f.err(_key_line(r, k) if k in r else line, f"{where}.{k}", "required key is missing")
    rid = f.string(r, "id", f"{where}.id")
    if rid is not None and not _ID.match(rid):
        f.err(_key_line(r, "id"), f"{where}.id", "ids look like CF101")
    name = f.string(r, "name", f"{where}.name")
    if name is not None and not _NAME.match(name):
        f.err(_key_line(r, "name"), f"{where}.name", "names are kebab-case")
    severity_text = f.string(r, "severity", f"{where}.severity")
    severity = severity_text if is_severity(severity_text) else None
    if severity_text is not None and severity is None:
        f.err(_key_line(r, "severity"), f"{where}.severity", f"must be one of {list(SEVERITIES)}")
    message = f.string(r, "message", f"{where}.message")
    problem = message_problem(message) if message is not None else None
    if problem:
        f.err(_key_line(r, "message"), f"{where}.message", problem)
    n = len(f.errors)
    cast = f.strings(r, "cast", f"{where}.cast")
    if r.get("cast") is not None and not cast and len(f.errors) == n:
        f.err(_key_line(r, "cast"), f"{where}.cast", "needs at least one cast method")
    _check_cast_names(f, r, cast, f"{where}.cast")
    hot = f.boolean(r, "hot", f"{where}.hot")
    once = f.boolean(r, "once", f"{where}.once")
    fix = f.string(r, "fix", f"{where}.fix")
    why = f.string(r, "why", f"{where}.why")
    n = len(f.errors)
    receiver = f.mapping(r, "receiver", f"{where}.receiver", " {buffer: [KIND, ...]}")
    kinds: tuple[str, ...] = ()
    if receiver is not None:
        f.keys(receiver, ("buffer",), f"{where}.receiver")
        kinds = f.strings(receiver, "buffer", f"{where}.receiver.buffer")
    if receiver is not None and not kinds and len(f.errors) == n:
        f.err(_key_line(r, "receiver"), f"{where}.receiver", "expected {buffer: [KIND, ...]}")
    examples = f.mapping(r, "examples", f"{where}.examples", " {match: CODE, no_match: CODE}")
    match = no_match = None
    if examples is not None:
        n = len(f.errors)
        f.keys(examples, ("match", "no_match"), f"{where}.examples")
        match = f.string(examples, "match", f"{where}.examples.match")
        no_match = f.string(examples, "no_match", f"{where}.examples.no_match")
        if (not match or not no_match) and len(f.errors) == n:
            f.err(_key_line(r, "examples"), f"{where}.examples",
                  "needs both 'match' and 'no_match' code (a line marked '# match' must be flagged)")
    if len(f.errors) > before:
        return
    assert rid and name and severity and message is not None and match and no_match
    acc["rules"].append(Rule(rid, name, severity, message, cast, kinds, hot, once, fix or "", match, no_match,
                             f.path, line, why or ""))


def _check_cast_names(f: _File, r: _Map, cast: tuple[str, ...], where: str) -> None:
    """Report each method of a rule's ``cast:`` list that :mod:`castfind.core.casts` lacks, at its own line."""
    known = cast_table.names()
    items = r.get("cast")
    if isinstance(items, _Seq) and len(items.item_lines) == len(items):
        positioned = list(zip(items, items.item_lines, strict=True))
    else:  # a lone string (`cast: to`): the key's line
        positioned = [(m, _key_line(r, "cast")) for m in cast]
    for m, line in positioned:
        if isinstance(m, str) and m not in known:
            f.err(line, where, _unknown_cast(m))


def load_rules(dirs: list[str | Path] | None = None, include_default: bool = True) -> RuleSet:
    """Load the default rules plus ``dirs``; raise the first :class:`RuleError` if any."""
    rs, errors = validate(dirs, include_default)
    if errors:
        raise errors[0]
    assert rs is not None
    return rs


def validate(dirs: list[str | Path] | None = None, include_default: bool = True) -> tuple[RuleSet | None, list[RuleError]]:
    """Every problem in the rule files (empty list when all are valid) and the merged set."""
    errors: list[RuleError] = []
    acc: dict[str, Any] = {"rules": [], "buffers": {}, "entry_points": (), "once_functions": (), "once_decorators": (),
                           "once_store_to_self": True, "scalar_index": (), "views": (), "dtype_args": (),
                           "casts": dict(cast_table.by_name()), "entry_point_rank": {}, "steps": {},
                           "cost": {"config": {}, "flags": {}, "defaults": {}, "kv_cache_dtypes": {}, "activation": {},
                                    "tiny": {}, "per_batch": {}},
                           "deployment": {"platforms": {}, "flags": {}, "device_fields": {}, "model_fields": {}},
                           "models": {"entry_variables": (), "registries": {}}}
    wanted: list[str | Path] = [default_rule_dir()] if include_default else []
    try:
        files = rule_files(wanted + list(dirs or []))
    except RuleError as e:
        return None, [e]
    for f in files:
        _parse_file(f, acc, errors)
    seen: dict[str, Rule] = {}
    for r in acc["rules"]:
        if r.id in seen:
            errors.append(RuleError(r.source, r.line, f"rule {r.id}.id", f"duplicate id (also in {seen[r.id].source}:{seen[r.id].line})"))
        seen[r.id] = r
        for k in r.buffers:
            if k not in acc["buffers"]:
                errors.append(RuleError(r.source, r.line, f"rule {r.id}.receiver.buffer",
                                        f"unknown buffer kind {k!r}; define it under 'buffers'"))
    rs = RuleSet(tuple(acc["rules"]), acc["buffers"], acc["entry_points"], acc["once_functions"], acc["once_decorators"],
                 acc["once_store_to_self"], acc["scalar_index"], acc["views"], acc["dtype_args"], acc["casts"],
                 tuple(str(f) for f in files), acc["entry_point_rank"], _cost_spec(acc["cost"]),
                 _deployment_spec(acc["deployment"]),
                 ModelSpec(tuple(dict.fromkeys(acc["models"]["entry_variables"])),
                           tuple(acc["models"]["registries"].values())), steps=tuple(acc["steps"].items()))
    return rs, errors


#: The ``source`` of the rules defined here rather than in a rule file.
BUILT_IN = "castfind.core.rules"
#: Where the shipped rules are documented: README's ``## Rules`` section, one anchor per rule id.
RULES_DOC = "https://github.com/castfind/castfind/blob/main/README.md"


def help_uri(rule_id: str, source: str) -> str | None:
    """The README section documenting a shipped rule (``...README.md#cf101``), or None for a user's rule."""
    if source != BUILT_IN:
        try:
            if Path(source).resolve().parent != default_rule_dir().resolve():
                return None
        except OSError:
            return None
    return f"{RULES_DOC}#{rule_id.lower()}"


#: CF900, the one rule without a rule file: :mod:`castfind.runtime.join` reports a cast measured at run time
#: that no rule flagged under it, and reporters describe it from here. Its severity is the default a rule
#: list shows; each CF900 finding is graded by the bytes it moved (``castfind.runtime.join.severity_for``).
#: CF001, reported after suppression (``castfind.pipeline.post``): a ``# castfind: ignore`` comment
#: that silenced no finding, as ruff's RUF100. Its message is filled with the comment and what is idle.
UNUSED_SUPPRESSION = Rule("CF001", "unused-suppression", "warning", "{comment}: {what}", (), (), None, None,
                          "Remove the comment, or the rule ids in it that no longer match a finding on its line.",
                          "", "", BUILT_IN, 0,
                          "A suppression comment that silences nothing hides the next real finding on its line "
                          "without anyone deciding to: the cast it was written for is gone or fixed, and the "
                          "comment outlived it.")
MEASURED_CAST = Rule("CF900", "measured-cast-without-rule", "warning",
                     "a cast measured at run time that no rule flagged", (), (), None, None,
                     "Check whether this cast must run on every step.", "", "", BUILT_IN, 0,
                     "A runtime trace measured this cast moving many bytes, but no static rule flagged its line: "
                     "either the buffer's provenance was lost (a call castfind could not follow) or the cast is a "
                     "kind no rule covers. Its bytes per call are what it costs.")
