"""The runtime hook: record every dtype-changing copy a program makes, by call site.

``with castfind.record("trace.jsonl"): ...`` installs a ``TorchDispatchMode`` that sees
each ``aten._to_copy`` / ``aten.copy_`` / ``aten.copy`` below the Python layer (so
``.to(dtype)``, ``.float()``, ``.half()``, ``.type()``, ``out[...] = x`` all arrive here),
keeps the ones whose source and destination dtypes differ, and counts them in memory by
(site, op, dtypes, shape, device). The trace is written once, atomically, when the block
exits, including by an exception or Ctrl-C.

Forked children: only the process that entered the block writes the trace. A child made
by ``os.fork`` (or ``multiprocessing`` with the fork start method) inherits the recorder
but never writes, so it cannot overwrite the parent's trace when it unwinds; its casts
are not recorded. (Children started by spawn or forkserver are fresh interpreters that
the recorder does not reach at all.)

Threads: casts made in threads the program starts inside the block (``threading.Thread``, its
subclasses, ``ThreadPoolExecutor`` workers) are recorded: a ``threading.setprofile`` hook enters
the dispatch mode, whose stack is per thread, as each new thread starts, then hands the thread
back to the program's own profile hook. Threads already running when the block starts (and
threads made without :mod:`threading`) are not reached.

What it cannot see: kernels replayed from a CUDA graph and code compiled by
``torch.compile`` never pass through Python dispatch. Record a capture-free, eager run.

torch is imported only when :func:`record` is called, so ``castfind.step()`` is free to
call from code that runs with or without the recorder.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import CodeType, FrameType
from typing import Any

from castfind.core.types import TraceSite
from castfind.runtime.trace import make_header, sort_sites, write_trace

_CASTFIND_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep

# The recorder that :func:`step` advances; ``None`` outside ``record``.
_active: _Recording | None = None


class _Recording:
    """Counts for one ``record`` block. Plain dicts: the hot path must stay cheap."""

    def __init__(self) -> None:
        self.counts: dict[tuple[Any, ...], list[int]] = {}  # key -> [calls, bytes, last_step, steps_seen]
        self.step = 0
        self.devices: set[str] = set()
        self.lock = threading.Lock()  # casts may come from several threads

    def add(self, key: tuple[Any, ...], nbytes: int) -> None:
        with self.lock:
            entry = self.counts.get(key)
            if entry is None:
                self.counts[key] = [1, nbytes, self.step, 1]
                return
            entry[0] += 1
            if entry[2] != self.step:
                entry[2] = self.step
                entry[3] += 1

    def sites(self) -> list[TraceSite]:
        stepped = self.step > 0
        return sort_sites(
            TraceSite(
                path=path, line=line, function=function, op=op, src_dtype=src, dst_dtype=dst,
                shape=shape, device=device, calls=calls, bytes_per_call=nbytes,
                steps=seen if stepped else None,
            )  # fmt: skip
            for (path, line, function, op, src, dst, shape, device), (calls, nbytes, _, seen) in self.counts.items()
        )


def step() -> None:
    """Mark the end of one step (a decode iteration, a batch). A no-op outside :func:`record`."""
    if _active is not None:
        _active.step += 1


@contextmanager
def record(path: str | os.PathLike[str]) -> Iterator[None]:
    """Record every dtype-changing copy made inside the block; write the trace to ``path`` on exit.

    The trace is written even when the block raises or is interrupted, by the process
    that entered the block only: a forked child leaving it writes nothing. Nesting is not
    supported: an inner ``record`` raises ``RuntimeError``.
    """
    global _active
    if _active is not None:
        raise RuntimeError("castfind.record is already active; nesting is not supported")
    import torch

    path = os.path.abspath(path)  # the program may chdir before the trace is written
    mode = _mode_class()(_Recording())
    owner = os.getpid()
    started = time.perf_counter()
    _active = mode.recording
    previous_hook = threading.getprofile()
    threading.setprofile(_thread_hook(mode.recording, previous_hook))
    try:
        with mode:
            yield
    finally:
        threading.setprofile(previous_hook)
        _active = None
        if os.getpid() == owner:
            _write(path, torch, mode.recording, time.perf_counter() - started)


def _thread_hook(recording: _Recording, previous: Any) -> Any:
    """The ``threading.setprofile`` hook: its first call, in a new thread before ``run``, enters a
    dispatch mode counting into ``recording`` in that thread, and puts ``previous`` (the program's
    own hook, usually none) in its place."""

    def enter(frame: FrameType, event: str, arg: Any) -> Any:
        sys.setprofile(previous)
        if _active is recording:  # the block may have ended since the thread was made
            _mode_class()(recording).__enter__()
        if previous is not None:
            return previous(frame, event, arg)
        return None

    return enter


def _write(path: str, torch: Any, recording: _Recording, wall_s: float) -> None:
    """The trace of ``recording``, written atomically to ``path``."""
    sites = recording.sites()
    header = make_header(
        torch_version=str(torch.__version__),
        devices=_device_names(torch, recording.devices),
        wall_s=wall_s,
        steps=recording.step,
        records=len(sites),
        source="castfind.record",
    )
    write_trace(path, header, sites)


def _device_names(torch: Any, seen: set[str]) -> list[str]:
    """``cpu`` plus each CUDA device the program touched, by its marketing name."""
    names = []
    for device in sorted(seen):
        if device.startswith("cuda"):
            index = int(device.partition(":")[2] or 0)
            names.append(f"{device} {torch.cuda.get_device_name(index)}")
        else:
            names.append(device)
    return names


_MODE_CLASS: type | None = None


def _mode_class() -> type:
    """Build the dispatch-mode class on first use; it needs torch, which the module does not import."""
    global _MODE_CLASS
    if _MODE_CLASS is None:
        _MODE_CLASS = _build_mode_class()
    return _MODE_CLASS


def _build_mode_class() -> type:
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    aten = torch.ops.aten
    torch_dir = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
    # op overload -> (name as the profiler spells it, how to find source and destination)
    to_copy, copy_inplace, copy_out = "to_copy", "copy_", "copy"
    ops: dict[Any, tuple[str, str]] = {
        aten._to_copy.default: ("aten::_to_copy", to_copy),
        aten._to_copy.out: ("aten::_to_copy", to_copy),
        aten.copy_.default: ("aten::copy_", copy_inplace),
        aten.copy.default: ("aten::copy", copy_inplace),
        aten.copy.out: ("aten::copy", copy_out),
    }
    dtype_names: dict[Any, str] = {}
    device_names: dict[Any, str] = {}
    internal: dict[CodeType, bool] = {}
    sites: dict[tuple[CodeType, int], tuple[str, int, str]] = {}

    def dtype_name(dtype: Any) -> str:
        name = dtype_names.get(dtype)
        if name is None:
            name = dtype_names[dtype] = str(dtype).removeprefix("torch.")
        return name

    def is_internal(code: CodeType) -> bool:
        # PERF: the frame walk is the recorder's main cost; the answer per code object never changes.
        flag = internal.get(code)
        if flag is None:
            filename = os.path.abspath(code.co_filename) if not code.co_filename.startswith("<") else code.co_filename
            flag = filename.startswith((torch_dir, _CASTFIND_DIR, "<frozen "))
            internal[code] = flag
        return flag

    def call_site(frame: FrameType | None) -> tuple[str, int, str]:
        while frame is not None and is_internal(frame.f_code):
            frame = frame.f_back
        if frame is None:
            return ("<unknown>", 0, "")
        code, line = frame.f_code, frame.f_lineno or 0
        site = sites.get((code, line))
        if site is None:
            filename = code.co_filename
            if not filename.startswith("<"):
                filename = os.path.abspath(filename)
            site = sites[(code, line)] = (filename, line, code.co_qualname)
        return site

    def endpoints(kind: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any, Any] | None:
        """(source tensor, destination dtype, destination numel) or None when nothing is cast."""
        if kind == to_copy:
            src = args[0]
            out = kwargs.get("out")
            dst_dtype = out.dtype if out is not None else kwargs.get("dtype")
            return (src, dst_dtype, src.numel()) if dst_dtype is not None else None
        dst, src = args[0], args[1]
        if kind == copy_out:
            dst = kwargs.get("out", dst)
        if not isinstance(src, torch.Tensor):
            return None
        return (src, dst.dtype, dst.numel())

    class CastRecorderMode(TorchDispatchMode):
        """Counts dtype-changing copies by call site; every op runs unchanged."""

        def __init__(self, recording: _Recording) -> None:
            super().__init__()
            self.recording = recording

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001 - torch's protocol
            kwargs = kwargs or {}
            spec = ops.get(func)
            if spec is not None:
                self._note(spec, args, kwargs)
            return func(*args, **kwargs)

        def _note(self, spec: tuple[str, str], args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            ends = endpoints(spec[1], args, kwargs)
            if ends is None:
                return
            src, dst_dtype, dst_numel = ends
            if src.dtype == dst_dtype:
                return
            shape = tuple(src.shape)
            if not all(type(d) is int for d in shape):
                return  # symbolic shapes (fake tensors under tracing) are not real traffic
            device = device_names.get(src.device)
            if device is None:
                device = device_names[src.device] = str(src.device)
                self.recording.devices.add(device)
            nbytes = src.numel() * src.dtype.itemsize + int(dst_numel) * dst_dtype.itemsize
            path, line, function = call_site(sys._getframe(2))
            key = (path, line, function, spec[0], dtype_name(src.dtype), dtype_name(dst_dtype), shape, device)
            self.recording.add(key, nbytes)

    return CastRecorderMode
