"""The ``.castfind.jsonl`` trace format: one header line, then one :class:`TraceSite` per line.

Both producers (the recorder and the profiler importer) write through :func:`write_trace`
and every consumer reads through :func:`read_trace`, so the format lives in one place.
Reading is strict: anything truncated, foreign or mistyped raises :class:`TraceError`
naming the file and line, never a bare ``KeyError`` or ``JSONDecodeError``. Counts, sizes
and lines must fit in 64 bits and numbers must be finite (``NaN``/``Infinity`` are not
JSON), so whatever was read can be summed, formatted and written back as valid JSON. A
gzip-compressed trace is read by its magic bytes, whatever its name. Every string read
from a trace passes through :func:`clean_text`: a trace is input from elsewhere and must
not drive the terminal (escape sequences, ``\\r``) of whoever prints it.
"""

from __future__ import annotations

import json
import math
import os
import re
import zlib
from collections.abc import Iterable
from typing import Any

from castfind.core.fsutil import atomic_write_text
from castfind.core.inputs import InputError, gunzip, read_input
from castfind.core.types import Diagnostic, TraceSite

FORMAT_VERSION = 1

# Keys of one record and the JSON types they must have; ``int`` excludes ``bool`` below.
_REQUIRED: dict[str, type | tuple[type, ...]] = {
    "path": str,
    "line": int,
    "function": str,
    "op": str,
    "src_dtype": str,
    "dst_dtype": str,
    "shape": list,
    "device": str,
    "calls": int,
    "bytes_per_call": int,
}
_OPTIONAL: dict[str, type | tuple[type, ...]] = {"device_time_us": (int, float), "steps": int}
# Numeric fields checked for range before their type, so ``1e400`` reads as "out of range".
_NUMBERS = ("line", "calls", "bytes_per_call", "steps", "device_time_us")
_HEADER_NUMBERS = ("wall_s", "steps", "records")

# The largest count, size or line a trace may hold: what torch itself counts in (int64).
MAX_INT = 2**63 - 1
_GZIP_MAGIC = b"\x1f\x8b"
# C0 and C1 control characters (ESC, \r, BEL, CSI, ...) and the bidirectional overrides.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


class TraceError(Exception):
    """A trace (castfind JSONL or profiler Chrome JSON) that cannot be read.

    ``line`` is 1-based; 0 means the file as a whole (missing, unreadable, not
    decompressible). ``hint`` says what to do about it.
    """

    def __init__(self, path: str | os.PathLike[str], line: int, reason: str, hint: str = "") -> None:
        self.path = os.fspath(path)
        self.line = line
        self.reason = reason
        self.hint = hint
        super().__init__(str(self))

    def __str__(self) -> str:
        text = f"{self.path}:{self.line}: {self.reason}" if self.line else f"{self.path}: {self.reason}"
        return f"{text} — {self.hint}" if self.hint else text

    def to_diagnostic(self) -> Diagnostic:
        """This error as the shared :class:`~castfind.core.types.Diagnostic` record."""
        return Diagnostic(self.path, self.line, str(self), kind="trace-error")


def clean_text(text: str) -> str:
    """``text`` with control characters escaped (``\\x1b``, ``\\x0d``, ``\\u202e``); printable text is unchanged.

    Idempotent: the escapes hold no control characters, so cleaning twice changes nothing.
    """
    return _CONTROL.sub(_escape, text)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _clean_json(value: Any) -> Any:
    """A parsed JSON value with every string in it (keys too) passed through :func:`clean_text`."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, list):
        return [_clean_json(v) for v in value]
    if isinstance(value, dict):
        return {clean_text(k): _clean_json(v) for k, v in value.items()}
    return value


def _out_of_range(value: Any) -> bool:
    """A JSON number no trace field can hold: beyond 64 bits, or ``1e400`` read as infinity."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return abs(value) > MAX_INT
    return isinstance(value, float) and not math.isfinite(value)


def _has_non_finite(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, list):
        return any(_has_non_finite(v) for v in value)
    if isinstance(value, dict):
        return any(_has_non_finite(v) for v in value.values())
    return False


def _check_numbers(name: str, number: int, record: dict[str, Any], keys: tuple[str, ...], what: str) -> None:
    """Known numeric fields out of range, then any other non-finite number, as a positioned :class:`TraceError`."""
    for key in keys:
        if key in record and _out_of_range(record[key]):
            raise TraceError(name, number, f"{key} out of range", "record the trace again")
    for key, value in record.items():
        if _has_non_finite(value):
            raise TraceError(name, number, f"{what} field {key!r} is not a finite number", "record the trace again")


def total_bytes(site: TraceSite) -> int:
    """Bytes moved by all calls of ``site``."""
    return site.calls * site.bytes_per_call


