"""``castfind where`` answered from its carried result before the command line is built.

PERF: building the typer app imports typer, its vendored click and pydantic (typer converts each
parameter through a pydantic ``TypeAdapter``): a third of a second and more, several times what a
carried answer costs. :func:`main` (what ``python -m castfind`` and the ``castfind`` script run)
first tries :func:`carried_where`: for a ``where`` whose arguments it reads with certainty (a strict
subset of the command's options) and whose answer is carried (:func:`castfind.where.where`: the
same query on the same tree and the same installed packages), it prints exactly what
:func:`castfind.cli.where` prints and returns its exit code. Anything else — another command, an
option it does not know, a value it is unsure of, no cache, a cache notice, a carried answer that
does not apply — prints nothing and leaves the run to :mod:`castfind.cli`, which parses and
answers as it always does.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from castfind.discover import parse_size

if TYPE_CHECKING:
    from castfind.where import WhereResult

#: Options taking a value, by spelling → field of :class:`_WhereArgs`.
_VALUED = {"--root": "roots", "-r": "roots", "--exclude": "exclude", "--cache-dir": "cache_dir",
           "--jobs": "jobs", "-j": "jobs", "--max-file-size": "max_file_size"}
_REPEATED = {"roots", "exclude"}


@dataclass(frozen=True, slots=True)
class _WhereArgs:
    symbol: str
    roots: tuple[str, ...]
    exclude: tuple[str, ...]
    cache_dir: str | None
    jobs: int
    max_file_size: int
    json_out: bool
    follow_installed: bool = True


def _parse(args: list[str]) -> _WhereArgs | None:
    """``where SYMBOL [options]`` with only ``--json``, ``--[no-]follow-installed`` and the options of
    :data:`_VALUED` (as ``--opt VALUE``, ``--opt=VALUE`` or ``-r VALUE``); None for anything else."""
    if not args or args[0] != "where":
        return None
    symbol: str | None = None
    got: dict[str, list[str]] = {"roots": [], "exclude": [], "cache_dir": [], "jobs": [], "max_file_size": []}
    json_out, follow = False, True
    i = 1
    while i < len(args):
        a = args[i]
        if a == "--json":
            json_out = True
        elif a in ("--follow-installed", "--no-follow-installed"):
            follow = a == "--follow-installed"
        elif a.startswith("-"):
            name, eq, value = a.partition("=") if a.startswith("--") else (a, "", "")
            field = _VALUED.get(name)
            if field is None:
                return None
            if not eq:
                i += 1
                if i >= len(args):
                    return None
                value = args[i]
            if value.startswith("-"):
                return None  # click's reading of such a value is not ours to guess
            got[field].append(value)
        elif symbol is None:
            symbol = a
        else:
            return None
        i += 1
    jobs = got["jobs"][-1] if got["jobs"] else "0"
    size = parse_size(got["max_file_size"][-1]) if got["max_file_size"] else 2 * 1024 * 1024
    if symbol is None or not (jobs.isascii() and jobs.isdigit()) or size is None:
        return None
    return _WhereArgs(symbol, tuple(got["roots"]), tuple(got["exclude"]),
                      got["cache_dir"][-1] if got["cache_dir"] else None, int(jobs), size, json_out, follow)


def carried_where(args: list[str]) -> int | None:
    """Print a carried ``where`` answer as :func:`castfind.cli.where` would and return its exit code;
    None, having printed nothing, when this run is not one it can answer."""
    got = _answer(args)
    return None if got is None else print_where(got[0], got[1].json_out)


def _answer(args: list[str]) -> tuple[WhereResult, _WhereArgs] | None:
    """The carried answer to ``args`` (nothing printed), or None."""
    parsed = _parse(args)
    if parsed is None:
        return None
    from castfind.cache import Cache, default_cache_dir
    from castfind.config import ConfigError, load_config
    from castfind.discover import DiscoveryError
    from castfind.fsutil import OutputPathError, ensure_folder
    from castfind.index import Index
    from castfind.where import WhereError, carried_answer

    roots = list(parsed.roots)
    try:
        first = Path(roots[0]) if roots else Path(".")
        report_exclude = load_config(first if first.is_dir() else first.parent).report_exclude
        folder = ensure_folder(parsed.cache_dir or default_cache_dir(), "")
    except (ConfigError, OutputPathError, OSError):
        return None
    cache = Cache(folder)
    try:
        if cache.notices:
            return None
        index = Index.from_roots(roots or ["."], exclude=parsed.exclude, max_file_size=parsed.max_file_size,
                                 cache=cache, jobs=parsed.jobs or (os.cpu_count() or 1),
                                 follow_installed=parsed.follow_installed)
        res = carried_answer(index, parsed.symbol, report_exclude)
        if res is None or cache.notices:
            return None
        index.save()
    except (DiscoveryError, WhereError, OSError):
        return None
    finally:
        cache.close()
    return res, parsed


def print_where(res: WhereResult, json_out: bool) -> int:
    """Print :func:`castfind.report.where_text.where_output` and return its exit code."""
    from castfind.report.where_text import where_output

    head, out, tail, code = where_output(res, json_out)
    for line in head:
        print(line, file=sys.stderr)
    sys.stdout.write(out)
    for line in tail:
        print(line, file=sys.stderr)
    return code


def main() -> None:
    """Console-script entry point: a carried ``where`` answer at once, else :func:`castfind.cli.main`."""
    try:
        got = _answer(sys.argv[1:])
    except Exception:  # never worse than the full path: it runs, and reports, as it always does
        got = None
    if got is None:
        from castfind.cli import main as full

        full()
        return
    try:
        code = print_where(got[0], got[1].json_out)  # once: a failure here is not retried
        sys.stdout.flush()
    except BrokenPipeError:  # a closed pipe: quietly, exit 1, as click does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # (Python's own recipe)
        code = 1
    sys.exit(code)
