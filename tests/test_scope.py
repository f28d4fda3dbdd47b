"""Report scope and checkouts (castfind.core.scope, discover.package_roots): tests and benchmarks are
indexed but not reported by default; every package of a checkout is found and named right."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from castfind import api
from castfind.core.config import ConfigError, load_config
from castfind.core.scope import DEFAULT_REPORT_EXCLUDE, excluded_by, in_scope
from castfind.report import ScanReport
from castfind.report import text as text_report
from castfind.store.discover import Package, describe_packages, discover, package_roots
from tests.support import REPO, run_castfind

CHECKOUT = REPO / "fixtures" / "checkout"
PROD = ("python/tinyserve/attention.py", 10, "CF101")
OUT_OF_SCOPE = {
    ("test/srt/test_linear.py", 17, "CF102"),
    ("benchmark/kv_cast/bench_kv_cast.py", 12, "CF104"),
    ("examples/offline_decode.py", 11, "CF102"),
}


def keys(findings) -> set[tuple[str, int, str]]:
    return {(f["path"], f["line"], f["rule"]) for f in findings}


@pytest.mark.parametrize("path, pattern", [
    ("test/srt/test_linear.py", "test/"),
    ("python/sglang/test/runners.py", "test/"),
    ("pkg/tests/helpers.py", "tests/"),
    ("pkg/test_utils.py", "test_*.py"),
    ("pkg/ops_test.py", "*_test.py"),
    ("conftest.py", "conftest.py"),
    ("benchmark/kernels/bench.py", "benchmark*/"),
    ("benchmarks/run.py", "benchmark*/"),
    ("examples/offline.py", "examples/"),
    ("docs/conf.py", "docs/"),
])
def test_default_patterns_take_tests_benchmarks_examples_and_docs_out(path: str, pattern: str) -> None:
    assert excluded_by(path, DEFAULT_REPORT_EXCLUDE) == pattern


@pytest.mark.parametrize("path", [
    "python/sglang/srt/layers/attention/flashinfer_backend.py",
    "python/sglang/bench_one_batch.py",  # a module named bench_*, not a benchmark folder
    "python/sglang/srt/testing_utils.py",
    "contest.py",
    "sgl-kernel/python/sgl_kernel/attention.py",
])
def test_production_paths_stay_in_scope(path: str) -> None:
    assert in_scope(path, DEFAULT_REPORT_EXCLUDE)


def test_path_patterns_match_the_whole_path() -> None:
    assert excluded_by("python/sglang/srt/debug/dump.py", ("python/*/debug/*",)) == "python/*/debug/*"
    assert in_scope("python/sglang/srt/dump.py", ("python/*/debug/*",))
    assert excluded_by("python/sglang/test/x.py", ("python/sglang/test/",)) == "python/sglang/test/"
    assert in_scope("test/x.py", ("python/sglang/test/",))
    assert in_scope("test/srt/test_x.py", ())


def test_scan_reports_production_findings_and_counts_the_rest() -> None:
    r = run_castfind("scan", str(CHECKOUT), "--no-cache", "--json")
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    assert keys(doc["findings"]) == {PROD}
    assert doc["stats"]["out_of_scope"] == len(OUT_OF_SCOPE)
    wide = run_castfind("scan", str(CHECKOUT), "--no-cache", "--json", "--include-tests")
    assert wide.returncode == 1, wide.stderr
    doc = json.loads(wide.stdout)
    assert keys(doc["findings"]) == {PROD} | OUT_OF_SCOPE
    assert doc["stats"]["out_of_scope"] == 0


def test_the_summary_line_says_how_many_were_left_out() -> None:
    r = run_castfind("scan", str(CHECKOUT), "--no-cache")
    last = r.stdout.rstrip("\n").splitlines()[-1]
    assert last == "1 error, 0 warnings, 0 info in 1 of 9 files, and 3 in tests/benchmarks, shown with --include-tests"
    wide = run_castfind("scan", str(CHECKOUT), "--no-cache", "--include-tests")
    assert "--include-tests" not in wide.stdout.splitlines()[-1]
    assert "test/srt/test_linear.py:17:20: CF102 error" in wide.stdout


def test_summary_without_findings_left_out_is_unchanged() -> None:
    assert text_report.summary(ScanReport(stats={"files": 2, "out_of_scope": 0})) == "0 errors, 0 warnings, 0 info in 0 of 2 files"
    assert text_report.summary(ScanReport(stats={"files": 2, "out_of_scope": 1})).endswith(
        ", and 1 in tests/benchmarks, shown with --include-tests")


def test_report_exclude_from_the_config(tmp_path: Path) -> None:
    root = tmp_path / "co"
    shutil.copytree(CHECKOUT, root)
    (root / "pyproject.toml").write_text('[tool.castfind]\nreport-exclude = ["benchmark*/"]\n')
    run = api.scan([str(root)], use_cache=False, jobs=1)
    got = {(f.path, f.line, f.rule) for f in run.report.findings}
    assert got == {PROD, ("test/srt/test_linear.py", 17, "CF102"), ("examples/offline_decode.py", 11, "CF102")}
    assert run.report.stats["out_of_scope"] == 1
    (root / "pyproject.toml").write_text("[tool.castfind]\nreport-exclude = []\n")
    assert len(api.scan([str(root)], use_cache=False, jobs=1).report.findings) == 4


@pytest.mark.parametrize("value, reason", [
    ('"test/"', "must be a list of strings"),
    ('[""]', "empty pattern"),
    ('["/test/"]', "relative to the scanned root"),
])
def test_bad_report_exclude_names_the_key(tmp_path: Path, value: str, reason: str) -> None:
    (tmp_path / "pyproject.toml").write_text(f"[tool.castfind]\nreport-exclude = {value}\n")
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path)
    assert info.value.key == "report-exclude" and reason in info.value.reason
    r = run_castfind("scan", str(tmp_path), "--no-cache")
    assert r.returncode == 2 and "report-exclude" in r.stderr and "Traceback" not in r.stderr


def test_default_config_holds_the_default_patterns(tmp_path: Path) -> None:
    assert load_config(tmp_path).report_exclude == DEFAULT_REPORT_EXCLUDE


def test_include_tests_is_its_own_carried_configuration(tmp_path: Path) -> None:
    """The scope decides which calls count as callers, so each scope carries its own results."""
    cache = tmp_path / "cache"
    first = api.scan([str(CHECKOUT)], cache_dir=cache, jobs=1)
    wide = api.scan([str(CHECKOUT)], cache_dir=cache, jobs=1, include_tests=True)
    assert wide.report.stats["outcome"] == "computed" and wide.report.stats["parsed"] == 0  # facts are shared
    assert len(wide.report.findings) == len(first.report.findings) + first.report.stats["out_of_scope"]
    for include_tests, before in ((True, wide), (False, first)):
        again = api.scan([str(CHECKOUT)], cache_dir=cache, jobs=1, include_tests=include_tests)
        assert again.report.stats["outcome"] == "carried" and again.report.stats["loaded"] == 0
        assert again.report.findings == before.report.findings


TEST_ONLY_CALLER = {
    "python/app/__init__.py": "",
    "python/app/pool.py": (
        "class KVPool:\n"
        "    def __init__(self, k_buffer):\n"
        "        self.k_buffer = k_buffer\n\n"
        "    def get_key_buffer(self, layer_id: int):\n"
        "        return self.k_buffer[layer_id]\n\n\n"
        "def keys_as_float(pool: KVPool, layer_id: int):\n"
        "    return pool.get_key_buffer(layer_id).float()\n"),
    # A reference module in a test: its forward is an entry point, and it calls the production helper.
    "test/test_pool.py": (
        "from torch import nn\n\n"
        "from app.pool import keys_as_float\n\n\n"
        "class RefAttention(nn.Module):\n"
        "    def forward(self, q, layer_id: int):\n"
        "        return q @ keys_as_float(self.pool, layer_id).t()\n"),
}


@pytest.mark.parametrize("production_caller", [False, True])
def test_a_call_from_a_test_does_not_make_production_code_hot(tmp_path: Path, production_caller: bool) -> None:
    files = dict(TEST_ONLY_CALLER)
    if production_caller:  # the look-alike: a production forward calls the same helper
        files["python/app/layer.py"] = (
            "from app.pool import keys_as_float\n\n\n"
            "class Attention:\n"
            "    def forward(self, q, layer_id: int):\n"
            "        return q @ keys_as_float(self.pool, layer_id).t()\n")
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    default = api.scan([str(tmp_path)], use_cache=False, jobs=1).report.findings
    every = api.scan([str(tmp_path)], use_cache=False, jobs=1, include_tests=True).report.findings
    at = [(f.path, f.line, f.rule, f.hot_path) for f in default if f.path == "python/app/pool.py"]
    if production_caller:
        assert at == [("python/app/pool.py", 10, "CF101", ("app.layer.Attention.forward", "app.pool.keys_as_float"))]
    else:
        assert at == [("python/app/pool.py", 10, "CF104", ())]  # whole, but no production entry point reaches it
    # With --include-tests every file is in scope: the test's forward is a hot path like any other.
    assert [(f.path, f.rule) for f in every if f.path == "python/app/pool.py"] == [("python/app/pool.py", "CF101")]


HANDED_BY_A_TEST = {
    "python/app/__init__.py": "",
    # The production forward hands the helper a per-batch tensor.
    "python/app/quant.py": ("def dequant(w):\n    return w.float()\n\n\n"
                            "class Attention:\n    def forward(self, x):\n        return dequant(x)\n"),
    # A test hands it a whole weight (and casts a bias itself, so it is read for whole buffers).
    "test/test_quant.py": ("from app.quant import dequant\n\n\n"
                           "def test_dequant(layer):\n    ref = layer.bias.float()\n"
                           "    assert dequant(layer.weight).dtype == ref.dtype\n"),
}


def test_a_whole_buffer_a_test_hands_to_production_code_does_not_count(tmp_path: Path) -> None:
    for rel, text in HANDED_BY_A_TEST.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    whole = api.scan([str(tmp_path)], use_cache=False, jobs=1).report
    part = api.scan([str(tmp_path / "python")], use_cache=False, jobs=1).report
    assert whole.findings == part.findings == ()
    # With --include-tests the test's call counts: a whole weight, but the test is no per-step path.
    every = api.scan([str(tmp_path)], use_cache=False, jobs=1, include_tests=True).report.findings
    assert [(f.path, f.rule) for f in every if f.path == "python/app/quant.py"] == [("python/app/quant.py", "CF104")]


def test_two_scans_of_one_index_with_other_scopes_do_not_share_answers(tmp_path: Path) -> None:
    """The resolver's per-index answers outlive a scan; what callers hand is each scan's own."""
    from castfind.analysis.scan import scan
    from castfind.core.rules import load_rules
    from castfind.store.index import Index

    for rel, text in HANDED_BY_A_TEST.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    index = Index(discover([str(tmp_path)]), jobs=1)
    scoped = scan(index, load_rules(), report_exclude=DEFAULT_REPORT_EXCLUDE).findings
    every = scan(index, load_rules()).findings
    fresh = scan(Index(discover([str(tmp_path)]), jobs=1), load_rules()).findings
    assert [f.rule for f in scoped if f.path == "python/app/quant.py"] == []
    assert [(f.path, f.rule) for f in every] == [(f.path, f.rule) for f in fresh]
    assert ("python/app/quant.py", "CF104") in [(f.path, f.rule) for f in every]


def test_every_package_of_a_checkout_is_found_and_named_right() -> None:
    files = discover([str(CHECKOUT)])
    modules = {sf.path: sf.module for sf in files}
    assert modules["python/tinyserve/attention.py"] == "tinyserve.attention"
    assert modules["kernel/python/tinykern/ops.py"] == "tinykern.ops"
    assert modules["kernel/python/tinykern/__init__.py"] == "tinykern"
    pkgs = package_roots(files, DEFAULT_REPORT_EXCLUDE)
    assert pkgs == (Package("tinykern", str(CHECKOUT), "kernel/python/"), Package("tinyserve", str(CHECKOUT), "python/"))
    assert describe_packages(pkgs) == "indexing tinykern (kernel/python/), tinyserve (python/)"


def test_packages_in_test_folders_are_indexed_not_announced(tmp_path: Path) -> None:
    for rel in ("src/app/__init__.py", "tests/helpers/__init__.py", "lib/__init__.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    files = discover([str(tmp_path)])
    assert {sf.module for sf in files} == {"app", "helpers", "lib"}
    assert describe_packages(package_roots(files, DEFAULT_REPORT_EXCLUDE)) == "indexing lib (./), app (src/)"
    assert describe_packages(package_roots(discover([str(tmp_path / "lib")]))) == "indexing lib (the root)"
    assert describe_packages(()) is None


def test_the_packages_are_said_once_on_stderr_by_scan_and_where() -> None:
    line = "castfind: indexing tinykern (kernel/python/), tinyserve (python/)"
    r = run_castfind("scan", str(CHECKOUT), "--no-cache", "--json")
    assert r.stderr.splitlines().count(line) == 1, r.stderr
    assert json.loads(r.stdout)["stats"]["packages"] == [
        {"name": "tinykern", "root": str(CHECKOUT), "folder": "kernel/python/"},
        {"name": "tinyserve", "root": str(CHECKOUT), "folder": "python/"},
    ]
    w = run_castfind("where", "pad_to_multiple", "--root", str(CHECKOUT), "--no-cache")
    assert w.returncode == 0 and w.stderr.splitlines().count(line) == 1, w.stderr


def test_where_marks_call_sites_in_tests() -> None:
    r = run_castfind("where", "pad_to_multiple", "--root", str(CHECKOUT), "--no-cache", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["call_sites"] == [
        {"path": "python/tinyserve/attention.py", "line": 11, "test": False},
        {"path": "test/srt/test_linear.py", "line": 22, "test": True},
    ]
    text = run_castfind("where", "pad_to_multiple", "--root", str(CHECKOUT), "--no-cache").stdout
    assert "  test/srt/test_linear.py:22  (test)\n" in text
    assert "  python/tinyserve/attention.py:11\n" in text


def test_scanning_the_package_folder_gives_the_same_production_findings() -> None:
    whole = api.scan([str(CHECKOUT)], use_cache=False, jobs=1).report.findings
    part = api.scan([str(CHECKOUT / "python")], use_cache=False, jobs=1).report.findings
    assert {("python/" + f.path, f.line, f.rule) for f in part} == {(f.path, f.line, f.rule) for f in whole} == {PROD}