def format_bytes(n: float) -> str:
    """``34.0 MiB``-style size, binary units, one decimal."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def site_key(site: TraceSite) -> tuple[Any, ...]:
    """The aggregation key: two records with equal keys are one site and are summed."""
    return (site.path, site.line, site.function, site.op, site.src_dtype, site.dst_dtype, site.shape, site.device)


def merge_sites(sites: Iterable[TraceSite]) -> list[TraceSite]:
    """Sum records with the same :func:`site_key`; return them largest total bytes first."""
    merged: dict[tuple[Any, ...], TraceSite] = {}
    for site in sites:
        key = site_key(site)
        old = merged.get(key)
        if old is None:
            merged[key] = site
            continue
        merged[key] = TraceSite(
            path=old.path,
            line=old.line,
            function=old.function,
            op=old.op,
            src_dtype=old.src_dtype,
            dst_dtype=old.dst_dtype,
            shape=old.shape,
            device=old.device,
            calls=old.calls + site.calls,
            bytes_per_call=max(old.bytes_per_call, site.bytes_per_call),
            device_time_us=_add_optional(old.device_time_us, site.device_time_us),
            steps=_add_optional(old.steps, site.steps),
            extra={**site.extra, **old.extra},
        )
    return sort_sites(merged.values())


def _add_optional(a: Any, b: Any) -> Any:
    if a is None:
        return b
    if b is None:
        return a
    return a + b


def sort_sites(sites: Iterable[TraceSite]) -> list[TraceSite]:
    """Largest total bytes first, then by path and line so the order is stable."""
    return sorted(sites, key=lambda s: (-total_bytes(s), s.path, s.line, s.op, s.shape))


def make_header(
    *, torch_version: str, devices: list[str], wall_s: float, steps: int, records: int, source: str
) -> dict[str, Any]:
    """The first line of a trace. ``records`` lets a reader notice a file cut at a line boundary."""
    return {
        "castfind_trace": FORMAT_VERSION,
        "torch": torch_version,
        "devices": devices,
        "wall_s": round(wall_s, 6),
        "steps": steps,
        "records": records,
        "source": source,
    }


def dumps_trace(header: dict[str, Any], sites: Iterable[TraceSite]) -> str:
    """The JSONL text of a trace. Keys in a site's ``extra`` are written after the standard ones."""
    lines = [json.dumps(header, sort_keys=False, allow_nan=False)]
    for site in sites:
        record = site.to_dict()
        for key, value in site.extra.items():
            record.setdefault(key, value)
        lines.append(json.dumps(record, allow_nan=False))
    return "\n".join(lines) + "\n"


def owns_trace(text: str) -> str | None:
    """``None`` when ``text`` is a trace castfind wrote (its first line a ``castfind_trace`` header), else why not:
    what an existing ``-o`` file must be before ``record`` or ``trace import`` replaces it."""
    try:
        header = json.loads(text.split("\n", 1)[0])
    except (ValueError, RecursionError):
        return "its first line is not JSON"
    return None if isinstance(header, dict) and "castfind_trace" in header else "no castfind_trace header"


def write_trace(path: str | os.PathLike[str], header: dict[str, Any], sites: list[TraceSite]) -> None:
    """Write a trace atomically (a reader never sees half a file)."""
    atomic_write_text(path, dumps_trace({**header, "records": len(sites)}, sites))


def read_trace(path: str | os.PathLike[str]) -> tuple[dict[str, Any], list[TraceSite]]:
    """Read a ``.castfind.jsonl`` trace into its header and sites.

    Raises :class:`TraceError` (with the 1-based line) for anything that is not a
    complete, well-typed castfind trace. A gzip-compressed trace (``t.jsonl.gz``) is
    recognised by its first bytes and decompressed.
    """
    name = os.fspath(path)
    try:
        data = read_input(name, "trace")
    except InputError as exc:
        raise TraceError(name, 0, str(exc)) from None
    except OSError as exc:
        raise TraceError(name, 0, f"cannot read trace: {exc.strerror or exc}", "check the path") from exc
    if data[:2] == _GZIP_MAGIC:
        try:
            data = gunzip(data, name, "trace")
        except InputError as exc:
            raise TraceError(name, 0, str(exc)) from None
        except (OSError, EOFError, zlib.error) as exc:
            reason = f"cannot decompress: {exc or 'truncated gzip'}"
            raise TraceError(name, 0, reason, "record the trace again") from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        hint = "pass a file written by `castfind record`"
        raise TraceError(name, line, "not UTF-8 text; is this a castfind trace?", hint) from exc
    return parse_trace(text, name)


def parse_trace(text: str, name: str = "<trace>") -> tuple[dict[str, Any], list[TraceSite]]:
    """:func:`read_trace` on text already in memory; ``name`` is used in errors."""
    lines = text.split("\n")
    if not text.strip():
        raise TraceError(name, 1, "empty trace", "record one with `castfind record -o PATH -- script.py`")
    header = _parse_header(lines[0], name, text)
    sites: list[TraceSite] = []
    last = 1
    for number, raw in enumerate(lines[1:], start=2):
        if not raw.strip():
            continue
        last = number
        sites.append(_parse_site(raw, name, number))
    promised = header.get("records")
    if promised is not None and promised != len(sites):
        raise TraceError(
            name, last, f"truncated: the header promises {promised} records, found {len(sites)}", "record it again"
        )
    return header, sites


