"""Findings that rest on a by-name guess (issue 34, item 4; fixtures/guess): a cast whose only path to an entry
point, or whose only whole-buffer handoff, goes through a call resolved by the method's name alone among several
candidates is a warning that says so; the same kind of cast also reached or handed through a declared type, or
by name with one candidate, stays an error."""

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
GUESS = {"edge": "guesspkg.model.GuessedModel.forward -> guesspkg.engines.Mixer.run", "how": "by-name",
         "candidates": 3, "name": "run", "on": "hot-path"}
HANDED = {"edge": "guesspkg.handoff.HandoffModel.forward -> guesspkg.handoff.Upcast.convert", "how": "by-name",
          "candidates": 3, "name": "convert", "on": "handoff"}


@pytest.fixture(scope="module")
def scanned() -> api.ScanRun:
    return api.scan([str(FIX)], use_cache=False, jobs=1)


def test_only_a_guessed_path_makes_a_warning_and_a_typed_or_single_candidate_path_an_error(scanned) -> None:
    got = {(f.line, f.function): (f.rule, f.severity) for f in scanned.report.findings}
    assert got == {(16, "Mixer.run"): ("CF102", "warning"),
                   (27, "Blender.run"): ("CF102", "error"),
                   (45, "Solo.refine_step"): ("CF102", "error"),
                   (11, "Upcast.convert"): ("CF102", "warning"),
                   (18, "Widen.convert"): ("CF102", "error")}
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


def test_a_whole_buffer_handed_only_through_a_guess_is_a_warning_and_a_typed_handoff_an_error(scanned) -> None:
    by_line = {(f.path, f.line): f for f in scanned.report.findings}
    upcast, widen = by_line[("guesspkg/handoff.py", 11)], by_line[("guesspkg/handoff.py", 18)]
    # The entry point calls Upcast.convert itself: the hot path is sure; handing it the weight is the guess.
    assert upcast.hot_path == ("guesspkg.handoff.HandoffModel.forward", "guesspkg.handoff.Upcast.convert")
    assert upcast.guess is not None and upcast.guess.to_dict() == HANDED
    assert upcast.message.endswith("(whole-buffer handoff rests on a guess: 3 methods named convert)")
    # Widen.convert is handed a weight by name too, but the typed handoff from TypedHandoff.forward decides.
    assert widen.severity == "error" and widen.guess is None
    assert widen.hot_path == ("guesspkg.handoff.TypedHandoff.forward", "guesspkg.handoff.Widen.convert")


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
    engines = [f for f in doc["findings"] if f["path"].endswith("engines.py")]
    assert {f["line"]: f["guess"] for f in engines} == {16: GUESS, 27: None, 45: None}
    assert {f["line"]: f["severity"] for f in engines} == {16: "warning", 27: "error", 45: "error"}
    handed = {f["line"]: (f["severity"], f["guess"]) for f in doc["findings"] if f["path"].endswith("handoff.py")}
    assert handed == {11: ("warning", HANDED), 18: ("error", None)}
    results = json.loads((tmp_path / "o.sarif").read_text())["runs"][0]["results"]

    def at(res: dict) -> tuple[str, int]:
        loc = res["locations"][0]["physicalLocation"]
        return loc["artifactLocation"]["uri"].rsplit("/", 1)[-1], loc["region"]["startLine"]

    props = {at(res): res["properties"] for res in results}
    assert props[("engines.py", 16)]["guess"] == GUESS and props[("handoff.py", 11)]["guess"] == HANDED
    assert not any("guess" in props[k] for k in (("engines.py", 27), ("engines.py", 45), ("handoff.py", 18)))
    level = {at(res): res["level"] for res in results}
    assert level == {("engines.py", 16): "warning", ("engines.py", 27): "error", ("engines.py", 45): "error",
                     ("handoff.py", 11): "warning", ("handoff.py", 18): "error"}
