"""The command line. It only parses arguments, calls :mod:`castfind.api`, prints and picks exit codes.

Exit codes: 0 clean / found, 1 findings (or, for ``where``, nothing found), 2 usage or input error.
"""

from __future__ import annotations

import json
import sys
from typing import NoReturn, Optional

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
    typer.echo(f"castfind: {message}", err=True)
    raise typer.Exit(2)


RootOpt = typer.Option(None, "--root", "-r", help="A source root (repeatable). Default: the current folder.")
CacheDirOpt = typer.Option(None, "--cache-dir", help="Facts cache folder. Default: $XDG_CACHE_HOME/castfind.")
NoCacheOpt = typer.Option(False, "--no-cache", help="Neither read nor write the facts cache.")
JobsOpt = typer.Option(0, "--jobs", "-j", help="Parallel parser processes. Default: the number of cores.")
ExcludeOpt = typer.Option(None, "--exclude", help="Glob of paths to skip (repeatable), e.g. 'test/*'.")


@app.command()
def where(
    symbol: str = typer.Argument(..., help="A name (flashinfer_cutlass_fused_moe), dotted path (pkg.mod.func) or Class.method."),
    root: Optional[list[str]] = RootOpt,
    at: Optional[str] = typer.Option(None, "--at", help="PATH:LINE — resolve the name as Python sees it at that line."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON: symbol, definitions (with chains), call_sites, unresolved."),
    follow_installed: bool = typer.Option(True, "--follow-installed/--no-follow-installed",
                                          help="Follow imports into installed packages outside the roots (found without importing them)."),
    cache_dir: Optional[str] = CacheDirOpt,
    no_cache: bool = NoCacheOpt,
    jobs: int = JobsOpt,
    exclude: Optional[list[str]] = ExcludeOpt,
) -> None:
    """Where is SYMBOL really defined? Follows aliases, re-exports, star imports and returned callables.

    Exit 0 when found, 1 when nothing is found (close names are suggested), 2 on usage errors.

    Example: castfind where flashinfer_cutlass_fused_moe --root /root/sglang --root /usr/lib/python3/site-packages/flashinfer
    """
    from castfind import api
    from castfind.discover import DiscoveryError
    from castfind.where import WhereError

    at_loc = None
    if at:
        path, _, line = at.rpartition(":")
        if not path or not line.isdigit():
            _fail(f"--at {at}: expected PATH:LINE, e.g. --at python/sglang/srt/x.py:120")
        at_loc = (path, int(line))
    try:
        res = api.where(symbol, list(root or []), at_loc, exclude=tuple(exclude or ()), cache_dir=cache_dir,
                        use_cache=not no_cache, jobs=jobs or None, follow_installed=follow_installed,
                        progress=_progress("parsing"))
    except (DiscoveryError, WhereError) as e:
        _fail(str(e))
    if json_out:
        typer.echo(json.dumps(res.to_dict(), indent=2))
    else:
        from castfind.report.where_text import render_where

        typer.echo(render_where(res), nl=False)
    for d in res.diagnostics:
        typer.echo(f"castfind: {d}", err=True)
    if not res.definitions and not res.unresolved:
        if json_out and res.suggestions:
            typer.echo(f"castfind: {symbol!r} not found; did you mean: {', '.join(res.suggestions)}?", err=True)
        raise typer.Exit(1)


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
