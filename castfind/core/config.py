"""``[tool.castfind]`` in ``pyproject.toml``: the nearest file with the table from a scanned root up to its
repository top (:func:`config_folder`, as ruff finds its configuration), or a TOML file named by ``--config``
(:func:`load_config_file`). Precedence: command-line options (:func:`merge`) > ``--config`` > discovered >
defaults.

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
from castfind.core.paths import repository_top
from castfind.core.scope import DEFAULT_REPORT_EXCLUDE, check_pattern
from castfind.core.types import SEVERITIES

__all__ = ["KEYS", "Config", "ConfigError", "config_folder", "config_problems", "discover_config", "load_config",
           "load_config_file", "merge", "report_exclude_for"]

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


def _read_section(path: Path, *, required: bool = False) -> tuple[Path, Mapping[str, Any] | None]:
    """``path``'s ``[tool.castfind]`` table, or None when the file or the table is missing. ``required`` (a
    file named by ``--config``): a missing file or table is a ConfigError too."""
    try:
        text = read_input(path, "pyproject").decode("utf-8")
    except FileNotFoundError:
        if required:
            raise ConfigError(path, None, "--config: no such file — name an existing pyproject.toml (or TOML "
                                          f"file) with a [{SECTION}] table") from None
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
        if required:
            raise ConfigError(path, None, f"--config: the file has no [{SECTION}] table — add one, or name "
                                          "another file")
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
        path, section = _read_section(Path(root) / PYPROJECT)
    except ConfigError as exc:
        return [exc]
    if section is None:
        return []
    return _parse(section, path.parent, path)[1]


def _config_of(path: Path, section: Mapping[str, Any] | None) -> Config:
    if section is None:
        return Config()
    config, problems = _parse(section, path.parent, path)
    if problems:
        raise problems[0]
    return config


def load_config(root: str | Path) -> Config:
    """The ``[tool.castfind]`` settings of ``root/pyproject.toml``, or the defaults.

    Raises :class:`ConfigError` for an unreadable or invalid file, a section that is not a
    table, an unknown key or a wrong type; the first problem found is raised.
    """
    return _config_of(*_read_section(Path(root) / PYPROJECT))


def load_config_file(path: str | Path) -> Config:
    """``--config FILE``: the ``[tool.castfind]`` table of that TOML file, its paths relative to the file's
    folder and held inside it as in any ``pyproject.toml``. A missing file, or a file without the table, is a
    :class:`ConfigError` as any other problem is: a file named on purpose must be the one that applies."""
    return _config_of(*_read_section(Path(path), required=True))


def config_folder(start: str | Path) -> Path:
    """The folder whose ``pyproject.toml`` configures a scan of ``start`` (a folder, or a file: its folder):
    the nearest one, walking up from ``start`` to the top of its git repository
    (:func:`castfind.core.paths.repository_top`, inclusive), whose ``pyproject.toml`` has a
    ``[tool.castfind]`` table, as ruff finds its configuration. Outside a repository only ``start`` itself
    is read (castfind never takes settings from a folder above the project it was pointed at). ``start`` when
    none has one. A relative ``start`` gives a folder relative to the working directory where one can be
    (``.`` for the top when it is the working directory). Raises ConfigError for a ``pyproject.toml`` on the
    way that cannot be read or parsed."""
    given = Path(start)
    if not given.is_dir():
        given = given.parent
    here = os.path.abspath(given)
    top = repository_top(here)
    if top is None or not Path(here).is_relative_to(top):
        return given
    while True:
        if _read_section(Path(here) / PYPROJECT)[1] is not None:
            break
        if here == top:
            return given
        here = os.path.dirname(here)
    if here == os.path.abspath(given):
        return given
    return Path(here) if given.is_absolute() else Path(os.path.relpath(here))


def discover_config(start: str | Path) -> Config:
    """The settings a scan of ``start`` reads when no ``--config`` is given: those of
    :func:`config_folder`'s ``pyproject.toml``, or the defaults. Raises ConfigError."""
    return load_config(config_folder(start))


def report_exclude_for(roots: Sequence[str], config: str | Path | None = None) -> tuple[str, ...]:
    """``[tool.castfind] report-exclude`` as ``where`` reads it: from ``config`` when given, else discovered
    from the first root (:func:`discover_config`), the current folder without roots. Raises ConfigError."""
    if config is not None:
        return load_config_file(config).report_exclude
    return discover_config(roots[0] if roots else ".").report_exclude


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
