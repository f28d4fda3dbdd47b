"""Import a torch.profiler Chrome trace (``record_shapes=True, with_stack=True``) as a castfind trace.

On each host thread, events nest in time: a ``python_function`` frame (``attn.py(120):
forward_decode``) encloses ``aten::to`` ⊃ ``aten::_to_copy`` ⊃ ``aten::copy_``. The
outermost dtype-changing copy is the one counted (the recorder sees the same one), its
call site is the innermost enclosing frame outside torch and castfind, and its dtypes and
shape come from ``Input type`` / ``Concrete Inputs`` / ``Input Dims``. On GPU, the op's
``External id`` (or time nesting) leads to the launch's ``correlation`` and on to the
kernel, whose duration becomes ``device_time_us``.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from typing import Any

from castfind.core.types import TraceSite
from castfind.runtime.chrome import STEP, ChromeTrace, load_chrome_trace
from castfind.runtime.dtypes import ITEMSIZE, cpp_type_name, scalar_type_name
from castfind.runtime.source import SourceIndex
from castfind.runtime.trace import MAX_INT, make_header, site_key, sort_sites

CAST_OPS = frozenset({"aten::_to_copy", "aten::copy_", "aten::copy"})
_FRAME = re.compile(r"^(?P<path>.+)\((?P<line>\d+)\): (?P<name>.+)$")
_BUILTIN = re.compile(r"^<built-in method (?P<name>\w+) of ")
_LAUNCH_CATS = frozenset({"cuda_runtime", "cuda_driver"})


@dataclass(slots=True)
class _Cast:
    """One counted cast op while the trace is walked (mutable: kernels attach afterwards)."""

    op: str
    src: str
    dst: str
    shape: tuple[int, ...]
    nbytes: int
    frame: tuple[str, int, str] | None
    method: str | None  # the Tensor method the profiler saw called (``to``, ``float``), if any
    step: str | None
    device: str = "cpu"
    device_time_us: float | None = None
    kernels: list[str] = field(default_factory=list)


def import_profile(
    path: str | os.PathLike[str], *, source_roots: tuple[str, ...] = ()
) -> tuple[dict[str, Any], list[TraceSite]]:
    """Read a Chrome trace and return a castfind trace: (header, aggregated sites, largest first).

    ``source_roots`` are folders to look for the profiled sources in (the profiler prints
    paths relative to ``sys.path``, and only a function's first line): with the source at
    hand each site gets its cast's own line and qualified function name; without it, the
    function's first line and a ``line_kind: "def"`` mark. Raises
    :class:`~castfind.runtime.trace.TraceError` for anything that is not a readable Chrome trace.
    """
    trace = load_chrome_trace(path)
    walker = _Walker(trace)
    walker.walk()
    walker.attach_kernels()
    sources = SourceIndex(tuple(source_roots))
    totals: dict[tuple[Any, ...], tuple[TraceSite, list[Any]]] = {}
    for cast in walker.casts:
        site = _site(cast, sources)
        key = site_key(site)
        if key not in totals:
            totals[key] = (site, [0, None, set()])
        acc = totals[key][1]
        acc[0] += 1
        if cast.device_time_us is not None:
            acc[1] = (acc[1] or 0.0) + cast.device_time_us
        if cast.step is not None:
            acc[2].add(cast.step)
    sites = sort_sites(
        TraceSite(
            path=s.path, line=s.line, function=s.function, op=s.op, src_dtype=s.src_dtype, dst_dtype=s.dst_dtype,
            shape=s.shape, device=s.device, calls=calls, bytes_per_call=s.bytes_per_call,
            device_time_us=None if dev is None else round(dev, 3),
            steps=len(stepset) if walker.steps else None, extra=s.extra,
        )  # fmt: skip
        for s, (calls, dev, stepset) in totals.values()
    )
    header = make_header(
        torch_version=trace.torch_version,
        devices=trace.devices,
        wall_s=trace.wall_s,
        steps=len(walker.steps),
        records=len(sites),
        source=f"torch.profiler:{os.path.basename(os.fspath(path))}",
    )
    return header, sites


class _Walker:
    """Finds the counted casts on each host thread and the kernels they launched."""

    def __init__(self, trace: ChromeTrace) -> None:
        self.trace = trace
        self.casts: list[_Cast] = []
        self.steps: set[str] = set()
        self.by_ext: dict[int, _Cast] = {}
        self.by_corr: dict[int, _Cast] = {}

    def walk(self) -> None:
        events = self.trace.events
        for indices in self.trace.threads.values():
            stack: list[tuple[int, _Cast | None]] = []  # (event index, the cast it is or belongs to)
            for index in indices:
                event = events[index]
                start, end = event["ts"], event["ts"] + event["dur"]
                # A child starts before its parent ends and ends no later (1 ns slack: µs are floats).
                while stack:
                    top = events[stack[-1][0]]
                    if start >= top["ts"] + top["dur"] - 1e-3 or end > top["ts"] + top["dur"] + 1e-3:
                        stack.pop()
                    else:
                        break
                name = event["name"]
                if STEP.match(name):
                    self.steps.add(name)
                owner = stack[-1][1] if stack else None
                if owner is None and event.get("cat") == "cpu_op" and name in CAST_OPS:
                    owner = self._read_cast(index, event, [i for i, _ in stack])
                    if owner is not None:
                        self.casts.append(owner)
                if owner is not None:
                    self._claim(index, event, owner)
                stack.append((index, owner))

    def _claim(self, index: int, event: dict[str, Any], cast: _Cast) -> None:
        """Remember the ids by which kernels launched under ``cast`` will name it."""
        args = event.get("args", {})
        cat = event.get("cat")
        ext = self.trace.int_arg(index, args, "External id")
        if ext is not None and cat == "cpu_op":
            self.by_ext[ext] = cast
        if cat in _LAUNCH_CATS:
            corr = self.trace.int_arg(index, args, "correlation")
            if corr is not None:
                self.by_corr[corr] = cast
            if cast.device == "cpu":
                cast.device = "cuda"

    def _read_cast(self, index: int, event: dict[str, Any], stack: list[int]) -> _Cast | None:
        """The cast an op performs, or ``None`` when it copies without changing dtype."""
        trace, name = self.trace, event["name"]
        args = event.get("args", {})
        types = trace.str_list_arg(index, args, "Input type")
        dims = trace.dims_arg(index, args)
        concrete = trace.str_list_arg(index, args, "Concrete Inputs")
        if not types or not dims:
            return None  # profiled without record_shapes: nothing to say about dtypes
        if name == "aten::_to_copy":
            src, shape = cpp_type_name(types[0]), dims[0]
            if len(types) == 7:  # _to_copy(self, dtype, layout, device, pin_memory, non_blocking, memory_format)
                code = concrete[1] if len(concrete) > 1 else ""
                dst = scalar_type_name(int(code)) if code.isascii() and code.isdigit() else None
            else:  # _to_copy.out(self, non_blocking, memory_format, out)
                dst = cpp_type_name(types[-1])
            dst_shape = shape
        else:  # copy_(self, src, non_blocking) / copy(self, src, non_blocking[, out])
            if len(types) < 2 or len(dims) < 2:
                return None
            src, shape = cpp_type_name(types[1]), dims[1]
            out = -1 if len(types) == 4 else 0
            dst, dst_shape = cpp_type_name(types[out]), dims[out]
        if src is None or dst is None or src == dst:
            return None
        nbytes = math.prod(shape) * ITEMSIZE[src] + math.prod(dst_shape) * ITEMSIZE[dst]
        if nbytes > MAX_INT:
            raise trace.error(index, "args['Input Dims'] out of range")
        frame, method, step = None, None, None
        for i in reversed(stack):
            outer = trace.events[i]
            outer_name = outer["name"]
            if step is None and STEP.match(outer_name):
                step = outer_name
            if frame is not None or outer.get("cat") != "python_function":
                continue
            builtin = _BUILTIN.match(outer_name)
            if builtin:
                method = method or builtin["name"]
                continue
            parsed = _FRAME.match(outer_name)
            if parsed and not _internal(parsed["path"]):
                if len(parsed["line"]) > 18:  # int() of thousands of digits raises; 18 digits fit in int64
                    raise trace.error(i, "frame line out of range")
                frame = (parsed["path"], int(parsed["line"]), parsed["name"])
        return _Cast(name, src, dst, tuple(shape), nbytes, frame, method, step)

    def attach_kernels(self) -> None:
        """Add each kernel's duration to the cast that launched it (by correlation, else External id)."""
        trace = self.trace
        for index in trace.device_events:
            event = trace.events[index]
            args = event.get("args", {})
            corr = trace.int_arg(index, args, "correlation")
            cast = self.by_corr.get(corr) if corr is not None else None
            if cast is None:
                ext = trace.int_arg(index, args, "External id")
                cast = self.by_ext.get(ext) if ext is not None else None
            if cast is None:
                continue
            device = trace.int_arg(index, args, "device")
            cast.device = f"cuda:{device}" if device is not None else "cuda"
            cast.device_time_us = (cast.device_time_us or 0.0) + float(event["dur"])
            cast.kernels.append(event["name"])


def _internal(path: str) -> bool:
    """Frames inside torch or castfind are not call sites; the profiler prints sys.path-relative paths."""
    norm = path.replace("\\", "/")
    if norm.split("/", 1)[0] in ("torch", "castfind") or norm.startswith("<"):
        return True
    return any(f"{p}/torch/" in norm or f"{p}/castfind/" in norm for p in ("site-packages", "dist-packages"))


def _site(cast: _Cast, sources: SourceIndex) -> TraceSite:
    """One call of ``cast`` as a trace record, its line put back on the cast when the source allows."""
    extra: dict[str, Any] = {}
    if cast.kernels:
        extra["kernels"] = sorted(set(cast.kernels))
    if cast.frame is None:
        path, line, function = "<unknown>", 0, ""
    else:
        path, line, function = cast.frame
        located = sources.locate(path, line, function, cast.op, cast.method)
        function = located.qualname or function
        if located.line is not None:
            line = located.line
        else:
            extra["line_kind"] = "def"
            extra["line_note"] = located.note
    return TraceSite(
        path=path, line=line, function=function, op=cast.op, src_dtype=cast.src, dst_dtype=cast.dst,
        shape=cast.shape, device=cast.device, calls=1, bytes_per_call=cast.nbytes, extra=extra,
    )  # fmt: skip
