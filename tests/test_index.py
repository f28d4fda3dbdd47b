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


def _with_boom(tmp_path: Path, n: int) -> tuple[list, list[tuple[str, str, str, bool]]]:
    """``n`` files that each cast once, plus ``boom.py`` (see :func:`crash_on_boom`): the files and their jobs."""
    for i in range(n):
        (tmp_path / f"m{i}.py").write_text(f"def f{i}(kv):\n    return kv.float()\n")
    (tmp_path / "boom.py").write_text("x = 1\n")
    files = discover([str(tmp_path)])
    return files, [(sf.abspath, sf.module, sf.path, sf.is_package) for sf in files]


def test_a_worker_crash_becomes_a_diagnostic_and_the_other_files_are_extracted(tmp_path: Path) -> None:
    files, jobs = _with_boom(tmp_path, 30)
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


def test_a_kept_pool_survives_a_crash_and_serves_the_next_batch(tmp_path: Path) -> None:
    from castfind.workers import Workers

    files, jobs = _with_boom(tmp_path, 6)
    kept = Workers(2)
    try:
        got = extract_in_pool(jobs, list(range(len(files))), kept, work=crash_on_boom)
        assert {sf.path: got[i][0].error_kind for i, sf in enumerate(files)}["boom.py"] == "unsupported"
        assert all(got[i][0].error is None for i, sf in enumerate(files) if sf.path != "boom.py")
        ms = [j for j in jobs if not j[0].endswith("boom.py")]
        again = extract_in_pool(ms[:2], [0, 1], kept)  # the broken pool was replaced
        assert [len(again[i][0].casts) for i in (0, 1)] == [1, 1]
        pool = kept.pool()
        extract_in_pool(ms[2:4], [0, 1], kept)
        assert kept.pool() is pool  # one pool for every batch that does not crash
    finally:
        kept.close()


def _chain(tmp_path: Path, n: int) -> Index:
    """``n`` modules ``a{i}`` whose text names the module ``b{i}`` to read next (read one after the other)."""
    for i in range(n):
        (tmp_path / f"a{i}.py").write_text(f"NEXT = 'b{i}'\n")
        (tmp_path / f"b{i}.py").write_text(f"def g{i}():\n    return {i}\n")
    return Index.from_roots([str(tmp_path)])


def _follow(index: Index, i: int) -> str:
    by = {sf.module: sf for sf in index.files}
    first = index.facts_of(by[f"a{i}"])
    nxt = first.assigns[0].value.text.strip("'")  # the string literal: which file to read next
    return index.facts_of(by[nxt]).definitions[0].name


def test_in_batches_parses_what_stopped_items_ask_for_together(tmp_path: Path) -> None:
    index = _chain(tmp_path, 5)
    batches: list[int] = []
    real = index._extract
    index._extract = lambda misses: (batches.append(len(misses)), real(misses))[1]  # type: ignore[method-assign]
    got = index.in_batches(list(range(5)), lambda i: _follow(index, i))
    assert got == [f"g{i}" for i in range(5)]
    assert batches == [5, 5]  # every a{i}, then every b{i}: not ten batches of one


def test_in_batches_gives_what_one_at_a_time_gives(tmp_path: Path) -> None:
    (tmp_path / "one").mkdir()
    (tmp_path / "batched").mkdir()
    index = _chain(tmp_path / "one", 4)
    plain = [_follow(index, i) for i in range(4)]
    again = _chain(tmp_path / "batched", 4)
    assert again.in_batches(list(range(4)), lambda i: _follow(again, i)) == plain


def test_a_stopped_computation_leaves_no_pending_value_behind(tmp_path: Path) -> None:
    from castfind.index import NotLoaded
    from castfind.memo import Tracker

    tracker = Tracker()
    calls = []

    def compute() -> int:
        calls.append(1)
        if len(calls) == 1:
            raise NotLoaded
        return 7

    with pytest.raises(NotLoaded):
        tracker.cached(("k",), compute, 0)
    assert tracker.cached(("k",), compute, 0) == 7  # computed again, not the pending 0
    assert len(calls) == 2


def test_a_batch_inside_a_batch_hands_its_files_to_the_outer_one(tmp_path: Path) -> None:
    index = _chain(tmp_path, 3)
    batches: list[int] = []
    real = index._extract
    index._extract = lambda misses: (batches.append(len(misses)), real(misses))[1]  # type: ignore[method-assign]
    got = index.in_batches([0, 1], lambda i: index.in_batches([i, 2], lambda j: _follow(index, j)))
    assert got == [["g0", "g2"], ["g1", "g2"]]
    assert batches == [3, 3]
