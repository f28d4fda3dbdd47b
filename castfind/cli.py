"""The command line. It only parses arguments, calls :mod:`castfind.api`, prints and picks exit codes.

Exit codes: 0 clean / found, 1 findings (or, for ``where``, nothing found), 2 usage or input error.
"""

from __future__ import annotations

import sys

import typer

from castfind import __version__

app = typer.Typer(
    name="castfind",
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


def _register_runtime() -> None:
    try:
        from castfind.runtime.cli import register
    except ImportError:  # the runtime commands are being written in their own module
        return
    register(app)


_register_runtime()


def main() -> None:
    """Console-script entry point. Usage errors exit 2 (click's convention, which we keep)."""
    try:
        app()
    except KeyboardInterrupt:
        sys.stderr.write("castfind: interrupted\n")
        sys.exit(130)
