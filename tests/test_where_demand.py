"""`where` parses only the files a query can need (the demand-driven design the speed targets rely on)."""

from __future__ import annotations

from castfind.store.discover import discover
from castfind.store.index import Index
from castfind.where.lookup import where
from tests.support import REPO


def test_where_reads_only_files_that_name_the_symbol(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "kern.py").write_text("def kernel(x):\n    return x\n")
    (pkg / "load.py").write_text(
        "def _load():\n    from pkg.kern import kernel\n    return kernel, None\n\n"
        "def run(x):\n    fn, _ = _load()\n    _, cfg = _load()\n    return fn(x)\n"
    )
    for i in range(30):  # files that only share the discard name `_` with the query's chain
        (pkg / f"other{i}.py").write_text("for _ in range(3):\n    pass\n")
    index = Index(discover([str(tmp_path)]), jobs=1)
    res = where(index, "fn")
    assert [(d.qualname, d.line) for d in res.definitions] == [("pkg.kern.kernel", 1)]
    assert [(c.path, c.line) for c in res.call_sites] == [("pkg/load.py", 8)]
    assert index.loaded <= 4, index.loaded  # kern, load (+ __init__), never the 30 others


DISPATCH = REPO / "fixtures" / "dispatch"


def _sites(index: Index, symbol: str) -> list[tuple[str, int]]:
    return [(c.path, c.line) for c in where(index, symbol).call_sites]


def _line(rel: str, text: str) -> int:
    lines = (DISPATCH / rel).read_text().splitlines()
    (n,) = [i for i, line in enumerate(lines, 1) if text in line]
    return n


def test_where_lists_typed_call_sites_of_an_override_and_not_of_look_alikes():
    index = Index(discover([str(DISPATCH)]), jobs=1)
    linear = ("dispatchpkg/linear.py", _line("dispatchpkg/linear.py", "self.quant_method.apply("))
    runner = [("dispatchpkg/runner.py", _line("dispatchpkg/runner.py", "return method.apply(")),
              ("dispatchpkg/runner.py", _line("dispatchpkg/runner.py", "layer.quant_method.apply("))]
    sampler = ("dispatchpkg/sampler.py", _line("dispatchpkg/sampler.py", "self.sampler.apply("))
    # `self.quant_method: Optional[QuantMethodBase]`: a call site of every override of the base.
    assert _sites(index, "Fp8LinearMethod.apply") == [linear, *runner]
    assert _sites(index, "QuantMethodBase.apply") == [linear, *runner]
    # Receivers typed as other classes are not call sites of the look-alikes (by name they all were).
    assert _sites(index, "LegacyMethod.apply") == []
    assert _sites(index, "Sampler.apply") == [sampler]


def test_where_lists_a_typed_call_site_even_when_a_function_shares_the_name(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "ops.py").write_text(
        "class Base:\n    def apply(self, x):\n        return x\n\n"
        "class Impl(Base):\n    def apply(self, x):\n        return x\n\n"
        "def apply(x):\n    return x\n")
    (pkg / "use.py").write_text(
        "from pkg.ops import Base\n\n"
        "def run(m: Base, x, other):\n    other.apply(x)\n    return m.apply(x)\n")
    index = Index(discover([str(tmp_path)]), jobs=1)
    res = where(index, "apply")
    assert {d.kind for d in res.definitions} == {"method", "function"}  # no by-name call sites then
    assert [(c.path, c.line) for c in res.call_sites] == [("pkg/use.py", 5)]


# -- the carried answer ---------------------------------------------------------------------------

def _cached_where(root, cache_dir, symbol: str, **options):
    from castfind import api

    return api.where(symbol, [str(root)], cache_dir=str(cache_dir), jobs=1, **options)


