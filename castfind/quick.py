"""``castfind where`` and ``castfind scan`` answered from their carried results before the command
line is built.

PERF: building the typer app imports typer, its vendored click and pydantic (typer converts each
parameter through a pydantic ``TypeAdapter``): a third of a second and more, several times what a
carried answer costs. :func:`main` (what ``python -m castfind`` and the ``castfind`` script run)
first tries the carried result: for a ``where`` or a ``scan`` whose arguments it reads with
certainty (a strict subset of the command's options) and whose answer is carried
(:func:`castfind.where.lookup.where`: the same query on the same tree and the same installed packages;
:func:`castfind.api.carried_scan`: the same configuration on the same tree), it prints exactly what
:mod:`castfind.cli` prints and returns its exit code. Anything else — another command, an option it
does not know, a value it is unsure of, no cache, a cache notice, a result that is not carried —
prints nothing and leaves the run to :mod:`castfind.cli`, which parses and answers as it always
does (a scan that is not carried has then been planned twice: a few tenths of a second before a
parse of minutes).
"""

from __future__ import annotations

import os
import sys
from types import SimpleNamespace
from typing import Any

from castfind import options
from castfind.core import started
from castfind.store.discover import parse_size

#: What a run prints: stderr's lines before stdout's text, the text, stderr's lines after it, the exit code.
Printed = tuple[list[str], str, list[str], int]


def _parse(args: list[str]) -> SimpleNamespace | None:
    """``where SYMBOL [options]`` or ``scan [PATH ...] [options]`` with only the options that
    :data:`castfind.options.WHERE` and :data:`~castfind.options.SCAN` mark ``quick`` (spelled as declared:
    a flag alone, ``--opt VALUE``, ``--opt=VALUE`` or ``-r VALUE``); None for anything else.

    The result has the command, its operands and each quick option's value by its declared name,
    the declared default when not given (``jobs`` and ``max_file_size`` as numbers, lists as tuples)."""
    if not args or args[0] not in ("where", "scan"):
        return None
    command = args[0]
    readable = options.quick_options(options.WHERE if command == "where" else options.SCAN)
    operand = next(o for o in readable if o.argument)
    spellings = {s: (o, v) for o in readable if not o.argument for s, v in options.flag_spellings(o).items()}
    given: dict[str, Any] = {o.name: () if o.repeatable else o.default for o in readable if not o.argument}
    operands: list[str] = []
    i = 1
    while i < len(args):
        a = args[i]
        if a.startswith("-"):
            name, eq, value = a.partition("=") if a.startswith("--") else (a, "", "")
            option, sets = spellings.get(name, (None, None))
            if option is None:
                return None
            if sets is not None:  # a flag: exactly as spelled, never with a value
                if eq:
                    return None
                given[option.name] = sets
                i += 1
                continue
            if not eq:
                i += 1
                if i >= len(args):
                    return None
                value = args[i]
            if value.startswith("-"):
                return None  # click's reading of such a value is not ours to guess
            given[option.name] = (*given[option.name], value) if option.repeatable else value
        elif operand.repeatable or not operands:
            operands.append(a)
        else:
            return None
        i += 1
    jobs, size = str(given["jobs"]), parse_size(given["max_file_size"])
    if (operand.default is ... and not operands) or not (jobs.isascii() and jobs.isdigit()) or size is None:
        return None
    return SimpleNamespace(**{**given, "jobs": int(jobs), "max_file_size": size}, command=command,
                           operands=tuple(operands))


def carried_where(args: list[str]) -> int | None:
    """Print a carried ``where`` answer as :func:`castfind.cli.where` would and return its exit code;
    None, having printed nothing, when this run is not one it can answer."""
    return _print(_answer(args)) if args[:1] == ["where"] else None


def carried_scan(args: list[str]) -> int | None:
    """Print a carried ``scan`` outcome as :func:`castfind.cli.scan` would and return its exit code;
    None, having printed nothing, when this run is not one it can answer."""
    return _print(_answer(args)) if args[:1] == ["scan"] else None


