"""What ``castfind record`` runs, checked before anything runs: the program, the trace's folder, SIGTERM.

``castfind record -o T -- ARGS`` takes ARGS the way ``python ARGS`` would: ``SCRIPT.py ...`` or
``-m MODULE ...``, optionally after the interpreter itself (``python``, ``python3.11``,
``/usr/bin/python3``: the py-spy / nsys habit), which is dropped. Every problem is a
:class:`ProgramError` raised before the program starts, so a typo never costs a long run.
"""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType

# python, python3, python3.11, python3.13t, python.exe, and the path of any of them.
_INTERPRETER = re.compile(r"^python(\d+(\.\d+)*t?)?(\.exe)?$")
_MODULE_NAME = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
_USAGE = "pass SCRIPT.py or -m MODULE"


class ProgramError(Exception):
    """A ``record`` command line that cannot run: ``where`` (a path, a name or ``record``), why, what to do."""

    def __init__(self, where: str, reason: str, hint: str) -> None:
        self.where, self.reason, self.hint = where, reason, hint
        super().__init__(str(self))

    def __str__(self) -> str:
        return f"{self.where}: {self.reason} — {self.hint}"


@dataclass(frozen=True, slots=True)
class Program:
    """A script path or a dotted module name, and the ``sys.argv[1:]`` it gets."""

    target: str
    is_module: bool
    args: tuple[str, ...]


def is_interpreter(arg: str) -> bool:
    """Whether ``arg`` names a Python interpreter (by its file name, or as this very interpreter)."""
    if _INTERPRETER.match(os.path.basename(arg)):
        return True
    return os.path.isabs(arg) and os.path.realpath(arg) == os.path.realpath(sys.executable)


def parse_program(argv: list[str]) -> Program:
    """``ARGS`` after ``--`` as a :class:`Program`; a leading interpreter is dropped."""
    if argv and is_interpreter(argv[0]):
        argv = argv[1:]
        if not argv:
            raise ProgramError("record", "no script after the interpreter", _USAGE)
    if not argv:
        raise ProgramError("record", "no program to run", _USAGE)
    head = argv[0]
    if head == "-m":
        if len(argv) < 2:
            raise ProgramError("record", "-m needs a module name", "pass -m MODULE")
        return Program(argv[1], True, tuple(argv[2:]))
    if head.startswith("-"):
        raise ProgramError("record", f"interpreter option {head} is not supported", _USAGE)
    return Program(head, False, tuple(argv[1:]))


def check_program(program: Program) -> None:
    """Raise :class:`ProgramError` when the script is not a file or the module's top package is not found.

    Only the top-level package is looked up: finding ``a.b`` would import ``a``, and its
    import must happen under the recorder. A missing ``a.b`` is caught when it runs.
    """
    if not program.is_module:
        if not os.path.isfile(program.target):
            raise ProgramError(program.target, "no such script", "check the path")
        return
    if not _MODULE_NAME.match(program.target) or not _top_level_exists(program.target.partition(".")[0]):
        raise ProgramError(program.target, "no such module", "check the name")


def _top_level_exists(name: str) -> bool:
    """Whether ``import name`` would find something, the current folder first as with ``python -m``."""
    saved = sys.path[:]
    sys.path.insert(0, os.getcwd())
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False
    finally:
        sys.path[:] = saved


def check_output(path: str | os.PathLike[str]) -> None:
    """Raise :class:`ProgramError` unless a trace can be written at ``path``.

    The trace is written by a rename in its folder, so the folder must exist and be
    writable; an existing file there is replaced, a folder is refused.
    """
    name = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(name))
    if os.path.isdir(name):
        raise ProgramError(name, "cannot write the trace: is a folder", "pass a file name, e.g. -o t.castfind.jsonl")
    if not os.path.isdir(folder):
        raise ProgramError(name, "cannot write the trace: folder does not exist", "create it or pick another -o")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ProgramError(name, "cannot write the trace: folder is not writable", "pick another -o")


@contextmanager
def sigterm_as_exit() -> Iterator[None]:
    """Inside the block, SIGTERM to this process raises ``SystemExit(143)``, so the trace is written as on exit.

    ``kill PID`` (or a job scheduler stopping the run) then ends the program through its
    ``finally`` blocks and the recorder's, as Ctrl-C does. A process forked inside the
    block inherits the handler but not the behaviour: there SIGTERM kills as by default.
    The previous handler is back after the block.
    """
    owner = os.getpid()

    def handle(signum: int, frame: FrameType | None) -> None:
        if os.getpid() != owner:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, handle)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