def test_a_warm_where_on_an_unchanged_tree_is_carried_and_an_edit_recomputes_it(tmp_path):
    pkg = tmp_path / "src" / "pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("from pkg.kern import kernel as fused\n")
    (pkg / "kern.py").write_text("def kernel(x):\n    return x\n")
    (pkg / "use.py").write_text("from pkg import fused\n\ndef run(x):\n    return fused(x)\n")
    cache = tmp_path / "cache"
    first = _cached_where(tmp_path / "src", cache, "fused")
    again = _cached_where(tmp_path / "src", cache, "fused")
    assert first.stats["outcome"] == "computed" and again.stats["outcome"] == "carried"
    assert again.to_dict() == first.to_dict()
    assert [h.text for h in again.definitions[0].chain] == [h.text for h in first.definitions[0].chain]
    assert [(c.path, c.line) for c in again.call_sites] == [("pkg/use.py", 4)]
    # Another query is another answer, not this one's.
    assert _cached_where(tmp_path / "src", cache, "kernel").stats["outcome"] == "computed"
    # A new call site in an edited file: the answer is computed again and has it.
    (pkg / "use.py").write_text("from pkg import fused\n\ndef run(x):\n    return fused(x)\n\nfused(1)\n")
    edited = _cached_where(tmp_path / "src", cache, "fused")
    assert edited.stats["outcome"] == "computed"
    assert [(c.path, c.line) for c in edited.call_sites] == [("pkg/use.py", 4), ("pkg/use.py", 6)]


def test_a_carried_where_is_recomputed_when_an_installed_package_it_looked_for_appears(tmp_path, monkeypatch):
    src = tmp_path / "src" / "app"
    src.mkdir(parents=True)
    (src / "__init__.py").write_text("")
    (src / "main.py").write_text("from castfind_probe_ext.ops import launch\n\ndef go():\n    return launch()\n")
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    cache = tmp_path / "cache"
    before = _cached_where(tmp_path / "src", cache, "launch", follow_installed=True)
    assert not before.definitions  # the package is not installed yet
    assert _cached_where(tmp_path / "src", cache, "launch", follow_installed=True).stats["outcome"] == "carried"
    ext = site / "castfind_probe_ext"
    ext.mkdir()
    (ext / "__init__.py").write_text("")
    (ext / "ops.py").write_text("def launch():\n    return 1\n")
    import importlib

    importlib.invalidate_caches()
    after = _cached_where(tmp_path / "src", cache, "launch", follow_installed=True)
    assert after.stats["outcome"] == "computed"
    assert [(d.qualname, d.line) for d in after.definitions] == [("castfind_probe_ext.ops.launch", 1)]


