"""The default, human-readable report.

Each finding is one block whose first line is ``path:line:col: RULE severity message``,
the form editors and terminals turn into a jump link; indented detail lines follow.
Then, when the scan describes a deployment, the per-step table (:func:`format_step`), diagnostics
(``path:line: message``), baseline entries no longer found, and a
one-line summary.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import TextIO

from castfind.core.names import shown
from castfind.core.types import Condition, Cost, CostCheck, Finding, Runtime, StepTable
from castfind.report import ReportContext, ScanReport, SourceLine, Statistics, display_path

__all__ = ["COLOR_CHOICES", "format_bytes", "format_check", "format_conditions", "format_cost",
           "format_finding", "format_runtime", "format_statistics", "format_step", "format_step_bytes", "render",
           "render_report", "step_rows", "step_total", "summary", "wants_color"]

_RESET = "\033[0m"
_BOLD = "\033[1m"
_DIM = "\033[2m"
_SEVERITY_COLOUR = {"error": "\033[31m", "warning": "\033[33m", "info": "\033[36m"}
_INDENT = "    "


#: ``--color WHEN``.
COLOR_CHOICES = ("auto", "always", "never")


def wants_color(when: str, stream: TextIO, environ: Mapping[str, str]) -> bool:
    """Whether the text report is coloured: ``always`` / ``never`` as said (the flag beats the environment);
    ``auto``: not when ``NO_COLOR`` is set (no-color.org), yes when ``FORCE_COLOR`` is set (and not ``0``),
    else when ``stream`` is a terminal. Raises ValueError for another ``when``."""
    if when not in COLOR_CHOICES:
        raise ValueError(f"--color {when}: expected {', '.join(COLOR_CHOICES)}")
    if when != "auto":
        return when == "always"
    if environ.get("NO_COLOR"):
        return False
    if environ.get("FORCE_COLOR", "") not in ("", "0"):
        return True
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False


def _paint(text: str, code: str, color: bool) -> str:
    return f"{code}{text}{_RESET}" if color and code else text


def format_bytes(n: int | float) -> str:
    """Binary units with one decimal: ``512 B``, ``34.0 MiB``, ``2.6 GiB``."""
    value = float(n)
    if abs(value) < 1024:
        return f"{int(value)} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.1f} {unit}"
    raise AssertionError("unreachable")  # pragma: no cover - the loop always returns


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def format_runtime(rt: Runtime) -> str:
    """``78 calls × 34.0 MiB = 2.6 GiB, float8_e4m3fn→bfloat16 [61, 1, 576]`` (+ extras)."""
    shape = "[" + ", ".join(str(d) for d in rt.shape) + "]"
    text = (
        f"{_plural(rt.calls, 'call')} × {format_bytes(rt.bytes_per_call)} = {format_bytes(rt.bytes_total)}, "
        f"{rt.src_dtype}→{rt.dst_dtype} {shape}"
    )
    extras = []
    if rt.device:
        extras.append(f"on {rt.device}")
    if rt.calls_per_step is not None:
        extras.append(f"{rt.calls_per_step:g} calls/step")
    if rt.device_time_us is not None:
        extras.append(f"{rt.device_time_us / 1000:.2f} ms device time")
    if extras:
        text += ", " + ", ".join(extras)
    return text


def format_cost(c: Cost) -> str:
    """``[size + page_size, 1, 576] torch.float8_e4m3fn→activation_dtype, per step: layer_num * (...) = 48.6 GiB``."""
    if not c.shape and not c.per_step:  # no buffer was found to size (a parameter no caller hands one): why
        return c.note or "no number"
    if c.value is not None:
        known = f" = {format_step_bytes(c.value, c.value_max)}" + (" (a range over the candidates)" if c.is_range() else "")
    else:
        names = ", ".join(c.unbound) if c.unbound else "?"
        known = f" (unbound: {names}; bind with --model-config, --kv-tokens or --set NAME=VALUE)"
    text = f"[{', '.join(c.shape)}] {c.src_dtype or '?'}→{c.dst_dtype or '?'}, per step: {c.per_step}{known}"
    text += f" ({c.holder}{f', declared at {c.declared}' if c.declared else ''})" if c.holder else ""
    return text + (f"; {c.note}" if c.note else "")


def format_step_bytes(low: float, high: float | None) -> str:
    """``48.6 GiB`` or, for a range, ``1.2 GiB–48.6 GiB``: the one way every format writes a step's bytes."""
    return format_bytes(low) if high is None or high == low else f"{format_bytes(low)}–{format_bytes(high)}"


