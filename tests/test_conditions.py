"""Path conditions: the branch tests between the entry point and a cast, as written in the code
(fixtures/conditions: a decode step that dispatches on a mode and a platform to two backends)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from castfind import api
from castfind.core.types import Condition
from castfind.read.codec import dumps, loads
from castfind.read.extract import extract_source
from castfind.report import ScanReport, markdown, sarif, text
from tests.support import REPO, run_castfind

FIX = REPO / "fixtures" / "conditions"
ENGINE = "condpkg/condpkg/engine.py"
BACKENDS = "condpkg/condpkg/backends.py"

MODE = {"test": 'self.mode == "paged"', "negated": False, "path": ENGINE, "line": 14}
#: Each finding's conditions, outermost first: the call sites on its hot path, then the cast's own ifs.
EXPECTED = {
    # Two hops up (forward_decode's `if`), the platform test at the dispatch, then an early return and
    # two nested ifs in the backend.
    20: [MODE,
         {"test": "is_accel()", "negated": False, "path": ENGINE, "line": 25},
         {"test": "layer.skip", "negated": True, "path": BACKENDS, "line": 15},
         {"test": "self.use_latent", "negated": False, "path": BACKENDS, "line": 17},
         {"test": "settings.FUSED_ROPE", "negated": False, "path": BACKENDS, "line": 19}],
    # The else arm of the platform test, then the last arm of an elif chain: neither test held.
    36: [MODE,
         {"test": "is_accel()", "negated": True, "path": ENGINE, "line": 25},
         {"test": "q.dim() == 2", "negated": True, "path": BACKENDS, "line": 30},
         {"test": "layer.layer_id == 0", "negated": True, "path": BACKENDS, "line": 32}],
    # Called on both arms of `if layer.first:`: that test decides nothing, only the mode does.
    40: [MODE],
    # A parameter's cast, hot through the caller that hands it the whole buffer: that call's if.
    54: [{"test": "settings.WIDE", "negated": False, "path": BACKENDS, "line": 48}],
}


@pytest.fixture(scope="module")
def scanned() -> api.ScanRun:
    return api.scan([str(FIX)], use_cache=False, jobs=1)


def test_every_finding_carries_its_exact_conditions(scanned: api.ScanRun) -> None:
    got = {f.line: [c.to_dict() for c in f.conditions] for f in scanned.report.findings}
    assert {f.path for f in scanned.report.findings} == {BACKENDS}
    assert got == EXPECTED
    hot = {f.line: f.hot_path for f in scanned.report.findings}
    assert hot[20] == ("condpkg.engine.Engine.forward_decode", "condpkg.engine.Engine._dispatch",
                       "condpkg.backends.AccelBackend.decode")
    assert hot[54] == ("condpkg.backends.WideBackend.forward_decode", "condpkg.backends.WideBackend._widen")
    assert hot[40] == ("condpkg.engine.Engine.forward_decode", "condpkg.backends.PortableBackend.decode_either")


def test_json_sarif_text_and_markdown_show_them(tmp_path: Path) -> None:
    r = run_castfind("scan", str(FIX), "--no-cache", "--json", "--sarif-output", str(tmp_path / "o.sarif"),
                     "--markdown-output", str(tmp_path / "o.md"))
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    assert {f["line"]: f["conditions"] for f in doc["findings"]} == EXPECTED
    results = json.loads((tmp_path / "o.sarif").read_text())["runs"][0]["results"]
    by_line = {res["locations"][0]["physicalLocation"]["region"]["startLine"]: res for res in results}
    assert {line: res["properties"]["conditions"] for line, res in by_line.items()} == EXPECTED
    md = (tmp_path / "o.md").read_text()
    # Files as every output names them: relative to the working directory (run_castfind's is the repository).
    shown = "fixtures/conditions/"
    assert (f'Only when: `self.mode == "paged" ({shown}{ENGINE}:14) and not (is_accel()) '
            f"({shown}{ENGINE}:25) and not (q.dim() == 2) ({shown}{BACKENDS}:30) and "
            f"not (layer.layer_id == 0) ({shown}{BACKENDS}:32)`") in md.splitlines()
    out = run_castfind("scan", str(FIX), "--no-cache").stdout.splitlines()
    at = out.index(next(line for line in out if line.startswith(f"{shown}{BACKENDS}:40:")))
    assert f'    only when: self.mode == "paged" ({shown}{ENGINE}:14)' in out[at:at + 4]


def test_a_finding_without_conditions_shows_none() -> None:
    f = api.scan([str(REPO / "fixtures" / "scan")], use_cache=False, jobs=1).report.findings
    first = next(x for x in f if x.line == 14)
    assert first.conditions == () and first.to_dict()["conditions"] == []
    lines = text.format_finding(first)
    assert not any("only when" in line for line in lines)
    md = markdown.render(ScanReport(findings=(first,)))
    assert "Only when" not in md
    assert "conditions" not in json.loads(sarif.render(ScanReport(findings=(first,)), {}))["runs"][0]["results"][0][
        "properties"]


SRC = b'''\
def step(self, x):
    # a comment and a blank line before the if

    if is_hip():
        a.run()
    elif self.use_mla:
        if envs.FAST:
            b.run()
    else:
        c.run()
    if not ready:
        return x
    return x.to(torch.float16)
'''


def test_calls_and_casts_record_their_ifs_with_lines() -> None:
    facts = extract_source(SRC, "m", "m.py", False)
    guards = {c.func: [(g.test, g.negated, g.line) for g in c.guards] for c in facts.calls}
    assert guards["a.run"] == [("is_hip()", False, 4)]
    assert guards["b.run"] == [("is_hip()", True, 4), ("self.use_mla", False, 6), ("envs.FAST", False, 7)]
    assert guards["c.run"] == [("is_hip()", True, 4), ("self.use_mla", True, 6)]
    assert guards["is_hip"] == []  # an if's own test is not under it
    (cast,) = facts.casts
    assert [(g.test, g.negated, g.line) for g in cast.guards] == [("not ready", True, 11)]
    # The cache keeps them: the records round-trip through the data-only codec.
    assert loads(dumps(facts)) == facts


def test_condition_text_and_round_trip() -> None:
    c = Condition("self.use_mla", True, "a.py", 3)
    assert c.text == "not (self.use_mla)" and Condition("x", False, "a.py", 1).text == "x"
    assert loads(dumps(c)) == c
    assert text.format_conditions((Condition("x", False, "a.py", 1), c)) == "x (a.py:1) and not (self.use_mla) (a.py:3)"
