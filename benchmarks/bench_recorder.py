"""Measure the cast recorder's overhead on the decode-loop fixture.

Prints the median wall time of the loop with and without ``castfind.record`` and their
ratio. Each run is in-process and alternates with/without so drift hits both alike.

Usage: python benchmarks/bench_recorder.py [--layers 32] [--steps 200] [--runs 7] [--tokens 64]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "fixtures", "runtime"))

import decode_loop  # noqa: E402  (fixtures/runtime is put on sys.path above)

import castfind  # noqa: E402


def _noop_mode() -> contextlib.AbstractContextManager[object]:
    """A dispatch mode that does nothing: the floor any TorchDispatchMode-based recorder pays."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Noop(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001 - torch's protocol
            return func(*args, **(kwargs or {}))

    return Noop()


def _once(argv: list[str], trace: str | None, noop: bool = False) -> float:
    quiet = io.StringIO()
    recording = castfind.record(trace) if trace else _noop_mode() if noop else contextlib.nullcontext()
    start = time.perf_counter()
    with recording, contextlib.redirect_stdout(quiet):
        decode_loop.main(argv)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    argv = ["--layers", str(args.layers), "--steps", str(args.steps), "--tokens", str(args.tokens)]
    _once(argv, None)  # warm-up: imports, allocator, first-call costs
    plain, recorded, floor = [], [], []
    with tempfile.TemporaryDirectory() as folder:
        trace = os.path.join(folder, "bench.jsonl")
        for _ in range(args.runs):
            plain.append(_once(argv, None))
            recorded.append(_once(argv, trace))
            floor.append(_once(argv, None, noop=True))
    without, with_, noop = statistics.median(plain), statistics.median(recorded), statistics.median(floor)
    casts = args.layers * args.steps
    print(f"decode loop: {args.layers} layers x {args.steps} steps = {casts} casts, {args.runs} runs each")
    print(f"without recorder: {without * 1e3:8.1f} ms (median)")
    print(f"with recorder:    {with_ * 1e3:8.1f} ms (median)")
    print(f"no-op dispatch:   {noop * 1e3:8.1f} ms (median; the cost of any TorchDispatchMode)")
    print(f"overhead ratio:   {with_ / without:8.2f}x  ({(with_ - without) / casts * 1e6:.1f} us per recorded cast)")
    print(f"vs no-op mode:    {with_ / noop:8.2f}x  (the recorder's own work)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
