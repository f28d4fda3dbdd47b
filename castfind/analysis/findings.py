"""What happens to findings after the rules produced them: ranking, inline suppression,
fingerprints, the baseline file and the exit code.

Everything here is a pure function of its arguments except :func:`write_baseline`,
:func:`check_baseline_target` and :func:`load_baseline`, which touch one file. Nothing prints or exits; problems come back
as :class:`~castfind.core.types.Diagnostic` values or as :class:`BaselineError`.
"""

from __future__ import annotations

import ast
import hashlib
import io
import json
import re
import tokenize
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from castfind.core.fsutil import OutputPathError, Protected, atomic_write_text, check_output_target
from castfind.core.inputs import InputError, read_input
from castfind.core.types import SEVERITY_RANK, Diagnostic, Finding, Severity

__all__ = [
    "BASELINE_VERSION", "Baseline", "BaselineEntry", "BaselineError", "BaselineOutcome",
    "ANY_RULE", "RuleLike", "Suppression", "SuppressionOutcome", "apply_baseline", "baseline_entries",
    "check_baseline_target", "exit_code", "fails",
    "filter_suppressed", "fingerprint", "load_baseline", "normalise_expr",
    "occurrence_fingerprints", "rank", "silencers", "suppressed", "suppressions_in", "unused_suppressions",
    "write_baseline",
]

BASELINE_VERSION = 1


# --------------------------------------------------------------------------- ranking


def _rank_key(f: Finding) -> tuple[Any, ...]:
    # An unknown severity sorts after "info" rather than raising: ranking is presentation,
    # and the rule loader is where a bad severity gets rejected.
    sev = SEVERITY_RANK.get(f.severity, len(SEVERITY_RANK))
    measured = f.runtime is not None
    total = f.runtime.bytes_total if f.runtime is not None else 0
    static = f.cost.value if f.cost is not None and f.cost.value is not None else None
    # A cast known to move nothing (its bound dtypes are equal) goes after those whose cost is unknown.
    order = 0 if static else (2 if static == 0.0 else 1)
    return (sev, not measured, -total, order, -(static or 0.0), -f.score, f.path, f.line, f.column, f.rule)


def rank(findings: Iterable[Finding]) -> list[Finding]:
    """Order findings for display: severity (error, warning, info), then measured bytes.

    Within a severity, findings with a runtime measurement come first, largest
    ``runtime.bytes_total`` first; then those whose static cost is known (``cost.value``, bytes per step
    from the allocation, :mod:`castfind.analysis.cost`), largest first; the rest follow, by static ``score`` (buffer
    kind, loop depth, decode path) highest first, and last those known to move nothing (``cost.value`` 0). Ties break on path, line, column,
    then rule id, so the order is total and stable across runs.
    """
    return sorted(findings, key=_rank_key)


# --------------------------------------------------------------------------- suppression

# ``ignore`` must be a whole word so ``# castfind: ignored`` is not a suppression; the
# optional ``[...]`` lists rule ids (or names). A space before ``[`` is tolerated because
# reading it as a bare ignore would silently hide every rule on that line.
_IGNORE = re.compile(r"#\s*castfind:\s*ignore\b(?:\s*\[([^\]]*)\])?", re.IGNORECASE)


#: Marks a bare ``# castfind: ignore`` as used (see :func:`silencers`).
ANY_RULE = "*"


def _silencing_codes(line: str, finding: Finding) -> list[str]:
    """The codes on ``line``'s ignore comments that silence ``finding`` (:data:`ANY_RULE` for a bare one)."""
    codes: list[str] = []
    for match in _IGNORE.finditer(line):
        listed = match.group(1)
        if listed is None:
            codes.append(ANY_RULE)
            continue
        for part in listed.split(","):
            code = part.strip().upper()
            if code and (code == finding.rule.upper() or (finding.name and code == finding.name.upper())):
                codes.append(code)
    return codes


def _ignores(line: str, finding: Finding) -> bool:
    return bool(_silencing_codes(line, finding))


