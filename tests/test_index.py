"""Index: discovery limits, the worker pool surviving a crash, workers dying with their parent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from castfind.discover import discover
from castfind.index import Index
from castfind.workers import extract_in_pool, extract_job
from tests.support import REPO


def crash_on_boom(job: tuple[str, str, str, bool]) -> tuple:
    """A worker job that dies like a segfaulting parser on files named boom.py."""
    if job[0].endswith("boom.py"):
        os.abort()
    return extract_job(job)


def test_a_worker_crash_becomes_a_diagnostic_and_the_other_files_are_extracted(tmp_path: Path) -> None:
    for i in range(30):
        (tmp_path / f"m{i}.py").write_text(f"def f{i}(kv):\n    return kv.float()\n")
    (tmp_path / "boom.py").write_text("x = 1\n")
    files = discover([str(tmp_path)])
    jobs = [(sf.abspath, sf.module, sf.path, sf.is_package) for sf in files]
    got = extract_in_pool(jobs, list(range(len(files))), 2, work=crash_on_boom)
    assert sorted(got) == list(range(len(files)))
    from castfind.cache import decode_facts

    facts = {sf.path: got[i][0] for i, sf in enumerate(files)}
    assert all(decode_facts(got[i][1]) == got[i][0] for i in got)
    assert facts["boom.py"].error_kind == "unsupported"
    assert all(len(f.casts) == 1 and f.error is None for p, f in facts.items() if p != "boom.py")


def test_files_over_the_size_limit_and_symlink_loops_are_skipped_with_a_diagnostic(tmp_path: Path) -> None:
    (tmp_path / "small.py").write_text("x = 1\n")
    (tmp_path / "big.py").write_text("x = 1\n" * 2000)
    os.symlink("b.py", tmp_path / "a.py")
    os.symlink("a.py", tmp_path / "b.py")
    index = Index.from_roots([str(tmp_path)], max_file_size=1000)
    assert [sf.path for sf in index.files] == ["small.py"]
    kinds = sorted((d.path, d.kind) for d in index.diagnostics)
    assert kinds == [("a.py", "read-error"), ("b.py", "read-error"), ("big.py", "too-large")]


def _children(pid: int) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = Path(f"/proc/{d}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(d))
    return out


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_workers_die_with_a_killed_scan(tmp_path: Path, sig: int) -> None:
    body = "".join(f"def f{j}(kv, w):\n    return kv.to(w.dtype) + g(h(j{j}))\n" for j in range(400))
    for i in range(120):
        (tmp_path / f"m{i}.py").write_text(body)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-m", "castfind", "scan", str(tmp_path), "--eager", "--no-cache", "-j", "2"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workers: list[int] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(workers) < 2:
        workers = [c for c in _children(proc.pid)]
        time.sleep(0.2)
    assert workers, "the scan started no worker processes"
    time.sleep(1.0)
    proc.send_signal(sig)
    proc.wait(timeout=30)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(Path(f"/proc/{w}").exists() for w in workers):
        time.sleep(0.2)
    alive = [w for w in workers if Path(f"/proc/{w}").exists()
             and Path(f"/proc/{w}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"]
    assert not alive
