"""``--baseline-commit REF``: the scanned roots as they were at a git commit, read from git's objects.

:func:`resolve` checks, before anything is parsed, that every root lies in a git work tree and
that REF names a commit there. :func:`export_roots` writes REF's ``.py`` files of each root
into a scratch folder (``git ls-tree -r``; a file whose work-tree bytes have REF's object id is hard-linked
from the work tree, the others come from one ``git cat-file --batch``): no checkout, no
change to the work tree, its index or its HEAD. Each root keeps its name and its path inside
the repository's folder (``<scratch>/<n>/<repository folder>/<root path in it>``), so findings
there have the same root-relative paths, hence the same fingerprints, and the scan's carried
results (keyed by root names) and facts (keyed by content) are reused for unchanged files.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["KEEP", "GitRefError", "RootAtRef", "export_roots", "exported", "resolve"]

_FILE_MODES = ("100644", "100755")  # plain and executable files; links and submodules are skipped


class GitRefError(Exception):
    """No git repository around a root, a REF that names no commit, or git itself failing."""


@dataclass(frozen=True, slots=True)
class RootAtRef:
    """One scanned root in the repository that holds it: the work tree's top folder, the root's
    path inside it (``""`` for the top itself, forward slashes) and the commit REF named."""

    root: str
    toplevel: str
    prefix: str
    commit: str


def _git(cwd: str, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(["git", "-C", cwd, *args], input=stdin, capture_output=True, check=False)
    except OSError as exc:  # no git on PATH
        raise GitRefError(f"--baseline-commit: cannot run git ({exc.strerror or exc}) — install git") from exc


def resolve(roots: Sequence[str], ref: str) -> tuple[RootAtRef, ...]:
    """Each root's repository and REF's commit in it; :class:`GitRefError` with a one-line reason otherwise."""
    if not ref or ref.startswith("-") or not ref.isprintable():
        raise GitRefError(f"--baseline-commit {ref!r}: expected a commit, branch or tag such as HEAD~1 or origin/main")
    out: list[RootAtRef] = []
    for root in roots:
        folder = os.path.realpath(root)
        if not os.path.isdir(folder):
            folder = os.path.dirname(folder)
        top = _git(folder, "rev-parse", "--show-toplevel")
        if top.returncode != 0:
            raise GitRefError(f"{root}: not inside a git work tree — --baseline-commit {ref} needs the roots in a "
                              f"git repository")
        toplevel = os.path.realpath(top.stdout.decode("utf-8", "replace").strip())
        commit = _git(toplevel, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}")
        if commit.returncode != 0:
            raise GitRefError(f"--baseline-commit {ref}: no such commit in {toplevel} — give a commit, branch or tag "
                              f"(fetch it first in a shallow clone: git fetch --depth=1 origin {ref})")
        prefix = os.path.relpath(folder, toplevel).replace(os.sep, "/")
        out.append(RootAtRef(root, toplevel, "" if prefix == "." else prefix, commit.stdout.decode().strip()))
    return tuple(out)


def _unsafe(path: str) -> bool:
    """A path of a git tree that would not stay inside the folder it is exported to: absolute, a ``.``
    or ``..`` or empty component, a ``.git`` component (any case), a backslash or a NUL."""
    parts = path.split("/")
    return (path.startswith("/") or "\\" in path or "\0" in path
            or any(part in ("", ".", "..") or part.lower() == ".git" for part in parts))


def _blobs(at: RootAtRef) -> list[tuple[str, str]]:
    """``(object id, path in the repository)`` of REF's ``.py`` files under the root; :class:`GitRefError`
    when the tree names a path that would leave the folder it is exported to (a crafted tree: git itself
    writes no such entry)."""
    args = ["ls-tree", "-r", "-z", "--full-tree", at.commit]
    if at.prefix:
        args += ["--", at.prefix]
    listing = _git(at.toplevel, *args)
    if listing.returncode != 0:
        raise GitRefError(f"--baseline-commit: git ls-tree {at.commit[:12]} failed in {at.toplevel}: "
                          f"{' '.join(listing.stderr.decode('utf-8', 'replace').split())}")
    blobs: list[tuple[str, str]] = []
    for entry in listing.stdout.split(b"\0"):
        if not entry:
            continue
        meta, _, path_bytes = entry.partition(b"\t")
        mode, kind, oid = meta.decode().split()
        path = os.fsdecode(path_bytes)
        if kind == "blob" and mode in _FILE_MODES and path.endswith(".py"):
            if _unsafe(path):
                raise GitRefError(f"--baseline-commit: the tree of {at.commit[:12]} in {at.toplevel} names {path!r}, "
                                  f"a path outside the folder it is exported to (a crafted tree) — nothing was written; "
                                  f"compare with another commit")
            blobs.append((oid, path))
    return blobs


def _contents(toplevel: str, oids: list[str]) -> list[bytes]:
    """The objects' bytes, in order, from one ``git cat-file --batch``."""
    if not oids:
        return []
    done = _git(toplevel, "cat-file", "--batch", stdin=("\n".join(oids) + "\n").encode())
    if done.returncode != 0:
        raise GitRefError(f"--baseline-commit: git cat-file failed in {toplevel}: "
                          f"{' '.join(done.stderr.decode('utf-8', 'replace').split())}")
    data, pos, out = done.stdout, 0, []
    for oid in oids:
        end = data.index(b"\n", pos)
        header = data[pos:end].split()
        if len(header) != 3 or header[1] != b"blob":
            raise GitRefError(f"--baseline-commit: git cat-file gave no blob for {oid} in {toplevel}")
        size = int(header[2])
        out.append(data[end + 1:end + 1 + size])
        pos = end + 1 + size + 1  # the object, then a newline
    return out


