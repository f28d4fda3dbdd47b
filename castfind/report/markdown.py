"""``--format markdown``: for pull-request comments and job summaries (``$GITHUB_STEP_SUMMARY``).

A heading with the summary line, a table of findings (rule, severity, file:line, function,
cost when measured, measured bytes when a trace was joined) and, for each error, a Mermaid
``flowchart`` of its hot path: the entry point → … → the function that casts → the cast, with
the buffer's provenance (where the walk back from the cast ended, → each step it took) drawn
into the cast with dotted arrows. GitHub renders Mermaid blocks natively.

Escaping: table cells escape ``|`` and Markdown's punctuation, code spans use a fence longer
than any backtick run inside. Mermaid labels are quoted, and every character that Mermaid
or the HTML label would read (``"``, ``#``, ``<``, ``>``, ``&``, backtick) is written as one
of Mermaid's entity codes (``#quot;``, ``#35;``, ...), so a label can never end early or turn
into markup.
"""

from __future__ import annotations

import re

from castfind.core.names import shown
from castfind.core.types import Finding
from castfind.report import ReportContext, ScanReport, display_path
from castfind.report.text import format_bytes, format_conditions, summary

__all__ = ["MERMAID_ENTITY", "code_span", "flowchart", "mermaid_label", "render", "render_report", "table_text"]

#: Characters written as Mermaid entity codes inside a label (``#35;`` is decimal 35).
MERMAID_ENTITY = {'"': "#quot;", "#": "#35;", "<": "#lt;", ">": "#gt;", "&": "#amp;", "`": "#96;"}
_MERMAID_SPECIAL = re.compile("[" + re.escape("".join(MERMAID_ENTITY)) + "]")
_MD_PUNCT = re.compile(r"([\\`*_\[\]<>|~])")
_CAST_SHOWN = 80  # characters of the cast expression shown in its node


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


def flowchart(f: Finding) -> str:
    """The Mermaid ``flowchart`` of one finding: hot path into the cast, provenance into the cast."""
    lines = ["flowchart LR"]
    cast = f"cast {_shorten(f.expr, _CAST_SHOWN)} at {display_path(f.root, f.path)}:{f.line}"
    lines.append(f"  cast[{mermaid_label(cast)}]")
    previous = None
    for i, function in enumerate(f.hot_path):
        node = f"h{i}"
        shape = f"{node}([{mermaid_label(function)}])" if i == 0 else f"{node}[{mermaid_label(function)}]"
        lines.append(f"  {shape}")
        if previous is not None:
            lines.append(f"  {previous} --> {node}")
        previous = node
    if previous is not None:
        lines.append(f"  {previous} --> cast")
    # Provenance is written from the cast back to the buffer; drawn from the buffer to the cast.
    previous = None
    for i, step in enumerate(reversed(f.provenance)):
        node = f"p{i}"
        lines.append(f"  {node}[/{mermaid_label(step)}/]")
        if previous is not None:
            lines.append(f"  {previous} -.-> {node}")
        previous = node
    if previous is not None:
        lines.append(f"  {previous} -.-> cast")
    return "\n".join(lines)


def _row(f: Finding) -> str:
    where = f"{display_path(f.root, f.path)}:{f.line}"
    rt = f.runtime
    cost = "—"
    measured = "—"
    if rt is not None:
        measured = f"{format_bytes(rt.bytes_total)} ({rt.calls} × {format_bytes(rt.bytes_per_call)})"
        if rt.device_time_us is not None:
            cost = f"{rt.device_time_us / 1000:.2f} ms"
    cells = [f.rule, f.severity, code_span(where), code_span(f.function) or "—", table_text(f.message), cost, measured]
    return "| " + " | ".join(cells) + " |"


def render(report: ScanReport) -> str:
    """The Markdown document, ending with a newline."""
    out = [f"### castfind: {table_text(summary(report))}", ""]
    if report.findings:
        out += ["| rule | severity | location | function | message | cost | measured bytes |",
                "| :-- | :-- | :-- | :-- | :-- | --: | --: |"]
        out += [_row(f) for f in report.findings]
        out.append("")
    errors = [f for f in report.findings if f.severity == "error"]
    for f in errors:
        where = code_span(f"{display_path(f.root, f.path)}:{f.line}")
        out += [f"#### {f.rule} at {where}: hot path", ""]
        if f.conditions:
            out += [f"Only when: {code_span(format_conditions(f.conditions))}", ""]
        out += ["```mermaid", flowchart(f), "```", ""]
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
