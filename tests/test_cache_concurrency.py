"""Several castfind processes share one cold cache (pre-commit runs hooks in parallel batches)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time

from castfind.store.cache import Cache
from tests.support import REPO

FIX = REPO / "fixtures" / "scan"


def test_four_concurrent_scans_over_one_cold_cache(tmp_path):
    cache = tmp_path / "cache"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    cmd = [sys.executable, "-m", "castfind", "scan", str(FIX), "--cache-dir", str(cache), "--json", "-j", "1"]
    procs = [subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(4)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [1, 1, 1, 1], [o[1] for o in outs]
    results = [json.loads(o[0])["findings"] for o in outs]
    assert all(r == results[0] for r in results) and results[0]
    conn = sqlite3.connect(cache / "facts.sqlite3")
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    # backend.py and pool.py are parsed (the demand-driven scan never needs __init__.py).
    assert conn.execute("SELECT count(*) FROM facts").fetchone()[0] == 2


def test_corrupt_cache_is_rebuilt_and_reported_once(tmp_path):
    d = tmp_path / "cache"
    d.mkdir()
    (d / "facts.sqlite3").write_bytes(b"this is not a database" * 100)
    c = Cache(d)
    assert len(c.notices) == 1 and "corrupt" in c.notices[0]
    c.put_many({"k": {"x": 1}})
    assert c.get_many(["k"]) == {"k": {"x": 1}}
    c.close()
    assert Cache(d).notices == []


A = "def f(kv):\n    return kv.float()\n"
B = "def f(kv):\n    return kv.half()  # edited while the scan ran\n"


def _rows_match_their_keys(cache: Cache, paths: list) -> None:
    """Every facts row holds the facts of the bytes its key names (the extract of those very bytes)."""
    from castfind.read.extract import extract_source
    from castfind.store.cache import content_key, decode_facts

    conn = sqlite3.connect(cache.path)
    rows = dict(conn.execute("SELECT key, data FROM facts"))
    for text in (A, B):
        key = content_key(text.encode())
        if key in rows:
            want = extract_source(text.encode(), "", "", False)
            got = decode_facts(rows[key])
            assert [c.method for c in got.casts] == [c.method for c in want.casts], text


def test_a_file_edited_between_the_read_and_the_workers_parse_caches_the_bytes_read(tmp_path, monkeypatch):
    """The main process reads and keys the bytes; the worker extracts those bytes, not the file as it is now."""
    from castfind.store.index import Index

    for i in range(3):
        (tmp_path / f"m{i}.py").write_text(A)
    cache = Cache(tmp_path / "cache")
    index = Index.from_roots([str(tmp_path)], cache=cache, jobs=2)
    keys = [index.key(sf) for sf in index.files]  # read and hashed: content A
    for sf in index.files:
        open(sf.abspath, "w").write(B)  # noqa: SIM115 -- edited after the read, before the parse
    with index.parsing():
        facts = index.load_files(index.files)
    assert [c.method for f in facts for c in f.casts] == ["float"] * 3  # the bytes read
    from castfind.store.cache import content_key

    assert set(keys) == {content_key(A.encode())}
    _rows_match_their_keys(cache, [])


def test_a_file_edited_after_its_stat_was_trusted_caches_under_its_own_bytes(tmp_path):
    """The stat index names a key without reading; an edit between discovery and the read must not store
    the new bytes' facts under the old key, and the run stores no carried result."""
    from castfind.store.cache import content_digest
    from castfind.store.index import Index, _stat_of

    path = tmp_path / "m.py"
    path.write_text(A)
    os.utime(path, ns=(1, 1))  # long ago: not racy for the stat index
    cache = Cache(tmp_path / "cache")
    cache.put_stats({str(path): (_stat_of(os.stat(path)), content_digest(A.encode()))})
    index = Index.from_roots([str(tmp_path)], cache=cache)
    path.write_text(B)  # after discovery's stat, before the bytes are read
    (sf,) = index.files
    facts = index.load_files([sf])[0]
    assert [c.method for c in facts.casts] == ["half"]  # what was read is what was analysed
    assert index.raced == {sf.abspath}
    _rows_match_their_keys(cache, [])