def _count(n: float | None) -> str:
    return "?" if n is None else f"{n:g}"


def step_rows(table: StepTable) -> tuple[list[str], list[list[str]]]:
    """The per-step table as a header and rows of cells (text and Markdown lay them out their own way): bytes per
    step (a range's low–high), share of the total, calls per step, rule, location, function, buffer; with a trace,
    the measured calls and bytes per step and the static check beside them."""
    traced = any(r.measured_calls is not None or r.check for r in table.rows)
    conditional = any(r.only_when for r in table.rows)
    head = ["bytes/step", "share", "calls/step", "rule", "location", "function", "buffer"]
    if traced:
        head += ["measured calls/step", "measured bytes/step", "static vs measured"]
    if conditional:
        head += ["runs"]
    rows = []
    for r in table.rows:
        where = f"{display_path(r.root, r.path)}:{r.line}"
        share = f"{100 * r.share:.1f}%"
        cells = [format_step_bytes(r.bytes, r.bytes_max), f"({share})" if r.only_when else share, _count(r.calls),
                 r.rule, where, r.function or "-", r.holder or "-"]
        if traced:
            cells += [_count(r.measured_calls),
                      format_bytes(r.measured_bytes) if r.measured_bytes is not None else "?", r.check or "-"]
        if conditional:
            n = len(r.only_when)
            cells += [("only when its open test holds" if n == 1 else f"only when its {n} open tests hold")
                      if n else "every step"]
        rows.append(cells)
    return head, rows


def step_total(table: StepTable) -> str:
    """``total 53.3 GiB per step over 3 casts, 5.2 GiB more when the open tests of 1 cast hold (...) (1 more costed
    cast without a number: ...)``, then
    the costed casts left out as on other steps only (``; 2 casts run only on the extend step, not counted``)."""
    sometimes = sum(1 for r in table.rows if r.only_when)
    text = (f"total {format_step_bytes(table.total, table.total_max)} per step over "
            f"{_plural(len(table.rows) - sometimes, 'cast')}")
    if sometimes:
        text += (f", {format_step_bytes(table.conditional, table.conditional_max)} more when the open tests of "
                 f"{_plural(sometimes, 'cast')} hold (each finding's 'only when' lists them)")
    if table.unnumbered:
        text += (f" ({_plural(table.unnumbered, 'more costed cast')} without a number: each cost line lists the "
                 f"unbound names to bind, or says why there is no buffer to size)")
    for steps, n in table.elsewhere:
        verb = "runs" if n == 1 else "run"
        text += f"; {_plural(n, 'cast')} {verb} only on the {' and '.join(steps.split(','))} step, not counted"
    return text


