"""Small filesystem helpers shared by every writer: nothing is ever written half-way, and an
output path is checked before the work that produces its content starts.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from castfind.core.inputs import read_input

__all__ = ["OutputPathError", "Owns", "Protected", "atomic_write_bytes", "atomic_write_text", "check_output_file",
           "check_output_target", "ensure_folder"]


class OutputPathError(Exception):
    """A path castfind was asked to write that it cannot write: ``PATH: what is wrong — what to do``."""

    def __init__(self, path: str | os.PathLike[str], reason: str) -> None:
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


def _umask() -> int:
    # The only portable way to read the umask is to set it; put it straight back.
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _probe(folder: Path) -> None:
    """Create and delete a file in ``folder``; raises ``OSError`` when that is impossible.

    ``os.access`` is not enough: root passes every permission check, yet cannot create files
    in ``/proc`` or on a read-only mount.
    """
    # PERF: os.open with O_EXCL and a random name, as mkstemp does, without importing tempfile (~8 ms, more than
    # the rest of a carried `where` answer's own output): every run probes its cache folder.
    for _ in range(100):
        tmp = os.path.join(folder, f".castfind-probe.{os.urandom(6).hex()}")
        try:
            fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        except FileExistsError:
            continue
        os.close(fd)
        os.unlink(tmp)
        return
    raise FileExistsError(f"{folder}: no free name for a probe file")


def _why(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


def _is_stream(path: str | os.PathLike[str]) -> bool:
    """A device, FIFO or socket (``/dev/null``, ``/dev/stdout``, ``>(...)``): written in place.

    Replacing one with a regular file would be wrong (and, as root, would replace ``/dev/null``).
    """
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def check_output_file(path: str | os.PathLike[str], hint: str = "pass a path in a writable folder") -> None:
    """Raise :class:`OutputPathError` unless :func:`atomic_write_bytes` can write ``path``.

    Creates nothing that stays: the file's folder gets a probe file, created and deleted at once. The folder
    must exist: an output aimed at a missing folder is a typo more often than a wish (``--sarif /new/dir/x``),
    so castfind creates no folders for it, as a shell redirection would not. ``hint`` is the "what to do"
    part of the message. A device or FIFO (``/dev/null``) only has to be writable.
    """
    if _is_stream(path):
        if not os.access(path, os.W_OK):
            raise OutputPathError(path, f"is not writable — {hint}")
        return
    target = Path(os.path.realpath(path))
    if target.is_dir():
        raise OutputPathError(path, f"is a folder — {hint}")
    folder = target.parent
    if not folder.exists():
        raise OutputPathError(path, f"folder {folder} does not exist — create it first, or {hint}")
    if not folder.is_dir():
        raise OutputPathError(path, f"{folder} is not a folder — {hint}")
    try:
        _probe(folder)
    except OSError as exc:
        raise OutputPathError(path, f"cannot write in {folder} ({_why(exc)}) — {hint}") from exc


#: Whether an existing file's text is a document castfind wrote in one format: ``None`` when it is, else why
#: not (``"not JSON"``). Each format's predicate lives next to its writer.
Owns = Callable[[str], "str | None"]
@dataclass(frozen=True, slots=True)
class Protected:
    """What one run's outputs must never replace: its ``inputs`` (files it reads), any ``.py`` file under its
    scanned ``roots``, and anything inside the ``folders`` castfind keeps (the cache)."""

    inputs: tuple[str, ...] = ()
    roots: tuple[str, ...] = ()
    folders: tuple[str, ...] = ()

    @classmethod
    def of(cls, inputs: Iterable[object] = (), roots: Iterable[object] = (), folders: Iterable[object] = ()) -> Protected:
        def norm(xs: Iterable[object]) -> tuple[str, ...]:
            return tuple(os.fspath(x) for x in xs if isinstance(x, str | os.PathLike))

        return cls(norm(inputs), norm(roots), norm(folders))


def _under(path: Path, folder: str) -> bool:
    return path.is_relative_to(os.path.realpath(folder))


def _existing_text(path: str | os.PathLike[str]) -> str | None:
    """The text of the regular file at ``path`` (None when there is none or it is empty); ``""`` when it
    cannot be read (:func:`castfind.core.inputs.read_input`: a regular file within the ``output`` limit) as
    UTF-8 text."""
    try:
        data = read_input(path, "output")
    except FileNotFoundError:
        return None
    except OSError:  # InputError too: not a regular file, or over the limit
        return ""
    try:
        return data.decode("utf-8") if data.strip() else None
    except UnicodeDecodeError:
        return ""


def check_output_target(path: str | os.PathLike[str], option: str, what: str, owns: Owns | None,
                        protected: Protected | None = None) -> None:
    """Raise :class:`OutputPathError` unless ``option`` may write its ``what`` document (``"SARIF log"``) to ``path``.

    The one check every output option goes through, before the work: the path must be writable
    (:func:`check_output_file`); it must not be one of ``protected``'s inputs, a ``.py`` file under a
    scanned root or inside castfind's own folders; and an existing non-empty file there must be a
    document of that format castfind wrote (``owns`` says; ``None``: never), else it would be lost.
    A device or FIFO (``/dev/null``) only has to be writable.
    """
    hint = f"pass another {option} path"
    protected = protected or Protected()
    check_output_file(path, f"pass a file path in a writable folder to {option}")
    if _is_stream(path):
        return
    real = Path(os.path.realpath(path))
    for given in protected.inputs:
        if real == Path(os.path.realpath(given)):
            raise OutputPathError(path, f"is an input of this run ({given}); not overwriting it — {hint}")
    for folder in protected.folders:
        if _under(real, folder):
            raise OutputPathError(path, f"is inside castfind's folder {folder}; not writing there — {hint}")
    if real.suffix.lower() in (".py", ".pyi", ".pyw"):
        for root in protected.roots:
            if _under(real, root):
                raise OutputPathError(path, f"is a Python source under the scanned root {root}; not overwriting it "
                                            f"— {hint}")
    text = _existing_text(path)
    if text is None:
        return  # nothing to lose (new, or empty as mktemp makes it)
    why = "not UTF-8 text" if text == "" else ("no check for this format" if owns is None else owns(text))
    if why is not None:
        raise OutputPathError(path, f"exists and is not a {what} ({why}); not overwriting it — remove it or {hint}")


def ensure_folder(path: str | os.PathLike[str], hint: str) -> Path:
    """Create folder ``path`` if needed and check that files can be written in it.

    Raises :class:`OutputPathError` (``hint`` says what to do) when it is a file, cannot be
    created or is read-only. Returns it as a ``Path``.
    """
    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise OutputPathError(path, f"is a file, not a folder — {hint}")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        _probe(folder)
    except OSError as exc:
        raise OutputPathError(path, f"cannot create or write in this folder ({_why(exc)}) — {hint}") from exc
    return folder


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder and ``os.replace``.

    A reader sees either the old file or the whole new one, never a partial write. A symlink
    is written through (its target is replaced; the link stays). A new file gets the mode the
    umask gives (0644 under umask 022); a replaced file keeps its mode. A device or FIFO
    (``/dev/null``, ``/dev/stdout``) is written in place.
    """
    if _is_stream(path):
        with open(path, "wb") as stream:
            stream.write(data)
        return
    target = Path(os.path.realpath(path))
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = stat.S_IMODE(target.stat().st_mode)
    except FileNotFoundError:
        mode = 0o666 & ~_umask()
    import tempfile

    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        os.chmod(tmp, mode)  # mkstemp makes it 0600
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """:func:`atomic_write_bytes` for UTF-8 text."""
    atomic_write_bytes(path, text.encode("utf-8"))
