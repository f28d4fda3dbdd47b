"""The CI formats (github, gitlab, junit, markdown), --statistics and several outputs in one run,
each checked against what its consumer reads: GitHub's workflow-command grammar (parsed back),
GitLab's Code Quality JSON schema, a JUnit XSD (tests/schemas/)."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from castfind import api, cli
from castfind.analysis.findings import fails, fingerprint
from castfind.core.types import Diagnostic, Finding, Runtime
from castfind.report import ReportContext, ScanReport, github, gitlab, junit, markdown, registry
from tests.support import REPO

FIX = REPO / "fixtures" / "scan" / "minisrv"
SCHEMAS = REPO / "tests" / "schemas"
runner = CliRunner()

# A finding whose every text field holds what each format must escape.
NASTY = Finding(
    rule="CF101", name="whole-kv-cache-cast-on-hot-path", severity="error", root="src", path="pkg/a, b:c.py",
    line=7, end_line=9, column=5, function="Pool.get<T>", expr='buf["k|v"].to(#dtype)',
    message='100% of "k|v" :: cast, then\nmore\r\n<b>bold</b> `tick` #35; end',
    hot_path=("pkg.Model.forward_decode", 'pkg.Attn["x"].run', "pkg.Pool.get<T>"),
    provenance=("[i] keeps it whole", ".kv_buffer is a kv-cache buffer"),
    fix="Fix: a, b", module="pkg.a_b",
    runtime=Runtime(calls=78, shape=(61, 1, 576), src_dtype="float8_e4m3fn", dst_dtype="bfloat16",
                    bytes_per_call=35_651_584, bytes_total=2_780_823_552, device="cuda:0", device_time_us=1234.5),
)
TWIN = replace(NASTY, line=12, end_line=12, runtime=None)  # same fingerprint, another line
WARN = replace(NASTY, rule="CF104", severity="warning", line=20, end_line=20, expr="x.to(y)", hot_path=(),
               runtime=None, message="plain")
INFO = replace(WARN, rule="CF103", severity="info", line=30, end_line=30, expr="z.to(y)")
DIAG = Diagnostic("src/bad.py", 3, "cannot parse: invalid syntax", "parse-error")


def synthetic() -> ScanReport:
    return ScanReport(findings=(NASTY, TWIN, WARN, INFO), diagnostics=(DIAG,), stats={"files": 3, "seconds": 0.5})


@pytest.fixture(scope="module")
def scanned() -> api.ScanRun:
    return api.scan([str(FIX)], use_cache=False, jobs=1)


def reports(scanned: api.ScanRun) -> list[ScanReport]:
    return [scanned.report, synthetic(), ScanReport()]


# --------------------------------------------------------------------------- github


def _unescape_data(text: str) -> str:
    return text.replace("%0D", "\r").replace("%0A", "\n").replace("%25", "%")


def _unescape_property(text: str) -> str:
    return _unescape_data(text.replace("%3A", ":").replace("%2C", ","))


_COMMAND = re.compile(r"^::(?P<name>[a-z-]+)(?: (?P<props>[^:]*))?::(?P<message>.*)$")


def parse_command(line: str) -> tuple[str, dict[str, str], str]:
    """A workflow command read the way the Actions runner reads one (ActionCommand.TryParseV2)."""
    m = _COMMAND.match(line)
    assert m is not None, line
    props: dict[str, str] = {}
    for pair in (m["props"] or "").split(","):
        key, sep, value = pair.partition("=")
        assert sep and key, (pair, line)
        props[key] = _unescape_property(value)
    return m["name"], props, _unescape_data(m["message"])


def test_github_commands_parse_back_to_the_findings(scanned: api.ScanRun) -> None:
    for rep in reports(scanned):
        lines = github.render(rep).splitlines()
        assert len(lines) == len(rep.findings) + len(rep.diagnostics)
        for f, line in zip(rep.findings, lines, strict=False):
            assert "\n" not in line and "\r" not in line
            name, props, message = parse_command(line)
            assert name == {"error": "error", "warning": "warning", "info": "notice"}[f.severity]
            assert props["file"].endswith(f.path) and not Path(props["file"]).is_absolute()
            assert (props["line"], props["col"], props["endLine"], props["title"]) == (
                str(f.line), str(f.column), str(f.end_line), f.rule)
            assert message.startswith(f.message)
    name, props, message = parse_command(github.render(synthetic()).splitlines()[-1])
    assert (name, props, message) == ("warning", {"file": "src/bad.py", "line": "3", "title": "castfind parse-error"},
                                      DIAG.message)


def test_github_escapes_what_would_end_a_command() -> None:
    line = github.render(ScanReport(findings=(NASTY,))).rstrip("\n")
    assert line.startswith("::error file=src/pkg/a%2C b%3Ac.py,line=7,col=5,endLine=9,title=CF101::100%25 of")
    _, props, message = parse_command(line)
    assert props["file"] == "src/pkg/a, b:c.py"
    assert message.split("\nhot path: ")[0] == NASTY.message


# --------------------------------------------------------------------------- gitlab


def test_gitlab_code_quality_validates_against_its_schema(scanned: api.ScanRun) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((SCHEMAS / "gitlab-codequality.schema.json").read_text(encoding="utf-8"))
    validator = jsonschema.Draft202012Validator(schema)
    validator.check_schema(schema)
    for rep in reports(scanned):
        doc = json.loads(gitlab.render(rep))
        assert [e.message for e in validator.iter_errors(doc)] == []
        assert len(doc) == len(rep.findings)
        fps = [issue["fingerprint"] for issue in doc]
        assert len(set(fps)) == len(fps)  # GitLab shows one issue per fingerprint


def test_gitlab_uses_the_baselines_line_free_fingerprint() -> None:
    doc = json.loads(gitlab.render(synthetic()))
    assert doc[0]["fingerprint"] == fingerprint(NASTY)  # what the baseline file records
    assert doc[1]["fingerprint"] == fingerprint(NASTY) + ":2"  # its twin further down
    moved = json.loads(gitlab.render(ScanReport(findings=(replace(NASTY, line=70, end_line=72),))))
    assert moved[0]["fingerprint"] == doc[0]["fingerprint"]
    # The default --fail-on error: the warning does not fail the build, so it is not a blocking severity.
    assert [(i["severity"], i["location"]["lines"]["begin"]) for i in doc] == [
        ("critical", 7), ("critical", 12), ("minor", 20), ("info", 30)]
    at_warning = json.loads(gitlab.render(synthetic(), fail_on="warning"))
    assert [i["severity"] for i in at_warning] == ["critical", "critical", "major", "info"]
    assert doc[0]["location"]["path"] == "src/pkg/a, b:c.py"


# --------------------------------------------------------------------------- junit


def test_junit_validates_against_the_junit_xsd(scanned: api.ScanRun) -> None:
    etree = pytest.importorskip("lxml.etree")
    schema = etree.XMLSchema(etree.parse(str(SCHEMAS / "junit.xsd")))
    for rep in reports(scanned):
        for fail_on in ("error", "warning", "info"):
            doc = etree.fromstring(junit.render(rep, fail_on).encode("utf-8"))
            assert schema.validate(doc), schema.error_log
            cases = doc.findall("testsuite/testcase")
            assert len(cases) == len(rep.findings)
            failing = [f.rule for f in rep.findings if fails([f], fail_on)]
            assert [c.find("failure").get("type") for c in cases if c.find("failure") is not None] == failing
            assert doc.find("testsuite").get("failures") == str(len(failing))
        # --fail-on info: every finding is a failure
        assert len(failing) == len(rep.findings)


def test_junit_keeps_the_text_exactly() -> None:
    etree = pytest.importorskip("lxml.etree")
    doc = etree.fromstring(junit.render(synthetic()).encode("utf-8"))
    failure = doc.find("testsuite/testcase/failure")
    # XML attributes normalise newlines; the element text keeps the message whole.
    assert NASTY.message.replace("\r\n", "\n").replace("\r", "\n") in failure.text
    assert doc.find("testsuite/system-err").text == str(DIAG)


# --------------------------------------------------------------------------- markdown

_BLOCK = re.compile(r"```mermaid\n(.*?)\n```", re.DOTALL)
_LABEL = re.compile(r'"([^"]*)"')


def test_markdown_table_and_one_chart_per_error(scanned: api.ScanRun) -> None:
    doc = markdown.render(scanned.report)
    rows = [line for line in doc.splitlines() if line.startswith("| CF")]
    assert len(rows) == len(scanned.report.findings)
    errors = [f for f in scanned.report.findings if f.severity == "error"]
    blocks = _BLOCK.findall(doc)
    assert len(blocks) == len(errors) == 3
    for f, block in zip(errors, blocks, strict=True):
        assert block.startswith("flowchart TD\n")
        # Hot-path labels are "Class.method<br>module"; tests/test_report_markdown.py checks the rest of the chart.
        labels = [label.replace("<wbr>", "").split("<br>")[0] for label in _LABEL.findall(block)]
        assert labels[1:1 + len(f.hot_path)] == [h.removeprefix(f"{f.module}.") for h in f.hot_path]
        assert labels[-1 - len(f.provenance):-1] == list(reversed(f.provenance))
        for i in range(1, len(f.hot_path)):
            assert f"h{i - 1} --> h{i}" in block
        assert f"h{len(f.hot_path) - 1} --> cast" in block


def test_markdown_escapes_table_cells_and_mermaid_labels() -> None:
    doc = markdown.render(synthetic())
    row = next(line for line in doc.splitlines() if line.startswith("| CF101"))
    cells = re.split(r"(?<!\\)\|", row)[1:-1]
    assert len(cells) == 7  # no '|' inside a cell splits it
    assert cells[5].strip() == "1.23 ms" and cells[6].strip() == "2.6 GiB (78 × 34.0 MiB)"
    block = _BLOCK.findall(doc)[0]
    labels = [label.replace("<wbr>", "") for label in _LABEL.findall(block)]
    # Every label is one quoted string whose special characters are Mermaid entities.
    for raw in (label.replace("<br>", " ") for label in labels):
        assert not set(raw) & set("<>`") and "#" not in raw.replace("#quot;", "").replace("#35;", "").replace(
            "#lt;", "").replace("#gt;", "").replace("#amp;", "").replace("#96;", "")
    assert labels[2] == "Attn[#quot;x#quot;].run<br>pkg"
    assert labels[3] == "Pool.get#lt;T#gt;<br>pkg"
    assert len(_BLOCK.findall(doc)) == 2  # NASTY and TWIN are errors; WARN and INFO get none


# --------------------------------------------------------------------------- statistics


def test_statistics_text_and_json(scanned: api.ScanRun) -> None:
    ctx = ReportContext(rules=scanned.rules, statistics=True)
    stats = scanned.report.statistics()
    assert [(r.rule, r.count) for r in stats.rules] == [("CF101", 2), ("CF103", 2), ("CF102", 1), ("CF104", 1)]
    assert [n for _, n in stats.files] == [5, 1]
    text = registry.get("text").render(scanned.report, ctx)
    assert "casts the whole" not in text  # the counts replace the findings
    assert re.search(r"^\s+2\s+CF101\s+error\s+whole-kv-cache-cast-on-hot-path$", text, re.M)
    assert re.search(r"^\s+5\s+\S*minisrv/backend\.py$", text, re.M)
    doc = json.loads(registry.get("json").render(scanned.report, ctx))
    assert doc["stats"]["statistics"] == stats.to_dict()
    assert len(doc["findings"]) == 6
    assert "statistics" not in json.loads(registry.get("json").render(scanned.report, ReportContext()))["stats"]


# --------------------------------------------------------------------------- the CLI


def test_several_outputs_in_one_run(tmp_path: Path) -> None:
    out = {name: tmp_path / f"out.{name}" for name in ("sarif", "json", "gitlab", "junit", "markdown", "github")}
    main = tmp_path / "main.txt"
    args = ["scan", str(FIX), "--no-cache", "-j", "1", "--format", "github", "--output", str(main)]
    for name, path in out.items():
        args += [f"--{name}-output", str(path)]
    r = runner.invoke(cli.app, args)
    assert r.exit_code == 1, r.output
    assert r.stdout == ""
    assert main.read_text() == out["github"].read_text()
    assert len(json.loads(out["json"].read_text())["findings"]) == 6
    assert len(json.loads(out["sarif"].read_text())["runs"][0]["results"]) == 6
    assert len(json.loads(out["gitlab"].read_text())) == 6
    assert out["junit"].read_text().count("<testcase ") == 6
    assert out["markdown"].read_text().count("```mermaid") == 3


@pytest.mark.parametrize(("args", "message"), [
    (["--json-output", "{d}/a", "--gitlab-output", "{d}/a"], "two outputs to one file"),
    (["--junit-output", "{d}"], "folder"),
    (["--markdown-output", "-"], "--markdown-output -: give a file path"),
])
def test_bad_outputs_fail_before_the_scan(tmp_path: Path, args: list[str], message: str,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    def no_scan(*a: object, **k: object) -> None:
        raise AssertionError("scanned")

    monkeypatch.setattr(api, "scan", no_scan)
    r = runner.invoke(cli.app, ["scan", str(FIX), "--no-cache", *[a.format(d=tmp_path) for a in args]])
    assert r.exit_code == 2, r.output
    assert message in r.stderr and r.stderr.count("\n") == 1


@pytest.mark.parametrize("args", [["--stops", "--json-output", "x.json"], ["--explain", "a.py:1", "--output", "x.md"]])
def test_accounts_of_the_scan_take_no_report_outputs(args: list[str]) -> None:
    r = runner.invoke(cli.app, ["scan", str(FIX), "--no-cache", *args])
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and "it prints its own account" in r.stderr, r.output
