"""Hot paths that rest on a by-name guess (issue 34, item 4; fixtures/guess): a cast whose only path to an entry
point goes through a call resolved by the method's name alone among several candidates is a warning that says
so; the same kind of cast also reached through a declared type, or by name with one candidate, stays an error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from castfind import api
from castfind.analysis.callgraph import CallGraph
from castfind.analysis.resolve import Resolver
from castfind.core.rules import load_rules
from castfind.read.codec import dumps, loads
from castfind.store.discover import discover
from castfind.store.index import Index
from tests.support import REPO, run_castfind

FIX = REPO / "fixtures" / "guess"
ENGINES = "guesspkg/engines.py"
GUESS = {"edge": "guesspkg.model.GuessedModel.forward -> guesspkg.engines.Mixer.run", "how": "by-name",
         "candidates": 3, "name": "run"}


@pytest.fixture(scope="module")
def scanned() -> api.ScanRun:
    return api.scan([str(FIX)], use_cache=False, jobs=1)


def test_only_a_guessed_path_makes_a_warning_and_a_typed_or_single_candidate_path_an_error(scanned) -> None:
    got = {(f.line, f.function): (f.rule, f.severity) for f in scanned.report.findings}
    assert got == {(16, "Mixer.run"): ("CF102", "warning"),
                   (27, "Blender.run"): ("CF102", "error"),
                   (45, "Solo.refine_step"): ("CF102", "error")}
    by_line = {f.line: f for f in scanned.report.findings}
    mixer = by_line[16]
    assert mixer.message.endswith("(hot path rests on a guess: 3 methods named run)")
    assert mixer.guess is not None and mixer.guess.to_dict() == GUESS
    assert mixer.hot_path == ("guesspkg.model.GuessedModel.forward", "guesspkg.engines.Mixer.run")
    # Blender.run is also reached by name from GuessedModel.forward; the typed path is the one it rests on.
    assert by_line[27].guess is None and "guess" not in by_line[27].message
    assert by_line[27].hot_path == ("guesspkg.model.TypedModel.forward", "guesspkg.engines.Blender.run")
    # One function named refine_step: a by-name call with a single candidate is no guess.
    assert by_line[45].guess is None
    assert by_line[45].hot_path == ("guesspkg.model.GuessedModel.forward", "guesspkg.engines.Solo.refine_step")
    assert loads(dumps(mixer)) == mixer  # the cache carries it


def test_edges_say_how_they_were_resolved() -> None:
    index = Index(discover([str(FIX)]), jobs=1)
    graph = CallGraph(index, Resolver(index), load_rules())
    guessed, typed = ("guesspkg.model", "GuessedModel.forward"), ("guesspkg.model", "TypedModel.forward")
    mixer, blender = ("guesspkg.engines", "Mixer.run"), ("guesspkg.engines", "Blender.run")
    assert graph.guessed(guessed, mixer) == 3 and graph.guessed(guessed, blender) == 3
    assert graph.guessed(typed, blender) == 0
    assert graph.guessed(guessed, ("guesspkg.engines", "Solo.refine_step")) == 0
    assert graph.judged(mixer)[1] is not None
    path, guess = graph.judged(blender)
    assert guess is None and path == (typed, blender)


def test_json_and_sarif_carry_the_guess(tmp_path: Path) -> None:
    r = run_castfind("scan", str(FIX), "--no-cache", "--json", "--sarif-output", str(tmp_path / "o.sarif"))
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    assert {f["line"]: f["guess"] for f in doc["findings"]} == {16: GUESS, 27: None, 45: None}
    assert {f["line"]: f["severity"] for f in doc["findings"]} == {16: "warning", 27: "error", 45: "error"}
    results = json.loads((tmp_path / "o.sarif").read_text())["runs"][0]["results"]
    props = {res["locations"][0]["physicalLocation"]["region"]["startLine"]: res["properties"] for res in results}
    assert props[16]["guess"] == GUESS
    assert "guess" not in props[27] and "guess" not in props[45]
    level = {res["locations"][0]["physicalLocation"]["region"]["startLine"]: res["level"] for res in results}
    assert level == {16: "warning", 27: "error", 45: "error"}
