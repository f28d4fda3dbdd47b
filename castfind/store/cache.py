"""Content-addressed cache of per-file facts, in SQLite.

The key is a hash of the file's bytes plus the extractor version, so the same content in another
root, fork or git revision is parsed once. Several castfind processes (pre-commit runs hooks in
parallel batches) may share one cache: WAL journal, a busy timeout, and one short transaction per
batch of writes. A cache that SQLite reports as corrupt is moved aside (under a name no earlier
backup has) and rebuilt, never trusted. A cache that cannot be written (a full disk, a read-only mount, no
permission) is not corrupt: it is kept as it is, read where it can be, and the run writes nothing more to
it, saying so once.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import time
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from castfind.core.versions import EXTRACTOR_VERSION
from castfind.read import codec

_SCHEMA = """
CREATE TABLE IF NOT EXISTS facts (key TEXT PRIMARY KEY, data BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS idents (key TEXT PRIMARY KEY, data BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS memo (key TEXT PRIMARY KEY, data BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS stats (key TEXT PRIMARY KEY, data BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS trees (key TEXT PRIMARY KEY, data BLOB NOT NULL);
"""

#: What a file's stat must still be for its stored content digest to be trusted (as git's index
#: and ruff's cache do): size, mtime, inode and ctime, all in nanoseconds where they are times.
Stat = tuple[int, int, int, int]
#: The shape of :meth:`Cache.get_tree`'s documents; another number is not read.
TREE_VERSION = 1
#: SQLite's primary result codes that mean the file is not a (sound) database: only these move it aside.
_CORRUPT_CODES = (11, 26)  # SQLITE_CORRUPT, SQLITE_NOTADB


def _corrupt(exc: sqlite3.Error) -> bool:
    """Does ``exc`` say the database file is damaged (not that it cannot be written or opened now)?"""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None:  # raised by the sqlite3 module itself, not by SQLite: judged by its words
        return "malformed" in str(exc) or "not a database" in str(exc)
    return code & 0xFF in _CORRUPT_CODES


def encode_facts(facts: Any) -> bytes:
    """The cache's encoding of one file's facts (:mod:`castfind.read.codec`: data only, never code)."""
    return codec.dumps(facts)


def decode_facts(blob: bytes) -> Any:
    """Facts stored by :func:`encode_facts`; raises :class:`~castfind.read.codec.CodecError` otherwise."""
    return codec.loads(blob)


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/castfind`` (``~/.cache/castfind`` when unset)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "castfind"


def content_digest(data: bytes) -> str:
    """The digest of a file's bytes (what the stat index stores)."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def content_key(data: bytes) -> str:
    """Cache key of a file's bytes for the current extractor."""
    return key_of_digest(content_digest(data))


def key_of_digest(digest: str) -> str:
    return digest + f"-v{EXTRACTOR_VERSION}"


class Cache:
    """A SQLite-backed map from content keys to encoded facts (data only: reading runs no code).

    ``notices`` collects one-line messages (a corrupt cache rebuilt, a cache that cannot be written) for the
    caller to report.

    One thread at a time, not always the one that opened it: the language server keeps a lookup's index (and its
    cache) for the next lookups and persists a scan's results later, each request in whichever worker thread
    ``asyncio.to_thread`` gives it, under the server's locks. So the connection is not bound to its thread
    (``check_same_thread=False``; Python's SQLite is built serialized). Bound, every use from another thread
    failed, the cache turned read-only for the rest of the process and each such lookup recomputed its answer
    and could not store it.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.path = self.directory / "facts.sqlite3"
        self.notices: list[str] = []
        self._conn: sqlite3.Connection | None = None
        #: Set once a write failed for want of space or permission: nothing more is written this run.
        self.read_only = False
        self._open()

    def _connect(self) -> sqlite3.Connection:
        self.directory.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=60.0, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA busy_timeout = 60000")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.executescript(_SCHEMA)
        # Touch the table so a damaged file fails here rather than mid-run.
        conn.execute("SELECT count(*) FROM meta").fetchone()
        return conn

    def _open(self) -> None:
        try:
            self._conn = self._connect()
        except sqlite3.DatabaseError as e:
            if _corrupt(e):
                self._rebuild(str(e))
            else:
                self._open_read_only(e)
        except OSError as e:  # the folder cannot be created
            self._unwritable(e.strerror or str(e))

    def _open_read_only(self, why: sqlite3.Error) -> None:
        """The cache cannot be opened for writing (full disk, read-only mount, no permission): read what it
        holds, write nothing."""
        self._unwritable(str(why))
        if not self.path.is_file():
            return
        try:
            conn = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True, timeout=60.0,
                                   isolation_level=None, check_same_thread=False)
            conn.execute("SELECT count(*) FROM meta").fetchone()
            self._conn = conn
        except sqlite3.Error:
            self._conn = None

    def _unwritable(self, why: str) -> None:
        """Write nothing more this run, and say so once."""
        if not self.read_only:
            self.read_only = True
            self.notices.append(f"{self.path}: cannot write to the cache ({why}); it is kept as it is and this run "
                                f"writes nothing to it (free space or fix its permissions; results are unaffected)")

    def _failed(self, e: sqlite3.Error) -> None:
        """A query or write failed: a damaged database is rebuilt; one that cannot be written is kept."""
        if _corrupt(e):
            self._rebuild(str(e))
        else:
            with contextlib.suppress(sqlite3.Error):
                if self._conn is not None and self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
            self._unwritable(str(e))

    def _rebuild(self, why: str) -> None:
        if self._conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()
            self._conn = None
        stamp = f"{time.strftime('%Y%m%d%H%M%S')}-{os.getpid()}"
        moved = False
        for n in range(100):  # a name no earlier backup has (two rebuilds in one second, or two processes)
            backup = f"{self.path}.corrupt-{stamp}-{n}" if n else f"{self.path}.corrupt-{stamp}"
            if not any(os.path.lexists(backup + sfx) for sfx in ("", "-wal", "-shm")):
                break
        for suffix in ("", "-wal", "-shm"):
            p = Path(str(self.path) + suffix)
            if p.exists():
                try:
                    os.link(p, backup + suffix)  # fails rather than replace a file of that name
                    p.unlink()
                    moved = True
                except FileExistsError:  # taken since the name was chosen: this file is not kept
                    p.unlink(missing_ok=True)
                except OSError:  # no hard links here: a rename to the name found free above
                    try:
                        os.rename(p, backup + suffix)
                        moved = True
                    except OSError:
                        p.unlink(missing_ok=True)
        self.notices.append(f"{self.path}: cache was corrupt ({why}); "
                            f"{'moved aside to ' + os.path.basename(backup) if moved else 'removed'} and rebuilt")
        try:
            self._conn = self._connect()
        except (sqlite3.DatabaseError, OSError) as e:  # still unusable: run without a cache
            self.notices.append(f"{self.path}: cannot open the cache ({e}); continuing without it")
            self._conn = None

    def _rows(self, columns: str, table: str, keys: Iterable[str]) -> list[tuple[Any, ...]]:
        """``columns`` of the rows of ``table`` whose key is one of ``keys`` (a damaged database is
        rebuilt: nothing found)."""
        keys = list(dict.fromkeys(keys))
        out: list[tuple[Any, ...]] = []
        if self._conn is None or not keys:
            return out
        try:
            for i in range(0, len(keys), 500):
                chunk = keys[i : i + 500]
                q = f"SELECT {columns} FROM {table} WHERE key IN ({','.join('?' * len(chunk))})"
                out += self._conn.execute(q, chunk)
        except sqlite3.DatabaseError as e:
            self._failed(e)
            return []
        return out

    def _select(self, table: str, keys: Iterable[str]) -> dict[str, bytes]:
        """Raw blobs of ``table`` for the keys present. A value stored as another SQLite type (TEXT, INTEGER,
        REAL, NULL: not written by castfind) is a damaged row: left out, so it is computed again and replaced."""
        return {k: v for k, v in self._rows("key, data", table, keys) if isinstance(v, bytes)}

    def _write(self, table: str, rows: list[tuple[str, bytes]]) -> None:
        """Store rows in one transaction (all or nothing)."""
        if self._conn is None or self.read_only or not rows:
            return
        try:
            self._conn.execute("BEGIN IMMEDIATE")
            self._conn.executemany(f"INSERT OR REPLACE INTO {table} (key, data) VALUES (?, ?)", rows)
            self._conn.execute("COMMIT")
        except sqlite3.DatabaseError as e:
            self._failed(e)

    def get_many(self, keys: Iterable[str]) -> dict[str, Any]:
        """Facts for the keys present; a row that fails to unpickle counts as missing."""
        out: dict[str, Any] = {}
        for key, blob in self._select("facts", keys).items():
            try:
                out[key] = decode_facts(blob)
            except codec.CodecError:
                continue  # a damaged row is re-extracted and overwritten
        return out

    def has_facts(self, keys: Iterable[str]) -> set[str]:
        """The keys with a facts row (not decoded: a damaged row counts, and is parsed again when read)."""
        return {k for (k,) in self._rows("key", "facts", keys)}

    def put_many(self, items: dict[str, Any]) -> None:
        """Store facts in one transaction (all or nothing)."""
        self.put_blobs({k: encode_facts(v) for k, v in items.items()})

    def put_blobs(self, items: dict[str, bytes]) -> None:
        """Store facts already encoded with :func:`encode_facts`, in one transaction."""
        self._write("facts", list(items.items()))

    def get_idents(self, keys: Iterable[str]) -> dict[str, bytes]:
        """Newline-joined identifier sets by content key (see :meth:`Index.identifiers`)."""
        out: dict[str, bytes] = {}
        for key, blob in self._select("idents", keys).items():
            try:
                out[key] = zlib.decompress(blob)
            except zlib.error:
                continue
        return out

    def put_idents(self, items: dict[str, bytes]) -> None:
        self._write("idents", [(k, zlib.compress(v, 1)) for k, v in items.items()])

    def get_memo(self, key: str) -> bytes | None:
        """The carried results of one scan configuration (see :mod:`castfind.store.memo`), or None."""
        return self._select("memo", [key]).get(key)

    def put_memo(self, key: str, data: bytes) -> None:
        """Replace one configuration's carried results in one transaction (last writer wins)."""
        self._write("memo", [(key, data)])

    def get_stats(self, paths: Iterable[str]) -> dict[str, tuple[Stat, str]]:
        """The stat index: absolute path → (stat when hashed, content digest), for the paths present."""
        out: dict[str, tuple[Stat, str]] = {}
        for path, blob in self._select("stats", paths).items():
            try:
                size, mtime, ino, ctime, digest = bytes(blob).decode("ascii").split(":")
                out[path] = ((int(size), int(mtime), int(ino), int(ctime)), digest)
            except (ValueError, UnicodeDecodeError):
                continue  # a damaged row: the file is hashed again and the row replaced
        return out

    def put_stats(self, rows: dict[str, tuple[Stat, str]]) -> None:
        """Record the stat each file had when its content digest was computed (one transaction)."""
        self._write("stats", [(path, ":".join(map(str, (*st, digest))).encode("ascii"))
                              for path, (st, digest) in rows.items()])

    def get_tree(self, base: str) -> dict[str, Any] | None:
        """The tree index of one root folder (its folders' listings, its files' stats and digests:
        :meth:`castfind.store.index.Index.from_roots`), or None when absent or unreadable."""
        blob = self._select("trees", [base]).get(base)
        if blob is None:
            return None
        try:
            doc = json.loads(zlib.decompress(blob))
        except (zlib.error, ValueError):
            return None  # a damaged row: the root is listed and stat-ed afresh, and the row replaced
        return doc if isinstance(doc, dict) and doc.get("v") == TREE_VERSION else None

    def put_tree(self, base: str, doc: dict[str, Any]) -> None:
        """Replace one root folder's tree index (one transaction; last writer wins)."""
        self._write("trees", [(base, zlib.compress(json.dumps({**doc, "v": TREE_VERSION}, separators=(",", ":"))
                                                   .encode("utf-8"), 1))])

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