def _blob_id(data: bytes, like: str) -> str:
    """Git's object id of a blob holding ``data`` (SHA-1, or SHA-256 in a repository that uses it)."""
    digest = hashlib.sha256 if len(like) == 64 else hashlib.sha1
    return digest(b"blob %d\0" % len(data) + data).hexdigest()


def _link_if_same(source: Path, oid: str, target: Path, link: bool) -> bool:
    """Make ``target`` the work tree's ``source`` when that file holds exactly REF's blob ``oid``: with
    ``link`` a hard link (the scan only reads it), else a copy of the bytes just read. False when it differs
    (or is missing)."""
    try:
        if source.is_symlink() or not source.is_file():
            return False
        data = source.read_bytes()
    except OSError:
        return False
    if _blob_id(data, oid) != oid:
        return False
    try:
        if not link:
            raise OSError
        os.link(source, target)
    except OSError:  # a copy asked for, another file system, or links not allowed
        with open(target, "xb") as fh:  # a new file: never through a link or over another file
            fh.write(data)
    return True


def export_roots(roots: Sequence[RootAtRef], dest: str | os.PathLike[str], *, link: bool = True) -> tuple[str, ...]:
    """Write REF's ``.py`` files of each root under ``dest``; the roots there, in the same order.

    A work-tree file that holds exactly REF's blob (same git object id) is hard-linked from the work tree
    (the scan only reads it; ``link=False``: copied); the others are read from git's objects in one
    ``git cat-file --batch``.
    """
    try:
        return _export(roots, Path(dest), link)
    except OSError as exc:  # a tree whose paths clash (a file and a folder of one name), a full disk
        raise GitRefError(f"--baseline-commit: cannot export the tree at {roots[0].commit[:12]} to {dest}: "
                          f"{exc.strerror or exc} ({exc.filename!r}) — free space or compare with another commit") from exc


def _inside(path: str, folder: str) -> bool:
    real = os.path.realpath(path)
    return real == folder or real.startswith(folder.rstrip(os.sep) + os.sep)


def _export(roots: Sequence[RootAtRef], base: Path, link: bool) -> tuple[str, ...]:
    tops = _tops(roots, base)
    written: set[tuple[str, str]] = set()
    for at in roots:
        top = tops[at.toplevel]
        top.mkdir(parents=True, exist_ok=True)
        real_top, real_work = os.path.realpath(top), os.path.realpath(at.toplevel)
        todo: list[tuple[str, str]] = []
        folders: set[Path] = set()
        for oid, path in _blobs(at):
            if (at.toplevel, path) in written:
                continue
            target = top / path
            if target.parent not in folders:
                target.parent.mkdir(parents=True, exist_ok=True)
                if not _inside(str(target.parent), real_top):  # never: only files are written, no links
                    raise GitRefError(f"--baseline-commit: {target.parent} leads outside {top} — nothing more written")
                folders.add(target.parent)
            source = Path(at.toplevel) / path
            if _inside(str(source), real_work) and _link_if_same(source, oid, target, link):
                written.add((at.toplevel, path))
            else:
                todo.append((oid, path))
        for (_, path), data in zip(todo, _contents(at.toplevel, [oid for oid, _ in todo]), strict=True):
            target = top / path
            with open(target, "xb") as fh:  # a new file: never through a link or over another file
                fh.write(data)
            written.add((at.toplevel, path))
        (top / at.prefix if at.prefix else top).mkdir(parents=True, exist_ok=True)
    return _layout(roots, base)


