"""The composite GitHub Action (action.yml): its steps' commands, run locally as the runner runs them
(``bash --noprofile --norc -eo pipefail``, the step's ``env`` with its expressions filled in), in a
temporary repository whose last commit adds one hot whole-buffer cast."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support import REPO
from tests.test_baseline_commit import NEW, OLD, commit, git
from tests.test_ci_formats import parse_command

ACTION = yaml.safe_load((REPO / "action.yml").read_text(encoding="utf-8"))
_EXPR = re.compile(r"\$\{\{\s*([\w.-]+)\s*\}\}")


def _fill(text: str, context: dict[str, str]) -> str:
    """``${{ name }}`` expressions replaced from ``context`` (inputs filled first, so a default may hold one)."""
    return _EXPR.sub(lambda m: context[m.group(1)], text)


def run_step(name: str, workspace: Path, tmp: Path, inputs: dict[str, str],
             github: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The action's step ``name`` as the runner runs it, in ``workspace``."""
    context = dict(github)
    for key, spec in ACTION["inputs"].items():
        context[f"inputs.{key}"] = _fill(str(inputs.get(key, spec.get("default", ""))), github)
    step = next(s for s in ACTION["runs"]["steps"] if s["name"] == name)
    assert step["shell"] == "bash"
    assert "${{" not in step["run"], "expressions belong in env:, never spliced into the script"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the runner's python sees what it installed
    for var, file in (("GITHUB_OUTPUT", "output"), ("GITHUB_STEP_SUMMARY", "summary.md")):
        env[var] = str(tmp / file)
        (tmp / file).touch()
    env.update({k: _fill(str(v), context) for k, v in step.get("env", {}).items()})
    return subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]], cwd=workspace,
                          env=env, capture_output=True, text=True, timeout=600, check=False)


@pytest.fixture(scope="module")
def python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The runner's python after the action's install step: a fresh virtualenv that sees this one's packages
    (so nothing is downloaded), castfind installed into it from the action's folder."""
    tmp = tmp_path_factory.mktemp("runner")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    github = {"github.action_path": str(REPO), "github.event.pull_request.base.sha": ""}
    install = run_step("Install castfind", tmp, tmp, {"python": py}, github)
    assert install.returncode == 0, install.stderr
    shown = subprocess.run([py, "-c", "import castfind; print(castfind.__file__)"], capture_output=True, text=True,
                           check=True, cwd=tmp, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"}).stdout
    assert shown.startswith(str(venv)), shown  # the action's copy, not a checkout's
    return py


def two_commits(tmp_path: Path) -> tuple[Path, str]:
    repo = tmp_path / "serving"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    commit(repo, OLD, "one cast")
    base = git(repo, "rev-parse", "HEAD").strip()
    commit(repo, NEW, "a second cast")
    return repo, base


def test_the_scan_step_annotates_only_the_new_cast(python: str, tmp_path: Path) -> None:
    repo, base = two_commits(tmp_path)
    github = {"github.action_path": str(REPO), "github.event.pull_request.base.sha": base}
    scan = run_step("Scan", repo, tmp_path, {"python": python}, github)
    assert scan.returncode == 1, scan.stderr  # a new error fails the step
    commands = [parse_command(line) for line in scan.stdout.splitlines()]
    assert [(name, props["file"], props["line"], props["title"]) for name, props, _ in commands] == [
        ("error", "srv/backend.py", "4", "CF101")]
    sarif = json.loads((repo / "castfind.sarif").read_text())
    assert [r["locations"][0]["physicalLocation"]["region"]["startLine"] for r in sarif["runs"][0]["results"]] == [4]
    assert "```mermaid" in (tmp_path / "summary.md").read_text()
    assert (tmp_path / "output").read_text() == "sarif-file=castfind.sarif\n"
    assert git(repo, "status", "--porcelain") == "?? castfind.sarif\n"


def test_without_a_base_every_finding_is_reported(python: str, tmp_path: Path) -> None:
    repo, _ = two_commits(tmp_path)
    github = {"github.action_path": str(REPO), "github.event.pull_request.base.sha": ""}  # a push, not a PR
    scan = run_step("Scan", repo, tmp_path, {"python": python, "args": "--no-cache --exclude 'test/*'"}, github)
    assert scan.returncode == 1, scan.stderr
    assert [props["line"] for _, props, _ in map(parse_command, scan.stdout.splitlines())] == ["3", "4"]
