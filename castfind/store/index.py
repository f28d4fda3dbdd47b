"""Index: the discovered files, their bytes and their facts (loaded on demand).

PERF: nothing is parsed up front. A query asks for the facts of the files it needs
(:meth:`Index.load_files`), chosen by their *text* first (:mod:`castfind.store.words`,
:mod:`castfind.store.textquery`): reading every file costs well under a second, parsing every file with
libcst minutes. Facts come from the content-addressed cache when present; misses are extracted
in a process pool (:mod:`castfind.store.workers`).

What else reads files builds on this: module names (:mod:`castfind.store.modules`), identifier look-ups
(:mod:`castfind.store.words`). Every read of a file's facts is reported to :attr:`Index.observer`, a
:class:`ReadObserver` this module defines and :mod:`castfind.store.memo` installs (its dependency tracker,
which alone records dependencies); what those modules keep per index they keep themselves.
"""

from __future__ import annotations

import hashlib
import os
import time
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

from castfind.core import sourcetext
from castfind.core.types import Diagnostic
from castfind.core.versions import EXTRACTOR_VERSION
from castfind.store.cache import Cache, Stat, content_digest, content_key, key_of_digest
from castfind.store.discover import DEFAULT_MAX_FILE_SIZE, Listing, SourceFile, discover
from castfind.store.workers import Extracted, Job, ProgressFn, Workers, encoded, extract_in_pool

if TYPE_CHECKING:
    from concurrent.futures import Future

    from castfind.read.facts import FileFacts  # PERF: a warm run that loads no facts never imports them

# Below this many misses starting a process pool costs more than it saves; a kept one (:meth:`Index.parsing`)
# takes any batch of at least _KEPT_POOL_MIN.
_POOL_MIN = 24
_KEPT_POOL_MIN = 2
#: A file modified this recently when it was read may change again within the clock's granularity
#: without its stat changing ("racily clean", as git calls it): its stat is not recorded.
_RACY_NS = 2_000_000_000


T = TypeVar("T")
R = TypeVar("R")


class NotLoaded(Exception):
    """A file's facts were asked for inside :meth:`Index.in_batches` before they were parsed."""


class ReadObserver(Protocol):
    """Told what is read (:class:`castfind.store.memo.Tracker`)."""

    def read(self, deps: Iterable[str]) -> None: ...


