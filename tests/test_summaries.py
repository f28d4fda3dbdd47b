"""Provenance across calls (castfind.analysis.summaries): parameters walked back to what callers pass, helpers
whose result is a full-size derivation of an argument, and the forward step that finds a callee file
with no buffer word. Each cast line of ``fixtures/calls`` says ``# flag: RULE`` or ``# quiet``.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from castfind.analysis.scan import scan
from castfind.analysis.summaries import argument, is_bound
from castfind.api import scan as api_scan
from castfind.core.rules import load_rules
from castfind.read.facts import Const, Definition, Name
from castfind.store.discover import discover
from castfind.store.index import Index
from castfind.store.textquery import predicate
from tests.support import REPO

FIX = REPO / "fixtures" / "calls"
MARK = re.compile(r"#\s*(flag: (CF\d{3})|quiet)")


def expected() -> tuple[set[tuple[str, str, int]], set[tuple[str, int]]]:
    flagged: set[tuple[str, str, int]] = set()
    quiet: set[tuple[str, int]] = set()
    for path in sorted((FIX / "callpkg").glob("*.py")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            m = MARK.search(line)
            if m and m.group(2):
                flagged.add((m.group(2), path.name, n))
            elif m:
                quiet.add((path.name, n))
    return flagged, quiet


def _scan(demand: bool) -> list:
    return scan(Index(discover([str(FIX)]), jobs=1), load_rules(), demand=demand).findings


@pytest.fixture(scope="module")
def findings() -> list:
    return _scan(True)


def test_each_marked_cast_is_flagged_or_quiet(findings: list) -> None:
    flagged, quiet = expected()
    assert len(flagged) >= 4 and len(quiet) >= 3
    got = {(f.rule, f.path.rsplit("/", 1)[-1], f.line) for f in findings}
    assert got == flagged


def test_demand_driven_equals_eager_across_calls(findings: list) -> None:
    key = lambda fs: sorted((f.rule, f.path, f.line, f.provenance) for f in fs)  # noqa: E731
    assert key(findings) == key(_scan(False))


def test_the_callee_file_names_no_buffer_and_is_reached_forward() -> None:
    rules = load_rules()
    kernels = (FIX / "callpkg" / "kernels.py").read_bytes()
    sf = next(s for s in discover([str(FIX)]) if s.path.endswith("kernels.py"))
    assert not predicate(("cand", ()), rules)(sf, kernels)  # not a candidate by its text
    assert predicate(("casts",), rules)(sf, kernels)


def test_the_provenance_crosses_the_call_in_order(findings: list) -> None:
    attend = next(f for f in findings if f.expr == "flat.to(q.dtype)")
    hops = list(attend.provenance)
    # From the cast outward: the callee's own view, then the call that passes the pool, then the caller's walk.
    assert hops[0].startswith("flat = pages.view(")
    crossing = next(i for i, h in enumerate(hops) if "passes cache as pages of attend" in h)
    call_line = 1 + (FIX / "callpkg" / "backend.py").read_text().splitlines().index(
        "        out = attend(q, cache, layer.scale)")
    assert hops[crossing].startswith(f"callpkg/backend.py:{call_line} Backend.forward_decode")
    assert hops[-1] == "get_kv_buffer() returns the whole kv-cache"
    assert attend.hot_path[0].endswith("Backend.forward_decode")
    pairs = next(f for f in findings if f.expr == "pairs.float()")
    assert any(h.startswith("as_pairs() returns its t at full size") for h in pairs.provenance)


def test_a_typed_receiver_reaches_the_override_and_not_a_same_named_method(findings: list) -> None:
    run = next(f for f in findings if f.path.endswith("impls.py"))
    assert run.function == "FlashImpl.run" and run.hot_path[0].endswith("Backend.forward_decode")
    assert any("passes cache as pages of FlashImpl.run" in h for h in run.provenance), run.provenance


def test_the_argument_bound_to_a_parameter() -> None:
    method = Definition("C.m", "m", "method", 1, 2, "C", False, params=("self", "a", "b", "k"), positional=3)
    a, b = Name("x"), Name("y")
    assert argument((a, b), (), False, method, "b", bound=True) == b
    assert argument((Name("o"), a, b), (), False, method, "b", bound=False) == b
    assert argument((a,), (("b", b),), False, method, "b", bound=True) == b
    assert argument((a, b, Const("1")), (), False, method, "k", bound=True) is None  # keyword-only
    assert argument((a, b), (), True, method, "b", bound=True) is None  # after a *args: unknown
    assert is_bound(method, "self.m") and not is_bound(method, "m")
    static = Definition("C.s", "s", "method", 1, 2, "C", False, decorators=("staticmethod",), params=("a",), positional=1)
    assert not is_bound(static, "C.s")


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def test_a_warm_scan_follows_an_edit_in_the_caller(tmp_path: Path) -> None:
    root = tmp_path / "calls"
    shutil.copytree(FIX, root)
    cache = tmp_path / "cache"

    def both() -> tuple[set, set]:
        warm = api_scan([str(root)], cache_dir=cache, jobs=1)
        fresh = api_scan([str(root)], use_cache=False, jobs=1)
        return ({(f.rule, f.path, f.line) for f in warm.report.findings},
                {(f.rule, f.path, f.line) for f in fresh.report.findings})

    warm, fresh = both()
    assert warm == fresh and ("CF101", "callpkg/kernels.py", 13) in warm
    # The caller now hands attend() the rows of this batch: the callee's cast goes quiet, warm too.
    _edit(root / "callpkg" / "backend.py", "out = attend(q, cache, layer.scale)", "out = attend(q, cache[loc], layer.scale)")
    warm, fresh = both()
    assert warm == fresh and ("CF101", "callpkg/kernels.py", 13) not in warm


def test_hot_and_whole_come_from_the_same_caller(findings: list) -> None:
    """A parameter's cast is judged on the callers that hand it a whole buffer, not on its function alone."""
    widen = next(f for f in findings if f.function == "widen")
    # forward_decode calls widen (so widen is on a hot path), but with a per-batch tensor; only the
    # loader hands it the whole weight: the whole cast runs once.
    assert (widen.rule, widen.hot_path) == ("CF103", ())
    assert widen.provenance[0].startswith("callpkg/backend.py:") and "Backend.load_weights passes" in widen.provenance[0]
    gather = next(f for f in findings if f.function == "gather_dequant")
    # Two callers hand it the pool; the one on the hot path is the one the provenance names.
    assert gather.rule == "CF101"
    assert gather.hot_path == ("callpkg.backend.Backend.forward_decode", "callpkg.kernels.gather_dequant")
    assert "Backend.forward_decode passes cache as t of gather_dequant" in gather.provenance[0]


