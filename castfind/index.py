"""Index: the discovered files by module name, with their facts loaded on demand.

PERF: nothing is parsed up front. A query asks for the facts of the modules it needs
(:meth:`Index.load`), and finds candidate files by their *text* first (:meth:`Index.containing`):
reading every file costs well under a second, parsing every file with libcst minutes. Facts come
from the content-addressed cache when present; misses are extracted in a process pool.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import replace
from typing import Callable, Iterable, Iterator

from castfind import sourcetext
from castfind.cache import Cache, content_key, encode_facts
from castfind.discover import DEFAULT_MAX_FILE_SIZE, DiscoveryError, SourceFile, discover, find_installed
from castfind.extract import extract_source
from castfind.facts import FileFacts
from castfind.types import Diagnostic

ProgressFn = Callable[[int, int], None]

# Below this many misses a process pool costs more than it saves.
_POOL_MIN = 24
# After this many text look-ups, switch to per-file identifier sets.
_SCAN_QUERIES = 12
_WORD = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")


def _is_ident_byte(b: int) -> bool:
    return b == 95 or 48 <= b <= 57 or 65 <= b <= 90 or 97 <= b <= 122


def _has_word(data: bytes, word: bytes) -> bool:
    """``word`` occurs in ``data`` with no identifier character on either side."""
    i = data.find(word)
    n = len(word)
    while i >= 0:
        before = data[i - 1] if i > 0 else 32
        after = data[i + n] if i + n < len(data) else 32
        if not _is_ident_byte(before) and not _is_ident_byte(after):
            return True
        i = data.find(word, i + 1)
    return False


Extracted = tuple[FileFacts, bytes]  # facts without module/path, and their cache encoding


def _encoded(facts: FileFacts) -> Extracted:
    bare = replace(facts, module="", path="")
    return bare, encode_facts(bare)


def _extract_job(job: tuple[str, str, str, bool]) -> Extracted:
    """Worker: extract one file; return its facts and, already encoded for the cache, their bytes.

    PERF: the worker encodes once for the cache; the main process stores those bytes as they are
    and takes the facts from the pool's own transfer (between castfind's own processes), so the
    slower data-only decoding is paid only when facts come back from the cache.
    """
    abspath, module, path, is_pkg = job
    try:
        with open(abspath, "rb") as fh:
            data = fh.read()
    except OSError as e:
        return _encoded(FileFacts("", "", is_pkg, error=(1, f"cannot read: {e.strerror}")))
    return _encoded(extract_source(data, module, path, is_pkg))


def _watch_parent(parent: int) -> None:
    """Worker initializer: exit as soon as the process that started the pool is gone.

    A scan killed with SIGKILL (or SIGTERM, whose default action skips every clean-up) cannot shut
    its pool down; an orphaned worker is re-parented, so polling the parent pid finds that out.
    """

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="castfind-parent-watch", daemon=True).start()


def _new_pool(workers: int) -> ProcessPoolExecutor:
    """Workers *spawned* fresh (they import only the extractor): they share no pages with a main
    process holding every file's bytes, and each dies with the process that started it."""
    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_watch_parent, initargs=(os.getpid(),))


def _crashed(sf: SourceFile) -> Extracted:
    return _encoded(FileFacts("", "", sf.is_package, error=(1, "castfind's parser crashed on this file"),
                              error_kind="unsupported"))