class Index:
    """Files by absolute path, their bytes (read once) and their facts (extracted once)."""

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
        #: May installed packages that no root holds join the index (:mod:`castfind.store.modules`)?
        self.follow_installed = follow_installed
        self.progress = progress
        self.by_abspath = {sf.abspath: sf for sf in files}
        #: Told of every read of a file's facts (the memo's tracker, :meth:`castfind.store.memo.Tracker.of`); None
        #: when nothing records.
        self.observer: ReadObserver | None = None
        self._workers: Workers | None = None
        self._wanted: set[SourceFile] | None = None  # inside in_batches: the files asked for, not parsed
        #: abspath → the file and its extraction, started by :meth:`parse_ahead` and not yet asked for.
        self._ahead: dict[str, tuple[SourceFile, Future[Extracted]]] = {}
        self._facts: dict[str, FileFacts] = {}
        #: Facts taken over from the last run's index (:meth:`adopt`), stored when first asked for.
        self._adopted: dict[str, FileFacts] = {}
        self._data: dict[str, bytes] = {}
        self._keys: dict[str, str] = {}
        #: The stat index (:meth:`key`): what the cache knew, the stats taken when files were read,
        #: and the rows to record.
        self._stats: dict[str, tuple[Stat, str]] | None = None
        self._read_stat: dict[str, Stat] = {}
        self._new_stats: dict[str, tuple[Stat, str]] = {}
        #: Discovery's stat of each file (``from_roots``): compared instead of stat-ing it again.
        self._now: dict[str, Stat] = {}
        self._found_at: int | None = None  # when discovery began (ns; ``from_roots``)
        self._found_roots: tuple[str, ...] = ()  # the roots discovery walked, as typed
        self._stamp: str | None | bool = False  # :meth:`stamp`, once computed (False: not yet)
        #: Whether the files missing from ``_stats`` were looked for in the cache's stat table.
        self._stats_all = False
        #: ``from_roots`` with a cache: the root folders, their tree indexes as read, this run's listings.
        self._trees: tuple[dict[str, None], dict[str, dict], dict[str, Listing]] | None = None
        self._unchanged: bool | None = None  # :meth:`unchanged`, once known
        self._discovered = len(files)  # files found by discovery (installed packages may join later)
        self._joined: set[str] = set()  # abspaths of the files that joined later (add_files)
        self._listings: dict[str, Listing] = {}  # the stored listings read by ``from_roots``
        self._stored: dict[str, tuple[Stat, str]] = {}  # the file stats and digests they held
        #: The tree digest of the files discovery found (:meth:`note_tree_digest`), stored by :meth:`save`.
        self._tree_digest: str | None = None
        self.hashed = 0  # files whose bytes were hashed in this run (the stat index spares the rest)
        #: Files whose bytes, when read, were not the content their key (from the stat index) names: edited
        #: during the run. Their facts are cached under their bytes' own key, and no carried result is stored.
        self.raced: set[str] = set()
        self.diagnostics: list[Diagnostic] = []
        self.file_diagnostics: dict[str, list[Diagnostic]] = {}  # abspath → its parse diagnostics
        self.parsed = 0  # files extracted (cache misses) in this run
        #: Bytes extracted and the wall seconds it took (all of this index's extractions; a file started ahead
        #: is not counted, its parse having begun before the call that waits on it): the parse rate a lookup's
        #: time budget predicts with (:meth:`castfind.where.lookup._Query.rate`).
        self.parsed_bytes, self.parse_seconds = 0, 0.0
        self.loaded = 0  # files whose facts were loaded, from cache or parsed

    @classmethod
    def from_roots(cls, roots: list[str], exclude: tuple[str, ...] = (), max_file_size: int | None = None,
                   **kw) -> Index:
        """Discover the files under ``roots``. With a cache, each root folder's *tree index* (its
        folders' listings, its files' stats and content digests, stored by the last run) spares
        listing the folders whose stat is unchanged, and stat-ing each file twice: discovery's stat
        of a file is the one :meth:`key` compares. A listing is reused only for a folder whose
        (mtime, ctime, inode) is what it was, so the files found are those a fresh walk finds."""
        skipped: list[Diagnostic] = []
        size = DEFAULT_MAX_FILE_SIZE if max_file_size is None else max_file_size
        cache: Cache | None = kw.get("cache")
        bases = [str(Path(r).resolve()) for r in roots if os.path.isdir(r)] if cache is not None else []
        listings: dict[str, Listing] = {}
        known: dict[str, tuple[Stat, str]] = {}
        stored: dict[str, dict] = {}
        for base in dict.fromkeys(bases):
            assert cache is not None
            doc = cache.get_tree(base)
            if doc is not None and _read_tree(base, doc, listings, known):
                stored[base] = doc
        listed: dict[str, Listing] = {}
        now: dict[str, Stat] = {}
        found_at = time.time_ns()
        files = discover(roots, exclude, max_size=size, skipped=skipped, listings=listings, listed=listed, stats=now)
        index = cls(files, **kw)
        index.diagnostics.extend(skipped)
        index._now = now
        index._found_at, index._found_roots = found_at, tuple(roots)
        if cache is not None:
            index._listings = listings
            index._stored = known
            index._stats = dict(known)
            index._trees = (dict.fromkeys(bases), stored, listed)
            # PERF: the keys :meth:`key` would find for files whose stat is the stored one, in one pass
            # (a warm run asks every file's key for the tree digest: ~8 us a file through :meth:`key`).
            keys = index._keys
            for path, st in now.items():
                row = known.get(path)
                if row is not None and row[0] == st:
                    keys[path] = key_of_digest(row[1])
        return index

    def adopt(self, previous: Index) -> int:
        """Take over what ``previous`` (the last run's index of the same roots, in this process) holds of the
        files whose content key is unchanged: their bytes and facts (with their parse diagnostics). Returns
        how many files were taken. PERF: a warm process (:class:`castfind.api.Session`) then reads and
        decodes only what changed since. Only keys known without reading (the stat index: same size, mtime,
        inode and ctime as when hashed) are compared, so an edited file is read again.

        The stat index is the last run's too: a file whose discovery stat is the one ``previous`` hashed it at
        (a row it recorded, not a racily clean one) has the key ``previous`` found, though no persist has written
        that row yet. PERF: a session's scans between persists (the language server's saves) read only the files
        changed since the last scan, not every file changed since the last persist."""
        taken = 0
        rows = previous._new_stats, previous._stats or {}
        for sf in self.files:
            path = sf.abspath
            known = self._keys.get(path)
            if known is None and path not in previous.raced:
                st = self._now.get(path)
                row = rows[0].get(path) or rows[1].get(path)
                if st is not None and row is not None and row[0] == st:
                    known = self._keys[path] = key_of_digest(row[1])
            old = previous.by_abspath.get(path)
            if (known is None or old is None or previous._keys.get(path) != known or old.module != sf.module
                    or path in previous.raced):
                continue
            data = previous._data.get(path)
            if data is not None and path not in self._data:
                self._data[path] = data
                if path in previous._read_stat:
                    self._read_stat[path] = previous._read_stat[path]
            facts = previous._facts.get(path) or previous._adopted.get(path)
            if facts is not None and path not in self._facts:
                # Loaded (and its parse diagnostics reported) when asked for, as a cache hit is.
                self._adopted[path] = facts if old == sf else replace(facts, path=sf.path, is_package=sf.is_package)
            taken += 1
        return taken

    def holds_data(self, path: str) -> bool:
        """Are the bytes of the file at ``path`` (absolute) in memory (:meth:`data` would not read the disk)?"""
        return path in self._data

    # -- files ----------------------------------------------------------------------------------
    def add_files(self, files: Iterable[SourceFile]) -> None:
        """Files found after discovery (an installed package); a known path is kept as it is."""
        for sf in files:
            if sf.abspath not in self.by_abspath:
                self.files.append(sf)
                self.by_abspath[sf.abspath] = sf
                self._joined.add(sf.abspath)

    def discovered(self) -> list[SourceFile]:
        """The files discovery found under the roots, in its order (not those that joined later: :meth:`add_files`
        appends them)."""
        return self.files[:self._discovered]

    def joined(self, sf: SourceFile) -> bool:
        """Did ``sf`` join after discovery (:meth:`add_files`: an installed package), rather than lie in a root?"""
        return sf.abspath in self._joined

    def file_for_path(self, path: str) -> SourceFile | None:
        """A file by absolute path, or by path relative to one of its roots. A file's key is its resolved path
        (discovery resolves each root), so a path through a symlinked folder (a root given as ``.corpus/pkg``
        where ``.corpus`` is a link, as every finding's ``root`` keeps it) is resolved before it is given up."""
        ap = os.path.abspath(path)
        if ap in self.by_abspath:
            return self.by_abspath[ap]
        real = os.path.realpath(ap)
        if real in self.by_abspath:
            return self.by_abspath[real]
        p = path.replace(os.sep, "/")
        while p.startswith("./"):
            p = p[2:]
        for sf in self.files:
            if sf.path == p or sf.abspath.endswith("/" + p):
                return sf
        return None

    def report(self, deps: Iterable[str]) -> None:
        """Tell the observer what was read."""
        if self.observer is not None:
            self.observer.read(deps)

    # -- text -----------------------------------------------------------------------------------
    def data(self, sf: SourceFile) -> bytes:
        """The file's bytes (read once)."""
        d = self._data.get(sf.abspath)
        if d is None:
            try:
                d = self._read(sf.abspath)
            except OSError as e:
                self.diagnostics.append(Diagnostic(sf.path, 1, f"cannot read: {e.strerror}", "read-error"))
                d = b""
            known = self._keys.get(sf.abspath)
            if known is not None and key_of_digest(content_digest(d)) != known:
                self.raced.add(sf.abspath)
            self._data[sf.abspath] = d
        return d

    def _read(self, path: str) -> bytes:
        """The bytes of the file at ``path``, its stat noted first (a change after it shows in the next run's stat).

        PERF: ``os.open``/``os.read`` of the size the stat gives, not ``open(path, "rb").read()`` (a file object, a
        buffered reader and a stat of its own per file): a cold lookup reads every file of the roots once for its
        text searches, 8,000 on both wheels, and this halves the cost of each read (0.17 s -> 0.10 s of CPU)."""
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
        try:
            st = os.fstat(fd)
            self._read_stat[path] = _stat_of(st)
            parts = []
            want = st.st_size + 1  # one byte more: a file that grew since the stat is read to its end
            while chunk := os.read(fd, want):
                parts.append(chunk)
                want = 1 << 16
        finally:
            os.close(fd)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def read_all(self) -> None:
        """Read every file once (cheap; lets text queries scan it without more I/O)."""
        for sf in self.files:
            self.data(sf)

    def lines(self, sf: SourceFile) -> list[str]:
        return sourcetext.lenient_lines(self.data(sf))

    def line_text(self, sf: SourceFile, line: int) -> str:
        ls = self.lines(sf)
        return ls[line - 1].strip() if 0 < line <= len(ls) else ""

    def key(self, sf: SourceFile) -> str:
        """The file's content key (the cache's address for its facts).

        With a cache, a *stat index* (path → size, mtime, inode, ctime, content digest; like git's
        index) spares reading and hashing a file whose stat is what it was when it was hashed. What
        stays content-addressed is the key; only the digest of an unchanged stat is reused. As with
        git, a change that leaves size, mtime, inode *and* ctime as they were is not seen (ctime
        cannot be set back by a user; a filesystem that does not keep it weakens this); files
        modified within 2 s of being read are never recorded, so a racy write is hashed again.
        """
        k = self._keys.get(sf.abspath)
        if k is None:
            digest = self._digest_from_stat(sf)
            if digest is None:
                data = self.data(sf)
                digest = content_digest(data)
                self.hashed += 1
                st = self._read_stat.get(sf.abspath)
                if self.cache is not None and st is not None and time.time_ns() - st[1] > _RACY_NS:
                    self._new_stats[sf.abspath] = (st, digest)
                    if len(self._new_stats) >= 2048:
                        self.save_stats()
            k = key_of_digest(digest)
            self._keys[sf.abspath] = k
        return k

    def stat(self, sf: SourceFile) -> Stat | None:
        """The file's (size, mtime, inode, ctime): as discovery or the read of its bytes found it, else now; None
        when it cannot be stat-ed. PERF: discovery stats every file, so this reads nothing for them."""
        st = self._read_stat.get(sf.abspath) or self._now.get(sf.abspath)
        if st is None:
            try:
                st = _stat_of(os.stat(sf.abspath))
            except OSError:
                return None
        return st

    def _digest_from_stat(self, sf: SourceFile) -> str | None:
        if self.cache is None:
            return None
        if self._stats is None:
            self._stats = {}
        known = self._stats.get(sf.abspath)
        if known is None and not self._stats_all:
            # Files no tree index knew (a root's first run, an installed package): the stat table.
            self._stats_all = True
            self._stats.update(self.cache.get_stats(f.abspath for f in self.files if f.abspath not in self._stats))
            known = self._stats.get(sf.abspath)
        if known is None:
            return None
        st = self.stat(sf)  # bytes read already are judged by the stat they had when read
        return known[1] if st is not None and st == known[0] else None

    def save_stats(self) -> None:
        """Record the stats of the files hashed so far (one transaction; a no-op without a cache)."""
        if self.cache is not None and self._new_stats:
            self.cache.put_stats(self._new_stats)
            if self._stats is not None:
                self._stats.update(self._new_stats)
            self._new_stats = {}

    def save(self) -> None:
        """At the end of a run: the stat index (:meth:`save_stats`) and each root folder's tree index,
        written only when it changed (a warm run of an unchanged tree writes nothing)."""
        self.save_stats()
        if self.cache is None or self._trees is None:
            return
        bases, stored, listed = self._trees
        known, now = self._stats or {}, self._now
        digest = self._tree_digest
        mark = [sorted(bases), EXTRACTOR_VERSION, digest] if digest is not None else None
        # The files whose digest is known for the stat discovery found (PERF: by the rows known, fewer than the
        # files after a lookup, which hashes only what it read).
        files = {p: (st, row[1]) for p, row in known.items() if (st := now.get(p)) is not None and row[0] == st}
        # PERF: a warm run that reused every stored listing and knows the digests they stored, no more: nothing
        # to write (unless the tree digest was computed and is not stored yet).
        if (set(stored) == set(bases) and self._listings_reused() and files == self._stored
                and (mark is None or all(stored[b].get("digest") == mark for b in bases))):
            return
        for base in bases:
            doc = _tree_doc(base, listed, files)
            if mark is not None:
                doc["digest"] = mark
            if doc != {k: v for k, v in stored.get(base, {}).items() if k != "v"}:
                self.cache.put_tree(base, doc)

    def unchanged(self) -> bool:
        """Did discovery find exactly the tree the stored tree indexes describe (every root folder had
        one, every listing was reused, every file's stat is the stored one, no file more or less)?"""
        if self._unchanged is None:
            if self._trees is None:
                self._unchanged = False
            else:
                bases, stored, listed = self._trees
                self._unchanged = (
                    set(stored) == set(bases) and self._listings_reused()
                    and all(self._stored.get(p, _NONE)[0] == st for p, st in self._now.items())
                    and len(self._now) == len(self._stored))
        return self._unchanged

    def _listings_reused(self) -> bool:
        """Did discovery reuse every folder listing the stored tree indexes hold, and list no other folder?"""
        assert self._trees is not None
        listed = self._trees[2]
        return len(listed) == len(self._listings) and all(listed.get(f) is ls for f, ls in self._listings.items())

    def stamp(self) -> str | None:
        """A digest of the tree discovery found: every file's root, path, module name and stat (size, mtime,
        inode, ctime). None when one is not known, or was changed less than 2 s before discovery began (a
        racily fresh stat, as the stat index never records: a write in the same clock tick would not show).

        Two indexes with the same stamp found the same files with the same stats, so a result stored with one
        (:func:`castfind.store.memo.store_for_reads`) stands for the other (:meth:`found_stamp`) without a check
        file by file. PERF: a few milliseconds on both wheels, against ~60 ms for those checks."""
        if self._stamp is False:
            self._stamp = self._compute_stamp()
        return self._stamp  # type: ignore[return-value]

    def _compute_stamp(self) -> str | None:
        files, now, found_at = self.discovered(), self._now, self._found_at
        if found_at is None or not files or len(now) != len(files):
            return None  # not found by discovery, or a file given as a root (not stat-ed by discovery)
        # PERF: discovery's stats in its walk order, hashed as machine integers (~5 ms on both wheels, where a
        # row per file took 20 ms). The roots as typed, in order, with the files' paths name each file's root.
        try:
            stats = array("q", chain.from_iterable(now.values()))
        except OverflowError:  # an inode number past 2**63
            return None
        fresh = found_at - _RACY_NS
        if max(stats[1::4]) > fresh or max(stats[3::4]) > fresh:
            return None
        h = hashlib.blake2b(repr(self._found_roots).encode("utf-8", "surrogateescape"), digest_size=16)
        for text in ("\0".join(now), "\0".join([sf.module for sf in files])):
            h.update(b"\1")
            h.update(text.encode("utf-8", "surrogateescape"))
        h.update(stats.tobytes())
        return h.hexdigest()

    def found_stamp(self, stamp: object) -> bool:
        """Does this index hold the tree whose :meth:`stamp` is ``stamp``, no file joined since discovery (an
        installed package's files are not in it)?"""
        return (isinstance(stamp, str) and len(self.files) == self._discovered and self.stamp() == stamp)

    def note_tree_digest(self, digest: str) -> None:
        """``digest`` is the tree digest (:func:`castfind.store.memo.tree_digest`) of the files the index holds now:
        :meth:`save` stores it with the tree indexes (for :meth:`stored_tree_digest`) when they are the files
        discovery found (no installed package joined since)."""
        if len(self.files) == self._discovered:
            self._tree_digest = digest

    def stored_tree_digest(self) -> str | None:
        """The tree digest (:func:`castfind.store.memo.tree_digest`) stored with the tree indexes by the run that
        computed it, when discovery found that very tree (:meth:`unchanged`) and no file joined since;
        else None. PERF: a warm run then skips sorting and hashing a row per file (~30 ms on both wheels)."""
        if self._trees is None or len(self.files) != self._discovered or not self.unchanged():
            return None
        bases, stored, _ = self._trees
        marks = [stored[b].get("digest") for b in bases]
        first = marks[0] if marks else None
        if (isinstance(first, list) and len(first) == 3 and first[:2] == [sorted(bases), EXTRACTOR_VERSION]
                and isinstance(first[2], str) and all(m == first for m in marks)):
            return first[2]
        return None

    # -- facts ----------------------------------------------------------------------------------
    def facts_of(self, sf: SourceFile) -> FileFacts:
        self.report((sf.abspath,))
        f = self._facts.get(sf.abspath)
        if f is None:
            self.load_files([sf])
            f = self._facts[sf.abspath]
        return f

    def load_files(self, files: Iterable[SourceFile]) -> list[FileFacts]:
        """Facts for many files at once: cache first, then extract misses (in parallel).

        Inside :meth:`in_batches` a miss is not parsed: it is noted and :class:`NotLoaded` is raised.
        """
        files = list(dict.fromkeys(files))
        misses = self.load_known(files)
        if misses and self._wanted is not None:
            self._wanted.update(misses)
            raise NotLoaded
        if misses:
            self._extract(misses)
        self.save_stats()
        return [self._facts[sf.abspath] for sf in files]

    def load_known(self, files: Iterable[SourceFile]) -> list[SourceFile]:
        """Load the facts of ``files`` that are in memory or in the cache; return the others (those
        that would have to be parsed), parsing nothing."""
        files = list(dict.fromkeys(files))
        self.report(sf.abspath for sf in files)
        todo = [sf for sf in files if sf.abspath not in self._facts]
        if self._adopted and todo:
            for sf in todo:
                adopted = self._adopted.pop(sf.abspath, None)
                if adopted is not None:
                    self._store(sf, adopted)
            todo = [sf for sf in todo if sf.abspath not in self._facts]
        misses: list[SourceFile] = []
        if todo:
            cached = self.cache.get_many(self.key(sf) for sf in todo) if self.cache else {}
            for sf in todo:
                hit = cached.get(self.key(sf))
                if hit is not None:
                    self._store(sf, replace(hit, module=sf.module, path=sf.path, is_package=sf.is_package))
                else:
                    misses.append(sf)
        return misses

    def _store(self, sf: SourceFile, facts: FileFacts) -> None:
        self._facts[sf.abspath] = facts
        self.loaded += 1
        if facts.error is not None:
            line, msg = facts.error
            if facts.error_kind == "unsupported":
                msg += (" (Python accepts this file but castfind cannot analyse it: findings there may be missing;"
                        " add it to --exclude to accept that)")
            else:
                msg += " (file skipped; fix it or add it to --exclude)"
            d = Diagnostic(sf.path, line, msg, facts.error_kind)
            self.diagnostics.append(d)
            self.file_diagnostics.setdefault(sf.abspath, []).append(d)

    def in_batches(self, items: Sequence[T], compute: Callable[[T], R]) -> list[R]:
        """``[compute(item) for item in items]``, with the files they need parsed in batches.

        PERF: a computation that asks for one file's facts after another (resolving the callees of a
        file's calls) would parse them one at a time on the main process. Here a file it needs that is
        neither in memory nor in the cache stops that item (:class:`NotLoaded`); the files every stopped
        item asked for are parsed together (in the workers of :meth:`parsing`), and the stopped items run
        again, until none stops. ``compute`` must leave nothing behind when stopped: the memo's steps and
        the tracker's values store only what finished.
        """
        out: dict[int, R] = {}
        todo = list(range(len(items)))
        outer = self._wanted
        while todo:
            wanted: set[SourceFile] = set()
            stopped: list[int] = []
            self._wanted = wanted
            try:
                for i in todo:
                    try:
                        out[i] = compute(items[i])
                    except NotLoaded:
                        stopped.append(i)
            finally:
                self._wanted = outer
            if stopped:
                if outer is not None:  # a batch inside a batch: the outer one parses
                    outer.update(wanted)
                    raise NotLoaded
                self.load_files(sorted(wanted, key=lambda sf: sf.abspath))
            todo = stopped
        return [out[i] for i in range(len(items))]

    @contextmanager
    def parsing(self) -> Iterator[None]:
        """Keep one pool of workers for every file parsed inside the block (with ``jobs`` > 1)."""
        if self.jobs < 2 or self._workers is not None:
            yield
            return
        self._workers = Workers(self.jobs)
        try:
            yield
        finally:
            for _, fut in self._ahead.values():  # started and never asked for (the block raised)
                fut.cancel()
            self._ahead.clear()
            self._workers.close()
            self._workers = None

    def parse_ahead(self, files: Iterable[SourceFile]) -> None:
        """Start extracting ``files`` in the kept pool (:meth:`parsing`) and return at once; a later
        :meth:`load_files` takes their facts from there. Only for files that will certainly be loaded.

        PERF: a cold scan's main process works alone for a quarter of its time (getter inference, the
        first handoffs) while the workers idle; files known early (the candidates) fill that time. A
        batch asked for meanwhile goes first: the files started ahead that are still queued are taken
        back, the batch is parsed, and they are started again (:meth:`_extract`). Files in memory or in
        the cache are not started; without a kept pool this does nothing.
        """
        if self._workers is None:
            return
        todo = [sf for sf in dict.fromkeys(files) if sf.abspath not in self._facts and sf.abspath not in self._ahead
                and sf.abspath not in self._adopted]
        if self.cache and todo:
            have = self.cache.has_facts(self.key(sf) for sf in todo)
            todo = [sf for sf in todo if self.key(sf) not in have]
        self._start_ahead(todo)

    def _start_ahead(self, todo: list[SourceFile]) -> None:
        """Start ``todo`` (cache misses, none in memory or started) in the kept pool, big files first."""
        from concurrent.futures.process import BrokenProcessPool  # PERF: only where a pool runs

        if self._workers is None or not todo:
            return
        todo = sorted(todo, key=lambda sf: -len(self.data(sf)))  # as in a batch
        try:
            started = self._workers.start([self._job(sf) for sf in todo])
        except (BrokenProcessPool, RuntimeError):  # a pool that cannot take work: parsed when asked for
            return
        self._ahead.update((sf.abspath, (sf, fut)) for sf, fut in zip(todo, started, strict=True))

    def _extract(self, misses: list[SourceFile]) -> None:
        """Extract ``misses`` and store their facts (and their cache rows), in their order."""
        started = time.monotonic()
        # The files started ahead and still queued wait behind this batch: taken back now, started again after.
        queued = [sf for sf, fut in self._ahead.values() if fut.cancel()]
        for sf in queued:
            del self._ahead[sf.abspath]
        running = {sf.abspath: self._ahead.pop(sf.abspath)[1] for sf in misses if sf.abspath in self._ahead}
        got: dict[str, Extracted] = {}
        now = [sf for sf in misses if sf.abspath not in running]
        if now:
            got.update(zip((sf.abspath for sf in now), self._extract_now(now), strict=True))
        broke: set[str] = set()
        if running:
            from concurrent.futures import as_completed  # PERF: only where a pool runs

            path_of = {fut: p for p, fut in running.items()}
            for n, fut in enumerate(as_completed(path_of), 1):  # as they finish, for the progress bar
                try:
                    got[path_of[fut]] = fut.result()
                except Exception:  # noqa: BLE001 -- a broken pool (a parser crash): parsed again below
                    broke.add(path_of[fut])
                if self.progress:
                    self.progress(n, len(path_of))
        failed = [sf for sf in misses if sf.abspath in broke]
        if failed:  # through the batch path, which isolates a file that crashes its worker
            got.update(zip((sf.abspath for sf in failed), self._extract_now(failed), strict=True))
        self.parsed += len(misses)
        self.parsed_bytes += sum(len(self.data(sf)) for sf in misses if sf.abspath not in running)
        self.parse_seconds += time.monotonic() - started
        to_cache = {}
        for sf in misses:
            facts, blob = got[sf.abspath]
            self._store(sf, replace(facts, module=sf.module, path=sf.path, is_package=sf.is_package))
            # Stored under the key of the bytes extracted (self.data: in this process and in the workers).
            key = content_key(self.data(sf)) if sf.abspath in self.raced else self.key(sf)
            to_cache[key] = blob
        if self.cache:
            self.cache.put_blobs(to_cache)
        self._start_ahead([sf for sf in queued if sf.abspath not in self._facts])  # known misses: no cache query

    def _extract_now(self, misses: list[SourceFile]) -> list[Extracted]:
        """Extract ``misses`` (in their order): in the workers when the batch is big enough for them, else
        in this process."""
        total = len(misses)
        jobs: list[Job] = [self._job(sf) for sf in misses]
        blobs: list[Extracted]
        kept = self._workers
        if (kept is not None and total >= _KEPT_POOL_MIN) or (self.jobs > 1 and total >= _POOL_MIN):
            # Big files first, so one large file does not finish last on its own.
            order = sorted(range(total), key=lambda i: -len(self.data(misses[i])))
            by_i = extract_in_pool(jobs, order, kept or self.jobs, self.progress)
            blobs = [by_i[i] for i in range(total)]
        else:
            from castfind.read.extract import extract_source  # PERF: libcst only when something is parsed

            blobs = []
            for n, job in enumerate(jobs, 1):
                blobs.append(encoded(extract_source(*job)))
                if self.progress:
                    self.progress(n, total)
        return blobs

    def _job(self, sf: SourceFile) -> Job:
        """What a worker extracts: the bytes this process read (and keyed), never the path to read again."""
        return (self.data(sf), sf.module, sf.path, sf.is_package)


