"""Discover: roots → the Python source files in them, each with its dotted module name.

A root may be a wheel-style tree (``sglang/`` at its top) or a checkout with a src layout
(``python/sglang/...``). A *top-level package* is the first folder with an ``__init__.py`` on the
way down from the root; modules below it are named from its parent folder. Files outside every
package are named by their path from the root.
"""

from __future__ import annotations

import fnmatch
import importlib.util
import os
import stat
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from castfind.core.names import shown, utf8_name
from castfind.core.scope import in_scope
from castfind.core.types import Diagnostic

#: Files larger than this are not parsed (``--max-file-size``): parse time and memory grow faster
#: than the size (a 5 MB generated module took minutes and gigabytes). The largest module of the
#: sglang and flashinfer wheels is 1.2 MB.
DEFAULT_MAX_FILE_SIZE = 2 * 1024 * 1024

#: Folders never walked into.
SKIP_DIRS = frozenset(
    {".git", ".hg", ".svn", "__pycache__", "build", "dist", "node_modules", ".tox", ".nox",
     ".mypy_cache", ".pytest_cache", ".ruff_cache", ".venv", "venv", ".eggs", "site-packages"}
)


@dataclass(frozen=True, slots=True)
class SourceFile:
    """One file to index: which root it belongs to, its path inside that root, its module name."""

    root: str  # the root as the user gave it (shown in output)
    path: str  # relative to the root, forward slashes
    abspath: str
    module: str
    is_package: bool  # an ``__init__.py``