def suppressed(finding: Finding, source_lines: Sequence[str]) -> bool:
    """Whether a ``# castfind: ignore`` comment silences ``finding``.

    The comment may sit on any line of the finding's range (``line`` .. ``end_line``) or
    alone on the line directly above it. ``# castfind: ignore`` silences every rule;
    ``# castfind: ignore[CF101,CF102]`` only those ids (a rule's kebab-case name works
    too). ``source_lines`` is the file's text split into lines (index 0 is line 1). Lines
    past the end of the file are skipped: the file may have changed since the scan.
    """
    first = max(finding.line, 1)
    last = max(finding.end_line, first)
    for number in range(first, last + 1):
        if number <= len(source_lines) and _ignores(source_lines[number - 1], finding):
            return True
    above = first - 1
    if 1 <= above <= len(source_lines):
        text = source_lines[above - 1]
        # Only a comment-only line counts, so a trailing ignore on the previous statement
        # does not leak onto the next one.
        if text.lstrip().startswith("#") and _ignores(text, finding):
            return True
    return False


def silencers(finding: Finding, source_lines: Sequence[str]) -> list[tuple[int, str]]:
    """``(line, code)`` of every ignore comment that silences ``finding``, as :func:`suppressed`
    reads them (code :data:`ANY_RULE` for a bare ``# castfind: ignore``); empty when none does."""
    first = max(finding.line, 1)
    last = max(finding.end_line, first)
    found: list[tuple[int, str]] = []
    for number in range(first, last + 1):
        if number <= len(source_lines):
            found += [(number, code) for code in _silencing_codes(source_lines[number - 1], finding)]
    above = first - 1
    if 1 <= above <= len(source_lines):
        text = source_lines[above - 1]
        if text.lstrip().startswith("#"):
            found += [(above, code) for code in _silencing_codes(text, finding)]
    return found


class SuppressionOutcome(NamedTuple):
    """Result of :func:`filter_suppressed`. ``used`` holds ``(root, path, line, code)`` of each
    ignore comment code that silenced a finding (:func:`unused_suppressions` reads it)."""

    kept: list[Finding]
    suppressed: int
    diagnostics: list[Diagnostic]
    used: frozenset[tuple[str, str, int, str]] = frozenset()


def filter_suppressed(
    findings: Iterable[Finding],
    read_lines: Callable[[str, str], Sequence[str]],
) -> SuppressionOutcome:
    """Drop findings silenced by inline comments.

    ``read_lines(root, path)`` returns a file's lines; it is called once per file. When it
    raises ``OSError`` or ``UnicodeDecodeError`` the file's findings are kept (we cannot
    prove they are suppressed) and one ``read-error`` diagnostic per file says why.
    """
    cache: dict[tuple[str, str], Sequence[str] | None] = {}
    kept: list[Finding] = []
    diagnostics: list[Diagnostic] = []
    used: set[tuple[str, str, int, str]] = set()
    hidden = 0
    for f in findings:
        key = (f.root, f.path)
        if key not in cache:
            try:
                cache[key] = read_lines(f.root, f.path)
            except (OSError, UnicodeError) as exc:
                cache[key] = None
                diagnostics.append(
                    Diagnostic(f.path, 0, f"cannot read file to check suppressions: {exc}", kind="read-error")
                )
        lines = cache[key]
        by = silencers(f, lines) if lines is not None else []
        if by:
            hidden += 1
            used.update((f.root, f.path, line, code) for line, code in by)
        else:
            kept.append(f)
    return SuppressionOutcome(kept, hidden, diagnostics, frozenset(used))