def _stat_of(st: os.stat_result) -> Stat:
    return (st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)


_NONE: tuple[None, None] = (None, None)


def _read_tree(base: str, doc: dict, listings: dict[str, Listing], known: dict[str, tuple[Stat, str]]) -> bool:
    """Add a stored tree index's listings and file digests (absolute paths) to ``listings`` and
    ``known``; False, adding nothing, for a document of another shape."""
    top = os.path.join(base, "")
    try:
        got_dirs = {(base if rel == "" else top + rel): Listing((int(m), int(c), int(i)), tuple(map(str, ds)),
                                                                tuple(map(str, fs)), bool(v), bool(init))
                    for rel, (m, c, i, v, init, ds, fs) in doc["dirs"].items()}
        # PERF: JSON gives ints and strings already; a row of other types (a damaged or forged document)
        # makes the whole document unusable, checked in one pass instead of converting every field.
        got_files = {top + rel: ((z, m, i, c), d) for rel, (z, m, i, c, d) in doc["files"].items()}
        if not all(type(d) is str and type(z) is int and type(m) is int and type(i) is int and type(c) is int
                   for (z, m, i, c), d in got_files.values()):
            return False
    except (KeyError, TypeError, ValueError, AttributeError):
        return False
    listings.update(got_dirs)
    known.update(got_files)
    return True


def _tree_doc(base: str, listed: dict[str, Listing], files: dict[str, tuple[Stat, str]]) -> dict:
    """One root folder's tree index: the listings of the folders under it and the stat and content
    digest of its files (root-relative), in the JSON shape :func:`_read_tree` reads."""
    top = os.path.join(base, "")
    cut = len(top)
    dirs = {("" if f == base else f[cut:]): [*ls.stat, ls.venv, ls.has_init, list(ls.dirs), list(ls.files)]
            for f, ls in listed.items() if f == base or f.startswith(top)}
    return {"dirs": dirs, "files": {p[cut:]: [*st, d] for p, (st, d) in files.items() if p.startswith(top)}}
