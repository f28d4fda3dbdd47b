"""``--format markdown``: for pull-request comments and job summaries (``$GITHUB_STEP_SUMMARY``).

A heading with the summary line, a table of findings (rule, severity, file:line, function, message,
the static cost per step when the finding has one and the device time a trace measured, the measured
bytes when a trace was joined) and, for each error, a ``<details>`` block (summary: rule, file:line,
function, cost) that holds its message, its fix and a Mermaid ``flowchart TD`` with two labelled lanes:
"hot path" (entry point → … → the function that casts, by short name, ``Class.method``) and "where the
buffer comes from" (its allocation when the cost was read, then the provenance, from where the walk
back from the cast ended down to the cast, each step that names a line with its file), both into the
cast node (its expression and ``file:line``). Top-down with labels wrapped by Mermaid, a
chart stays narrow enough that its text is legible at a comment's width (tests/test_mermaid_render.py
renders it 800 px wide and measures the text). GitHub renders Mermaid blocks natively.

Escaping: table cells escape ``|`` and Markdown's punctuation, code spans use a fence longer
than any backtick run inside. Mermaid labels are quoted, and every character that Mermaid
or the HTML label would read (``"``, ``#``, ``<``, ``>``, ``&``, backtick) is written as one
of Mermaid's entity codes (``#quot;``, ``#35;``, ...), so a label can never end early or turn
into markup; the only tags castfind writes itself are ``<br>`` between a label's lines and ``<wbr>``
where a long name or path may break. HTML in a ``<summary>`` is escaped with :func:`html.escape`.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable

from castfind.core.names import shown
from castfind.core.types import Finding, StepTable
from castfind.report import ReportContext, ScanReport, display_path
from castfind.report.text import format_bytes, format_conditions, format_step_bytes, step_rows, step_total, summary

__all__ = ["MERMAID_ENTITY", "code_span", "cost_cell", "flowchart", "measured_cell", "mermaid_label", "provenance_steps",
           "render", "render_report", "short_name", "step_table", "table_text"]

#: Characters written as Mermaid entity codes inside a label (``#35;`` is decimal 35).
MERMAID_ENTITY = {'"': "#quot;", "#": "#35;", "<": "#lt;", ">": "#gt;", "&": "#amp;", "`": "#96;"}
_MERMAID_SPECIAL = re.compile("[" + re.escape("".join(MERMAID_ENTITY)) + "]")
_MD_PUNCT = re.compile(r"([\\`*_\[\]<>|~])")
_CAST_SHOWN = 80  # characters of the cast expression shown in its node
_BREAK = re.compile(r"([./(,])(?=[^)\s])")  # not before a space (one breaks there) or a closing parenthesis
_LINE_ONLY = re.compile(r"\(line (\d+)\)")
_CROSSING = re.compile(r"^(.+?\.pyi?):\d+ \S+ passes .+ as \S+ of \S+$")


def mermaid_label(text: str) -> str:
    """``text`` as a quoted Mermaid node label: ``"..."`` with its special characters as entities."""
    flat = shown(" ".join(text.split()))
    return '"' + _MERMAID_SPECIAL.sub(lambda m: MERMAID_ENTITY[m.group(0)], flat) + '"'


def table_text(text: str) -> str:
    """Plain text for a table cell: one line, Markdown punctuation and ``|`` backslash-escaped."""
    return _MD_PUNCT.sub(r"\\\1", shown(" ".join(text.split())))


def code_span(text: str) -> str:
    """``text`` as an inline code span that is safe in a table cell."""
    flat = shown(" ".join(text.split())).replace("|", "\\|")
    if not flat:
        return ""
    run = max((len(m) for m in re.findall(r"`+", flat)), default=0)
    fence = "`" * (run + 1)
    pad = " " if flat.startswith("`") or flat.endswith("`") else ""
    return f"{fence}{pad}{flat}{pad}{fence}"


def _shorten(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _lines(*parts: str) -> str:
    """A quoted Mermaid label of several lines: each part escaped as :func:`mermaid_label` does, joined by
    ``<br>``, with a ``<wbr>`` (a place the line may break, no text) after each ``.``, ``/``, ``(`` and ``,``:
    Mermaid wraps a label at about 200 px, but only where it may break, and a dotted name or a path has
    no space. Those two tags are the only HTML a label holds (Mermaid keeps them under ``securityLevel:
    strict``)."""
    return '"' + "<br>".join(_BREAK.sub(r"\1<wbr>", mermaid_label(p)[1:-1]) for p in parts if p) + '"'


def provenance_steps(f: Finding, shown_from: str | None = None) -> list[str]:
    """The finding's provenance, from the cast back to the buffer, with the file on each step that names a
    line: a step ``kv = ... (line 259)`` is in the file the walk is in then, the cast's own until a step
    ``PATH:LINE caller passes ARG as PARAM of callee`` (castfind.analysis.summaries) crosses into a caller,
    after which it is ``PATH``. Paths as the steps give them: relative to the root, like :attr:`Finding.path`;
    with ``shown_from`` (the finding's root) as every output names files (:func:`display_path`)."""
    def show(path: str) -> str:
        return path if shown_from is None else display_path(shown_from, path)

    here = f.path
    out = []
    for step in f.provenance:
        crossing = _CROSSING.match(step)
        if crossing is not None:
            here = crossing.group(1)
            step = show(here) + step[crossing.end(1):]
        out.append(_LINE_ONLY.sub(_in_file(show(here)), step))
    return out


def _in_file(path: str) -> Callable[[re.Match[str]], str]:
    """A ``re.sub`` replacement: ``(line N)`` as ``(PATH:N)``."""
    return lambda m: f"({path}:{m.group(1)})"


def short_name(qualified: str, module: str = "", function: str = "") -> tuple[str, str]:
    """A hot-path function as a reader knows it: ``(Class.method or func, the module it is in)``.

    ``module`` and ``function`` (the finding's) split one entry exactly; any other entry is split before its
    first capitalised component (PEP 8: modules are lower case, classes capitalised), or before its last
    component when none is.
    """
    if module and function and qualified == f"{module}.{function}":
        return function, module
    parts = qualified.split(".")
    cut = next((i for i, part in enumerate(parts[:-1]) if part[:1].isupper()), len(parts) - 1)
    return ".".join(parts[cut:]), ".".join(parts[:cut])


def flowchart(f: Finding) -> str:
    """The Mermaid ``flowchart`` of one finding, drawn top-down so that it stays legible at a comment's width:
    a lane "hot path" (entry point → … → the function that casts: short names over their module) and a lane
    "where the buffer comes from" (where the buffer is allocated, when its cost was read, ``Class.attribute``
    over ``file:line``; then the provenance from where the walk back ended down to the cast, each step with
    its file, :func:`provenance_steps`), both into the cast (its expression over its ``file:line``)."""
    where = f"{display_path(f.root, f.path)}:{f.line}"
    lines = ["flowchart TD"]
    last = len(f.hot_path) - 1
    if f.hot_path:
        lines.append(f"  subgraph hot[{mermaid_label('hot path')}]")
        for i, function in enumerate(f.hot_path):
            name, module = short_name(function, f.module, f.function)
            label = _lines(name, module)
            lines.append(f"    h{i}([{label}])" if i == 0 else f"    h{i}[{label}]")
        lines += [f"    h{i - 1} --> h{i}" for i in range(1, len(f.hot_path))]
        lines.append("  end")
    # Provenance is written from the cast back to the buffer; drawn from the buffer to the cast.
    steps = [_lines(step) for step in reversed(provenance_steps(f, f.root))]
    if f.cost is not None and f.cost.holder:
        at = f.cost.declared_at()
        declared = f"{display_path(f.root, at[0])}:{at[1]}" if at else f.cost.declared
        steps.insert(0, _lines(f"allocated as {f.cost.holder}", declared))
    if steps:
        lines.append(f"  subgraph src[{mermaid_label('where the buffer comes from')}]")
        lines += [f"    p{i}[/{step}/]" for i, step in enumerate(steps)]
        lines += [f"    p{i - 1} -.-> p{i}" for i in range(1, len(steps))]
        lines.append("  end")
    lines.append(f"  cast[{_lines('cast ' + _shorten(f.expr, _CAST_SHOWN), where)}]")
    if f.hot_path:
        lines.append(f"  h{last} --> cast")
    if steps:
        lines.append(f"  p{len(steps) - 1} -.-> cast")
    return "\n".join(lines)


def cost_cell(f: Finding) -> str:
    """The table's cost: the static cost per step (its formula and unbound names when no configuration bound
    them; the verdict ``no-op`` / ``tiny`` when there is one) and the device time a trace measured, or "—"."""
    parts = []
    c = f.cost
    if c is not None:
        if c.value is not None:
            static = f"{format_step_bytes(c.value, c.value_max)}/step"
        elif not c.per_step:  # no buffer found to size: the note says why
            static = table_text(c.note or "no number")
        else:
            static = f"{code_span(c.per_step)}/step" + (f" (unbound: {table_text(', '.join(c.unbound))})"
                                                        if c.unbound else "")
        parts.append(static + (f" ({c.verdict})" if c.verdict else ""))
    rt = f.runtime
    if rt is not None and rt.device_time_us is not None:
        parts.append(f"{rt.device_time_us / 1000:.2f} ms")
    return "; ".join(parts) or "—"


def measured_cell(f: Finding) -> str:
    """The bytes a trace measured (``--trace``): total (calls × per call), with the static model's check, or "—"."""
    rt = f.runtime
    if rt is None:
        return "—"
    text = f"{format_bytes(rt.bytes_total)} ({rt.calls} × {format_bytes(rt.bytes_per_call)})"
    check = f.cost.check if f.cost is not None else None
    if check is not None:
        text += f"; static {'MISMATCH' if check.status == 'mismatch' else check.status}"
    return text


def step_table(table: StepTable) -> list[str]:
    """The per-step table (``text.step_rows``' cells) as a Markdown table under its own heading, then the total."""
    head, rows = step_rows(table)
    lines = [f"#### per {table.step} step", "", "| " + " | ".join(head) + " |",
             "| " + " | ".join("--:" if (i < 3 or i > 6) and h != "runs" else ":--" for i, h in enumerate(head)) + " |"]
    lines += ["| " + " | ".join(code_span(c) if i in (4, 5, 6) and c != "-" else table_text(c)
                                for i, c in enumerate(cells)) + " |" for cells in rows]
    return [*lines, "", table_text(step_total(table)), ""]


def _row(f: Finding) -> str:
    where = f"{display_path(f.root, f.path)}:{f.line}"
    cells = [f.rule, f.severity, code_span(where), code_span(f.function) or "—", table_text(f.message), cost_cell(f),
             measured_cell(f)]
    return "| " + " | ".join(cells) + " |"


def _details(f: Finding) -> list[str]:
    """One error as a ``<details>`` block: the summary line (rule, file:line, function, cost) and, opened,
    the message, its path conditions (``Only when:``), the chart and the fix."""
    where = f"{display_path(f.root, f.path)}:{f.line}"
    head = f"{f.rule} at <code>{html.escape(shown(where))}</code>"
    if f.function:
        head += f" in <code>{html.escape(shown(f.function))}</code>"
    cost = cost_cell(f)
    if f.cost is not None and f.cost.value is not None:
        head += f" ({html.escape(cost)})"
    out = [f"<details><summary>{head}</summary>", "", table_text(f.message), ""]
    if f.conditions:
        out += [f"Only when: {code_span(format_conditions(f.conditions, f.root))}", ""]
    if f.off_path:
        out += [f"Off this deployment's path: {table_text(f.off_path)}", ""]
    out += ["```mermaid", flowchart(f), "```", ""]
    if f.cost is not None or f.runtime is not None:
        out += [f"cost: {cost} · measured: {measured_cell(f)}", ""]
    if f.fix:
        out += [f"fix: {table_text(f.fix)}", ""]
    return [*out, "</details>", ""]


def render(report: ScanReport) -> str:
    """The Markdown document, ending with a newline."""
    out = [f"### castfind: {table_text(summary(report))}", ""]
    if report.findings:
        out += ["| rule | severity | location | function | message | cost | measured bytes |",
                "| :-- | :-- | :-- | :-- | :-- | --: | --: |"]
        out += [_row(f) for f in report.findings]
        out.append("")
    if report.step is not None:
        out += step_table(report.step)
    for f in report.findings:
        if f.severity == "error":
            out += _details(f)
    if report.diagnostics:
        out += ["<details><summary>diagnostics</summary>", ""]
        out += [f"- {table_text(str(d))}" for d in report.diagnostics]
        out += ["", "</details>", ""]
    return "\n".join(out).rstrip("\n") + "\n"


def render_report(report: ScanReport, ctx: ReportContext) -> str:
    """:func:`render` in the registry's signature; the context is not used."""
    return render(report)


def owns(text: str) -> str | None:
    """``None`` when ``text`` is a Markdown report castfind wrote (it starts with ``### castfind:``), else why not."""
    return None if text.startswith("### castfind: ") else "does not start with '### castfind: '"
