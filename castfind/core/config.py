"""``[tool.castfind]`` in the scanned root's ``pyproject.toml``.

Keys (kebab-case, as in the rest of ``pyproject.toml``)::

    [tool.castfind]
    roots = ["python"]                 # scan roots, relative to this pyproject.toml
    rules = ["castfind_rules"]         # extra rule folders, relative likewise
    exclude = ["**/tests/**"]          # globs of files to skip (not even indexed)
    report-exclude = ["test/", "benchmark*/", "test_*.py"]  # indexed, findings not reported
    entry-points = ["*.run_batch"]     # extra hot-path entry point patterns
    fail-on = "warning"                # error | warning | info
    baseline = "castfind-baseline.json"
    select = ["CF1"]                   # rule ids, id prefixes, kebab names or ALL (castfind.core.selection)
    extend-select = ["CF103"]          # added to select
    ignore = ["CF104"]                 # taken away (the more specific selector wins)
    per-file-ignores = {"legacy/*" = ["CF102"], "test_*.py" = ["ALL"]}

Paths (``roots``, ``rules``, ``baseline``) must stay inside the folder of this ``pyproject.toml`` once
``..`` and symlinks are resolved: a scanned repository cannot point castfind at files elsewhere.

A missing file or section gives the defaults. An unknown key or a value of the wrong type
raises :class:`ConfigError` naming the key (and the closest valid one): a typo in a config
file should not silently turn a check off.
"""

from __future__ import annotations

import difflib
import os
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from castfind.core.inputs import InputError, read_input
from castfind.core.scope import DEFAULT_REPORT_EXCLUDE, check_pattern
from castfind.core.types import SEVERITIES

__all__ = ["KEYS", "Config", "ConfigError", "config_problems", "load_config", "merge"]

PYPROJECT = "pyproject.toml"
SECTION = "tool.castfind"


class ConfigError(Exception):
    """A ``[tool.castfind]`` problem: the file, the key (``None`` for the file as a whole) and why."""

    def __init__(self, path: str | Path, key: str | None, reason: str) -> None:
        self.path = str(path)
        self.key = key
        self.reason = reason
        where = f"[{SECTION}] {key}" if key else f"[{SECTION}]"
        super().__init__(f"{self.path}: {where}: {reason}")


@dataclass(frozen=True, slots=True)
class Config:
    """Settings for one scan. Paths are already resolved against the pyproject's folder.

    ``source`` is the ``pyproject.toml`` the values came from, or ``None`` for defaults.
    ``report_exclude``: patterns of files whose findings are left out of the report
    (:mod:`castfind.core.scope`; ``--include-tests`` reports them); an empty list reports everything.
    """

    roots: tuple[Path, ...] = ()
    rules: tuple[Path, ...] = ()
    exclude: tuple[str, ...] = ()
    entry_points: tuple[str, ...] = ()
    fail_on: str = "error"
    baseline: Path | None = None
    report_exclude: tuple[str, ...] = DEFAULT_REPORT_EXCLUDE
    select: tuple[str, ...] | None = None
    extend_select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = ()
    source: Path | None = None


class _Bad(ValueError):
    """Internal: a value's problem, turned into a ConfigError with path and key attached."""


def _strings(value: Any, folder: Path) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise _Bad(f"must be a list of strings, got {type(value).__name__}")
    for item in value:
        if not isinstance(item, str):
            raise _Bad(f"must be a list of strings, got an item of type {type(item).__name__}: {item!r}")
    return tuple(value)


def _inside(item: str, folder: Path) -> Path:
    """``folder / item``, which must stay inside ``folder`` once symlinks and ``..`` are resolved: a scanned
    repository's config may name its own files only (never ``../../etc/shadow`` or ``/etc``)."""
    path = folder / item
    base = Path(os.path.realpath(folder))
    if not Path(os.path.realpath(path)).is_relative_to(base):
        shown = item if len(item) <= 60 else item[:57] + "..."
        raise _Bad(f"{shown!r} is outside the project folder {folder} — name a path inside it, or pass it on "
                   "the command line")
    return path


def _paths(value: Any, folder: Path) -> tuple[Path, ...]:
    return tuple(_inside(item, folder) for item in _strings(value, folder))


def _report_exclude(value: Any, folder: Path) -> tuple[str, ...]:
    patterns = _strings(value, folder)
    for p in patterns:
        why = check_pattern(p)
        if why is not None:
            raise _Bad(why)
    return patterns


def _fail_on(value: Any, folder: Path) -> str:
    if not isinstance(value, str):
        raise _Bad(f"must be one of {', '.join(SEVERITIES)}, got {type(value).__name__}")
    if value not in SEVERITIES:
        raise _Bad(f"must be one of {', '.join(SEVERITIES)}, got {value!r}")
    return value


def _baseline(value: Any, folder: Path) -> Path:
    if not isinstance(value, str) or not value:
        raise _Bad(f"must be a path string, got {type(value).__name__}: {value!r}")
    return _inside(value, folder)


