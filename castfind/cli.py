"""The command line. It only parses arguments, calls :mod:`castfind.api`, prints and picks exit codes.

Exit codes: 0 clean / found, 1 findings (or, for ``where``, nothing found), 2 usage or input error,
or (``scan``) a file Python accepts that castfind could not analyse; also 2 for an internal error
(one line; ``CASTFIND_DEBUG=1`` adds the traceback), 130 on Ctrl-C.
"""

from __future__ import annotations

import inspect
import json
import os
import sys
import traceback
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, NoReturn

import typer
from typer.core import TyperGroup

from castfind import __version__, options
from castfind.core.crash import debug, internal_error
from castfind.options import Option

# click's ClickException (usage errors and the like), whether typer vendors click or imports it.
_CLICK_ERROR: type[Exception] = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")
_USAGE_ERROR: type[Exception] = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")
_COMMAND_KEY = "castfind.command"


class _Group(TyperGroup):
    """A command group that records which command runs and turns any exception that is not
    click's own control flow (usage errors, ``typer.Exit``) into :func:`castfind.core.crash.internal_error`.

    Subcommand names collect in ``ctx.meta`` (shared by a context and its children), so a
    nested group using this class reports ``rules list``, not just ``rules``.
    """

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,  # type: ignore[override]
             standalone_mode: bool = True, **kwargs: Any) -> Any:
        """Every usage error is one line, ``castfind: COMMAND: what is wrong — see 'COMMAND --help'``, exit 2
        (click would print a usage block and rich a box). ``castfind`` alone still prints the help."""
        kwargs.update(args=args, prog_name=prog_name, complete_var=complete_var)
        if not standalone_mode:
            return super().main(standalone_mode=False, **kwargs)
        try:
            rv = super().main(standalone_mode=False, **kwargs)
        except _CLICK_ERROR as e:
            if type(e).__name__ == "NoArgsIsHelpError":
                return super().main(**kwargs)  # the help, as before
            names, ctx = [], getattr(e, "ctx", None)
            while ctx is not None and ctx.parent is not None:  # the subcommands, not how castfind was started
                names.append(ctx.info_name)
                ctx = ctx.parent
            command = " ".join(["castfind", *reversed(names)])
            message = " ".join(e.format_message().split())  # type: ignore[attr-defined]
            hint = f" — see '{command} --help'" if isinstance(e, _USAGE_ERROR) else ""
            typer.echo(f"castfind: {''.join(n + ': ' for n in reversed(names))}{message}{hint}", err=True)
            sys.exit(getattr(e, "exit_code", 2))
        except typer.Abort:
            typer.echo("castfind: aborted", err=True)
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        name, command, rest = super().resolve_command(ctx, args)
        if name:
            ctx.meta.setdefault(_COMMAND_KEY, []).append(name)
        return name, command, rest

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, _CLICK_ERROR, BrokenPipeError):
            raise  # click's own handling: usage errors exit 2, a closed pipe exits quietly
        except KeyboardInterrupt:
            typer.echo("castfind: interrupted", err=True)
            raise typer.Exit(130) from None
        except Exception as exc:
            raise typer.Exit(internal_error(" ".join(ctx.meta.get(_COMMAND_KEY, [])) or "castfind", exc)) from None


