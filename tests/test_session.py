"""Scans kept warm in one process (castfind.api.Session): what the next run takes over from the last one (the
bytes and facts of unchanged files, the identifier postings, the carried steps) gives the answers a fresh run
gives, after edits of several kinds."""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path

import pytest

from castfind import api
from castfind.api import Session, open_index
from castfind.store.words import Words, carry_postings
from tests.support import REPO

FIX = REPO / "fixtures" / "scan"


@pytest.fixture
def tree(tmp_path) -> Path:
    root = tmp_path / "scan"
    shutil.copytree(FIX, root)
    return root


def _py(root: Path) -> list[Path]:
    return sorted(root.rglob("*.py"))


def _later(path: Path, text: str) -> None:
    """Write ``text`` with an mtime the stat index cannot mistake for the old one."""
    path.write_text(text)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 3_000_000_000))


def _indexed(root: Path, cache: Path):
    index = open_index([str(root)], cache_dir=cache, jobs=1)
    index.read_all()
    return index


def test_carried_postings_answer_as_a_fresh_index_after_an_edit(tree, tmp_path):
    cache = tmp_path / "cache"
    first = _indexed(tree, cache)
    words = Words(first)
    words._postings()  # built, as a scan's call graph builds it
    first.save()
    edited = next(p for p in _py(tree) if "forward_decode" in p.read_text())
    old = edited.read_text()
    _later(edited, old + "\ndef brand_new_helper():\n    return 1\n")
    gone = "forward_decode"
    after = _indexed(tree, cache)
    assert after.adopt(first) == len(after.files) - 1  # every file but the edited one taken over
    carry_postings(after, first)
    fresh = _indexed(tree, tmp_path / "other")
    for name in ("brand_new_helper", gone, "return", "no_such_name_anywhere"):
        got = [sf.abspath for sf in Words(after).containing([name])]
        assert got == [sf.abspath for sf in Words(fresh).containing([name])], name
    assert [sf.abspath for sf in Words(after).containing(["brand_new_helper"])] == [str(edited)]
    # The edit that takes a name out of a file takes the file out of its postings.
    _later(edited, old.replace(gone, "renamed_" + gone))  # and brand_new_helper gone again
    again = _indexed(tree, cache)
    again.adopt(after)
    carry_postings(again, after)
    assert str(edited) not in [sf.abspath for sf in Words(again).containing(["brand_new_helper"])]
    assert str(edited) not in [sf.abspath for sf in Words(again).containing([gone])]
    assert [sf.abspath for sf in Words(again).containing([gone])] == \
        [sf.abspath for sf in Words(_indexed(tree, tmp_path / "third")).containing([gone])]


def test_adopted_facts_are_the_unchanged_files_and_an_edited_file_is_read_again(tree, tmp_path):
    cache = tmp_path / "cache"
    first = _indexed(tree, cache)
    first.load_files(first.files)
    first.save()
    edited = _py(tree)[-1]
    _later(edited, edited.read_text() + "\n\ndef added_later():\n    pass\n")
    after = _indexed(tree, cache)
    assert after.adopt(first) == len(after.files) - 1
    facts = after.facts_of(after.by_abspath[str(edited)])
    assert "added_later" in {d.name for d in facts.definitions}
    assert after.parsed == 1  # the edited file only; the others came from the last index


def test_a_session_scans_as_a_fresh_scan_after_edits(tree, tmp_path):
    session = Session()
    request = api.pipeline.ScanRequest(paths=(str(tree),), index=api.pipeline.IndexOptions(cache_dir=str(tmp_path / "c"), jobs=1))
    key = lambda run: sorted((f.rule, f.path, f.line, f.severity, f.hot_path, f.provenance)  # noqa: E731
                             for f in run.report.findings)
    first = session.scan(request)
    assert first.report.findings
    for path in _py(tree):
        text = path.read_text()
        if ".to(" in text:
            _later(path, text.replace(".to(", ".view(", 1))
            session.persist()
            got = session.scan(request)
            assert key(got) == key(api.scan([str(tree)], use_cache=False, jobs=1)), path.name
    assert key(got) != key(first)


