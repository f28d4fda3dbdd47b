"""``--fail-on`` decides one thing, failing or not, and every consumer agrees: the exit code, JUnit's
failures and GitLab's blocking severities (issue 37, item 2); ``--exit-zero`` changes only the exit code;
``--write-baseline`` records, says how many, and exits 0."""

from __future__ import annotations

import json
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from castfind.report.gitlab import BLOCKING
from tests.support import run_castfind

SEVERITY_RANK = {"error": 0, "warning": 1, "info": 2}
#: fixtures/scan: 3 errors, 1 warning, 2 info; fixtures/fail_on: one CF103 (info).
FIXTURES = {"scan": {"error": 3, "warning": 1, "info": 2}, "fail_on": {"error": 0, "warning": 0, "info": 1}}


def _scan(tmp_path: Path, fixture: str, *extra: str):
    out = tmp_path / fixture
    out.mkdir(exist_ok=True)
    proc = run_castfind("scan", f"fixtures/{fixture}", "--cache-dir", str(tmp_path / "cache"), "--json",
                        "--junit-output", str(out / "junit.xml"), "--gitlab-output", str(out / "gl.json"), *extra)
    return proc, json.loads(proc.stdout), ET.parse(out / "junit.xml").getroot(), json.loads((out / "gl.json").read_text())


@pytest.mark.parametrize("fixture", sorted(FIXTURES))
@pytest.mark.parametrize("fail_on", [None, "error", "warning", "info"])
def test_exit_code_junit_and_gitlab_agree(tmp_path: Path, fixture: str, fail_on: str | None) -> None:
    proc, doc, junit, gitlab = _scan(tmp_path, fixture, *(["--fail-on", fail_on] if fail_on else []))
    counts = {s: sum(f["severity"] == s for f in doc["findings"]) for s in SEVERITY_RANK}
    assert counts == FIXTURES[fixture]
    level = fail_on or "error"
    failing = sum(n for s, n in counts.items() if SEVERITY_RANK[s] <= SEVERITY_RANK[level])
    assert proc.returncode == (1 if failing else 0), proc.stderr
    assert junit.get("failures") == junit.find("testsuite").get("failures") == str(failing)
    assert junit.get("tests") == str(sum(counts.values()))
    assert len(junit.findall("testsuite/testcase/failure")) == failing
    assert sum(i["severity"] in BLOCKING for i in gitlab) == failing
    # Each issue blocks exactly when its finding fails (the report's order is kept).
    for issue, f in zip(gitlab, doc["findings"], strict=True):
        assert (issue["severity"] in BLOCKING) == (SEVERITY_RANK[f["severity"]] <= SEVERITY_RANK[level])


def test_one_info_finding_passes_by_default(tmp_path: Path) -> None:
    proc, _, junit, gitlab = _scan(tmp_path, "fail_on")
    assert proc.returncode == 0
    assert junit.get("failures") == "0"
    assert [i["severity"] for i in gitlab] == ["info"]
    case = junit.find("testsuite/testcase")
    assert case.find("failure") is None and "CF103" in case.find("system-out").text


def test_exit_zero_changes_only_the_exit_code(tmp_path: Path) -> None:
    proc, doc, junit, _ = _scan(tmp_path, "scan", "--exit-zero")
    assert proc.returncode == 0, proc.stderr
    assert len(doc["findings"]) == 6
    assert junit.get("failures") == "3"  # the report still says what fails the build


def test_exit_zero_keeps_usage_errors(tmp_path: Path) -> None:
    proc = run_castfind("scan", "fixtures/scan", "--exit-zero", "--fail-on", "bogus")
    assert proc.returncode == 2
    assert "--fail-on bogus" in proc.stderr


def test_write_baseline_records_says_how_many_and_exits_0(tmp_path: Path) -> None:
    baseline = tmp_path / "baseline.json"
    proc = run_castfind("scan", "fixtures/scan", "--cache-dir", str(tmp_path / "cache"), "--write-baseline",
                        str(baseline))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""  # no report: the baseline is what was asked for
    assert f"castfind: recorded 6 findings in {baseline}" in proc.stderr.splitlines()
    recorded = json.loads(baseline.read_text())
    assert sum(e.get("count", 1) for e in recorded["findings"]) == 6
    again = run_castfind("scan", "fixtures/scan", "--cache-dir", str(tmp_path / "cache"), "--baseline", str(baseline))
    assert again.returncode == 0 and "6 hidden by baseline" in again.stdout

