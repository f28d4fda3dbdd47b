"""The output formats by name: ``castfind scan --format NAME`` picks its reporter here.

Every reporter has the one :data:`~castfind.report.Render` signature, so the CLI and
:mod:`castfind.api` never need to know which format they hold. Adding a format is a module
with a ``render_report(report, ctx)`` and one line in :data:`REPORTERS` (or, from outside
castfind, a call to :func:`register`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from castfind.core.fsutil import Owns
from castfind.report import Render, github, gitlab, json, junit, markdown, sarif, text

__all__ = ["DEFAULT_FORMAT", "REPORTERS", "BuiltinFormat", "Reporter", "UnknownFormat", "get", "register"]

#: The formats castfind ships; :data:`REPORTERS` may hold more (see :func:`register`).
BuiltinFormat = Literal["text", "json", "sarif", "github", "gitlab", "junit", "markdown"]
DEFAULT_FORMAT: BuiltinFormat = "text"


@dataclass(frozen=True, slots=True)
class Reporter:
    """One output format.

    ``stdout_end`` is what the CLI writes after the document when it goes to standard output:
    the JSON and SARIF documents have always been followed there by one blank line (scripts may
    compare the output byte for byte), the text report by nothing. A file gets the document alone.

    ``owns`` tells whether an existing file is a document of this format castfind wrote (``None``:
    it is; else why not), checked before an output option replaces it; ``what`` names the document in
    that message. A format without ``owns`` only writes new or empty files.
    """

    render: Render
    stdout_end: str = ""
    owns: Owns | None = None
    what: str = "castfind report"


REPORTERS: dict[str, Reporter] = {
    "text": Reporter(text.render_report, owns=text.owns, what="castfind text report"),
    "json": Reporter(json.render_report, stdout_end="\n", owns=json.owns, what="castfind JSON report"),
    "sarif": Reporter(sarif.render_report, stdout_end="\n", owns=sarif.owns, what="castfind SARIF log"),
    "github": Reporter(github.render_report, owns=github.owns, what="castfind GitHub workflow-command file"),
    "gitlab": Reporter(gitlab.render_report, owns=gitlab.owns, what="castfind GitLab Code Quality report"),
    "junit": Reporter(junit.render_report, owns=junit.owns, what="castfind JUnit XML report"),
    "markdown": Reporter(markdown.render_report, owns=markdown.owns, what="castfind Markdown report"),
}


class UnknownFormat(ValueError):
    """A format name :data:`REPORTERS` does not hold; the message lists those it does."""

    def __init__(self, name: str, known: tuple[str, ...]) -> None:
        super().__init__(f"--format {name}: unknown format; expected one of {', '.join(known)}")
        self.name, self.known = name, known


def get(name: str) -> Reporter:
    """The reporter registered as ``name``; :class:`UnknownFormat` when there is none."""
    try:
        return REPORTERS[name]
    except KeyError:
        raise UnknownFormat(name, tuple(REPORTERS)) from None


def register(name: str, reporter: Reporter | Render) -> None:
    """Make ``name`` a format (a plain render function is wrapped); an existing name is replaced."""
    REPORTERS[name] = reporter if isinstance(reporter, Reporter) else Reporter(reporter)