def _budget_tree(tmp_path, callers: int, pad: int) -> None:
    """`pkg.kern.kernel`, imported and called by ``callers`` files of about ``pad`` bytes each, plus
    files that only mention the name in prose (no call, no import, no alias)."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "kern.py").write_text("def kernel(x):\n    return x\n")
    filler = "# " + "x" * 70 + "\n"
    for i in range(callers):
        (pkg / f"use{i:02d}.py").write_text(
            "from pkg.kern import kernel\n\n" + filler * (pad // 73) + f"def run{i}(x):\n    return kernel(x)\n")
    for i in range(5):
        (pkg / f"doc{i}.py").write_text('"""See kernel for the math."""\nVALUE = 1  # kernel is not called here\n')


def test_where_parses_no_file_that_only_mentions_the_name_in_prose(tmp_path):
    _budget_tree(tmp_path, callers=2, pad=0)
    index = Index(discover([str(tmp_path)]), jobs=1)
    res = where(index, "pkg.kern.kernel")
    assert [c.path for c in res.call_sites] == ["pkg/use00.py", "pkg/use01.py"]
    assert res.unresolved == ()
    # kern, the two callers and the package: never the five files that say "kernel" in prose.
    assert index.parsed <= 4, index.parsed


def test_where_parse_budget_names_the_files_it_left_unsearched(tmp_path):
    _budget_tree(tmp_path, callers=6, pad=2000)
    full = where(Index(discover([str(tmp_path)]), jobs=1), "pkg.kern.kernel", budget=None)
    assert len(full.call_sites) == 6 and full.unresolved == ()
    index = Index(discover([str(tmp_path)]), jobs=1)
    res = where(index, "pkg.kern.kernel", budget=5000)
    # The definition does not depend on the budget; the call sites found are a subset of the full list,
    # and every file left out is counted in an `unresolved` entry that says how to search them all.
    assert [d.qualname for d in res.definitions] == ["pkg.kern.kernel"]
    assert set(res.call_sites) < set(full.call_sites)
    assert res.unresolved, res
    assert all(u.line == 0 and "--parse-budget 0" in u.reason for u in res.unresolved)
    assert res.stats["unsearched"] >= 6 - len(res.call_sites)
    assert index.parsed < 8  # kern, the package and at most two padded files


def test_where_parse_budget_spares_files_already_cached(tmp_path):
    from castfind.store.cache import Cache

    _budget_tree(tmp_path, callers=6, pad=2000)
    cache = Cache(tmp_path / "cache")
    try:
        index = Index(discover([str(tmp_path / "pkg")]), cache=cache, jobs=1)
        index.load_files(index.files)  # e.g. a scan parsed them all before
        index.save()
        again = Index(discover([str(tmp_path / "pkg")]), cache=cache, jobs=1)
        res = where(again, "pkg.kern.kernel", budget=5000)
    finally:
        cache.close()
    assert len(res.call_sites) == 6 and res.unresolved == () and again.parsed == 0


def test_a_call_with_a_comment_before_its_parenthesis_is_still_searched(tmp_path):
    _budget_tree(tmp_path, callers=0, pad=0)
    (tmp_path / "pkg" / "odd.py").write_text(
        "from pkg.kern import kernel\n\ndef run(x):\n    return (kernel  # the fused one\n            (x))\n")
    res = where(Index(discover([str(tmp_path)]), jobs=1), "pkg.kern.kernel")
    assert [(c.path, c.line) for c in res.call_sites] == [("pkg/odd.py", 4)]


_TRICKY = [
    b"",
    b"kernel",
    b"x = kernel",
    b"from pkg.kern import kernel",
    b"from pkg.kern import (\r\n    other,\r\n    kernel,\r\n)\r\n",
    b"a = 1\rkernel = f\rb = 2",  # old Mac line ends: one line for the regex, as for the search
    b"return (one, kernel)\n",
    b"y = my_kernel(1)\nz = kernel_x(2)\n",
    b"y = obj.kernel  # comment\n    (1)\n",
    b"call(kernel\\\n  (3))",
    b"t = {'kernel': 'pkg.kern'}\n",
    b"def kernel():\n    pass\nclass kernel2: ...\n",
    b"if a == kernel: pass\nb != kernel\n",
    "café = kernel\n".encode(),
]


def test_the_where_text_filters_answer_as_a_plain_search_does():
    """The pre-filters search only near the names; their answer is a whole-text search's."""
    from castfind.where.lookup import _alias_text, _binding_text, _call_text

    root = REPO
    texts = _TRICKY + [p.read_bytes() for p in sorted((root / "castfind").rglob("*.py"))] \
        + [p.read_bytes() for p in sorted((root / "fixtures").rglob("*.py"))]
    tests = [_call_text(["kernel"]), _call_text(["load_files", "where", "kernel"]), _binding_text("kernel"),
             _binding_text("where"), _alias_text(["kernel", "kernel2"]), _alias_text(["where", "Index", "data"]),
             _alias_text(["café"])]
    hits = 0
    for t in tests:
        for data in texts:
            assert t(data) == t.plain(data), (t.pattern.pattern[:60], data[:80])
            hits += t(data)
    assert 0 < hits < len(tests) * len(texts)  # both answers occur


def test_the_budget_searches_first_the_files_that_import_the_definition_from_its_home(tmp_path):
    """A large file importing the name from the module that defines it (relatively, in a parenthesised
    list) is searched before smaller files that call a namesake imported from elsewhere."""
    _budget_tree(tmp_path, callers=0, pad=0)
    pkg = tmp_path / "pkg"
    filler = "# " + "x" * 70 + "\n"
    (pkg / "big.py").write_text("from .kern import (\n    kernel,\n)\n\n" + filler * 80 + "def run(x):\n    return kernel(x)\n")
    (tmp_path / "other.py").write_text("def kernel(x):\n    return -x\n")
    for i in range(4):
        (pkg / f"near{i}.py").write_text("from other import kernel\n\n" + filler * 15 + "def go(x):\n    return kernel(x)\n")
    full = where(Index(discover([str(tmp_path)]), jobs=1), "pkg.kern.kernel", budget=None)
    assert [c.path for c in full.call_sites] == ["pkg/big.py"]
    res = where(Index(discover([str(tmp_path)]), jobs=1), "pkg.kern.kernel", budget=7000)
    assert [c.path for c in res.call_sites] == ["pkg/big.py"]
    assert res.unresolved  # the namesakes' callers left out are still named
    assert [u.reason.split(";")[0] for u in res.unresolved] == [
        "not searched (parse budget): 4 files with a possible alias of kernel, this one first",
        "not searched (parse budget): 4 files with a call of a name like kernel, this one first"]


