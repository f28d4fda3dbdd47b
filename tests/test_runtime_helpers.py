"""Shared bits of the runtime tests: fixture paths and the line of the fixture's cast."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures" / "runtime"
DECODE_LOOP = FIXTURES / "decode_loop.py"
GPU_PROFILE = FIXTURES / "gpu_profile.json"
TOKENS, HEAD_DIM = 61, 8
SHAPE = (TOKENS, 1, HEAD_DIM)
BYTES_PER_CALL = TOKENS * HEAD_DIM * (1 + 2)  # float8_e4m3fn read + bfloat16 written


def cast_line() -> int:
    """The line of ``.to(q.dtype)`` in the decode loop fixture (found, not hard-coded)."""
    lines = DECODE_LOOP.read_text().splitlines()
    (number,) = [i for i, text in enumerate(lines, start=1) if ".to(q.dtype)" in text]
    return number
