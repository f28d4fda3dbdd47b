"""``castfind record`` and the programs it runs: casts made in other threads are recorded, and a program
that closes or replaces ``sys.stdout`` keeps its own exit code."""

from __future__ import annotations

from pathlib import Path

import pytest

from castfind.runtime.trace import read_trace
from tests.support import run_castfind

pytest.importorskip("torch")

THREADED = """\
import threading
import torch

x = torch.zeros(4, 4, dtype=torch.float16)


def work():
    for _ in range(100):
        x.float()  # THREAD


t = threading.Thread(target=work)
t.start()
t.join()


class Worker(threading.Thread):
    def run(self):
        for _ in range(7):
            x.double()  # SUBCLASS


w = Worker()
w.start()
w.join()
x.int()  # MAIN
"""


def _line(src: str, mark: str) -> int:
    return next(i for i, text in enumerate(src.splitlines(), 1) if f"# {mark}" in text)


def test_casts_made_in_other_threads_are_recorded(tmp_path: Path) -> None:
    prog = tmp_path / "prog.py"
    prog.write_text(THREADED)
    out = tmp_path / "t.castfind.jsonl"
    r = run_castfind("record", "-o", str(out), "--", "python", str(prog))
    assert r.returncode == 0, r.stderr
    _, sites = read_trace(out)
    calls = {s.line: s.calls for s in sites if s.path == str(prog)}
    assert calls == {_line(THREADED, "THREAD"): 100, _line(THREADED, "SUBCLASS"): 7, _line(THREADED, "MAIN"): 1}


@pytest.mark.parametrize("body,code", [("sys.stdout.close()", 0), ("sys.stdout.close()\nsys.exit(3)", 3),
                                       ("sys.stdout = None", 0), ("sys.stdout = open(os.devnull, 'w')\nsys.exit(5)", 5),
                                       ("os.close(1)\nsys.exit(4)", 4)])
def test_a_program_that_closes_or_replaces_stdout_keeps_its_exit_code(tmp_path: Path, body: str, code: int) -> None:
    prog = tmp_path / "prog.py"
    prog.write_text(f"import os, sys\nprint('hi')\n{body}\n")
    out = tmp_path / "t.castfind.jsonl"
    r = run_castfind("record", "-o", str(out), "--", str(prog))
    assert r.returncode == code, r.stderr
    assert "Traceback" not in r.stderr and out.exists()