def test_a_session_lookup_reuses_its_index_until_a_scan_or_the_freshness_window(tree, tmp_path, monkeypatch):
    session = Session()
    roots = [str(tree)]
    opened = []
    real = api.open_index
    name = "forward_decode"
    fresh = api.where(name, roots, use_cache=False).definitions
    assert fresh

    def counting(*args, **kw):
        opened.append(time.monotonic())
        return real(*args, **kw)

    monkeypatch.setattr(api, "open_index", counting)
    a = session.where(name, roots, cache_dir=str(tmp_path / "c"))
    b = session.where(name, roots, cache_dir=str(tmp_path / "c"))
    assert len(opened) == 1 and a.definitions == b.definitions
    assert b.stats["outcome"] == "carried"  # the stored answer, read back on the same index (installed packages too)
    assert a.definitions == fresh
    request = api.pipeline.ScanRequest(paths=(str(tree),), index=api.pipeline.IndexOptions(cache_dir=str(tmp_path / "c"), jobs=1))
    session.scan(request)
    session.where(name, roots, cache_dir=str(tmp_path / "c"))
    assert len(opened) == 2  # after a scan that read the files anew, a lookup discovers again
    session.scan(request)
    session.where(name, roots, cache_dir=str(tmp_path / "c"))
    assert len(opened) == 2  # a scan that found nothing changed keeps the lookup's index
    edited = next(p for p in _py(tree) if "forward_decode" in p.read_text())
    _later(edited, edited.read_text().replace("forward_decode", "forward_step"))
    session.scan(request)
    after = session.where(name, roots, cache_dir=str(tmp_path / "c"))
    assert len(opened) == 3 and after.definitions != fresh  # the edit is seen
    monkeypatch.setattr(Session, "WHERE_FRESH_S", 0.0)
    session.where(name, roots, cache_dir=str(tmp_path / "c"))
    assert len(opened) == 4


def test_a_reused_lookup_index_reads_back_an_answer_that_joined_an_installed_package(tree, tmp_path):
    session = Session()
    roots = [str(tree)]
    first = session.where("yaml.safe_load", roots, cache_dir=str(tmp_path / "c"))
    assert first.definitions and first.stats["outcome"] == "computed"  # yaml joined the index, installed
    again = session.where("yaml.safe_load", roots, cache_dir=str(tmp_path / "c"))
    assert again.stats["outcome"] == "carried" and again.definitions == first.definitions


class _Threads:
    """Runs each call in a thread of its own that stays alive until :meth:`close` (a thread that ended may pass its
    id on to the next, and SQLite's same-thread check compares ids), as ``asyncio.to_thread`` may hand each server
    request another worker."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.workers: list[threading.Thread] = []

    def run(self, fn):
        out: list = []
        ran = threading.Event()

        def body() -> None:
            try:
                out.append(fn())
            finally:
                ran.set()
            self.done.wait()

        self.workers.append(worker := threading.Thread(target=body))
        worker.start()
        ran.wait()
        assert out, "the call raised (its traceback is above)"
        return out[0]

    def close(self) -> None:
        self.done.set()
        for w in self.workers:
            w.join()


@pytest.fixture
def threads():
    pool = _Threads()
    yield pool
    pool.close()


def test_a_lookup_in_another_thread_reads_back_the_answer_the_last_one_stored(tree, tmp_path, threads):
    """The language server runs each definition request in a worker thread of its own choosing and keeps the
    lookup index (with its cache) between them: the second lookup, in another thread, reads back the answer the
    first stored, and the cache stays writable. (With the SQLite connection bound to the thread that opened it,
    the second lookup's read failed, the cache turned read-only and the answer was computed again.)"""
    session = Session()
    roots = [str(tree)]
    ask = lambda: session.where("forward_decode", roots, cache_dir=str(tmp_path / "c"))  # noqa: E731
    first = threads.run(ask)
    second = threads.run(ask)
    assert first.stats["outcome"] == "computed" and second.stats["outcome"] == "carried"
    assert second.definitions == first.definitions
    assert not any(d.kind == "cache" for d in second.diagnostics)
    kept = session._where
    assert kept is not None and kept[1].cache is not None
    assert not kept[1].cache.read_only and kept[1].cache.notices == []


def test_a_session_persists_from_another_thread_than_the_one_that_scanned(tree, tmp_path, threads):
    """The server scans in one worker thread and writes the carried results later, in whichever thread is free:
    the write lands (a fresh process's scan then replays every step) instead of failing as a read-only cache."""
    cache = str(tmp_path / "c")
    request = api.pipeline.ScanRequest(paths=(str(tree),), index=api.pipeline.IndexOptions(cache_dir=cache, jobs=1))
    session = Session()
    threads.run(lambda: session.scan(request))
    kept = session._unsaved
    assert kept is not None and kept[0].index.cache is not None
    threads.run(session.persist)
    assert not kept[0].index.cache.read_only and kept[0].index.cache.notices == []
    plan = api.pipeline.plan(request)  # a fresh plan of the same scan on the same tree: the whole outcome stored
    assert plan.carried is not None and plan.index.cache is not None
    plan.index.cache.close()


def test_a_lookup_on_a_cache_that_cannot_be_written_says_so(tree, tmp_path):
    """A cache that turned read-only stores no answer, so every lookup computes: the answer says why, as a scan's
    report does (a ``cache`` diagnostic), and the language server logs it."""
    session = Session()
    roots = [str(tree)]
    first = session.where("forward_decode", roots, cache_dir=str(tmp_path / "c"))
    assert not any(d.kind == "cache" for d in first.diagnostics)
    kept = session._where
    assert kept is not None and kept[1].cache is not None
    kept[1].cache._unwritable("disk full")  # what a failed write does
    again = session.where("forward_decode", roots, cache_dir=str(tmp_path / "c"))
    notes = [d for d in again.diagnostics if d.kind == "cache"]
    assert len(notes) == 1 and "cannot write to the cache (disk full)" in notes[0].message
    assert again.definitions == first.definitions


def _settled(root: Path) -> None:
    """Every file's mtime an hour back: no file is racily clean, so the stat index records them all."""
    for path in _py(root):
        st = path.stat()
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns - 3600 * 10**9))