def test_explain_names_the_callers_when_only_a_loader_hands_the_buffer() -> None:
    out = api_scan([str(FIX)], use_cache=False, jobs=1, explain=True)
    why = next(e for e in out.explanations.values() if e.function == "to_compute")
    assert why.once == ("only callpkg.backend.Backend.load_weights hands it a whole buffer for t, and load_weights "
                        "is an initialisation or loading function (once.functions)")


def _one_file(tmp_path: Path, text: str) -> list:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "m.py").write_text(text)
    return list(api_scan([str(tmp_path)], use_cache=False, jobs=1).report.findings)


def test_a_helper_two_calls_from_the_loader_runs_once(tmp_path: Path) -> None:
    """widen <- prep <- load_weights (whole) and forward (per batch): prep is hot, but not with a whole buffer."""
    got = _one_file(tmp_path, (
        "def widen(t):\n    return t.float()\n\n\n"
        "def prep(t):\n    return widen(t)\n\n\n"
        "class Linear:\n"
        "    def load_weights(self):\n        self.w32 = prep(self.proj.weight)\n\n"
        "    def forward(self, x):\n        return x @ prep(x)\n"))
    assert [(f.function, f.rule, f.hot_path) for f in got] == [("widen", "CF103", ())]


@pytest.mark.parametrize("first", ["a_dump_kv", "a_norm"])
def test_the_caller_on_the_hot_path_decides_the_buffer(tmp_path: Path, first: str) -> None:
    """A cold caller first by name hands another kind (a kv pool) or an excluded buffer (a norm weight);
    forward hands a whole weight: the weight rule fires, through forward."""
    handed = "self.k_buffer" if first == "a_dump_kv" else "self.norm.weight"
    got = _one_file(tmp_path, (
        "import torch\n\n\n"
        "def cast(t):\n    return t.to(torch.bfloat16)\n\n\n"
        "class M:\n"
        f"    def {first}(self):\n        return cast({handed})\n\n"
        "    def forward(self, x):\n        return x @ cast(self.proj.weight)\n"))
    assert [(f.function, f.rule, f.hot_path) for f in got] == [("cast", "CF102", ("pkg.m.M.forward", "pkg.m.cast"))]
    assert got[0].provenance[0].startswith("pkg/m.py:13 M.forward passes self.proj.weight as t of cast")


