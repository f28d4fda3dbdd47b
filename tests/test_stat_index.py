"""The stat index (``Index.key``): a warm run hashes only files whose stat changed; keys stay
content-addressed. Counts hashed files, never times."""

from __future__ import annotations

import os
import time
from pathlib import Path

from castfind.store.cache import Cache, content_key
from castfind.store.discover import discover
from castfind.store.index import Index


def _tree(tmp_path, n=5):
    root = tmp_path / "proj"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("")
    old = time.time() - 60  # older than the racy window: their stats may be recorded
    for i in range(n):
        p = root / "pkg" / f"m{i}.py"
        p.write_text(f"def f{i}(x):\n    return x\n")
        os.utime(p, (old, old))
    os.utime(root / "pkg" / "__init__.py", (old, old))
    return root


def _keys(root, cache_dir) -> tuple[Index, dict[str, str]]:
    cache = Cache(cache_dir)
    index = Index(discover([str(root)]), cache=cache)
    keys = {sf.path: index.key(sf) for sf in index.files}
    index.save_stats()
    cache.close()
    return index, keys


def test_a_warm_run_hashes_no_unchanged_file(tmp_path):
    root = _tree(tmp_path)
    cold, keys = _keys(root, tmp_path / "c")
    assert cold.hashed == len(keys) == 6
    warm, again = _keys(root, tmp_path / "c")
    assert warm.hashed == 0 and again == keys
    # The keys are the content keys, whichever way they were found.
    assert all(keys[sf.path] == content_key(Path(sf.abspath).read_bytes()) for sf in warm.files)


def test_an_edited_file_is_hashed_again(tmp_path):
    root = _tree(tmp_path)
    _, keys = _keys(root, tmp_path / "c")
    (root / "pkg" / "m1.py").write_text("def f1(x):\n    return x + 1\n")
    warm, again = _keys(root, tmp_path / "c")
    assert warm.hashed == 1
    assert again["pkg/m1.py"] != keys["pkg/m1.py"]
    assert {k: v for k, v in again.items() if k != "pkg/m1.py"} == {k: v for k, v in keys.items() if k != "pkg/m1.py"}


def test_same_size_and_restored_mtime_is_still_seen_through_ctime(tmp_path):
    """git's limitation is a change that keeps every field of the stat; setting mtime back does not
    set back ctime, so the edit is seen."""
    root = _tree(tmp_path)
    p = root / "pkg" / "m2.py"
    _, keys = _keys(root, tmp_path / "c")
    st = os.stat(p)
    time.sleep(0.01)
    p.write_text(p.read_text().replace("return x", "return y"))  # same size
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(p).st_size == st.st_size and os.stat(p).st_mtime_ns == st.st_mtime_ns
    warm, again = _keys(root, tmp_path / "c")
    assert warm.hashed == 1 and again["pkg/m2.py"] != keys["pkg/m2.py"]
    assert again["pkg/m2.py"] == content_key(p.read_bytes())


def test_a_racily_recent_file_is_not_recorded(tmp_path):
    root = _tree(tmp_path)
    (root / "pkg" / "m3.py").write_text("def f3(x):\n    return x\n")  # modified just now
    _keys(root, tmp_path / "c")
    warm, _ = _keys(root, tmp_path / "c")
    assert warm.hashed == 1  # m3 only: its stat was too fresh to trust


def test_a_damaged_stat_row_means_hashing_again(tmp_path):
    root = _tree(tmp_path)
    _keys(root, tmp_path / "c")
    cache = Cache(tmp_path / "c")
    cache._write("stats", [(str(root / "pkg" / "m0.py"), b"not:a:row")])
    cache.close()
    warm, keys = _keys(root, tmp_path / "c")
    assert warm.hashed == 1 and keys["pkg/m0.py"] == content_key((root / "pkg" / "m0.py").read_bytes())


def test_bytes_read_before_the_key_are_judged_by_their_stat_when_read(tmp_path):
    root = _tree(tmp_path)
    _keys(root, tmp_path / "c")
    cache = Cache(tmp_path / "c")
    index = Index(discover([str(root)]), cache=cache)
    for sf in index.files:
        index.data(sf)  # a text query reads every file first
    p = root / "pkg" / "m4.py"
    p.write_text("def f4(x):\n    return x * 2\n")  # changed after it was read: the read bytes count
    keys = {sf.path: index.key(sf) for sf in index.files}
    assert index.hashed == 0
    assert keys["pkg/m4.py"] == content_key(b"def f4(x):\n    return x\n")
    cache.close()
