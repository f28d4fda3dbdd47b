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
from dataclasses import dataclass
from pathlib import Path

from castfind.scope import in_scope
from castfind.types import Diagnostic

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


def _is_venv(dirpath: str, names: list[str]) -> bool:
    return "pyvenv.cfg" in names


def discover(roots: list[str], exclude: tuple[str, ...] = (), *, max_size: int = DEFAULT_MAX_FILE_SIZE,
             skipped: list[Diagnostic] | None = None) -> list[SourceFile]:
    """Every ``.py`` file under ``roots`` (sorted, de-duplicated by absolute path).

    Files that cannot be used (over ``max_size`` bytes, a symlink loop, unreadable) are left out,
    each with a diagnostic appended to ``skipped``.
    """
    notes: list[Diagnostic] = [] if skipped is None else skipped
    out: list[SourceFile] = []
    seen: set[str] = set()
    for root in roots:
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
        for sf in _walk(root, base.resolve(), exclude, max_size, notes):
            if sf.abspath not in seen:
                seen.add(sf.abspath)
                out.append(sf)
    return out


def _module_for_file(path: Path) -> str:
    """Module name of a single file given as a root: climb while the folder is a package."""
    parts = [] if path.name == "__init__.py" else [path.stem]
    d = path.resolve().parent
    while (d / "__init__.py").exists():
        parts.append(d.name)
        d = d.parent
    return ".".join(reversed(parts))


def _usable(entry: os.DirEntry[str], rel: str, max_size: int, notes: list[Diagnostic]) -> bool:
    """A ``.py`` entry is a regular file (through symlinks) no larger than ``max_size``."""
    try:
        if not entry.is_file():
            return False
        size = entry.stat().st_size
    except OSError as e:
        notes.append(Diagnostic(rel, 0, f"cannot read: {e.strerror} (file skipped; fix the link or add it to --exclude)",
                                "read-error"))
        return False
    if size > max_size:
        notes.append(Diagnostic(rel, 0, f"{size / 1048576:.1f} MB, over --max-file-size "
                                        f"({max_size / 1048576:.1f} MB): file skipped; raise the limit to scan it",
                                "too-large"))
        return False
    return True


def _walk(root: str, base: Path, exclude: tuple[str, ...], max_size: int, notes: list[Diagnostic]) -> list[SourceFile]:
    out: list[SourceFile] = []
    # Stack of (folder, module prefix or None when not inside a package)
    stack: list[tuple[Path, list[str] | None]] = [(base, None)]
    # PERF: ``base`` is resolved, so every entry path is absolute and starts with it; slicing is
    # ten times cheaper than os.path.relpath/abspath over 8,000 files.
    cut = len(os.path.join(str(base), ""))
    while stack:
        folder, prefix = stack.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            continue
        names = [e.name for e in entries]
        if folder != base and _is_venv(str(folder), names):
            continue
        has_init = "__init__.py" in names
        if prefix is None and has_init:
            # A top-level package, or the root itself (``--root path/to/pkg``): name modules from its parent.
            prefix = [folder.name]
        for e in entries:
            rel = e.path[cut:].replace(os.sep, "/")
            if exclude and any(fnmatch.fnmatch(rel, g) or fnmatch.fnmatch(e.name, g) for g in exclude):
                continue
            if e.is_dir(follow_symlinks=False):
                if e.name in SKIP_DIRS or e.name.startswith(".") or e.name.endswith(".egg-info"):
                    continue
                sub = None if prefix is None else [*prefix, e.name]
                stack.append((Path(e.path), sub))
            elif e.name.endswith(".py") and _usable(e, rel, max_size, notes):
                stem = e.name[:-3]
                if prefix is not None:
                    mod_parts = prefix if stem == "__init__" else [*prefix, stem]
                else:
                    relparts = rel[:-3].split("/")
                    mod_parts = relparts[:-1] if stem == "__init__" else relparts
                out.append(SourceFile(root, rel, e.path, ".".join(mod_parts), stem == "__init__"))
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

    shown = [f"{p.name} ({where(p)})" for p in packages[:SHOW_PACKAGES]]
    rest = len(packages) - SHOW_PACKAGES
    return "indexing " + ", ".join(shown) + (f" and {rest} more" if rest > 0 else "")


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
