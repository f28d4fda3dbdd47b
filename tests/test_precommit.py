"""The real pre-commit tool runs castfind's hook (`.pre-commit-hooks.yaml`) on a temporary fork."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO

pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("git") is None, reason="needs git")]

BAD = '''class Backend:
    def forward_decode(self, q, layer, forward_batch):
        k = self.token_to_kv_pool.get_key_buffer(layer.layer_id).to(q.dtype){suffix}
        return k
'''


def _pre_commit() -> list[str]:
    exe = Path(sys.executable).parent / "pre-commit"
    if not exe.exists():
        pytest.skip("pre-commit is not installed (it is in the test extra)")
    return [str(exe)]


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def fork(tmp_path_factory) -> tuple[Path, Path, dict]:
    """A git repo standing for an SGLang fork, and a committed snapshot of castfind to install as the hook."""
    base = tmp_path_factory.mktemp("precommit")
    hook_repo = base / "castfind-src"
    # pre-commit installs the hook from a git repo at a revision: snapshot this tree (committed or not).
    shutil.copytree(REPO, hook_repo, ignore=shutil.ignore_patterns(".git", ".venv*", ".corpus", "__pycache__",
                                                                   "*.egg-info", "build", ".pytest_cache",
                                                                   "node_modules"))
    _git(hook_repo, "init", "-q")
    _git(hook_repo, "add", "-A")
    _git(hook_repo, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "snapshot")
    repo = base / "fork"
    (repo / "serve").mkdir(parents=True)
    (repo / "serve" / "__init__.py").write_text("")
    _git(repo, "init", "-q")
    env = dict(os.environ, PRE_COMMIT_HOME=str(base / "pc-home"), XDG_CACHE_HOME=str(base / "xdg"))
    env.pop("PYTHONPATH", None)
    return repo, hook_repo, env


def _run(fork, source: str, extra: str = "") -> subprocess.CompletedProcess[str]:
    repo, hook_repo, env = fork
    (repo / "serve" / "backend.py").write_text(source)
    if extra:
        (repo / "pyproject.toml").write_text(extra)
    _git(repo, "add", "-A")
    return subprocess.run([*_pre_commit(), "try-repo", str(hook_repo), "castfind", "--all-files"], cwd=repo,
                          env=env, capture_output=True, text=True, timeout=900)


def test_hook_fails_on_a_new_whole_kv_cache_cast_and_passes_once_ignored(fork):
    r = _run(fork, BAD.format(suffix=""))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "serve/backend.py:3:" in r.stdout and "CF101" in r.stdout
    r = _run(fork, BAD.format(suffix="  # castfind: ignore"))
    assert r.returncode == 0, r.stdout + r.stderr


def test_hook_passes_on_a_clean_file_and_with_a_baseline(fork):
    repo, _, env = fork
    r = _run(fork, "def f(x, bs):\n    return x[:bs].to(x.dtype)\n")
    assert r.returncode == 0, r.stdout + r.stderr
    (repo / "serve" / "backend.py").write_text(BAD.format(suffix=""))
    base = repo / "castfind-baseline.json"
    subprocess.run([sys.executable, "-m", "castfind", "scan", str(repo), "--no-cache", "--write-baseline", str(base)],
                   cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True)
    data = json.loads(base.read_text())
    assert [e["rule"] for e in data["findings"]] == ["CF101"]
    r = _run(fork, BAD.format(suffix=""), extra='[tool.castfind]\nbaseline = "castfind-baseline.json"\n')
    assert r.returncode == 0, r.stdout + r.stderr


def test_hook_environment_has_no_torch(fork):
    repo, hook_repo, env = fork
    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=hook_repo, capture_output=True, text=True).stdout.strip()
    (repo / ".pre-commit-config.yaml").write_text(
        f"repos:\n  - repo: {hook_repo}\n    rev: {sha}\n    hooks:\n      - id: castfind\n")
    r = subprocess.run([*_pre_commit(), "install-hooks"], cwd=repo, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    pythons = list(Path(env["PRE_COMMIT_HOME"]).glob("repo*/py_env-*/bin/python"))
    assert pythons, "the hook environment was not created"
    for py in pythons:
        probe = "import importlib.util as u; print(u.find_spec('torch') is None, u.find_spec('castfind') is not None)"
        r = subprocess.run([str(py), "-c", probe],
                           capture_output=True, text=True)
        assert r.stdout.strip() == "True True"
