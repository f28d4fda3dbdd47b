"""Modules: module names ↔ the index's files, including installed packages no root holds.

``import flashinfer`` from an sglang root finds ``flashinfer`` in another root, or — when the index
follows installed packages (``castfind where``) — where Python would install it, found without
importing it (:func:`castfind.store.discover.find_installed`); its files then join the index.
A module looked for and not found is reported to the index's observer as ``m:<module>``: adding
that module later could change what a carried result (:mod:`castfind.store.memo`) depended on.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from castfind.store.discover import DiscoveryError, SourceFile, discover, find_installed
from castfind.store.index import Index

if TYPE_CHECKING:
    from castfind.read.facts import FileFacts


class OutOfTime(Exception):
    """A module's facts were asked for after its reader's time ran out (:attr:`Modules.guard`), and it is not parsed."""


class Modules:
    """The module table of one :class:`~castfind.store.index.Index` (the first file wins a name)."""

    def __init__(self, index: Index, follow_installed: bool | None = None) -> None:
        self.index = index
        self.follow_installed = index.follow_installed if follow_installed is None else follow_installed
        self.by_module: dict[str, SourceFile] = {}
        for sf in index.files:
            self.by_module.setdefault(sf.module, sf)
        self._installed_tops: dict[str, bool] = {}
        #: When set: asked of each module that would have to be parsed, true when it may not be (a lookup's
        #: time budget ran out, or that parse would end past it); facts already parsed or cached are still read.
        self.guard: Callable[[SourceFile], bool] | None = None

    def file(self, module: str) -> SourceFile | None:
        """The file that defines ``module``, or None."""
        sf = self.by_module.get(module)
        if sf is None and self.follow_installed and module and self.add_installed(module.split(".")[0]):
            sf = self.by_module.get(module)
        if sf is None:
            self.index.report(("m:" + module,))
        return sf

    def has(self, module: str) -> bool:
        return self.file(module) is not None

    def facts(self, module: str) -> FileFacts | None:
        """Facts of a module (parsed on first use); None when no such module is known. Raises
        :class:`OutOfTime` when the module would have to be parsed and :attr:`guard` says it may not be."""
        sf = self.file(module)
        if sf is None:
            return None
        if self.guard is not None and self.index.load_known([sf]) and self.guard(sf):
            raise OutOfTime(module)
        return self.index.facts_of(sf)

    def is_package(self, module: str) -> bool:
        sf = self.file(module)
        return bool(sf and sf.is_package)

    def submodules(self, package: str) -> list[str]:
        pre = package + "."
        return [m for m in self.by_module if m.startswith(pre) and "." not in m[len(pre):]]

    def installed_looked_for(self) -> dict[str, bool]:
        """The installed packages looked for so far (top-level name → found and indexed)."""
        return dict(self._installed_tops)

    def add_installed(self, top: str) -> bool:
        """Index an installed package that no root holds (found without importing it); False when
        there is none, or a root already holds that name."""
        if top in self._installed_tops:
            return self._installed_tops[top]
        held = [sf for m, sf in self.by_module.items() if m == top or m.startswith(top + ".")]
        if held:
            # Joined already (an earlier reader of this index looked for it): found, as it was then.
            self._installed_tops[top] = got = all(self.index.joined(sf) for sf in held)
            return got
        loc = find_installed(top)
        added: list[SourceFile] = []
        if loc is not None:
            root = str(loc.parent) if loc.is_dir() else str(loc)
            try:
                found = discover([str(loc)]) if loc.is_dir() else discover([root])
            except (DiscoveryError, OSError):  # an unreadable install is skipped, as if absent
                found = []
            for sf in found:
                if sf.module == top or sf.module.startswith(top + "."):
                    added.append(replace(sf, root=root,
                                         path=os.path.relpath(sf.abspath, root).replace(os.sep, "/")))
        self.index.add_files(added)
        for sf in added:
            self.by_module.setdefault(sf.module, sf)
        self._installed_tops[top] = bool(added)
        return bool(added)