def _answer(args: list[str]) -> Printed | None:
    """What a carried ``where`` answer or ``scan`` outcome prints (nothing printed yet), or None."""
    parsed = _parse(args)
    if parsed is None:
        return None
    return _where(parsed) if parsed.command == "where" else _scan(parsed)


def _where(parsed: SimpleNamespace) -> Printed | None:
    from castfind.core.config import ConfigError, report_exclude_for
    from castfind.core.fsutil import OutputPathError, ensure_folder
    from castfind.report.where_text import where_output
    from castfind.store.cache import Cache, default_cache_dir
    from castfind.store.discover import DiscoveryError, check_root
    from castfind.store.index import Index
    from castfind.where.answer import WhereError, carried_answer

    roots = list(parsed.root)
    try:
        # --time-budget: a cut answer stands only for a lookup given no more time than the one it cut.
        seconds = None if parsed.time_budget is None else float(parsed.time_budget)
    except ValueError:
        return None  # the full command says what is wrong with it
    try:
        report_exclude = report_exclude_for(roots)
        folder = ensure_folder(parsed.cache_dir or default_cache_dir(), "")
    except (ConfigError, OutputPathError, OSError):
        return None
    cache = Cache(folder)
    try:
        if cache.notices:
            return None
        for root in roots or ["."]:
            check_root(root)
        index = Index.from_roots(roots or ["."], exclude=parsed.exclude, max_file_size=parsed.max_file_size,
                                 cache=cache, jobs=parsed.jobs or (os.cpu_count() or 1),
                                 follow_installed=parsed.follow_installed)
        res = carried_answer(index, parsed.operands[0], report_exclude, seconds=seconds)
        if res is None or cache.notices:
            return None
        index.save()
    except (DiscoveryError, WhereError, OSError):
        return None
    finally:
        cache.close()
    return where_output(res, parsed.json_out)


def _scan(parsed: SimpleNamespace) -> Printed | None:
    from castfind import api, pipeline
    from castfind.report import ReportContext, SourceCache, registry
    from castfind.report.scan_text import scan_output
    from castfind.report.text import wants_color

    request = pipeline.ScanRequest(
        paths=parsed.operands, roots=parsed.root, exclude=parsed.exclude,
        index=pipeline.IndexOptions(cache_dir=parsed.cache_dir, jobs=parsed.jobs or None,
                                    max_file_size=parsed.max_file_size))
    run = api.carried_scan(request)
    if run is None or any(d.kind == "cache" for d in run.report.diagnostics):
        return None
    reporter = registry.get("json" if parsed.json_out else registry.DEFAULT_FORMAT)
    ctx = ReportContext(rules=run.rules, source_line=SourceCache().line, fail_on=run.fail_on,
                        color=wants_color("auto", sys.stdout, os.environ))
    head, tail, code = scan_output(run)
    return head, reporter.render(run.report, ctx) + reporter.stdout_end, tail, code


def _print(printed: Printed | None) -> int | None:
    if printed is None:
        return None
    head, out, tail, code = printed
    for line in head:
        print(line, file=sys.stderr)
    sys.stdout.write(out)
    for line in tail:
        print(line, file=sys.stderr)
    return code


def main() -> None:
    """Console-script entry point: a carried ``where`` answer or ``scan`` outcome at once, else
    :func:`castfind.cli.main`. The command's start (:mod:`castfind.core.started`) is when ``where``'s time budget
    counts from: a person waits from the moment they started it, imports and the command line's parse included (a
    third of a second and more, twice that on a loaded machine)."""
    started.begin()
    try:
        _main()
    finally:
        started.end()


def _main() -> None:
    try:
        got = _answer(sys.argv[1:])
    except Exception:  # never worse than the full path: it runs, and reports, as it always does
        got = None
    if got is None:
        from castfind.cli import main as full

        full()
        return
    try:
        code = _print(got)  # once: a failure here is not retried
        sys.stdout.flush()
    except BrokenPipeError:  # a closed pipe: quietly, exit 1, as click does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # (Python's own recipe)
        code = 1
    sys.exit(code)
