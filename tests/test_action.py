"""The composite GitHub Action (action.yml): its steps' commands, run locally as the runner runs them
(``bash --noprofile --norc -eo pipefail``, the step's ``env`` with its expressions filled in), in a
temporary repository whose last commit adds one hot whole-buffer cast; its install step's own virtualenv
and pinned versions (.github/castfind-constraints.txt), and its facts cache (actions/cache) step."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from importlib.metadata import distributions
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.support import REPO
from tests.test_baseline_commit import NEW, OLD, commit, git
from tests.test_ci_formats import parse_command

ACTION = yaml.safe_load((REPO / "action.yml").read_text(encoding="utf-8"))
CONSTRAINTS = REPO / ".github" / "castfind-constraints.txt"
_EXPR = re.compile(r"\$\{\{\s*([\w.\- |]+?)\s*\}\}")
_PIN = re.compile(r"^([A-Za-z0-9._-]+)==([^\s#;]+)\s*(?:#.*)?$")


def _fill(text: str, context: dict[str, str]) -> str:
    """``${{ name }}`` and ``${{ a || b }}`` expressions replaced from ``context`` (``||``: the first that is not
    empty, as the runner evaluates it; inputs filled first, so a default may hold one)."""
    def value(m: re.Match[str]) -> str:
        return next((context[name.strip()] for name in m.group(1).split("||") if context[name.strip()]), "")
    return _EXPR.sub(value, text)


def pins() -> dict[str, str]:
    """The constraints file's ``name==version`` lines, by canonical name; any other non-comment line fails."""
    found: dict[str, str] = {}
    for line in CONSTRAINTS.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            m = _PIN.match(line)
            assert m is not None, f"{CONSTRAINTS.name}: not an exact pin: {line}"
            found[canonicalize_name(m.group(1))] = m.group(2)
    return found


def runner_context(tmp: Path, base: str = "") -> dict[str, str]:
    """What the runner fills ``${{ github.* }}`` and ``${{ runner.* }}`` with, ``runner.temp`` created."""
    temp = tmp / "runner-temp"
    temp.mkdir(exist_ok=True)
    return {"github.action_path": str(REPO), "github.event.pull_request.base.sha": base, "github.sha": "f" * 40,
            "runner.temp": str(temp), "runner.os": "Linux"}


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
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """The action's install step run once: the python of the virtualenv it made, and the runner's temp folder.
    Its ``python`` input is this interpreter; pip reads the packages from wherever this machine's pip does."""
    tmp = tmp_path_factory.mktemp("runner")
    github = runner_context(tmp)
    install = run_step("Install castfind", tmp, tmp, {"python": sys.executable}, github)
    assert install.returncode == 0, install.stderr
    venv = Path(github["runner.temp"]) / "castfind-venv"
    assert (tmp / "output").read_text() == f"python={venv / 'bin' / 'python'}\n"
    return str(venv / "bin" / "python"), Path(github["runner.temp"])


@pytest.fixture(scope="module")
def python(installed: tuple[str, Path]) -> str:
    return installed[0]


def test_the_install_step_makes_its_own_virtualenv_with_the_pinned_versions(installed: tuple[str, Path]) -> None:
    py, temp = installed
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    shown = subprocess.run([py, "-c", "import castfind, sys; print(castfind.__file__); print(sys.prefix)"],
                           capture_output=True, text=True, check=True, cwd=temp, env=env).stdout.splitlines()
    assert shown[0].startswith(str(temp / "castfind-venv")), shown  # the action's copy, not a checkout's
    assert shown[1] == str(temp / "castfind-venv")
    frozen = subprocess.run([py, "-m", "pip", "list", "--format", "json"], capture_output=True, text=True,
                            check=True, env=env).stdout
    versions = {canonicalize_name(d["name"]): d["version"] for d in json.loads(frozen)}
    pinned = pins()
    runtime = [canonicalize_name(n) for n in _runtime_dependencies()]
    assert [(n, versions.get(n)) for n in runtime] == [(n, pinned[n]) for n in runtime]
    # Whatever else it installed that the file pins is at its pin too (pip, castfind itself are not pinned; the
    # setuptools pin is for the isolated build, the venv's own is the one ``venv`` seeds on Python 3.11).
    got = {n: v for n, v in versions.items() if n in pinned and n != "setuptools"}
    assert got == {n: pinned[n] for n in got}
    assert len(got) >= len(runtime) + 5  # their dependencies came too (rich, pydantic, ...), each at its pin