class RuleLike(Protocol):
    """What :func:`unused_suppressions` needs of its rule (:data:`castfind.core.rules.UNUSED_SUPPRESSION`)."""

    @property
    def id(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def severity(self) -> Severity: ...
    @property
    def message(self) -> str: ...
    @property
    def fix(self) -> str: ...


@dataclass(frozen=True, slots=True)
class Suppression:
    """One ``# castfind: ignore`` comment: where it is and the codes it lists (empty: bare, every rule)."""

    line: int
    column: int  # 1-based, of the ``#``
    text: str
    codes: tuple[str, ...]


def suppressions_in(text: str) -> list[Suppression]:
    """The ignore comments of a Python source: real comments only (``tokenize``), never text inside
    a string. A file that does not tokenise has none (it was reported when it was scanned)."""
    if not _IGNORE.search(text):
        return []
    found: list[Suppression] = []
    try:
        # newline=None: universal newlines, so a CR-only file has its lines too.
        for tok in tokenize.generate_tokens(io.StringIO(text, newline=None).readline):
            if tok.type != tokenize.COMMENT:
                continue
            for match in _IGNORE.finditer(tok.string):
                listed = match.group(1)
                codes = () if listed is None else tuple(c.strip().upper() for c in listed.split(",") if c.strip())
                found.append(Suppression(tok.start[0], tok.start[1] + match.start() + 1, match.group(0), codes))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return found
    return found


def unused_suppressions(root: str, path: str, module: str, comments: Iterable[Suppression],
                        used: frozenset[tuple[str, str, int, str]], rule: RuleLike) -> list[Finding]:
    """A finding of ``rule`` (CF001) for each comment of ``root``/``path`` that silenced nothing, or
    that lists codes that silenced nothing (named in the message), as ruff's RUF100 does."""
    out: list[Finding] = []
    for c in comments:
        if not c.codes:
            if (root, path, c.line, ANY_RULE) in used:
                continue
            what = "suppresses nothing"
        else:
            idle = [code for code in c.codes if (root, path, c.line, code) not in used]
            if not idle:
                continue
            what = (f"{', '.join(idle)} suppresses nothing here" if len(idle) == len(c.codes)
                    else f"{', '.join(idle)} of [{', '.join(c.codes)}] suppresses nothing here")
        message = rule.message.format(comment=c.text, what=what)
        out.append(Finding(rule.id, rule.name, rule.severity, root, path, c.line, c.line, c.column, "", c.text,
                           message, fix=rule.fix, module=module))
    return out


# --------------------------------------------------------------------------- fingerprints

_SKIP_TOKENS = {
    tokenize.COMMENT,
    tokenize.NL,
    tokenize.NEWLINE,
    tokenize.INDENT,
    tokenize.DEDENT,
    tokenize.ENDMARKER,
    tokenize.ENCODING,
}
_TRAILING_COMMA = re.compile(r",(?=[)\]}])")


def _plain_string(text: str) -> str:
    # Formatters switch quote styles ('a' -> "a"); canonicalise plain literals through
    # their value. f-strings and byte strings stay as written.
    prefix = re.match(r"[A-Za-z]*", text).group(0).lower()  # type: ignore[union-attr]
    if "f" in prefix or "b" in prefix:
        return text
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text
    return repr(value) if isinstance(value, str) else text


def normalise_expr(expr: str) -> str:
    """The expression as a fingerprint sees it: whitespace, comments and line breaks
    removed, string quotes canonical, trailing commas dropped.

    So reformatting (black splitting a call over lines and adding a magic trailing comma)
    does not change the fingerprint. Whitespace inside string literals is kept because it
    changes meaning. Text that does not tokenise falls back to dropping all whitespace.
    """
    try:
        tokens = [
            _plain_string(tok.string) if tok.type == tokenize.STRING else tok.string
            for tok in tokenize.generate_tokens(io.StringIO(expr).readline)
            if tok.type not in _SKIP_TOKENS
        ]
        joined = "".join(tokens)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        # Not valid Python on its own (a cut-off snippet): the plain rule still holds.
        joined = "".join(expr.split())
    return _TRAILING_COMMA.sub("", joined)


def fingerprint(finding: Finding) -> str:
    """A stable id for a finding: rule + path + function + normalised expression.

    The line number is deliberately left out so moving code up or down, or reformatting
    the expression, keeps the fingerprint. Identical casts in one function share it; use
    :func:`occurrence_fingerprints` (or the counts in a baseline) to tell them apart.
    Returns 16 hex digits of a SHA-256.
    """
    parts = (finding.rule, finding.path.replace("\\", "/"), finding.function, normalise_expr(finding.expr))
    return hashlib.sha256("\0".join(parts).encode("utf-8")).hexdigest()[:16]


def occurrence_fingerprints(findings: Sequence[Finding]) -> list[str]:
    """``fingerprint:n`` for each finding, aligned with ``findings``.

    ``n`` (1-based) numbers findings that share a fingerprint in source order (line,
    column), so several identical casts in one function stay distinguishable and keep
    their numbers when the whole block moves.
    """
    plain = [fingerprint(f) for f in findings]
    groups: dict[str, list[int]] = defaultdict(list)
    for index, fp in enumerate(plain):
        groups[fp].append(index)
    out = [""] * len(findings)
    for fp, indices in groups.items():
        ordered = sorted(indices, key=lambda i: (findings[i].line, findings[i].column))
        for n, index in enumerate(ordered, start=1):
            out[index] = f"{fp}:{n}"
    return out


# --------------------------------------------------------------------------- baseline


class BaselineError(Exception):
    """A baseline file that cannot be used: missing, unreadable, bad JSON or not ours."""

    def __init__(self, path: str | Path, reason: str) -> None:
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


@dataclass(frozen=True, slots=True)
class BaselineEntry:
    """One recorded fingerprint and how many findings carried it."""

    fingerprint: str
    rule: str
    path: str
    function: str
    expr: str
    count: int = 1

    def to_dict(self) -> dict[str, Any]:
        """The JSON form used in the baseline file and in ``stats["baseline_fixed"]``."""
        return {
            "fingerprint": self.fingerprint,
            "rule": self.rule,
            "path": self.path,
            "function": self.function,
            "expr": self.expr,
            "count": self.count,
        }


@dataclass(frozen=True, slots=True)
class Baseline:
    """The findings accepted as known; see :func:`apply_baseline`."""

    entries: tuple[BaselineEntry, ...] = ()

    def counts(self) -> dict[str, int]:
        """Fingerprint -> number of findings the baseline hides."""
        totals: Counter[str] = Counter()
        for entry in self.entries:
            totals[entry.fingerprint] += entry.count
        return dict(totals)


def baseline_entries(findings: Iterable[Finding]) -> tuple[BaselineEntry, ...]:
    """Group findings by fingerprint, sorted by path, rule, function, fingerprint."""
    first: dict[str, Finding] = {}
    counts: Counter[str] = Counter()
    for f in findings:
        fp = fingerprint(f)
        first.setdefault(fp, f)
        counts[fp] += 1
    entries = [
        BaselineEntry(fp, f.rule, f.path, f.function, f.expr, counts[fp]) for fp, f in first.items()
    ]
    # A stable order keeps the committed file's diffs small when one finding changes.
    entries.sort(key=lambda e: (e.path, e.rule, e.function, e.fingerprint))
    return tuple(entries)


def owns_baseline(text: str) -> str | None:
    """``None`` when ``text`` is a castfind baseline (any version), else why not (:data:`castfind.core.fsutil.Owns`)."""
    try:
        document = json.loads(text)
    except (ValueError, RecursionError):
        return "not JSON"
    if not isinstance(document, dict) or "castfind_baseline" not in document:
        return "no 'castfind_baseline' key"
    return None


def check_baseline_target(path: str | Path, protected: Protected | None = None) -> None:
    """Raise :class:`BaselineError` unless a baseline can be written to ``path``.

    The check of every output option (:func:`castfind.core.fsutil.check_output_target`): the path must be
    writable, not one of ``protected``, and an existing file there must be a castfind baseline (any
    version) or empty: anything else would be lost. Call it before a long scan so a bad path fails first.
    """
    try:
        check_output_target(path, "--write-baseline", "castfind baseline", owns_baseline, protected or Protected())
    except OutputPathError as exc:
        raise BaselineError(path, exc.reason) from None


def write_baseline(path: str | Path, findings: Iterable[Finding]) -> Baseline:
    """Record ``findings`` as the baseline at ``path`` (atomically) and return it.

    Raises :class:`BaselineError` when the path cannot be written or holds a file that is not
    a baseline (see :func:`check_baseline_target`); that file is left untouched.
    """
    check_baseline_target(path)
    baseline = Baseline(baseline_entries(findings))
    document = {
        "castfind_baseline": BASELINE_VERSION,
        "findings": [entry.to_dict() for entry in baseline.entries],
    }
    try:
        atomic_write_text(path, json.dumps(document, indent=2, ensure_ascii=False, allow_nan=False) + "\n")
    except OSError as exc:
        raise BaselineError(path, f"cannot write: {exc.strerror or exc} — pass a path in a writable folder") from exc
    return baseline


def _entry(raw: Any, index: int, path: Path) -> BaselineEntry:
    where = f"findings[{index}]"
    if not isinstance(raw, dict):
        raise BaselineError(path, f"{where} is {type(raw).__name__}, expected an object")
    fp = raw.get("fingerprint")
    if not isinstance(fp, str) or not fp:
        raise BaselineError(path, f"{where}.fingerprint is missing or not a string")
    count = raw.get("count", 1)
    # bool is an int subclass; "count": true is a hand-editing slip, not a count.
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise BaselineError(path, f"{where}.count must be a positive integer, got {count!r}")
    text: dict[str, str] = {}
    for key in ("rule", "path", "function", "expr"):
        value = raw.get(key, "")
        if not isinstance(value, str):
            raise BaselineError(path, f"{where}.{key} must be a string, got {type(value).__name__}")
        text[key] = value
    return BaselineEntry(fp, text["rule"], text["path"], text["function"], text["expr"], count)


def load_baseline(path: str | Path) -> Baseline:
    """Read a baseline written by :func:`write_baseline`.

    Raises :class:`BaselineError` (never a bare traceback) when the file is missing,
    unreadable, not JSON, not a castfind baseline, of an unknown version or malformed.
    """
    p = Path(path)
    try:
        text = read_input(p, "baseline").decode("utf-8")
    except FileNotFoundError:
        raise BaselineError(p, "no such file (create it with --write-baseline)") from None
    except InputError as exc:
        raise BaselineError(p, str(exc)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BaselineError(p, f"cannot read: {exc}") from exc
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BaselineError(p, f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from exc
    if not isinstance(document, dict) or "castfind_baseline" not in document:
        raise BaselineError(p, "not a castfind baseline (no 'castfind_baseline' key)")
    version = document["castfind_baseline"]
    if version != BASELINE_VERSION:
        raise BaselineError(p, f"unsupported baseline version {version!r} (this castfind reads {BASELINE_VERSION})")
    raw_entries = document.get("findings", [])
    if not isinstance(raw_entries, list):
        raise BaselineError(p, "'findings' must be a list")
    return Baseline(tuple(_entry(raw, i, p) for i, raw in enumerate(raw_entries)))


class BaselineOutcome(NamedTuple):
    """Result of :func:`apply_baseline`: what is still reported, what was hidden, what is gone."""

    kept: list[Finding]
    hidden: int
    fixed: tuple[BaselineEntry, ...]


def apply_baseline(findings: Sequence[Finding], baseline: Baseline) -> BaselineOutcome:
    """Hide findings the baseline already records.

    A fingerprint recorded with count *n* hides at most *n* findings; extra ones are new
    and stay (the earliest in source order are the ones hidden, since which copy is "new"
    cannot be known). Entries with fewer findings than recorded come back in ``fixed``
    with ``count`` set to how many disappeared, so the user can refresh the baseline.
    ``kept`` preserves the input order.
    """
    budget = baseline.counts()
    fps = [fingerprint(f) for f in findings]
    order = sorted(range(len(findings)), key=lambda i: (findings[i].path, findings[i].line, findings[i].column))
    hide: set[int] = set()
    for i in order:
        if budget.get(fps[i], 0) > 0:
            budget[fps[i]] -= 1
            hide.add(i)
    kept = [f for i, f in enumerate(findings) if i not in hide]
    fixed: list[BaselineEntry] = []
    reported: set[str] = set()
    for entry in baseline.entries:
        left = budget.get(entry.fingerprint, 0)
        if left > 0 and entry.fingerprint not in reported:
            reported.add(entry.fingerprint)
            fixed.append(
                BaselineEntry(entry.fingerprint, entry.rule, entry.path, entry.function, entry.expr, left)
            )
    return BaselineOutcome(kept, len(hide), tuple(fixed))


# --------------------------------------------------------------------------- exit code


def fails(findings: Iterable[Finding], fail_on: str) -> bool:
    """Whether any finding is at or above ``fail_on`` (error > warning > info).

    Raises ``ValueError`` for a level that is not one of ``castfind.core.types.SEVERITIES``.
    """
    if fail_on not in SEVERITY_RANK:
        raise ValueError(f"fail-on must be one of {', '.join(SEVERITY_RANK)}, got {fail_on!r}")
    threshold = SEVERITY_RANK[fail_on]
    # Unknown severities never fail a build: they sort as less severe than "info".
    return any(SEVERITY_RANK.get(f.severity, len(SEVERITY_RANK)) <= threshold for f in findings)


def exit_code(findings: Iterable[Finding], fail_on: str = "error") -> int:
    """1 when any finding is at or above ``fail_on``, else 0 (usage errors, 2, are the CLI's)."""
    return 1 if fails(findings, fail_on) else 0
