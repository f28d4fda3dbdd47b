"""castfind.core.heap: the survivors of full collections are frozen while a scan runs, and given back after."""

from __future__ import annotations

import gc

import pytest

from castfind.core.heap import survivors_frozen


class _Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the cyclic collector frees it


@pytest.fixture(autouse=True)
def _nothing_frozen(monkeypatch):
    from castfind.core import heap

    monkeypatch.setattr(heap, "_froze", False, raising=False)
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_a_full_collection_inside_freezes_its_survivors_and_the_exit_gives_them_back() -> None:
    keep = [_Node() for _ in range(100)]
    with survivors_frozen():
        assert gc.get_freeze_count() == 0  # nothing before the first full collection
        gc.collect()
        assert gc.get_freeze_count() >= len(keep)  # the survivors, out of the next collections' walk
    assert gc.get_freeze_count() == 0
    assert _Node not in {type(o) for o in gc.garbage}


def test_cyclic_garbage_frozen_during_the_run_is_reclaimed_after_it() -> None:
    import weakref

    with survivors_frozen():
        node = _Node()
        ref = weakref.ref(node)
        gc.collect()  # node survives (still referenced) and is frozen
        del node
        gc.collect()  # unreachable now, but frozen: not reclaimed while the run lasts
        assert ref() is not None
    gc.collect()
    assert ref() is None


def test_young_collections_freeze_nothing_and_nesting_engages_once() -> None:
    with survivors_frozen():
        with survivors_frozen():
            gc.collect(0)
            gc.collect(1)
            assert gc.get_freeze_count() == 0
            gc.collect()
            assert gc.get_freeze_count() > 0
        assert gc.get_freeze_count() > 0  # the inner exit leaves the outer run's freeze alone
    assert gc.get_freeze_count() == 0


def test_a_process_that_froze_objects_itself_is_left_alone() -> None:
    gc.freeze()
    mine = gc.get_freeze_count()
    with survivors_frozen():
        gc.collect()
        assert gc.get_freeze_count() == mine
    assert gc.get_freeze_count() == mine  # not unfrozen behind its back


def test_a_parsing_worker_runs_with_the_collector_thresholds_set_for_parsing() -> None:
    from castfind.store.workers import WORKER_GC_THRESHOLDS, new_pool

    assert WORKER_GC_THRESHOLDS[0] > gc.get_threshold()[0]  # fewer young collections than the default
    with new_pool(1) as pool:
        assert pool.submit(gc.get_threshold).result() == WORKER_GC_THRESHOLDS


def test_settle_reclaims_cycles_and_freezes_the_survivors_but_not_inside_a_scan():
    import gc
    import weakref

    from castfind.core.heap import settle, survivors_frozen

    class Node:
        pass

    assert gc.get_freeze_count() == 0
    try:
        kept, cycle = Node(), Node()
        cycle.me = cycle  # type: ignore[attr-defined]
        gone = weakref.ref(cycle)
        del cycle
        settle()
        assert gone() is None  # the cycle was collected
        assert gc.get_freeze_count() > 0 and kept is not None
        gc.unfreeze()
        with survivors_frozen():
            settle()
            assert gc.get_freeze_count() == 0  # a scan's own freezing is left alone
    finally:
        gc.unfreeze()


def test_freeze_all_freezes_everything_at_once_but_not_inside_a_scan():
    from castfind.core.heap import freeze_all

    keep = [_Node() for _ in range(100)]
    with survivors_frozen():
        freeze_all()
        assert gc.get_freeze_count() == 0  # a scan's own freezing is left alone
    freeze_all()
    assert gc.get_freeze_count() >= len(keep)


@pytest.mark.parametrize("between", ["settle", "freeze_all"])
def test_a_scan_after_the_heap_was_frozen_between_requests_does_not_count_the_frozen_objects(between, monkeypatch):
    """gc.get_freeze_count walks every frozen object (a second on a server warm on both wheels): a scan that
    follows a request's settle or freeze_all knows the heap is frozen, leaves it so and counts nothing."""
    from castfind.core import heap

    keep = [_Node() for _ in range(100)]
    getattr(heap, between)()
    frozen = gc.get_freeze_count()
    assert frozen >= len(keep)
    counted: list[int] = []
    real = gc.get_freeze_count
    monkeypatch.setattr(gc, "get_freeze_count", lambda: counted.append(1) or real())
    with survivors_frozen():
        gc.collect()
    monkeypatch.undo()
    assert counted == []
    assert gc.get_freeze_count() >= len(keep)  # not unfrozen behind the server's back
def test_the_collector_is_paused_while_a_file_is_parsed_and_enabled_again_after_a_parse_that_raises(monkeypatch):
    import castfind.read.extract as extract

    seen: list[bool] = []

    def walk_that_breaks(tree, walker):
        seen.append(gc.isenabled())
        raise RuntimeError("a walker bug")

    monkeypatch.setattr(extract, "walk", walk_that_breaks)
    assert gc.isenabled()
    with pytest.raises(RuntimeError, match="a walker bug"):
        extract.extract_source(b"x = 1\n", "m", "m.py", False)
    assert seen == [False]  # paused during the parse and walk
    assert gc.isenabled()  # and back on although it raised


def test_collector_paused_nests_across_threads_and_leaves_a_collector_disabled_by_someone_else_off():
    import threading

    from castfind.core.heap import collector_paused

    inside, leave = threading.Event(), threading.Event()
    states: list[bool] = []

    def other() -> None:
        with collector_paused():
            inside.set()
            leave.wait(5)

    t = threading.Thread(target=other)
    with collector_paused():
        t.start()
        assert inside.wait(5)
        with collector_paused():
            states.append(gc.isenabled())
        states.append(gc.isenabled())
    states.append(gc.isenabled())  # the other thread is still inside: still paused
    leave.set()
    t.join(5)
    states.append(gc.isenabled())  # the last block out enables it again
    assert states == [False, False, False, True]

    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()  # disabled by someone else: stays so
    finally:
        gc.enable()
