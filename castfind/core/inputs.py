"""Reading an input file: a regular file only (a FIFO or device is refused without blocking), at most a
size limit per kind of input, and gzip decompressed to at most that limit too.

Every reader of a file castfind is handed (traces, profiles, baselines, model configs, rule files,
``pyproject.toml``, ``.pre-commit-config.yaml``) goes through :func:`read_input`, so ``/dev/zero``, a
FIFO or a gzip bomb fails in one line instead of hanging or filling memory.

The limits (:data:`LIMITS`) can be raised or lowered per kind with an environment variable,
``CASTFIND_MAX_<KIND>_SIZE`` (e.g. ``CASTFIND_MAX_TRACE_SIZE=2G``), in bytes or with K, M or G.
"""

from __future__ import annotations

import errno
import os
import stat
import zlib

__all__ = ["LIMITS", "InputError", "gunzip", "limit", "read_input"]

_MIB = 1024 * 1024

#: Kind of input -> (default limit in bytes, the environment variable that overrides it).
LIMITS: dict[str, tuple[int, str]] = {
    "trace": (512 * _MIB, "CASTFIND_MAX_TRACE_SIZE"),  # --trace, trace show (decompressed size)
    "profile": (2048 * _MIB, "CASTFIND_MAX_PROFILE_SIZE"),  # trace import's Chrome trace (decompressed size)
    "baseline": (64 * _MIB, "CASTFIND_MAX_BASELINE_SIZE"),  # --baseline, [tool.castfind] baseline
    "model-config": (16 * _MIB, "CASTFIND_MAX_MODEL_CONFIG_SIZE"),  # --model-config
    "rules": (4 * _MIB, "CASTFIND_MAX_RULES_SIZE"),  # each rule file
    "pyproject": (4 * _MIB, "CASTFIND_MAX_PYPROJECT_SIZE"),  # pyproject.toml, .pre-commit-config.yaml
    # An existing output file, read to tell whether castfind wrote it (fsutil.check_output_target); larger: not ours.
    "output": (256 * _MIB, "CASTFIND_MAX_OUTPUT_SIZE"),
}


class InputError(OSError):
    """An input file castfind will not read: not a regular file, or over its size limit.

    An ``OSError`` (``strerror`` is the reason, ``filename`` the path), so the callers' handling of
    unreadable files applies unchanged; ``str()`` is the reason alone.
    """

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(errno.EINVAL, reason, path)

    def __str__(self) -> str:
        return str(self.strerror)


def _parse(text: str) -> int | None:
    t = text.strip().upper().removesuffix("B")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    digits = t[:-1] if scale > 1 else t
    if not digits.isdigit() or len(digits) > 15 or int(digits) == 0:
        return None
    return int(digits) * scale


def limit(kind: str) -> int:
    """The size limit for ``kind``: its environment variable when set to a valid size, else the default."""
    default, env = LIMITS[kind]
    raw = os.environ.get(env)
    got = _parse(raw) if raw else None
    return default if got is None else got


def _too_big(kind: str, what: str) -> str:
    _, env = LIMITS[kind]
    return f"{what} is over the {limit(kind) // _MIB or 1} MiB limit for a {kind} file — set {env} (e.g. 2G) to raise it"


def read_input(path: str | os.PathLike[str], kind: str) -> bytes:
    """The bytes of ``path``, a regular file of at most ``limit(kind)`` bytes.

    Raises :class:`InputError` for a FIFO, device, socket or folder (opened without blocking,
    so a FIFO with no writer does not hang) or a file over the limit; ``OSError`` as ``open``
    raises it (``FileNotFoundError``...).
    """
    name = os.fspath(path)
    cap = limit(kind)
    fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise InputError(name, "is a folder — pass a file")
        if not stat.S_ISREG(st.st_mode):
            raise InputError(name, "is not a regular file (a FIFO, device or socket) — pass a file")
        if st.st_size > cap:
            raise InputError(name, _too_big(kind, f"the file ({st.st_size} bytes)"))
        os.set_blocking(fd, True)
        chunks: list[bytes] = []
        total = 0
        while True:
            chunk = os.read(fd, min(1 << 20, cap + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > cap:  # grew while being read
                raise InputError(name, _too_big(kind, "the file"))
        return b"".join(chunks)
    finally:
        os.close(fd)


def gunzip(data: bytes, path: str | os.PathLike[str], kind: str) -> bytes:
    """``data`` (gzip, possibly several members) decompressed to at most ``limit(kind)`` bytes.

    Raises :class:`InputError` past the limit (a gzip bomb stops there), ``zlib.error`` or
    ``EOFError`` for a corrupt or truncated stream, as :func:`gzip.decompress` would.
    """
    cap = limit(kind)
    out: list[bytes] = []
    total = 0
    rest = data
    while rest:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        buf = rest
        while buf:
            piece = d.decompress(buf, cap + 1 - total)
            total += len(piece)
            out.append(piece)
            if total > cap:
                raise InputError(os.fspath(path), _too_big(kind, "the decompressed file"))
            buf = d.unconsumed_tail
            if d.eof:
                break
        if not d.eof:
            raise EOFError("truncated gzip")
        rest = d.unused_data.lstrip(b"\x00")  # padding after a member is allowed, as gzip does
    return b"".join(out)