def format_step(table: StepTable) -> list[str]:
    """The per-step table in text, as a profiler prints one: aligned columns, most bytes first, then the total."""
    head, rows = step_rows(table)
    widths = [max(len(c) for c in col) for col in zip(head, *rows, strict=True)]
    out = [f"per {table.step} step (static cost of each reported cast):"]
    out += [_INDENT + "  ".join(shown(c).ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()
            for cells in (head, *rows)]
    return [*out, _INDENT + step_total(table)]


def format_check(k: CostCheck) -> str:
    """``agrees: 1,464 B/call both (num_tokens = 61 from the trace)`` or ``MISMATCH: axis 0: ...``."""
    given = f" ({', '.join(f'{n} = {v}' for n, v in k.inferred)} from the trace)" if k.inferred else ""
    if k.status == "mismatch":
        return f"MISMATCH: {'; '.join(k.mismatches)}{given}"
    if k.status == "unchecked":
        return f"not comparable (measured {format_bytes(k.measured_bytes_per_call)}/call){given}"
    both = (f"{format_bytes(k.measured_bytes_per_call)}/call both" if k.bytes_per_call is not None
            else f"shape and dtypes agree, measured {format_bytes(k.measured_bytes_per_call)}/call")
    return f"agrees: {both}{given}"


def format_conditions(conditions: Iterable[Condition], root: str = "") -> str:
    """``is_hip() (engine.py:7) and not (self.use_mla) (attn.py:20)``: the tests a finding's path needs, each
    ``if``'s file named as every output names files (:func:`display_path` of the finding's ``root``)."""
    return " and ".join(f"{c.text} ({shown(display_path(root, c.path)) if root else c.path}:{c.line})"
                        for c in conditions)


def format_finding(f: Finding, source_line: SourceLine | None = None, *, color: bool = False) -> list[str]:
    """The lines of one finding's block, without a trailing blank line."""
    severity = _paint(f.severity, _BOLD + _SEVERITY_COLOUR.get(f.severity, ""), color)
    where = display_path(f.root, f.path)
    head = f"{_paint(shown(f'{where}:{f.line}:{f.column}:'), _BOLD, color)} {f.rule} {severity} {shown(f.message)}"
    if f.cost is not None and f.cost.value is not None:
        head += f" [{format_step_bytes(f.cost.value, f.cost.value_max)}/step]"
    lines = [head]
    details: list[str] = []
    if source_line is not None:
        src = source_line(f.root, f.path, f.line)
        if src is not None and src.strip():
            lines.append(_INDENT + _paint(shown(src.strip()), _DIM, color))
    if f.hot_path:
        details.append(f"hot path: {' → '.join(f.hot_path)}")
    if f.conditions:
        details.append(f"only when: {format_conditions(f.conditions, f.root)}")
    if f.steps:
        details.append(f"runs on: the {' and '.join(f.steps)} step{'s' if len(f.steps) > 1 else ''}")
    if f.off_path:
        details.append(f"off this deployment's path: {f.off_path}")
    if f.provenance:
        details.append(f"provenance: {' → '.join(f.provenance)}")
    if f.cost is not None:
        details.append(f"cost: {format_cost(f.cost)}")
    if f.runtime is not None:
        details.append(f"runtime: {format_runtime(f.runtime)}")
    if f.cost is not None and f.cost.check is not None:
        details.append(f"static vs measured: {format_check(f.cost.check)}")
    if f.fix:
        details.append(f"fix: {f.fix}")
    return lines + [_INDENT + shown(d) for d in details]


def summary(report: ScanReport) -> str:
    """``3 errors, 1 warning, 0 info in 2 of 120 files (2 diagnostics)`` (the files with a reported finding, of
    those scanned) plus what was hidden, and the
    findings left out by the report scope: ``…, and 41 in tests/benchmarks, shown with --include-tests``."""
    counts = report.severity_counts()
    parts = [_plural(counts["error"], "error"), _plural(counts["warning"], "warning"), f"{counts['info']} info"]
    # Findings of a severity no rule should have still get counted, never dropped.
    parts += [f"{n} {sev}" for sev, n in counts.items() if sev not in ("error", "warning", "info")]
    text = ", ".join(parts)
    # The files holding a reported finding, of those scanned (not the scanned count alone: that read as
    # "the findings are spread over 3,000 files").
    reported = len({(f.root, f.path) for f in report.findings})
    files = report.stats.get("files")
    if isinstance(files, int):
        text += f" in {reported} of {_plural(files, 'file')}"
    notes = []
    if report.diagnostics:
        notes.append(_plural(len(report.diagnostics), "diagnostic"))
    suppressed = report.stats.get("suppressed")
    if isinstance(suppressed, int) and suppressed:
        notes.append(f"{suppressed} suppressed inline")
    hidden = report.stats.get("baseline_hidden")
    if isinstance(hidden, int) and hidden:
        notes.append(f"{hidden} hidden by baseline")
    at_ref = report.stats.get("baseline_commit")
    if isinstance(at_ref, dict) and at_ref.get("hidden"):
        notes.append(f"{at_ref['hidden']} already at {at_ref.get('ref')}")
    if notes:
        text += f" ({', '.join(notes)})"
    out_of_scope = report.stats.get("out_of_scope")
    if isinstance(out_of_scope, int) and out_of_scope:
        text += f", and {out_of_scope} in tests/benchmarks, shown with --include-tests"
    for why, flag in (("branch", "--all-paths"), ("model", "--all-models")):
        n = report.off_path.get(why, 0)
        if n:
            text += f", and {_plural(n, 'finding')} off this deployment's path ({flag} shows them)"
    return text


def _fixed_lines(report: ScanReport) -> Iterable[str]:
    if not report.fixed:
        return
    total = sum(e.count for e in report.fixed)
    yield f"baseline: {_plural(total, 'recorded finding')} no longer found (refresh it with --write-baseline):"
    for e in report.fixed:
        where = f"{e.path} {e.function}" if e.function else e.path
        times = f" ×{e.count}" if e.count > 1 else ""
        yield f"{_INDENT}{e.rule} {shown(where)}: {shown(e.expr)}{times}"


def format_statistics(stats: Statistics) -> list[str]:
    """``--statistics``: a count per rule, then the files with most findings."""
    if not stats.rules:
        return ["no findings"]
    out = [f"{'count':>6}  {'rule':<6} {'severity':<8} name"]
    out += [f"{r.count:>6}  {r.rule:<6} {r.severity:<8} {r.name}" for r in stats.rules]
    out += ["", f"{'count':>6}  top files"]
    out += [f"{n:>6}  {shown(path)}" for path, n in stats.files]
    return out


def render(report: ScanReport, source_line: SourceLine | None = None, *, color: bool = False,
           statistics: bool = False) -> str:
    """The whole text report, ending with a newline.

    ``source_line(root, path, line)`` supplies the source shown under each finding
    (``castfind.report.SourceCache().line`` reads it from disk); ``None`` omits it. ANSI
    colour is used only when ``color`` is true: the CLI decides (:func:`wants_color`).
    ``statistics``: counts per rule and the top files instead of one block per finding.
    """
    out: list[str] = []
    if statistics:
        out.extend(format_statistics(report.statistics()))
        out.append("")
    else:
        for f in report.findings:
            out.extend(format_finding(f, source_line, color=color))
            out.append("")
    if report.step is not None:
        out.extend(format_step(report.step))
        out.append("")
    if report.diagnostics:
        out.extend(str(d) for d in report.diagnostics)
        out.append("")
    fixed = list(_fixed_lines(report))
    if fixed:
        out.extend(fixed)
        out.append("")
    out.append(summary(report))
    return "\n".join(out) + "\n"


def render_report(report: ScanReport, ctx: ReportContext) -> str:
    """:func:`render` in the registry's signature: the context's source lines and colour."""
    return render(report, ctx.source_line, color=ctx.color, statistics=ctx.statistics)


def owns(text: str) -> str | None:
    """``None`` when ``text`` holds the summary line of a text report castfind wrote, else why not."""
    return None if _SUMMARY.search(text) else "no castfind summary line"


_SUMMARY = re.compile(r"\b\d+ errors?, \d+ warnings?, \d+ info\b")
