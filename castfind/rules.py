"""Rules: load and validate the YAML rule files (``rules/*.yaml`` plus ``--rules DIR``).

A rule file may hold shared ``buffers`` kinds, ``entry_points``, ``once`` contexts, ``index`` name
patterns, ``dtype_args`` and ``casts`` (what each cast method reads and produces), and ``rules``.
Files are merged in order (later files extend lists and add rules). Every problem is a
:class:`RuleError` with the file, line and offending key; :func:`validate` returns them all.

Patterns (entry points, once functions, index names, dtype arguments, buffer attributes and
excludes) are shell globs, matched as :func:`fnmatch.fnmatchcase` does by :func:`glob_regex`, which
does not depend on the text of :func:`fnmatch.translate` (that changed in Python 3.14).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from castfind.types import SEVERITIES


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


@dataclass(frozen=True, slots=True)
class BufferKind:
    """A kind of whole buffer: getter method names and attribute name patterns (globs)."""

    name: str
    getters: tuple[str, ...]
    attributes: tuple[str, ...]
    exclude: tuple[str, ...] = ()  # patterns on the dotted receiver path (``*norm*.weight``)
    exclude_in: tuple[str, ...] = ()  # patterns on the enclosing function's qualname
    infer_getters: bool = True

    def attribute_matches(self, attr: str) -> bool:
        return globs_match(self.attributes, attr)

    def excluded(self, path: str, function: str) -> bool:
        return globs_match(self.exclude, path) or globs_match(self.exclude_in, function)


@dataclass(frozen=True, slots=True)
class CastSpec:
    """What a cast method reads (its receiver or its first argument) and the dtype it yields."""

    operand: str  # receiver | argument
    dtype: str | None  # fixed result dtype (``float`` → float32), None: taken from the arguments


@dataclass(frozen=True, slots=True)
class Rule:
    id: str
    name: str
    severity: str
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


@dataclass(frozen=True)
class RuleSet:
    """Everything the rule engine needs, merged from all rule files."""

    rules: tuple[Rule, ...]
    buffers: dict[str, BufferKind]
    entry_points: tuple[str, ...]
    once_functions: tuple[str, ...]
    once_guards: tuple[str, ...]
    once_store_to_self: bool
    scalar_index: tuple[str, ...]
    views: tuple[str, ...]
    dtype_args: tuple[str, ...]
    casts: dict[str, CastSpec]
    sources: tuple[str, ...] = ()
    _words: re.Pattern[bytes] | None = field(default=None, compare=False)

    def is_entry(self, qualname: str) -> bool:
        return globs_match(self.entry_points, qualname)

    def is_once_function(self, name: str) -> bool:
        return globs_match(self.once_functions, name)

    def is_scalar_index(self, name: str) -> bool:
        return globs_match(self.scalar_index, name.rsplit(".", 1)[-1])

    def is_dtype_arg(self, text: str) -> bool:
        return globs_match(self.dtype_args, text)

    def cast_methods(self) -> set[str]:
        return {m for r in self.rules for m in r.cast}

    def with_entry_points(self, extra: tuple[str, ...]) -> "RuleSet":
        from dataclasses import replace

        return replace(self, entry_points=self.entry_points + tuple(extra))

    def buffer_words(self, inferable_only: bool = False) -> re.Pattern[bytes] | None:
        """A byte regex for the text that can make a receiver a whole buffer (None: nothing can).

        A getter counts as a word (``get_key_buffer``); an attribute pattern only as an attribute
        access (``.kv_buffer``, ``. w13_weight``), since provenance ends at an attribute, never at a
        bare name: a parameter called ``weight`` is not a whole buffer. ``inferable_only``: the
        kinds whose getters are inferred (:class:`~castfind.scan.GetterOracle`).
        """
        getters: set[str] = set()
        attrs: set[str] = set()
        for kind in self.buffers.values():
            if inferable_only and not kind.infer_getters:
                continue
            getters.update(re.escape(g) for g in kind.getters)
            # Inside a name: `*` is a run of word characters, `?` one.
            attrs.update("(?:" + glob_regex(p, star=r"\w*", one=r"\w") + ")" for p in kind.attributes)
        alts = []
        if getters:
            alts.append(r"\b(?:" + "|".join(sorted(getters)) + ")")
        if attrs:
            # Whitespace, a line continuation or a comment may sit between the dot and the name.
            alts.append(r"\.(?:\s|\\\r?\n|#[^\n]*\n)*(?:" + "|".join(sorted(attrs)) + ")")
        return re.compile(("(?:" + "|".join(alts) + r")\b").encode()) if alts else None


_TOP_KEYS = {"buffers", "entry_points", "once", "index", "views", "dtype_args", "casts", "rules"}
_RULE_KEYS = {"id", "name", "severity", "message", "cast", "receiver", "hot", "once", "fix", "examples"}
_ID = re.compile(r"^CF\d{3}$")
_NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")


def default_rule_dir() -> Path:
    """The rule files shipped inside the package (``castfind.ruledata``, the repo's ``rules/``)."""
    try:
        return Path(str(resources.files("castfind.ruledata")))
    except ModuleNotFoundError:  # running from a source tree that was not installed
        return Path(__file__).resolve().parent.parent / "rules"


def rule_files(dirs: list[str | Path]) -> list[Path]:
    out: list[Path] = []
    for d in dirs:
        p = Path(d)
        if p.is_file():
            out.append(p)
        elif p.is_dir():
            out += sorted(x for x in p.iterdir() if x.suffix in (".yaml", ".yml"))
        else:
            raise RuleError(str(p), 0, "--rules", "no such rule file or folder")
    return out


def _line_of(node: yaml.Node | None, key: str | None = None) -> int:
    if node is None:
        return 0
    if key is not None and isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            if getattr(k, "value", None) == key:
                return k.start_mark.line + 1
    return node.start_mark.line + 1


def _map_node(node: yaml.Node, key: str) -> yaml.Node | None:
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            if getattr(k, "value", None) == key:
                return v
    return None


def _strs(value: Any, path: str, line: int, key: str, errors: list[RuleError]) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    errors.append(RuleError(path, line, key, "expected a string or a list of strings"))
    return ()


def _parse_file(path: Path, acc: dict[str, Any], errors: list[RuleError]) -> None:
    p = str(path)
    try:
        text = path.read_text(encoding="utf-8")
        node = yaml.compose(text)
        data = yaml.safe_load(text)
    except (OSError, UnicodeDecodeError) as e:
        errors.append(RuleError(p, 0, "file", f"cannot read: {e}"))
        return
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        errors.append(RuleError(p, (mark.line + 1) if mark else 0, "yaml", str(getattr(e, "problem", e))))
        return
    if data is None:
        return
    if not isinstance(data, dict):
        errors.append(RuleError(p, 1, "file", "a rule file must be a mapping with 'rules', 'buffers', ..."))
        return
    for key in data:
        if key not in _TOP_KEYS:
            errors.append(RuleError(p, _line_of(node, key), str(key), f"unknown top-level key; expected one of {sorted(_TOP_KEYS)}"))
    for name, spec in (data.get("buffers") or {}).items():
        ln = _line_of(_map_node(node, "buffers"), name)
        if not isinstance(spec, dict):
            errors.append(RuleError(p, ln, f"buffers.{name}", "expected a mapping with getters/attributes"))
            continue
        for k in spec:
            if k not in ("getters", "attributes", "exclude", "exclude_in", "infer_getters"):
                errors.append(RuleError(p, ln, f"buffers.{name}.{k}", "unknown key"))
        acc["buffers"][name] = BufferKind(
            name,
            _strs(spec.get("getters"), p, ln, f"buffers.{name}.getters", errors),
            _strs(spec.get("attributes"), p, ln, f"buffers.{name}.attributes", errors),
            _strs(spec.get("exclude"), p, ln, f"buffers.{name}.exclude", errors),
            _strs(spec.get("exclude_in"), p, ln, f"buffers.{name}.exclude_in", errors),
            bool(spec.get("infer_getters", True)),
        )
    acc["entry_points"] += _strs(data.get("entry_points"), p, _line_of(node, "entry_points"), "entry_points", errors)
    once = data.get("once") or {}
    if not isinstance(once, dict):
        errors.append(RuleError(p, _line_of(node, "once"), "once", "expected a mapping with functions/guards"))
        once = {}
    acc["once_functions"] += _strs(once.get("functions"), p, _line_of(node, "once"), "once.functions", errors)
    acc["once_guards"] += _strs(once.get("guards"), p, _line_of(node, "once"), "once.guards", errors)
    if "store_to_self" in once:
        acc["once_store_to_self"] = bool(once["store_to_self"])
    index = data.get("index") or {}
    acc["scalar_index"] += _strs(index.get("scalar") if isinstance(index, dict) else None, p,
                                 _line_of(node, "index"), "index.scalar", errors)
    acc["views"] += _strs(data.get("views"), p, _line_of(node, "views"), "views", errors)
    acc["dtype_args"] += _strs(data.get("dtype_args"), p, _line_of(node, "dtype_args"), "dtype_args", errors)
    for m, spec in (data.get("casts") or {}).items():
        ln = _line_of(_map_node(node, "casts"), m)
        if not isinstance(spec, dict) or spec.get("operand", "receiver") not in ("receiver", "argument"):
            errors.append(RuleError(p, ln, f"casts.{m}", "expected {operand: receiver|argument, dtype: NAME?}"))
            continue
        acc["casts"][m] = CastSpec(spec.get("operand", "receiver"), spec.get("dtype"))
    rules_node = _map_node(node, "rules")
    rules = data.get("rules") or []
    if not isinstance(rules, list):
        errors.append(RuleError(p, _line_of(node, "rules"), "rules", "expected a list of rules"))
        return
    for i, r in enumerate(rules):
        rn = rules_node.value[i] if isinstance(rules_node, yaml.SequenceNode) else None
        _parse_rule(p, r, rn, acc, errors)


def _parse_rule(p: str, r: Any, rn: yaml.Node | None, acc: dict[str, Any], errors: list[RuleError]) -> None:
    ln = _line_of(rn)
    if not isinstance(r, dict):
        errors.append(RuleError(p, ln, "rules[]", "each rule must be a mapping"))
        return
    rid = str(r.get("id", ""))
    where = f"rule {rid or '?'}"
    before = len(errors)
    for k in r:
        if k not in _RULE_KEYS:
            errors.append(RuleError(p, _line_of(rn, k), f"{where}.{k}", f"unknown key; expected one of {sorted(_RULE_KEYS)}"))
    for k in ("id", "name", "severity", "message", "cast", "receiver", "examples"):
        if k not in r:
            errors.append(RuleError(p, ln, f"{where}.{k}", "required key is missing"))
    if rid and not _ID.match(rid):
        errors.append(RuleError(p, _line_of(rn, "id"), f"{where}.id", "ids look like CF101"))
    if "name" in r and not _NAME.match(str(r["name"])):
        errors.append(RuleError(p, _line_of(rn, "name"), f"{where}.name", "names are kebab-case"))
    if "severity" in r and r["severity"] not in SEVERITIES:
        errors.append(RuleError(p, _line_of(rn, "severity"), f"{where}.severity", f"must be one of {list(SEVERITIES)}"))
    for k in ("hot", "once"):
        if k in r and r[k] is not None and not isinstance(r[k], bool):
            errors.append(RuleError(p, _line_of(rn, k), f"{where}.{k}", "must be true, false or omitted"))
    receiver = r.get("receiver") or {}
    kinds = _strs(receiver.get("buffer") if isinstance(receiver, dict) else None, p, _line_of(rn, "receiver"),
                  f"{where}.receiver.buffer", errors)
    if not kinds and "receiver" in r:
        errors.append(RuleError(p, _line_of(rn, "receiver"), f"{where}.receiver", "expected {buffer: [KIND, ...]}"))
    ex = r.get("examples") or {}
    if "examples" in r and (not isinstance(ex, dict) or not ex.get("match") or not ex.get("no_match")):
        errors.append(RuleError(p, _line_of(rn, "examples"), f"{where}.examples",
                                "needs both 'match' and 'no_match' code (a line marked '# match' must be flagged)"))
    if len(errors) > before:
        return
    acc["rules"].append(Rule(
        rid, str(r["name"]), str(r["severity"]), str(r["message"]),
        _strs(r["cast"], p, ln, f"{where}.cast", errors), kinds, r.get("hot"), r.get("once"),
        str(r.get("fix", "")), str(ex["match"]), str(ex["no_match"]), p, ln,
    ))


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
    acc: dict[str, Any] = {"rules": [], "buffers": {}, "entry_points": (), "once_functions": (), "once_guards": (),
                           "once_store_to_self": True, "scalar_index": (), "views": (), "dtype_args": (), "casts": {}}
    try:
        files = rule_files(([default_rule_dir()] if include_default else []) + list(dirs or []))
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
                errors.append(RuleError(r.source, r.line, f"rule {r.id}.receiver.buffer", f"unknown buffer kind {k!r}; define it under 'buffers'"))
        for m in r.cast:
            if m not in acc["casts"]:
                errors.append(RuleError(r.source, r.line, f"rule {r.id}.cast", f"unknown cast method {m!r}; define it under 'casts'"))
    rs = RuleSet(tuple(acc["rules"]), acc["buffers"], acc["entry_points"], acc["once_functions"], acc["once_guards"],
                 acc["once_store_to_self"], acc["scalar_index"], acc["views"], acc["dtype_args"], acc["casts"],
                 tuple(str(f) for f in files))
    return rs, errors
