"""The reporter registry (castfind.report.registry): one signature, picked by --format, open to new formats."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from castfind import api, cli
from castfind.core.rules import MEASURED_CAST, load_rules
from castfind.report import ReportContext, ScanReport, SourceCache, registry, sarif, text
from castfind.report import json as json_report
from castfind.report.registry import Reporter
from tests.support import REPO

FIX = REPO / "fixtures" / "scan" / "minisrv"
runner = CliRunner()


def toy(report: ScanReport, ctx: ReportContext) -> str:
    """A format castfind does not ship: one line per finding, and the number of rules it knows."""
    lines = [f"{f.rule} {f.path}:{f.line}" for f in report.findings]
    return "\n".join([*lines, f"{len(ctx.rules)} rules"]) + "\n"


@pytest.fixture(scope="module")
def scanned() -> api.ScanRun:
    return api.scan([str(FIX)], use_cache=False, jobs=1)


@pytest.fixture()
def with_toy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry.REPORTERS, "toy", Reporter(toy))


def test_the_builtin_formats() -> None:
    assert list(registry.REPORTERS) == ["text", "json", "sarif", "github", "gitlab", "junit", "markdown"]
    assert registry.DEFAULT_FORMAT == "text"
    with pytest.raises(registry.UnknownFormat, match="expected one of text, json, sarif, github, gitlab, junit, markdown$"):
        registry.get("yaml")


def test_builtin_reporters_match_their_own_render(scanned: api.ScanRun) -> None:
    report, src = scanned.report, SourceCache()
    ctx = ReportContext(rules=scanned.rules, source_line=src.line, color=True)
    assert registry.get("text").render(report, ctx) == text.render(report, src.line, color=True)
    assert registry.get("json").render(report, ctx) == json_report.render(report)
    meta = {r.id: {"name": r.name, "message": r.message, "fix": r.fix, "severity": r.severity, "help_uri": r.help_uri}
            for r in scanned.rules}
    assert registry.get("sarif").render(report, ctx) == sarif.render(report, meta)


def test_sarif_describes_rules_from_rule_objects_cf900_included(scanned: api.ScanRun) -> None:
    doc = json.loads(registry.get("sarif").render(scanned.report, ReportContext(rules=scanned.rules)))
    rules = {r["id"]: r for r in doc["runs"][0]["tool"]["driver"]["rules"]}
    assert set(rules) == {r.id for r in load_rules().rules} | {"CF900", "CF001"}  # CF001: unused ignore comments
    assert rules["CF900"]["name"] == MEASURED_CAST.name
    assert rules["CF900"]["defaultConfiguration"] == {"level": "warning"}
    assert rules["CF900"]["help"]["text"] == MEASURED_CAST.fix


def test_cf900_is_defined_once() -> None:
    literal = '"CF900"'
    holders = [p.relative_to(REPO).as_posix() for p in sorted((REPO / "castfind").rglob("*.py"))
               if literal in p.read_text(encoding="utf-8")]
    assert holders == ["castfind/core/rules.py"]


def test_register_wraps_a_plain_render_function(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "REPORTERS", dict(registry.REPORTERS))
    registry.register("toy", toy)
    assert registry.get("toy") == Reporter(toy)


@pytest.mark.usefixtures("with_toy")
def test_the_cli_renders_a_registered_format() -> None:
    r = runner.invoke(cli.app, ["scan", str(FIX), "--no-cache", "-j", "1", "--format", "toy"])
    assert r.exit_code == 1, r.output  # the fixture's CF101 errors
    lines = r.stdout.splitlines()
    assert lines[0] == "CF101 minisrv/backend.py:14"
    assert lines[-1] == f"{len(load_rules().rules) + 2} rules"  # the rule set's, CF900 and CF001


@pytest.mark.usefixtures("with_toy")
def test_the_api_renders_a_registered_format(scanned: api.ScanRun) -> None:
    doc = registry.get("toy").render(scanned.report, ReportContext(rules=scanned.rules))
    assert doc == toy(scanned.report, ReportContext(rules=scanned.rules))
    assert doc.count("\n") == len(scanned.report.findings) + 1


@pytest.mark.usefixtures("with_toy")
def test_an_unknown_format_is_a_usage_error_listing_the_registry() -> None:
    r = runner.invoke(cli.app, ["scan", str(FIX), "--no-cache", "--format", "yaml"])
    assert r.exit_code == 2
    assert r.stderr == ("castfind: --format yaml: unknown format; expected one of text, json, sarif, github, gitlab, "
                        "junit, markdown, toy\n")
    assert r.stdout == ""


def test_format_json_and_sarif_print_what_json_and_sarif_dash_print(tmp_path: Path) -> None:
    def out(*args: str) -> str:
        r = runner.invoke(cli.app, ["scan", str(FIX), "--no-cache", "-j", "1", *args])
        assert r.exit_code == 1, r.output
        # Only the timing may differ between two scans.
        return "\n".join(line for line in r.stdout.splitlines() if '"seconds"' not in line)

    assert out("--format", "json") == out("--json")
    assert out("--format", "sarif") == out("--sarif", "-")
    assert out("--format", "text") == out()


@pytest.mark.parametrize(("args", "message"), [
    (["--json", "--format", "text"], "castfind: --json --format text: --json is --format json — give one of them\n"),
    (["--format", "json", "--sarif", "-"],
     "castfind: --sarif - --format json: only one document can go to stdout — write the SARIF to a file "
     "(--sarif FILE) or drop --format\n"),
])
def test_conflicting_outputs_are_usage_errors(args: list[str], message: str) -> None:
    r = runner.invoke(cli.app, ["scan", str(FIX), "--no-cache", *args])
    assert (r.exit_code, r.stderr, r.stdout) == (2, message, "")