def test_an_entry_point_runs_per_step_whoever_hands_it_the_buffer(tmp_path: Path) -> None:
    """forward_decode is called per step by the framework; only a warm-up call is visible: still hot."""
    got = _one_file(tmp_path, (
        "class Backend:\n"
        "    def forward_decode(self, q, kv):\n        return q @ kv.float()\n\n"
        "    def warmup(self):\n        return self.forward_decode(self.q, self.pool.get_kv_buffer(0))\n"))
    assert [(f.function, f.rule) for f in got] == [("Backend.forward_decode", "CF101")]


def test_a_layer_that_casts_nothing_still_hands_its_cache_on(findings: list) -> None:
    # layer.py holds no cast: it is read for what it hands on because it names a pool word.
    rules = load_rules()
    sf = next(s for s in discover([str(FIX)]) if s.path.endswith("layer.py"))
    layer = (FIX / "callpkg" / "layer.py").read_bytes()
    assert not predicate(("casts",), rules)(sf, layer)
    assert predicate(("source", ()), rules)(sf, layer)
    whole = next(f for f in findings if f.path.endswith("engines.py"))
    assert whole.provenance[0].startswith("callpkg/layer.py:")
    assert "PagedLayer.forward passes self.kv_cache[engine] as kv_cache of TritonEngine.forward" in whole.provenance[0]


def test_a_file_stopped_at_an_unparsed_callee_goes_on_from_the_stopped_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """Index.in_batches asks a file's handoffs again once the callee's file is parsed: the same handoffs as
    with every file parsed up front, and no argument's provenance walked twice."""
    from castfind.analysis.callgraph import CallGraph
    from castfind.analysis.provenance import Provenance
    from castfind.analysis.resolve import Resolver
    from castfind.analysis.summaries import Summaries
    from castfind.store.memo import Memo
    from castfind.store.textquery import TextQueries

    def run(parse_first: bool) -> tuple[list, int, int]:
        index = Index(discover([str(FIX)]), jobs=1)
        rules = load_rules()
        resolver = Resolver(index)
        graph = CallGraph(index, resolver, rules, TextQueries(index, rules, Memo(index)), ())
        prov = Provenance(rules, lambda name: None)
        summaries = Summaries(resolver, graph, prov)
        prov.across = summaries
        layer = next(sf for sf in index.files if sf.path.endswith("callpkg/layer.py"))
        index.load_files(index.files if parse_first else [layer])
        walked: list[object] = []
        origin = prov.origin
        monkeypatch.setattr(prov, "origin", lambda *a, **k: walked.append(a[2]) or origin(*a, **k))
        asked: list[object] = []
        got = index.in_batches([layer], lambda sf: asked.append(sf) or summaries.handoffs(index.facts_of(sf)))
        return got[0], len(walked), len(asked)

    want, walks, asked = run(parse_first=True)
    got, stopped_walks, stopped_asked = run(parse_first=False)
    assert asked == 1 and stopped_asked > 1  # the second run stopped at the callee's file
    assert got == want and {h[1] for h in want} >= {"TritonEngine.forward"}
    assert stopped_walks == walks
