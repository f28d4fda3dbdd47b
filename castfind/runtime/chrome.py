"""Load a Chrome trace (as ``torch.profiler`` exports it) strictly, with line numbers for every complaint.

Only the fields the importer reads are checked; anything malformed in them becomes a
:class:`~castfind.runtime.trace.TraceError` naming the event's line in the JSON file.
"""

from __future__ import annotations

import bisect
import json
import math
import os
import re
import zlib
from typing import Any

from castfind.core.inputs import InputError, gunzip, read_input
from castfind.runtime.trace import MAX_INT, TraceError

HOST_CATS = frozenset({"cpu_op", "python_function", "user_annotation", "cuda_runtime", "cuda_driver"})
DEVICE_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
STEP = re.compile(r"^ProfilerStep#\d+$")
_HINT = "export it again with prof.export_chrome_trace(PATH)"


class ChromeTrace:
    """The events of one Chrome trace, indexed for the importer."""

    def __init__(self, name: str, text: str, events: list[Any], top: dict[str, Any]) -> None:
        self.name = name
        self.text = text
        self.events = events
        self._lines: list[int] | None = None
        self.threads: dict[tuple[Any, Any], list[int]] = {}
        self.device_events: list[int] = []
        self.torch_version = str(top.get("torch_version", top.get("pytorch_version", ""))) or "unknown"
        self.devices = _devices(top)
        first, last = math.inf, -math.inf
        for index, event in enumerate(events):
            if not isinstance(event, dict):
                raise self.error(index, "a trace event must be a JSON object")
            if event.get("ph") != "X":
                continue
            cat: Any = event.get("cat")
            event_name = event.get("name")
            if not isinstance(event_name, str):
                raise self.error(index, "event 'name' must be a string")
            if cat is not None and not isinstance(cat, str):
                raise self.error(index, "event 'cat' must be a string")
            host = cat in HOST_CATS or STEP.match(event_name) is not None
            if not host and cat not in DEVICE_CATS:
                continue
            self._check_timing(index, event)
            first, last = min(first, event["ts"]), max(last, event["ts"] + event["dur"])
            if host:
                thread = (event.get("pid"), event.get("tid"))
                if not all(isinstance(x, (int, str)) or x is None for x in thread):
                    raise self.error(index, "event 'pid'/'tid' must be numbers or strings")
                self.threads.setdefault(thread, []).append(index)
            else:
                self.device_events.append(index)
        self.wall_s = (last - first) / 1e6 if last >= first else 0.0
        # Parents first: earlier start, then longer, then Python frames before the ops they call.
        for indices in self.threads.values():
            indices.sort(key=lambda i: (events[i]["ts"], -events[i]["dur"], events[i].get("cat") != "python_function"))

    def _check_timing(self, index: int, event: dict[str, Any]) -> None:
        for key in ("ts", "dur"):
            value = event.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INT:
                raise self.error(index, f"event {key!r} out of range")  # math.isfinite would overflow
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
                raise self.error(index, f"event {key!r} must be a finite number")
        if event["dur"] < 0:
            raise self.error(index, "event 'dur' is negative")
        if "args" in event and not isinstance(event["args"], dict):
            raise self.error(index, "event 'args' must be a JSON object")

    def error(self, index: int, reason: str) -> TraceError:
        """A :class:`TraceError` at the line of event ``index``."""
        return TraceError(self.name, self.line_of(index), reason, _HINT)

    def line_of(self, index: int) -> int:
        """1-based line of event ``index`` in the JSON text (computed on first need: errors are rare)."""
        if self._lines is None:
            self._lines = _event_lines(self.text)
        return self._lines[index] if index < len(self._lines) else 1

    def int_arg(self, index: int, args: dict[str, Any], key: str) -> int | None:
        """An integer argument, ``None`` when absent."""
        value = args.get(key)
        if value is None:
            return None
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.error(index, f"args[{key!r}] must be an integer")
        if abs(value) > MAX_INT:
            raise self.error(index, f"args[{key!r}] out of range")
        return value

    def str_list_arg(self, index: int, args: dict[str, Any], key: str) -> list[str]:
        """A list-of-strings argument (``Input type``, ``Concrete Inputs``), ``[]`` when absent."""
        value = args.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.error(index, f"args[{key!r}] must be a list of strings")
        return value

    def dims_arg(self, index: int, args: dict[str, Any]) -> list[list[int]]:
        """``Input Dims``: one list of non-negative sizes per input, ``[]`` when absent."""
        value = args.get("Input Dims", [])
        ok = isinstance(value, list) and all(
            isinstance(d, list) and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in d)
            for d in value
        )
        if not ok:
            raise self.error(index, "args['Input Dims'] must be a list of lists of sizes")
        if any(n > MAX_INT for d in value for n in d):
            raise self.error(index, "args['Input Dims'] out of range")
        return value


