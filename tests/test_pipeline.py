"""The phases of a scan (castfind.pipeline): plan, run and post, each on its own, and api.scan as the three."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from castfind import api, pipeline
from castfind.analysis.findings import BaselineError
from castfind.core.rules import MEASURED_CAST, load_rules
from castfind.pipeline import IndexOptions, RunOutput, ScanPlan, ScanRequest
from castfind.store.discover import DiscoveryError
from tests.support import REPO

FIX = REPO / "fixtures" / "scan" / "minisrv"
POOL = FIX / "minisrv" / "pool.py"
NO_CACHE = IndexOptions(use_cache=False, jobs=1)


def request(**kw) -> ScanRequest:
    base: dict = dict(paths=(str(FIX),), index=NO_CACHE)
    base.update(kw)
    return ScanRequest(**base)


def without_timing(stats) -> dict:
    return {k: v for k, v in stats.items() if k != "seconds"}


def test_plan_settles_roots_rules_and_index_without_parsing() -> None:
    p = pipeline.plan(request())
    assert isinstance(p, ScanPlan)
    assert p.roots == (str(FIX),)
    assert {"CF101", "CF102", "CF103", "CF104"} <= {r.id for r in p.ruleset.rules}
    assert p.only is None and p.memo is None and p.memo_key is None  # no cache: nothing carried
    assert p.index.parsed == 0 and p.index.loaded == 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.roots = ()  # type: ignore[misc]


def test_plan_checks_only_files_and_outputs_before_opening_the_index(tmp_path: Path, monkeypatch) -> None:
    def no_index(*args, **kwargs):
        raise AssertionError("the index was opened before the request was checked")

    monkeypatch.setattr(pipeline, "open_index", no_index)
    outside = tmp_path / "x.py"
    outside.write_text("x = 1\n")
    with pytest.raises(DiscoveryError, match="outside every root"):
        pipeline.plan(request(paths=(str(outside),), roots=(str(FIX),), only=True))
    with pytest.raises(BaselineError, match="not a castfind baseline"):
        pipeline.plan(request(write_baseline=str(outside)))  # it would overwrite source code


def test_plan_only_holds_absolute_paths() -> None:
    p = pipeline.plan(request(paths=(str(POOL),), roots=(str(FIX),), only=True))
    assert p.only == frozenset({str(POOL)})


def test_run_returns_the_engines_findings_frozen() -> None:
    out = pipeline.run(pipeline.plan(request()))
    assert isinstance(out, RunOutput)
    assert isinstance(out.findings, tuple) and isinstance(out.diagnostics, tuple)
    assert {f.rule for f in out.findings} == {"CF101", "CF102", "CF103", "CF104"}
    assert out.modules["minisrv/pool.py"] == "minisrv.pool"
    with pytest.raises(dataclasses.FrozenInstanceError):
        out.findings = ()  # type: ignore[misc]


def test_post_ranks_once_whatever_order_it_is_given() -> None:
    p = pipeline.plan(request())
    out = pipeline.run(p)
    shuffled = dataclasses.replace(out, findings=tuple(reversed(out.findings)))
    assert pipeline.post(p, shuffled).report.findings == pipeline.post(p, out).report.findings
    ranked = pipeline.post(p, out)
    assert [f.severity for f in ranked.report.findings] == sorted(
        (f.severity for f in ranked.report.findings), key=["error", "warning", "info"].index)
    assert ranked.report.stats["roots"] == [str(FIX)]
    assert (ranked.report.stats["suppressed"], ranked.report.stats["baseline_hidden"]) == (0, 0)


def test_post_on_a_hand_built_run_output_joins_traces(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    header = {"castfind_trace": 1, "torch": "2.13.0", "devices": ["cpu"], "wall_s": 1.0, "steps": 1, "source": "t"}
    site = {"path": "minisrv/pool.py", "line": 9, "function": "f", "op": "aten::_to_copy", "src_dtype": "float8_e4m3fn",
            "dst_dtype": "bfloat16", "shape": [4], "device": "cpu", "calls": 2, "bytes_per_call": 12}
    trace.write_text(json.dumps(header) + "\n" + json.dumps(site) + "\n")
    p = pipeline.plan(request(traces=(str(trace),)))
    empty = RunOutput(findings=(), diagnostics=(), stats={"files": 3}, modules={"minisrv/pool.py": "minisrv.pool"},
                      explanations={})
    done = pipeline.post(p, empty)
    (cf900,) = done.report.findings
    assert (cf900.rule, cf900.name, cf900.path, cf900.line, cf900.root) == (
        MEASURED_CAST.id, MEASURED_CAST.name, "minisrv/pool.py", 9, str(FIX))
    assert done.report.stats == {"files": 3, "suppressed": 0, "baseline_hidden": 0, "out_of_scope": 0, "deselected": 0,
                                 "roots": [str(FIX)], "packages": [{"name": "minisrv", "root": str(FIX), "folder": ""}]}
    assert MEASURED_CAST in done.rules


def test_api_scan_is_plan_run_post() -> None:
    whole = api.scan([str(FIX)], use_cache=False, jobs=1)
    p = pipeline.plan(request())
    parts = pipeline.post(p, pipeline.run(p))
    assert parts.report.findings == whole.report.findings
    assert parts.report.diagnostics == whole.report.diagnostics
    assert without_timing(parts.report.stats) == without_timing(whole.report.stats)
    assert (parts.fail_on, parts.rules, parts.wrote_baseline) == (whole.fail_on, whole.rules, whole.wrote_baseline)


def test_save_memo_stores_what_run_added(tmp_path: Path) -> None:
    opts = IndexOptions(cache_dir=str(tmp_path / "cache"), jobs=1)
    p = pipeline.plan(request(index=opts))
    assert p.memo is not None and p.memo_key is not None and p.index.cache is not None
    assert p.index.cache.get_memo(p.memo_key) is None
    pipeline.run(p)
    pipeline.save_memo(p)
    assert p.index.cache.get_memo(p.memo_key) is not None
    warm = pipeline.plan(request(index=opts))
    assert pipeline.run(warm).stats["replayed"] > 0


def test_report_rules_add_cf900_unless_a_rule_file_claims_it(tmp_path: Path) -> None:
    rules = load_rules()
    assert pipeline.report_rules(rules) == (*rules.rules, MEASURED_CAST)
    claimed = dataclasses.replace(rules, rules=(*rules.rules, dataclasses.replace(MEASURED_CAST, severity="error")))
    assert pipeline.report_rules(claimed) == claimed.rules
