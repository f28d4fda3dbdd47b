"""The runtime commands: ``castfind record``, ``castfind trace import``, ``castfind trace show``.

Only this module prints or picks exit codes for the runtime side; the library modules
return data or raise :class:`~castfind.runtime.trace.TraceError` (or, for ``record``'s
command line, :class:`~castfind.runtime.program.ProgramError`), shown here as one line
(``castfind: PATH:LINE: reason — what to do``) with exit code 2. Any other exception in
these commands is also one line and exit 2; ``CASTFIND_DEBUG=1`` adds the traceback.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import runpy
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from castfind.core.types import TraceSite
from castfind.runtime.program import (
    Program,
    ProgramError,
    check_output,
    check_program,
    parse_program,
    sigterm_as_exit,
)
from castfind.runtime.trace import (
    TraceError,
    clean_text,
    format_bytes,
    owns_trace,
    read_trace,
    sort_sites,
    total_bytes,
    write_trace,
)

_NO_TORCH = "castfind record: torch is not installed; pip install 'castfind[runtime]'"
DEBUG_ENV = "CASTFIND_DEBUG"


def register(app: typer.Typer) -> None:
    """Add ``record`` and the ``trace`` group (``import``, ``show``) to the root ``castfind`` app."""
    app.command(
        "record",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    )(_guarded("record", record_command))
    trace_app = typer.Typer(name="trace", help="Read, convert and summarise runtime cast traces.", no_args_is_help=True)
    trace_app.command("import")(_guarded("trace import", import_command))
    trace_app.command("show")(_guarded("trace show", show_command))
    app.add_typer(trace_app, name="trace")


def _guarded(name: str, command: Callable[..., None]) -> Callable[..., None]:
    """``command`` with any unexpected exception shown as one line and exit 2, never click's exit 1.

    The traceback goes to stderr first when ``CASTFIND_DEBUG=1``. Exits, usage errors,
    Ctrl-C and ``SystemExit`` pass through unchanged.
    """

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> None:
        try:
            command(*args, **kwargs)
        except (typer.Exit, typer.Abort, typer.TyperException):
            raise
        except Exception as exc:
            if os.environ.get(DEBUG_ENV) == "1":
                traceback.print_exc()
            what = f"unexpected {type(exc).__name__}: {clean_text(str(exc))}"
            typer.echo(f"castfind: {name}: {what} — rerun with {DEBUG_ENV}=1 for the traceback and report it", err=True)
            raise typer.Exit(2) from None

    return run


def _fail(error: TraceError | ProgramError) -> typer.Exit:
    typer.echo(f"castfind: {error}", err=True)
    return typer.Exit(2)


def record_command(
    output: Path = typer.Option(..., "-o", "--output", help="Where to write the JSONL trace."),
    program: list[str] = typer.Argument(..., metavar="-- [python] SCRIPT.py ARGS... | -- [python] -m MODULE ARGS..."),
) -> None:
    """Run a Python program with the cast recorder on; write every dtype-changing copy to a trace.

    No code edits: the program runs as `python SCRIPT.py ARGS` (or `python -m MODULE ARGS`)
    would run it, and its output and exit code pass through; a leading `python` is allowed.
    The trace is written when the program ends, also on an exception, Ctrl-C or SIGTERM;
    only the recording process writes it (forked children do not). CUDA-graph replays and
    torch.compile'd code bypass the recorder: record an eager, capture-free run
    (e.g. SGLang's --disable-cuda-graph).
    """
    try:
        spec = parse_program(program)
        check_program(spec)
        check_output(output)
    except ProgramError as exc:
        raise _fail(exc) from exc
    _check_trace_output(output, [] if spec.is_module else [spec.target])
    if importlib.util.find_spec("torch") is None:
        typer.echo(_NO_TORCH, err=True)
        raise typer.Exit(2)
    from castfind.runtime.recorder import record

    try:
        with record(output), sigterm_as_exit():
            code = _run_program(spec)
    except ProgramError as exc:
        raise _fail(exc) from exc
    except OSError as exc:  # the trace could not be written; the program itself already ran
        typer.echo(f"castfind: {output}:0: cannot write trace ({exc.strerror or exc}) — check the folder", err=True)
        raise typer.Exit(2) from exc
    _flush_stdout()
    raise typer.Exit(code)


def _flush_stdout() -> None:
    """Flush what the program printed, if it left a usable ``sys.stdout``: one it closed or replaced
    (``None``, a closed file, a closed descriptor 1) must not turn its exit code into castfind's 2."""
    try:
        sys.stdout.flush()
        if not sys.stdout.closed:
            return
    except Exception:  # noqa: BLE001 - whatever the program left there
        pass
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - lives until exit, as sys.stdout does



def _run_program(program: Program) -> int:
    """Run ``program`` like the interpreter would and return its exit status.

    Raises only on Ctrl-C, and :class:`ProgramError` when ``-m`` names a module that is
    not there (runpy's own lookup failed; the program never started).
    """
    saved_argv, saved_path0 = sys.argv[:], sys.path[0] if sys.path else None
    try:
        sys.argv = [program.target, *program.args]
        if program.is_module:
            _set_path0(os.getcwd())
            runpy.run_module(program.target, run_name="__main__", alter_sys=True)
        else:
            _set_path0(os.path.dirname(os.path.abspath(program.target)))
            runpy.run_path(program.target, run_name="__main__")
        return 0
    except SystemExit as exc:
        return _exit_status(exc.code)
    except KeyboardInterrupt:
        raise
    except ImportError as exc:
        if program.is_module and _raised_by_runpy(exc):
            if "__main__" in str(exc):  # runpy: "No module named pkg.__main__; 'pkg' is a package and ..."
                raise ProgramError(program.target, "is a package without __main__", "name a module in it") from exc
            raise ProgramError(program.target, "no such module", "check the name") from exc
        traceback.print_exc()
        return 1
    except BaseException:  # the program's own crash: report it as the interpreter would, exit 1
        traceback.print_exc()
        return 1
    finally:
        sys.argv = saved_argv
        if saved_path0 is not None:
            sys.path[0] = saved_path0


def _raised_by_runpy(exc: BaseException) -> bool:
    """Whether ``exc`` comes from runpy looking the module up, not from the module's own code."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and tb.tb_frame.f_code.co_filename == runpy.run_module.__code__.co_filename


def _set_path0(folder: str) -> None:
    # The interpreter puts the script's folder (or, for -m, the cwd) first on sys.path.
    if sys.path:
        sys.path[0] = folder
    else:
        sys.path.insert(0, folder)


def _exit_status(code: Any) -> int:
    """``SystemExit.code`` as the interpreter turns it into a process status."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    sys.stderr.write(f"{code}\n")
    return 1


def import_command(
    profile: Path = typer.Argument(..., help="Chrome trace from torch.profiler (.json or .json.gz)."),
    output: Path = typer.Option(..., "-o", "--output", help="Where to write the JSONL trace."),
    src: list[Path] = typer.Option([], "--src", help="Folder holding the profiled sources (repeatable)."),
) -> None:
    """Convert a torch.profiler Chrome trace (record_shapes=True, with_stack=True) to a castfind trace."""
    from castfind.runtime.profiler import import_profile

    _check_trace_output(output, [profile])
    try:
        header, sites = import_profile(profile, source_roots=tuple(str(s) for s in src))
    except TraceError as exc:
        raise _fail(exc) from exc
    try:
        write_trace(output, header, sites)
    except OSError as exc:
        typer.echo(f"castfind: {output}:0: cannot write trace ({exc.strerror or exc}) — check the folder", err=True)
        raise typer.Exit(2) from exc
    unplaced = sum(1 for s in sites if s.extra.get("line_kind") == "def")
    note = f" ({unplaced} placed at their function's first line; pass --src)" if unplaced else ""
    typer.echo(f"castfind: {len(sites)} cast sites from {profile} -> {output}{note}", err=True)


def _check_trace_output(output: Path, inputs: list[Any]) -> None:
    """``-o``: the output check every castfind output goes through (:func:`castfind.core.fsutil.check_output_target`):
    not an input of the run, and an existing file there must be a castfind trace (or empty)."""
    from castfind.core.fsutil import OutputPathError, Protected, check_output_target

    try:
        check_output_target(output, "-o", "castfind trace", owns_trace, Protected.of(inputs))
    except OutputPathError as exc:
        typer.echo(f"castfind: {exc}", err=True)
        raise typer.Exit(2) from None


def show_command(
    trace: Path = typer.Argument(..., help="A castfind JSONL trace."),
    top: int = typer.Option(20, "--top", min=1, help="How many sites to show."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """Print the trace's costliest cast sites (by total bytes moved)."""
    try:
        header, sites = read_trace(trace)
    except TraceError as exc:
        raise _fail(exc) from exc
    shown = sort_sites(sites)[:top]
    if as_json:
        doc = {"header": header, "sites": [s.to_dict() for s in shown]}
        typer.echo(json.dumps(doc, indent=2, allow_nan=False))  # read_trace let no NaN or Infinity in
        return
    typer.echo(format_table(header, shown, len(sites)))


def format_table(header: dict[str, Any], sites: list[TraceSite], total: int) -> str:
    """The ``trace show`` table: one row per site, costliest first."""
    steps = header.get("steps") or 0
    rows = [("TOTAL", "CALLS", "PER CALL", "/STEP", "CAST", "SHAPE", "DEVICE", "SITE")]
    for s in sites:
        per_step = f"{s.calls / (s.steps or steps):.1f}" if (s.steps or steps) else "-"
        rows.append(
            (
                format_bytes(total_bytes(s)),
                str(s.calls),
                format_bytes(s.bytes_per_call),
                per_step,
                f"{s.src_dtype}->{s.dst_dtype}",
                "[" + ", ".join(map(str, s.shape)) + "]",
                s.device,
                f"{s.path}:{s.line} {s.function}".rstrip(),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    def row(r: tuple[str, ...] | list[str]) -> str:
        cells = (c.rjust(w) if i < 4 else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=False)))
        return "  ".join(cells) + "  " + r[-1]

    lines = [row(r) for r in rows]
    lines.append(
        f"{len(sites)} of {total} sites; torch {header.get('torch', '?')}, {steps} steps, "
        f"{header.get('wall_s', 0)} s, devices: {', '.join(header.get('devices', [])) or '-'}"
    )
    return "\n".join(lines)