def _per_file_ignores(value: Any, folder: Path) -> tuple[tuple[str, tuple[str, ...]], ...]:
    if not isinstance(value, dict):
        raise _Bad(f"must be a table of glob = [rule ids], got {type(value).__name__}")
    out = []
    for glob, selectors in value.items():
        why = check_pattern(glob)
        if why is not None:
            raise _Bad(why)
        try:
            out.append((glob, _strings(selectors, folder)))
        except _Bad as exc:
            raise _Bad(f"{glob!r}: {exc}") from None
    return tuple(out)


# TOML key -> (Config field, parser). The parsers are the whole schema.
KEYS: Mapping[str, tuple[str, Callable[[Any, Path], Any]]] = {
    "roots": ("roots", _paths),
    "rules": ("rules", _paths),
    "exclude": ("exclude", _strings),
    "entry-points": ("entry_points", _strings),
    "fail-on": ("fail_on", _fail_on),
    "baseline": ("baseline", _baseline),
    "report-exclude": ("report_exclude", _report_exclude),
    "select": ("select", _strings),
    "extend-select": ("extend_select", _strings),
    "ignore": ("ignore", _strings),
    "per-file-ignores": ("per_file_ignores", _per_file_ignores),
}


def _unknown(key: str) -> str:
    close = difflib.get_close_matches(key, list(KEYS), n=1, cutoff=0.5)
    hint = f"; did you mean '{close[0]}'?" if close else f"; valid keys: {', '.join(KEYS)}"
    return f"unknown key{hint}"


def _parse(table: Mapping[str, Any], folder: Path, path: Path) -> tuple[Config, list[ConfigError]]:
    values: dict[str, Any] = {}
    problems: list[ConfigError] = []
    for key, value in table.items():
        if key not in KEYS:
            problems.append(ConfigError(path, key, _unknown(key)))
            continue
        field_name, parse = KEYS[key]
        try:
            values[field_name] = parse(value, folder)
        except _Bad as exc:
            problems.append(ConfigError(path, key, str(exc)))
    return Config(source=path, **values), problems


def _read_section(root: Path) -> tuple[Path, Mapping[str, Any] | None]:
    path = root / PYPROJECT
    try:
        text = read_input(path, "pyproject").decode("utf-8")
    except FileNotFoundError:
        return path, None
    except InputError as exc:
        raise ConfigError(path, None, str(exc)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(path, None, f"cannot read: {exc}") from exc
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(path, None, f"not valid TOML: {exc}") from exc
    tool = document.get("tool", {})
    if not isinstance(tool, dict) or "castfind" not in tool:
        return path, None
    section = tool["castfind"]
    if not isinstance(section, dict):
        raise ConfigError(path, None, f"must be a table, got {type(section).__name__}")
    return path, section


def config_problems(root: str | Path) -> list[ConfigError]:
    """Every problem in ``root``'s ``[tool.castfind]`` (empty when it is fine or absent).

    :func:`load_config` stops at the first; this is for a command that lists them all.
    """
    try:
        path, section = _read_section(Path(root))
    except ConfigError as exc:
        return [exc]
    if section is None:
        return []
    return _parse(section, path.parent, path)[1]


def load_config(root: str | Path) -> Config:
    """The ``[tool.castfind]`` settings of ``root/pyproject.toml``, or the defaults.

    Raises :class:`ConfigError` for an unreadable or invalid file, a section that is not a
    table, an unknown key or a wrong type; the first problem found is raised.
    """
    path, section = _read_section(Path(root))
    if section is None:
        return Config()
    config, problems = _parse(section, path.parent, path)
    if problems:
        raise problems[0]
    return config


def report_exclude_for(roots: Sequence[str]) -> tuple[str, ...]:
    """``[tool.castfind] report-exclude`` as ``where`` reads it: from the first root's folder (a file's
    folder), the current folder without roots. Raises ConfigError."""
    first = Path(roots[0]) if roots else Path(".")
    return load_config(first if first.is_dir() else first.parent).report_exclude


_FIELDS = {f.name for f in fields(Config)} - {"source", "report_exclude", "select", "extend_select", "ignore",
                                              "per_file_ignores"}


def merge(config: Config, **cli_values: Any) -> Config:
    """``config`` with command-line values laid over it: a given value wins.

    Keyword names are the :class:`Config` field names (``roots``, ``rules``, ``exclude``,
    ``entry_points``, ``fail_on``, ``baseline``). ``None`` means "not given", and so does
    an empty list, because that is what typer passes for a repeatable option the user left
    out. Lists replace (not extend) the configured ones; strings become ``Path`` where the
    field holds paths. Command-line paths are left as given (relative to the cwd).
    """
    unknown = set(cli_values) - _FIELDS
    if unknown:
        raise TypeError(f"merge() got unknown setting(s): {', '.join(sorted(unknown))}")
    changes: dict[str, Any] = {}
    for name, value in cli_values.items():
        if value is None or (isinstance(value, list | tuple) and not value):
            continue
        if name in ("roots", "rules"):
            value = tuple(Path(v) for v in value)
        elif name in ("exclude", "entry_points"):
            value = tuple(str(v) for v in value)
        elif name == "baseline":
            value = Path(value)
        elif name == "fail_on" and value not in SEVERITIES:
            raise ValueError(f"fail_on must be one of {', '.join(SEVERITIES)}, got {value!r}")
        changes[name] = value
    return replace(config, **changes)