class _NotJsonNumber(ValueError):
    """``NaN``, ``Infinity`` or ``-Infinity``: Python's json accepts them, JSON does not."""


def _reject_constant(constant: str) -> Any:
    raise _NotJsonNumber(constant)


def _loads(raw: str, name: str, number: int) -> Any:
    try:
        return json.loads(raw, parse_constant=_reject_constant)
    except _NotJsonNumber as exc:
        raise TraceError(name, number, f"{exc} is not a JSON number", "record the trace again") from exc
    except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
        raise TraceError(name, number, f"not valid JSON ({_short(exc)}); truncated?", "record the trace again") from exc


def _short(exc: BaseException) -> str:
    return str(exc).split("\n")[0][:120] or type(exc).__name__


def _parse_header(raw: str, name: str, text: str) -> dict[str, Any]:
    try:
        header = _loads(raw, name, 1)
    except TraceError:
        # A Chrome trace is one multi-line JSON document whose first line alone is not JSON.
        if '"traceEvents"' in text[: 1 << 20]:
            raise TraceError(
                name, 1, "this is a torch.profiler Chrome trace, not a castfind trace",
                "convert it with `castfind trace import`",
            ) from None
        raise
    if isinstance(header, dict) and "traceEvents" in header:
        raise TraceError(
            name, 1, "this is a torch.profiler Chrome trace, not a castfind trace", "convert it with `castfind trace import`"
        )
    if not isinstance(header, dict) or "castfind_trace" not in header:
        raise TraceError(name, 1, "not a castfind trace (no castfind_trace header)", "pass a file written by `castfind record`")
    if header["castfind_trace"] != FORMAT_VERSION or isinstance(header["castfind_trace"], bool):
        raise TraceError(
            name, 1, f"unsupported trace version {header['castfind_trace']!r} (this castfind reads {FORMAT_VERSION})",
            "record it again with this castfind",
        )
    _check_numbers(name, 1, header, _HEADER_NUMBERS, "header")
    checks: dict[str, tuple[type | tuple[type, ...], ...]] = {
        "torch": (str,), "devices": (list,), "wall_s": (int, float), "steps": (int,), "records": (int,), "source": (str,),
    }  # fmt: skip
    for key, types in checks.items():
        if key in header and (not isinstance(header[key], types) or isinstance(header[key], bool)):
            raise TraceError(name, 1, f"header field {key!r} has the wrong type", "record the trace again")
    if not all(isinstance(d, str) for d in header.get("devices", [])):
        raise TraceError(name, 1, "header field 'devices' must list strings", "record the trace again")
    if any(isinstance(header.get(k), int) and header[k] < 0 for k in ("steps", "records")):
        raise TraceError(name, 1, "header counts must not be negative", "record the trace again")
    return _clean_json(header)


def _parse_site(raw: str, name: str, number: int) -> TraceSite:
    record = _loads(raw, name, number)
    if not isinstance(record, dict):
        raise TraceError(name, number, "a trace record must be a JSON object", "record the trace again")
    if "castfind_trace" in record:
        raise TraceError(name, number, "a second trace header; were two traces concatenated?", "keep one trace per file")
    _check_numbers(name, number, record, _NUMBERS, "record")
    for key, types in {**_REQUIRED, **_OPTIONAL}.items():
        if key not in record:
            if key in _REQUIRED:
                raise TraceError(name, number, f"record lacks {key!r}", "record the trace again")
            continue
        value = record[key]
        if not isinstance(value, types) or isinstance(value, bool):
            raise TraceError(name, number, f"record field {key!r} has the wrong type", "record the trace again")
    shape = record["shape"]
    if any(_out_of_range(d) for d in shape):
        raise TraceError(name, number, "shape out of range", "record the trace again")
    if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        raise TraceError(name, number, "record field 'shape' must list non-negative integers", "record the trace again")
    for key in ("line", "calls", "bytes_per_call", "steps"):
        if key in record and record[key] < 0:
            raise TraceError(name, number, f"record field {key!r} is negative", "record the trace again")
    device_time = record.get("device_time_us")
    if device_time is not None and not (math.isfinite(device_time) and device_time >= 0):
        raise TraceError(name, number, "record field 'device_time_us' must be a finite, non-negative number", "")
    extra = {k: v for k, v in record.items() if k not in _REQUIRED and k not in _OPTIONAL}
    return TraceSite(
        path=clean_text(record["path"]),
        line=record["line"],
        function=clean_text(record["function"]),
        op=clean_text(record["op"]),
        src_dtype=clean_text(record["src_dtype"]),
        dst_dtype=clean_text(record["dst_dtype"]),
        shape=tuple(shape),
        device=clean_text(record["device"]),
        calls=record["calls"],
        bytes_per_call=record["bytes_per_call"],
        device_time_us=None if device_time is None else float(device_time),
        steps=record.get("steps"),
        extra=_clean_json(extra),
    )