def test_a_session_scan_before_any_persist_reads_only_the_changed_files(tree, tmp_path, monkeypatch):
    """The language server scans at each save and persists later: a scan between persists takes the keys of the
    files whose stat is the one the last scan hashed them at, so it reads only what changed since that scan."""
    _settled(tree)
    session = Session()
    request = api.pipeline.ScanRequest(paths=(str(tree),), index=api.pipeline.IndexOptions(cache_dir=str(tmp_path / "c"), jobs=1))
    session.scan(request)  # a cold cache: every file hashed; nothing persisted
    first = session.index
    assert first is not None and first.hashed == len(first.files)
    edited = next(p for p in _py(tree) if ".to(" in p.read_text())
    edited.write_text(edited.read_text().replace(".to(", ".view(", 1))
    st = edited.stat()
    os.utime(edited, ns=(st.st_atime_ns, st.st_mtime_ns - 60 * 10**9))
    from castfind.store.cache import Cache

    asked: list[str] = []
    real = Cache.get_many
    monkeypatch.setattr(Cache, "get_many", lambda self, keys: real(self, [asked.append(k) or k for k in keys]))
    got = session.scan(request)
    second = session.index
    assert second is not None and second.hashed == 1  # the edited file only
    # The unchanged files' facts are the last scan's, taken over; none is decoded from the cache again.
    assert set(asked) <= {second.key(second.by_abspath[str(edited)])}
    fresh = api.scan([str(tree)], use_cache=False, jobs=1)
    assert sorted((f.path, f.line, f.rule) for f in got.report.findings) == \
        sorted((f.path, f.line, f.rule) for f in fresh.report.findings)


def test_a_session_scan_before_any_persist_notices_a_removed_and_a_changed_file(tree, tmp_path):
    _settled(tree)
    session = Session()
    request = api.pipeline.ScanRequest(paths=(str(tree),), index=api.pipeline.IndexOptions(cache_dir=str(tmp_path / "c"), jobs=1))
    session.scan(request)
    files = [p for p in _py(tree) if ".to(" in p.read_text()]
    assert len(files) >= 2
    files[0].unlink()
    _later(files[1], files[1].read_text().replace(".to(", ".view(", 1))
    got = session.scan(request)
    fresh = api.scan([str(tree)], use_cache=False, jobs=1)
    assert sorted((f.path, f.line, f.rule) for f in got.report.findings) == \
        sorted((f.path, f.line, f.rule) for f in fresh.report.findings)
    assert session.index is not None and str(files[0]) not in session.index.by_abspath
