"""Issue 35, the deployment's decode step: which step of the serving loop each entry point runs on is rule data
(``steps:``); a deployment scan gives each finding the steps it runs on, and the "per decode step" table counts
only the decode step's casts (fixtures/deploy_steps/stepkit, a miniature backend written for these tests)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from castfind import cli
from castfind.analysis.cost import step_table
from castfind.core.rules import RuleError, load_rules
from castfind.core.types import Condition, Cost, Finding
from tests.support import REPO

KIT = REPO / "fixtures" / "deploy_steps" / "stepkit"
runner = CliRunner()
SIZES = ["--set", "size=1000", "--set", "layer_num=4", "--set", "head_num=8", "--set", "head_dim=128",
         "--kv-cache-dtype", "fp8_e4m3", "--set", "activation_dtype=bfloat16"]
POOL = 4 * 1001 * 8 * 128 * (1 + 2)  # 4 layers of [size + 1, 8, 128], FP8 read, BF16 written
DECODE, EXTEND, MERGE, PREFILL = 14, 18, 22, 9  # the casts' lines (PREFILL in other.py)


def _scan(tmp: Path, *args: str, fmt: tuple[str, ...] = ("--json",)) -> str:
    r = runner.invoke(cli.app, ["scan", str(KIT), "--cache-dir", str(tmp / "cache"), *fmt, *args])
    assert r.exit_code == 1, r.output
    return r.stdout


def _by_line(doc: dict) -> dict[tuple[str, int], dict]:
    return {(f["path"], f["line"]): f for f in doc["findings"]}


def test_the_shipped_rules_give_decode_and_extend_their_entries() -> None:
    rules = load_rules()
    assert dict(rules.steps)["decode"] == ("*.forward_decode", "forward_decode")
    assert rules.off_step("Backend.forward_extend", "decode") and not rules.off_step("Backend.forward_extend", "extend")
    assert rules.off_step("Backend.forward_decode", "extend") and not rules.off_step("Backend.forward_decode", "decode")
    # An entry no step lists (a model's forward) runs on every step; so does a function that is no entry.
    assert not any(rules.off_step(q, s) for q in ("Model.forward", "Backend.merge") for s in ("decode", "extend"))


def test_each_cast_carries_the_steps_it_runs_on(tmp_path: Path) -> None:
    found = _by_line(json.loads(_scan(tmp_path, "--platform", "cuda", *SIZES)))
    assert found[("backend.py", DECODE)]["steps"] == ["decode"]
    assert found[("backend.py", EXTEND)]["steps"] == ["extend"]
    # The helper both methods reach runs on both, whichever path the shortest search found first.
    assert found[("backend.py", MERGE)]["steps"] == ["decode", "extend"]
    # A cast no entry point reaches has no steps to give.
    assert "steps" not in found[("other.py", PREFILL)]
    # The extend-only cast is still an error: it is a real cost, of the prefill step.
    assert found[("backend.py", EXTEND)]["severity"] == "error"


def test_the_decode_table_leaves_out_the_extend_only_cast(tmp_path: Path) -> None:
    step = json.loads(_scan(tmp_path, "--platform", "cuda", *SIZES))["stats"]["step"]
    assert [(r["path"], r["line"]) for r in step["rows"]] == [("backend.py", DECODE), ("backend.py", MERGE),
                                                              ("other.py", PREFILL)]
    assert step["total"] == 3 * POOL and step["step"] == "decode" and step["elsewhere"] == {"extend": 1}


@pytest.mark.parametrize("cache", ["--no-cache", "--cache-dir"])
def test_a_root_through_a_symlinked_folder_costs_the_same(tmp_path: Path, cache: str) -> None:
    # A root given through a link (``.corpus/pkg`` where ``.corpus`` links elsewhere) keeps its spelling in the
    # findings, while the index keys files by their resolved path: each finding's facts must still be found,
    # or every cost is silently missing and the table empty.
    (tmp_path / "link").symlink_to(KIT.parent, target_is_directory=True)
    where = ["--cache-dir", str(tmp_path / "cache")] if cache == "--cache-dir" else [cache]
    r = runner.invoke(cli.app, ["scan", str(tmp_path / "link" / KIT.name), *where, "--json", "--platform", "cuda",
                                *SIZES])
    assert r.exit_code == 1, r.output
    doc = json.loads(r.stdout)
    assert doc["stats"]["step"]["total"] == 3 * POOL
    assert all(f["cost"] is not None for f in doc["findings"] if f["path"] == "backend.py")


def test_text_and_markdown_say_what_was_left_out(tmp_path: Path) -> None:
    text = _scan(tmp_path, "--platform", "cuda", *SIZES, fmt=())
    assert "runs on: the decode and extend steps" in text and "runs on: the extend step" in text
    assert "per decode step (static cost of each reported cast):" in text
    assert "; 1 cast runs only on the extend step, not counted" in text
    md = _scan(tmp_path, "--platform", "cuda", *SIZES, fmt=("--format", "markdown"))
    assert "#### per decode step" in md and "1 cast runs only on the extend step, not counted" in md


def test_without_deployment_flags_no_finding_has_steps(tmp_path: Path) -> None:
    doc = json.loads(_scan(tmp_path))
    assert all("steps" not in f for f in doc["findings"]) and "step" not in doc["stats"]
    assert "runs on:" not in _scan(tmp_path, fmt=())


def test_another_engines_prefill_entry_by_a_users_rule_file(tmp_path: Path) -> None:
    extra = tmp_path / "rules"
    extra.mkdir()
    (extra / "engine.yaml").write_text('entry_points: ["*.run_prefill"]\nsteps:\n  extend: ["*.run_prefill"]\n')
    doc = json.loads(_scan(tmp_path, "--rules", str(extra), "--platform", "cuda", *SIZES))
    prefill = _by_line(doc)[("other.py", PREFILL)]
    assert (prefill["severity"], prefill["steps"]) == ("error", ["extend"])
    assert dict(load_rules([str(extra)]).steps)["extend"] == ("*.forward_extend", "forward_extend", "*.run_prefill")
    assert doc["stats"]["step"]["elsewhere"] == {"extend": 2}


@pytest.mark.parametrize("text", ["steps: [decode]\n", "steps:\n  decode: 3\n"])
def test_a_bad_steps_section_is_a_rule_error(tmp_path: Path, text: str) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "bad.yaml").write_text(text)
    with pytest.raises(RuleError, match="steps"):
        load_rules([str(bad)])


def _costed(line: int, steps: tuple[str, ...], value: float, conditions: tuple[Condition, ...] = ()) -> Finding:
    cost = Cost(shape=("n",), src_dtype="float8_e4m3fn", dst_dtype="bfloat16", bytes_per_call="n * 3",
                per_step="n * 3", value=value)
    return Finding("CF101", "whole-kv-cache-cast-on-hot-path", "error", "/r", "b.py", line, line, 1, "f", "x",
                   "m", cost=cost, steps=steps, conditions=conditions)


def test_step_table_counts_unasked_steps_and_groups_the_rest() -> None:
    table = step_table([_costed(1, (), 10.0), _costed(2, ("decode", "extend"), 20.0), _costed(3, ("extend",), 40.0),
                        _costed(4, ("extend",), 80.0)])
    assert [r.line for r in table.rows] == [2, 1] and table.total == 30.0
    assert table.elsewhere == (("extend", 2),)
    assert step_table([_costed(3, ("extend",), 40.0)], step="extend").total == 40.0


def test_a_row_under_a_test_the_deployment_leaves_open_is_counted_apart_after_the_others() -> None:
    """A cast that runs only when an open test holds (a server flag no binding gives) is no part of the step's
    total: its row comes last and names the test; a test the bindings make true (either side of it) is no
    condition; without a deployment's values every test is open."""
    cuda, flag = Condition("is_cuda()", False, "b.py", 1), Condition("self.use_fp32_head", False, "b.py", 2)
    not_hip = Condition("is_hip()", True, "b.py", 3)
    truth = {"is_cuda()": True, "is_hip()": False}.get
    findings = [_costed(1, (), 10.0, (cuda, not_hip)), _costed(2, (), 80.0, (cuda, flag)), _costed(3, (), 5.0)]
    table = step_table(findings, truth=truth)
    assert [(r.line, r.only_when) for r in table.rows] == [(1, ()), (3, ()), (2, ("self.use_fp32_head",))]
    assert (table.total, table.conditional) == (15.0, 80.0)
    assert [round(r.share, 3) for r in table.rows] == [round(10 / 15, 3), round(5 / 15, 3), round(80 / 95, 3)]
    unbound = step_table(findings)
    assert [(r.line, r.only_when) for r in unbound.rows] == [
        (3, ()), (2, ("is_cuda()", "self.use_fp32_head")), (1, ("is_cuda()", "not (is_hip())"))]
    assert (unbound.total, unbound.conditional) == (5.0, 90.0)