def test_one_file_left_by_the_budget_is_named_in_the_singular(tmp_path):
    _budget_tree(tmp_path, callers=1, pad=3000)
    res = where(Index(discover([str(tmp_path)]), jobs=1), "pkg.kern.kernel", budget=1000)
    assert [(u.path, u.reason.split(";")[0]) for u in res.unresolved] == [
        ("pkg/use00.py", "not searched (parse budget): 1 file with a possible alias of kernel (this one)"),
        ("pkg/use00.py", "not searched (parse budget): 1 file with a call of a name like kernel (this one)")]


# -- the answer carried by what it read --------------------------------------------------------------

def _reads_tree(tmp_path):
    pkg = tmp_path / "src" / "pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "kern.py").write_text("def kernel(x):\n    return x\n")
    (pkg / "use.py").write_text("from pkg.kern import kernel\n\ndef run(x):\n    return kernel(x)\n")
    for i in range(20):  # files that hold none of the names the lookup looks for
        (pkg / f"other{i}.py").write_text(f"VALUE{i} = {i}\n")
    return pkg


def test_a_cold_where_hashes_only_the_files_it_read_and_a_warm_one_reads_nothing_else(tmp_path):
    from castfind.pipeline import open_index

    pkg = _reads_tree(tmp_path)
    cache = tmp_path / "cache"
    index = open_index([str(tmp_path / "src")], cache_dir=cache, jobs=1)
    assert where(index, "kernel").stats["outcome"] == "computed"
    assert index.hashed <= 3, index.hashed  # kern, use (and __init__): not the 20 others
    index.save()
    warm = open_index([str(tmp_path / "src")], cache_dir=cache, jobs=1)
    got = where(warm, "kernel")
    assert got.stats["outcome"] == "carried" and [(c.path, c.line) for c in got.call_sites] == [("pkg/use.py", 4)]
    assert not any(warm.holds_data(str(pkg / f"other{i}.py")) for i in range(20))  # never read


def test_a_carried_where_stands_after_an_edit_of_a_file_without_its_names_and_falls_after_one_it_read(tmp_path):
    pkg = _reads_tree(tmp_path)
    cache = tmp_path / "cache"
    first = _cached_where(tmp_path / "src", cache, "kernel")
    (pkg / "other3.py").write_text("VALUE3 = 33\nMORE = 1\n")  # holds none of the names
    (pkg / "other4.py").unlink()
    (pkg / "extra.py").write_text("NOTHING = None\n")
    again = _cached_where(tmp_path / "src", cache, "kernel")
    assert again.stats["outcome"] == "carried" and again.to_dict() == first.to_dict()
    assert _cached_where(tmp_path / "src", cache, "kernel").stats["outcome"] == "carried"  # stamped again
    # The file holding the definition moves it down a line: a file it read changed.
    (pkg / "kern.py").write_text("\ndef kernel(x):\n    return x\n")
    moved = _cached_where(tmp_path / "src", cache, "kernel")
    assert moved.stats["outcome"] == "computed" and [d.line for d in moved.definitions] == [2]


def test_the_stamp_names_the_files_and_stats_discovery_found_and_none_when_one_is_racily_fresh(tmp_path, monkeypatch):
    from castfind.store import index as index_module
    from castfind.store.cache import Cache
    from castfind.store.discover import SourceFile

    pkg = _reads_tree(tmp_path)
    src = str(tmp_path / "src")

    def stamp():
        return Index.from_roots([src], cache=Cache(tmp_path / "cache")).stamp()

    assert stamp() is None  # every file was written just now: a write in the same clock tick would not show
    monkeypatch.setattr(index_module, "_RACY_NS", 0)
    first = stamp()
    assert isinstance(first, str) and stamp() == first
    (pkg / "other3.py").write_text("VALUE3 = 333\n")  # another size: another stat
    edited = stamp()
    assert edited not in (None, first)
    (pkg / "extra.py").write_text("")
    assert stamp() not in (None, first, edited)
    (pkg / "extra.py").unlink()
    assert stamp() == edited
    index = Index.from_roots([src], cache=Cache(tmp_path / "cache"))
    assert index.found_stamp(edited) and not index.found_stamp(first) and not index.found_stamp(None)
    other = tmp_path / "site" / "ext.py"
    other.parent.mkdir()
    other.write_text("")
    index.add_files([SourceFile(str(other.parent), "ext.py", str(other), "ext", False)])
    assert not index.found_stamp(edited)  # a joined file is in no stamp