def load_chrome_trace(path: str | os.PathLike[str]) -> ChromeTrace:
    """Read ``path`` (``.json`` or gzip-compressed) into a :class:`ChromeTrace`, or raise :class:`TraceError`."""
    name = os.fspath(path)
    try:
        data = read_input(name, "profile")
    except InputError as exc:
        raise TraceError(name, 0, str(exc)) from None
    except OSError as exc:
        raise TraceError(name, 0, f"cannot read profile: {exc.strerror or exc}", "check the path") from exc
    if data[:2] == b"\x1f\x8b":
        try:
            data = gunzip(data, name, "profile")
        except InputError as exc:
            raise TraceError(name, 0, str(exc)) from None
        except (OSError, EOFError, zlib.error) as exc:
            raise TraceError(name, 0, f"cannot decompress: {exc or 'truncated gzip'}", _HINT) from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise TraceError(name, line, "not UTF-8 text; is this a Chrome trace?", _HINT) from exc
    return parse_chrome_trace(text, name)


def parse_chrome_trace(text: str, name: str = "<profile>") -> ChromeTrace:
    """:func:`load_chrome_trace` on text already in memory."""
    if not text.strip():
        raise TraceError(name, 1, "empty profile", _HINT)
    try:
        top = json.loads(text)
    except json.JSONDecodeError as exc:
        if '"castfind_trace"' in text.split("\n", 1)[0]:
            raise TraceError(name, 1, "this is already a castfind trace", "use it directly (castfind trace show)") from exc
        raise TraceError(name, exc.lineno, f"not valid JSON ({exc.msg}); truncated?", _HINT) from exc
    except (ValueError, RecursionError) as exc:
        raise TraceError(name, 1, f"not valid JSON ({type(exc).__name__}); truncated?", _HINT) from exc
    if isinstance(top, list):  # the JSON Array Format of the Chrome trace spec
        return ChromeTrace(name, text, top, {})
    if not isinstance(top, dict) or "traceEvents" not in top:
        if isinstance(top, dict) and "castfind_trace" in top:
            raise TraceError(name, 1, "this is already a castfind trace", "use it directly (castfind trace show)")
        raise TraceError(name, 1, "not a Chrome trace (no traceEvents)", "pass the file prof.export_chrome_trace wrote")
    if not isinstance(top["traceEvents"], list):
        raise TraceError(name, 1, "traceEvents must be a list", _HINT)
    return ChromeTrace(name, text, top["traceEvents"], top)


def _devices(top: dict[str, Any]) -> list[str]:
    names = ["cpu"]
    props = top.get("deviceProperties")
    if isinstance(props, list):
        for prop in props:
            if isinstance(prop, dict) and isinstance(prop.get("id"), int):
                names.append(f"cuda:{prop['id']} {prop.get('name', '')}".rstrip())
    return names


def _event_lines(text: str) -> list[int]:
    """The line each element of ``traceEvents`` starts on; best effort (``[]`` if the layout is odd)."""
    match = re.search(r'"traceEvents"\s*:\s*\[', text) or re.match(r"\s*\[", text)
    if match is None:
        return []
    newlines = [i for i, ch in enumerate(text) if ch == "\n"]
    decoder = json.JSONDecoder()
    pos = match.end()
    lines: list[Any] = []
    while True:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= len(text) or text[pos] == "]":
            return lines
        lines.append(bisect.bisect_right(newlines, pos - 1) + 1)
        try:
            _, pos = decoder.raw_decode(text, pos)
        except (ValueError, RecursionError):
            return lines
