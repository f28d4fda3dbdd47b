"""The tree index (``Index.from_roots`` with a cache): folder listings reused while a folder's stat is
unchanged, discovery's stat of each file compared by the stat index. Whatever changed, the files and
keys found are exactly those of a fresh walk that hashes every file."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from castfind.store import discover as disc
from castfind.store.cache import Cache, content_key
from castfind.store.index import Index

EXCLUDE = ("*_skip.py", "pkg/excluded/*")


def _make(root: Path) -> None:
    for d in ("pkg/sub", "pkg/excluded", "pkg/build", "tools", "env/lib"):
        (root / d).mkdir(parents=True, exist_ok=True)
    files = {"pkg/__init__.py": "", "pkg/a.py": "A = 1\n", "pkg/b_skip.py": "B = 2\n", "pkg/sub/__init__.py": "",
             "pkg/sub/c.py": "def c():\n    return 3\n", "pkg/excluded/d.py": "D = 4\n", "pkg/build/e.py": "E = 5\n",
             "tools/run.py": "print(1)\n", "tools/notes.txt": "not python\n", "env/pyvenv.cfg": "",
             "env/lib/v.py": "V = 6\n", "pkg/big.py": "X = 1\n" * 200}
    for rel, text in files.items():
        (root / rel).write_text(text)
    os.symlink(root / "pkg" / "a.py", root / "tools" / "link.py")
    os.symlink(root / "nowhere.py", root / "tools" / "dangling.py")


def _fresh(root: Path) -> tuple[list, dict[str, str], list]:
    notes: list = []
    files = disc.discover([str(root)], EXCLUDE, max_size=1000, skipped=notes)
    return files, {sf.path: content_key(Path(sf.abspath).read_bytes()) for sf in files}, notes


def _cached(root: Path, cache_dir: Path) -> tuple[list, dict[str, str], list]:
    cache = Cache(cache_dir)
    index = Index.from_roots([str(root)], EXCLUDE, max_file_size=1000, cache=cache)
    keys = {sf.path: index.key(sf) for sf in index.files}
    index.save()
    cache.close()
    return index.files, keys, index.diagnostics


CHANGES = {
    "add a file": lambda r: (r / "pkg" / "new.py").write_text("N = 1\n"),
    "remove a file": lambda r: (r / "pkg" / "a.py").unlink(),
    "rename a file": lambda r: (r / "pkg" / "a.py").rename(r / "pkg" / "a2.py"),
    "add a folder": lambda r: ((r / "pkg" / "more").mkdir(), (r / "pkg" / "more" / "m.py").write_text("M = 1\n")),
    "rename a folder": lambda r: (r / "pkg" / "sub").rename(r / "pkg" / "sub2"),
    "remove a folder": lambda r: shutil.rmtree(r / "pkg" / "sub"),
    "a folder becomes a venv": lambda r: (r / "tools" / "pyvenv.cfg").write_text(""),
    "a package loses its __init__": lambda r: (r / "pkg" / "sub" / "__init__.py").unlink(),
    "a file grows over the size limit": lambda r: (r / "pkg" / "a.py").write_text("A = 1\n" * 300),
    "a symlink's target appears": lambda r: (r / "nowhere.py").write_text("W = 1\n"),
    "edit in place, same size": lambda r: (r / "pkg" / "sub" / "c.py").write_text("def c():\n    return 4\n"),
    "add a file, folder mtime set back": lambda r: _set_back(r / "pkg", lambda: (r / "pkg" / "z.py").write_text("")),
    "edit in place, same size, mtime set back": lambda r: _set_back(
        r / "pkg" / "sub" / "c.py", lambda: (r / "pkg" / "sub" / "c.py").write_text("def c():\n    return 5\n")),
}


def _set_back(path: Path, change) -> None:
    st = os.stat(path)
    change()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_reused_listing_finds_what_a_fresh_walk_finds(tmp_path: Path, monkeypatch, change: str) -> None:
    monkeypatch.setattr(disc, "RACY_NS", 50_000_000)  # listings older than 50 ms are kept (2 s by default)
    root, cache_dir = tmp_path / "root", tmp_path / "cache"
    root.mkdir()
    _make(root)
    time.sleep(0.1)
    assert _cached(root, cache_dir) == _fresh(root)  # listed, and the listings kept
    listed: list[str] = []
    real = disc._list
    monkeypatch.setattr(disc, "_list", lambda folder: listed.append(folder) or real(folder))
    fresh = _fresh(root)
    listed.clear()
    assert _cached(root, cache_dir) == fresh and listed == []  # every listing reused
    CHANGES[change](root)
    fresh = _fresh(root)
    listed.clear()
    assert _cached(root, cache_dir) == fresh  # at once: the change is seen
    assert listed or change.startswith(("edit", "a file grows", "a symlink"))  # (no folder changed for those)
    time.sleep(0.1)
    assert _cached(root, cache_dir) == _fresh(root)
    assert _cached(root, cache_dir) == _fresh(root)


def test_a_damaged_tree_index_means_a_fresh_walk(tmp_path: Path) -> None:
    root, cache_dir = tmp_path / "root", tmp_path / "cache"
    root.mkdir()
    _make(root)
    assert _cached(root, cache_dir) == _fresh(root)
    cache = Cache(cache_dir)
    cache.put_tree(str(root.resolve()), {"dirs": {"": "not a listing"}, "files": []})
    cache.close()
    assert _cached(root, cache_dir) == _fresh(root)


def test_an_edited_file_is_hashed_once_then_known(tmp_path: Path, monkeypatch) -> None:
    import castfind.store.index as idx

    monkeypatch.setattr(disc, "RACY_NS", 50_000_000)
    monkeypatch.setattr(idx, "_RACY_NS", 50_000_000)
    root, cache_dir = tmp_path / "root", tmp_path / "cache"
    root.mkdir()
    _make(root)
    time.sleep(0.1)

    def hashed() -> int:
        cache = Cache(cache_dir)
        index = Index.from_roots([str(root)], EXCLUDE, max_file_size=1000, cache=cache)
        assert {sf.path: index.key(sf) for sf in index.files} == _fresh(root)[1]
        index.save()
        cache.close()
        return index.hashed

    assert hashed() > 0 and hashed() == 0
    (root / "pkg" / "sub" / "c.py").write_text("def c():\n    return 9\n")
    time.sleep(0.1)
    assert hashed() == 1 and hashed() == 0  # the new digest went into the tree index


def _digest(root: Path, cache_dir: Path, exclude: tuple[str, ...] = EXCLUDE) -> tuple[str, str | None]:
    """(the tree digest, the one the tree indexes held) after one run that saves its tree indexes."""
    from castfind.store import memo

    cache = Cache(cache_dir)
    try:
        index = Index.from_roots([str(root)], exclude=exclude, max_file_size=1000, cache=cache)
        stored = index.stored_tree_digest()
        got = memo.tree_digest(index)
        index.save()
    finally:
        cache.close()
    return got, stored


def test_the_stored_tree_digest_is_used_only_for_the_very_tree_it_was_computed_on(tmp_path: Path) -> None:
    root, cache_dir = tmp_path / "src", tmp_path / "cache"
    _make(root)
    old = time.time() - 60  # older than the racy window, so every file's stat is recorded
    for p in root.rglob("*"):
        os.utime(p, (old, old), follow_symlinks=False)
    first, stored = _digest(root, cache_dir)
    assert stored is None  # nothing stored yet
    again, stored = _digest(root, cache_dir)
    assert stored == again == first  # the same tree: the stored digest is the computed one
    assert _digest(root, cache_dir, exclude=("*_skip.py",))[1] is None  # another file set
    fewer, _ = _digest(root, cache_dir)
    assert fewer == first
    (root / "pkg" / "a.py").write_text("A = 2\n")  # a changed file: computed again, and different
    changed, stored = _digest(root, cache_dir)
    assert stored is None and changed != first


def test_a_run_that_knows_no_more_than_the_stored_tree_index_writes_none(tmp_path: Path, monkeypatch) -> None:
    """A lookup hashes only the files it reads, so the tree index stores the digests of those few; the next run
    reuses every listing and learns no digest: writing the same tree index again would be its only write."""
    from castfind.store import index as index_module

    monkeypatch.setattr(disc, "RACY_NS", 50_000_000)
    monkeypatch.setattr(index_module, "_RACY_NS", 50_000_000)  # digests of files older than 50 ms are kept
    root, cache_dir = tmp_path / "root", tmp_path / "cache"
    root.mkdir()
    _make(root)
    time.sleep(0.1)
    first = Index.from_roots([str(root)], EXCLUDE, max_file_size=1000, cache=Cache(cache_dir))
    first.key(first.file_for_path(str(root / "pkg" / "a.py")))  # one file hashed, as a lookup that read it
    first.save()
    writes: list[str] = []
    real = Cache.put_tree
    monkeypatch.setattr(Cache, "put_tree", lambda self, base, doc: writes.append(base) or real(self, base, doc))
    again = Index.from_roots([str(root)], EXCLUDE, max_file_size=1000, cache=Cache(cache_dir))
    assert not again.unchanged()  # most files have no stored digest
    again.save()
    assert writes == []
    again = Index.from_roots([str(root)], EXCLUDE, max_file_size=1000, cache=Cache(cache_dir))
    again.key(again.file_for_path(str(root / "pkg" / "sub" / "c.py")))  # a digest learned: stored
    again.save()
    assert writes == [str(root.resolve())]
    (root / "tools" / "new.py").write_text("")  # a folder listed afresh: stored
    time.sleep(0.1)
    writes.clear()
    Index.from_roots([str(root)], EXCLUDE, max_file_size=1000, cache=Cache(cache_dir)).save()
    assert writes == [str(root.resolve())]
