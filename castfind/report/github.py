"""``--format github``: GitHub Actions workflow commands, one line per finding.

``::error file=PATH,line=L,col=C,endLine=E,title=CF101::message`` makes GitHub annotate the
pull request's diff at that line. Severity maps to the command (``error``, ``warning``,
``notice``). The message and the property values are escaped as the Actions runner unescapes
them (``%`` → ``%25``, CR → ``%0D``, LF → ``%0A``; in properties also ``:`` → ``%3A`` and
``,`` → ``%2C``), so a message holding ``::`` or a newline cannot end the command early.
Paths are relative to the current folder (the checkout, in a workflow). Diagnostics become
``::warning`` lines titled ``castfind <kind>``.
"""

from __future__ import annotations

import re

from castfind.core.names import shown
from castfind.core.types import Diagnostic, Finding
from castfind.report import ReportContext, ScanReport, display_path

__all__ = ["COMMAND", "command", "escape_data", "escape_property", "render", "render_report"]

#: Severity → workflow command.
COMMAND = {"error": "error", "warning": "warning", "info": "notice"}


def escape_data(text: str) -> str:
    """A command's message, as the runner's ``escapeData`` does it; other control characters (an ANSI
    escape in a file name) are shown escaped (:func:`castfind.core.names.shown`)."""
    return shown(text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A"))


def escape_property(text: str) -> str:
    """A command's property value, as the runner's ``escapeProperty`` does it."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def command(name: str, properties: dict[str, str | int], message: str) -> str:
    """One workflow command line: ``::name key=value,...::message``."""
    props = ",".join(f"{key}={escape_property(str(value))}" for key, value in properties.items())
    return f"::{name} {props}::{escape_data(message)}" if props else f"::{name}::{escape_data(message)}"


def _finding(f: Finding) -> str:
    props: dict[str, str | int] = {"file": display_path(f.root, f.path)}
    if f.line >= 1:
        props["line"] = f.line
        if f.column >= 1:
            props["col"] = f.column
        if f.end_line >= f.line:
            props["endLine"] = f.end_line
    props["title"] = f.rule
    message = f.message
    if f.hot_path:
        message += "\nhot path: " + " → ".join(f.hot_path)
    if f.fix:
        message += "\nfix: " + f.fix
    return command(COMMAND.get(f.severity, "warning"), props, message)


def _diagnostic(d: Diagnostic) -> str:
    props: dict[str, str | int] = {}
    if d.path:
        props["file"] = d.path.replace("\\", "/")
        if d.line >= 1:
            props["line"] = d.line
    props["title"] = f"castfind {d.kind}"
    return command("warning", props, d.message)


def render(report: ScanReport) -> str:
    """Every finding, then every diagnostic, one command per line (empty for a clean scan)."""
    lines = [_finding(f) for f in report.findings] + [_diagnostic(d) for d in report.diagnostics]
    return "".join(line + "\n" for line in lines)


def render_report(report: ScanReport, ctx: ReportContext) -> str:
    """:func:`render` in the registry's signature; the context is not used."""
    return render(report)


def owns(text: str) -> str | None:
    """``None`` when every line of ``text`` is a workflow command as castfind writes them, else why not."""
    if all(_COMMAND_LINE.match(line) for line in text.splitlines() if line.strip()):
        return None
    return "a line that is not a ::error, ::warning or ::notice workflow command"


_COMMAND_LINE = re.compile(r"^::(error|warning|notice)( [^:]*)?::")