def _runtime_dependencies() -> list[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return [Requirement(r).name for r in project["dependencies"]]


def test_the_constraints_pin_every_runtime_dependency_within_pyprojects_ranges() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    pinned = pins()
    wanted = [Requirement(r) for r in [*pyproject["project"]["dependencies"], *pyproject["build-system"]["requires"]]]
    assert [r.name for r in wanted if canonicalize_name(r.name) not in pinned] == []
    assert [str(r) for r in wanted if not r.specifier.contains(pinned[canonicalize_name(r.name)])] == []
    # The pins are what the main suite ran with (``make install``: Python 3.11, the Action's Python): a pinned
    # package installed there is at its pin. ``make test-versions`` resolves 3.12/3.13 afresh, without the
    # constraints (a newer networkx needs 3.12), so there this comparison says nothing about the pins.
    if sys.version_info[:2] != (3, 11):
        return
    here = {canonicalize_name(d.metadata["Name"]): d.version for d in distributions()}
    assert {n: here[n] for n in pinned if n in here and n != "setuptools"} == {
        n: v for n, v in pinned.items() if n in here and n != "setuptools"}


def test_the_cache_step_keeps_the_facts_cache_the_scan_writes_keyed_by_the_base_commit(tmp_path: Path) -> None:
    steps = ACTION["runs"]["steps"]
    cache = next(s for s in steps if s.get("uses", "").startswith("actions/cache@"))
    names = [s["name"] for s in steps]
    assert names.index("Install castfind") < names.index(cache["name"]) < names.index("Scan")
    assert cache["if"] == "inputs.cache == 'true'" and ACTION["inputs"]["cache"]["default"] == "true"
    scan = next(s for s in steps if s["name"] == "Scan")
    assert cache["with"]["path"] == scan["env"]["XDG_CACHE_HOME"]  # the folder the scan's cache lives in
    base = "b" * 40
    for given, key in ((base, f"castfind-facts-Linux-{base}"), ("", f"castfind-facts-Linux-{'f' * 40}")):
        context = runner_context(tmp_path, given)
        context["inputs.baseline-commit"] = given  # a push has no base: the commit scanned keys it
        assert _fill(cache["with"]["key"], context) == key
        restore = [line for line in _fill(cache["with"]["restore-keys"], context).splitlines() if line]
        assert restore == ["castfind-facts-Linux-"] and key.startswith(restore[0])


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
    github = {**runner_context(tmp_path, base), "steps.install.outputs.python": python}
    scan = run_step("Scan", repo, tmp_path, {}, github)
    assert scan.returncode == 1, scan.stderr  # a new error fails the step
    commands = [parse_command(line) for line in scan.stdout.splitlines()]
    assert [(name, props["file"], props["line"], props["title"]) for name, props, _ in commands] == [
        ("error", "srv/backend.py", "4", "CF101")]
    sarif = json.loads((repo / "castfind.sarif").read_text())
    assert [r["locations"][0]["physicalLocation"]["region"]["startLine"] for r in sarif["runs"][0]["results"]] == [4]
    assert "```mermaid" in (tmp_path / "summary.md").read_text()
    assert (tmp_path / "output").read_text() == "sarif-file=castfind.sarif\n"
    assert git(repo, "status", "--porcelain") == "?? castfind.sarif\n"
    # The facts cache is written where the cache step saves from and restores to.
    assert any((Path(github["runner.temp"]) / "castfind-cache" / "castfind").iterdir())


def test_without_a_base_every_finding_is_reported(python: str, tmp_path: Path) -> None:
    repo, _ = two_commits(tmp_path)
    github = {**runner_context(tmp_path), "steps.install.outputs.python": python}  # a push, not a PR
    scan = run_step("Scan", repo, tmp_path, {"args": "--no-cache --exclude 'test/*'"}, github)
    assert scan.returncode == 1, scan.stderr
    assert [props["line"] for _, props, _ in map(parse_command, scan.stdout.splitlines())] == ["3", "4"]


def test_the_readme_workflow_uses_the_action_as_it_is() -> None:
    """README's workflow parses, passes only inputs action.yml has, runs on pushes too (they fill the facts cache
    pull requests start from), and README's list of inputs names every input."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```yaml\n(# \.github/workflows/castfind\.yml\n.*?)```", readme, re.DOTALL)
    assert block is not None
    workflow = yaml.safe_load(block.group(1))
    assert set(workflow[True]) == {"pull_request", "push"}  # YAML 1.1 reads the key `on` as True
    step = next(s for s in workflow["jobs"]["castfind"]["steps"] if s.get("uses") == "./tools/castfind")
    assert set(step["with"]) <= set(ACTION["inputs"])
    listed = readme[readme.index("Inputs: `paths`"):]
    listed = listed[:listed.index("\n\n")]
    assert [name for name in ACTION["inputs"] if f"`{name}`" not in listed] == []