#: How many exported trees :func:`exported` keeps (the most recently used).
KEEP = 3
_DONE = ".castfind-complete"


def _tops(roots: Sequence[RootAtRef], base: Path) -> dict[str, Path]:
    """Where each repository's tree goes under ``base``: ``<base>/<n>/<repository folder>``, numbered in the
    order the roots name the repositories (the one layout the export, its check and the roots share)."""
    tops: dict[str, Path] = {}
    for at in roots:
        tops.setdefault(at.toplevel, base / str(len(tops)) / (Path(at.toplevel).name or "repo"))
    return tops


def _layout(roots: Sequence[RootAtRef], base: Path) -> tuple[str, ...]:
    """Each root's folder in the tree exported under ``base``."""
    tops = _tops(roots, base)
    return tuple(str(tops[at.toplevel] / at.prefix if at.prefix else tops[at.toplevel]) for at in roots)


def _verified(roots: Sequence[RootAtRef], final: Path) -> bool:
    """The exported tree under ``final`` is exactly REF's: every ``.py`` file the commit has is a regular
    file there holding the commit's bytes (its blob id), and there is no other file, link or odd entry
    (a truncated, garbled or planted file, a folder replaced by a file: the tree is exported again)."""
    tops = _tops(roots, final)
    expected = {str(tops[at.toplevel] / path): oid for at in roots for oid, path in _blobs(at)}
    seen = 0
    for dirpath, dirs, files in os.walk(final, onerror=_raise):
        for name in dirs:
            if os.path.islink(os.path.join(dirpath, name)):
                return False
        for name in files:
            path = os.path.join(dirpath, name)
            if dirpath == str(final) and name == _DONE:
                continue
            want = expected.get(path)
            if want is None or os.path.islink(path):
                return False
            with open(path, "rb") as fh:
                if _blob_id(fh.read(), want) != want:
                    return False
            seen += 1
    return seen == len(expected)


def _raise(exc: OSError) -> None:
    raise exc


def _discard(path: Path) -> None:
    """Remove what is at ``path`` (a folder, a file or a link), renaming a folder aside first so no run
    ever sees it half removed."""
    if path.is_dir() and not path.is_symlink():
        trash = Path(tempfile.mkdtemp(prefix=f".{path.name}-old-", dir=path.parent))
        with contextlib.suppress(OSError):
            os.rename(path, trash / "tree")
        shutil.rmtree(trash, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def exported(roots: Sequence[RootAtRef], store: str | os.PathLike[str]) -> tuple[str, ...]:
    """The roots at REF under ``store`` (a folder of the cache), exported once per commit and kept: a tree
    at a commit never changes, so the next run at the same REF reads it, after checking that it is still
    REF's (:func:`_verified`: every file's blob id; a damaged tree is exported again).

    Files are copies, never links to the work tree (an edit in place must not change REF's tree). A tree
    is built in a private folder and renamed into place when complete, so a concurrent run sees a whole
    tree or none; the :data:`KEEP` most recently used trees stay, older ones are removed.
    """
    folder = Path(store)
    folder.mkdir(parents=True, exist_ok=True)
    key = hashlib.blake2b(repr([(a.toplevel, a.prefix, a.commit) for a in roots]).encode(), digest_size=12).hexdigest()
    final = folder / key
    try:
        whole = (final / _DONE).is_file() and _verified(roots, final)
    except OSError:
        whole = False
    if not whole:
        if os.path.lexists(final):
            _discard(final)
        scratch = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=folder))
        try:
            export_roots(roots, scratch, link=False)
            (scratch / _DONE).touch()
            try:
                os.rename(scratch, final)
            except OSError:  # another run put it there first (or something else is in the way)
                if not (final / _DONE).is_file():
                    _discard(final)
                    os.rename(scratch, final)
        except OSError as exc:
            raise GitRefError(f"--baseline-commit: cannot keep the tree at {roots[0].commit[:12]} in {folder}: "
                              f"{exc.strerror or exc} — free space there or pass --no-cache") from exc
        finally:
            if scratch.exists():
                shutil.rmtree(scratch, ignore_errors=True)
    os.utime(final)
    trees = sorted((p for p in folder.iterdir() if p.is_dir() and not p.is_symlink() and not p.name.startswith(".")),
                   key=lambda p: p.stat().st_mtime, reverse=True)
    for old in trees[KEEP:]:
        shutil.rmtree(old, ignore_errors=True)
    return _layout(roots, final)