app = typer.Typer(
    name="castfind",
    cls=_Group,
    help="Find whole-buffer dtype casts on hot paths of PyTorch serving code, and where symbols are really defined.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"castfind {__version__}")
        raise typer.Exit(0)


@app.callback()
def _main(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
) -> None:
    """castfind: a static tracer for dtype conversions in PyTorch serving code."""


def _progress(label: str):
    """A one-line progress bar on stderr, only when stderr is a terminal."""
    if not sys.stderr.isatty():
        return None

    def show(done: int, total: int) -> None:
        width = 30
        filled = int(width * done / max(total, 1))
        sys.stderr.write(f"\r{label} [{'#' * filled}{'.' * (width - filled)}] {done}/{total} files")
        if done >= total:
            sys.stderr.write("\r" + " " * (width + len(label) + 30) + "\r")
        sys.stderr.flush()

    return show


def _fail(message: str) -> NoReturn:
    """A usage or input error: one line on stderr, exit 2."""
    from castfind.core.names import shown

    typer.echo(f"castfind: {shown(message)}", err=True)  # one line, whatever a file is called
    raise typer.Exit(2)


def _jobs(jobs: int) -> int | None:
    """``--jobs``: 0 means one per core (None for the library); a negative count is a usage error."""
    if jobs < 0:
        _fail(f"--jobs {jobs}: must be 0 (one process per core) or more — e.g. --jobs 4")
    return jobs or None


def _os_error(exc: OSError, path: str, hint: str) -> str:
    """``PATH: reason — hint`` for a file-system error."""
    return f"{exc.filename or path}: {exc.strerror or exc} — {hint}"


def _typer_parameter(option: Option) -> Any:
    """``option`` as typer's default-value declaration (``typer.Option(...)`` or ``typer.Argument(...)``)."""
    if option.argument:
        return typer.Argument(option.default, help=option.help)
    return typer.Option(option.default, *option.flags, help=option.help, metavar=option.metavar, min=option.min)


def declared(declaration: tuple[Option, ...]) -> Callable[[Callable[[Any], None]], Callable[..., None]]:
    """A command whose parameters are ``declaration`` (:mod:`castfind.options`): typer reads the generated
    signature; the body is called with the parsed values as one namespace (``o.root``, ``o.jobs``, ...)."""

    def wrap(body: Callable[[Any], None]) -> Callable[..., None]:
        def command(**given: Any) -> None:
            body(SimpleNamespace(**given))

        params = [inspect.Parameter(o.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=_typer_parameter(o),
                                    annotation=o.type) for o in declaration]
        command.__signature__ = inspect.Signature(params, return_annotation=None)  # type: ignore[attr-defined]
        command.__annotations__ = {**{o.name: o.type for o in declaration}, "return": None}
        command.__name__, command.__qualname__, command.__doc__ = body.__name__, body.__qualname__, body.__doc__
        command.__module__ = body.__module__
        return command

    return wrap


def _budget(text: str) -> int | None:
    """``--parse-budget``: a size as for ``--max-file-size``, or 0 for no limit."""
    from castfind.store.discover import parse_size

    if text.strip() == "0":
        return None
    size = parse_size(text)
    if size is None:
        _fail(f"--parse-budget {text}: expected a size such as 1M or 500K, or 0 for no limit")
    return size


def _size(text: str) -> int:
    """``--max-file-size``: ``2M``, ``500K`` or plain bytes."""
    from castfind.store.discover import parse_size

    size = parse_size(text)
    if size is None:
        _fail(f"--max-file-size {text}: expected a positive size such as 2M, 500K or 1048576")
    return size


@app.command()
@declared(options.WHERE)
def where(o: Any) -> None:
    """Where is SYMBOL really defined? Follows aliases, re-exports, star imports and returned callables.

    Exit 0 when found, 1 when nothing is found (close names are suggested), 2 on usage errors.

    Example: castfind where flashinfer_cutlass_fused_moe --root /root/sglang --root /usr/lib/python3/site-packages/flashinfer
    """
    from castfind import api
    from castfind.core.config import ConfigError
    from castfind.core.fsutil import OutputPathError
    from castfind.core.started import command_started
    from castfind.store.discover import DiscoveryError
    from castfind.where.lookup import WhereError

    n_jobs = _jobs(o.jobs)
    at_loc = None
    if o.at:
        path, _, line = o.at.rpartition(":")
        if not path or not line.isdigit():
            _fail(f"--at {o.at}: expected PATH:LINE, e.g. --at python/sglang/srt/x.py:120")
        at_loc = (path, int(line))
    try:
        res = api.where(o.symbol, list(o.root or []), at_loc, exclude=tuple(o.exclude or ()), cache_dir=o.cache_dir,
                        use_cache=not o.no_cache, jobs=n_jobs, follow_installed=o.follow_installed,
                        max_file_size=_size(o.max_file_size), progress=_progress("parsing"),
                        budget=_budget(o.parse_budget), seconds=o.time_budget, started=command_started())
    except (DiscoveryError, WhereError, OutputPathError, ConfigError) as e:
        _fail(str(e))
    from castfind.report.where_text import where_output

    head, out, tail, code = where_output(res, o.json_out)
    for line in head:
        typer.echo(line, err=True)
    typer.echo(out, nl=False)
    for line in tail:
        typer.echo(line, err=True)
    if code:
        raise typer.Exit(code)


@app.command()
@declared(options.SCAN)
def scan(o: Any) -> None:
    """Flag whole-buffer dtype casts (KV caches, whole weights) on hot paths, ranked by how bad they are.

    Exit 0 when no finding is at or above --fail-on, 1 when one is, 2 on usage or input errors.

    Example: castfind scan /root/sglang --trace decode.castfind.jsonl
    """
    from castfind import api, pipeline
    from castfind.analysis.findings import BaselineError
    from castfind.core.config import ConfigError
    from castfind.core.fsutil import OutputPathError
    from castfind.core.rules import RuleError
    from castfind.report import ReportContext, SourceCache, registry
    from castfind.report.scan_text import scan_output
    from castfind.store.discover import DiscoveryError
    from castfind.store.gitref import GitRefError

    if o.fail_on is not None and o.fail_on not in ("error", "warning", "info"):
        _fail(f"--fail-on {o.fail_on}: expected error, warning or info")
    n_jobs = _jobs(o.jobs)
    from castfind.report.text import wants_color

    try:
        color = wants_color(o.color, sys.stdout, os.environ)
    except ValueError as e:
        _fail(str(e))
    if o.json_out and o.output_format not in (None, "json"):
        _fail(f"--json --format {o.output_format}: --json is --format json — give one of them")
    if o.stops and o.explain:
        _fail("--stops --explain: each prints its own account of the scan — give one of them")
    if o.stops and (o.sarif or o.output_format not in (None, "json", "text")):
        given = f"--sarif {o.sarif}" if o.sarif else f"--format {o.output_format}"
        _fail(f"--stops {given}: the stop table is text or JSON — drop {given.split()[0]} or use --json")
    if o.sarif == "-" and o.output is None and (o.json_out or o.output_format is not None):
        given = "--json" if o.json_out else "--format"
        _fail(f"--sarif - {given}{'' if o.json_out else f' {o.output_format}'}: only one document can go to stdout — "
              f"write the SARIF to a file (--sarif FILE) or drop {given}")
    extra = {"sarif": o.sarif, "json": o.json_output, "github": o.github_output, "gitlab": o.gitlab_output,
             "junit": o.junit_output, "markdown": o.markdown_output}
    outputs = [(name, path) for name, path in extra.items() if path is not None]
    if (o.stops or o.explain) and (o.output is not None or any(name != "sarif" for name, _ in outputs)):
        given = "--output" if o.output is not None else next(f"--{name}-output" for name, _ in outputs if name != "sarif")
        _fail(f"{'--stops' if o.stops else '--explain'} {given}: it prints its own account of the scan, not a report — "
              f"drop {given}")
    try:
        reporter = registry.get(o.output_format or ("json" if o.json_out else registry.DEFAULT_FORMAT))
    except registry.UnknownFormat as e:
        _fail(str(e))
    _check_outputs(o.output, outputs)
    sets = [_set_spec(s) for s in o.set_ or []]
    select = _selectors(o.select)
    explain_at = None
    if o.explain:
        explain_at = _explain_spec(o.explain)
        p = explain_at[0]
        given_roots = list(o.root or []) or ([] if o.only else list(o.paths or []))
        if given_roots:  # else the roots come from [tool.castfind]: checked after the scan
            _check_explain_file(p, given_roots)
    errors: tuple[type[BaseException], ...] = (RuleError, ConfigError, BaselineError, DiscoveryError, OutputPathError,
                                               GitRefError, ValueError)
    try:
        from castfind.runtime.trace import TraceError

        errors += (TraceError,)
    except ImportError:
        pass
    try:
        request = pipeline.ScanRequest(
            paths=tuple(o.paths or ()), roots=tuple(o.root or ()), only=o.only, rules=tuple(o.rules or ()),
            entry_points=tuple(o.entry_point or ()), fail_on=o.fail_on, baseline=o.baseline,
            write_baseline=o.write_baseline, traces=tuple(o.trace or ()), demand=not o.eager,
            explain=explain_at is not None, stops=o.stops, exclude=tuple(o.exclude or ()),
            warn_unused_ignores=o.warn_unused_ignores, baseline_commit=o.baseline_commit,
            include_tests=o.include_tests, select=select or None, extend_select=_selectors(o.extend_select),
            ignore=_selectors(o.ignore), config=o.config,
            index=pipeline.IndexOptions(cache_dir=o.cache_dir, use_cache=not o.no_cache, jobs=n_jobs,
                                        max_file_size=_size(o.max_file_size), progress=_progress("parsing")),
            cost=pipeline.CostRequest(tuple(sets), o.model_config, o.kv_tokens, o.kv_cache_dtype,
                                      platform=o.platform, attention_backend=o.attention_backend,
                                      quantization=o.quantization, tp=o.tp, all_paths=o.all_paths,
                                      all_models=o.all_models),
            outputs=tuple(_output_targets(reporter, o.output, outputs)))
        run = api.scan(request)
    except errors as e:
        _fail(f"{e}")
    head, tail, code = scan_output(run)
    for line in head:
        typer.echo(line, err=True)
    report = run.report
    if explain_at is not None:
        _check_explain_file(explain_at[0], [str(r) for r in report.stats.get("roots", [])])
        _print_explanation(run, explain_at)
        raise typer.Exit(0)
    if o.stops and run.stops is not None:
        if o.json_out or o.output_format == "json":
            typer.echo(json.dumps(run.stops.to_dict(), indent=2, allow_nan=False))
        else:
            _print_stops(run.stops)
        raise typer.Exit(0)
    ctx = ReportContext(rules=run.rules, source_line=SourceCache().line, color=color, statistics=o.statistics,
                        fail_on=run.fail_on)
    for name, path in outputs:
        extra_reporter = registry.get(name)
        doc = extra_reporter.render(report, ctx)
        if path == "-":
            typer.echo(doc + extra_reporter.stdout_end, nl=False)
        else:
            _write(path, doc, f"--{name}-output")
    if o.output is not None:
        _write(o.output, reporter.render(report, ctx), "--output")
    elif o.sarif != "-" and not run.wrote_baseline:  # else SARIF is the document on stdout; a baseline: one line
        # click strips ANSI codes from what goes to a pipe unless told: --color always means colour there too.
        typer.echo(reporter.render(report, ctx) + reporter.stdout_end, nl=False, color=True if color else None)
    for line in tail:
        typer.echo(line, err=True)
    raise typer.Exit(0 if o.exit_zero and code == 1 else code)


def _selectors(given: list[str] | None) -> tuple[str, ...]:
    """``--select CF101,CF102 --select CF9`` → ("CF101", "CF102", "CF9"), as ruff reads its rule lists."""
    return tuple(s.strip() for item in given or () for s in item.split(",") if s.strip())


def _check_outputs(output: str | None, outputs: list[tuple[str, str]]) -> None:
    """Every output file must be writable, and no two outputs may share a file (checked before the scan)."""
    from castfind.core.fsutil import OutputPathError, check_output_file

    seen: dict[str, str] = {}
    for option, path in ([("--output", output)] if output is not None else []) + \
            [(f"--{name}-output", path) for name, path in outputs]:
        if path == "-":
            if option != "--sarif-output":
                _fail(f"{option} -: give a file path (the --format document is what goes to stdout)")
            continue
        try:
            check_output_file(path, f"pass a file path in a writable folder to {option}")
        except OutputPathError as e:
            _fail(str(e))
        key = os.path.abspath(path)
        if key in seen:
            _fail(f"{seen[key]} {path} {option} {path}: two outputs to one file — give each its own path")
        seen[key] = option


def _output_targets(reporter: Any, output: str | None, outputs: list[tuple[str, str]]) -> list[tuple[str, str, str, Any]]:
    """(option, path, what, owns) of each output file, for the scan's one output check (castfind.core.fsutil)."""
    from castfind.report import registry

    given = [("--output", output, reporter)] if output is not None else []
    given += [(f"--{name}-output", path, registry.get(name)) for name, path in outputs if path != "-"]
    return [(option, path, r.what, r.owns) for option, path, r in given]


def _write(path: str, doc: str, option: str) -> None:
    """Write one output document atomically; a failure is a one-line error (exit 2)."""
    from castfind.core.fsutil import atomic_write_text

    try:
        atomic_write_text(path, doc)
    except OSError as e:
        _fail(_os_error(e, path, f"pass a file path in a writable folder to {option}"))


def _check_explain_file(path: str, roots: list[str]) -> None:
    """``--explain PATH``: PATH must exist as given or inside one of ``roots``."""
    if os.path.isfile(path) or any(os.path.isfile(os.path.join(r, path)) for r in roots):
        return
    where = f"here or under {', '.join(roots)}" if roots else "here"
    _fail(f"{path}: no such file ({where}) — pass --explain PATH:LINE of a file inside a root")


def _set_spec(spec: str) -> tuple[str, str]:
    """``--set NAME=VALUE`` → (name, value); a usage error otherwise."""
    from castfind.analysis.cost import parse_set

    try:
        return parse_set(spec)
    except ValueError as e:
        _fail(str(e))


def _explain_spec(spec: str) -> tuple[str, int, int | None]:
    """``--explain PATH:LINE[:COL]`` → (path, line, column or None); a usage error otherwise."""
    head, _, last = spec.rpartition(":")
    if not head or not last.isdigit():
        _fail(f"--explain {spec}: expected PATH:LINE or PATH:LINE:COL")
    path, _, mid = head.rpartition(":")
    if path and mid.isdigit():
        return path, int(mid), int(last)
    return head, int(last), None


def _print_explanation(run, at: tuple[str, int, int | None]) -> None:
    """One account per cast on the line (only the one at COL when given): a cast whose call spans the line
    counts. A line with no cast is a usage error (exit 2), never the account of a cast on another line."""
    from castfind.core.names import shown

    path, line, col = at
    norm = path.replace("\\", "/")
    best = sorted(k for k, e in run.explanations.items()
                  if (norm.endswith(k[0]) or k[0].endswith(norm.lstrip("./"))) and e.covers(line))
    where = f"{path}:{line}" + (f":{col}" if col is not None else "")
    if not best:
        _fail(f"{where}: no cast that castfind examined on this line — give the line of a .to()/.float()/copy_ "
              "call (castfind examines the casts of files that name a buffer; --stops lists them)")
    if col is not None:
        at_col = [k for k in best if k[2] == col]
        if not at_col:
            cols = ", ".join(str(k[2]) for k in best)
            typer.echo(f"{where}: no cast starts at column {col}; the casts on line {best[0][1]} start at "
                       f"column {cols}")
            return
        best = at_col
    for k in best:
        e = run.explanations[k]
        typer.echo(shown(f"{e.path}:{e.line}:{e.column}: {e.expr}"))
        for w in e.why:
            typer.echo(f"  - {shown(w)}")
        for f in run.report.findings:
            if (f.path, f.line, f.column) == k:
                typer.echo(f"  => {f.rule} {f.severity}: {f.message}")


def _print_stops(table) -> None:
    """``--stops``: casts per stop reason, each with its top files."""
    from castfind.core.names import shown

    typer.echo(f"{table.examined} dtype cast(s) examined, {table.buffer_like} with a buffer-like operand "
               f"({table.whole} of them a whole buffer)")
    if not table.rows:
        typer.echo("no proof stopped")
        return
    typer.echo(f"{'stop reason':<22}{'casts':>6}  top files")
    for row in table.rows:
        typer.echo(f"{row.reason:<22}{row.count:>6}")
        for path, n in row.files:
            typer.echo(f"{'':<22}{n:>6}  {shown(path)}")


rules_app = typer.Typer(cls=_Group, help="List, test and validate rule files.", no_args_is_help=True)
app.add_typer(rules_app, name="rules")


@rules_app.command("list")
def rules_list(
    rules: list[str] | None = typer.Option(None, "--rules", help="Extra rule folder or file (repeatable)."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """List every rule: id, severity, name and message."""
    from castfind.core.rules import RuleError, load_rules

    try:
        rs = load_rules(list(rules or []))
    except RuleError as e:
        _fail(str(e))
    if json_out:
        typer.echo(json.dumps([{"id": r.id, "name": r.name, "severity": r.severity, "message": r.message,
                                 "buffers": list(r.buffers), "hot": r.hot, "once": r.once, "source": r.source}
                                for r in rs.rules], indent=2, allow_nan=False))
        return
    for r in rs.rules:
        typer.echo(f"{r.id}  {r.severity:<7}  {r.name}\n      {r.message}")


@app.command("rule")
def rule_command(
    rule_id: str = typer.Argument(..., metavar="RULE", help="A rule id (CF101) or kebab-case name."),
    rules: list[str] | None = typer.Option(None, "--rules", help="Extra rule folder or file (repeatable)."),
) -> None:
    """Print a rule's documentation: what it flags, why that costs, the fix, and its examples (as ruff rule).

    Exit 0, or 2 when no rule has that id or name. Example: castfind rule CF101
    """
    from castfind.core.rules import RuleError, load_rules
    from castfind.pipeline import report_rules

    try:
        rs = load_rules(list(rules or []))
    except RuleError as e:
        _fail(str(e))
    known = report_rules(rs, unused_ignores=True)
    rule = next((r for r in known if rule_id.upper() == r.id or rule_id == r.name), None)
    if rule is None:
        _fail(f"rule {rule_id}: no rule has this id or name — 'castfind rules list' lists them")
    typer.echo("\n".join(_rule_doc(rule)))


def _rule_doc(rule) -> list[str]:
    """``castfind rule``'s text: a heading, what it flags, why it costs, the fix, the examples, the docs link."""
    import re
    import textwrap

    flags = re.sub(r"\{(\w+)[^}]*\}", r"<\1>", rule.message)
    when = {True: "on a hot path", False: "off every hot path", None: ""}[rule.hot]
    how_often = {True: "that runs once", False: "that runs on every call", None: ""}[rule.once]
    scope = ", ".join(x for x in (f"casts of {', '.join(rule.buffers)}" if rule.buffers else "",
                                  f"methods {', '.join(rule.cast)}" if rule.cast else "", when, how_often) if x)
    out = [f"{rule.id} {rule.name} ({rule.severity})", "", "what it flags:", f"    {flags}"]
    if scope:
        out.append(f"    ({scope})")
    if rule.why:
        out += ["", "why it costs:", *textwrap.wrap(rule.why, 100, initial_indent="    ", subsequent_indent="    ")]
    if rule.fix:
        out += ["", "fix:", *textwrap.wrap(rule.fix, 100, initial_indent="    ", subsequent_indent="    ")]
    for title, code in (("flagged (the line marked # match)", rule.match_example),
                        ("not flagged", rule.no_match_example)):
        if code:
            out += ["", f"example, {title}:", textwrap.indent(code.rstrip("\n"), "    ")]
    if rule.help_uri:
        out += ["", f"docs: {rule.help_uri}"]
    return out


@rules_app.command("test")
def rules_test(
    rules: list[str] | None = typer.Option(None, "--rules", help="Extra rule folder or file (repeatable)."),
) -> None:
    """Run every rule's examples: lines marked '# match' must be flagged, 'no_match' code must not be."""
    from castfind.core.rules import RuleError, load_rules
    from castfind.ruletest import run_examples

    try:
        rs = load_rules(list(rules or []))
    except RuleError as e:
        _fail(str(e))
    failures = 0
    for r, problems in run_examples(rs):
        status = "ok" if not problems else "FAIL"
        typer.echo(f"{r.id} {r.name}: {status}")
        for p in problems:
            typer.echo(f"    {p}")
        failures += bool(problems)
    typer.echo(f"{len(rs.rules) - failures} passed, {failures} failed")
    raise typer.Exit(1 if failures else 0)


@rules_app.command("validate")
def rules_validate(
    rules: list[str] | None = typer.Option(None, "--rules", help="Rule folder or file to check (repeatable)."),
) -> None:
    """Check rule files and list every problem as file:line: key: reason."""
    from castfind.core.rules import validate

    _, errors = validate(list(rules or []))
    for e in errors:
        typer.echo(str(e))
    if errors:
        raise typer.Exit(2)
    typer.echo("rule files are valid")


_INIT_HELP = (
    "Set a project up for castfind: a starter \\[tool.castfind] section and the pre-commit hook.\n\n"
    "pyproject.toml: created with a \\[tool.castfind] section, or the section is appended (CRLF line endings are"
    " kept; a symlinked file's target is edited, the link stays). An existing \\[tool.castfind] section is never"
    " touched.\n\n"
    ".pre-commit-config.yaml: created with the castfind hook. An existing one is never rewritten (that would lose"
    " its comments and layout): the entry to paste is printed instead.\n\n"
    "It only ever adds, so running it again changes nothing. Exit 0 when done, 2 when FOLDER is not a folder or a"
    " file cannot be read or written.\n\n"
    "Example: castfind init ."
)


@app.command("init", help=_INIT_HELP)
def init_command(
    folder: str = typer.Argument(".", help="The project folder (default: the current one)."),
) -> None:
    """Set a project up for castfind (help text: :data:`_INIT_HELP`)."""
    from castfind.init import init

    try:
        lines = init(folder)
    except OSError as e:
        _fail(_os_error(e, folder, "pass an existing project folder you can write in"))
    for line in lines:
        typer.echo(line)


@app.command("server")
def server_command(
    cache_dir: str = typer.Option(None, "--cache-dir", help="The cache folder (default: castfind's user cache)."),
) -> None:
    """Run castfind's language server on standard input and output (LSP: diagnostics, quick fix, hover, definition).

    Needs the lsp extra (pygls and lsprotocol). Example (Neovim): vim.lsp.start({cmd = {'castfind', 'server'}})
    """
    try:
        from castfind.server import serve
    except ImportError as e:
        if e.name not in ("pygls", "lsprotocol") and not str(e.name or "").startswith(("pygls.", "lsprotocol.")):
            raise
        _fail("server: needs pygls and lsprotocol — pip install 'castfind[lsp]' (or: pip install pygls lsprotocol)")
    serve(cache_dir)


RUNTIME_COMMANDS = ("record", "trace")


def _runtime_unavailable(name: str, exc: Exception, stage: str) -> Callable[[], None]:
    why = " ".join(f"{type(exc).__name__}: {exc}".split())

    def unavailable() -> None:
        if debug():
            traceback.print_exception(exc)
        shows = "the import traceback" if stage == "import" else "the traceback"
        _fail(f"{name}: unavailable, castfind.runtime.cli failed to {stage} ({why}) — reinstall castfind; "
              f"CASTFIND_DEBUG=1 shows {shows}")

    unavailable.__doc__ = f"Unavailable: castfind.runtime.cli failed to {stage} ({why})."
    return unavailable


def _register_runtime(target: typer.Typer) -> None:
    """Add ``record`` and ``trace`` to ``target``. If their module fails to import, or its
    ``register`` fails (neither needs torch), stand-ins say why and exit 2, rather than the
    commands silently vanishing or ``scan`` and ``where`` going down with them.

    The commands are registered on a scratch app first and moved over only when all of them
    were, so a ``register`` that fails halfway leaves no half-registered ``trace`` behind.
    """
    stage = "import"
    try:
        from castfind.runtime.cli import register

        stage = "register its commands"
        scratch = typer.Typer()
        register(scratch)
    except Exception as exc:  # any failure: scan and where must keep working
        for name in RUNTIME_COMMANDS:
            target.command(name, context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(
                _runtime_unavailable(name, exc, stage))
        return
    target.registered_commands.extend(scratch.registered_commands)
    target.registered_groups.extend(scratch.registered_groups)


_register_runtime(app)


def main() -> None:
    """Console-script entry point. Usage errors exit 2 (click's convention, which we keep); so do
    internal errors, caught in :class:`_Group` and, for what fails outside a command, here."""
    try:
        app()
    except KeyboardInterrupt:
        sys.stderr.write("castfind: interrupted\n")
        sys.exit(130)
    except Exception as exc:
        sys.exit(internal_error("castfind", exc))
