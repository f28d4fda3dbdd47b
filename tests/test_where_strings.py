"""``where`` on code it has not seen (issue 36): module and attribute names that travel as strings through
parameters, defaults, closures and cached helpers (``fixtures/wherestr``); a name's own call sites when
a factory's closure is shared; the time budget; a public alias listed as a definition. Line numbers
are looked up by text."""

from __future__ import annotations

from pathlib import Path

import pytest

from castfind.store.cache import Cache
from castfind.store.discover import discover
from castfind.store.index import Index
from castfind.where.answer import WhereError, time_budget
from castfind.where.lookup import where
from tests.support import REPO, run_castfind

ROOT = REPO / "fixtures" / "wherestr"
OPS = ROOT / "strkern" / "ops.py"
USE = ROOT / "strapp" / "use.py"
SHARED = ROOT / "strapp" / "shared.py"
LOADER = ROOT / "strapp" / "loader.py"


def _index(cache: Cache | None = None) -> Index:
    return Index(discover([str(ROOT)]), cache=cache, jobs=1)


def _line(path: Path, text: str) -> int:
    (n,) = [i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line]
    return n


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


@pytest.mark.parametrize(("symbol", "kernel", "calls"), [
    # closure → functools.cache'd nested helper → module-level helper: import_module, then getattr
    ("gemm_op", "gemm", ["y = gemm_op(a, b)"]),
    # the same factory with other literals: each binding resolves with its own
    ("topk_op", "topk", ["first = topk_op(x, 2)", "second = topk_op(x, 3)"]),
    # a string default (module="strkern.ops") fills the parameter the call leaves out
    ("norm_op", "norm", ["norm_op(x)"]),
    # a closure that binds a helper's result to a local and calls it
    ("later_norm", "norm", ["norm_op(x)"]),
])
def test_strings_reach_the_kernel_through_closures_helpers_and_defaults(symbol, kernel, calls):
    res = where(_index(), symbol, budget=None)
    assert [(d.qualname, d.path, d.line) for d in res.definitions] == [
        (f"strkern.ops.{kernel}", _rel(OPS), _line(OPS, f"def {kernel}("))]
    assert [(c.path, c.line) for c in res.call_sites] == [(_rel(USE), _line(USE, t)) for t in calls]
    assert res.unresolved == ()


def test_an_lru_cached_helper_and_dunder_import_with_fromlist_resolve():
    assert [d.qualname for d in where(_index(), "cached_topk", budget=None).definitions] == ["strkern.ops.topk"]
    # __import__(path, fromlist=[attr]) is the module itself; BlockRunner is a public alias of the class
    res = where(_index(), "runner_cls", budget=None)
    assert [(d.qualname, d.kind, d.line, d.target) for d in res.definitions] == [
        ("strkern.ops._BlockRunner", "class", _line(OPS, "class _BlockRunner"), ""),
        ("strkern.ops.BlockRunner", "alias", _line(OPS, "BlockRunner = _BlockRunner"), "strkern.ops._BlockRunner")]


@pytest.mark.parametrize(("symbol", "what"), [
    ("fstr_op", "the module path"),  # an f-string
    ("join_op", "the module path"),  # ".".join of variables
])
def test_computed_strings_stay_unresolved(symbol, what):
    res = where(_index(), symbol, budget=None)
    assert res.definitions == () and res.call_sites == ()
    assert [(u.path, u.line, u.reason) for u in res.unresolved] == [
        (_rel(LOADER), _line(LOADER, "return getattr(mod, attr_name)"),
         f"getattr of a module imported by name: {what} is computed at run time")]


def test_a_concatenated_attribute_name_stays_unresolved():
    res = where(_index(), "concat_op", budget=None)
    assert res.definitions == ()
    assert [(u.path, u.line) for u in res.unresolved] == [(_rel(LOADER), _line(LOADER, "return getattr(mod, attr_name)"))]


def test_names_bound_to_one_factorys_closure_list_only_their_own_calls():
    apply_line = _line(SHARED, "def apply(x)")
    double = where(_index(), "double", budget=None)
    triple = where(_index(), "triple", budget=None)
    for res in (double, triple):
        assert [(d.qualname, d.line) for d in res.definitions] == [("strapp.shared.scaled_by.<locals>.apply", apply_line)]
    # `twice = double` is an alias of double: its call is double's too; triple's calls are not.
    assert [c.line for c in double.call_sites] == [_line(SHARED, "double(x)"), _line(SHARED, "twice(x)")]
    assert [c.line for c in triple.call_sites] == [
        i for i, line in enumerate(SHARED.read_text().splitlines(), 1) if "triple(x)" in line]


def test_the_kernel_itself_lists_the_calls_of_the_bindings_that_reach_it():
    res = where(_index(), "gemm", budget=None)
    assert [(c.path, c.line) for c in res.call_sites] == [(_rel(USE), _line(USE, "gemm_op(a, b)"))]


def test_a_public_alias_is_a_definition_with_its_target():
    res = where(_index(), "strkern.ops.BlockRunner", budget=None)
    assert [(d.qualname, d.kind, d.target) for d in res.definitions] == [
        ("strkern.ops.BlockRunner", "alias", "strkern.ops._BlockRunner"),
        ("strkern.ops._BlockRunner", "class", "")]
    assert res.to_dict()["definitions"][0]["target"] == "strkern.ops._BlockRunner"


# --------------------------------------------------------------------------- the time budget

