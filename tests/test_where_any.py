"""``where`` on patterns real codebases use beyond the two pinned wheels (issue 12): helpers that
return calls of helpers (budgets, never a hang), submodules behind a package ``__getattr__``,
lazy-import tables, string dispatch, attribute chains. Fixtures are written here or live in
``fixtures/lazy``; line numbers are looked up by text."""

from __future__ import annotations

from pathlib import Path

from castfind.discover import discover
from castfind.index import Index
from castfind.resolve import Resolver
from castfind.where import where


def _index(*roots: Path | str) -> Index:
    return Index(discover([str(r) for r in roots]), jobs=1)


def _line(path: Path, text: str) -> int:
    (n,) = [i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line]
    return n


# --------------------------------------------------------------------------- budgets, not hangs

def _helper_chain(tmp_path: Path, n: int) -> Path:
    """``h0`` … ``h{n-1}``: each returns one of two calls of the next; the last returns ``kernel``."""
    pkg = tmp_path / "chain"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "kern.py").write_text("def kernel(x):\n    return x\n")
    src = ["from chain.kern import kernel\n", f"def h{n - 1}(flag):\n    return kernel\n"]
    for i in range(n - 2, -1, -1):
        src.append(f"def h{i}(flag):\n    if flag:\n        return h{i + 1}(flag)\n    return h{i + 1}(not flag)\n")
    src.append("fn = h0(True)\n")
    (pkg / "helpers.py").write_text("\n".join(src))
    (pkg / "use.py").write_text("from chain.helpers import fn\n\ndef run(x):\n    return fn(x)\n")
    return pkg


def test_thirty_helpers_returning_calls_of_the_next_resolve_in_a_bounded_walk(tmp_path):
    pkg = _helper_chain(tmp_path, 30)
    index = _index(tmp_path)
    res = where(index, "chain.helpers.fn")
    assert [(d.qualname, d.path, d.line) for d in res.definitions] == [("chain.kern.kernel", "chain/kern.py", 1)]
    assert res.unresolved == ()
    # Each helper is walked once (memoised), not once per path to it: 2**29 paths, a few steps each.
    assert res.stats["steps"] < 30 * 20, res.stats
    res = where(_index(tmp_path), "chain.kern.kernel")
    assert [(c.path, c.line) for c in res.call_sites] == [("chain/use.py", _line(pkg / "use.py", "return fn(x)"))]


def test_a_walk_past_its_budget_becomes_an_unresolved_entry_with_the_reason(tmp_path):
    _helper_chain(tmp_path, 30)
    r = Resolver(_index(tmp_path))
    r.budget = 10
    got = r.lookup("chain.helpers", "fn")
    assert got and all(x.target.kind == "unresolved" for x in got), got
    assert any("castfind stopped following" in x.target.reason and "10 steps" in x.target.reason for x in got)
    assert r.steps < 40  # stopped near the budget, not after the whole walk


def test_mutually_recursive_helpers_terminate(tmp_path):
    pkg = tmp_path / "rec"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "m.py").write_text(
        "def kernel(x):\n    return x\n\n"
        "def a(n):\n    if n:\n        return b(n - 1)\n    return kernel\n\n"
        "def b(n):\n    return a(n)\n\nfn = a(3)\n")
    res = where(_index(tmp_path), "rec.m.fn")
    assert [d.qualname for d in res.definitions] == ["rec.m.kernel"]
