"""Index: discovery limits, the worker pool surviving a crash, workers dying with their parent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from castfind.store.discover import discover
from castfind.store.index import Index
from castfind.store.workers import extract_in_pool, extract_job
from tests.support import REPO


def crash_on_boom(job: tuple[bytes, str, str, bool]) -> tuple:
    """A worker job that dies like a segfaulting parser on files named boom.py."""
    if job[2].endswith("boom.py"):
        os.abort()
    return extract_job(job)


def _with_boom(tmp_path: Path, n: int) -> tuple[list, list[tuple[bytes, str, str, bool]]]:
    """``n`` files that each cast once, plus ``boom.py`` (see :func:`crash_on_boom`): the files and their jobs."""
    for i in range(n):
        (tmp_path / f"m{i}.py").write_text(f"def f{i}(kv):\n    return kv.float()\n")
    (tmp_path / "boom.py").write_text("x = 1\n")
    files = discover([str(tmp_path)])
    return files, [(Path(sf.abspath).read_bytes(), sf.module, sf.path, sf.is_package) for sf in files]


def test_a_worker_crash_becomes_a_diagnostic_and_the_other_files_are_extracted(tmp_path: Path) -> None:
    files, jobs = _with_boom(tmp_path, 30)
    got = extract_in_pool(jobs, list(range(len(files))), 2, work=crash_on_boom)
    assert sorted(got) == list(range(len(files)))
    from castfind.store.cache import decode_facts

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
    from castfind.store.workers import Workers

    files, jobs = _with_boom(tmp_path, 6)
    kept = Workers(2)
    try:
        got = extract_in_pool(jobs, list(range(len(files))), kept, work=crash_on_boom)
        assert {sf.path: got[i][0].error_kind for i, sf in enumerate(files)}["boom.py"] == "unsupported"
        assert all(got[i][0].error is None for i, sf in enumerate(files) if sf.path != "boom.py")
        ms = [j for j in jobs if not j[2].endswith("boom.py")]
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
    from castfind.store.index import NotLoaded
    from castfind.store.memo import Tracker

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


def _ahead_files(tmp_path: Path, n: int) -> list:
    tmp_path.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (tmp_path / f"m{i}.py").write_text(f"def f{i}(kv):\n" + "    x = 1\n" * (i * 40) + "    return kv.float()\n")
    return discover([str(tmp_path)])


def test_files_parsed_ahead_give_the_facts_a_batch_gives_and_a_batch_asked_meanwhile_runs_on_its_own(tmp_path: Path) -> None:
    files = _ahead_files(tmp_path / "a", 24)
    plain = Index(discover([str(tmp_path / "a")]), jobs=1)
    want = {sf.path: f for sf, f in zip(plain.files, plain.load_files(plain.files), strict=True)}
    shown: list[tuple[int, int]] = []
    index = Index(files, jobs=2, progress=lambda done, total: shown.append((done, total)))
    batches: list[int] = []
    real = index._extract

    def spy(misses: list) -> None:
        batches.append(len(misses))
        real(misses)

    index._extract = spy  # type: ignore[method-assign]
    with index.parsing():
        index.parse_ahead(files[:20])
        assert len(index._ahead) == 20
        # Asked for while the 20 are queued: the two files are parsed first, the queued ones started again.
        first = index.load_files(files[20:22])
        assert [len(f.casts) for f in first] == [1, 1]
        assert set(index._ahead) <= {sf.abspath for sf in files[:20]}
        got = index.load_files(files)
    assert {sf.path: f for sf, f in zip(files, got, strict=True)} == want
    assert index.parsed == 24 and batches == [2, 22]
    assert index._ahead == {}
    # The progress bar counts the files parsed ahead as they finish, up to a full bar.
    assert shown[-1][0] == shown[-1][1] and sum(d == t for d, t in shown) >= 2


def test_a_crash_in_a_file_parsed_ahead_becomes_a_diagnostic_and_the_rest_are_parsed(tmp_path: Path) -> None:
    files, _ = _with_boom(tmp_path, 8)
    index = Index(files, jobs=2)
    with index.parsing():
        assert index._workers is not None
        index._workers.work = crash_on_boom
        index.parse_ahead(files)
        got = {sf.path: f for sf, f in zip(files, index.load_files(files), strict=True)}
    assert got["boom.py"].error_kind == "unsupported"
    assert all(len(f.casts) == 1 and f.error is None for p, f in got.items() if p != "boom.py")


def test_files_parsed_ahead_and_never_asked_for_do_not_hold_up_the_end_of_the_scan(tmp_path: Path) -> None:
    files = _ahead_files(tmp_path, 30)
    index = Index(files, jobs=2)
    with index.parsing():
        index.parse_ahead(files)
        workers = index._workers
    assert index._ahead == {} and workers is not None and workers._pool is None
    assert index.parsed == 0  # nothing was asked for, so nothing was stored


def test_parse_ahead_without_a_kept_pool_or_for_cached_files_starts_nothing(tmp_path: Path) -> None:
    from castfind.store.cache import Cache

    files = _ahead_files(tmp_path / "src", 3)
    index = Index(files, jobs=2)
    index.parse_ahead(files)  # outside Index.parsing: no pool is kept
    assert index._ahead == {}
    cache = Cache(tmp_path / "cache")
    Index(files, cache=cache, jobs=1).load_files(files[:2])
    warm = Index(files, cache=cache, jobs=2)
    with warm.parsing():
        warm.parse_ahead(files)
        assert [p for p in warm._ahead] == [files[2].abspath]  # the two in the cache are read from it
        warm.load_files(files)
    assert warm.parsed == 1