class DiscoveryError(Exception):
    """A root that cannot be used (missing, not a folder)."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


#: A file's stat as the stat index keeps it: size, mtime_ns, inode, ctime_ns.
FileStat = tuple[int, int, int, int]
#: A folder's stat as a :class:`Listing` keeps it: mtime_ns, ctime_ns, inode.
FolderStat = tuple[int, int, int]
#: A folder modified this recently when listed may change again within the clock's granularity
#: without its mtime changing ("racily clean", as git calls it): its listing is not kept.
RACY_NS = 2_000_000_000


@dataclass(frozen=True, slots=True)
class Listing:
    """What discovery needs of one folder's entries, true while the folder's stat is still ``stat``.

    A folder's mtime changes whenever an entry is added, removed or renamed in it (and its ctime
    with it), so a folder whose (mtime, ctime, inode) is unchanged has the same entries: its stored
    listing is reused instead of listing it again. Files are still stat-ed one by one (an edit in
    place changes no folder)."""

    stat: FolderStat
    dirs: tuple[str, ...]  # entries that are folders themselves (not symlinks to one), by name
    files: tuple[str, ...]  # the other entries named ``*.py``, by name
    venv: bool  # a ``pyvenv.cfg`` entry
    has_init: bool  # an ``__init__.py`` entry


def parse_size(text: str) -> int | None:
    """``--max-file-size``: ``2M``, ``500K`` or plain bytes; None when it is none of these."""
    t = text.strip().upper().removesuffix("B")
    scale = {"K": 1024, "M": 1024 * 1024}.get(t[-1:], 1)
    digits = t[:-1] if scale > 1 else t
    if not digits.isdigit() or int(digits) == 0:
        return None
    return int(digits) * scale


def size_text(size: int) -> str:
    """A byte count as ``--max-file-size`` writes it: ``2M``, ``500K`` or plain bytes (:func:`parse_size`'s inverse)."""
    for unit, scale in (("M", 1024 * 1024), ("K", 1024)):
        if size % scale == 0:
            return f"{size // scale}{unit}"
    return str(size)


def discover(roots: list[str], exclude: tuple[str, ...] = (), *, max_size: int = DEFAULT_MAX_FILE_SIZE,
             skipped: list[Diagnostic] | None = None, listings: Mapping[str, Listing] | None = None,
             listed: dict[str, Listing] | None = None, stats: dict[str, FileStat] | None = None) -> list[SourceFile]:
    """Every ``.py`` file under ``roots`` (sorted, de-duplicated by absolute path).

    Files that cannot be used (over ``max_size`` bytes, a symlink loop, unreadable) are left out,
    each with a diagnostic appended to ``skipped``. ``listings`` (absolute folder path → the
    :class:`Listing` stored by an earlier walk) spares listing the folders whose stat is unchanged;
    ``listed`` receives this walk's listing of every folder walked (except racily fresh ones), and
    ``stats`` the stat of every file found (through symlinks, as it was when found): what the stat
    index compares.
    """
    notes: list[Diagnostic] = [] if skipped is None else skipped
    out: list[SourceFile] = []
    seen: set[str] = set()
    walk = _Walk(exclude, max_size, notes, listings or {}, {} if listed is None else listed,
                 {} if stats is None else stats)
    for root in roots:
        check_root(root)
        base = Path(root)
        if not base.exists():
            raise DiscoveryError(root, "no such file or folder; pass an existing path with --root")
        if not base.is_dir() and not (base.is_file() and base.suffix == ".py"):
            raise DiscoveryError(root, "not a folder or a .py file; pass a source folder with --root")
        if base.is_file():
            ap = str(base.resolve())
            if ap not in seen:
                seen.add(ap)
                out.append(SourceFile(str(base.parent), base.name, ap, _module_for_file(base), base.name == "__init__.py"))
            continue
        for sf in walk.root(root, base.resolve()):
            if sf.abspath not in seen:
                seen.add(sf.abspath)
                out.append(sf)
    return out


def check_root(root: str) -> None:
    """Raise :class:`DiscoveryError` for a root whose path (resolved) is not UTF-8: none of its files could
    be named in a report or a cache key. (A file or folder *inside* a root with such a name is skipped
    with a diagnostic instead.)"""
    if not utf8_name(root) or not utf8_name(os.path.realpath(root)):
        raise DiscoveryError(shown(root), "path is not valid UTF-8, so its files cannot be named in a report or "
                                          "the cache; rename the folder")


def _module_for_file(path: Path) -> str:
    """Module name of a single file given as a root: climb while the folder is a package."""
    parts = [] if path.name == "__init__.py" else [path.stem]
    d = path.resolve().parent
    while (d / "__init__.py").exists():
        parts.append(d.name)
        d = d.parent
    return ".".join(reversed(parts))


def _list(folder: str) -> Listing | None:
    """A fresh listing of ``folder`` (None when it cannot be listed). The stat is taken first, so a
    change made while listing shows as another stat next time."""
    try:
        st = os.stat(folder)
        entries = list(os.scandir(folder))
    except OSError:
        return None
    dirs, files, names = [], [], set()
    for e in entries:
        names.add(e.name)
        try:
            is_dir = e.is_dir(follow_symlinks=False)
        except OSError:
            is_dir = False
        if is_dir:
            dirs.append(e.name)
        elif e.name.endswith(".py"):
            files.append(e.name)
    return Listing((st.st_mtime_ns, st.st_ctime_ns, st.st_ino), tuple(sorted(dirs)), tuple(sorted(files)),
                   "pyvenv.cfg" in names, "__init__.py" in names)


class _Walk:
    """One discovery's walk: folder listings reused where the folder's stat is unchanged."""

    def __init__(self, exclude: tuple[str, ...], max_size: int, notes: list[Diagnostic],
                 listings: Mapping[str, Listing], listed: dict[str, Listing], stats: dict[str, FileStat]) -> None:
        self.exclude = exclude
        self.max_size = max_size
        self.notes = notes
        self.listings = listings
        self.listed = listed
        self.stats = stats
        self.now = time.time_ns()

    def listing(self, folder: str) -> Listing | None:
        known = self.listings.get(folder)
        got: Listing | None
        if known is not None:
            try:
                st = os.stat(folder)
            except OSError:
                return None
            fresh = (st.st_mtime_ns, st.st_ctime_ns, st.st_ino) == known.stat
            got = known if fresh else _list(folder)
        else:
            got = _list(folder)
        if got is not None and self.now - max(got.stat[0], got.stat[1]) > RACY_NS:
            self.listed[folder] = got
        return got

    def excluded(self, rel: str, name: str) -> bool:
        return any(fnmatch.fnmatch(rel, g) or fnmatch.fnmatch(name, g) for g in self.exclude)

    def usable(self, path: str, rel: str) -> bool:
        """A ``.py`` entry is a regular file (through symlinks) no larger than ``max_size``."""
        try:
            st = os.stat(path)
        except OSError as e:
            if isinstance(e, FileNotFoundError) and os.path.lexists(path):
                return False  # a dangling symlink: not a file
            self.notes.append(Diagnostic(rel, 0, f"cannot read: {e.strerror} (file skipped; fix the link or add it "
                                                 "to --exclude)", "read-error"))
            return False
        if not stat.S_ISREG(st.st_mode):
            return False
        size = st.st_size
        if size > self.max_size:
            self.notes.append(Diagnostic(rel, 0, f"{size / 1048576:.1f} MB, over --max-file-size "
                                                 f"({self.max_size / 1048576:.1f} MB): file skipped; raise the limit "
                                                 "to scan it", "too-large"))
            return False
        self.stats[path] = (size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)
        return True

    def not_utf8(self, rel: str, what: str, skipped: str) -> None:
        """A file or folder whose name is not UTF-8 cannot be named in a report, a cache key or a module
        name: one diagnostic, shown escaped (``bad\\xff.py``)."""
        self.notes.append(Diagnostic(shown(rel), 0, f"{what} is not valid UTF-8: {skipped} (rename it to scan "
                                                    "it, or add it to --exclude)", "read-error"))

    def inside(self, link: str, top: str) -> bool:
        """Whether symlink ``link`` leads to a file under the root ``top`` (resolved); when not, a diagnostic
        (its lines would be shown under a path inside the root)."""
        target = os.path.realpath(link)
        if target.startswith(os.path.join(top, "")):
            return True
        rel = link[len(os.path.join(top, "")):].replace(os.sep, "/")
        self.notes.append(Diagnostic(shown(rel), 0, f"a symlink to {shown(target)} outside the root, file "
                                                    "skipped (pass that folder as a root to scan it)", "read-error"))
        return False

    def root(self, root: str, base: Path) -> list[SourceFile]:
        out: list[SourceFile] = []
        top = str(base)
        # Stack of (folder, module prefix or None when not inside a package)
        stack: list[tuple[str, list[str] | None]] = [(top, None)]
        # PERF: ``base`` is resolved, so every entry path is absolute and starts with it; slicing is
        # ten times cheaper than os.path.relpath/abspath over 8,000 files.
        cut = len(os.path.join(top, ""))
        exclude = self.exclude
        lstat, S_ISLNK, S_ISREG = os.lstat, stat.S_ISLNK, stat.S_ISREG  # noqa: N806  PERF: ~8,000 files
        while stack:
            folder, prefix = stack.pop()
            got = self.listing(folder)
            if got is None or (folder != top and got.venv):
                continue
            if prefix is None and got.has_init:
                # A top-level package, or the root itself (``--root path/to/pkg``): name modules from its parent.
                prefix = [os.path.basename(folder)]
            inside = folder + os.sep
            # PERF: what every file of the folder shares, once per folder (~8,000 files on both wheels).
            rel_dir = inside[cut:].replace(os.sep, "/")
            package = ".".join(prefix) if prefix is not None else rel_dir[:-1].replace("/", ".")
            dot = package + "." if package else ""
            stats, max_size = self.stats, self.max_size
            for name in got.files:
                path = inside + name
                rel = rel_dir + name
                if exclude and self.excluded(rel, name):
                    continue
                if not name.isascii() and not utf8_name(name):
                    self.not_utf8(rel, "file name", "file skipped")
                    continue
                try:
                    # PERF: lstat, not stat: the same one call for a plain file, and a symlink shows as one.
                    st = lstat(path)
                    if S_ISLNK(st.st_mode):
                        st = os.stat(path)
                        if not self.inside(path, top):
                            continue
                except OSError:
                    st = None
                if st is None or not S_ISREG(st.st_mode) or st.st_size > max_size:
                    if not self.usable(path, rel):  # the diagnostics, if any
                        continue
                else:
                    stats[path] = (st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)
                if name == "__init__.py":
                    out.append(SourceFile(root, rel, path, package, True))
                else:
                    out.append(SourceFile(root, rel, path, dot + name[:-3], False))
            for name in got.dirs:
                if name in SKIP_DIRS or name.startswith(".") or name.endswith(".egg-info"):
                    continue
                path = inside + name
                if exclude and self.excluded(path[cut:].replace(os.sep, "/"), name):
                    continue
                if not utf8_name(name):
                    self.not_utf8(path[cut:].replace(os.sep, "/"), "folder name", "its files are skipped")
                    continue
                stack.append((path, None if prefix is None else [*prefix, name]))
        return out


@dataclass(frozen=True, slots=True)
class Package:
    """A top-level package found under a root: its name and the folder that holds it, relative to the
    root (``python/`` for ``python/sglang``; ``""`` when it sits at the root's top; ``None`` when the
    root *is* the package)."""

    name: str
    root: str
    folder: str | None

    def to_dict(self) -> dict[str, str | None]:
        return {"name": self.name, "root": self.root, "folder": self.folder}


def package_roots(files: list[SourceFile], report_exclude: tuple[str, ...] = ()) -> tuple[Package, ...]:
    """The top-level packages among ``files`` (each one's ``__init__.py`` named by a single-part
    module), in path order. Packages inside ``report_exclude`` folders (a ``test/`` package) are not
    listed: they are indexed, but they are not what the user scans for."""
    out: list[Package] = []
    for sf in files:
        if not sf.is_package or "." in sf.module or not in_scope(sf.path, report_exclude):
            continue
        if sf.path == "__init__.py":
            out.append(Package(sf.module, sf.root, None))
            continue
        folder = sf.path[: -len("__init__.py")].rstrip("/")
        parent = folder.rpartition("/")[0]
        out.append(Package(sf.module, sf.root, parent + "/" if parent else ""))
    return tuple(sorted(out, key=lambda p: (p.root, p.folder or "", p.name)))


#: How many packages :func:`describe_packages` names before it counts the rest.
SHOW_PACKAGES = 8


def describe_packages(packages: tuple[Package, ...]) -> str | None:
    """``indexing sglang (python/), sgl_kernel (sgl-kernel/python/)``: the line the CLI prints once;
    ``None`` when no package was found. With several roots each folder is shown under its root."""
    if not packages:
        return None
    several = len({p.root for p in packages}) > 1

    def where(p: Package) -> str:
        if p.folder is None:
            return p.root if several else "the root"
        folder = p.folder or "./"
        return os.path.join(p.root, p.folder) if several else folder

    listed = [f"{p.name} ({where(p)})" for p in packages[:SHOW_PACKAGES]]
    rest = len(packages) - SHOW_PACKAGES
    return shown("indexing " + ", ".join(listed) + (f" and {rest} more" if rest > 0 else ""))


def find_installed(top: str) -> Path | None:
    """The folder of an installed top-level package, found *without importing it*.

    ``importlib.util.find_spec`` on a top-level name reads the import path only; submodule
    look-ups would import their parents, so callers only ever pass the first component.
    """
    if not top.isidentifier():
        return None
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        locs = list(spec.submodule_search_locations)
        return Path(locs[0]) if locs else None
    if spec.origin and spec.origin.endswith(".py"):
        return Path(spec.origin)
    return None
