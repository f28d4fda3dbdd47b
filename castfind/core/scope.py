"""Report scope: which files are production code, whose findings are reported by default.

A checkout holds more than the package: tests, benchmarks, examples, docs. Their casts (a reference
module that casts its weight in ``forward``, a benchmark that casts a whole pool in a loop) are real
casts but not the user's problem, so by default they are indexed (they still resolve names and are
``where`` call sites) and left out of the report; and a call from one never makes production code hot
(:class:`castfind.analysis.callgraph.CallGraph` looks for callers only in the scope). ``[tool.castfind]
report-exclude`` holds the patterns; ``--include-tests`` reports everything.

A pattern is matched against a file's path relative to its root (forward slashes):

* ending in ``/`` (``test/``, ``benchmark*/``): a glob over each *folder* on the path;
* holding another ``/`` (``python/sglang/test/*``): a glob over the whole path (``*`` crosses ``/``);
* otherwise (``test_*.py``, ``conftest.py``): a glob over the file's name.
"""

from __future__ import annotations

from fnmatch import fnmatchcase

__all__ = ["DEFAULT_REPORT_EXCLUDE", "check_pattern", "excluded_by", "in_scope"]

#: The default ``report-exclude``: what semgrep's default ignore list and pytest's conventions call tests,
#: plus benchmarks, examples and docs.
DEFAULT_REPORT_EXCLUDE: tuple[str, ...] = (
    "test/", "tests/", "test_*.py", "*_test.py", "conftest.py", "benchmark*/", "examples/", "docs/",
)


def check_pattern(pattern: str) -> str | None:
    """Why ``pattern`` cannot be used (``None`` when it can)."""
    if not pattern.strip():
        return "an empty pattern would match nothing; remove it"
    if pattern.startswith("/"):
        return f"{pattern!r}: patterns are relative to the scanned root; drop the leading '/'"
    if pattern.strip("/") == "":
        return f"{pattern!r} names no folder"
    return None


def excluded_by(path: str, patterns: tuple[str, ...]) -> str | None:
    """The first pattern that takes ``path`` (root-relative) out of the report scope, or ``None``."""
    p = path.replace("\\", "/")
    while p.startswith("./"):
        p = p[2:]
    parts = p.split("/")
    folders, name = parts[:-1], parts[-1]
    for pat in patterns:
        if pat.endswith("/"):
            dir_pat = pat.rstrip("/")
            if "/" in dir_pat:
                if any(fnmatchcase("/".join(parts[:i]), dir_pat) for i in range(1, len(parts))):
                    return pat
            elif any(fnmatchcase(f, dir_pat) for f in folders):
                return pat
        elif "/" in pat:
            if fnmatchcase(p, pat):
                return pat
        elif fnmatchcase(name, pat):
            return pat
    return None


def in_scope(path: str, patterns: tuple[str, ...]) -> bool:
    """Is ``path`` (root-relative) production code under ``patterns``?"""
    return excluded_by(path, patterns) is None
