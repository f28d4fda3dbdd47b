"""The time budget of ``where``: the definition comes first and whole, the clock bounds the rest and names
what it left, and a star import is parsed only when its module's code could bind the name."""

from __future__ import annotations

from pathlib import Path

import pytest

from castfind.analysis.resolve import Clock
from castfind.core.sourcetext import may_bind
from castfind.store.discover import discover
from castfind.store.index import Index
from castfind.store.modules import OutOfTime
from castfind.where.lookup import _PARSE_RATE_GUESS, _Query, where

ROOT = Path(__file__).resolve().parent.parent / "fixtures" / "where_budget"


def _index() -> Index:
    return Index(discover([str(ROOT)]), jobs=1)


def test_a_lookup_out_of_time_still_answers_the_definition_and_names_what_it_skipped():
    full = where(_index(), "relay.Blender", seconds=0)
    assert [(d.qualname, d.kind) for d in full.definitions] == [("relay.blend.Blender", "class")]
    assert [(c.path, c.line) for c in full.call_sites] == [("relay/use_a.py", 5), ("relay/use_b.py", 5)]
    assert full.unresolved == () and not full.stats["time_out"]
    cut = where(_index(), "relay.Blender", seconds=1e-9)
    # The chain through the star imports and the lazy table is resolved whatever the clock says ...
    assert cut.definitions == full.definitions
    assert cut.stats["time_out"]
    # ... and the searches it cut (aliases, call sites) are named, with how to search them all.
    assert cut.unresolved and all("time budget" in u.reason and "--time-budget 0" in u.reason for u in cut.unresolved)
    assert {u.path for u in cut.unresolved} <= {"relay/use_a.py", "relay/use_b.py"}
    assert set(cut.call_sites) <= set(full.call_sites)


def test_a_module_whose_parse_could_end_past_the_budget_is_not_begun(monkeypatch: pytest.MonkeyPatch):
    # A parse cannot be stopped halfway, and one module may parse at half the rate seen so far: a module the
    # resolver needs is begun only with twice its predicted time left. Refusing it cuts the answer but leaves
    # the budget running for smaller modules, and names the module among what the budget left.
    index = _index()
    q = _Query(index, "relay.Blender", clock=Clock(10.0))
    big, small = (index.file_for_path(str(ROOT / "relay" / name)) for name in ("blend.py", "use_a.py"))
    assert big is not None and small is not None
    monkeypatch.setattr(q, "rate", lambda: len(index.data(big)) / 6.0)  # 6 s predicted: 12 s > the 10 s left
    assert not q.r.modules.guard(big)  # before the definitions are found only a spent clock refuses
    q.sized = True
    assert q.r.modules.guard(big) and q.clock.out and not q.clock.spent()
    assert not q.r.modules.guard(small)  # 83 bytes: under 2 s predicted
    with pytest.raises(OutOfTime):
        q.r.modules.facts("relay.blend")
    assert q.r.modules.facts("relay.use_a") is not None
    left = [u for u in q.budget_unresolved() if "needed to resolve a name" in u.reason]
    assert [u.path for u in left] == ["relay/blend.py"] and "--time-budget 0" in left[0].reason


def test_the_parse_rate_is_measured_on_every_extraction_of_the_index():
    index = _index()
    assert (index.parsed_bytes, index.parse_seconds) == (0, 0.0)
    files = index.files
    index.load_files(files)
    assert index.parsed_bytes == sum(len(index.data(sf)) for sf in files) and index.parse_seconds > 0


def test_a_lookup_measures_its_own_parse_rate_not_the_indexs_past():
    # A kept index (the language server's) may have parsed a scan in a pool of workers, twice as fast as a
    # lookup's own parses: a lookup starts from the guess and counts only what it parsed.
    index = _index()
    index.parsed_bytes, index.parse_seconds = 10**9, 1.0
    q = _Query(index, "relay.Blender", clock=Clock(10.0))
    assert q.rate() == _PARSE_RATE_GUESS
    index.parsed_bytes, index.parse_seconds = 10**9 + 50_000, 1.5
    assert q.rate() == 100_000.0


def test_a_star_import_of_a_module_that_only_mentions_the_name_in_prose_is_not_parsed():
    index = _index()
    res = where(index, "relay.Blender", seconds=0)
    assert [d.qualname for d in res.definitions] == ["relay.blend.Blender"]
    helpers = index.file_for_path(str(ROOT / "relay" / "_helpers.py"))
    assert helpers is not None and index.load_known([helpers]) == [helpers]  # never parsed
    # The look-alike: a star-imported module whose __all__ lists the name binds it.
    mixer = where(_index(), "relay.Mixer", seconds=0)
    assert [(d.qualname, d.kind) for d in mixer.definitions] == [("relay._names.Mixer", "function")]


@pytest.mark.parametrize(("source", "binds"), [
    (b'"""See Thing."""\n# Thing is elsewhere\nx = "a Thing"\n', False),
    (b"def f():\n    '''Returns a :class:`Thing`.'''\n", False),
    (b"Things = 1\nThing_ = 2\n", False),
    (b"class Thing:\n    pass\n", True),
    (b"Thing = make()\n", True),
    (b"from .core import Thing\n", True),
    (b'__all__ = ["Thing"]\n', True),
    (b"setattr(mod, 'Thing', 1)\n", True),
    (b"from .core import *\n", True),  # may bring it from elsewhere
    (b'"""Thing."""\nx = (\n', True),  # the tokenizer refuses it: the parse decides
])
def test_may_bind_is_false_only_when_no_code_names_it(source: bytes, binds: bool):
    assert may_bind(source, "Thing") is binds


def _run(args: list[str]) -> tuple[int | None, str]:
    """(exit code, stdout) of the quick path (None: it did not answer) or of the full command line."""
    import io
    from contextlib import redirect_stderr, redirect_stdout

    from castfind import quick

    out = io.StringIO()
    with redirect_stdout(out), redirect_stderr(io.StringIO()):
        code = quick.carried_where(args)
    return code, out.getvalue()


def _full(args: list[str]) -> tuple[int, str]:
    from typer.testing import CliRunner

    from castfind import cli

    r = CliRunner().invoke(cli.app, args)
    return r.exit_code, r.stdout


def test_the_quick_path_honours_the_time_budget(tmp_path: Path):
    args = ["where", "relay.Blender", "--root", str(ROOT), "--cache-dir", str(tmp_path), "--json"]
    tiny = [*args, "--time-budget", "1e-9"]
    cut = _full(tiny)
    assert cut[0] == 0 and "not searched (time budget)" in cut[1]
    _full(tiny)  # cut twice in a row: it stands for lookups given no more time
    assert _run(tiny) == (0, cut[1])
    # More time, or none: the cut answer is not replayed; the full path computes the whole one.
    assert _run([*args, "--time-budget", "5"]) == (None, "")
    assert _run([*args, "--time-budget", "0"]) == (None, "")
    whole = _full([*args, "--time-budget", "0"])
    assert "not searched" not in whole[1]
    # A whole answer stands for any budget, given as an option or not.
    assert _run([*args, "--time-budget", "5"]) == whole
    assert _run([*args, "--time-budget", "1e-9"]) == whole
    assert _run(args) == whole
    assert _run([*args, "--time-budget", "soon"]) == (None, "")  # the full path says what is wrong