def test_an_answer_cut_by_the_time_budget_says_so_and_is_carried_only_as_cut(tmp_path):
    cache = Cache(tmp_path / "cache")
    # A budget no lookup can meet: every search and resolution past the first clock reading stops.
    cut = where(_index(cache), "gemm_op", budget=None, seconds=1e-9)
    assert cut.stats["time_out"] is True
    assert cut.unresolved and all("time budget" in u.reason and "--time-budget 0" in u.reason for u in cut.unresolved)
    # The first cut answer is computed once more (its facts cached, a second try may end in time); cut
    # twice, it is replayed to a lookup given no more time, which would stop as soon: cut as it was.
    second = where(_index(cache), "gemm_op", budget=None, seconds=1e-9)
    assert second.stats["outcome"] == "computed" and second.stats["time_out"] is True
    again = where(_index(cache), "gemm_op", budget=None, seconds=1e-9)
    assert again.stats["outcome"] == "carried" and again.stats["time_out"] is True
    assert (again.definitions, again.call_sites, again.unresolved) == (cut.definitions, cut.call_sites, cut.unresolved)
    # More time, or none, is never answered by the cut answer.
    assert where(_index(cache), "gemm_op", budget=None, seconds=2e-9).stats["outcome"] == "computed"
    full = where(_index(cache), "gemm_op", budget=None, seconds=0)
    assert full.stats["outcome"] == "computed" and full.stats["time_out"] is False
    assert [d.qualname for d in full.definitions] == ["strkern.ops.gemm"] and len(full.call_sites) == 1
    assert where(_index(cache), "gemm_op", budget=None, seconds=0).stats["outcome"] == "carried"
    # The whole answer, stored over the cut one, stands for a lookup with any budget.
    short = where(_index(cache), "gemm_op", budget=None, seconds=1e-9)
    assert short.stats["outcome"] == "carried" and short.call_sites == full.call_sites and not short.unresolved


def test_files_before_one_that_would_overrun_the_time_budget_are_still_searched(tmp_path):
    pkg = tmp_path / "blendpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "kern.py").write_text("def blend(x):\n    return x\n")
    (pkg / "small.py").write_text("from blendpkg.kern import blend\n\nblend(1)\n")
    # 900 KB (under the 1 MB file size limit): at the cautious parse rate a lookup assumes before it has
    # measured one (65 KB/s), 14 s of parsing, past an 8 s budget; the small file before it takes milliseconds.
    body = "".join(f"def f{i}(x):\n    return x + {i}\n" for i in range(900 * 1024 // 30))
    (pkg / "zbig.py").write_text("from blendpkg.kern import blend\n\n" + body + "blend(2)\n")
    res = where(Index(discover([str(tmp_path)]), jobs=1), "blend", budget=None, seconds=8)
    assert [(c.path, c.line) for c in res.call_sites] == [("blendpkg/small.py", 3)]
    # zbig.py is left by each search that would parse it (aliases, calls), and named so
    assert {(u.path, u.reason.split(":")[0]) for u in res.unresolved} == {("blendpkg/zbig.py", "not searched (time budget)")}
    assert res.stats["time_out"] is True


def test_the_time_budget_comes_from_the_option_then_the_environment(monkeypatch):
    monkeypatch.setenv("CASTFIND_WHERE_TIME_BUDGET", "2.5")
    assert time_budget(None) == 2.5 and time_budget(7) == 7 and time_budget(0) is None
    monkeypatch.setenv("CASTFIND_WHERE_TIME_BUDGET", "0")
    assert time_budget(None) is None
    monkeypatch.setenv("CASTFIND_WHERE_TIME_BUDGET", "soon")
    with pytest.raises(WhereError, match=r"CASTFIND_WHERE_TIME_BUDGET=soon: expected seconds"):
        time_budget(None)
    monkeypatch.delenv("CASTFIND_WHERE_TIME_BUDGET")
    assert time_budget(None) == 6.0


def test_a_negative_time_budget_is_a_usage_error():
    r = run_castfind("where", "gemm_op", "--root", str(ROOT), "--no-cache", "--time-budget", "-1")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1] == (
        "castfind: --time-budget -1.0: expected seconds (such as 5 or 2.5), or 0 for no limit")


# --------------------------------------------------------------------------- installed packages

def test_an_installed_package_is_searched_for_calls_only_when_a_definition_lies_in_it(tmp_path, monkeypatch):
    app = tmp_path / "src" / "app"
    app.mkdir(parents=True)
    (app / "__init__.py").write_text("")
    (app / "kern.py").write_text("def fuse(x):\n    return x\n")
    # Importing the installed package's own `fuse` makes the lookup index that package.
    (app / "main.py").write_text("from app.kern import fuse\nfrom castfind_probe_ext36 import fuse as other_fuse\n\n"
                                 "def go():\n    return fuse(other_fuse(1))\n")
    ext = tmp_path / "site" / "castfind_probe_ext36"
    ext.mkdir(parents=True)
    (ext / "__init__.py").write_text("def fuse(x):\n    return -x\n")
    (ext / "calls.py").write_text("from app.kern import fuse\n\ndef run():\n    return fuse(2)\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    import importlib

    importlib.invalidate_caches()
    res = where(Index(discover([str(tmp_path / "src")]), jobs=1, follow_installed=True), "fuse", budget=None)
    assert [(d.qualname, d.line) for d in res.definitions] == [("app.kern.fuse", 1)]
    # calls.py calls app.kern.fuse, but no definition found lies in castfind_probe_ext36: it is not searched.
    assert [(c.path, c.line) for c in res.call_sites] == [("app/main.py", 5)]
