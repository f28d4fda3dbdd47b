"""Workers: extract many files' facts in a pool of spawned processes that survives a parser crash.

PERF: each worker encodes its facts once for the cache; the main process stores those bytes as
they are and takes the facts themselves from the pool's own transfer (between castfind's own
processes), so the data-only decoding (:mod:`castfind.read.codec`) is paid by no one on a cold run. The
facts sent are the ones the bytes encode (the codec round-trips them exactly: tests check it on
every batch), so a later run reads back equal facts. Decoding them in the worker instead, to send
interned strings, cost a sixth of a worker's time (both wheels: 165 -> 145 s of worker CPU without
it) for a fifth less memory of facts in the main process (its peak: ~680 -> ~760 MB)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from castfind.store.cache import encode_facts

if TYPE_CHECKING:
    from concurrent.futures import Future, ProcessPoolExecutor

    from castfind.read.facts import FileFacts

#: ``(the file's bytes, module, path in root, is a package)``: what a worker needs to extract a file. The
#: bytes are the ones the main process read and keyed: a worker never opens the file (an edit between the
#: two reads would store one content's facts under the other's key).
Job = tuple[bytes, str, str, bool]
#: Facts without module/path (the cache stores them content-addressed), and their cache encoding.
Extracted = tuple["FileFacts", bytes]
ProgressFn = Callable[[int, int], None]

#: Files a worker takes at a time.
_CHUNK = 4


def encoded(facts: FileFacts) -> Extracted:
    bare = replace(facts, module="", path="")
    return bare, encode_facts(bare)


def extract_job(job: Job) -> Extracted:
    """Worker: extract one file; return its facts and, already encoded for the cache, their bytes."""
    # PERF: libcst (through extract) is imported only where files are parsed; a warm run never needs it.
    from castfind.read.extract import extract_source

    data, module, path, is_pkg = job
    return encoded(extract_source(data, module, path, is_pkg))


def crashed(is_package: bool) -> Extracted:
    """What a file that kills every worker it is given becomes."""
    from castfind.read.facts import FileFacts

    return encoded(FileFacts("", "", is_package, error=(1, "castfind's parser crashed on this file"),
                             error_kind="unsupported"))


#: The cyclic collector's thresholds in a worker. PERF: parsing a file allocates a million nodes, so the
#: default (a young collection every 700 allocations, an older one every 10 of those) spends ~7% of a
#: worker's time walking a tree that is all alive until the file is done; with these, ~3% (120 sampled
#: sglang files: 6.86 s -> 6.50 s). Cyclic garbage is still collected, only less often.
WORKER_GC_THRESHOLDS = (100_000, 50, 100)


def _init_worker(parent: int) -> None:
    """Worker initializer: the collector's thresholds for parsing, and the parent watch."""
    import gc

    gc.set_threshold(*WORKER_GC_THRESHOLDS)
    _watch_parent(parent)


def _watch_parent(parent: int) -> None:
    """Exit the worker as soon as the process that started the pool is gone.

    A scan killed with SIGKILL (or SIGTERM, whose default action skips every clean-up) cannot shut
    its pool down; an orphaned worker is re-parented, so polling the parent pid finds that out.
    """

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="castfind-parent-watch", daemon=True).start()


def new_pool(workers: int) -> ProcessPoolExecutor:
    """Workers *spawned* fresh (they import only the extractor): they share no pages with a main
    process holding every file's bytes, and each dies with the process that started it."""
    # PERF: multiprocessing and concurrent.futures only when files are parsed in a pool (a warm run never).
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_init_worker, initargs=(os.getpid(),))


class Workers:
    """A pool of extraction workers kept for the length of one scan (:meth:`castfind.store.index.Index.parsing`).

    PERF: spawning a worker costs about a second (a fresh interpreter importing libcst), and a cold scan
    parses in a dozen batches (the candidates, getter inference, each call-graph level), many of them
    small: a pool started once takes even a batch of two files off the main process.
    """

    def __init__(self, workers: int, work: Callable[[Job], Extracted] = extract_job) -> None:
        self.workers = workers
        self.work = work  # what a worker runs on a job (tests give one that crashes)
        self._pool: ProcessPoolExecutor | None = None

    def pool(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = new_pool(self.workers)
        return self._pool

    def start(self, jobs: list[Job]) -> list[Future[Extracted]]:
        """Submit ``jobs`` to the pool in order and return at once; each future holds a job's result or the
        error that ended it (a broken pool). Raises when the pool cannot take work."""
        pool = self.pool()
        return [pool.submit(self.work, job) for job in jobs]

    def discard(self) -> None:
        """Drop a broken pool (the next :meth:`pool` starts a fresh one)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None


def extract_in_pool(jobs: list[Job], order: list[int], workers: int | Workers, progress: ProgressFn | None = None,
                    work: Callable[[Job], Extracted] | None = None) -> dict[int, Extracted]:
    """Extract ``jobs`` (taken in ``order``) in worker processes; job number → its result.

    ``workers``: a count (a pool is started for this call and shut down after it) or a kept
    :class:`Workers`. A worker that dies (a parser crash) breaks the pool: the jobs then in flight are
    retried one at a time in a pool of their own, and one that breaks that too becomes an
    ``unsupported`` file (:func:`crashed`); the rest go on in a fresh pool.
    """
    from concurrent.futures.process import BrokenProcessPool

    own = not isinstance(workers, Workers)
    kept = Workers(workers) if isinstance(workers, int) else workers
    work = work or kept.work
    # Small batches go out a file at a time, so both workers get some.
    chunk = max(1, min(_CHUNK, len(order) // (kept.workers * 8)))
    by_i: dict[int, Extracted] = {}
    todo = list(order)
    try:
        while todo:
            try:
                for i, blob in zip(todo, kept.pool().map(work, [jobs[i] for i in todo], chunksize=chunk), strict=True):
                    by_i[i] = blob
                    if progress:
                        progress(len(by_i), len(jobs))
                todo = []
            except BrokenProcessPool:
                kept.discard()
                todo = [i for i in todo if i not in by_i]
                suspects, todo = todo[: kept.workers * chunk], todo[kept.workers * chunk:]
                for i in suspects:
                    try:
                        with new_pool(1) as alone:
                            by_i[i] = alone.submit(work, jobs[i]).result()
                    except BrokenProcessPool:
                        by_i[i] = crashed(jobs[i][3])
    finally:
        if own:
            kept.close()
    return by_i

