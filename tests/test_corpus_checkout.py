"""Acceptance on a checkout-shaped tree built from real parts (``.corpus/checkout``): the sglang wheel's
package under ``python/``, sgl-kernel's under ``sgl-kernel/python/``, and test/benchmark files.

PERF: the engine runs once on the checkout (facts come from the session's shared cache, which holds
every sglang file by content); its output is posted twice, in the default scope and with tests
included, as ``--include-tests`` would. ``scan CHECKOUT/python`` holds exactly the files of the
sglang wheel (checked below, by path and content), so the session's scan of the wheel stands for it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from pathlib import Path

import pytest

from castfind import pipeline
from castfind.report import text as text_report
from tests.support import run_castfind

pytestmark = pytest.mark.corpus


def py_files(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.blake2b(p.read_bytes(), digest_size=16).hexdigest()
            for p in root.rglob("*.py") if "__pycache__" not in p.parts}


@pytest.fixture(scope="module")
def checkout_run(checkout, corpus_cache):
    """One engine run over the checkout, posted in the default scope and with tests included."""
    t0 = time.perf_counter()
    plan = pipeline.plan(pipeline.ScanRequest(paths=(str(checkout),), index=pipeline.IndexOptions(
        cache_dir=corpus_cache, jobs=2)))
    out = pipeline.run(plan)
    default = pipeline.post(plan, out)
    wide = pipeline.post(dataclasses.replace(plan, report_exclude=()), out)
    print(f"\ncheckout scan: {time.perf_counter() - t0:.1f} s, {out.stats['files']} files, "
          f"{out.stats['parsed']} parsed")
    return default, wide


def key(f) -> tuple[str, int, str]:
    return (f["path"], f["line"], f["rule"]) if isinstance(f, dict) else (f.path, f.line, f.rule)


def test_checkout_holds_the_wheels_package_and_sgl_kernel(checkout, corpus):
    assert py_files(checkout / "python") == py_files(corpus["sglang"])
    kernel = py_files(checkout / "sgl-kernel" / "python")
    assert "sgl_kernel/__init__.py" in kernel and len(kernel) > 20
    assert (checkout / "test").is_dir() and (checkout / "benchmark").is_dir()


def test_checkout_reports_exactly_the_package_findings_and_the_scope_line(checkout_run, sglang_scan):
    default, _ = checkout_run
    report = default.report
    got = {key(f) for f in report.findings}
    assert {p for p, _, _ in got if not p.startswith(("python/", "sgl-kernel/"))} == set()
    sglang = {(p.removeprefix("python/"), line, rule) for p, line, rule in got if p.startswith("python/")}
    assert sglang == {key(f) for f in sglang_scan["findings"]}
    assert len(sglang) > 50
    assert report.stats["out_of_scope"] >= 3
    assert text_report.summary(report).endswith(
        f", and {report.stats['out_of_scope']} in tests/benchmarks, shown with --include-tests")
    names = {(p["name"], p["folder"]) for p in report.stats["packages"]}
    assert names == {("sglang", "python/"), ("sgl_kernel", "sgl-kernel/python/")}


def test_include_tests_shows_the_test_and_benchmark_findings(checkout_run):
    default, wide = checkout_run
    extra = {key(f) for f in wide.report.findings} - {key(f) for f in default.report.findings}
    assert len(extra) == default.report.stats["out_of_scope"]
    assert ("test/srt/test_ref_linear.py", 17, "CF102") in extra
    assert ("test/srt/test_kv_pool_roundtrip.py", 13, "CF101") in extra
    assert {("benchmark/kernels/bench_kv_cast.py", line, "CF104") for line in (14, 15)} <= extra
    assert all(p.startswith(("test/", "benchmark/")) or "/test/" in p for p, _, _ in extra)


def test_where_lists_a_test_call_site_marked_as_a_test(checkout, corpus_cache):
    r = run_castfind("where", "next_power_of_2", "--root", str(checkout), "--cache-dir", str(corpus_cache), "--json")
    assert r.returncode == 0, r.stderr
    assert "castfind: indexing sglang (python/), sgl_kernel (sgl-kernel/python/)" in r.stderr.splitlines()
    sites = json.loads(r.stdout)["call_sites"]
    assert {"path": "test/srt/test_ref_linear.py", "line": 23, "test": True} in sites
    assert any(not s["test"] and s["path"].startswith("python/sglang/") for s in sites)