def test_a_carried_where_on_the_tree_it_was_stored_for_is_not_checked_file_by_file(tmp_path, monkeypatch):
    from castfind.store import index as index_module
    from castfind.store import memo

    monkeypatch.setattr(index_module, "_RACY_NS", 0)
    checks = []
    rest_digest = memo._rest_digest
    monkeypatch.setattr(memo, "_rest_digest", lambda *a: checks.append(1) or rest_digest(*a))
    pkg = _reads_tree(tmp_path)
    cache = tmp_path / "cache"
    first = _cached_where(tmp_path / "src", cache, "kernel")
    checks.clear()
    again = _cached_where(tmp_path / "src", cache, "kernel")
    assert again.stats["outcome"] == "carried" and again.to_dict() == first.to_dict()
    assert checks == []  # the same stamp: no file's stat or content key looked at
    (pkg / "other3.py").write_text("VALUE3 = 33\nMORE = 1\n")  # holds none of the names
    edited = _cached_where(tmp_path / "src", cache, "kernel")
    assert edited.stats["outcome"] == "carried" and edited.to_dict() == first.to_dict()
    assert checks  # checked file by file, and stored again with the new stamp
    checks.clear()
    assert _cached_where(tmp_path / "src", cache, "kernel").stats["outcome"] == "carried"
    assert checks == []
    (pkg / "kern.py").write_text("\ndef kernel(x):\n    return x\n")  # a file it read
    moved = _cached_where(tmp_path / "src", cache, "kernel")
    assert moved.stats["outcome"] == "computed" and [d.line for d in moved.definitions] == [2]


def test_a_carried_where_falls_when_a_new_file_binds_or_calls_the_name(tmp_path):
    pkg = _reads_tree(tmp_path)
    cache = tmp_path / "cache"
    _cached_where(tmp_path / "src", cache, "kernel")
    (pkg / "second.py").write_text("def kernel(y):\n    return y\n")  # a new file binding the name
    got = _cached_where(tmp_path / "src", cache, "kernel")
    assert got.stats["outcome"] == "computed"
    assert sorted((d.path, d.line) for d in got.definitions) == [("pkg/kern.py", 1), ("pkg/second.py", 1)]
    assert _cached_where(tmp_path / "src", cache, "kernel").stats["outcome"] == "carried"
    # An existing file that held none of the names now calls it.
    (pkg / "other7.py").write_text("from pkg.kern import kernel\nkernel(7)\n")
    called = _cached_where(tmp_path / "src", cache, "kernel")
    assert called.stats["outcome"] == "computed"
    assert ("pkg/other7.py", 2) in [(c.path, c.line) for c in called.call_sites]


def test_a_carried_where_falls_when_a_module_it_did_not_find_appears(tmp_path):
    pkg = _reads_tree(tmp_path)
    (pkg / "use.py").write_text("from pkg.gone import kernel\n\ndef run(x):\n    return kernel(x)\n")
    (pkg / "kern.py").unlink()
    cache = tmp_path / "cache"
    before = _cached_where(tmp_path / "src", cache, "pkg.use.kernel")
    assert not any(d.kind == "function" for d in before.definitions)
    # The missing module appears, defining the name under another spelling the text search would not see.
    (pkg / "gone.py").write_text("from pkg.impl import *\n")
    (pkg / "impl.py").write_text("def kernel(x):\n    return x\n")
    after = _cached_where(tmp_path / "src", cache, "pkg.use.kernel")
    assert after.stats["outcome"] == "computed"
    assert [(d.qualname, d.path) for d in after.definitions if d.kind == "function"] == [("pkg.impl.kernel", "pkg/impl.py")]