class Index:
    """Files by module, their bytes and facts (lazily), and text search over them."""

    def __init__(
        self,
        files: list[SourceFile],
        cache: Cache | None = None,
        jobs: int = 1,
        follow_installed: bool = False,
        progress: ProgressFn | None = None,
    ) -> None:
        self.files = files
        self.cache = cache
        self.jobs = max(1, jobs)
        self.follow_installed = follow_installed
        self.progress = progress
        self.by_module: dict[str, SourceFile] = {}
        for sf in files:
            self.by_module.setdefault(sf.module, sf)
        self.by_abspath = {sf.abspath: sf for sf in files}
        self._facts: dict[str, FileFacts] = {}
        self._data: dict[str, bytes] = {}
        self._keys: dict[str, str] = {}
        self._installed_tops: dict[str, bool] = {}
        self._idents: dict[str, frozenset[bytes]] = {}
        self._queries = 0
        self.diagnostics: list[Diagnostic] = []
        self.file_diagnostics: dict[str, list[Diagnostic]] = {}  # abspath → its parse diagnostics
        self.parsed = 0  # files extracted (cache misses) in this run
        self._trackers: list[set[str]] = []
        self.loaded = 0  # files whose facts were loaded, from cache or parsed

    @classmethod
    def from_roots(cls, roots: list[str], exclude: tuple[str, ...] = (), max_file_size: int | None = None,
                   **kw) -> "Index":
        skipped: list[Diagnostic] = []
        size = DEFAULT_MAX_FILE_SIZE if max_file_size is None else max_file_size
        index = cls(discover(roots, exclude, max_size=size, skipped=skipped), **kw)
        index.diagnostics.extend(skipped)
        return index

    # -- text -----------------------------------------------------------------------------------
    def data(self, sf: SourceFile) -> bytes:
        """The file's bytes (read once)."""
        d = self._data.get(sf.abspath)
        if d is None:
            try:
                with open(sf.abspath, "rb") as fh:
                    d = fh.read()
            except OSError as e:
                self.diagnostics.append(Diagnostic(sf.path, 1, f"cannot read: {e.strerror}", "read-error"))
                d = b""
            self._data[sf.abspath] = d
        return d

    def read_all(self) -> None:
        """Read every file once (cheap; lets :meth:`containing` scan text without more I/O)."""
        for sf in self.files:
            self.data(sf)

    def lines(self, sf: SourceFile) -> list[str]:
        return sourcetext.lenient_lines(self.data(sf))

    def line_text(self, sf: SourceFile, line: int) -> str:
        ls = self.lines(sf)
        return ls[line - 1].strip() if 0 < line <= len(ls) else ""

    def containing(self, names: Iterable[str], files: Iterable[SourceFile] | None = None) -> list[SourceFile]:
        """Files whose text holds any of ``names`` as a whole identifier (comments and strings count)."""
        names = [n for n in dict.fromkeys(names) if n]
        if not names:
            return []
        pool = self.files if files is None else list(files)
        self._queries += 1
        if self._queries > _SCAN_QUERIES:
            # PERF: many look-ups (a scan's call graph): per-file identifier sets beat rescanning text.
            want = {n.encode() for n in names}
            return [sf for sf in pool if not want.isdisjoint(self.identifiers(sf))]
        enc = [n.encode() for n in names]
        return [sf for sf in pool if any(_has_word(self.data(sf), n) for n in enc)]

    def identifiers(self, sf: SourceFile) -> frozenset[bytes]:
        """Every identifier-like word of the file (cached by content hash)."""
        got = self._idents.get(sf.abspath)
        if got is None:
            if not self._idents:
                self._load_identifiers()
                got = self._idents.get(sf.abspath)
            if got is None:
                got = frozenset(_WORD.findall(self.data(sf)))
                self._idents[sf.abspath] = got
        return got

    def _load_identifiers(self) -> None:
        keys = {sf.abspath: self.key(sf) for sf in self.files}
        cached = self.cache.get_idents(keys.values()) if self.cache else {}
        fresh: dict[str, bytes] = {}
        for sf in self.files:
            k = keys[sf.abspath]
            blob = cached.get(k)
            if blob is not None:
                self._idents[sf.abspath] = frozenset(blob.split(b"\n"))
            else:
                words = frozenset(_WORD.findall(self.data(sf)))
                self._idents[sf.abspath] = words
                fresh[k] = b"\n".join(sorted(words))
        if self.cache and fresh:
            self.cache.put_idents(fresh)

    # -- dependency tracking (castfind.memo) ----------------------------------------------------
    @contextmanager
    def tracking(self) -> Iterator[set[str]]:
        """Collect what is read while the block runs: files' facts (abspaths), text queries, misses."""
        deps: set[str] = set()
        self._trackers.append(deps)
        try:
            yield deps
        finally:
            self._trackers.pop()

    def note(self, dep: str) -> None:
        for t in self._trackers:
            t.add(dep)

    def note_all(self, deps: Iterable[str]) -> None:
        for t in self._trackers:
            t.update(deps)

    # -- facts ----------------------------------------------------------------------------------
    def key(self, sf: SourceFile) -> str:
        k = self._keys.get(sf.abspath)
        if k is None:
            k = content_key(self.data(sf))
            self._keys[sf.abspath] = k
        return k

    def facts_of(self, sf: SourceFile) -> FileFacts:
        if self._trackers:
            self.note(sf.abspath)
        f = self._facts.get(sf.abspath)
        if f is None:
            self.load_files([sf])
            f = self._facts[sf.abspath]
        return f

    def facts(self, module: str) -> FileFacts | None:
        """Facts of a module (parsed on first use); None when no such module is known."""
        sf = self.module_file(module)
        return None if sf is None else self.facts_of(sf)

    def load_files(self, files: Iterable[SourceFile]) -> list[FileFacts]:
        """Facts for many files at once: cache first, then extract misses (in parallel)."""
        files = list(dict.fromkeys(files))
        if self._trackers:
            self.note_all([sf.abspath for sf in files])
        todo = [sf for sf in files if sf.abspath not in self._facts]
        if todo:
            cached = self.cache.get_many(self.key(sf) for sf in todo) if self.cache else {}
            misses: list[SourceFile] = []
            for sf in todo:
                hit = cached.get(self.key(sf))
                if hit is not None:
                    self._store(sf, replace(hit, module=sf.module, path=sf.path, is_package=sf.is_package))
                else:
                    misses.append(sf)
            if misses:
                self._extract(misses)
        return [self._facts[sf.abspath] for sf in files]

    def _store(self, sf: SourceFile, facts: FileFacts) -> None:
        self._facts[sf.abspath] = facts
        self.loaded += 1
        if facts.error is not None:
            line, msg = facts.error
            if facts.error_kind == "unsupported":
                msg += " (Python accepts this file but castfind cannot analyse it: findings there may be missing; add it to --exclude to accept that)"
            else:
                msg += " (file skipped; fix it or add it to --exclude)"
            d = Diagnostic(sf.path, line, msg, facts.error_kind)
            self.diagnostics.append(d)
            self.file_diagnostics.setdefault(sf.abspath, []).append(d)

    def _extract(self, misses: list[SourceFile]) -> None:
        total = len(misses)
        jobs = [(sf.abspath, sf.module, sf.path, sf.is_package) for sf in misses]
        blobs: list[Extracted]
        if self.jobs > 1 and total >= _POOL_MIN:
            # Big files first, so one large file does not finish last on its own.
            order = sorted(range(total), key=lambda i: -len(self.data(misses[i])))
            by_i = self._extract_in_pool(misses, jobs, order)
            blobs = [by_i[i] for i in range(total)]
        else:
            blobs = []
            for n, (sf, job) in enumerate(zip(misses, jobs), 1):
                blobs.append(_encoded(extract_source(self.data(sf), job[1], job[2], job[3])))
                if self.progress:
                    self.progress(n, total)
        self.parsed += total
        to_cache = {}
        for sf, (facts, blob) in zip(misses, blobs):
            self._store(sf, replace(facts, module=sf.module, path=sf.path, is_package=sf.is_package))
            to_cache[self.key(sf)] = blob
        if self.cache:
            self.cache.put_blobs(to_cache)

    def _extract_in_pool(self, misses: list[SourceFile], jobs: list[tuple[str, str, str, bool]],
                         order: list[int], work: Callable[[tuple[str, str, str, bool]], Extracted] = _extract_job,
                         ) -> dict[int, Extracted]:
        """Extract in worker processes. A worker that dies (a parser crash) breaks the pool: the
        files then in flight are retried one at a time in a pool of their own, and a file that
        breaks that too becomes an ``unsupported`` diagnostic; the rest go on in a fresh pool."""
        by_i: dict[int, Extracted] = {}
        todo = list(order)
        chunk = 4
        while todo:
            try:
                with _new_pool(self.jobs) as pool:
                    for i, blob in zip(todo, pool.map(work, [jobs[i] for i in todo], chunksize=chunk)):
                        by_i[i] = blob
                        if self.progress:
                            self.progress(len(by_i), len(misses))
                todo = []
            except BrokenProcessPool:
                todo = [i for i in todo if i not in by_i]
                suspects, todo = todo[: self.jobs * chunk], todo[self.jobs * chunk:]
                for i in suspects:
                    try:
                        with _new_pool(1) as alone:
                            by_i[i] = alone.submit(work, jobs[i]).result()
                    except BrokenProcessPool:
                        by_i[i] = _crashed(misses[i])
        return by_i

    # -- modules --------------------------------------------------------------------------------
    def module_file(self, module: str) -> SourceFile | None:
        sf = self.by_module.get(module)
        if sf is None and self.follow_installed and module:
            if self._add_installed(module.split(".")[0]):
                sf = self.by_module.get(module)
        if sf is None and self._trackers:
            self.note("m:" + module)
        return sf

    def has_module(self, module: str) -> bool:
        return self.module_file(module) is not None

    def _add_installed(self, top: str) -> bool:
        """Index an installed package that no root holds (found without importing it)."""
        if top in self._installed_tops:
            return self._installed_tops[top]
        if any(m == top or m.startswith(top + ".") for m in self.by_module):
            self._installed_tops[top] = False
            return False
        loc = find_installed(top)
        ok = False
        if loc is not None:
            root = str(loc.parent) if loc.is_dir() else str(loc)
            try:
                found = discover([str(loc)]) if loc.is_dir() else discover([root])
            except (DiscoveryError, OSError):  # an unreadable install is skipped, as if absent
                found = []
            for sf in found:
                if sf.module == top or sf.module.startswith(top + "."):
                    sf2 = replace(sf, root=root, path=os.path.relpath(sf.abspath, root).replace(os.sep, "/"))
                    self.files.append(sf2)
                    self.by_module.setdefault(sf2.module, sf2)
                    self.by_abspath[sf2.abspath] = sf2
                    ok = True
        self._installed_tops[top] = ok
        return ok

    def is_package(self, module: str) -> bool:
        sf = self.module_file(module)
        return bool(sf and sf.is_package)

    def submodules(self, package: str) -> list[str]:
        pre = package + "."
        return [m for m in self.by_module if m.startswith(pre) and "." not in m[len(pre):]]

    def file_for_path(self, path: str) -> SourceFile | None:
        """A file by absolute path, or by path relative to one of its roots."""
        ap = os.path.abspath(path)
        if ap in self.by_abspath:
            return self.by_abspath[ap]
        p = path.replace(os.sep, "/")
        for sf in self.files:
            if sf.path == p or sf.abspath.endswith("/" + p.lstrip("./")):
                return sf
        return None

