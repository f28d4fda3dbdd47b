"""Carried results (castfind.store.memo): a warm scan replays, and always equals a fresh scan after edits."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from castfind.api import scan
from tests.support import REPO

FIX = REPO / "fixtures" / "scan"


def _key(run) -> list[tuple]:
    return sorted((f.rule, f.path, f.line, f.hot_path, f.provenance) for f in run.report.findings)


@pytest.fixture
def tree(tmp_path) -> Path:
    root = tmp_path / "scan"
    shutil.copytree(FIX, root)
    return root


def _both(root: Path, cache: Path) -> tuple[list, list, dict]:
    warm = scan([str(root)], cache_dir=cache, jobs=1)
    fresh = scan([str(root)], use_cache=False, jobs=1)
    return _key(warm), _key(fresh), warm.report.stats


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def test_unchanged_files_replay_everything_without_loading_facts(tree, tmp_path):
    cache = tmp_path / "cache"
    first, fresh, stats = _both(tree, cache)
    assert first == fresh and stats["replayed"] == 0
    again, _, stats = _both(tree, cache)
    assert again == first
    assert stats["loaded"] == 0 and stats["parsed"] == 0 and stats["outcome"] == "carried"


def test_without_the_carried_outcome_the_steps_replay(tree, tmp_path):
    import sqlite3

    cache = tmp_path / "cache"
    first, _, _ = _both(tree, cache)
    with sqlite3.connect(cache / "facts.sqlite3") as db:
        assert db.execute("DELETE FROM memo WHERE key LIKE '%-outcome'").rowcount == 1
    again, _, stats = _both(tree, cache)
    assert again == first and stats["outcome"] == "computed"
    assert stats["loaded"] == 0 and stats["parsed"] == 0 and stats["replayed"] > 0


def test_a_carried_outcome_names_the_roots_as_typed_now(tree, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    first = scan([str(tree)], cache_dir=cache, jobs=1)
    monkeypatch.chdir(tree)
    again = scan(["."], cache_dir=cache, jobs=1)
    assert again.report.stats["outcome"] == "carried"
    assert {f.root for f in again.report.findings} == {"."}
    assert [(f.path, f.line) for f in again.report.findings] == [(f.path, f.line) for f in first.report.findings]


def test_edits_in_other_files_invalidate_what_depended_on_them(tree, tmp_path):
    cache = tmp_path / "cache"
    pkg = tree / "minisrv" / "minisrv"
    _both(tree, cache)

    # A new caller makes the cold export_all hot: its CF104 warning becomes a CF101 error.
    _edit(pkg / "backend.py", "        return self._project(out)\n",
          "        self.token_to_kv_pool.export_all()\n        return self._project(out)\n")
    warm, fresh, _ = _both(tree, cache)
    assert warm == fresh
    assert ("CF101", "minisrv/minisrv/pool.py", 20) in {(r, p, line) for r, p, line, *_ in warm}

    # The getter stops being a getter: the cast through it (backend.py:16) goes quiet.
    _edit(pkg / "pool.py", "return self.kv_buffer[layer_id - self.start_layer].view(-1)",
          "return self.scratch.view(-1)")
    warm, fresh, _ = _both(tree, cache)
    assert warm == fresh
    assert ("minisrv/minisrv/backend.py", 16) not in {(p, line) for _, p, line, *_ in warm}

    # A new module that calls _project from a forward: found through a file that did not exist.
    (pkg / "extra.py").write_text(
        "from minisrv.backend import DecodeBackend\n\n\nclass Layer:\n"
        "    def forward(self, b: DecodeBackend, x):\n        return b._project(x)\n"
        "\n    def warm(self, pool):\n        return pool.kv_buffer[0].float()\n")
    warm, fresh, _ = _both(tree, cache)
    assert warm == fresh
    assert ("CF104", "minisrv/minisrv/extra.py", 9) in {(r, p, line) for r, p, line, *_ in warm}

    # Removing it again brings the earlier result back.
    (pkg / "extra.py").unlink()
    warm, fresh, _ = _both(tree, cache)
    assert warm == fresh


def test_a_damaged_memo_is_ignored(tree, tmp_path):
    import sqlite3

    cache = tmp_path / "cache"
    first, _, _ = _both(tree, cache)
    with sqlite3.connect(cache / "facts.sqlite3") as db:
        db.execute("UPDATE memo SET data = x'00ff00'")
    again, fresh, stats = _both(tree, cache)
    assert again == fresh == first and stats["replayed"] == 0


def test_only_run_keeps_the_rest_of_the_memo(tree, tmp_path):
    cache = tmp_path / "cache"
    _both(tree, cache)
    backend = tree / "minisrv" / "minisrv" / "backend.py"
    only = scan([str(backend)], roots=[str(tree)], only=True, cache_dir=cache, jobs=1)
    assert {f.path for f in only.report.findings} == {"minisrv/minisrv/backend.py"}
    # The --only run carried every other step forward: a full warm scan still loads nothing.
    _, _, stats = _both(tree, cache)
    assert stats["loaded"] == 0


def test_parse_errors_are_still_reported_when_results_are_replayed(tree, tmp_path):
    cache = tmp_path / "cache"
    broken = tree / "minisrv" / "minisrv" / "broken.py"
    broken.write_text("class Pool:\n    def f(self):\n        return self.kv_buffer.to(torch.float32\n")
    first = scan([str(tree)], cache_dir=cache, jobs=1)
    again = scan([str(tree)], cache_dir=cache, jobs=1)
    assert again.report.stats["loaded"] == 0
    diag = lambda run: sorted((d.path, d.line, d.kind) for d in run.report.diagnostics)  # noqa: E731
    assert diag(again) == diag(first)
    assert any(p.endswith("broken.py") and k == "parse-error" for p, _, k in diag(first))


def test_tree_digest_is_computed_once_per_set_of_files_and_follows_added_files(tree, tmp_path):
    """The digest is reused while the index holds the same files (PERF), and changes when one is added."""
    from castfind.pipeline import open_index
    from castfind.store import memo
    from castfind.store.discover import SourceFile

    extra = tmp_path / "site" / "extra.py"
    extra.parent.mkdir()
    extra.write_text("X = 1\n")
    index = open_index([str(tree)], use_cache=False, jobs=1)
    first = memo.tree_digest(index)
    assert memo.tree_digest(index) == first
    index.add_files([SourceFile(str(extra.parent), "extra.py", str(extra), "extra", False)])
    assert memo.tree_digest(index) != first
    assert memo.tree_digest(open_index([str(tree)], use_cache=False, jobs=1)) == first


def test_dependency_sets_are_stored_once_and_read_back_equal():
    from castfind.store.memo import Tracker, _pack_steps, _unpack_steps

    a = frozenset({"/r/a.py", "/r/b.py", "q:('x',)"})
    b = frozenset({"/r/b.py"})
    steps = {("s", 1): ("v1", a), ("s", 2): ("v2", frozenset(a)), ("s", 3): (["v3"], b)}
    packed, table, names = _pack_steps(steps)
    assert len(table) == 2 and sorted(names) == sorted(a)  # two distinct sets, three names
    assert packed[("s", 1)][1] == packed[("s", 2)][1] != packed[("s", 3)][1]
    back = _unpack_steps({"steps": packed, "depsets": table, "depnames": names}, Tracker())
    assert back == steps
    assert back[("s", 1)][1] is back[("s", 2)][1]  # one shared set in memory too


def test_a_memo_with_a_damaged_dependency_table_means_computing_everything(tmp_path):
    from castfind.store.discover import discover
    from castfind.store.index import Index
    from castfind.store.memo import MEMO_VERSION, Memo

    (tmp_path / "m.py").write_text("x = 1\n")
    index = Index(discover([str(tmp_path)]), jobs=1)
    doc = {"version": MEMO_VERSION, "keys": {}, "modules": {}, "queries": {}, "diagnostics": {},
           "steps": {("s",): ("v", 7)}, "depsets": [(0,)], "depnames": ["x"]}
    memo = Memo(index, doc)  # set 7 does not exist
    assert memo.prev_steps == {} and memo.step(("s",), lambda: "fresh") == "fresh"
