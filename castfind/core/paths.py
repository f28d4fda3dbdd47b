"""Paths as castfind shows them, and the repository a scanned folder belongs to.

**The one path convention** of every output (the text report, JSON's ``file``, JUnit, GitLab, GitHub
annotations, Markdown, ``--statistics``): a finding's file relative to the current working directory, with
forward slashes (:func:`display_path`), as ruff shows paths; a file outside the working directory under an
absolute root stays absolute. SARIF alone
names files relative to the repository top (:func:`repository_top`), because code-scanning UIs read a
relative URI against the repository's root.
"""

from __future__ import annotations

import os

__all__ = ["display_path", "repository_top"]

#: A repository's top holds this entry: a folder in a clone, a file in a worktree or submodule.
GIT_ENTRY = ".git"


def display_path(root: str, path: str) -> str:
    """A finding's file as a user, or a CI system reading paths relative to the checkout, names it:
    ``root/path`` (``path`` relative to the scanned ``root``) with forward slashes: a relative root stays
    relative to the current folder (``srv/x.py``, ``../lib/x.py``), an absolute one is made relative to it when
    it lies under it, else stays absolute. ``root`` empty: ``path`` as it is (a cast measured outside
    the scanned roots)."""
    if not root:
        return _slashes(path)
    joined = os.path.normpath(os.path.join(root, path))
    if os.path.isabs(joined):
        try:
            rel = os.path.relpath(joined)
        except ValueError:  # another drive (Windows)
            rel = joined
        if rel != ".." and not rel.startswith(".." + os.sep):
            joined = rel
    return _slashes(joined)


def _slashes(path: str) -> str:
    """Forward slashes where the separator is a backslash (Windows); elsewhere a backslash is a character of
    the name (a trace's escaped file name: ``\\x1b``), kept."""
    return path.replace(os.sep, "/") if os.sep != "/" else path


def repository_top(folder: str | os.PathLike[str]) -> str | None:
    """The top of the git repository holding ``folder`` (absolute; symlinks not resolved), found by walking up
    to the nearest folder with a ``.git`` entry (a folder, or a file in a worktree), without running git;
    ``None`` outside any repository."""
    current = os.path.abspath(folder)
    if not os.path.isdir(current):
        current = os.path.dirname(current)
    while True:
        if os.path.lexists(os.path.join(current, GIT_ENTRY)):
            return current
        parent = os.path.dirname(current)
        if parent == current:
            return None
        current = parent
