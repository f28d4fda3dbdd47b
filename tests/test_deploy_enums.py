"""Issue 35, a value produced only under a false branch: a comparison with an enum member (``route ==
Route.FUSED_HIP``, ``is``, ``in (…)``) is false on a deployment when every place that produces the member sits under
a test the deployment evaluates false, directly or through a module-level table read only there; any producer under
an open test, or a call of the enum class itself, keeps it open (fixtures/deploy_enums/enumkit, written for these
tests)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from castfind import api
from castfind.analysis.deployment import deployment_of
from castfind.core.rules import load_rules
from castfind.read.extract import extract_source
from castfind.read.facts import Guard
from tests.support import REPO

FIX = REPO / "fixtures" / "deploy_enums"
HIP, NPU, FUSED, PLAIN = 21, 24, 27, 30  # the casts of run_hip, run_npu, run_fused, run_plain (backend.py)


def _off(root: Path, platform: str | None) -> dict[int, str]:
    run = api.scan([str(root)], use_cache=False, jobs=1, platform=platform, all_paths=True)
    return {f.line: f.off_path for f in run.report.findings if f.path.endswith("backend.py")}


def test_the_extractor_records_producers_with_their_guards_and_table() -> None:
    src = (FIX / "enumkit" / "routes.py").read_bytes()
    facts = extract_source(src, "enumkit.routes", "enumkit/routes.py", False)
    got = {(p.text, p.scope, tuple((g.test, g.negated) for g in p.guards), p.into) for p in facts.produced}
    assert ("Route.FUSED_HIP", "pick_route", (("_is_hip", False), ("batch.fused", False)), "") in got
    assert ("Route.FUSED_NPU", "", (), "_NPU_SWAPS") in got
    assert ("_NPU_SWAPS", "swap_for_npu", (("not _is_npu", True),), "") in got
    # The members' definitions in the class body are no producers, nor is a comparison's operand.
    assert not any(p.scope == "Route" for p in facts.produced)
    backend = extract_source((FIX / "enumkit" / "backend.py").read_bytes(), "enumkit.backend", "enumkit/backend.py",
                             False)
    assert backend.produced == ()


@pytest.mark.parametrize(("platform", "off"), [
    (None, set()),
    ("cuda", {HIP, NPU}),
    ("rocm", {NPU}),
    ("npu", {HIP}),
])
def test_a_member_produced_only_on_another_platform_is_off(platform: str | None, off: set[int]) -> None:
    found = _off(FIX, platform)
    assert set(found) == {HIP, NPU, FUSED, PLAIN}
    assert {line for line, why in found.items() if why} == off
    if platform == "cuda":
        assert found[HIP] == "branch: route == Route.FUSED_HIP is false on --platform cuda"
        assert found[NPU] == "branch: route is Route.FUSED_NPU is false on --platform cuda"


def test_calling_the_enum_class_keeps_every_member_open(tmp_path: Path) -> None:
    root = tmp_path / "kit"
    shutil.copytree(FIX, root)
    (root / "enumkit" / "parse.py").write_text("from enumkit.routes import Route\n\n\ndef parse(value):\n"
                                               "    return Route(value)\n")
    assert _off(root, "cuda") == dict.fromkeys((HIP, NPU, FUSED, PLAIN), "")


def test_a_producer_under_an_open_test_keeps_the_member_open(tmp_path: Path) -> None:
    root = tmp_path / "kit"
    shutil.copytree(FIX, root)
    (root / "enumkit" / "more.py").write_text("from enumkit.routes import Route\n\n\ndef forced(batch):\n"
                                              "    if batch.force_hip:\n        return Route.FUSED_HIP\n")
    found = _off(root, "cuda")
    assert found[HIP] == "" and found[NPU].startswith("branch: ")


def test_the_evaluator_without_producers_keeps_a_member_test_open() -> None:
    dep = deployment_of(load_rules().deployment, "cuda")
    assert dep.evaluate("route == Route.FUSED_HIP") == (None, ())
    assert dep.holds(Guard("route is Route.FUSED_NPU", negated=True)) is None


def _count_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every time the producers touch the identifier index or the facts (a member's uses, a call of its class)."""
    from castfind.analysis.producers import Producers

    reads: list[str] = []
    uses, built = Producers.uses, Producers._built

    def counted_uses(self: Producers, name: str) -> Any:
        reads.append(name)
        return uses(self, name)

    def counted_built(self: Producers, cls: str) -> bool:
        reads.append(cls)
        return built(self, cls)

    monkeypatch.setattr(Producers, "uses", counted_uses)
    monkeypatch.setattr(Producers, "_built", counted_built)
    return reads


def _scan_cached(root: Path, cache: Path) -> tuple[dict[int, str], list[dict[str, Any]]]:
    run = api.scan([str(root)], cache_dir=str(cache), jobs=1, platform="cuda", all_paths=True)
    found = run.report.findings
    return {f.line: f.off_path for f in found if f.path.endswith("backend.py")}, [f.to_dict() for f in found]


def test_a_warm_deployment_scan_reads_the_producers_answers_back(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    root, cache = tmp_path / "kit", tmp_path / "cache"
    shutil.copytree(FIX, root)
    reads = _count_reads(monkeypatch)
    cold = _scan_cached(root, cache)
    assert reads and {line for line, why in cold[0].items() if why} == {HIP, NPU}
    reads.clear()
    assert _scan_cached(root, cache) == cold  # the same findings, each member's answer carried
    assert reads == []


def test_an_edited_file_or_a_damaged_row_computes_the_producers_again(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from castfind.store.cache import Cache

    root, cache = tmp_path / "kit", tmp_path / "cache"
    shutil.copytree(FIX, root)
    reads = _count_reads(monkeypatch)
    _scan_cached(root, cache)
    # Damaged rows (the producers' answers, the pruned findings): read as garbage, computed again (the same).
    get_memo, damaged = Cache.get_memo, []

    def damaging(self: Cache, key: str) -> bytes | None:
        if key.startswith(("producers-", "deployment-")):
            damaged.append(key)
            return b"\x00not a row"
        return get_memo(self, key)

    monkeypatch.setattr(Cache, "get_memo", damaging)
    reads.clear()
    assert {line for line, why in _scan_cached(root, cache)[0].items() if why} == {HIP, NPU}
    assert {k.split("-")[0] for k in damaged} == {"producers", "deployment"} and reads
    monkeypatch.setattr(Cache, "get_memo", get_memo)
    reads.clear()
    _scan_cached(root, cache)  # stored again whole: the next run reads it back
    assert reads == []
    # An edited file: a producer of FUSED_HIP under an open test now keeps that member open.
    (root / "enumkit" / "more.py").write_text("from enumkit.routes import Route\n\n\ndef forced(batch):\n"
                                              "    if batch.force_hip:\n        return Route.FUSED_HIP\n")
    reads.clear()
    found = _scan_cached(root, cache)[0]
    assert reads and found[HIP] == "" and found[NPU].startswith("branch: ")
