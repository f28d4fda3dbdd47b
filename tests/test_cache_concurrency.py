"""Several castfind processes share one cold cache (pre-commit runs hooks in parallel batches)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys

from castfind.cache import Cache
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
