"""``--baseline-commit REF``: the scanned roots as they were at a git commit, read from git's objects.

:func:`resolve` checks, before anything is parsed, that every root lies in a git work tree and
that REF names a commit there. :func:`export_roots` writes REF's ``.py`` files of each root
into a scratch folder (``git ls-tree -r`` then one ``git cat-file --batch``): no checkout, no
change to the work tree, its index or its HEAD. Each root keeps its name and its path inside
the repository's folder (``<scratch>/<n>/<repository folder>/<root path in it>``), so findings
there have the same root-relative paths, hence the same fingerprints, and the scan's carried
results (keyed by root names) and facts (keyed by content) are reused for unchanged files.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["GitRefError", "RootAtRef", "export_roots", "resolve"]

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
    if not ref or ref.startswith("-"):
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


def _blobs(at: RootAtRef) -> list[tuple[str, str]]:
    """``(object id, path in the repository)`` of REF's ``.py`` files under the root."""
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


def export_roots(roots: Sequence[RootAtRef], dest: str | os.PathLike[str]) -> tuple[str, ...]:
    """Write REF's ``.py`` files of each root under ``dest``; the roots there, in the same order."""
    base = Path(dest)
    tops: dict[str, Path] = {}
    written: set[tuple[str, str]] = set()
    out: list[str] = []
    for at in roots:
        if at.toplevel not in tops:
            tops[at.toplevel] = base / str(len(tops)) / (Path(at.toplevel).name or "repo")
        top = tops[at.toplevel]
        todo = [(oid, path) for oid, path in _blobs(at) if (at.toplevel, path) not in written]
        for (_, path), data in zip(todo, _contents(at.toplevel, [oid for oid, _ in todo]), strict=True):
            target = top / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            written.add((at.toplevel, path))
        root = top / at.prefix if at.prefix else top
        root.mkdir(parents=True, exist_ok=True)
        out.append(str(root))
    return tuple(out)
