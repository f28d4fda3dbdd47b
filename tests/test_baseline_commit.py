"""--baseline-commit REF (alias --diff): only findings new relative to the tree at REF, read from git objects."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from castfind import cli

runner = CliRunner()

OLD = """\
class Backend:
    def forward_decode(self, q, layer):
        k = self.token_to_kv_pool.get_key_buffer(layer.layer_id).to(q.dtype)
        return k
"""
# The commit under review adds a second whole-buffer cast on the decode path.
NEW = OLD.replace("        return k\n", "        v = self.token_to_kv_pool.get_value_buffer(layer.layer_id).to(q.dtype)\n"
                                     "        return k, v\n")
# An unrelated edit: lines above move every old finding down.
MOVED = '"""Backend, documented."""\n\nimport os\n\n\ndef unrelated():\n    return os.sep\n\n\n' + NEW


def git(repo: Path, *args: str) -> str:
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.com", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@example.com", GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1")
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env).stdout


def commit(repo: Path, text: str, message: str) -> None:
    (repo / "srv").mkdir(exist_ok=True)
    (repo / "srv" / "backend.py").write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "serving"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    commit(repo, OLD, "one cast")
    commit(repo, NEW, "a second cast")
    return repo


def scan(*args: str) -> tuple[int, dict, str]:
    r = runner.invoke(cli.app, ["scan", *args, "-j", "1", "--json"])
    return r.exit_code, json.loads(r.stdout) if r.stdout.strip() else {}, r.stderr


@pytest.mark.parametrize("cache", ["--no-cache", "--cache-dir"])
def test_only_the_cast_the_commit_adds(repo: Path, tmp_path: Path, cache: str) -> None:
    opts = [cache] if cache == "--no-cache" else [cache, str(tmp_path / "cache")]
    status, head = git(repo, "status", "--porcelain"), git(repo, "rev-parse", "HEAD")
    code, doc, _ = scan(str(repo), *opts)
    assert code == 1 and len(doc["findings"]) == 2  # both casts, without a baseline
    code, doc, err = scan(str(repo), *opts, "--baseline-commit", "HEAD~1")
    assert code == 1, err
    assert [(f["rule"], f["path"], f["line"]) for f in doc["findings"]] == [("CF101", "srv/backend.py", 4)]
    assert "get_value_buffer" in doc["findings"][0]["expr"]
    assert doc["stats"]["baseline_commit"]["ref"] == "HEAD~1"
    assert doc["stats"]["baseline_commit"]["hidden"] == 1
    # git's objects were read; the work tree, its index and HEAD are as they were.
    assert (git(repo, "status", "--porcelain"), git(repo, "rev-parse", "HEAD")) == (status, head)


def test_an_edit_that_moves_old_findings_reports_nothing(repo: Path, tmp_path: Path) -> None:
    (repo / "srv" / "backend.py").write_text(MOVED)  # not committed: compared with HEAD
    code, doc, err = scan(str(repo), "--cache-dir", str(tmp_path / "cache"), "--diff", "HEAD")
    assert (code, doc["findings"]) == (0, []), err
    assert doc["stats"]["baseline_commit"]["hidden"] == 2
    code, doc, _ = scan(str(repo), "--no-cache", "--diff", "HEAD~1")  # against the first commit: the new cast only
    assert [f["line"] for f in doc["findings"]] == [13]


def test_a_root_below_the_top_of_the_repository(repo: Path) -> None:
    code, doc, err = scan(str(repo / "srv"), "--no-cache", "--baseline-commit", "HEAD~1")
    assert code == 1, err
    assert [(f["path"], f["line"]) for f in doc["findings"]] == [("backend.py", 4)]


def test_outside_a_repository_or_a_bad_ref_is_one_line_exit_2(repo: Path, tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "m.py").write_text(OLD)
    code, _, err = scan(str(plain), "--no-cache", "--baseline-commit", "HEAD")
    assert code == 2 and err.count("\n") == 1 and "not inside a git work tree" in err
    code, _, err = scan(str(repo), "--no-cache", "--baseline-commit", "no-such-branch")
    assert code == 2 and err.count("\n") == 1 and "--baseline-commit no-such-branch: no such commit" in err
    code, _, err = scan(str(repo), "--no-cache", "--baseline-commit", "--help")
    assert code == 2 and err.count("\n") == 1
    for ref in ("HEAD\n::warning file=README.md::x", "HEAD\r", "main\x1b[31m"):
        code, _, err = scan(str(repo), "--no-cache", "--baseline-commit", ref)
        assert code == 2 and err.count("\n") == 1 and "\x1b" not in err and "\r" not in err, err


def test_the_text_summary_says_how_many_were_there_already(repo: Path) -> None:
    r = runner.invoke(cli.app, ["scan", str(repo), "--no-cache", "-j", "1", "--diff", "HEAD~1"])
    assert r.exit_code == 1, r.output
    assert r.stdout.splitlines()[-1] == "1 error, 0 warnings, 0 info in 1 of 1 file (1 already at HEAD~1)"


def test_the_tree_at_a_commit_is_exported_once_as_copies_and_few_are_kept(repo: Path, tmp_path: Path) -> None:
    from castfind.store import gitref

    store = tmp_path / "refs"
    at = gitref.resolve([str(repo)], "HEAD~1")
    (root,) = gitref.exported(at, store)
    copy = Path(root) / "srv" / "backend.py"
    assert copy.read_text() == OLD and copy.stat().st_nlink == 1  # REF's bytes, never a link to the work tree
    stamp = copy.stat().st_mtime_ns
    assert gitref.exported(at, store) == (root,) and copy.stat().st_mtime_ns == stamp  # reused as it is
    for n in range(gitref.KEEP + 1):
        commit(repo, NEW + f"# {n}\n", f"edit {n}")
        gitref.exported(gitref.resolve([str(repo)], "HEAD"), store)
    assert len([p for p in store.iterdir() if p.is_dir()]) == gitref.KEEP
    assert not copy.exists()  # the least recently used tree went first


def test_a_warm_run_against_the_same_ref_carries_both_trees(repo: Path, tmp_path: Path) -> None:
    import sqlite3

    cache = tmp_path / "cache"
    first = scan(str(repo), "--cache-dir", str(cache), "--baseline-commit", "HEAD~1")
    with sqlite3.connect(cache / "facts.sqlite3") as db:
        slots = sorted(k.rsplit("-outcome", 1)[1] for (k,) in db.execute("SELECT key FROM memo") if "-outcome" in k)
    assert slots == ["", "-ref"]  # the work tree's outcome and REF's
    again = scan(str(repo), "--cache-dir", str(cache), "--baseline-commit", "HEAD~1")
    assert again[0] == first[0] == 1 and again[1]["findings"] == first[1]["findings"]
    assert again[1]["stats"]["outcome"] == "carried"
    # A commit moves REF's tree: its slot no longer matches, and the answer follows the new REF.
    commit(repo, MOVED, "moved")
    code, doc, _ = scan(str(repo), "--cache-dir", str(cache), "--baseline-commit", "HEAD~1")
    assert (code, doc["findings"]) == (0, [])


def _tree(repo: Path, entries: list[tuple[str, bytes, str]]) -> str:
    """A tree object written as given (``git hash-object --literally``: no check of the names), from
    ``(mode, name, object id)`` entries."""
    raw = b"".join(mode.encode() + b" " + name + b"\0" + bytes.fromhex(oid) for mode, name, oid in entries)
    done = subprocess.run(["git", "-C", str(repo), "hash-object", "-t", "tree", "--literally", "-w", "--stdin"],
                          input=raw, capture_output=True, check=True)
    return done.stdout.decode().strip()


def _crafted_commit(repo: Path, names: list[bytes]) -> str:
    """A commit whose tree holds ``x.py`` under the folders ``names`` (outermost first), made with no check
    of the names (a hostile pull request's commit)."""
    blob = subprocess.run(["git", "-C", str(repo), "hash-object", "-w", "--stdin"], input=OLD.encode(),
                          capture_output=True, check=True).stdout.decode().strip()
    oid = _tree(repo, [("100644", b"x.py", blob)])
    for name in reversed(names):
        oid = _tree(repo, [("40000", name, oid)])
    return git(repo, "commit-tree", oid, "-m", "crafted").strip()


@pytest.mark.parametrize("names", [[b".."] * 4, [b".."] * 5, [b"a", b"..", b".."] + [b".."] * 3, [b".git", b"hooks"],
                                   [b"sub", b".GIT"], [b"."]],
                         ids=["dotdot4", "dotdot5", "inner-dotdot", "git", "git-case", "dot"])
@pytest.mark.parametrize("cache", ["--no-cache", "--cache-dir"])
def test_a_crafted_tree_that_names_a_path_outside_its_folder_writes_nothing(repo: Path, tmp_path: Path, names: list[bytes],
                                                                              cache: str, monkeypatch) -> None:
    """Four or five ``..`` from the exported tree's folder reach ``tmp_path`` itself (the scratch folder is
    ``tmp_path/tmp/castfind-ref-*/0/serving``, the cached one ``tmp_path/cache/refs/.KEY-*/0/serving``)."""
    import tempfile

    crafted = _crafted_commit(repo, names)
    listed = subprocess.run(["git", "-C", str(repo), "ls-tree", "-r", "--name-only", crafted], capture_output=True,
                            text=True, check=True).stdout
    assert listed.strip().endswith("x.py")  # git lists the path as the tree names it
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    before = sorted(str(p) for p in tmp_path.rglob("*") if "cache" not in p.parts)
    opts = ["--no-cache"] if cache == "--no-cache" else ["--cache-dir", str(tmp_path / "cache")]
    r = runner.invoke(cli.app, ["scan", str(repo), *opts, "-j", "1", "--baseline-commit", crafted])
    assert r.exit_code == 2 and r.stderr.count("\n") == 1, r.output
    assert "x.py" in r.stderr and "outside" in r.stderr
    assert not list(tmp_path.rglob("x.py"))  # written nowhere, the cache included
    after = sorted(str(p) for p in tmp_path.rglob("*") if "cache" not in p.parts)
    assert after == before


@pytest.mark.parametrize("damage", ["truncate", "garble", "plant", "remove", "folder-to-file", "link"])
def test_a_damaged_exported_tree_is_exported_again(repo: Path, tmp_path: Path, damage: str) -> None:
    cache = tmp_path / "cache"
    (repo / "srv" / "extra.py").write_text(NEW.replace("Backend", "Extra"))  # new in the work tree: 2 more
    code, first, err = scan(str(repo), "--cache-dir", str(cache), "--baseline-commit", "HEAD~1")
    assert code == 1 and len(first["findings"]) == 3, err
    (tree,) = [p for p in (cache / "refs").iterdir() if not p.name.startswith(".")]
    (copy,) = tree.rglob("backend.py")
    if damage == "truncate":
        copy.write_text(OLD[:40])
    elif damage == "garble":
        copy.write_text(OLD.replace("get_key_buffer", "get_kex_buffer"))
    elif damage == "plant":
        (copy.parent / "extra.py").write_text(NEW.replace("Backend", "Extra"))  # would hide the work tree's
    elif damage == "remove":
        copy.unlink()
    elif damage == "folder-to-file":
        shutil.rmtree(copy.parent)
        copy.parent.write_text("x")
    else:
        copy.unlink()
        copy.symlink_to(repo / "srv" / "backend.py")
    for _ in range(2):
        code, doc, err = scan(str(repo), "--cache-dir", str(cache), "--baseline-commit", "HEAD~1")
        assert (code, doc["findings"]) == (1, first["findings"]), err
    assert copy.read_text() == OLD and not copy.is_symlink()