def test_two_rebuilds_in_one_second_keep_both_backups(tmp_path):
    d = tmp_path / "cache"
    d.mkdir()
    for n in range(2):
        (d / "facts.sqlite3").write_bytes(b"not a database, take %d " % n * 100)
        c = Cache(d)
        assert "corrupt" in c.notices[0]
        c.close()
    backups = sorted(p.read_bytes()[:26] for p in d.glob("facts.sqlite3.corrupt-*") if not p.name.endswith(("wal", "shm")))
    assert backups == [b"not a database, take 0 not", b"not a database, take 1 not"]


def _mounted_tmpfs(folder, size: str) -> bool:
    if os.geteuid() != 0 or not sys.platform.startswith("linux"):
        return False
    folder.mkdir()
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                          capture_output=True).returncode == 0


def test_a_full_disk_keeps_a_healthy_cache_and_says_so_once(tmp_path):
    """On a full disk the cache is neither called corrupt nor moved aside: it is read, not written, and the
    scan's findings are the same; once there is space again, the next run writes."""
    import shutil

    import pytest

    disk = tmp_path / "disk"
    if not _mounted_tmpfs(disk, "2m"):
        pytest.skip("needs root and tmpfs to make a full disk")
    try:
        cache = disk / "cache"
        env = dict(os.environ, PYTHONPATH=str(REPO))

        def scan(root):
            r = subprocess.run([sys.executable, "-m", "castfind", "scan", str(root), "--cache-dir", str(cache), "--json",
                                "-j", "1"], env=env, capture_output=True, text=True, timeout=300)
            return r.returncode, json.loads(r.stdout) if r.stdout.strip() else None, r.stderr

        code, first, err = scan(FIX)
        assert code == 1, err
        db = cache / "facts.sqlite3"
        healthy = db.read_bytes()
        other = tmp_path / "other"
        shutil.copytree(FIX, other)  # another tree: its stats and outcome would be written
        (other / "minisrv" / "minisrv" / "extra.py").write_text("def f(kv):\n    return kv.float()\n")
        filler = disk / "filler"
        with open(filler, "wb") as fh:  # fill the disk
            try:
                while True:
                    fh.write(b"\0" * 65536)
                    fh.flush()
            except OSError:
                pass
        for _ in range(2):
            code, doc, err = scan(other)
            assert code == 1 and doc is not None, err
            assert [f["path"] for f in doc["findings"]] == [f["path"] for f in first["findings"]]
            notes = [d for d in doc["diagnostics"] if d["kind"] == "cache"]
            assert len(notes) == 1 and "cannot write" in notes[0]["message"] and "corrupt" not in err, notes
        assert db.read_bytes()[:100] == healthy[:100] and db.stat().st_size >= len(healthy) > 0
        assert not list(cache.glob("*corrupt*"))
        filler.unlink()
        code, doc, err = scan(other)
        assert code == 1 and not [d for d in doc["diagnostics"] if d["kind"] == "cache"], err
        code, doc, err = scan(other)
        assert doc["stats"]["outcome"] == "carried"  # written once there was space
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_a_cache_opened_in_one_thread_reads_and_writes_in_another(tmp_path):
    """One thread at a time, not always the opener (the language server's worker threads): no failure, no
    read-only cache, the rows written in one thread read back in another."""
    import threading

    box: list[Cache] = []
    done = threading.Event()
    opener = threading.Thread(target=lambda: (box.append(Cache(tmp_path / "c")), done.wait()))  # alive: its id not reused
    opener.start()
    while not box:
        time.sleep(0.01)
    cache = box[0]
    cache.put_memo("k", b"one")
    got: list = []
    other = threading.Thread(target=lambda: (cache.put_memo("j", b"two"), got.append(cache.get_memo("k"))))
    other.start()
    other.join()
    done.set()
    opener.join()
    assert got == [b"one"] and cache.get_memo("j") == b"two"
    assert not cache.read_only and cache.notices == []
