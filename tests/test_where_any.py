"""``where`` on patterns real codebases use beyond the two pinned wheels (issue 12): helpers that
return calls of helpers (budgets, never a hang), submodules behind a package ``__getattr__``,
lazy-import tables, string dispatch, attribute chains. Fixtures are written here or live in
``fixtures/lazy``; line numbers are looked up by text."""

from __future__ import annotations

from pathlib import Path

from castfind.analysis.resolve import Resolver
from castfind.store.discover import discover
from castfind.store.index import Index
from castfind.where.lookup import where


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


# --------------------------------------------------------------------------- fixtures/lazy

LAZY = Path(__file__).resolve().parents[1] / "fixtures" / "lazy"


def _defs(symbol: str, **kw) -> list[tuple[str, str, int]]:
    res = where(_index(LAZY), symbol, **kw)
    return [(d.qualname, d.path, d.line) for d in res.definitions]


def _def_line(rel: str, name: str) -> int:
    return _line(LAZY / rel, f"def {name}(")


def test_a_submodule_is_found_before_the_package_getattr():
    assert _defs("lazykern._ops") == [("lazykern._ops", "lazykern/_ops.py", 1)]
    res = where(_index(LAZY), "lazykern._ops.fused_step")
    assert [(d.qualname, d.line) for d in res.definitions] == [
        ("lazykern._ops.fused_step", _def_line("lazykern/_ops.py", "fused_step"))]
    assert res.unresolved == ()
    # `from lazykern import _ops as ops` ... `ops.fused_step(x)` is a call site of it.
    assert [(c.path, c.line) for c in res.call_sites] == [
        ("engine/step.py", _line(LAZY / "engine/step.py", "ops.fused_step(x)"))]


def test_every_name_of_a_lazy_import_table_resolves_to_its_definition():
    expected = {
        "fast_add": ("lazykern.kernels.add.fast_add", "lazykern/kernels/add.py"),
        "fast_mul": ("lazykern.kernels.mul.fast_mul", "lazykern/kernels/mul.py"),
        "scale_rows": ("lazykern.rows.ops.scale_rows", "lazykern/rows/ops.py"),
        "shift_rows": ("lazykern.rows.ops.shift_rows", "lazykern/rows/ops.py"),
        # Bound only in `__getattr__`: the deprecated alias returns another module-level name.
        "legacy_add": ("lazykern.core.run_core", "lazykern/core.py"),
    }
    for name, (qualname, path) in expected.items():
        res = where(_index(LAZY), f"lazykern.{name}")
        got = [(d.qualname, d.path, d.line) for d in res.definitions]
        assert got == [(qualname, path, _def_line(path, qualname.rsplit(".", 1)[-1]))], (name, got, res.unresolved)
        assert res.unresolved == (), name
        assert any(h.kind == "lazy-import" for h in res.definitions[0].chain), name


def test_calls_of_lazily_imported_names_are_call_sites():
    res = where(_index(LAZY), "lazykern.kernels.add.fast_add")
    assert [(c.path, c.line) for c in res.call_sites] == [
        ("engine/step.py", _line(LAZY / "engine/step.py", "return fast_add("))]
    res = where(_index(LAZY), "lazykern.core.run_core")
    assert ("engine/step.py", _line(LAZY / "engine/step.py", "return legacy_add(x)")) in [
        (c.path, c.line) for c in res.call_sites]


def test_a_name_no_table_provides_still_reports_the_getattr():
    res = where(_index(LAZY), "lazykern.not_there")
    assert res.definitions == ()
    assert [u.reason for u in res.unresolved] == ["lazykern.__getattr__ may provide 'not_there' at run time"]


def test_string_dispatch_goes_through_the_literal_module_path_and_name():
    dispatch = LAZY / "engine/dispatch.py"
    assert _defs("engine.dispatch.fused_mul") == [
        ("lazykern.kernels.mul.fast_mul", "lazykern/kernels/mul.py", _def_line("lazykern/kernels/mul.py", "fast_mul"))]
    # A closure that calls what the helper returns for its (captured) strings.
    assert _defs("engine.dispatch.scaled") == [
        ("lazykern.rows.ops.scale_rows", "lazykern/rows/ops.py", _def_line("lazykern/rows/ops.py", "scale_rows"))]
    run = _line(dispatch, "return fused_mul(x, scaled(x, 2))")
    assert ("engine/dispatch.py", run) in [(c.path, c.line) for c in where(_index(LAZY), "lazykern.kernels.mul.fast_mul").call_sites]
    assert ("engine/dispatch.py", run) in [(c.path, c.line) for c in where(_index(LAZY), "lazykern.rows.ops.scale_rows").call_sites]
    # The helper alone still says why it cannot be followed.
    res = where(_index(LAZY), "engine.dispatch.lazy", at=None)
    assert [d.qualname for d in res.definitions] == ["engine.dispatch.lazy"]


def test_an_attribute_chain_resolves_through_the_assigned_type():
    attn = LAZY / "engine/attn.py"
    line = [i for i, t in enumerate(attn.read_text().splitlines(), 1) if "self.kv_pool.get_key_buffer" in t][0]
    res = where(_index(LAZY), "self.kv_pool.get_key_buffer", at=("engine/attn.py", line))
    pools = LAZY / "engine/pools.py"
    assert [(d.qualname, d.line, d.dynamic) for d in res.definitions] == [
        ("engine.pools.PagedPool.get_key_buffer", _line(pools, 'return ("paged", layer)') - 1, False),
        ("engine.pools.FlatPool.get_key_buffer", _line(pools, 'return ("flat", layer)') - 1, False),
    ]


def test_an_attribute_of_unknown_type_lists_every_candidate_most_likely_first():
    attn = LAZY / "engine/attn.py"
    line = [i for i, t in enumerate(attn.read_text().splitlines(), 1) if "self.kv_pool.get_key_buffer" in t][1]
    res = where(_index(LAZY), "self.kv_pool.get_key_buffer", at=("engine/attn.py", line))
    got = [(d.qualname, d.dynamic) for d in res.definitions]
    # PagedPool and FlatPool instances are assigned to `.kv_pool` (Runner.__init__); BasePool is their
    # base; TextCache only shares the method's name.
    assert got == [("engine.pools.PagedPool.get_key_buffer", True), ("engine.pools.FlatPool.get_key_buffer", True),
                   ("engine.pools.BasePool.get_key_buffer", True), ("engine.textcache.TextCache.get_key_buffer", True)]
    assert all("the type of self.kv_pool is not known here" in d.reason for d in res.definitions)
    assert "assigns a PagedPool to .kv_pool" in res.definitions[0].reason
    doc = res.to_dict()["definitions"][0]
    assert doc["dynamic"] is True and doc["reason"] == res.definitions[0].reason
    assert "dynamic" not in where(_index(LAZY), "engine.pools.FlatPool.get_key_buffer").to_dict()["definitions"][0]
